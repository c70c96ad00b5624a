//! The lifecycle's decisions, as pure functions of plain facts and an explicit clock: how an
//! attempt ended (its supervisor's record, or Slurm's word), whether that is a retry or the end,
//! and how a workflow ends with its last task. The daemon and the Slurm tracker ask these; the
//! tests drive them with no daemon.

use super::{Ending, Exit, Outcome, Transition};
use crate::model::{DepKind, Dependency, JobState, Millis};
use crate::units::format_duration;

/// What the supervisor recorded when an attempt's last process was gone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttemptExit {
    pub exit: Exit,
    /// The time limit stopped it.
    pub timed_out: bool,
    /// The supervisor was asked to stop it (a cancel).
    pub cancelled: bool,
    /// The command could not be started at all (`command not found: foo`).
    pub error: Option<String>,
    /// When it ended (0: not recorded).
    pub ended_at: Millis,
    /// It was killed for using more than the memory it reserved (this many bytes).
    pub memory_exceeded: Option<u64>,
}

/// The facts about a job that its ending depends on.
#[derive(Clone, Copy, Debug)]
pub struct JobFacts<'a> {
    /// Who asked to cancel it, if anyone did.
    pub cancel_requested_by: Option<&'a str>,
    /// Why baton stopped it (`Transition::RequestStop`): the cancel then ends it as failed.
    pub stop_reason: Option<&'a str>,
    pub time_limit: Option<Millis>,
    /// The reservation whose window's end is this attempt's limit (it came before the job's
    /// own time limit, or the job has none).
    pub limit_from_reservation: Option<&'a str>,
    /// Attempts started so far, this one included.
    pub attempt: u32,
    pub retries: u32,
}

/// How an attempt ended, from its supervisor's record (`None`: the supervisor died without one).
pub fn attempt_ending(job: JobFacts<'_>, exit: Option<&AttemptExit>, now: Millis) -> Ending {
    let Some(exit) = exit else {
        return match (job.stop_reason, job.cancel_requested_by) {
            (Some(why), Some(_)) => Ending::failed(why, now),
            (None, Some(by)) => Ending::cancelled(format!("cancelled by {by}"), now),
            _ => Ending::failed("the supervisor died without recording an exit status", now),
        };
    };
    let cancelled_by = job.cancel_requested_by.filter(|_| exit.cancelled);
    let (outcome, reason) = if let (Some(why), Some(_)) = (job.stop_reason, cancelled_by) {
        (Outcome::Failed, why.to_string())
    } else if let Some(by) = cancelled_by {
        (Outcome::Cancelled, format!("cancelled by {by}"))
    } else if exit.timed_out
        && let Some(name) = job.limit_from_reservation
    {
        (
            Outcome::Timeout,
            format!("its reservation {name} ended: a job in a reservation ends with its window"),
        )
    } else if exit.timed_out {
        let limit = job.time_limit.map(format_duration).unwrap_or_default();
        (Outcome::Timeout, format!("time limit of {limit} reached"))
    } else if let Some(err) = &exit.error {
        (Outcome::Failed, format!("could not start: {err}"))
    } else if exit.exit.code == Some(0) {
        (Outcome::Succeeded, String::new())
    } else if let Some(limit) = exit.memory_exceeded {
        (
            Outcome::Failed,
            format!(
                "exceeded its {} memory request (killed)",
                crate::units::format_size(limit)
            ),
        )
    } else if let Some(sig) = exit.exit.signal {
        (
            Outcome::Failed,
            format!("killed by signal {sig} ({})", signal_name(sig)),
        )
    } else {
        (
            Outcome::Failed,
            format!("exit code {}", exit.exit.code.unwrap_or(-1)),
        )
    };
    Ending {
        outcome,
        exit: exit.exit,
        reason: (!reason.is_empty()).then_some(reason),
        at: if exit.ended_at > 0 {
            exit.ended_at
        } else {
            now
        },
    }
}

/// What Slurm says of a job it is done with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlurmEnd {
    /// Slurm's state (`COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`, ...).
    pub state: String,
    /// Slurm's reason (`DependencyNeverSatisfied`, ...).
    pub reason: String,
    pub exit: Exit,
    pub nodes: String,
    pub end: Option<Millis>,
}

