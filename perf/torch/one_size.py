"""One size of one collective through torch.distributed on plait, many calls in one process.

    PY=$(scripts/setup_torch.sh | tail -1)
    $PY perf/torch/one_size.py [--ranks 2] [--bytes 32M] [--calls 100] [--zeros] [--coll all_reduce]

Each rank runs --calls synchronous calls on the same float32 tensors (in place
for all_reduce; --coll takes bench_torch.py's collective names) and prints its
time per call: the torch path without the multi-size benchmark's allocations
between sizes (perf/torch/bench_torch.py). Compare with `plait-run -n 2
--bind-to none all_reduce_perf --host_alloc malloc -b S -e S -n CALLS -c 0` in
the same minute (its in-place column; the out-of-place one for the others).
"""
import argparse
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bench_torch import COLLS, one_call, parse_bytes


def worker(rank, n, init, nbytes, calls, zeros, coll):
    import plait_torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("plait", init_method=init, rank=rank, world_size=n)
    if coll == "all_reduce":
        t = (torch.zeros if zeros else torch.ones)(nbytes // 4)
        call = lambda: dist.all_reduce(t)  # noqa: E731
    else:
        call, _ = one_call(coll, n, nbytes)
    for _ in range(5):
        call()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    print(f"rank {rank}: {calls} {coll} calls of {nbytes} bytes, "
          f"{(time.perf_counter() - start) / calls * 1e6:.1f} us per call", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--bytes", default="32M")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--zeros", action="store_true", help="all_reduce zeros instead of ones")
    parser.add_argument("--coll", default="all_reduce", choices=COLLS)
    args = parser.parse_args()
    nbytes = parse_bytes(args.bytes)
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(worker, args=(args.ranks, f"file://{tmp}/init", nbytes, args.calls, args.zeros, args.coll),
                           nprocs=args.ranks, join=True, start_method="spawn")


if __name__ == "__main__":
    main()
