#!/bin/sh
# Debian packages the benchmarks and perf/compare need (run as root).
#   libopenmpi-dev openmpi-bin  perf/mpi (mpi_coll_perf) and mpirun
#   libmpich-dev mpich          perf/mpi (mpich_coll_perf) and mpirun.mpich (Open
#                               MPI stays the default `mpirun`: higher priority)
#   libgloo-dev                 perf/gloo (gloo_perf)
#   nlohmann-json3-dev          the -J JSON output of tools/perf
#   python3-matplotlib          perf/compare's PNG plots
#   libbenchmark-dev            perf/micro
#   oneCCL (PyPI, below)        perf/oneccl (oneccl_coll_perf)
set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  libopenmpi-dev openmpi-bin libmpich-dev mpich libgloo-dev nlohmann-json3-dev python3-matplotlib libbenchmark-dev

# Intel oneCCL's CPU library for perf/oneccl (oneccl_coll_perf), from PyPI into
# a virtual environment. 2021.14 is the newest whose wheel carries a complete
# libccl.so (2022.x's needs a libccl.so.2 it does not ship). Its dependency
# impi-rt (Intel MPI) is left out: oneCCL's OFI transport runs on Debian's
# libfabric, and its MPI transport on MPICH. oneCCL opens them by the names
# libfabric.so and libmpi.so.12, which /opt/plait-perf/lib provides
# (perf/compare puts it on LD_LIBRARY_PATH).
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv libfabric1
ONECCL_VENV=/opt/plait-perf/venv
[ -x "$ONECCL_VENV/bin/pip" ] || python3 -m venv "$ONECCL_VENV"
"$ONECCL_VENV/bin/pip" install -q --no-deps oneccl-cpu==2021.14.0 oneccl-cpu-devel==2021.14.0
mkdir -p /opt/plait-perf/lib
ln -sf "/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)/libfabric.so.1" \
  /opt/plait-perf/lib/libfabric.so
ln -sf "/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)/libmpich.so.12" \
  /opt/plait-perf/lib/libmpi.so.12