/// The terminal state of a job Slurm reports ended.
pub fn slurm_ending(job: JobFacts<'_>, info: &SlurmEnd, now: Millis) -> Ending {
    let limit = || job.time_limit.map(format_duration).unwrap_or_default();
    let (outcome, reason) = match info.state.as_str() {
        "COMPLETED" if info.exit.code.unwrap_or(0) == 0 => (Outcome::Succeeded, String::new()),
        "CANCELLED" => match job.cancel_requested_by {
            Some(by) => (Outcome::Cancelled, format!("cancelled by {by}")),
            None if info.reason.contains("Dependency") => (
                Outcome::Failed,
                "dependency failed (Slurm cancelled it: its dependency can never be met)".into(),
            ),
            None => (
                Outcome::Cancelled,
                "cancelled in Slurm (scancel outside baton)".into(),
            ),
        },
        "TIMEOUT" | "DEADLINE" => (
            Outcome::Timeout,
            format!("time limit of {} reached", limit()),
        ),
        "OUT_OF_MEMORY" => (
            Outcome::Failed,
            "out of memory: Slurm killed it at its memory limit (OUT_OF_MEMORY)".into(),
        ),
        "NODE_FAIL" => (
            Outcome::Failed,
            format!(
                "node failure: Slurm lost its node {} (NODE_FAIL)",
                info.nodes
            ),
        ),
        "PREEMPTED" => (
            Outcome::Failed,
            "preempted: Slurm stopped it for higher-priority work (PREEMPTED)".into(),
        ),
        "BOOT_FAIL" => (
            Outcome::Failed,
            "its node failed to boot (BOOT_FAIL)".into(),
        ),
        _ => match (info.exit.signal, info.exit.code) {
            (Some(sig), _) => (
                Outcome::Failed,
                format!("killed by signal {sig} ({})", signal_name(sig)),
            ),
            (None, Some(code)) if code != 0 => (Outcome::Failed, format!("exit code {code}")),
            _ => (Outcome::Failed, format!("Slurm state {}", info.state)),
        },
    };
    Ending {
        outcome,
        exit: info.exit,
        reason: (!reason.is_empty()).then_some(reason),
        at: info.end.unwrap_or(now),
    }
}

/// What becomes of a job whose running attempt ended with `ending`: a failed attempt with
/// retries left goes back to the queue until `delay` after `now` (the caller's backoff for this
/// many failures), anything else is the job's end. A job someone asked to cancel is never
/// retried, even when it failed on its own before the cancel reached it.
pub fn after_attempt(job: JobFacts<'_>, ending: Ending, delay: Millis, now: Millis) -> Transition {
    if ending.outcome != Outcome::Failed
        || job.attempt > job.retries
        || job.cancel_requested_by.is_some()
    {
        return Transition::End(ending);
    }
    let left = job.retries + 1 - job.attempt;
    let reason = format!(
        "attempt {} {}; retrying in {} ({} {} left)",
        job.attempt,
        ending.reason.as_deref().unwrap_or("failed"),
        format_duration(delay),
        left,
        if left == 1 { "retry" } else { "retries" }
    );
    Transition::Retry {
        exit: ending.exit,
        reason,
        not_before: now.saturating_add(delay),
    }
}

/// Why a job can never run because of one of its dependencies, if it cannot: the dependency
/// does not exist (`None`), or ended other than `--after` asks (`--after-any` takes any end).
/// A dependency still queued or running is no failure: the job waits.
pub fn dependency_failure(dep: &Dependency, state: Option<JobState>) -> Option<String> {
    match (state, dep.kind) {
        (None, _) => Some(format!("dependency failed: job {} does not exist", dep.job)),
        (Some(JobState::Succeeded), DepKind::Failure) => Some(format!(
            "dependency failed: job {} succeeded, and this job was to run only if it did not \
             (--after-failed)",
            dep.job
        )),
        (Some(JobState::Succeeded), _) => None,
        (Some(s), DepKind::Success) if s.is_terminal() => {
            Some(format!("dependency failed: job {} ended {s}", dep.job))
        }
        (Some(_), _) => None,
    }
}

/// A workflow's state: `queued` until a task starts, `running`, then one final state.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum WorkflowState {
    #[default]
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl WorkflowState {
    pub const ALL: [WorkflowState; 5] = [
        WorkflowState::Queued,
        WorkflowState::Running,
        WorkflowState::Succeeded,
        WorkflowState::Failed,
        WorkflowState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Queued => "queued",
            WorkflowState::Running => "running",
            WorkflowState::Succeeded => "succeeded",
            WorkflowState::Failed => "failed",
            WorkflowState::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<WorkflowState> {
        WorkflowState::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, WorkflowState::Queued | WorkflowState::Running)
    }
}

impl std::fmt::Display for WorkflowState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a workflow ends once every task has: succeeded if every task did, cancelled if any was
/// cancelled and none failed or timed out, else failed.
pub fn workflow_outcome(tasks: &[JobState]) -> WorkflowState {
    let any = |s: JobState| tasks.contains(&s);
    if tasks.iter().all(|&s| s == JobState::Succeeded) {
        WorkflowState::Succeeded
    } else if any(JobState::Cancelled) && !any(JobState::Failed) && !any(JobState::Timeout) {
        WorkflowState::Cancelled
    } else {
        WorkflowState::Failed
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "signal",
    }
}
