//! [`build`]: from the daemon's facts and the scanner's findings to a [`Report`]: why the job
//! ended (the [`Cause`]), the one-line headline, and every list bounded and sanitized.

use super::metrics::{is_valid_metric, sort_for_display};
use super::sanitize::{clean, clip, headline_quote, sanitize_line, sanitize_lines};
use super::{
    Cause, FileChange, Frame, GpuUsage, JobFacts, MAX_FILES_KEPT, MAX_GPUS_KEPT, MAX_METRICS,
    Metric, OutputSummary, PythonException, Report, StreamSummary, TAIL_LINE_CHARS, TAIL_LINES,
};
use crate::model::JobState;
use crate::units::format_duration;

const MAX_NAME_CHARS: usize = 80;
const MAX_REASON_CHARS: usize = 300;
const MAX_PATH_CHARS: usize = 300;
const MAX_ARG_CHARS: usize = 300;
const MAX_ARGS: usize = 64;
const MAX_FINDING_CHARS: usize = TAIL_LINE_CHARS;
const MAX_MESSAGE_CHARS: usize = 500;
/// Job output quoted in the headline is cut to this.
const HEADLINE_QUOTE_CHARS: usize = 160;

/// Builds the report of an ended job. `output` may come from [`super::OutputScanner`] or from a
/// stored summary; either way its text is sanitized again and its lists bounded here.
pub fn build(
    facts: &JobFacts,
    output: &OutputSummary,
    gpus: &[GpuUsage],
    files: &[FileChange],
) -> Report {
    let output = clean_output(output);
    let reason = facts
        .reason
        .as_deref()
        .map(|r| clean(r, MAX_REASON_CHARS))
        .filter(|r| !r.is_empty());
    let cause = find_cause(facts, reason.as_deref(), &output);
    let run_ms = facts.started_at.map(|s| (facts.ended_at - s).max(0));
    let waited_until = facts.started_at.unwrap_or(facts.ended_at);
    let name = clean(&facts.name, MAX_NAME_CHARS);
    let headline = headline(facts, &name, run_ms, cause.as_ref(), &output.metrics);

    let mut gpus: Vec<GpuUsage> = gpus.iter().map(clean_gpu).collect();
    gpus.sort_by_key(|g| g.index);
    gpus.truncate(MAX_GPUS_KEPT);
    let efficiency = super::efficiency(&gpus, &facts.request);
    let mut gpu_indices = facts.gpus.clone();
    gpu_indices.truncate(MAX_GPUS_KEPT);

    let mut files_sorted: Vec<&FileChange> = files.iter().collect();
    files_sorted.sort_by(|a, b| {
        b.modified_at
            .cmp(&a.modified_at)
            .then_with(|| a.path.cmp(&b.path))
    });
    let files_kept = files_sorted
        .into_iter()
        .take(MAX_FILES_KEPT)
        .map(|f| FileChange {
            path: clean(&f.path, MAX_PATH_CHARS),
            ..f.clone()
        })
        .collect();

    // An argument may be a script (`sh -c $'set -e\npython a.py'`): its lines are kept.
    let mut command: Vec<String> = facts
        .command
        .iter()
        .take(MAX_ARGS)
        .map(|arg| clip(&sanitize_lines(arg), MAX_ARG_CHARS))
        .collect();
    if facts.command.len() > MAX_ARGS {
        command.push(format!(
            "…(+{} more arguments)",
            facts.command.len() - MAX_ARGS
        ));
    }

    Report {
        id: facts.id,
        name,
        state: facts.state,
        headline,
        exit_code: facts.exit_code,
        signal: facts.signal,
        cause,
        reason,
        queue_wait_ms: Some((waited_until - facts.submitted_at).max(0)),
        run_ms,
        attempts: facts.attempts,
        max_attempts: facts.max_attempts,
        command,
        cwd: clean(&facts.cwd, MAX_PATH_CHARS),
        gpus,
        efficiency,
        gpu_indices,
        gpu_sample_interval_ms: facts.gpu_sample_interval_ms.filter(|&ms| ms > 0),
        metrics: output.metrics,
        non_finite_loss: output.non_finite_loss,
        oom_killed: facts.oom_killed,
        checkpoint_signalled: facts.checkpoint_signalled.clone(),
        exception: output.exception,
        files: files_kept,
        files_total: files.len(),
        stdout: output.stdout,
        stderr: output.stderr,
        stdout_path: clean(&facts.stdout_path, MAX_PATH_CHARS),
        stderr_path: clean(&facts.stderr_path, MAX_PATH_CHARS),
        started_at: facts.started_at,
        ended_at: facts.ended_at,
        submitted_at: facts.submitted_at,
        alerts: facts
            .alerts
            .iter()
            .take(super::MAX_ALERTS_KEPT)
            .map(|a| super::MidrunNote {
                evidence: clean(&a.evidence, 200),
                ..a.clone()
            })
            .collect(),
    }
}

