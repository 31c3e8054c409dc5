"""Collectives through torch.distributed: plait against gloo, interleaved.

    PY=$(scripts/setup_torch.sh | tail -1)
    $PY perf/torch/bench_torch.py --ranks 2 --repeats 3 [--max-bytes 256M] [--out perf/results/torch]

For each repeat, each backend in turn (gloo, plait, gloo, plait, ...) runs
all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
all_to_all_single on float32 from 8 B to --max-bytes (x4 steps), timing
--iters calls after --warmup (time per call: the slowest rank's mean, as
nccl-tests), then a DDP training step of a small MLP. Prints nccl-tests'
algbw/busbw per size and backend, the medians over the repeats, and the
plait/gloo ratio; writes the same table to --out/<ranks>ranks.md.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

COLLS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"]


def bus_factor(coll, n):
    # nccl-tests' busbw: AllReduce 2(n-1)/n, AllGather/ReduceScatter/AlltoAll (n-1)/n
    return 2 * (n - 1) / n if coll == "all_reduce" else (n - 1) / n


def one_call(coll, n, nbytes):
    """(callable, bytes nccl-tests counts) for one size: the per-rank buffer is nbytes."""
    count = max(nbytes // 4, 1)
    if coll == "all_reduce":
        t = torch.ones(count)
        return (lambda: dist.all_reduce(t)), count * 4
    if coll == "all_gather_into_tensor":
        count = max(count // n, 1)
        inp, out = torch.ones(count), torch.empty(count * n)
        return (lambda: dist.all_gather_into_tensor(out, inp)), count * n * 4
    if coll == "reduce_scatter_tensor":
        count = max(count // n, 1)
        inp, out = torch.ones(count * n), torch.empty(count)
        return (lambda: dist.reduce_scatter_tensor(out, inp)), count * n * 4
    count = max(count // n, 1) * n
    inp, out = torch.ones(count), torch.empty(count)
    return (lambda: dist.all_to_all_single(out, inp)), count * 4


def ddp_step_ms(rank, iters):
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 1024), torch.randint(0, 10, (64,))
    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    for _ in range(3):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        step()
    return (time.perf_counter() - start) / iters * 1e3


def worker(rank, n, backend, init, sizes, iters, warmup, out):
    if backend == "plait":
        import plait_torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=n)
    rows = []
    for coll in COLLS:
        for nbytes in sizes:
            call, counted = one_call(coll, n, nbytes)
            reps = iters if nbytes <= (1 << 20) else max(iters // 10, 3)
            for _ in range(warmup):
                call()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(reps):
                call()
            elapsed = torch.tensor([(time.perf_counter() - start) / reps])
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank, as nccl-tests
            rows.append((coll, counted, elapsed.item()))
    ddp = torch.tensor([ddp_step_ms(rank, 10)])
    dist.all_reduce(ddp, op=dist.ReduceOp.MAX)
    if rank == 0:
        torch.save({"rows": rows, "ddp_ms": ddp.item()}, out)
    dist.destroy_process_group()


def parse_bytes(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-bytes", default="8")
    parser.add_argument("--max-bytes", default="256M")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    sizes, s = [], parse_bytes(args.min_bytes)
    while s <= parse_bytes(args.max_bytes):
        sizes.append(s)
        s *= 4
    runs = {"gloo": [], "plait": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for backend in ("gloo", "plait"):
                out = os.path.join(tmp, f"{backend}{rep}")
                mp.start_processes(worker, args=(args.ranks, backend, f"file://{out}.init", sizes, args.iters,
                                                 args.warmup, out), nprocs=args.ranks, join=True, start_method="spawn")
                runs[backend].append(torch.load(out))
                print(f"repeat {rep}: {backend} done", file=sys.stderr, flush=True)
    n = args.ranks
    lines = [f"# torch.distributed: plait vs gloo, {n} ranks, float32, medians of {args.repeats} interleaved repeats",
             "", f"`{' '.join(sys.argv)}`, torch {torch.__version__}", "",
             "| collective | bytes | gloo time (us) | plait time (us) | gloo busbw (GB/s) | plait busbw (GB/s) | plait/gloo |",
             "|---|---|---|---|---|---|---|"]
    for i, (coll, counted, _) in enumerate(runs["plait"][0]["rows"]):
        t = {b: statistics.median(r["rows"][i][2] for r in runs[b]) for b in runs}
        bw = {b: counted / t[b] / 1e9 * bus_factor(coll, n) for b in runs}
        lines.append(f"| {coll} | {counted} | {t['gloo'] * 1e6:.1f} | {t['plait'] * 1e6:.1f} | {bw['gloo']:.3f} | "
                     f"{bw['plait']:.3f} | {t['gloo'] / t['plait']:.2f} |")
    ddp = {b: statistics.median(r["ddp_ms"] for r in runs[b]) for b in runs}
    lines += ["", f"DDP step (MLP 1024-1024-1024-10, batch 64, 2.1 M parameters): gloo {ddp['gloo']:.2f} ms, "
              f"plait {ddp['plait']:.2f} ms (medians)"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"{n}ranks.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
