#!/usr/bin/env python3
"""plait-train --parallel downpour | sandblaster under plait-run (processes).

Checks the output contract (tools/train/parameter_server.cc) and the
references, as tests/training/test_parameter_server.cc does in-process:
  - Downpour with one replica fetching and pushing every step prints the same
    losses as the serial trainer with Adagrad, digit for digit;
  - Sandblaster's iterations match the serial L-BFGS (--parallel lbfgs) within
    1e-4 relative (float summation order only), with the same evaluations;
  - Downpour with 2 servers and 3 replicas: every push applied exactly once,
    every rank ends with its `rank N ROLE I done` line.

usage: ps_cli_check.py PLAIT_RUN PLAIT_TRAIN
"""
import re
import subprocess
import sys

COMMON = ["--model", "mlp", "--seed", "3"]


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out.stdout


def grab(stdout, pattern, what):
    found = [m.groups() for m in map(re.compile(pattern).fullmatch, stdout.splitlines()) if m]
    if not found:
        sys.exit(f"FAIL {what}: no line matches {pattern!r}:\n{stdout}")
    return found


def done_lines(stdout, ranks, what):
    done = grab(stdout, r"rank (\d+) (server|replica|coordinator) (\d+) done", what)
    if sorted(int(r) for r, _, _ in done) != list(range(ranks)):
        sys.exit(f"FAIL {what}: done lines {done}, expected one per rank of {ranks}")


def main():
    plait_run, plait_train = sys.argv[1], sys.argv[2]
    launch = [plait_run, "-n"]

    # Downpour, one replica, n_fetch = n_push = 1: serial Adagrad exactly.
    args = COMMON + ["--steps", "5", "--batch", "8", "--optimizer", "adagrad", "--lr", "0.05"]
    serial = grab(run([plait_train, "--parallel", "none"] + args), r"step (\d+) loss (\S+)", "serial")
    out = run(launch + ["2", "--timeout", "60", plait_train, "--parallel", "downpour", "--servers", "1"] + args)
    downpour = grab(out, r"replica 0 step (\d+) loss (\S+) samples \d+ seconds \S+", "downpour")
    if downpour != serial:
        sys.exit(f"FAIL downpour with one replica: losses {downpour}, serial Adagrad {serial}")
    done_lines(out, 2, "downpour 1+1")
    print(f"ok: downpour (1 server, 1 replica) = serial adagrad over {len(serial)} steps")

    # Sandblaster against the serial L-BFGS.
    args = COMMON + ["--steps", "5", "--batch", "64"]
    serial = grab(run([plait_train, "--parallel", "lbfgs"] + args),
                  r"iteration (\d+) loss (\S+) evaluations (\d+) samples \d+ seconds \S+", "lbfgs")
    out = run(launch + ["4", "--timeout", "60", plait_train, "--parallel", "sandblaster", "--servers", "1"] + args)
    sandblaster = grab(out, r"iteration (\d+) loss (\S+) evaluations (\d+) samples \d+ seconds \S+", "sandblaster")
    if len(sandblaster) != len(serial):
        sys.exit(f"FAIL sandblaster: {len(sandblaster)} iterations, serial {len(serial)}")
    for (k, loss, evals), (_, ref, ref_evals) in zip(sandblaster, serial):
        if evals != ref_evals or abs(float(loss) - float(ref)) > 1e-4 * max(1.0, abs(float(ref))):
            sys.exit(f"FAIL sandblaster iteration {k}: loss {loss} ({evals} evaluations), serial {ref} ({ref_evals})")
    portions = grab(out, r"portions replica (\d+) (\d+)", "sandblaster")
    if sum(int(n) for _, n in portions) != 16 * int(sandblaster[-1][2]):
        sys.exit(f"FAIL sandblaster: portions {portions} for {sandblaster[-1][2]} evaluations of 16")
    done_lines(out, 4, "sandblaster")
    print(f"ok: sandblaster (1 server, 2 replicas) = serial L-BFGS within 1e-4 over {len(serial)} iterations")

    # Downpour, 2 servers, 3 replicas: exactly-once pushes.
    args = COMMON + ["--steps", "7", "--batch", "12", "--n-fetch", "2", "--n-push", "3"]
    out = run(launch + ["5", "--timeout", "60", plait_train, "--parallel", "downpour", "--servers", "2"] + args)
    pushes = grab(out, r"pushes replica (\d+) applied (\d+) sent (\d+)", "downpour 2+3")
    # Pushes after steps 3, 6 and the last (7): 3 per replica, to each of 2 servers.
    if len(pushes) != 3 or any(a != "6" or s != "6" for _, a, s in pushes):
        sys.exit(f"FAIL downpour 2+3: pushes {pushes}, expected 6 applied and sent per replica")
    grab(out, r"staleness mean \S+ p50 \d+ p99 \d+", "downpour 2+3")
    grab(out, r"final-loss \S+", "downpour 2+3")
    done_lines(out, 5, "downpour 2+3")
    print("ok: downpour (2 servers, 3 replicas): every push applied once")


if __name__ == "__main__":
    main()