/// Why the job ended as it did, checked in order: what the daemon knows for sure first, then
/// what the output shows, most specific first (a CUDA OOM usually surfaces as a Python
/// exception, and other ranks then fail in NCCL), then the bare exit status.
fn find_cause(facts: &JobFacts, reason: Option<&str>, output: &OutputSummary) -> Option<Cause> {
    let non_finite_loss = || {
        output
            .non_finite_loss
            .clone()
            .map(|line| Cause::NonFiniteLoss { line })
    };
    match facts.state {
        JobState::Timeout => {
            return Some(Cause::TimeLimit {
                limit_ms: facts.time_limit,
            });
        }
        JobState::Cancelled => {
            return Some(Cause::Cancelled {
                by: reason.and_then(cancelled_by),
            });
        }
        // A run that "succeeded" with a NaN loss is worth flagging.
        JobState::Succeeded => return non_finite_loss(),
        JobState::Queued | JobState::Running => return None,
        JobState::Failed => {}
    }
    if reason.is_some_and(|r| starts_with_ignore_case(r, "dependency failed")) {
        return Some(Cause::DependencyFailed);
    }
    // The supervisor could not start the command: nothing ran, so nothing else can explain the
    // end, and the exit code (127, 126) is the supervisor's.
    if let Some(message) = facts
        .start_error
        .as_deref()
        .map(|e| clean(e, MAX_REASON_CHARS))
        .filter(|e| !e.is_empty())
    {
        return Some(Cause::LaunchFailed { message });
    }
    // What the cluster scheduler says it did outranks what the output suggests.
    match facts.scheduler_state.as_deref() {
        Some("OUT_OF_MEMORY") if facts.request.mem > 0 => {
            return Some(Cause::MemoryLimit {
                limit: facts.request.mem,
            });
        }
        Some("OUT_OF_MEMORY") => return Some(Cause::SchedulerOom),
        Some("NODE_FAIL") => {
            return Some(Cause::NodeFailure {
                nodes: facts.nodes.as_deref().map(|n| clean(n, MAX_NAME_CHARS)),
            });
        }
        Some("PREEMPTED") => return Some(Cause::Preempted),
        _ => {}
    }
    if facts.started_at.is_none()
        && let Some(message) = reason
    {
        return Some(Cause::LaunchFailed {
            message: message.to_string(),
        });
    }
    if facts.memory_exceeded && facts.request.mem > 0 {
        return Some(Cause::MemoryLimit {
            limit: facts.request.mem,
        });
    }
    // 137 = 128 + SIGKILL, when a shell between us and the process reported the kill.
    if facts.oom_killed && (facts.signal == Some(9) || facts.exit_code == Some(137)) {
        return Some(Cause::KernelOom);
    }
    if let Some(line) = &output.cuda_oom {
        return Some(Cause::CudaOom { line: line.clone() });
    }
    if let Some(line) = &output.nccl_error {
        return Some(Cause::Nccl { line: line.clone() });
    }
    if let Some(cause) = non_finite_loss() {
        return Some(cause);
    }
    if let Some(exception) = &output.exception {
        return Some(Cause::PythonException(exception.clone()));
    }
    if let Some(signal) = facts.signal {
        return Some(Cause::Signal {
            signal,
            name: signal_name(signal),
        });
    }
    match facts.exit_code {
        Some(code) if code != 0 => Some(Cause::ExitCode { code }),
        _ => None,
    }
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.len() >= prefix.len()
        && text.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
}

