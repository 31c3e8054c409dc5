"""A rank that never joins, and a rank that dies: errors, not hangs (plait only).

Each rank program writes what it saw to f"{out_prefix}.{rank}" as text:
"error <seconds> <message>" or "ok".
"""
import datetime
import os
import time

import torch
import torch.distributed as dist


def _report(out_prefix, rank, text):
    with open(f"{out_prefix}.{rank}", "w") as f:
        f.write(text)


def timeout(rank, world, init, out_prefix):
    import plait_torch  # noqa: F401
    dist.init_process_group("plait", init_method=init, rank=rank, world_size=world)
    group = dist.new_group(list(range(world)), timeout=datetime.timedelta(seconds=2))
    dist.barrier(group=group)
    if rank == 0:
        t = torch.ones(1024)
        start = time.monotonic()
        try:
            dist.all_reduce(t, group=group)  # rank 1 never calls it
            _report(out_prefix, rank, "ok")
        except Exception as e:  # DistBackendError
            _report(out_prefix, rank, f"error {time.monotonic() - start:.2f} {type(e).__name__}: {e}")
    else:
        time.sleep(5)
        _report(out_prefix, rank, "ok")
    os._exit(0)  # rank 0's group was aborted: skip the orderly teardown


def killed(rank, world, init, out_prefix):
    import plait_torch  # noqa: F401
    dist.init_process_group("plait", init_method=init, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    dist.barrier()
    if rank == 1:
        os._exit(0)  # dies without a word
    time.sleep(0.2)
    start = time.monotonic()
    try:
        for _ in range(100):
            dist.all_reduce(t)
        _report(out_prefix, rank, "ok")
    except Exception as e:
        _report(out_prefix, rank, f"error {time.monotonic() - start:.2f} {type(e).__name__}: {e}")
    os._exit(0)
