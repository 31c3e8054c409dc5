#!/usr/bin/env python3
"""How much of DDP's gradient all-reduce does overlapping it with backward hide?

Four variants of the same plait-train --parallel ddp run, under plait-run:
  comm-only    --ddp-isolate comm: no forward/backward, only the bucket
               all-reduces; its launch + wait time (the step's compute and
               comm-wait fields, without the optimizer update) is `comm`
  compute-only --ddp-isolate compute: forward/backward/update, no all-reduce
  sequential   --no-overlap: every bucket all-reduced after backward
  overlapped   the default: buckets all-reduced on a stream during backward

Each run reports its median step time over --steps (first step dropped); the
variants run interleaved (A B C D A B C D ...) `--repeats` times so drift on a
shared machine hits all alike, and the table shows medians over repeats with
the spread (min-max). Derived:
  hidden fraction = (sequential − overlapped) / comm
  contention      = sequential − (compute-only + comm): > 0 when the
                    two isolated parts slow each other down when run together
A hidden fraction near 1 means the all-reduces ran entirely under backward; 0
means overlap bought nothing; < 0 that it cost time. Because the variants of
one repeat run back to back, the hidden fraction is also computed per repeat
(paired: (sequential_i − overlapped_i) / comm_i) and reported as median and
quartiles, and from the minima over repeats (the least-disturbed runs). When
these disagree, or the quartiles straddle 0, the machine's noise is larger
than the effect and no overlap figure should be quoted.

usage: ddp_overlap.py [--build build] [--ranks 2] [--repeats 11] [plait-train args...]
"""
import argparse
import os
import re
import statistics
import subprocess

VARIANTS = {
    "comm-only": ["--ddp-isolate", "comm"],
    "compute-only": ["--ddp-isolate", "compute"],
    "sequential": ["--no-overlap"],
    "overlapped": [],
}


def run(args, extra, flags):
    cmd = [os.path.join(args.build, "bin", "plait-run"), "-n", str(args.ranks), "--timeout", "600",
           os.path.join(args.build, "bin", "plait-train"), "--parallel", "ddp"] + extra + flags
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"step-ms median (\S+) compute (\S+) comm-wait (\S+)", out)
    return tuple(float(x) for x in m.groups())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=11)
    args, extra = p.parse_known_args()
    if not extra:
        extra = ["--model", "mlp", "--inputs", "512", "--hidden", "1024", "--depth", "3", "--batch", "2",
                 "--steps", "20", "--bucket-kb", "4096", "--first-bucket-kb", "1024", "--optimizer", "sgd"]
    results = {name: [] for name in VARIANTS}
    for _ in range(args.repeats):
        for name, flags in VARIANTS.items():
            results[name].append(run(args, extra, flags))
    print(f"plait-train --parallel ddp {' '.join(extra)}")
    print(f"{args.ranks} ranks, {args.repeats} interleaved repeats; step ms, median (min-max) over repeats")
    med = {}
    for name in VARIANTS:
        steps = [r[0] for r in results[name]]
        med[name] = statistics.median(steps)
        fb = statistics.median(r[1] for r in results[name])
        wait = statistics.median(r[2] for r in results[name])
        print(f"  {name:<13}{med[name]:8.2f}  ({min(steps):5.2f}-{max(steps):5.2f})   "
              f"forward+backward {fb:6.2f}   wait after backward {wait:5.2f}")
    comms = [r[1] + r[2] for r in results["comm-only"]]
    comm = statistics.median(comms)
    print(f"  comm (all-reduces alone, no update) {comm:.2f}  ({min(comms):.2f}-{max(comms):.2f})")
    saved = med["sequential"] - med["overlapped"]
    print(f"hidden fraction = (sequential - overlapped) / comm = {saved:.2f} / {comm:.2f} = {saved / comm:.2f}")
    extra_time = med["sequential"] - med["compute-only"] - comm
    print(f"contention = sequential - (compute-only + comm) = {extra_time:.2f} ms")
    paired = sorted((s[0] - o[0]) / c for s, o, c in zip(results["sequential"], results["overlapped"], comms))
    q = statistics.quantiles(paired, n=4) if len(paired) > 1 else [paired[0]] * 3
    print(f"hidden fraction per repeat (paired): median {q[1]:.2f}, quartiles {q[0]:.2f} .. {q[2]:.2f}")
    mins = {name: min(r[0] for r in results[name]) for name in VARIANTS}
    comm_min = min(comms)
    print(f"hidden fraction from minima: ({mins['sequential']:.2f} - {mins['overlapped']:.2f}) / {comm_min:.2f} = "
          f"{(mins['sequential'] - mins['overlapped']) / comm_min:.2f}")


if __name__ == "__main__":
    main()
