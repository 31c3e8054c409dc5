"""Collectives through torch.distributed: plait against gloo, interleaved.

    PY=$(scripts/setup_torch.sh | tail -1)
    $PY perf/torch/bench_torch.py --ranks 2 --repeats 3 [--max-bytes 256M] [--out perf/results/torch]
        [--native build/bin] [--bind]

For each repeat, each backend in turn (the order rotating from repeat to repeat) runs
all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
all_to_all_single on float32 from 8 B to --max-bytes (x4 steps), timing
--iters calls after --warmup (time per call: the slowest rank's mean, as
nccl-tests), then a DDP training step of a small MLP. Prints nccl-tests'
algbw/busbw per size and backend, the medians over the repeats, and the
plait/gloo ratio; writes the same table to --out/<ranks>ranks.md.

--native BIN adds, in every repeat among the torch runs, Plait's own
*_perf programs (BIN/all_reduce_perf, ...) under BIN/plait-run with the same
sizes and call counts, on heap buffers as torch's (--host_alloc malloc) and
timed as here (-a 3: the slowest rank): the cost of the torch path over the C
API, measured in the same window. The torch ranks are spawned unbound (as torch.multiprocessing
and torchrun leave them), so the native ranks run with --bind-to none; --bind
pins both instead (torch rank r on CPU r mod ncpus, plait-run's default).
Torch's all_reduce is in place, so it is compared with the in-place column;
the others with the out-of-place one.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import nccl_table  # noqa: E402  (perf/nccl_table.py)

COLLS = ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"]
# Plait's own program for each torch call, and whether torch's call is in place
NATIVE = {"all_reduce": ("all_reduce_perf", True), "all_gather_into_tensor": ("all_gather_perf", False),
          "reduce_scatter_tensor": ("reduce_scatter_perf", False), "all_to_all_single": ("alltoall_perf", False)}
BIG = 1 << 20  # above this many bytes a size runs --iters / 10 calls


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


def worker(rank, n, backend, init, sizes, iters, warmup, out, bind=False):
    if bind:
        os.sched_setaffinity(0, {rank % os.cpu_count()})
    if backend == "plait":
        import plait_torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=n)
    rows = []
    for coll in COLLS:
        for nbytes in sizes:
            call, counted = one_call(coll, n, nbytes)
            reps = iters if nbytes <= BIG else max(iters // 10, 3)
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


def native_rows(bindir, n, sizes, iters, warmup, bind):
    """{(collective, bytes): seconds per call} from Plait's *_perf programs, same sizes and call counts."""
    small = [s for s in sizes if s <= BIG]
    big = [s for s in sizes if s > BIG]
    times = {}
    for coll, (prog, in_place) in NATIVE.items():
        for group, reps in ((small, iters), (big, max(iters // 10, 3))):
            if not group:
                continue
            cmd = [os.path.join(bindir, "plait-run"), "-n", str(n), "--bind-to", "core" if bind else "none",
                   os.path.join(bindir, prog), "-b", str(group[0]), "-e", str(group[-1]), "-f", "4",
                   "-n", str(reps), "-w", str(warmup), "-c", "0", "-a", "3", "--host_alloc", "malloc"]
            text = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            for row in nccl_table.parse(text).rows:
                m = row.ip if in_place else row.oop
                if m is not None:
                    times[(coll, row.size)] = m.time_us * 1e-6
    return times


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
    parser.add_argument("--native", default=None, metavar="BIN",
                        help="also run Plait's *_perf programs from BIN under BIN/plait-run in every repeat")
    parser.add_argument("--bind", action="store_true", help="pin every rank to a CPU (torch and native alike)")
    args = parser.parse_args()
    sizes, s = [], parse_bytes(args.min_bytes)
    while s <= parse_bytes(args.max_bytes):
        sizes.append(s)
        s *= 4
    runs = {"gloo": [], "plait": []}
    native = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            # The order rotates every repeat, so that no program always runs
            # right after the same other one.
            order = ["gloo", "plait"] + (["native"] if args.native else [])
            order = order[rep % len(order):] + order[:rep % len(order)]
            for backend in order:
                if backend == "native":
                    native.append(native_rows(args.native, args.ranks, sizes, args.iters, args.warmup, args.bind))
                else:
                    out = os.path.join(tmp, f"{backend}{rep}")
                    mp.start_processes(worker, args=(args.ranks, backend, f"file://{out}.init", sizes, args.iters,
                                                     args.warmup, out, args.bind),
                                       nprocs=args.ranks, join=True, start_method="spawn")
                    runs[backend].append(torch.load(out))
                print(f"repeat {rep}: {backend} done", file=sys.stderr, flush=True)
    n = args.ranks
    head = "| collective | bytes | gloo time (us) | plait time (us) | gloo busbw (GB/s) | plait busbw (GB/s) | plait/gloo |"
    if native:
        head += " native time (us) | native busbw (GB/s) | torch/native busbw |"
    lines = [f"# torch.distributed: plait vs gloo, {n} ranks, float32, medians of {args.repeats} interleaved repeats",
             "", f"`{' '.join(sys.argv)}`, torch {torch.__version__}", "", head,
             "|---" * (head.count("|") - 1) + "|"]
    for i, (coll, counted, _) in enumerate(runs["plait"][0]["rows"]):
        t = {b: statistics.median(r["rows"][i][2] for r in runs[b]) for b in runs}
        bw = {b: counted / t[b] / 1e9 * bus_factor(coll, n) for b in runs}
        line = (f"| {coll} | {counted} | {t['gloo'] * 1e6:.1f} | {t['plait'] * 1e6:.1f} | {bw['gloo']:.3f} | "
                f"{bw['plait']:.3f} | {t['gloo'] / t['plait']:.2f} |")
        got = [r[(coll, counted)] for r in native if (coll, counted) in r]
        if native and got:
            tn = statistics.median(got)
            line += f" {tn * 1e6:.1f} | {counted / tn / 1e9 * bus_factor(coll, n):.3f} | {tn / t['plait']:.2f} |"
        elif native:
            line += " - | - | - |"
        lines.append(line)
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