/// `alice` from "cancelled by alice".
fn cancelled_by(reason: &str) -> Option<String> {
    let lower = reason.to_ascii_lowercase();
    let at = lower.find("by ")? + "by ".len();
    let by = reason[at..].trim();
    (!by.is_empty()).then(|| by.to_string())
}

/// `SIGSEGV` for 11 (Linux numbering), `signal 42` for one without a common name.
pub(crate) fn signal_name(signal: i32) -> String {
    const NAMES: &[(i32, &str)] = &[
        (1, "SIGHUP"),
        (2, "SIGINT"),
        (3, "SIGQUIT"),
        (4, "SIGILL"),
        (5, "SIGTRAP"),
        (6, "SIGABRT"),
        (7, "SIGBUS"),
        (8, "SIGFPE"),
        (9, "SIGKILL"),
        (10, "SIGUSR1"),
        (11, "SIGSEGV"),
        (12, "SIGUSR2"),
        (13, "SIGPIPE"),
        (14, "SIGALRM"),
        (15, "SIGTERM"),
        (24, "SIGXCPU"),
        (25, "SIGXFSZ"),
        (31, "SIGSYS"),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == signal)
        .map_or_else(|| format!("signal {signal}"), |(_, name)| name.to_string())
}

/// `job 42 "sweep-lr3" failed after 2h13m: CUDA out of memory`. The headline sits outside any
/// fence, so job-derived text in it is inert: the name loses markdown's active characters, and
/// quoted output is a single code span.
fn headline(
    facts: &JobFacts,
    name: &str,
    run_ms: Option<i64>,
    cause: Option<&Cause>,
    metrics: &[Metric],
) -> String {
    let verb = match facts.state {
        JobState::Succeeded => "succeeded",
        JobState::Failed => "failed",
        JobState::Cancelled => "cancelled",
        JobState::Timeout => "timed out",
        JobState::Queued => "is still queued",
        JobState::Running => "is still running",
    };
    // A command that could not be started never ran, whatever time its supervisor took.
    let when = match run_ms {
        Some(ms) if !matches!(cause, Some(Cause::LaunchFailed { .. })) => {
            format!("after {}", format_duration(ms))
        }
        _ => "before starting".to_string(),
    };
    let mut line = format!("job {} \"{}\" {verb} {when}", facts.id, inert(name));
    let quote = |text: &str| headline_quote(text, HEADLINE_QUOTE_CHARS);
    match cause {
        None if facts.state == JobState::Succeeded => {
            let shown: Vec<String> = metrics
                .iter()
                .filter(|m| is_key_metric(&m.key))
                .take(2)
                .map(|m| format!("{}={}", m.key, m.value))
                .collect();
            if !shown.is_empty() {
                line.push_str(", ");
                line.push_str(&shown.join(", "));
            }
        }
        None => {}
        Some(Cause::Cancelled { by: Some(by) }) => {
            line.push_str(" by ");
            line.push_str(&inert(&clip(by, MAX_NAME_CHARS)));
        }
        Some(Cause::Cancelled { by: None }) => {}
        Some(Cause::NonFiniteLoss { line: quoted }) if facts.state == JobState::Succeeded => {
            line.push_str(", but the loss became NaN/inf: ");
            line.push_str(&quote(quoted));
        }
        Some(cause) => {
            line.push_str(": ");
            line.push_str(&cause_summary(cause, &quote));
        }
    }
    line
}

