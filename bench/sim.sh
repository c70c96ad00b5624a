#!/usr/bin/env bash
# Trace replay: the shipped Alibaba GPU pod list replayed through baton's scheduling pass under
# fifo, backfill and baton's policy (`baton sim --trace`), then the synthetic workflow comparison
# of atomic admission, chained tasks and per-task greedy scheduling (`baton sim --workflows`). Prints both
# tables and the time each took. See docs/benchmarks.md, "Trace replay", for the recorded results.
#
#   bench/sim.sh                              # default cluster (5 nodes x 8 GPUs), 500 workflows
#   SIM_ARGS="--nodes 6" bench/sim.sh         # extra options for both runs
#   WORKFLOWS=1000 SEED=7 bench/sim.sh
#
# Environment:
#   TRACE      the pod list (default: ../shared/traces/alibaba-gpu-v2023-openb_pod_list_default.csv
#              relative to the repository root)
#   WORKFLOWS  synthetic workflows to compare (default 500); SEED their seed (default 1)
#   SIM_ARGS   options added to both runs (--nodes, --gpus-per-node, --time-limit-factor)
#   BATON      the baton binary (default: built here with `cargo build --release -p baton-gpu`)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRACE=${TRACE:-$root/../shared/traces/alibaba-gpu-v2023-openb_pod_list_default.csv}
WORKFLOWS=${WORKFLOWS:-500}
SEED=${SEED:-1}
SIM_ARGS=${SIM_ARGS:-}
export NO_COLOR=1 RUST_BACKTRACE=0

[ "${BASH_VERSINFO[0]}" -ge 5 ] || { echo "sim.sh: needs bash 5 (EPOCHREALTIME)" >&2; exit 1; }
[ -r "$TRACE" ] || { echo "sim.sh: cannot read the trace $TRACE (set TRACE=...)" >&2; exit 1; }
TRACE=$(readlink -f "$TRACE")
if [ -z "${BATON:-}" ]; then
    echo "# building release" >&2
    (cd "$root" && cargo build --release -p baton-gpu) >&2
    BATON=${CARGO_TARGET_DIR:-$root/target}/release/baton
fi

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }'; }

cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')
git -C "$root" diff --quiet 2>/dev/null || commit="$commit (with uncommitted changes)"
echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -sr), $(nproc) CPUs ($cpu)"
echo "# baton $("$BATON" --version | awk '{ print $2 }') at $commit"
echo

# shellcheck disable=SC2086  # SIM_ARGS is a list of options
{
    echo "\$ baton sim --trace $(basename "$TRACE") $SIM_ARGS"
    t0=$EPOCHREALTIME
    "$BATON" sim --trace "$TRACE" $SIM_ARGS
    echo "total: $(elapsed "$t0") s (reading and parsing the trace, then every policy)"
    echo
    echo "\$ baton sim --workflows $WORKFLOWS --seed $SEED $SIM_ARGS"
    t0=$EPOCHREALTIME
    "$BATON" sim --workflows "$WORKFLOWS" --seed "$SEED" $SIM_ARGS
    echo "total: $(elapsed "$t0") s"
}
