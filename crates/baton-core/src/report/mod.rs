//! The end-of-run report (DESIGN §4): what a finished job's facts, its output, its GPU usage and
//! the files it wrote come down to, as markdown for people and agents (`report.md`) and as a
//! plain struct for machines (`report.json`).
//!
//! Everything here is pure: the daemon reads the files and the GPU samples and hands over bytes and
//! numbers. The pieces, in the order data flows through them:
//! - [`OutputScanner`] (`scanner`) reads each output stream once, in bounded memory, and keeps
//!   what a report needs: line counts, the last lines, metrics (`metrics`), the last Python
//!   traceback (`traceback`) and lines that name a known failure (`signals`).
//! - [`build`] (`cause`) turns the facts and that summary into a [`Report`]: the cause, the
//!   headline, bounded and sanitized lists.
//! - [`Report::to_markdown`] (`markdown`) prints it in at most [`MAX_REPORT_BYTES`].
//!
//! Job output is hostile input: a job can print terminal escapes, bidi overrides, markdown fences
//! or text that reads like instructions to an agent. Every job-derived string passes
//! [`sanitize_line`] before it lands in a [`Report`], and in the markdown quoted output only ever
//! appears inside a fence it cannot close or inside an inline code span.

mod candidates;
mod cause;
mod efficiency;
mod markdown;
mod metrics;
pub mod progress;
mod sanitize;
mod scanner;
mod search;
mod signals;
mod traceback;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::model::{JobState, Millis, ResourceRequest};

pub use cause::build;
pub use efficiency::{Efficiency, efficiency};
pub use markdown::fenced;
pub use sanitize::sanitize_line;
pub use scanner::{OutputScanner, SoFar};
// The sweep's comparison report (`crate::sweep::compare`) prints the same kinds of job-derived
// text, so it quotes and cuts it with the same helpers.
pub(crate) use cause::{exception_text, inert};
pub(crate) use markdown::{cut_at_line, rfc3339};
pub(crate) use sanitize::{clean, clip, inline_code};

/// [`Report::to_markdown`] never returns more than this many bytes (about 1,500 tokens).
pub const MAX_REPORT_BYTES: usize = 6000;

/// Which of a job's two output streams bytes came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    pub fn index(self) -> usize {
        match self {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }
}

/// What [`OutputScanner`] kept of a job's output.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputSummary {
    pub stdout: StreamSummary,
    pub stderr: StreamSummary,
    /// The last value of each metric key, well-known names (loss, accuracy, step...) first. At
    /// most [`MAX_METRICS`] keys.
    pub metrics: Vec<Metric>,
    /// The final exception of the last complete Python traceback.
    pub exception: Option<PythonException>,
    /// The last line that reports a CUDA out-of-memory error (sanitized, truncated).
    pub cuda_oom: Option<String>,
    /// The last line that reports an NCCL / distributed backend error (sanitized, truncated).
    pub nccl_error: Option<String>,
    /// The first line where a loss became NaN or infinite (sanitized, truncated): that is when
    /// training went wrong, later lines only repeat it. Text Python quotes in a traceback (its
    /// source lines, the exception's message) does not count: it is code, not output.
    pub non_finite_loss: Option<String>,
}

/// Most metric keys an [`OutputSummary`] keeps.
pub const MAX_METRICS: usize = 16;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamSummary {
    /// Every byte of the stream, including those the caller skipped.
    pub bytes: u64,
    /// Lines seen (fed); a skipped region and the partial line after it are not counted.
    pub lines: u64,
    /// The last lines, oldest first, sanitized, each at most [`TAIL_LINE_CHARS`] characters.
    pub tail: Vec<String>,
    /// Bytes at the start of the stream that were not scanned (see [`OutputScanner::skipped`]).
    #[serde(default)]
    pub skipped_bytes: u64,
}

/// Lines of each stream a summary keeps.
pub const TAIL_LINES: usize = 20;
/// Characters of one tail line a summary keeps (longer lines end in a marker).
pub const TAIL_LINE_CHARS: usize = 240;

