#!/usr/bin/env bash
# Installs everything Plait builds, tests and benchmarks with, from Debian's
# packages (run as root on Debian 12). Safe to run again.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache  # toolchain (ccache: scripts/test.sh)
  clang libclang-rt-14-dev llvm               # libFuzzer targets (scripts/fuzz.sh); llvm-symbolizer
  catch2 libbenchmark-dev                     # tests, microbenchmarks
  libpugixml-dev nlohmann-json3-dev libcli11-dev  # topology XML, tools' JSON and flags
  libhwloc-dev libucx-dev libibverbs-dev      # topology detection, network transports
  openmpi-bin libopenmpi-dev libgloo-dev      # launchers and the peers we compare with
  mpich libmpich-dev                          # a second MPI peer (Open MPI stays the default mpirun)
  python3 python3-matplotlib graphviz         # perf/compare plots, topology pictures
  python3-pip                                 # NVIDIA's newest NCCL headers from PyPI (tests/abi)
  python3-venv python3-dev                    # the PyTorch backend (scripts/setup_torch.sh)
  iproute2 nftables iperf3 procps             # multi-node tests in network namespaces
  libssl3                                     # ncclSetEncryption (TLS, loaded at run time)
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: all packages present"
# NVIDIA's headers of the NCCL release Plait tracks, for the ABI tests
# (tests/abi; skipped without them, so a machine without PyPI still builds).
if headers=$("$(dirname "$0")/fetch_nccl_headers.sh" 2>/dev/null); then
  echo "setup: NVIDIA NCCL headers in $headers"
else
  echo "setup: could not fetch NVIDIA's NCCL headers from PyPI: the tests/abi checks will be skipped" >&2
fi
