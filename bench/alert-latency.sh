#!/usr/bin/env bash
# Mid-run alert latency (issue 17): from a job's flushed `loss=nan` line to its alert appended to
# the job's `file:` channel, for jobs quiet before the NaN (the follower is woken by inotify) and
# jobs printing 10,000 lines a second (read every 100 ms while they print). Each job prints for
# 3 s, then the NaN, writes the time just after it, and prints 2 s more. The channel file is
# polled every 1 ms. See docs/benchmarks.md for the recorded results.
#
#   bench/alert-latency.sh            # N=5 jobs each way
#
# Environment: N (jobs each way, default 5), BATON (the binary, default target/release/baton).
set -euo pipefail

N=${N:-5}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BATON=${BATON:-$root/target/release/baton}
if [ ! -x "$BATON" ]; then
  (cd "$root" && cargo build --release -p baton-gpu --bins)
fi
command -v python3 >/dev/null || { echo "bench/alert-latency.sh needs python3" >&2; exit 1; }

work=$(mktemp -d)
export BATON_HOME=$work/home
mkdir -p "$BATON_HOME" "$work/cwd"
cat > "$work/job.py" <<'PY'
import sys, time
chatty, mark = sys.argv[1] == "chatty", sys.argv[2]
def run(secs, line):
    t0, step = time.time(), 0
    while time.time() - t0 < secs:
        if chatty:
            for _ in range(100):
                step += 1
                sys.stdout.write(line(step))
            sys.stdout.flush()
        time.sleep(0.01)
run(3, lambda s: f"step {s} loss={1.0 / s:.6f} lr=3e-4\n")
sys.stdout.write("step 99999 loss=nan lr=3e-4\n")
sys.stdout.flush()
open(mark, "w").write(repr(time.time()))
run(2, lambda s: f"step {s} loss=nan lr=3e-4\n")
PY
cat > "$work/poll.py" <<'PY'
import os, sys, time
inbox, mark = sys.argv[1:3]
while not (os.path.exists(inbox) and os.path.getsize(inbox) > 0):
    time.sleep(0.001)
seen = time.time()
while not (os.path.exists(mark) and os.path.getsize(mark) > 0):
    time.sleep(0.001)
print(f"{1000 * (seen - float(open(mark).read())):.1f}")
PY
cd "$work/cwd"
"$BATON" serve --sim-gpus 1 --cpus 2 > "$work/daemon.log" 2>&1 &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true; rm -rf "$work"' EXIT
until "$BATON" status >/dev/null 2>&1; do sleep 0.05; done

for mode in quiet chatty; do
  samples=()
  for i in $(seq "$N"); do
    "$BATON" submit --notify "file:$work/inbox.$mode.$i" -- \
      python3 "$work/job.py" "$mode" "$work/mark.$mode.$i" >/dev/null 2>&1
    samples+=("$(python3 "$work/poll.py" "$work/inbox.$mode.$i" "$work/mark.$mode.$i")")
    "$BATON" wait --all >/dev/null 2>&1 || true
  done
  echo "$mode before the NaN: ${samples[*]} ms"
done
