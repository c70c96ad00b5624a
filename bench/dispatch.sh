#!/usr/bin/env bash
# Dispatch benchmark: JOBS trivial one-slot jobs (`true`) submitted one by one through each
# system's CLI onto SLOTS slots, for baton (SLOTS simulated GPUs, `--gpus 1` per job),
# task-spooler (`tsp -S SLOTS`) and pueue (`pueue parallel SLOTS`), on the same machine in the same
# run; and `baton-array`: the same JOBS jobs as one `baton submit --array 1-JOBS --gpus 1 -- true`,
# waited for with `baton sweep wait`. See docs/benchmarks.md for what is measured and the
# recorded results.
#
#   bench/dispatch.sh                       # JOBS=300 SLOTS=4 RUNS=3, all four
#   JOBS=500 RUNS=1 SYSTEMS="baton tsp" bench/dispatch.sh
#
# Environment:
#   JOBS     jobs per system and run (default 300)
#   SLOTS    parallel slots: simulated GPUs / tsp slots / pueue parallel tasks (default 4)
#   RUNS     rounds; each round runs every system once, in order (default 3)
#   SYSTEMS  which systems, in order (default "baton baton-array tsp pueue")
#   BATON_CPUS  CPUs baton's daemon may hand out (default SLOTS; empty: the machine's cores).
#            A baton job reserves one CPU unless it asks, while task-spooler runs SLOTS jobs at
#            once whatever the cores, so on a machine with fewer cores than SLOTS baton would
#            run fewer jobs at once than the others without this.
#   BATON    the baton binary (default target/release/baton, built if missing)
#   KEEP=1   keep the temporary state directories (daemon logs, databases) for inspection
#
# Every system gets fresh state in its own temporary directory; every daemon is stopped on exit.
# Timing: t0 just before the first submit, t1 after the last submit returned, t2 when the wait for
# all jobs returned. "submit" is t1-t0, "total" is t2-t0, "jobs/s" is JOBS/total.
set -euo pipefail

JOBS=${JOBS:-300}
SLOTS=${SLOTS:-4}
RUNS=${RUNS:-3}
SYSTEMS=${SYSTEMS:-"baton baton-array tsp pueue"}
KEEP=${KEEP:-0}
BATON_CPUS=${BATON_CPUS-$SLOTS}
baton_serve_args=(--sim-gpus "$SLOTS")
if [ -n "$BATON_CPUS" ]; then baton_serve_args+=(--cpus "$BATON_CPUS"); fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BATON=${BATON:-$root/target/release/baton}
export PATH="$PATH:$HOME/.cargo/bin"
# Quiet, plain diagnostics from the Rust tools (no colour, no backtraces).
export RUST_BACKTRACE=0 NO_COLOR=1
# An inherited configuration must not leak into the isolated runs.
unset BATON_HOME BATON_SIM_GPUS CLAUDE_CODE_SESSION_ID CLAUDE_CODE_MESSAGING_SOCKET \
    CLAUDE_CODE_MESSAGING_TOKEN CODEX_THREAD_ID TMUX TMUX_PANE PUEUE_CONFIG_PATH TS_SOCKET TS_SLOTS TS_ONFINISH TS_ENV \
    TS_MAILTO TS_SAVELIST TS_MAXFINISHED TS_MAXCONN TS_VISIBLE_DEVICES || true

die() { echo "dispatch.sh: $*" >&2; exit 1; }
note() { echo "# $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

for tool in jq awk; do command -v $tool >/dev/null || die "needs $tool"; done
[ "${BASH_VERSINFO[0]}" -ge 5 ] || die "needs bash 5 (EPOCHREALTIME)"

# ---- tools -------------------------------------------------------------------------------------
for sys in $SYSTEMS; do
    case $sys in
    baton | baton-array)
        if [ ! -x "$BATON" ]; then
            note "building $BATON"
            (cd "$root" && cargo build --release -p baton-gpu) >&2
        fi ;;
    tsp)
        if ! command -v tsp >/dev/null; then
            note "installing task-spooler"
            as_root apt-get install -y task-spooler >&2
        fi ;;
    pueue)
        if ! command -v pueue >/dev/null || ! command -v pueued >/dev/null; then
            note "installing pueue"
            cargo install pueue --locked >&2
        fi ;;
    *) die "unknown system '$sys' (expected baton, baton-array, tsp, pueue)" ;;
    esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/baton-dispatch.XXXXXX")
daemons=()
cleanup() {
    local pid
    for pid in "${daemons[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ -n "${TS_SOCKET:-}" ] && [ -S "$TS_SOCKET" ]; then tsp -K 2>/dev/null || true; fi
    if [ "$KEEP" = 1 ]; then note "state kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Stops a daemon this script started and forgets it, so cleanup never signals a reused pid.
stop_daemon() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local keep=() pid
    for pid in "${daemons[@]}"; do [ "$pid" = "$1" ] || keep+=("$pid"); done
    daemons=("${keep[@]}")
}

