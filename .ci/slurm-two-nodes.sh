#!/usr/bin/env bash
# Turns the single-node test cluster that ../shared/slurm/start-slurm.sh started into two nodes
# on this one machine (two slurmd, `slurmd -N vm1` and `-N vm2`, on ports 6818 and 6828), each
# with half the CPUs, memory and fake GPUs. Slurm never runs two components of one
# heterogeneous job on the same node, so testing those needs two nodes.
# Debian's Slurm 22.05 supports several slurmd on one host (%n in the per-node paths).
# Daemons are stopped by their pid files, never by name. Idempotent.
#
#   .ci/slurm-two-nodes.sh          # after start-slurm.sh
#   .ci/slurm-two-nodes.sh --stop   # stops the two slurmd (stop-slurm.sh knows only its own)
set -euo pipefail
dir=${SLURM_TEST_DIR:-/tmp/slurm-test}
conf=$dir/etc/slurm.conf
export SLURM_CONF=$conf
stop() { # pid file: SIGTERM to the slurmd it names (checked by /proc/PID/comm), then wait
  [ -f "$1" ] || return 0
  local pid; pid=$(tr -dc '0-9' < "$1")
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      { [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; } || break
      sleep 0.1
    done
  fi
  rm -f "$1"
}
if [ "${1:-}" = "--stop" ]; then
  stop "$dir/run/slurmd-vm1.pid" slurmd
  stop "$dir/run/slurmd-vm2.pid" slurmd
  exit 0
fi
if grep -q '^NodeName=vm1 ' "$conf"; then
  echo "[slurm-two-nodes] already two nodes"
  exit 0
fi
stop "$dir/run/slurmd.pid" slurmd
stop "$dir/run/slurmctld.pid" slurmctld
line=$(grep '^NodeName=' "$conf")
host=$(sed -E 's/^NodeName=([^ ]+).*/\1/' <<<"$line")
cpus=$(sed -E 's/.* CPUs=([0-9]+).*/\1/' <<<"$line")
mem=$(sed -E 's/.* RealMemory=([0-9]+).*/\1/' <<<"$line")
gpus=$(sed -E 's/.* Gres=gpu:([0-9]+).*/\1/' <<<"$line")
half_cpus=$(( cpus / 2 )); half_mem=$(( mem / 2 )); half_gpus=$(( gpus / 2 ))
node() { # name port
  echo "NodeName=$1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$2 CPUs=$half_cpus RealMemory=$half_mem Gres=gpu:$half_gpus State=UNKNOWN"
}
sed -i -E \
  -e "s|^NodeName=.*|$(node vm1 6818)\n$(node vm2 6828)|" \
  -e "s|^PartitionName=([^ ]+) Nodes=[^ ]+ |PartitionName=\1 Nodes=vm1,vm2 |" \
  -e "s|^SlurmdSpoolDir=.*|SlurmdSpoolDir=$dir/spool/d-%n|" \
  -e "s|^SlurmdPidFile=.*|SlurmdPidFile=$dir/run/slurmd-%n.pid|" \
  -e "s|^SlurmdLogFile=.*|SlurmdLogFile=$dir/log/slurmd-%n.log|" \
  "$conf"
last=$(( gpus - 1 ))
{
  echo "AutoDetect=off"
  echo "NodeName=vm1 Name=gpu File=$dir/dev/nvidia[0-$(( half_gpus - 1 ))]"
  echo "NodeName=vm2 Name=gpu File=$dir/dev/nvidia[$half_gpus-$last]"
} > "$dir/etc/gres.conf"
mkdir -p "$dir/spool/d-vm1" "$dir/spool/d-vm2"
slurmctld
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
slurmd -N vm1
slurmd -N vm2
for _ in $(seq 300); do
  [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" -ge 2 ] && break
  sleep 0.1
done
sinfo -N -o '%N %T %G %C'
