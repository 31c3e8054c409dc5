#!/usr/bin/python3
"""Downpour SGD, Sandblaster L-BFGS and synchronous DDP on the same model and data.

Every configuration is a plait-train job under plait-run (ranks are processes),
run to three lengths (a quarter, half and all of --steps; L-BFGS: of
--iterations) so each gives three points of loss against samples and against
wall time. The loss is `final-loss`: the job's final parameters evaluated on
the same 256 samples (seed + 1) whatever the strategy. Wall time is the whole
job's (launch, initialisation and teardown included, ~0.1-0.3 s here), taken
the same way for every strategy. Configurations run interleaved, --repeats
times; the table shows medians (loss, time) and the spread of time.

  ddp R           R ranks, global batch B (B/R each), Adagrad (the same
                  optimizer as Downpour's servers), synchronous
  downpour S+R    S servers, R replicas (B/R samples per replica step, so one
                  step of every replica sees B samples, as one DDP step does)
  +slow           replica 0 sleeps --slow-ms per step (its "machine" is slow)
  sandblaster S+R batch L-BFGS on a full batch of --full-batch samples, 8R
                  portions per evaluation; samples = evaluations x full batch
  lbfgs           the serial L-BFGS reference (one process)

The machine's core count bounds everything: 2 cores here, so 5 or 6
processes are oversubscribed and wall times measure that as much as the
algorithms (see the README's caveat).

usage: parameter_server.py [--build build-host] [--repeats 3] [--steps 160]
                           [--iterations 16] [--out perf/training/parameter_server.md]
                           [--plot perf/training/parameter_server.png]
"""
import argparse
import os
import re
import statistics
import subprocess
import time

MODEL = ["--model", "mlp", "--hidden", "128", "--depth", "3", "--seed", "4", "--lr", "0.05"]


def configs(a):
    slow = ["--slow-replica", "0", "--slow-ms", str(a.slow_ms)]
    sgd = ["--batch", str(a.batch), "--optimizer", "adagrad"]
    full = ["--batch", str(a.full_batch)]
    return [
        # name, ranks, extra arguments, steps (of the longest run)
        ("ddp 2", 2, ["--parallel", "ddp", "--final-loss"] + sgd, a.steps),
        ("ddp 4", 4, ["--parallel", "ddp", "--final-loss"] + sgd, a.steps),
        ("downpour 1+1", 2, ["--parallel", "downpour", "--servers", "1"] + sgd, a.steps),
        ("downpour 1+2", 3, ["--parallel", "downpour", "--servers", "1"] + sgd, a.steps),
        ("downpour 1+4", 5, ["--parallel", "downpour", "--servers", "1"] + sgd, a.steps),
        ("downpour 2+4", 6, ["--parallel", "downpour", "--servers", "2"] + sgd, a.steps),
        ("downpour 1+4 n_fetch=n_push=4", 5,
         ["--parallel", "downpour", "--servers", "1", "--n-fetch", "4", "--n-push", "4"] + sgd, a.steps),
        ("downpour 1+4 +slow", 5, ["--parallel", "downpour", "--servers", "1"] + sgd + slow, a.steps),
        ("lbfgs (serial)", 1, ["--parallel", "lbfgs"] + full, a.iterations),
        ("sandblaster 1+2", 4, ["--parallel", "sandblaster", "--servers", "1"] + full, a.iterations),
        ("sandblaster 1+4", 6, ["--parallel", "sandblaster", "--servers", "1"] + full, a.iterations),
        ("sandblaster 1+4 +slow", 6, ["--parallel", "sandblaster", "--servers", "1"] + full + slow, a.iterations),
    ]


def run(a, ranks, extra, steps):
    train = os.path.join(a.build, "bin", "plait-train")
    cmd = [train] if ranks == 1 else [os.path.join(a.build, "bin", "plait-run"), "-n", str(ranks), "--timeout", "600",
                                      train]
    cmd += MODEL + extra + ["--steps", str(steps)]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - t0
    r = {"wall": wall, "loss": float(re.search(r"^final-loss (\S+)", out, re.M).group(1))}
    if m := re.search(r"^staleness mean (\S+) p50 (\d+) p99 (\d+)", out, re.M):
        r["staleness"] = (float(m.group(1)), int(m.group(3)))
    evals = re.findall(r"^iteration \d+ loss \S+ evaluations (\d+) samples (\d+)", out, re.M)
    r["samples"] = int(evals[-1][1]) if evals else steps * a.batch
    portions = [int(n) for n in re.findall(r"^portions replica \d+ (\d+)", out, re.M)]
    if portions:
        r["portions"] = portions
    return r


def plot(path, cfgs, results):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (by_samples, by_time) = plt.subplots(1, 2, figsize=(13, 5))
    for name, _, _, _ in cfgs:
        points = []
        for frac in (4, 2, 1):
            runs = results[(name, frac)]
            points.append((runs[-1]["samples"], statistics.median(r["wall"] for r in runs),
                           statistics.median(r["loss"] for r in runs)))
        style = "--" if name.startswith(("lbfgs", "sandblaster")) else ":" if name.startswith("ddp") else "-"
        by_samples.plot([p[0] for p in points], [p[2] for p in points], style, marker="o", label=name)
        by_time.plot([p[1] for p in points], [p[2] for p in points], style, marker="o", label=name)
    by_samples.set_xlabel("samples processed")
    by_time.set_xlabel("wall time of the job (s, 2-core VM: oversubscribed beyond 2 ranks)")
    for ax in (by_samples, by_time):
        ax.set_ylabel("loss of the final parameters (256 samples)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    by_samples.legend(fontsize=7)
    fig.suptitle("Downpour SGD, Sandblaster L-BFGS and synchronous DDP (plait-train, mlp 16-128x3-8)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build-host")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--iterations", type=int, default=16)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--full-batch", type=int, default=1024)
    p.add_argument("--slow-ms", type=float, default=5)
    p.add_argument("--out", default=None, help="also write the tables (markdown) here")
    p.add_argument("--plot", default=None, help="also draw loss against samples and wall time here (PNG)")
    a = p.parse_args()
    cfgs = configs(a)
    results = {}  # (name, fraction) -> list of runs
    for _ in range(a.repeats):
        for name, ranks, extra, steps in cfgs:
            for frac in (4, 2, 1):
                results.setdefault((name, frac), []).append(run(a, ranks, extra, max(1, steps // frac)))
    lines = ["| configuration | ranks | samples | final loss | wall s (min-max) | staleness mean / p99 | portions per replica |",
             "|---|---:|---:|---:|---|---|---|"]
    for name, ranks, _, _ in cfgs:
        for frac in (4, 2, 1):
            runs = results[(name, frac)]
            walls = [r["wall"] for r in runs]
            stale = runs[-1].get("staleness")
            portions = runs[-1].get("portions")
            lines.append(f"| {name} | {ranks} | {runs[-1]['samples']} | {statistics.median(r['loss'] for r in runs):.4f} | "
                         f"{statistics.median(walls):.2f} ({min(walls):.2f}-{max(walls):.2f}) | "
                         f"{f'{stale[0]:.2f} / {stale[1]}' if stale else ''} | "
                         f"{' '.join(map(str, portions)) if portions else ''} |")
    if a.plot:
        plot(a.plot, cfgs, results)
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(f"<!-- perf/training/parameter_server.py --repeats {a.repeats} --steps {a.steps} "
                    f"--iterations {a.iterations} --batch {a.batch} --full-batch {a.full_batch} "
                    f"--slow-ms {a.slow_ms} -->\n{text}\n")


if __name__ == "__main__":
    main()
