#!/usr/bin/env bash
# Slurm backend: submission throughput and end-to-report latency through baton, side by side
# with plain sbatch, on the running Slurm cluster (../shared/slurm/start-slurm.sh; for the mail
# hook its MailProg must be `baton slurm-mail`, as .ci/run sets it up). See docs/benchmarks.md.
#
#   bench/slurm.sh                 # N=100 submissions, M=20 latency samples each way, A=300
#   N=200 M=40 A=1000 bench/slurm.sh
#   ONLY=array bench/slurm.sh      # just the array case
#
# Submission: N `true` jobs, one CLI call each, timed until every job has a Slurm job id
# (baton submits asynchronously; the clock stops when the last sbatch has returned), against N
# plain `sbatch --wrap true` calls.
# Latency: M jobs, one at a time, each writing the time just before it exits; baton's report is
# delivered to a `cmd:` channel that records the time it ran; plain sbatch's is `sbatch --wait`
# returning. Both with baton polling only, and with Slurm's end-of-job mail hook.
# Array: one plain `sbatch --array=1-A --wrap true`, timed until squeue lists none of its
# elements pending or running, then one `baton submit --array 1-A -- true`, timed until
# `baton sweep wait` returns (the sweep's comparison report is built), without and with the hook.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${N:-100}
M=${M:-20}
A=${A:-300}
ONLY=${ONLY:-}
BATON=${BATON:-$root/target/release/baton}
if [ ! -x "$BATON" ]; then
  echo "# building release" >&2
  (cd "$root" && cargo build -q --release -p baton-gpu)
fi
sinfo -h >/dev/null || { echo "slurm.sh: no Slurm cluster answers sinfo" >&2; exit 1; }
work=$(mktemp -d)
trap 'kill $(cat "$work/daemon.pid" 2>/dev/null) 2>/dev/null || true; scancel -n baton-bench >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
cd "$work"
now() { date +%s%N; }
ms() { echo $(( ($2 - $1) / 1000000 )); }

start_daemon() { # $1: mail_hook true|false
  [ -f "$work/daemon.pid" ] && kill "$(cat "$work/daemon.pid")" 2>/dev/null && sleep 0.5
  export BATON_HOME="$work/home-$1"
  mkdir -p "$BATON_HOME"
  printf '[backend]\nkind = "slurm"\nmail_hook = %s\n' "$1" > "$BATON_HOME/config.toml"
  "$BATON" serve > "$work/daemon-$1.log" 2>&1 &
  echo $! > "$work/daemon.pid"
  until "$BATON" status >/dev/null 2>&1; do sleep 0.05; done
}

array_case() {
  # Plain sbatch first: slurmctld slows with the finished records it keeps (MinJobAge, 300 s on
  # the test cluster), 300 per case, so each case runs after the ones before it left theirs;
  # this order puts that handicap on baton.
  t0=$(now)
  sid=$(sbatch --parsable --array="1-$A" -J baton-bench -o /dev/null --wrap true)
  t1=$(now)
  while [ -n "$(squeue -h -j "$sid" -t pending,running,completing -o %i 2>/dev/null)" ]; do sleep 0.05; done
  t2=$(now)
  echo "sbatch --array=1-$A: submit $(ms "$t0" "$t1") ms; gone from squeue after $(ms "$t0" "$t2") ms"
  for hook in false true; do
    echo "== one array of $A, mail hook $hook"
    start_daemon "$hook"
    t0=$(now)
    sweep=$("$BATON" submit --array "1-$A" -- true 2>/dev/null)
    t1=$(now)
    "$BATON" sweep wait "$sweep" > "$work/sweep-$hook.md" || { echo "the array did not succeed" >&2; cat "$work/sweep-$hook.md" >&2; exit 1; }
    t2=$(now)
    arrays=$("$BATON" status --all --json | python3 -c 'import json,sys; print(len({j["slurm_job_id"] for j in json.load(sys.stdin) if j.get("slurm_job_id")}))')
    [ "$arrays" = 1 ] || { echo "expected one Slurm job for the array, saw $arrays" >&2; exit 1; }
    echo "baton --array 1-$A (mail hook $hook): submit $(ms "$t0" "$t1") ms; sweep wait returned after $(ms "$t0" "$t2") ms"
  done
}
if [ "$ONLY" = array ]; then
  array_case
  exit 0
fi

echo "== submission: $N jobs"
start_daemon false
t0=$(now)
for _ in $(seq "$N"); do "$BATON" submit -- true >/dev/null 2>&1; done
t1=$(now)
until [ "$("$BATON" status --all --json | python3 -c 'import json,sys; print(sum(1 for j in json.load(sys.stdin) if j.get("slurm_job_id")))')" -ge "$N" ]; do sleep 0.05; done
t2=$(now)
echo "baton:  CLI calls $(ms "$t0" "$t1") ms; all in Slurm after $(ms "$t0" "$t2") ms ($(( N * 1000 / ($(ms "$t0" "$t2") + 1) )) jobs/s)"
t0=$(now)
for _ in $(seq "$N"); do sbatch --parsable -J baton-bench -o /dev/null --wrap true >/dev/null; done
t2=$(now)
echo "sbatch: $(ms "$t0" "$t2") ms ($(( N * 1000 / ($(ms "$t0" "$t2") + 1) )) jobs/s)"
# Let the queue drain before timing latencies.
while [ -n "$(squeue -h -t pending,running -o %i)" ]; do sleep 0.5; done

latency() { # $1: label; prints p50 and max of the samples in $work/lat
  sort -n "$work/lat" | awk -v label="$1" '{ a[NR] = $1 } END { printf "%s: p50 %d ms, max %d ms (%d jobs)\n", label, a[int((NR + 1) / 2)], a[NR], NR }'
}

for hook in false true; do
  echo "== end-to-report latency, mail hook $hook"
  start_daemon "$hook"
  : > "$work/lat"
  for i in $(seq "$M"); do
    id=$("$BATON" submit --notify "cmd:date +%s%N > $work/got.$hook.$i" -- sh -c "sleep 1; date +%s%N > $work/end.$hook.$i" 2>/dev/null)
    until [ -s "$work/got.$hook.$i" ]; do sleep 0.02; done
    echo $(( ($(cat "$work/got.$hook.$i") - $(cat "$work/end.$hook.$i")) / 1000000 )) >> "$work/lat"
  done
  latency "baton (mail hook $hook)"
done
: > "$work/lat"
for i in $(seq "$M"); do
  sbatch --wait -J baton-bench -o /dev/null --wrap "sleep 1; date +%s%N > $work/pend.$i" >/dev/null
  got=$(now)
  echo $(( (got - $(cat "$work/pend.$i")) / 1000000 )) >> "$work/lat"
done
latency "sbatch --wait"

array_case
