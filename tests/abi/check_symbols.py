#!/usr/bin/env python3
"""check_symbols.py NCCL_H LIBNCCL NOT_YET

Every function NVIDIA's nccl.h (the release Plait tracks) declares, ncclX and
its profiler alias pncclX, must be exported by Plait's libnccl.so.2, except
those listed in NOT_YET (one name per line, '#' comments): the API Plait has
yet to provide. A listed name that Plait now exports is an error too, so the
list only shrinks. Prints what is missing and what is new."""
import re
import subprocess
import sys


def declared(header):
    text = open(header).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    names = set()
    # A declaration: a return type, then the name, then '(' (not a macro).
    for m in re.finditer(r"^[ \t]*(?:__attribute__\s*\(\(.*?\)\)\s*)?"
                         r"(?:const\s+)?(?:ncclResult_t|void|char\s*\*|const\s+char\s*\*|int|ncclTeam_t|ncclTeam)"
                         r"\s*\*?\s+(p?nccl[A-Za-z0-9_]+)\s*\(", text, flags=re.M):
        names.add(m.group(1))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def main():
    header, lib, not_yet_file = sys.argv[1:4]
    want = declared(header)
    have = exported(lib)
    not_yet = set()
    for line in open(not_yet_file):
        line = line.split("#")[0].strip()
        if line:
            not_yet.add(line)
    missing = sorted(n for n in want if n not in have and n not in not_yet and n.lstrip("p") not in not_yet)
    done = sorted(n for n in not_yet if n in have)
    print(f"{len(want)} functions declared by {header}; {len(want & have)} exported by Plait")
    for n in missing:
        print(f"MISSING {n}")
    for n in done:
        print(f"NOW EXPORTED (remove from {not_yet_file}): {n}")
    left = sorted(n for n in not_yet if n in want or "p" + n in want)
    print(f"not yet provided ({len(left)}): {' '.join(left)}")
    return 1 if missing or done or len(want) < 50 else 0


if __name__ == "__main__":
    sys.exit(main())