/// The cause in a few words, for the headline.
fn cause_summary(cause: &Cause, quote: &dyn Fn(&str) -> String) -> String {
    match cause {
        Cause::TimeLimit {
            limit_ms: Some(limit),
        } => format!("hit its time limit of {}", format_duration(*limit)),
        Cause::TimeLimit { limit_ms: None } => "hit its time limit".to_string(),
        Cause::Cancelled { by: Some(by) } => format!("cancelled by {}", inert(by)),
        Cause::Cancelled { by: None } => "cancelled".to_string(),
        Cause::DependencyFailed => "dependency failed".to_string(),
        Cause::LaunchFailed { message } => quote(message),
        Cause::KernelOom => "killed by the kernel OOM killer (out of host memory)".to_string(),
        Cause::MemoryLimit { limit } => format!(
            "exceeded its {} memory request",
            crate::units::format_size(*limit)
        ),
        Cause::CudaOom { .. } => "CUDA out of memory".to_string(),
        Cause::Nccl { line } => format!("NCCL/distributed error: {}", quote(line)),
        Cause::NonFiniteLoss { line } => format!("the loss became NaN/inf: {}", quote(line)),
        Cause::PythonException(e) => quote(&exception_text(e)),
        Cause::Signal { name, .. } => format!("killed by {name}"),
        Cause::ExitCode { code } => format!("exit code {code}"),
        Cause::SchedulerOom => "out of memory (the scheduler's memory limit)".to_string(),
        Cause::NodeFailure { .. } => "its node failed".to_string(),
        Cause::Preempted => "preempted".to_string(),
    }
}

/// `ValueError: lr must be positive`, or just the type when the message is empty.
pub(crate) fn exception_text(e: &PythonException) -> String {
    if e.message.is_empty() {
        e.kind.clone()
    } else {
        format!("{}: {}", e.kind, e.message)
    }
}

/// Metrics worth a place in a success headline: a loss or an accuracy-like score.
fn is_key_metric(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("loss") || k.contains("acc") || k.contains("f1") || k.contains("bleu")
}

/// Text for plain markdown (a name, a user): backticks and double quotes become single quotes,
/// and the characters that start links, images and raw HTML are escaped.
pub(crate) fn inert(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '`' | '"' => out.push('\''),
            '[' | ']' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// The summary with every string sanitized again and every list bounded.
fn clean_output(output: &OutputSummary) -> OutputSummary {
    let stream = |s: &StreamSummary| {
        let skip = s.tail.len().saturating_sub(TAIL_LINES);
        StreamSummary {
            bytes: s.bytes,
            lines: s.lines,
            // Indentation matters in output (tracebacks), so lines are not trimmed.
            tail: s.tail[skip..]
                .iter()
                .map(|l| clip(&sanitize_line(l.as_bytes()), TAIL_LINE_CHARS))
                .collect(),
            skipped_bytes: s.skipped_bytes,
        }
    };
    let mut metrics: Vec<Metric> = output
        .metrics
        .iter()
        .filter(|m| is_valid_metric(&m.key, &m.value))
        .take(MAX_METRICS)
        .cloned()
        .collect();
    sort_for_display(&mut metrics);
    let finding = |f: &Option<String>| {
        f.as_deref()
            .map(|l| clean(l, MAX_FINDING_CHARS))
            .filter(|l| !l.is_empty())
    };
    OutputSummary {
        stdout: stream(&output.stdout),
        stderr: stream(&output.stderr),
        metrics,
        exception: output.exception.as_ref().map(clean_exception),
        cuda_oom: finding(&output.cuda_oom),
        nccl_error: finding(&output.nccl_error),
        non_finite_loss: finding(&output.non_finite_loss),
    }
}

fn clean_exception(e: &PythonException) -> PythonException {
    PythonException {
        kind: clean(&e.kind, 120),
        message: clean(&e.message, MAX_MESSAGE_CHARS),
        frame: e.frame.as_ref().map(|f| Frame {
            file: clean(&f.file, 200),
            line: f.line,
            function: clean(&f.function, 100),
        }),
    }
}

fn clean_gpu(g: &GpuUsage) -> GpuUsage {
    let finite = |v: Option<f64>| v.filter(|x| x.is_finite());
    GpuUsage {
        mean_util_pct: finite(g.mean_util_pct),
        peak_util_pct: finite(g.peak_util_pct),
        ..g.clone()
    }
}
