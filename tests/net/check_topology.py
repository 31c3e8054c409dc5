#!/usr/bin/env python3
"""check_topology.py LOGDIR TAG NODES PER NET — checks the NCCL_DEBUG=INFO logs
of one netns.sh job (files LOGDIR/TAG.<rank>, rank r on node r // PER):

- every rank logs the same rings ("Ring cc/nn : r r ..."), each holding every
  rank once and crossing node boundaries exactly NODES times (a node's ranks
  contiguous: the minimum for a ring over NODES > 1 nodes);
- every rank names each peer's transport ("rank a -> rank b via X"): self,
  SHM on the same node, NET/<NET>/plnet on another.
Prints what it checked; exit 1 on the first mismatch list."""
import re
import sys

logdir, tag, nodes, per, net = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
nranks = nodes * per
ring_re = re.compile(r"PLAIT INFO Ring (\d+)/(\d+) :((?: \d+)+)")
via_re = re.compile(r"PLAIT INFO rank (\d+) -> rank (\d+) via (\S+)")
errors, rings_seen = [], None
for r in range(nranks):
    text = open(f"{logdir}/{tag}.{r}", errors="replace").read()
    rings = {}
    for m in ring_re.finditer(text):
        rings[int(m.group(1))] = [int(x) for x in m.group(3).split()]
    if not rings:
        errors.append(f"rank {r}: no 'Ring' lines")
    elif rings_seen is None:
        rings_seen = rings
    elif rings != rings_seen:
        errors.append(f"rank {r}: rings {rings} differ from rank 0's {rings_seen}")
    vias = {int(m.group(2)): m.group(3) for m in via_re.finditer(text) if int(m.group(1)) == r}
    for q in range(nranks):
        want = "self" if q == r else "SHM" if q // per == r // per else f"NET/{net}/plnet"
        if vias.get(q) != want:
            errors.append(f"rank {r} -> rank {q}: via {vias.get(q)}, expected {want}")
for c, ring in sorted((rings_seen or {}).items()):
    if sorted(ring) != list(range(nranks)):
        errors.append(f"ring {c} {ring} does not hold every rank once")
        continue
    crossings = sum(ring[i] // per != ring[(i + 1) % nranks] // per for i in range(nranks))
    print(f"check_topology: ring {c}: {' '.join(map(str, ring))}: {crossings} node boundary crossing(s)")
    if crossings != (nodes if nodes > 1 else 0):
        errors.append(f"ring {c} crosses node boundaries {crossings} times, expected {nodes}")
if rings_seen is not None and len(rings_seen) < 2:
    errors.append(f"{len(rings_seen)} channel(s): the check wants at least 2 (NCCL_NCHANNELS=2)")
for e in errors:
    print("check_topology: " + e)
print(f"check_topology: {nranks} ranks name their transports per peer" if not errors else "check_topology: FAIL")
sys.exit(1 if errors else 0)
