#!/usr/bin/env python3
"""plait-sim's command line: the nccl-tests table, JSON, a training step,
pictures, and the exit status of bad input.

Usage: cli_test.py PLAIT_SIM TOPOLOGY_DATA_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sim, data = sys.argv[1], sys.argv[2]
failures = []


def run(*args):
    return subprocess.run([sim, *args], capture_output=True, text=True, timeout=120)


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# The table: one row per size, busbw rising to the NVSwitch's figure.
r = run("--topo-file", os.path.join(data, "dgx_a100.xml"), "-b", "1K", "-e", "1G", "-f", "4")
check(r.returncode == 0, f"sweep exit {r.returncode}: {r.stderr}")
rows = [l.split() for l in r.stdout.splitlines() if l.strip() and l.strip()[0].isdigit()]
check(len(rows) == 11, f"11 rows (1 KiB .. 1 GiB by 4), got {len(rows)}")
busbw = [float(row[7]) for row in rows]
check(all(b2 >= b1 for b1, b2 in zip(busbw, busbw[1:])), f"busbw rises with size: {busbw}")
check(abs(busbw[-1] - 231.5) / 231.5 < 0.10, f"1 GiB busbw {busbw[-1]} within 10% of 231.5")
check("busiest links" in r.stdout, "the busiest links follow the table")

# JSON for programs.
r = run("--topo-file", os.path.join(data, "hgx_h100.xml"), "--nodes", "4", "-b", "1M", "-e", "1M", "--json")
check(r.returncode == 0, f"json exit {r.returncode}: {r.stderr}")
doc = json.loads(r.stdout)
check(doc["nranks"] == 32 and len(doc["rows"]) == 1, "json: 32 ranks, one row")
check(doc["rows"][0]["algorithm"] in ("ring", "tree"), "json: an algorithm")

# NVLS on one NVSwitch host; --algo ring keeps it out.
r = run("--topo-file", os.path.join(data, "hgx_h100.xml"), "-b", "8G", "-e", "8G")
check(r.returncode == 0 and "# nvls Simple" in r.stdout, f"8 x H100 8 GiB picks NVLS: {r.stdout} {r.stderr}")
r = run("--topo-file", os.path.join(data, "hgx_h100.xml"), "-b", "8G", "-e", "8G", "--algo", "ring")
check(r.returncode == 0 and "# ring Simple" in r.stdout, f"--algo ring: {r.stdout} {r.stderr}")

# A training step, with its picture; and a sweep's picture.
with tempfile.TemporaryDirectory() as tmp:
    heat = os.path.join(tmp, "step.svg")
    r = run("--topo-file", os.path.join(data, "hgx_h100.xml"), "--nodes", "8", "--train", "--tp", "8", "--pp", "2",
            "--blocks", "4", "--d-model", "1024", "--seq", "512", "--json", "--svg", heat)
    check(r.returncode == 0, f"train exit {r.returncode}: {r.stderr}")
    step = json.loads(r.stdout)
    check([p["phase"] for p in step["training_step"]] == ["TP", "PP", "DP"], "train: TP, PP, DP phases")
    check(step["comm_us"] > 0, "train: communication time")
    check(ET.parse(heat).getroot().tag.endswith("svg"), "train: the heat map is SVG")
    plot = os.path.join(tmp, "sweep.svg")
    r = run("--topo-file", os.path.join(data, "dgx_a100.xml"), "-b", "1K", "-e", "1M", "--svg", plot,
            "--reference", "1M=50")
    check(r.returncode == 0 and ET.parse(plot).getroot().tag.endswith("svg"), "sweep: the plot is SVG")

# Bad input: a flag is 2, a model error is 1, each with a message naming it.
r = run("--bogus")
check(r.returncode == 2, f"unknown flag: exit {r.returncode}")
r = run("--topo-file", os.path.join(data, "no_such.xml"))
check(r.returncode == 1 and "no_such.xml" in r.stderr, f"missing file: exit {r.returncode}, {r.stderr!r}")
r = run("--topo-file", os.path.join(data, "dgx_a100.xml"), "--op", "gather")
check(r.returncode == 1 and "--op gather" in r.stderr, f"unknown op: {r.stderr!r}")
r = run("--topo-file", os.path.join(data, "hgx_h100.xml"), "--nodes", "2", "--op", "alltoall", "-b", "1M", "-e", "1M")
check(r.returncode == 0 and "pairs PXN" in r.stdout, f"alltoall: {r.returncode} {r.stdout!r}")
r = run("--topo-file", os.path.join(data, "dgx_a100.xml"), "--nodes", "2", "--train", "--tp", "3")
check(r.returncode == 1 and "tp 3" in r.stderr, f"layout that does not fit: {r.stderr!r}")
r = run("--topo-file", os.path.join(data, "hgx_h100.xml"), "--gpus", "9")
check(r.returncode == 1 and "--gpus 9" in r.stderr, f"more GPUs than a host has: {r.stderr!r}")
r = run("--topo-file", os.path.join(data, "hgx_h100.xml"), "--gpus", "5", "-b", "4G", "-e", "4G")
check(r.returncode == 0 and "5 GPUs" in r.stdout and "# nvls" in r.stdout, f"--gpus 5: {r.stdout!r}")
r = run("--topo-file", os.path.join(data, "dgx_a100.xml"), "-e", "12Q")
check(r.returncode == 1 and "12Q" in r.stderr, f"bad size: {r.stderr!r}")

print("ok" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)
