#!/usr/bin/env python3
"""DDP step time with bucket all-reduces overlapping backward versus the same
run with every all-reduce after backward (--no-overlap).

Both variants run alternately (ABAB...) under plait-run, `--repeats` times
each, so drift on this shared machine hits both alike; reported are medians
over repeats of each run's median step time (plait-train's `step-ms` line:
total, compute = forward+backward (incl. overlapped launches), comm-wait = the
wait for outstanding all-reduces after backward).

usage: ddp_overlap.py [--build build] [--ranks 2] [--repeats 5] [plait-train args...]
"""
import argparse
import os
import re
import statistics
import subprocess


def run(args, extra, overlap):
    cmd = [os.path.join(args.build, "bin", "plait-run"), "-n", str(args.ranks), "--timeout", "600",
           os.path.join(args.build, "bin", "plait-train"), "--parallel", "ddp"] + extra
    if not overlap:
        cmd.append("--no-overlap")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"step-ms median (\S+) compute (\S+) comm-wait (\S+)", out)
    return tuple(float(x) for x in m.groups())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    args, extra = p.parse_known_args()
    if not extra:
        extra = ["--model", "mlp", "--inputs", "256", "--hidden", "512", "--depth", "4", "--batch", "8",
                 "--steps", "12", "--bucket-kb", "256", "--first-bucket-kb", "64"]
    results = {True: [], False: []}
    for _ in range(args.repeats):
        for overlap in (True, False):
            results[overlap].append(run(args, extra, overlap))
    print(f"plait-train --parallel ddp {' '.join(extra)}; {args.ranks} ranks, {args.repeats} repeats (medians, ms)")
    print(f"{'variant':<22}{'step':>10}{'compute':>10}{'comm-wait':>11}")
    med = {}
    for overlap, name in ((False, "after backward"), (True, "overlapped")):
        med[overlap] = [statistics.median(r[i] for r in results[overlap]) for i in range(3)]
        print(f"{name:<22}{med[overlap][0]:>10.2f}{med[overlap][1]:>10.2f}{med[overlap][2]:>11.2f}")
    hidden = med[False][0] - med[True][0]
    print(f"step time saved by overlap: {hidden:.2f} ms ({100 * hidden / med[False][0]:.1f}%); "
          f"exposed communication {med[False][2]:.2f} -> {med[True][2]:.2f} ms")


if __name__ == "__main__":
    main()
