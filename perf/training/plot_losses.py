#!/usr/bin/env python3
"""Loss curves of every training strategy, overlaid in one PNG.

Runs plait-train once per strategy (same model, seed and global batch) under
plait-run with --ranks processes (the serial reference on one), parses its
`step K loss L` lines, and plots them. Strategies that are not built yet
(plait-train exits with "not implemented yet") are listed and skipped.

usage: plot_losses.py [--build build] [--model transformer] [--ranks 2]
                      [--steps 40] [--out perf/training/losses.png] [strategy ...]
"""
import argparse
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ALL = ["none", "ddp", "zero1", "zero2", "zero3", "tp", "pp-gpipe", "pp-1f1b", "ep", "dp-tp"]


def losses_of(args, strategy):
    train = os.path.join(args.build, "bin", "plait-train")
    cmd = [train, "--model", args.model, "--parallel", strategy, "--steps", str(args.steps),
           "--batch", str(args.batch), "--seed", str(args.seed)]
    if strategy != "none":
        cmd = [os.path.join(args.build, "bin", "plait-run"), "-n", str(args.ranks), "--timeout", "300"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"skip {strategy}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
        return None
    return [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)$", out.stdout, re.M)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--model", default="transformer")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="perf/training/losses.png")
    p.add_argument("strategies", nargs="*", default=ALL)
    args = p.parse_args()
    plt.figure(figsize=(8, 5))
    serial = None
    for i, strategy in enumerate(args.strategies):
        losses = losses_of(args, strategy)
        if losses is None:
            continue
        if strategy == "none":
            serial = losses
        elif serial:
            worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(losses, serial))
            print(f"{strategy}: max relative difference from serial {worst:.2e}")
        # Curves coincide by design; a small dash offset keeps each visible.
        plt.plot(range(1, len(losses) + 1), losses, label=strategy, linewidth=2.5 - 0.2 * i,
                 linestyle=["-", "--", "-.", ":"][i % 4])
    plt.xlabel("step")
    plt.ylabel("loss")
    plt.title(f"plait-train --model {args.model}: {args.ranks} ranks, global batch {args.batch}, seed {args.seed}")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.savefig(args.out, dpi=120, bbox_inches="tight")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