now() { echo "$EPOCHREALTIME"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
wait_for_socket() { # path pid what
    local i
    for i in $(seq 200); do
        [ -S "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || die "$3 exited before its socket appeared"
        sleep 0.05
    done
    die "$3: no socket at $1 after 10 s"
}

results=$work/results.tsv   # run system submit total jobs_per_s
: >"$results"
baton_waits=$work/baton-waits.tsv   # run mean_ms p50_ms p99_ms max_ms runtime_mean_ms span_s
: >"$baton_waits"

# ---- one system, one run -----------------------------------------------------------------------
# Each bench_* sets t0 t1 t2 and checks that all JOBS jobs succeeded.

bench_baton() {
    local dir=$1 run=$2 ids=() id i
    local -x BATON_HOME=$dir
    "$BATON" serve "${baton_serve_args[@]}" 2>"$dir/daemon.log" &
    local pid=$!
    daemons+=("$pid")
    wait_for_socket "$dir/baton.sock" "$pid" "baton serve"
    "$BATON" status >/dev/null || die "baton daemon not answering"

    t0=$(now)
    for ((i = 0; i < JOBS; i++)); do
        # `exec`: bash 5.2 forks twice for a command substitution holding a redirection (a
        # subshell, then the command); with exec it forks once, as for `tsp true` below.
        id=$(exec "$BATON" submit --gpus 1 -- true 2>/dev/null) || die "baton submit failed"
        ids+=("$id")
    done
    t1=$(now)
    "$BATON" wait "${ids[@]}" >/dev/null || die "baton: a job did not succeed"
    t2=$(now)

    local json
    json=$("$BATON" status --all --json)
    local ok
    ok=$(jq '[.[] | select(.state == "succeeded")] | length' <<<"$json")
    [ "$ok" = "$JOBS" ] || die "baton: $ok of $JOBS jobs succeeded"
    # Queue wait (started_at - submitted_at) and run time (ended_at - started_at) as baton records
    # them, plus the span from the first submission to the last end.
    jq -r --arg run "$run" '
        def ms: capture("^(?<s>[^.Z]+)(\\.(?<f>[0-9]+))?Z$")
                | ((.s + "Z") | fromdateiso8601) * 1000
                  + ((.f // "0") | (. + "000")[0:3] | tonumber);
        def pct(p): sort | .[((length - 1) * p | floor)];
        [.[] | {sub: (.submitted_at | ms), start: (.started_at | ms), end: (.ended_at | ms)}]
        | (map(.start - .sub)) as $wait
        | (map(.end - .start)) as $runt
        | [$run,
           ($wait | add / length | . * 10 | round / 10),
           ($wait | pct(0.5)), ($wait | pct(0.99)), ($wait | max),
           ($runt | add / length | . * 10 | round / 10),
           ((map(.end) | max) - (map(.sub) | min)) / 1000]
        | @tsv' <<<"$json" >>"$baton_waits"
    stop_daemon "$pid"
}

# One submission for all JOBS jobs (a sweep over indices), until `baton sweep wait` returns: the
# caller then knows every run ended and holds their comparison report.
bench_baton-array() {
    local dir=$1 id
    local -x BATON_HOME=$dir
    "$BATON" serve "${baton_serve_args[@]}" 2>"$dir/daemon.log" &
    local pid=$!
    daemons+=("$pid")
    wait_for_socket "$dir/baton.sock" "$pid" "baton serve"
    "$BATON" status >/dev/null || die "baton daemon not answering"

    t0=$(now)
    id=$(exec "$BATON" submit --array "1-$JOBS" --gpus 1 -- true 2>/dev/null) || die "baton submit --array failed"
    t1=$(now)
    "$BATON" sweep wait "$id" >/dev/null || die "baton: a run of the array did not succeed"
    t2=$(now)

    local ok
    ok=$("$BATON" sweep status "$id" --json | jq '.counts.succeeded')
    [ "$ok" = "$JOBS" ] || die "baton-array: $ok of $JOBS runs succeeded"
    stop_daemon "$pid"
}

bench_tsp() {
    local dir=$1 ids=() id i
    # tsp keeps each job's output in $TMPDIR/ts-out.*; keep the whole list of finished jobs.
    local -x TS_SOCKET=$dir/tsp.sock TMPDIR=$dir TS_MAXFINISHED=$((JOBS + 100))
    # The first client starts the server; -S sets the slots before the clock starts.
    tsp -S "$SLOTS" >/dev/null
    [ "$(tsp -S)" = "$SLOTS" ] || die "tsp: slots not set"

    t0=$(now)
    for ((i = 0; i < JOBS; i++)); do
        id=$(tsp true) || die "tsp submit failed"
        ids+=("$id")
    done
    t1=$(now)
    # Wait for the last job, then for any job still queued or running (they finish out of order).
    tsp -w "${ids[-1]}" >/dev/null || die "tsp: job ${ids[-1]} failed"
    local pending
    while pending=$(tsp -l | awk 'NR > 1 && ($2 == "running" || $2 == "queued") { print $1 }') &&
        [ -n "$pending" ]; do
        for id in $pending; do tsp -w "$id" >/dev/null || die "tsp: job $id failed"; done
    done
    t2=$(now)

    local ok
    ok=$(tsp -l | awk 'NR > 1 && $2 == "finished" && $4 == "0"' | wc -l)
    [ "$ok" = "$JOBS" ] || die "tsp: $ok of $JOBS jobs finished with exit 0"
    tsp -K 2>/dev/null || true
}

bench_pueue() {
    local dir=$1 ids=() id i
    mkdir -p "$dir/data" "$dir/run"
    cat >"$dir/pueue.yml" <<EOF
shared:
  pueue_directory: $dir/data
  runtime_directory: $dir/run
  use_unix_socket: true
  unix_socket_path: $dir/run/pueue.socket
  pid_path: $dir/run/pueue.pid
EOF
    local cfg=(-c "$dir/pueue.yml")
    pueued "${cfg[@]}" 2>"$dir/daemon.log" &
    local pid=$!
    daemons+=("$pid")
    wait_for_socket "$dir/run/pueue.socket" "$pid" "pueued"
    pueue "${cfg[@]}" parallel "$SLOTS" >/dev/null

    t0=$(now)
    for ((i = 0; i < JOBS; i++)); do
        id=$(pueue "${cfg[@]}" add --print-task-id -- true) || die "pueue add failed"
        ids+=("$id")
    done
    t1=$(now)
    pueue "${cfg[@]}" wait --quiet >/dev/null || die "pueue wait failed"
    t2=$(now)

    local ok
    ok=$(pueue "${cfg[@]}" status --json |
        jq '[.tasks[] | select(.status.Done.result == "Success")] | length')
    [ "$ok" = "$JOBS" ] || die "pueue: $ok of $JOBS tasks succeeded"
    stop_daemon "$pid"
}

# ---- runs --------------------------------------------------------------------------------------
note "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, JOBS=$JOBS SLOTS=$SLOTS RUNS=$RUNS"
for sys in $SYSTEMS; do
    case $sys in
    baton | baton-array) note "$sys: $("$BATON" --version) ($BATON)" ;;
    tsp) note "tsp: $(tsp -V 2>&1 | head -1)" ;;
    pueue) note "pueue: $(pueue --version), $(pueued --version)" ;;
    esac
done

printf '%-4s %-11s %9s %9s %8s\n' run system submit_s total_s jobs/s
for ((run = 1; run <= RUNS; run++)); do
    for sys in $SYSTEMS; do
        dir=$work/$sys-$run
        mkdir -p "$dir/cwd"
        # Every system's jobs run in an empty directory of their own: baton's report looks for
        # the files a job wrote in its working directory, which should not be the caller's.
        cd "$dir/cwd"
        "bench_$sys" "$dir" "$run"
        cd "$work"
        sub=$(secs "$t0" "$t1")
        tot=$(secs "$t0" "$t2")
        rate=$(awk -v n="$JOBS" -v t="$tot" 'BEGIN { printf "%.1f", n / t }')
        printf '%s\t%s\t%s\t%s\t%s\n' "$run" "$sys" "$sub" "$tot" "$rate" >>"$results"
        printf '%-4s %-11s %9s %9s %8s\n' "$run" "$sys" "$sub" "$tot" "$rate"
    done
done

# ---- summary -----------------------------------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "Median of $RUNS run(s), $JOBS jobs on $SLOTS slots:"
echo
# Each system's total against task-spooler's in the same run, as the targets are stated.
tsp_total=$(awk '$2 == "tsp" { print $4 }' "$results" | median)
echo "| system | submit phase (s) | total (s) | jobs/s | total / tsp's |"
echo "| --- | ---: | ---: | ---: | ---: |"
for sys in $SYSTEMS; do
    sub=$(awk -v s="$sys" '$2 == s { print $3 }' "$results" | median)
    tot=$(awk -v s="$sys" '$2 == s { print $4 }' "$results" | median)
    rate=$(awk -v n="$JOBS" -v t="$tot" 'BEGIN { printf "%.1f", n / t }')
    ratio=$(awk -v t="$tot" -v r="${tsp_total:-}" 'BEGIN { if (r > 0) printf "%.2fx", t / r; else print "-" }')
    printf '| %s | %.2f | %.2f | %s | %s |\n' "$sys" "$sub" "$tot" "$rate" "$ratio"
done
if [ -s "$baton_waits" ]; then
    echo
    echo "baton's own record (status --all --json), per run: queue wait = started_at - submitted_at,"
    echo "run = ended_at - started_at, span = last ended_at - first submitted_at:"
    echo
    echo "| run | wait mean (ms) | wait p50 | wait p99 | wait max | run mean (ms) | span (s) |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %.3f |\n", $1, $2, $3, $4, $5, $6, $7 }' "$baton_waits"
fi