/// One metric as the job printed it: `loss=0.23` is `{ key: "loss", value: "0.23" }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    pub key: String,
    /// The number as printed (`0.23`, `3e-4`, `91%`, `nan`, `-inf`).
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PythonException {
    /// The exception's type as printed: `ValueError`, `torch.OutOfMemoryError`. Serialized as
    /// `type` because [`Cause`] is tagged by a `kind` field and embeds this struct.
    #[serde(rename = "type")]
    pub kind: String,
    /// The first line of the message; empty for e.g. `KeyboardInterrupt`.
    pub message: String,
    /// The innermost frame of the traceback (for a `SyntaxError`, where the bad line is).
    pub frame: Option<Frame>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub file: String,
    pub line: u32,
    /// Empty when Python printed none (a `SyntaxError` location).
    pub function: String,
}

/// Facts the daemon knows about the ended job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobFacts {
    pub id: u64,
    pub name: String,
    /// A terminal state.
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The daemon's reason: "dependency failed", "cancelled by alice", "command not found: foo".
    pub reason: Option<String>,
    /// Why the command could not be started at all, as the supervisor recorded it ("command not
    /// found: foo"). The exit code is then the supervisor's (127, 126, as a shell's would be),
    /// not the program's: this, not the exit code, is the cause.
    #[serde(default)]
    pub start_error: Option<String>,
    pub command: Vec<String>,
    pub cwd: String,
    pub gpus: Vec<u32>,
    /// What it asked for (the report compares it with what it used).
    #[serde(default)]
    pub request: ResourceRequest,
    /// The cluster scheduler's final state for it, when a scheduler ran it (Slurm's
    /// `OUT_OF_MEMORY`, `NODE_FAIL`, `PREEMPTED`, ...), and the nodes it ran on.
    #[serde(default)]
    pub scheduler_state: Option<String>,
    #[serde(default)]
    pub nodes: Option<String>,
    pub attempts: u32,
    pub max_attempts: u32,
    pub submitted_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Millis,
    pub time_limit: Option<Millis>,
    /// The daemon saw the kernel OOM killer act during the run.
    pub oom_killed: bool,
    /// Its checkpoint signal (`--signal`, as `SIGUSR1@60`) was sent in its last attempt.
    #[serde(default)]
    pub checkpoint_signalled: Option<String>,
    /// It was killed for using more of the machine's memory than it reserved (`--mem`, which
    /// is `request.mem`).
    #[serde(default)]
    pub memory_exceeded: bool,
    /// How often the GPU monitor samples: a job shorter than this may have no samples at all,
    /// and the report says so rather than just "no samples".
    #[serde(default)]
    pub gpu_sample_interval_ms: Option<Millis>,
    pub stdout_path: String,
    pub stderr_path: String,
    /// The mid-run alerts raised while it ran (`crate::midrun`), oldest first.
    #[serde(default)]
    pub alerts: Vec<MidrunNote>,
}

/// A mid-run alert as a job's report lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MidrunNote {
    /// `nan`, `error` (`crate::midrun::Detector`).
    pub detector: String,
    /// `wake`: its submitter was woken; `note`: recorded only.
    pub action: String,
    /// When what it tells of was first seen.
    pub seen_at: Millis,
    /// The output line that showed it (sanitized).
    pub evidence: String,
}

/// Most mid-run alerts a [`Report`] lists.
pub const MAX_ALERTS_KEPT: usize = 8;

/// One GPU's usage over the job's run, summarised by the monitor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuUsage {
    pub index: u32,
    pub samples: u32,
    pub mean_util_pct: Option<f64>,
    pub peak_util_pct: Option<f64>,
    pub peak_mem_bytes: Option<u64>,
    pub total_mem_bytes: u64,
}

/// A file the job created or modified in its working directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative to the job's working directory.
    pub path: String,
    pub bytes: u64,
    pub modified_at: Millis,
    pub created: bool,
}

