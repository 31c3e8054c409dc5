#!/bin/sh
# Debian packages the benchmarks and perf/compare need (run as root).
#   libopenmpi-dev openmpi-bin  perf/mpi (mpi_coll_perf) and mpirun
#   libmpich-dev mpich          perf/mpi (mpich_coll_perf) and mpirun.mpich (Open
#                               MPI stays the default `mpirun`: higher priority)
#   libgloo-dev                 perf/gloo (gloo_perf)
#   nlohmann-json3-dev          the -J JSON output of tools/perf
#   python3-matplotlib          perf/compare's PNG plots
#   libbenchmark-dev            perf/micro
set -e
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  libopenmpi-dev openmpi-bin libmpich-dev mpich libgloo-dev nlohmann-json3-dev python3-matplotlib libbenchmark-dev
