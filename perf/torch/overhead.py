"""Per-call cost of a tiny all_reduce through torch.distributed, and torch's own share of it.

    PY=$(scripts/setup_torch.sh | tail -1); $PY perf/torch/overhead.py [--ranks 2] [--calls 20000]

Times dist.all_reduce of 2 floats (synchronous, and async_op=True + wait())
on "fake" (torch's do-nothing backend: the floor of torch's Python wrapper,
dispatcher and Work), "gloo" and "plait", one after the other in one window.
World size 1 isolates the software path (no peer to wait for); --ranks N
adds the real exchange (the fake backend is skipped there).
"""
import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, n, backend, init, calls, out):
    if backend == "plait":
        import plait_torch  # noqa: F401
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=n)
    else:
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=n)
    t = torch.ones(2)
    for _ in range(200):
        dist.all_reduce(t)
    dist.barrier() if backend != "fake" else None
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t)
    sync = (time.perf_counter() - start) / calls * 1e6
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(t, async_op=True).wait()
    asyn = (time.perf_counter() - start) / calls * 1e6
    if rank == 0:
        with open(out, "w") as f:
            f.write(f"{sync} {asyn}")
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    print("| backend | ranks | sync all_reduce (us/call) | async_op=True + wait (us/call) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, args.ranks):
            for backend in ("fake", "gloo", "plait"):
                if backend == "fake" and n > 1:
                    continue
                out = os.path.join(tmp, f"{backend}{n}")
                mp.start_processes(worker, args=(n, backend, f"file://{out}.init", args.calls, out), nprocs=n,
                                   join=True, start_method="spawn")
                sync, asyn = open(out).read().split()
                print(f"| {backend} | {n} | {float(sync):.1f} | {float(asyn):.1f} |", flush=True)


if __name__ == "__main__":
    main()
