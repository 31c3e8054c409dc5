#!/usr/bin/env python3
"""Loss curves of every training strategy, overlaid in one PNG.

Runs plait-train once per strategy (same model, seed and global batch) under
plait-run with --ranks processes (the serial reference on one), parses its
`step K loss L` lines, and plots them. A strategy may name its rank count and
precision, STRATEGY[:RANKS][@PRECISION] (dp-pp:4, ddp@bf16); mixed-precision
runs are compared with the serial run in the same precision. Strategies that
fail (e.g. ep without --model moe) are listed and skipped.

One panel per model: transformer (every strategy that splits it), moe (expert
parallelism; the serial run routes its rows as --ranks groups, as the
data-parallel runs route each rank's rows) and mlp with --batchnorm (SyncBN
across the data-parallel ranks).

usage: plot_losses.py [--build build] [--ranks 2] [--steps 40]
                      [--out perf/training/losses.png]
"""
import argparse
import os
import re
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = {
    "transformer": (["--model", "transformer"],
                    ["none", "ddp", "zero1", "zero2", "zero3", "tp", "pp-gpipe", "pp-1f1b", "dp-tp", "dp-pp:4",
                     "none@bf16", "ddp@bf16", "none@fp16", "ddp@fp16"]),
    "moe": (["--model", "moe", "--experts", "4"], ["none", "ddp", "zero3", "ep", "none@bf16", "ddp@bf16"]),
    "mlp --batchnorm": (["--model", "mlp", "--batchnorm"], ["none", "ddp", "zero2", "pp-1f1b", "dp-pp:4",
                                                          "none@fp16", "ddp@fp16"]),
}


def parse_spec(spec, default_ranks):
    m = re.fullmatch(r"([\w-]+)(?::(\d+))?(?:@(\w+))?", spec)
    return m.group(1), int(m.group(2) or default_ranks), m.group(3) or "fp32"


def losses_of(args, model_args, spec):
    strategy, ranks, precision = parse_spec(spec, args.ranks)
    train = os.path.join(args.build, "bin", "plait-train")
    cmd = [train, "--parallel", strategy, "--steps", str(args.steps), "--batch", str(args.batch),
           "--seed", str(args.seed), "--precision", precision] + model_args
    if strategy == "none" and "moe" in model_args:
        cmd += ["--moe-groups", str(args.ranks), "--data-ranks", str(args.ranks)]
    if strategy != "none":
        cmd = [os.path.join(args.build, "bin", "plait-run"), "-n", str(ranks), "--timeout", "300"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(f"skip {spec}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
        return None
    return [float(m.group(1)) for m in re.finditer(r"^step \d+ loss (\S+)$", out.stdout, re.M)]


def plot_panel(ax, args, name, model_args, specs):
    serial = {}
    for i, spec in enumerate(specs):
        losses = losses_of(args, model_args, spec)
        if losses is None:
            continue
        strategy, ranks, precision = parse_spec(spec, args.ranks)
        if strategy == "none":
            serial[precision] = losses
        elif precision in serial:
            worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(losses, serial[precision]))
            print(f"{name}: {spec}: max relative difference from serial {precision} {worst:.2e}")
        label = strategy if strategy != "none" else "serial"
        label += f" ({ranks} ranks)" if ranks != args.ranks and strategy != "none" else ""
        label += f" {precision}" if precision != "fp32" else ""
        # Curves coincide by design; line styles keep each visible.
        ax.plot(range(1, len(losses) + 1), losses, label=label, linewidth=max(0.8, 2.5 - 0.12 * i),
                linestyle=["-", "--", "-.", ":"][i % 4])
    ax.set_title(name)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="perf/training/losses.png")
    args = p.parse_args()
    fig, axes = plt.subplots(1, len(PANELS), figsize=(6 * len(PANELS), 4.5))
    for ax, (name, (model_args, specs)) in zip(axes, PANELS.items()):
        plot_panel(ax, args, name, model_args, specs)
    fig.suptitle(f"plait-train: {args.ranks} ranks unless noted, global batch {args.batch}, seed {args.seed}")
    fig.savefig(args.out, dpi=110, bbox_inches="tight")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
