#!/usr/bin/env bash
# Wake-up latency: from a job's exit to its report arriving through a channel, over JOBS jobs,
# for `cmd:` and for a real tmux pane; then the cost of the report for a job that printed 1 GB;
# then, with the real Claude Code and Codex TUIs installed, from a job's end to the new model
# turn that carries its report, per wake-up path (the scenarios of tests/real_agents.rs, run
# AGENT_RUNS times). See docs/benchmarks.md for what is measured and the recorded results.
#
#   bench/wakeup.sh                 # JOBS=100, both channels, the 1 GB report, the real agents
#   JOBS=20 SKIP_BIG=1 SKIP_AGENTS=1 bench/wakeup.sh
#
# Timing: each job's last act is to write its own clock (date +%s%N) to a file, then exit; the
# channel's receiver writes its clock when the report arrives. Latency = arrival - exit, both on
# this machine's clock, in ms. Jobs run one after another, so no delivery queues behind another.
set -euo pipefail

JOBS=${JOBS:-100}
SKIP_BIG=${SKIP_BIG:-0}
SKIP_AGENTS=${SKIP_AGENTS:-0}
AGENT_RUNS=${AGENT_RUNS:-3}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BATON=${BATON:-$root/target/release/baton}
[ -x "$BATON" ] || (cd "$root" && cargo build --release -p baton-gpu >&2)
unset BATON_SOCKET BATON_SIM_GPUS CLAUDE_CODE_SESSION_ID CLAUDE_CODE_MESSAGING_SOCKET \
    CLAUDE_CODE_MESSAGING_TOKEN CODEX_THREAD_ID TMUX TMUX_PANE || true
for tool in awk python3 tmux; do command -v $tool >/dev/null || { echo "needs $tool" >&2; exit 1; }; done

work=$(mktemp -d "${TMPDIR:-/tmp}/baton-wakeup.XXXXXX")
export BATON_HOME=$work/home
daemon=
cleanup() {
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
    tmux -S "$work/tmux.sock" kill-server 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$BATON_HOME" "$work/run"
cd "$work/run"
"$BATON" serve --sim-gpus 1 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 200); do [ -S "$BATON_HOME/baton.sock" ] && break; sleep 0.05; done

# p50, p99, max and mean of a file of latencies in ms.
stats() {
    sort -n "$1" | awk '{ v[NR] = $1; s += $1 } END {
        p50 = v[int((NR - 1) * 0.50) + 1]; p99 = v[int((NR - 1) * 0.99) + 1]
        printf "n=%d p50=%.1f ms p99=%.1f ms max=%.1f ms mean=%.1f ms\n", NR, p50, p99, v[NR], s / NR }'
}

# One job at a time: submit, wait for its arrival file, compute arrival - exit.
measure() { # channel-spec arrivals-dir label
    local spec=$1 arrivals=$2 label=$3 i id
    local lat=$work/$label.ms
    : >"$lat"
    for i in $(seq "$JOBS"); do
        id=$("$BATON" submit --notify "$spec" -- sh -c "echo loss=0.$i; date +%s%N > $work/exit.$i" 2>/dev/null)
        for _ in $(seq 1000); do [ -s "$arrivals/$id" ] && break; sleep 0.01; done
        [ -s "$arrivals/$id" ] || { echo "$label: job $id never arrived; daemon log:" >&2; tail -5 "$work/daemon.log" >&2; exit 1; }
        awk -v a="$(cat "$arrivals/$id")" -v e="$(cat "$work/exit.$i")" 'BEGIN { printf "%.3f\n", (a - e) / 1e6 }' >>"$lat"
    done
    printf "%-5s exit -> report arrived: " "$label"; stats "$lat"
}

mkdir -p "$work/cmd"
measure "cmd:date +%s%N > $work/cmd/\$BATON_JOB_ID" "$work/cmd" cmd

