#!/usr/bin/env bash
# History that scales (issue 15): a store with JOBS ended jobs (default 100,000), RECENT of
# them (default 10,000) ended in the last day, the rest over the 59 days before. Measures the
# daemon's memory at rest, `baton status`, `baton status --since 1d --json`, and submit latency
# while two clients list in a loop; checks each against its target and exits 1 if one is
# missed. See docs/benchmarks.md for what is measured and the recorded results.
#
#   bench/history.sh                       # JOBS=100000 RECENT=10000 SUBMITS=200
#   JOBS=20000 bench/history.sh            # a smaller store
#   BATON=/path/to/baton bench/history.sh  # another build (needs status --since)
#   LISTER="status --all --json" bench/history.sh   # what the two clients list (default below)
#
# The store is written straight into SQLite with the daemon stopped (sqlite3, one statement
# each for jobs, events, deliveries and GPU usage, from a template job that a real daemon ran,
# so every row has a real environment and channel), which takes seconds instead of the hours
# 100,000 submissions would.
set -euo pipefail

JOBS=${JOBS:-100000}
RECENT=${RECENT:-10000}
SUBMITS=${SUBMITS:-200}
LISTER=${LISTER:-status --since 1d --json}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BATON=${BATON:-$root/target/release/baton}
[ -x "$BATON" ] || (cd "$root" && cargo build --release -p baton-gpu >&2)
unset BATON_SOCKET BATON_SIM_GPUS CLAUDE_CODE_SESSION_ID CLAUDE_CODE_MESSAGING_SOCKET \
    CLAUDE_CODE_MESSAGING_TOKEN CODEX_THREAD_ID TMUX TMUX_PANE || true
for tool in awk python3 sqlite3; do command -v $tool >/dev/null || { echo "needs $tool" >&2; exit 1; }; done