/// Why a job ended the way it did, when that is recognisable. Checked in the order listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Cause {
    TimeLimit {
        limit_ms: Option<i64>,
    },
    Cancelled {
        by: Option<String>,
    },
    DependencyFailed,
    /// The command never ran: the daemon could not launch it, or the supervisor could not start
    /// it (`command not found: foo`).
    LaunchFailed {
        message: String,
    },
    KernelOom,
    /// Killed for using more of the machine's memory than it reserved (`--mem`), by its
    /// cgroup's limit, the supervisor's watch, or the cluster scheduler.
    MemoryLimit {
        limit: u64,
    },
    CudaOom {
        line: String,
    },
    Nccl {
        line: String,
    },
    NonFiniteLoss {
        line: String,
    },
    PythonException(PythonException),
    Signal {
        signal: i32,
        name: String,
    },
    ExitCode {
        code: i32,
    },
    /// The cluster scheduler killed it at its memory limit (Slurm `OUT_OF_MEMORY`).
    SchedulerOom,
    /// The node it ran on failed (Slurm `NODE_FAIL`).
    NodeFailure {
        nodes: Option<String>,
    },
    /// The scheduler stopped it for higher-priority work (Slurm `PREEMPTED`).
    Preempted,
}

/// The report of one ended job. Every string in it that came from the job or its submitter is
/// sanitized; lists are bounded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub id: u64,
    pub name: String,
    pub state: JobState,
    /// One line: `job 42 "sweep-lr3" failed after 2h13m: CUDA out of memory`.
    pub headline: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub cause: Option<Cause>,
    /// The daemon's reason, when it gave one.
    #[serde(default)]
    pub reason: Option<String>,
    /// From submission to start, or to the end for a job that never started.
    pub queue_wait_ms: Option<i64>,
    pub run_ms: Option<i64>,
    pub attempts: u32,
    pub max_attempts: u32,
    pub command: Vec<String>,
    pub cwd: String,
    pub gpus: Vec<GpuUsage>,
    /// How well it used them, and what to ask for next time (absent without samples).
    #[serde(default)]
    pub efficiency: Option<Efficiency>,
    /// The GPU indices the job held, whether or not the monitor sampled them.
    #[serde(default)]
    pub gpu_indices: Vec<u32>,
    /// How often the GPU monitor sampled (see [`JobFacts::gpu_sample_interval_ms`]).
    #[serde(default)]
    pub gpu_sample_interval_ms: Option<Millis>,
    pub metrics: Vec<Metric>,
    /// A non-finite loss seen in the output, also when it is not the cause (a job that failed
    /// for another reason).
    #[serde(default)]
    pub non_finite_loss: Option<String>,
    /// The kernel OOM killer acted during the run (also when it is not the cause).
    #[serde(default)]
    pub oom_killed: bool,
    /// Its checkpoint signal came before its time limit (`SIGUSR1@60`: so many seconds before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_signalled: Option<String>,
    /// The last Python exception in the output, also when another cause wins (a CUDA OOM is
    /// usually raised as `torch.OutOfMemoryError`; its frame says where).
    #[serde(default)]
    pub exception: Option<PythonException>,
    /// Newest first, at most [`MAX_FILES_KEPT`].
    pub files: Vec<FileChange>,
    /// How many files changed in all.
    pub files_total: usize,
    pub stdout: StreamSummary,
    pub stderr: StreamSummary,
    pub stdout_path: String,
    pub stderr_path: String,
    pub started_at: Option<Millis>,
    pub ended_at: Millis,
    pub submitted_at: Millis,
    /// The mid-run alerts raised while it ran, at most [`MAX_ALERTS_KEPT`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<MidrunNote>,
}

/// Most files a [`Report`] lists (the markdown shows fewer).
pub const MAX_FILES_KEPT: usize = 50;
/// Most GPUs a [`Report`] lists.
pub const MAX_GPUS_KEPT: usize = 64;
