#!/usr/bin/env python3
"""plait-train end to end (ranks as processes under plait-run).

Runs the serial reference and each given strategy on 2 processes with the same
seed and global batch, and checks the output contract (exactly one
`step K loss L` line per step on stdout, from one rank; then tokens/s and one
memory line per rank) and that the losses match serial within 1e-5 relative
(reduction order only; see tests/training/test_ddp.cc).

A strategy may name its rank count and precision, STRATEGY[:RANKS][@PRECISION]
(e.g. dp-pp:4, ddp@bf16); a mixed-precision run is compared with the serial
run in the same precision within 2e-2 (test_mixed_precision.cc explains it)
and must print its loss-scale line.

usage: cli_check.py PLAIT_RUN PLAIT_TRAIN STRATEGY...
"""
import re
import subprocess
import sys

STEPS = 4


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {out.returncode}\n{out.stderr}")
    return out.stdout


def parse(stdout, ranks, what):
    lines = stdout.splitlines()
    steps = [l for l in lines if l.startswith("step ")]
    if len(steps) != STEPS:
        sys.exit(f"FAIL {what}: {len(steps)} step lines, expected {STEPS}:\n{stdout}")
    losses = []
    for k, line in enumerate(steps, 1):
        m = re.fullmatch(r"step (\d+) loss (\S+)", line)
        if not m or int(m.group(1)) != k:
            sys.exit(f"FAIL {what}: bad step line {line!r}")
        losses.append(float(m.group(2)))
    if not any(re.fullmatch(r"tokens/s [0-9.]+", l) for l in lines):
        sys.exit(f"FAIL {what}: no tokens/s line")
    memory = [l for l in lines if l.startswith("memory rank ")]
    if len(memory) != ranks:
        sys.exit(f"FAIL {what}: {len(memory)} memory lines, expected {ranks}")
    return losses


def main():
    plait_run, plait_train, strategies = sys.argv[1], sys.argv[2], sys.argv[3:]
    common = ["--model", "transformer", "--steps", str(STEPS), "--batch", "8", "--seed", "5"]
    serial = {}
    for spec in strategies:
        m = re.fullmatch(r"([\w-]+)(?::(\d+))?(?:@(\w+))?", spec)
        strategy, ranks, precision = m.group(1), int(m.group(2) or 2), m.group(3) or "fp32"
        args = common + ["--precision", precision]
        if precision not in serial:
            serial[precision] = parse(run([plait_train, "--parallel", "none"] + args), 1, "serial " + precision)
        out = run([plait_run, "-n", str(ranks), "--timeout", "60", plait_train, "--parallel", strategy] + args)
        losses = parse(out, ranks, spec)
        if precision != "fp32" and not re.search(r"^loss-scale \S+ skipped \d+$", out, re.M):
            sys.exit(f"FAIL {spec}: no loss-scale line")
        worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(losses, serial[precision]))
        if worst > (1e-5 if precision == "fp32" else 2e-2):
            sys.exit(f"FAIL {spec}: losses {losses} vs serial {serial[precision]} (rel {worst:.2e})")
        print(f"ok {spec}: max rel diff {worst:.2e} vs serial")


main()
