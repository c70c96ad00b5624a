//! How baton's answers are worded for the people and agents who read them, whichever way they
//! asked (the CLI or the MCP server): job and task tables, one-line summaries, the notes on where
//! a job just queued stands and on what will wake its submitter when it ends, and errors. Neither
//! caller owns these words, so that an agent reads the same thing from `baton submit` in its
//! shell as from the `submit_job` tool; where the two differ on purpose (a terminal's note and a
//! tool's shorter result), both forms are here, side by side.

use baton_core::JobState;
use std::time::SystemTime;

use baton_core::units::{format_duration, format_size};

use crate::api::JobView;

fn parse_time(text: &Option<String>) -> Option<SystemTime> {
    text.as_deref()
        .and_then(|t| humantime::parse_rfc3339(t).ok())
}

fn between(from: Option<SystemTime>, to: Option<SystemTime>) -> Option<i64> {
    let (from, to) = (from?, to?);
    Some(
        to.duration_since(from)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    )
}

/// How long the job has waited, run, or ran.
pub fn elapsed(job: &JobView) -> String {
    let now = Some(SystemTime::now());
    let submitted = parse_time(&Some(job.submitted_at.clone()));
    let started = parse_time(&job.started_at);
    let ended = parse_time(&job.ended_at);
    let ms = match (started, ended) {
        (Some(_), Some(_)) => between(started, ended),
        (Some(_), None) => between(started, now),
        (None, Some(_)) => between(submitted, ended),
        (None, None) => between(submitted, now),
    };
    ms.map(format_duration).unwrap_or_default()
}

/// The TIME column: how long it has waited, has run, or ran, said in so many words; for a
/// running job that prints its progress, how far it is and how long it has left.
pub fn time_column(job: &JobView) -> String {
    let took = elapsed(job);
    let what = match (job.state, &job.started_at) {
        (JobState::Running, _) => "running",
        (_, Some(_)) if job.state.is_terminal() => "ran",
        _ => "waited",
    };
    let mut text = format!("{what} {took}");
    if let Some(p) = &job.progress {
        if let Some(f) = p.fraction {
            text.push_str(&format!(", {}", percent(f)));
        }
        if let Some(left) = p.remaining_ms {
            text.push_str(&format!(", {} left", format_duration(left)));
        }
    }
    text
}

/// A fraction as a whole percentage, rounded down: 399 of 400 is 99%, not done.
fn percent(fraction: f64) -> String {
    format!("{}%", (fraction * 100.0).floor() as u32)
}

/// A running job's progress, one line under the table (a job asked for by id): the counters it
/// printed, how far that is, and when it should end at the pace so far.
pub fn progress_line(job: &JobView) -> String {
    let Some(p) = &job.progress else {
        return String::new();
    };
    let mut line = format!("job {} progress: {}", job.id, terminal_safe(&p.counters));
    if let Some(f) = p.fraction {
        line.push_str(&format!(" ({})", percent(f)));
    }
    match (&p.remaining_ms, &p.eta) {
        (Some(left), Some(eta)) => line.push_str(&format!(
            "; about {} left at its pace so far (by {eta})",
            format_duration(*left)
        )),
        _ => line.push_str("; no estimate of its end yet"),
    }
    line.push('\n');
    line
}

/// What the job asked for: `2`, `1x8GiB`, or `-` for none.
pub fn requested_column(job: &JobView) -> String {
    gpus_asked(job.gpus_requested, job.gpu_mem)
}