work=$(mktemp -d "${TMPDIR:-/tmp}/baton-history.XXXXXX")
export BATON_HOME=$work/home
daemon= listers=
cleanup() {
    for p in $listers; do kill "$p" 2>/dev/null || true; done
    [ -n "$daemon" ] && [ -n "${blocker:-}" ] && "$BATON" cancel "$blocker" >/dev/null 2>&1 || true
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    [ "${KEEP:-0}" = 1 ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$BATON_HOME" "$work/run"
cd "$work/run"

start() {
    "$BATON" serve --sim-gpus 4 2>>"$work/daemon.log" &
    daemon=$!
    for _ in $(seq 600); do "$BATON" status >/dev/null 2>&1 && return; sleep 0.05; done
    echo "the daemon did not start; its log:" >&2; tail -20 "$work/daemon.log" >&2; exit 1
}
stop() { "$BATON" shutdown >/dev/null; wait "$daemon" 2>/dev/null || true; daemon=; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$daemon/status"; }
ms_now() { date +%s%N; }
# p50, p99, max of a file of numbers (ms).
stats() {
    sort -n "$1" | awk '{ v[NR] = $1 } END {
        printf "n=%d p50=%.1f ms p99=%.1f ms max=%.1f ms", NR, v[int((NR - 1) * 0.50) + 1],
            v[int((NR - 1) * 0.99) + 1], v[NR] }'
}
p() { sort -n "$1" | awk -v q="$2" '{ v[NR] = $1 } END { printf "%.1f", v[int((NR - 1) * q) + 1] }'; }
time_ms() { # command... ; prints its wall time in ms
    local t0 t1
    t0=$(ms_now); "$@" >/dev/null; t1=$(ms_now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1e6 }'
}

# 1. A template job, run by a real daemon: the schema, a real environment and channel.
start
"$BATON" submit --gpus 1 --name template -- true >/dev/null 2>&1
"$BATON" wait 1 >/dev/null
stop

# 2. JOBS ended jobs from it, written straight into the database.
t0=$(ms_now)
sqlite3 "$BATON_HOME/baton.db" >/dev/null <<SQL
PRAGMA journal_mode=WAL;
BEGIN;
CREATE TEMP TABLE n (i INTEGER PRIMARY KEY);
WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < $JOBS)
INSERT INTO n SELECT i FROM s;
CREATE TEMP TABLE t AS SELECT * FROM jobs WHERE id = 1;
-- ended_at in id order, as a real history: the last RECENT jobs spread over the last day, the
-- ones before them over the 59 days before that.
CREATE TEMP TABLE e AS SELECT i, CAST(strftime('%s', 'now') AS INTEGER) * 1000 - CASE
    WHEN $JOBS - i < $RECENT THEN ($JOBS - i + 1) * (86400000 / $RECENT)
    ELSE 86400000 + ($JOBS - $RECENT - i + 1) * (59 * 86400000 / MAX($JOBS - $RECENT, 1)) END
    AS ended FROM n;
INSERT INTO jobs (id, name, state, command, cwd, env, owner_uid, owner, priority,
    gpus_requested, gpu_mem, time_limit_ms, retries, attempt, deps, tags, submitted_at,
    started_at, ended_at, exit_code, signal, reason, gpus, workflow_id, cancel_requested_by,
    umask, notify, session, task, reserved, lease_until, critical_path_ms, colocate)
SELECT 1 + e.i, 'sweep-' || (e.i % 500), CASE WHEN e.i % 100 < 90 THEN 'succeeded'
        WHEN e.i % 100 < 97 THEN 'failed' WHEN e.i % 100 < 99 THEN 'cancelled' ELSE 'timeout' END,
    t.command, t.cwd, t.env, t.owner_uid, t.owner, 0, 1, NULL, NULL, 0, 1, '[]', '{}',
    e.ended - 600000, e.ended - 540000, e.ended,
    CASE WHEN e.i % 100 < 90 THEN 0 WHEN e.i % 100 < 97 THEN 1 ELSE NULL END, NULL,
    CASE WHEN e.i % 100 < 90 THEN NULL WHEN e.i % 100 < 97 THEN 'exit code 1'
        WHEN e.i % 100 < 99 THEN 'cancelled by root' ELSE 'time limit reached' END,
    '[' || (e.i % 4) || ']', NULL, NULL, t.umask, t.notify, NULL, NULL, NULL, NULL, 0, '[]'
FROM e, t;
INSERT INTO events (job_id, at, kind, detail)
SELECT 1 + e.i, e.ended - 600000, 'submitted', 'root' FROM e UNION ALL
SELECT 1 + e.i, e.ended - 540000, 'started', 'gpus [' || (e.i % 4) || ']' FROM e UNION ALL
SELECT 1 + e.i, e.ended - 540000, 'contained', 'below its supervisor (subreaper)' FROM e UNION ALL
SELECT 1 + e.i, e.ended, 'succeeded', '' FROM e;
INSERT INTO deliveries (job_id, channel, state, attempts, next_at, delivered_at)
SELECT 1 + e.i, '{"kind":"file","path":"/dev/null"}', 'delivered', 1, e.ended, e.ended FROM e;
INSERT INTO job_gpu_usage (job_id, attempt, gpu, sampled_ms, idle_ms, samples, util_samples,
    util_sum, util_peak, mem_peak, updated_at)
SELECT 1 + e.i, 1, e.i % 4, 540000, 0, 108, 108, 108 * (20 + e.i % 70), 95, 1 << 30, e.ended FROM e;
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
SQL
t1=$(ms_now)
db_mb=$(du -m "$BATON_HOME/baton.db" | cut -f1)
echo "store: $JOBS ended jobs ($RECENT in the last day), ${db_mb} MB, written in $(( (t1 - t0) / 1000000 )) ms"

# 3. The daemon at rest, once it has started (and applied retention) with that history.
start
sleep 3
rest=$(rss_kb)
echo "daemon RSS at rest: $(( rest / 1024 )) MB ($rest kB)"

# 4. `baton status` (the bounded default view) and `status --since 1d --json`.
: >"$work/status.ms"
for _ in $(seq 30); do time_ms "$BATON" status >>"$work/status.ms"; done
echo "baton status: $(stats "$work/status.ms")"
"$BATON" status | tail -1
count=$("$BATON" status --since 1d --json | grep -c '"id":')
: >"$work/since.ms"
for _ in $(seq 10); do time_ms "$BATON" status --since 1d --json >>"$work/since.ms"; done
echo "baton status --since 1d --json ($count jobs): $(stats "$work/since.ms")"
: >"$work/history.ms"
for _ in $(seq 5); do time_ms "$BATON" history --since 1d --csv >>"$work/history.ms"; done
echo "baton history --since 1d --csv: $(stats "$work/history.ms")"
after_lists=$(rss_kb)
echo "daemon RSS after those listings: $(( after_lists / 1024 )) MB"

# 5. Submit latency while two clients list in a loop. What is timed is the API's answer to
# `POST /v1/jobs`, from a client that keeps one process (python3), so that the figure is the
# daemon's and not the exec of a CLI process; the submitted jobs wait behind one that holds
# every GPU, so that what competes with a submission is the listings, not jobs starting and
# ending. The CLI's own wall time (`baton submit`, process start included) is shown too.
blocker=$("$BATON" submit --gpus 4 --name blocker -- sleep 3600 2>/dev/null)
cat >"$work/submit.py" <<'PY'
import json, os, socket, sys, time
sock, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
body = json.dumps({"command": ["true"], "cwd": os.getcwd(), "name": "bench", "gpus": 1,
                   "env": dict(os.environ)}).encode()
head = b"POST /v1/jobs HTTP/1.0\r\nHost: baton\r\nContent-Type: application/json\r\n"
with open(out, "w") as f:
    for _ in range(n):
        t0 = time.perf_counter()
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        s.close()
        f.write("%.3f\n" % ((time.perf_counter() - t0) * 1000))
        assert data.split(b" ")[1].startswith(b"2"), data[:300]
PY
submit_api() { python3 "$work/submit.py" "$BATON_HOME/baton.sock" "$SUBMITS" "$1"; }
submit_api "$work/submit-quiet.ms"
echo "POST /v1/jobs, nothing else running: $(stats "$work/submit-quiet.ms")"
for _ in 1 2; do
    ( while :; do "$BATON" $LISTER >/dev/null 2>&1 || true; done ) &
    listers="$listers $!"
done
sleep 1
submit_api "$work/submit.ms"
echo "POST /v1/jobs while two clients run \`baton $LISTER\` in a loop: $(stats "$work/submit.ms")"
: >"$work/submit-cli.ms"
for _ in $(seq 50); do time_ms "$BATON" submit --gpus 1 --name bench -- true >>"$work/submit-cli.ms" 2>/dev/null; done
echo "baton submit (the CLI, process start included), the same: $(stats "$work/submit-cli.ms")"
for p in $listers; do kill "$p" 2>/dev/null || true; done
wait $listers 2>/dev/null || true
listers=
loaded=$(rss_kb)
echo "daemon RSS after it all: $(( loaded / 1024 )) MB"
"$BATON" cancel "$blocker" >/dev/null
stop

# 6. The targets.
failed=0
check() { # label value limit
    if awk -v v="$2" -v l="$3" 'BEGIN { exit !(v < l) }'; then echo "ok    $1: $2 < $3"
    else echo "MISS  $1: $2 >= $3"; failed=1; fi
}
check "RSS at rest (MB)" "$(( rest / 1024 ))" 30
check "baton status p50 (ms)" "$(p "$work/status.ms" 0.5)" 20
check "status --since 1d --json p50 (ms)" "$(p "$work/since.ms" 0.5)" 300
check "POST /v1/jobs p99 while two clients list (ms)" "$(p "$work/submit.ms" 0.99)" 10
exit $failed
