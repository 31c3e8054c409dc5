"""Parser for nccl-tests' output format, as printed by Plait's *_perf tools and
by the peer benchmarks in perf/ (mpi_coll_perf, gloo_perf, memcpy_perf).

parse(text) -> Result with:
  rows:      list of Row (size, count, type, redop, root, oop, ip), where oop
             and ip are Measurement(time_us, algbw, busbw, wrong) or None when
             printed as N/A; wrong is None when not checked.
  devices:   the "#  Rank ..." lines.
  settings:  the "# nThread ..." line split into key/value pairs.
  out_of_bounds: (count, "OK"|"FAILED") from the footer, or None if missing.
  avg_busbw: float from the footer, or None if missing.
  errors:    lines that report a failed call or a timeout ("# Rank N ... failed",
             "... timeout ...").

Only the standard library is used, so tests and CI can import it anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan)"


@dataclass
class Measurement:
    time_us: float
    algbw: float
    busbw: float
    wrong: Optional[int]


@dataclass
class Row:
    size: int
    count: int
    type: str
    redop: str
    root: int
    oop: Optional[Measurement]
    ip: Optional[Measurement]

    def best(self) -> Optional[Measurement]:
        """The out-of-place measurement, or in-place when only that exists."""
        return self.oop if self.oop is not None else self.ip


@dataclass
class Result:
    rows: List[Row] = field(default_factory=list)
    devices: List[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    out_of_bounds: Optional[Tuple[int, str]] = None
    avg_busbw: Optional[float] = None
    errors: List[str] = field(default_factory=list)

    def total_wrong(self) -> int:
        total = 0
        for row in self.rows:
            for m in (row.oop, row.ip):
                if m is not None and m.wrong is not None:
                    total += m.wrong
        return total


def bus_factor(collective: str, nranks: int) -> float:
    """nccl-tests' busbw / algbw for a collective name ("all_reduce", "AllReduce", ...)."""
    c = collective.lower().replace("_", "").replace("-", "")
    if c == "allreduce":
        return 2.0 * (nranks - 1) / nranks
    if c in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (nranks - 1) / nranks
    return 1.0


def busbw_from_time(size: int, time_us: float, factor: float) -> Optional[float]:
    """busbw in GB/s from the time column, which keeps precision where the
    printed bandwidths round to 0.00 (small sizes)."""
    if time_us <= 0:
        return None
    return size / (time_us * 1e3) * factor


def _measurement(fields: List[str]) -> Optional[Measurement]:
    if len(fields) != 4:
        raise ValueError(f"expected 4 fields, got {fields}")
    if fields[0] == "N/A":
        return None
    wrong = None if fields[3] == "N/A" else int(float(fields[3]))
    return Measurement(float(fields[0]), float(fields[1]), float(fields[2]), wrong)


def parse_row(line: str) -> Optional[Row]:
    """One table row, or None if the line is not a row."""
    fields = line.split()
    if len(fields) != 13 or not fields[0].isdigit():
        return None
    try:
        return Row(int(fields[0]), int(fields[1]), fields[2], fields[3], int(fields[4]),
                   _measurement(fields[5:9]), _measurement(fields[9:13]))
    except ValueError:
        return None


def _settings(line: str) -> dict:
    # "# nThread 1 nGpus 2 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 1 ..."
    keys = r"nThread|nGpus|minBytes|maxBytes|step:|warmup iters:|agg iters:|iters:|validation:|graph:"
    return {k.rstrip(":"): v for k, v in re.findall(r"(" + keys + r")\s+(\S+)", line)}


def parse(text: str) -> Result:
    result = Result()
    for raw in text.splitlines():
        # plait-run --tag-output and mpirun --tag-output prefix lines: keep the tail.
        line = re.sub(r"^\[[^\]]*\]\s?", "", raw.rstrip())
        if line.startswith("# nThread"):
            result.settings = _settings(line)
        elif line.startswith("#  Rank"):
            result.devices.append(line)
        elif m := re.match(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)", line):
            result.out_of_bounds = (int(m.group(1)), m.group(2))
        elif m := re.match(r"#\s*Avg bus bandwidth\s*:\s*(" + _NUMBER + ")", line):
            result.avg_busbw = float(m.group(1))
        elif re.search(r"\bfailed\b|\btimeout\b|\bnot supported\b", line) and not line.startswith("#  "):
            result.errors.append(line)
        else:
            row = parse_row(line)
            if row is not None:
                result.rows.append(row)
    return result
