#!/bin/sh
# fake_launcher.sh torchrun|slurm N prog [args...]
# Starts N copies of prog on this host with the variables torchrun or srun
# would give them (and no NCCL_COMM_ID), waits for all, and fails if any
# failed. Every copy is killed after 60 s.
set -u
kind=$1 n=$2
shift 2
unset NCCL_COMM_ID PLAIT_COMM_ID PLAIT_RANK PLAIT_NRANKS
# MASTER_PORT: ranks host the comm id at MASTER_PORT+1. Both lie below the
# kernel's ephemeral range (32768 and up: other tests' sockets bound to port 0
# land there) and below Slurm's comm-id ports (20000-29999), and neither is in
# use now (/proc/net/tcp*, hex ports).
in_use() {
  hex=$(printf ':%04X ' "$1")
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | grep -q "$hex"
}
port=$((10000 + $$ % 9000))
tries=0
while in_use "$port" || in_use $((port + 1)); do
  port=$((10000 + (port - 10000 + 7) % 9000))
  tries=$((tries + 1))
  [ "$tries" -lt 1000 ] || { echo "fake_launcher.sh: no free port pair in 10000-19000" >&2; exit 1; }
done
pids=""
r=0
while [ "$r" -lt "$n" ]; do
  case $kind in
    torchrun)
      RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout -s KILL 60 "$@" &
      ;;
    slurm)
      SLURM_PROCID=$r SLURM_NTASKS=$n SLURM_STEP_NUM_TASKS=$n SLURM_LOCALID=$r SLURM_NODEID=0 \
        SLURM_STEP_TASKS_PER_NODE=$n SLURM_STEP_NODELIST=localhost SLURM_JOB_ID=$$ SLURM_STEP_ID=0 \
        timeout -s KILL 60 "$@" &
      ;;
    *) echo "fake_launcher.sh: unknown launcher '$kind'" >&2; exit 2 ;;
  esac
  pids="$pids $!"
  r=$((r + 1))
done
status=0
for pid in $pids; do
  wait "$pid" || status=1
done
exit $status
