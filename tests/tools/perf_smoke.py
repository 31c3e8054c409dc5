#!/usr/bin/env python3
"""Smoke test of one *_perf tool: run it (under plait-run, mpirun or alone),
then fail unless it exited 0, printed at least one row, every #wrong is 0 and
the footer says "Out of bounds values : 0 OK".

Exit status: 0 pass, 1 fail, 77 skip (CTest SKIP_RETURN_CODE) with the reason
on the last line when the launcher is missing. Every collective is
implemented, so a tool that fails for any reason fails the test.

usage: perf_smoke.py [--launcher none|plait-run|mpirun] [--launcher-path P]
                     [--nranks N] [--timeout S] -- TOOL [ARGS...]
"""

import argparse
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "perf"))
import nccl_table  # noqa: E402

SKIP = 77


def launch_prefix(args):
    if args.launcher == "none":
        return []
    path = args.launcher_path or shutil.which(args.launcher)
    if not path or not os.path.exists(path):
        print(f"SKIP: launcher {args.launcher} not found ({args.launcher_path or 'not on PATH'})")
        sys.exit(SKIP)
    if args.launcher == "plait-run":
        return [path, "-n", str(args.nranks), "--"]
    return [path, "--oversubscribe", "--allow-run-as-root", "-np", str(args.nranks)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--launcher", default="plait-run", choices=["none", "plait-run", "mpirun"])
    parser.add_argument("--launcher-path", default="")
    parser.add_argument("--nranks", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=240)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"]
    if not command or not os.path.exists(command[0]):
        print(f"FAIL: tool not found: {command[:1]}")
        return 1
    full = launch_prefix(args) + command
    print("+ " + " ".join(full), flush=True)
    try:
        proc = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        print(e.stdout or "")
        print(f"FAIL: no result within {args.timeout} s")
        return 1
    print(proc.stdout, flush=True)
    result = nccl_table.parse(proc.stdout)
    problems = []
    if proc.returncode != 0:
        problems.append(f"exit status {proc.returncode}")
    if not result.rows:
        problems.append("no table rows")
    wrong = result.total_wrong()
    if wrong:
        problems.append(f"{wrong} wrong elements")
    if result.out_of_bounds != (0, "OK"):
        problems.append(f"footer says {result.out_of_bounds}")
    if problems:
        print("FAIL: " + "; ".join(problems))
        return 1
    print(f"PASS: {len(result.rows)} rows, #wrong 0, avg busbw {result.avg_busbw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