/// The GPUs it runs (or last ran) on, by index: `0,1`, or `-`.
pub fn assigned_column(job: &JobView) -> String {
    if job.gpus.is_empty() {
        return "-".into();
    }
    job.gpus
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

pub fn gpus_column(job: &JobView) -> String {
    if !job.gpus.is_empty() {
        let list = job
            .gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        return match job.gpu_mem {
            Some(mem) => format!("{list} ({})", format_size(mem)),
            None => list,
        };
    }
    requested_column(job)
}

/// A table with one row per job.
pub fn job_table(jobs: &[JobView]) -> String {
    // What a job asked for and which GPUs it has are two columns: a queued `4` is four GPUs, a
    // running `2` is GPU number 2.
    let header = [
        "ID", "NAME", "STATE", "GPUS", "ON", "PRIO", "OWNER", "TIME", "REASON",
    ];
    let rows: Vec<[String; 9]> = jobs
        .iter()
        .map(|j| {
            [
                j.id.to_string(),
                clip(&j.name, 24),
                j.state.to_string(),
                requested_column(j),
                assigned_column(j),
                j.priority.to_string(),
                j.owner.clone(),
                time_column(j),
                reason_column(j),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// `baton history`: one row per job.
pub fn history_table(rows: &[crate::api::HistoryView]) -> String {
    let header = [
        "ID", "NAME", "STATE", "EXIT", "WAIT", "RAN", "GPUS", "GPU EFF",
    ];
    let rows: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.id.to_string(),
                clip(&r.name, 24),
                r.state.to_string(),
                exit_column(r.exit_code, r.signal),
                format_duration(r.wait_ms),
                r.run_ms.map_or_else(|| "-".into(), format_duration),
                gpus_asked(r.gpus_requested, r.gpu_mem),
                r.gpu_util_pct
                    .map_or_else(|| "-".into(), |u| format!("{u:.1}%")),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// `baton history --csv`: a header line, then one line per job; times in RFC 3339, durations
/// in seconds.
pub fn history_csv(rows: &[crate::api::HistoryView]) -> String {
    let mut out = String::from(
        "id,name,state,exit_code,signal,owner,submitted_at,started_at,ended_at,wait_s,run_s,\
         gpus_requested,gpu_mem,gpus,gpu_util_pct\n",
    );
    let opt = |v: Option<String>| v.unwrap_or_default();
    for r in rows {
        let cells = [
            r.id.to_string(),
            csv_cell(&r.name),
            r.state.to_string(),
            opt(r.exit_code.map(|c| c.to_string())),
            opt(r.signal.map(|s| s.to_string())),
            csv_cell(&r.owner),
            r.submitted_at.clone(),
            opt(r.started_at.clone()),
            opt(r.ended_at.clone()),
            format!("{:.3}", r.wait_ms as f64 / 1000.0),
            opt(r.run_ms.map(|ms| format!("{:.3}", ms as f64 / 1000.0))),
            r.gpus_requested.to_string(),
            opt(r.gpu_mem.map(|m| m.to_string())),
            csv_cell(
                &r.gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            opt(r.gpu_util_pct.map(|u| format!("{u:.1}"))),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// A CSV field, quoted when it holds a comma, a quote or a line break (RFC 4180).
fn csv_cell(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// The EXIT column: the exit code, the signal that ended it, or `-`.
fn exit_column(code: Option<i32>, signal: Option<i32>) -> String {
    match (code, signal) {
        (Some(c), _) => c.to_string(),
        (None, Some(s)) => format!("sig {s}"),
        (None, None) => "-".into(),
    }
}

/// What a job asked for: `2`, `1x8GiB`, or `-` for none.
fn gpus_asked(count: u32, mem: Option<u64>) -> String {
    match (count, mem) {
        (0, _) => "-".into(),
        (n, Some(mem)) => format!("{n}x{}", format_size(mem)),
        (n, None) => format!("{n}"),
    }
}

/// The reason, and for a queued job the latest predicted start when there is one.
fn reason_column(job: &JobView) -> String {
    let mut reason = job.reason.clone().unwrap_or_default();
    if reason.is_empty()
        && let Some(sid) = job.slurm_job_id
    {
        reason = match &job.slurm_nodes {
            Some(nodes) => format!("Slurm job {sid} on {nodes}"),
            None => format!("Slurm job {sid}"),
        };
    }
    if job.state == JobState::Queued && !reason.contains("reserved to start") {
        // The bound from time limits, then the estimate from the running jobs' progress (there
        // only when sooner).
        let starts = [
            (&job.predicted_start, "starts within ", ""),
            (
                &job.expected_start,
                "expected in about ",
                " (running jobs' progress)",
            ),
        ];
        for (at, before, after) in starts {
            let wait = parse_time(at)
                .and_then(|at| at.duration_since(SystemTime::now()).ok())
                .map_or(0, |d| d.as_millis() as i64);
            if wait > 1000 {
                if !reason.is_empty() {
                    reason.push_str("; ");
                }
                reason.push_str(&format!("{before}{}{after}", format_duration(wait)));
            }
        }
    }
    reason
}

/// A workflow's tasks: one row each, in dependency order.
pub fn task_table(tasks: &[crate::api::WorkflowTaskView]) -> String {
    let header = ["TASK", "JOB", "STATE", "GPUS", "AFTER", "TIME", "REASON"];
    let rows: Vec<[String; 7]> = tasks
        .iter()
        .map(|t| {
            let gpus = match &t.reserved {
                Some(r) if t.job.state == JobState::Queued => format!(
                    "{} (reserved)",
                    r.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
                ),
                _ => gpus_column(&t.job),
            };
            [
                clip(&t.task, 24),
                t.job.id.to_string(),
                t.job.state.to_string(),
                gpus,
                if t.after.is_empty() {
                    "-".into()
                } else {
                    t.after.join(",")
                },
                elapsed(&t.job),
                t.job.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(&header, &rows)
}

/// Workflows, one row each (`baton workflow list`): TASKS is how many have ended, of how many.
pub fn workflow_table(rows: &[crate::api::WorkflowRow]) -> String {
    let header = ["ID", "NAME", "STATE", "TASKS", "OWNER", "SUBMITTED"];
    let now = SystemTime::now();
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|w| {
            let ago = parse_time(&Some(w.submitted_at.clone()))
                .and_then(|at| now.duration_since(at).ok())
                .map(|d| format!("{} ago", format_duration(d.as_millis() as i64)))
                .unwrap_or_else(|| w.submitted_at.clone());
            [
                w.id.to_string(),
                clip(&w.name, 24),
                w.state.as_str().to_string(),
                format!("{}/{}", w.tasks_done, w.tasks_total),
                w.owner.clone(),
                ago,
            ]
        })
        .collect();
    table(&header, &cells)
}

fn table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max - 1).collect();
        s.push('…');
        s
    }
}

/// `job 42 "sweep-lr3" failed after 2h13m: exit code 1`.
/// A job's mid-run alerts, one line each under the table (only a job asked for by id has
/// them): what was seen and when, and where it went.
pub fn alert_lines(job: &JobView) -> String {
    let mut out = String::new();
    for a in &job.alerts {
        let went = if a.deliveries.is_empty() {
            "recorded, nobody woken".to_string()
        } else {
            a.deliveries
                .iter()
                .map(|d| format!("{} {}", d.channel, d.state.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!(
            "job {} alert ({}, attempt {}) at {}: {} [{went}]\n",
            job.id,
            a.detector,
            a.attempt,
            a.seen_at,
            terminal_safe(&a.evidence),
        ));
    }
    out
}

pub fn summary(job: &JobView) -> String {
    let took = elapsed(job);
    let mut line = format!("job {} \"{}\" {}", job.id, job.name, job.state);
    match job.state {
        JobState::Queued | JobState::Running => line.push_str(&format!(" for {took}")),
        _ if job.started_at.is_some() => line.push_str(&format!(" after {took}")),
        _ => {}
    }
    if let Some(reason) = &job.reason {
        line.push_str(&format!(": {reason}"));
    } else if let Some(code) = job.exit_code {
        line.push_str(&format!(" (exit code {code})"));
    }
    line
}

/// An error in words: its message, then each of its causes after `: `. This is what the CLI has
/// always printed (`{:#}` of an `anyhow::Error` walks the same chain), and the MCP server's tool
/// errors say the same.
pub fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// What `status` says when it lists nothing: suggesting `--all` only where it would show more.
pub fn no_jobs(all: bool, mine: bool) -> &'static str {
    match (all, mine) {
        (true, false) => "no jobs: none has been submitted, or none is remembered any more",
        (true, true) => "no jobs from this session",
        (false, true) => {
            "no jobs from this session (queued, running, or ended in the last hour); `baton \
             status --mine --all` shows older ones"
        }
        (false, false) => {
            "no jobs (queued, running, or ended in the last hour); `baton status --all` shows \
             older ones"
        }
    }
}

/// The line under the default `status` table: the ended jobs it leaves out.
pub fn more_ended(n: u64) -> String {
    let noun = if n == 1 { "job" } else { "jobs" };
    format!(
        "… and {} more ended {noun}: `baton history`, or `baton status --all`",
        thousands(n)
    )
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Whether a job has ended, whichever way.
pub fn ended(job: &JobView) -> bool {
    job.state.is_terminal()
}

/// `queued job 42 (sweep-lr3); it starts now.`: the first words of the note on a job just
/// submitted, with its `standing` ([`standing`] or [`standing_brief`]).
pub fn job_queued(job: &JobView, standing: &str) -> String {
    format!("queued job {} ({}); {standing}.", job.id, job.name)
}

/// Where a job just submitted stands, in full, for a person at a terminal: whether it starts
/// now, what it waits for, and when it is predicted to start.
pub fn standing(job: &JobView) -> String {
    if job.held_by.is_some() {
        return format!(
            "it is held: it starts only after `baton release {}`",
            job.id
        );
    }
    if let Some(at) = job.begin_at.as_deref().filter(|at| !starts_now(at)) {
        return format!("it starts no earlier than {at} (--begin)");
    }
    if let Some(name) = &job.reservation {
        return format!(
            "it runs in reservation {name}, on its GPUs within its window, and is stopped at its \
             end (`baton reservations` shows when)"
        );
    }
    match (job.queue_position, &job.predicted_start) {
        (Some(0), Some(at)) if starts_now(at) => "it starts now".to_string(),
        (Some(0), Some(at)) => format!(
            "it is next in line; predicted start {at} at the latest, when running jobs reach \
             their time limits"
        ),
        (Some(0), None)
            if !job.after.is_empty()
                || !job.after_any.is_empty()
                || !job.after_failed.is_empty() =>
        {
            let deps: Vec<String> = job
                .after
                .iter()
                .chain(&job.after_any)
                .chain(&job.after_failed)
                .map(u64::to_string)
                .collect();
            format!("it starts once job {} has ended", deps.join(", "))
        }
        (Some(0), None) => {
            "it is next in line; no predicted start (a running job has no time limit)".to_string()
        }
        (Some(n), _) => format!(
            "{n} queued job{} ahead of it",
            if n == 1 { " is" } else { "s are" }
        ),
        // The Slurm backend: Slurm's queue decides when it starts.
        (None, _) => {
            "it goes to Slurm's queue (baton status shows its Slurm job id and state)".to_string()
        }
    }
}

/// The same in a few words, for an agent's tool result (the job object beside it has the
/// rest): nothing at all under Slurm, whose queue decides.
pub fn standing_brief(job: &JobView) -> String {
    if job.held_by.is_some() {
        return "held".to_string();
    }
    if let Some(name) = &job.reservation {
        return format!("in reservation {name}");
    }
    match job.queue_position {
        Some(0) => "next in line".to_string(),
        Some(n) => format!("{n} queued ahead"),
        None => String::new(),
    }
}

/// A predicted start within a second of now (RFC 3339 from the daemon's clock).
fn starts_now(at: &str) -> bool {
    humantime::parse_rfc3339(at).is_ok_and(|t| {
        t.duration_since(std::time::SystemTime::now())
            .map_or(true, |ahead| ahead.as_secs() < 1)
    })
}

/// `queued workflow 7 (sweep, 3 tasks, atomic); critical path prep -> train`: the first words
/// of the note on a workflow just submitted.
pub fn workflow_queued(wf: &crate::api::WorkflowView) -> String {
    format!(
        "queued workflow {} ({}, {} tasks{}); critical path {}",
        wf.id,
        wf.name,
        wf.tasks.len(),
        if wf.atomic { ", atomic" } else { "" },
        wf.critical_path.join(" -> ")
    )
}

/// Text from the daemon made safe for a terminal: every control character but newline and tab
/// dropped. Reports are sanitised when built; this keeps a terminal safe even from a report
/// file altered since.
pub fn terminal_safe(text: &str) -> String {
    text.chars()
        .filter(|&c| {
            c == '\n' || c == '\t' || !(c.is_control() || ('\u{80}'..='\u{9f}').contains(&c))
        })
        .collect()
}

/// What a delivery through one channel does, from its public spec (`claude:ID`, `file:PATH`…).
fn channel_effect(spec: &str) -> String {
    let (kind, target) = spec.split_once(':').unwrap_or((spec, ""));
    match kind {
        "claude" if spec.ends_with("(held)") => "Claude Code would keep it for a person to \
             approve (this session bypasses permissions, or its settings hold messages), so \
             nothing is sent there; `baton agent setup claude` installs the hook that delivers \
             in such sessions"
            .into(),
        "claude" if spec.ends_with("(refused)") => "Claude Code would turn it away (its \
             settings say crossSessionInbound = \"refuse\"), so nothing is sent there; `baton \
             agent setup claude` installs the hook that delivers in such sessions"
            .into(),
        "claude" => "a new turn in this Claude Code session".into(),
        "claude-hook" => "printed by the Claude Code hook, which starts a turn".into(),
        "codex" => format!("queued for Codex thread {target}"),
        "tmux" => format!("typed into tmux pane {target} if an agent runs there"),
        "webhook" => "posted to the webhook".into(),
        "cmd" => "given to the command".into(),
        "file" => "appended to the file; nothing watches it".into(),
        _ => "delivered".into(),
    }
}

fn is_session_spec(spec: &str) -> bool {
    let kind = spec.split(':').next().unwrap_or(spec);
    matches!(kind, "claude" | "claude-hook" | "codex" | "tmux")
}

/// What will happen when a job just submitted ends, worded for the person or agent that
/// submitted it, and true for the channels it has: whether anything will wake them (once: the
/// session channels are tried in order until one reaches the agent), and if not, the one thing
/// that will (`baton wait`, run in the background).
///
/// `from_shell`: the job was submitted by a shell command (Claude Code's Bash tool), after which
/// the baton hook runs; an MCP submit is followed by no hook.
pub fn delivery_note(job: &JobView, from_shell: bool) -> String {
    let inbox_blocked = job
        .notify
        .iter()
        .any(|s| s.starts_with("claude") && s.ends_with(')'));
    if inbox_blocked && from_shell && crate::notify::claude::hook_installed() {
        return format!(
            "when it ends, its report goes to {}. This Claude Code session would not start a \
             turn for a message on its inbox, so the baton hook installed in its settings \
             delivers the report instead: if you are an agent in that session, you will be woken \
             with it, once. No need to poll, sleep or check on the job.",
            job.notify.join(", ")
        );
    }
    let mut first_session: Option<&str> = None;
    let channels: Vec<String> = job
        .notify
        .iter()
        .map(|spec| {
            let later = is_session_spec(spec) && first_session.is_some();
            if is_session_spec(spec) && first_session.is_none() && !spec.ends_with(')') {
                first_session = Some(spec);
            }
            if later {
                format!(
                    "{spec} (only if {} does not reach the session)",
                    first_session.unwrap_or_default()
                )
            } else {
                format!("{spec} ({})", channel_effect(spec))
            }
        })
        .collect();
    let goes_to = if channels.is_empty() {
        "its report is stored with the job".to_string()
    } else {
        format!("its report goes to {}", channels.join(", "))
    };
    if job.wakes_caller {
        format!(
            "when it ends, {goes_to}. If you are an agent in that session, you will be woken \
             with it, once: no need to poll, sleep or check on the job. `baton wait {id}` blocks \
             until it ends and prints the report.",
            id = job.id
        )
    } else {
        let why = if job.notify.iter().any(|s| s.starts_with("claude")) {
            "the Claude Code inbox here does not start turns for baton's messages"
        } else {
            "this environment has no Claude Code inbox, Codex thread or tmux pane"
        };
        format!(
            "when it ends, {goes_to}. Nothing there wakes an agent: {why}. If you are an agent \
             and need the result, run `baton wait {id} --exit-zero` in the background (it returns \
             when the job ends, with the report, and its last line says how the job ended), or \
             run `baton wait {id}` now to block until then.",
            id = job.id
        )
    }
}

/// `sweep 4 "lr x bs" running: 3 running, 8 queued, 1 succeeded (12 runs, at most 4 at once)`.
pub fn sweep_line(sweep: &crate::api::SweepView) -> String {
    let counts: Vec<String> = [
        "running",
        "queued",
        "succeeded",
        "failed",
        "timeout",
        "cancelled",
    ]
    .iter()
    .filter_map(|state| sweep.counts.get(*state).map(|n| format!("{n} {state}")))
    .collect();
    let cap = sweep
        .max_parallel
        .map(|k| format!(", at most {k} at once"))
        .unwrap_or_default();
    format!(
        "sweep {} {:?} {}: {} ({} runs{cap})",
        sweep.id,
        sweep.name,
        sweep.state,
        counts.join(", "),
        sweep.runs
    )
}

/// What was queued for a sweep: its id and name, its runs' jobs, its cap.
pub fn sweep_queued(sweep: &crate::api::SweepView, first: u64, last: u64) -> String {
    let cap = match sweep.max_parallel {
        Some(k) => format!(", at most {k} at once"),
        None => String::new(),
    };
    let jobs = if first == last {
        format!("job {first}")
    } else {
        format!("jobs {first}-{last}")
    };
    format!(
        "queued sweep {} ({}): {} run{} as {jobs}{cap}. `baton sweep status {}` shows each run's parameters, state and final metrics.",
        sweep.id,
        sweep.name,
        sweep.runs,
        if sweep.runs == 1 { "" } else { "s" },
        sweep.id
    )
}

/// What happens when a sweep's last run ends: one comparison report goes through its channels
/// (each run's report only with `--notify-each`), and whether that wakes the agent; and the
/// early alert when it is clearly broken.
pub fn sweep_delivery_note(sweep: &crate::api::SweepView) -> String {
    let each = if sweep.notify_each {
        "each run's report and, "
    } else {
        ""
    };
    let stop = if sweep.on_failure == "stop" {
        "; if it is clearly broken (its first runs all fail the same way), the other runs are \
         cancelled and you hear of it at once"
    } else {
        "; if it is clearly broken (its first runs all fail the same way), you hear of it at \
         once, and the other runs go on"
    };
    if sweep.wakes_caller {
        format!(
            "{each}when the last run ends, one comparison report of all the runs goes to {}{stop}. \
             If you are an agent in that session, you will be woken with it: no need to poll, \
             sleep or check on the runs. `baton sweep wait {}` blocks until the end and prints it.",
            sweep.notify.join(", "),
            sweep.id
        )
    } else {
        let goes_to = if sweep.notify.is_empty() {
            "is stored with the sweep".to_string()
        } else {
            format!("goes to {}", sweep.notify.join(", "))
        };
        format!(
            "{each}when the last run ends, one comparison report of all the runs {goes_to}{stop}. \
             Nothing there wakes an agent (this environment has no Claude Code inbox, Codex \
             thread or tmux pane). If you are an agent and need the result, run `baton sweep \
             wait {}` in the background (it returns with the comparison when the last run ends).",
            sweep.id
        )
    }
}

/// The same for a workflow just submitted: each task's report and the workflow's summary go
/// through the tasks' channels.
pub fn workflow_delivery_note(wf: &crate::api::WorkflowView) -> String {
    let Some(first) = wf.tasks.first() else {
        return "it has no tasks".into();
    };
    let ids: Vec<String> = wf.tasks.iter().map(|t| t.job.id.to_string()).collect();
    if first.job.wakes_caller {
        format!(
            "each task's report, and the workflow's summary at its end, go to {}: if you are an \
             agent in that session, they wake you; no need to poll.",
            first.job.notify.join(", ")
        )
    } else {
        format!(
            "each task's report, and the workflow's summary at its end, go to {}, which wakes no \
             agent (this environment has no Claude Code inbox, Codex thread or tmux pane). If you \
             are an agent and need the results, run `baton wait {} --exit-zero` in the background.",
            first.job.notify.join(", "),
            ids.join(" ")
        )
    }
}
