"""Medians of interleaved nccl-tests-format runs, one table per tool and rank count.

    medians.py OUT ROUNDS CONFIGS TOOLS SCRIPT

OUT holds files named TOOL.NRANKS.LABEL.ROUND (the program's whole output);
CONFIGS is the space-separated "label=..." list the script ran, the first
being the base; TOOLS the space-separated programs. Prints, per tool and rank
count, the median out-of-place time per call (us) of each label and, in
brackets, its ratio to the base's. INTERLEAVE_IN_PLACE=1: the in-place times.
"""
import glob
import os
import statistics
import sys


IN_PLACE = os.environ.get("INTERLEAVE_IN_PLACE", "0") == "1"


def times(path):
    column = 9 if IN_PLACE else 5  # the time of the in-place or the out-of-place half of a row
    got = {}
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit() and len(f) > column:
            try:
                got[int(f[0])] = float(f[column])
            except ValueError:
                pass
    return got


def main():
    out, rounds, configs, tools, script = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
    labels = [c.split("=")[0] for c in configs]
    print(f"# `{script}` ({rounds} interleaved rounds, medians): time per call in us "
          f"({'in place' if IN_PLACE else 'out of place'}); "
          f"in brackets each configuration's time over `{labels[0]}`'s\n")
    for n in [int(x) for x in os.environ.get("INTERLEAVE_RANKS", "2 4").split()]:
        for tool in tools:
            med = {}
            for label in labels:
                runs = [times(p) for p in glob.glob(os.path.join(out, f"{tool}.{n}.{label}.*"))]
                runs = [r for r in runs if r]
                if runs:
                    med[label] = {s: statistics.median(r[s] for r in runs if s in r) for s in runs[0]}
            if labels[0] not in med:
                continue
            print(f"## {tool}, {n} ranks\n")
            print("| size | " + " | ".join(labels) + " |")
            print("|---:|" + "---:|" * len(labels))
            for s in sorted(med[labels[0]]):
                base = med[labels[0]][s]
                cells = []
                for label in labels:
                    v = med.get(label, {}).get(s)
                    cells.append("-" if v is None else (f"{v:.1f}" if label == labels[0] else f"{v:.1f} ({v / base:.2f})"))
                print(f"| {s} | " + " | ".join(cells) + " |")
            print()


if __name__ == "__main__":
    main()
