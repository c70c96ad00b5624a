#!/usr/bin/env bash
# Mid-run following benchmark (issue 17): the daemon's CPU while JOBS running jobs each print
# RATE lines a second (training-log-shaped: `step N loss=... lr=... grad_norm=... tokens/s=...`,
# written in batches every 10 ms and flushed, as a logging loop does). The daemon follows every
# one of them (inotify, then a read every 100 ms while a job prints, the following scanner).
# The jobs print until the measurement is over, so no job's end report falls inside it.
# See docs/benchmarks.md for the recorded results.
#
#   bench/follow.sh                        # JOBS=8 RATE=10000 SECS=9
#   JOBS=64 RATE=10000 bench/follow.sh     # the issue's target shape
#
# Environment:
#   JOBS   jobs printing at once (default 8); each reserves one CPU of baton's
#   RATE   lines a second per job (default 10000)
#   SECS   how long the daemon is measured (default 9), from 2 s after the last submission (the
#          follower takes a job up 1 s after its start)
#   BATON  the baton binary (default target/release/baton, built if missing)
#
# Prints the daemon's CPU (utime+stime of its process, all threads) as a share of one core,
# and the lines a second the jobs wrote meanwhile.
set -euo pipefail

JOBS=${JOBS:-8}
RATE=${RATE:-10000}
SECS=${SECS:-9}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BATON=${BATON:-$root/target/release/baton}
if [ ! -x "$BATON" ]; then
  (cd "$root" && cargo build --release -p baton-gpu --bins)
fi
command -v python3 >/dev/null || { echo "bench/follow.sh needs python3" >&2; exit 1; }

work=$(mktemp -d)
export BATON_HOME=$work/home
mkdir -p "$BATON_HOME" "$work/cwd"
cat > "$work/chatty.py" <<'EOF'
import os, sys, time
rate, stop = int(sys.argv[1]), sys.argv[2]
batch = max(1, rate // 100)
step = 0
while not os.path.exists(stop):
    for _ in range(batch):
        step += 1
        sys.stdout.write(f"step {step} loss={1.0 / step:.6f} lr=3e-4 grad_norm=0.91 tokens/s=51234\n")
    sys.stdout.flush()
    time.sleep(0.01)
EOF
cd "$work/cwd"
"$BATON" serve --sim-gpus 1 --cpus "$JOBS" > "$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true; rm -rf "$work"' EXIT
until "$BATON" status >/dev/null 2>&1; do sleep 0.05; done

ids=()
for _ in $(seq "$JOBS"); do
  ids+=("$("$BATON" submit -- python3 "$work/chatty.py" "$RATE" "$work/stop" 2>/dev/null)")
done
sleep 2
ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
# Bytes the jobs have written so far (a stat each, nothing read).
written() { stat -c %s "$BATON_HOME"/jobs/*/stdout | paste -sd+ | bc; }
t0=$(ticks); b0=$(written); s=$(date +%s.%N)
sleep "$SECS"
t1=$(ticks); b1=$(written); e=$(date +%s.%N)
touch "$work/stop"
hz=$(getconf CLK_TCK)
share=$(echo "($t1 - $t0) / $hz / ($e - $s) * 100" | bc -l)
"$BATON" wait "${ids[@]}" >/dev/null 2>&1 || true
# Lines a second in the window, from its bytes and the mean line length of all that was written.
total_bytes=$(written)
total_lines=$(cat "$BATON_HOME"/jobs/*/stdout | wc -l)
rate=$(echo "($b1 - $b0) * $total_lines / $total_bytes / ($e - $s)" | bc -l)
printf 'daemon CPU %.1f%% of one core over %.1f s; %d jobs x %d lines/s asked, %.0f lines/s written\n' \
  "$share" "$(echo "$e - $s" | bc -l)" "$JOBS" "$RATE" "$rate"
