#!/usr/bin/env bash
# fetch_nccl_headers.sh — NVIDIA's NCCL headers of the release Plait tracks
# (the nvidia-nccl-cu13 wheel on PyPI), for the tests that check Plait's ABI
# against them (tests/abi). Only the headers are kept (never copied into the
# project). Prints the include folder; safe to run again (cached).
#   scripts/fetch_nccl_headers.sh [VERSION]   (default 2.32.3)
set -euo pipefail
version=${1:-2.32.3}
cache=${PLAIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/plait}/nccl-$version
if [[ ! -f $cache/include/nccl.h ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "nvidia-nccl-cu13==$version" >&2
  wheel=$(ls "$tmp"/nvidia_nccl_cu13-*.whl)
  python3 - "$wheel" "$tmp/x" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("nvidia/nccl/include/"):
            z.extract(n, sys.argv[2])
PY
  mkdir -p "$cache"
  rm -rf "$cache/include"
  mv "$tmp/x/nvidia/nccl/include" "$cache/include"
fi
echo "$cache/include"