# A pane whose program timestamps each report's end marker as it arrives (the paste), by job id.
# It is named `claude` (run as `python3 .../claude`, as npm launchers run agents): baton types only
# into panes that run an agent.
mkdir -p "$work/tmux"
cat >"$work/claude" <<'PY'
import os, re, sys, time, termios
# Raw input, no echo: bytes arrive as tmux pastes them, as an agent's TUI reads them.
fd = sys.stdin.fileno()
attrs = termios.tcgetattr(fd)
attrs[3] &= ~(termios.ECHO | termios.ICANON)
termios.tcsetattr(fd, termios.TCSANOW, attrs)
seen = b""
while True:
    seen = (seen + os.read(fd, 65536))[-200:]
    now = time.time_ns()
    for job in re.findall(rb"\[end of baton report for job (\d+)\]", seen):
        path = sys.argv[1] + "/" + job.decode()
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write(str(now))
PY
python=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
tmux -S "$work/tmux.sock" new-session -d -x 200 -y 50 "$python" "$work/claude" "$work/tmux"
pane=$(tmux -S "$work/tmux.sock" display-message -p '#{pane_id}')
# Until the reader runs, the pane's foreground is a shell, which baton never types into.
for _ in $(seq 500); do
    [ "$(tmux -S "$work/tmux.sock" display-message -p -t "$pane" '#{pane_current_command}')" = "$(basename "$python")" ] && break
    sleep 0.01
done
export TMUX="$work/tmux.sock,1,0" TMUX_PANE=$pane
measure "tmux" "$work/tmux" tmux
unset TMUX TMUX_PANE
echo "(tmux: measured when the pasted text reaches the pane's program; Enter follows 500 ms later by design)"

if [ "$SKIP_BIG" != 1 ]; then
    # A job that prints 1 GiB of log lines, then fails with a traceback.
    rss() { awk '/VmHWM/ { print $2 }' "/proc/$daemon/status"; }
    before=$(rss)
    id=$("$BATON" submit -- python3 -c "
import sys
line = 'step=12345 loss=0.4321 lr=3e-4 tokens/s=81234 some ordinary log text here\n' * 1000
for _ in range((1 << 30) // len(line)): sys.stdout.write(line)
raise ValueError('diverged')" 2>/dev/null)
    "$BATON" wait "$id" >/dev/null || true
    after=$(rss)
    size=$(stat -c %s "$BATON_HOME/jobs/$id/stdout")
    built=$(grep "job=$id " "$work/daemon.log" | grep -o 'build_ms=[0-9.]*' | tail -1)
    echo "1 GiB report: stdout $((size >> 20)) MiB; $built; daemon peak RSS ${before} kB -> ${after} kB; report $(wc -c <"$BATON_HOME/jobs/$id/report.md") bytes"
fi

if [ "$SKIP_AGENTS" != 1 ]; then
    if ! command -v claude >/dev/null || ! command -v codex >/dev/null; then
        echo "real agents: skipped (claude or codex is not installed; .ci/run installs them)"
    else
        # Each scenario logs "[scenario] job N: ... delays from ended_at [MS] ms"; collected over
        # AGENT_RUNS runs of the test binary (real TUIs, a fake model server, tmux).
        echo "real agents ($(claude --version 2>/dev/null | head -1); codex $(codex --version 2>/dev/null | awk '{print $NF}')), $AGENT_RUNS runs:"
        : >"$work/agents.log"
        for _ in $(seq "$AGENT_RUNS"); do
            (cd "$root" && cargo test -q -p baton-gpu --test real_agents -- --nocapture --test-threads=2) \
                >>"$work/agents.log" 2>&1 || { echo "the real-agent tests failed:" >&2; tail -30 "$work/agents.log" >&2; exit 1; }
        done
        # (Two test threads share stderr: a line may follow another's "test ... ok" unbroken.)
        grep -oE '\[[^]]*\] job [0-9]+: [0-9]+ (report-carrying request|notice)\(s\), delays from ended_at \[[0-9, ]*\]' "$work/agents.log" |
            sed -E 's/^\[([^]]*)\].*\[([0-9, ]*)\]$/\1|\2/' |
            awk -F'|' '$2 != "" { split($2, d, ", "); n[$1]++; v[$1, n[$1]] = d[1] }
                END { for (k in n) { m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i]
                        for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                        printf "  %-36s n=%d min=%d ms median=%d ms max=%d ms\n", k, m, a[1], a[int((m + 1) / 2)], a[m] } }' | sort
    fi
fi
