#!/usr/bin/env python3
"""plait-calibrate and PLAIT_HOST_COSTS end to end (issue 13, item 2).

  test_calibrate.py PLAIT_RUN PLAIT_CALIBRATE ALL_REDUCE_PERF PLAIT_SIM

- plait-calibrate under plait-run (2 ranks) writes a file with the five costs,
  each a positive number, after a table with every measured point;
- without a launcher (one rank) it refuses with exit 2;
- a job with PLAIT_HOST_COSTS plans with the file's costs: a file that makes
  the one-shot AllReduce slow gives ring at 1 KiB, one that makes it fast
  gives one-shot (the TUNING log says which), and the results are right;
- a bad file fails init on every rank with the variable, the file and the line;
- plait-sim --host-ranks reads the same file (and refuses a bad one).
"""
import os
import re
import subprocess
import sys
import tempfile

RUN, CALIBRATE, PERF, SIM = sys.argv[1:5]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd, env=None, timeout=180):
    full = dict(os.environ)
    full.pop("PLAIT_HOST_COSTS", None)
    full.update(env or {})
    p = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return p.returncode, p.stdout


def perf_job(costs_file):
    env = {"PLAIT_HOST_COSTS": costs_file, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING"}
    return run([RUN, "-n", "2", "--", PERF, "-b", "1K", "-e", "1K", "-c", "1", "-n", "2", "-w", "1"], env)


def wrong_values(out):
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+1024\s", line)]
    return [int(r[i]) for r in rows if len(r) > 12 for i in (8, 12) if r[i].isdigit()]


with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "costs.txt")
    rc, out = run([RUN, "-n", "2", "--", CALIBRATE, "--quick", "--point-ms", "2", "-o", path])
    check(rc == 0, "plait-calibrate under plait-run exits 0 (%d)\n%s" % (rc, out if rc else ""))
    for kind in ("ring AllReduce", "one-shot AllReduce", "ring AllGather"):
        check(kind in out, "the table has %s points" % kind)
    values = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.split("#")[0].split()
            if len(line) == 2:
                values[line[0]] = float(line[1])
    check(sorted(values) == ["call_us", "hop_us", "one_shot_bytes_per_us", "one_shot_us", "ring_bytes_per_us"],
          "the file has the five costs: %s" % sorted(values))
    check(all(v >= 0 for v in values.values()) and values.get("hop_us", 0) > 0,
          "the costs are non-negative, the hop positive: %s" % values)

    rc, out = run([CALIBRATE, "--quick"])
    check(rc == 2 and "2 ranks or more" in out, "one rank is refused with exit 2 (%d: %s)" % (rc, out.strip()))

    slow = os.path.join(d, "slow_oneshot.txt")
    fast = os.path.join(d, "fast_oneshot.txt")
    open(slow, "w").write("one_shot_bytes_per_us 1\n")
    open(fast, "w").write("# one-shot free, ring crawling\none_shot_bytes_per_us 1e9\nring_bytes_per_us 1\n")
    for name, f, algo in (("slow one-shot", slow, "ring"), ("fast one-shot", fast, "oneshot")):
        rc, out = perf_job(f)
        check(rc == 0, "%s: the job exits 0 (%d)\n%s" % (name, rc, out if rc else ""))
        check("host costs from " + f in out, "%s: init says it read %s" % (name, f))
        plans = re.findall(r"AllReduce 1024 bytes \(float\): algo (\w+)", out)
        check(plans != [] and all(p == algo for p in plans), "%s: 1 KiB plans %s, want %s" % (name, plans, algo))
        check(wrong_values(out) == [0, 0], "%s: no wrong values (%s)" % (name, wrong_values(out)))

    bad = os.path.join(d, "bad.txt")
    open(bad, "w").write("hop_us 0.3\ncall_us zero\n")
    rc, out = perf_job(bad)
    check(rc != 0, "a bad file fails the job (%d)" % rc)
    check("PLAIT_HOST_COSTS" in out and bad + " line 2" in out and "not a finite number" in out,
          "the error names the variable, the file and the line:\n" + out[-600:])

    rc, out = run([SIM, "--host-ranks", "2", "--cores", "2", "-b", "1K", "-e", "1K", "--host-costs", fast])
    check(rc == 0 and "host costs: " + fast in out and "oneshot" in out,
          "plait-sim --host-costs plans with the file (%d)\n%s" % (rc, out))
    rc, out = run([SIM, "--host-ranks", "2", "--cores", "2", "-b", "1K", "-e", "1K", "--host-costs", bad])
    check(rc == 1 and bad + " line 2" in out, "plait-sim refuses a bad file naming its line (%d)\n%s" % (rc, out))

if failures:
    print("%d check(s) failed" % len(failures))
    sys.exit(1)
print("all checks passed")
