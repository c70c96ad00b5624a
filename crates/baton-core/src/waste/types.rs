//! The plain data that crosses the waste engine's boundary: what the daemon observed
//! ([`Snapshot`]) and what the engine decided ([`Decision`], stored as one audit row each).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::{JobId, Millis};

/// One observation of the machine, built by the daemon from a GPU sample after attributing each
/// GPU process to a job (through its `BATON_JOB_ID`) or to nobody.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub at: Millis,
    pub gpus: Vec<GpuObs>,
    /// Running jobs, and ended jobs whose processes still hold GPU memory (`running = false`), so
    /// that the engine can tell whose leftovers they are and whether they are protected.
    pub jobs: Vec<JobObs>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuObs {
    pub index: u32,
    /// Percent; `None` where the driver does not report it (e.g. MIG slices).
    pub util: Option<f64>,
    pub mem_used: u64,
    pub processes: Vec<ProcObs>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcObs {
    pub pid: u32,
    /// Bytes this process holds on this GPU.
    pub mem: u64,
    pub user: Option<String>,
    pub owner: ProcOwner,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcOwner {
    /// A process of a running job.
    Job(JobId),
    /// A process carrying the `BATON_JOB_ID` of a job that is no longer running, or whose main
    /// process ended.
    Ended(JobId),
    /// A process of no baton job.
    Stranger,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobObs {
    pub id: JobId,
    pub owner: String,
    pub name: String,
    pub tags: BTreeMap<String, String>,
    /// The GPU indices allocated to it.
    pub gpus: Vec<u32>,
    pub started_at: Millis,
    /// False once its main process ended.
    pub running: bool,
    /// When its output said the work was done and it was then found alive, quiet and its GPUs
    /// idle (the mid-run `finished-but-alive` alert), while that stands (it has printed
    /// nothing since): what it still holds is held after finish, as if it had exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub said_finished_at: Option<Millis>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    Zombie,
    IdleJob,
    HeldAfterExit,
}

impl Rule {
    pub const ALL: [Rule; 3] = [Rule::Zombie, Rule::IdleJob, Rule::HeldAfterExit];

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Zombie => "zombie",
            Rule::IdleJob => "idle_job",
            Rule::HeldAfterExit => "held_after_exit",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown waste rule {0:?} (expected one of zombie, idle_job, held_after_exit)")]
pub struct UnknownRule(pub String);

impl FromStr for Rule {
    type Err = UnknownRule;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Rule::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| UnknownRule(s.to_string()))
    }
}

/// The rungs of the escalation ladder, in order, plus `Skip` for a protected target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Notify,
    Deprioritize,
    Sigterm,
    Sigkill,
    Skip,
}

impl Action {
    pub const ALL: [Action; 5] = [
        Action::Notify,
        Action::Deprioritize,
        Action::Sigterm,
        Action::Sigkill,
        Action::Skip,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Notify => "notify",
            Action::Deprioritize => "deprioritize",
            Action::Sigterm => "sigterm",
            Action::Sigkill => "sigkill",
            Action::Skip => "skip",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown waste action {0:?} (expected one of notify, deprioritize, sigterm, sigkill, skip)"
)]
pub struct UnknownAction(pub String);

impl FromStr for Action {
    type Err = UnknownAction;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownAction(s.to_string()))
    }
}

/// One step of one target's ladder (or its skip): what to record in the audit and, unless
/// `dry_run`, to carry out. Job-level decisions (idle) have no `pid` or `gpu`; process-level ones
/// (zombie, held after exit) name the pid and the GPU where it holds the most memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub at: Millis,
    pub rule: Rule,
    pub job: Option<JobId>,
    pub pid: Option<u32>,
    pub gpu: Option<u32>,
    pub action: Action,
    pub dry_run: bool,
    /// One human line, e.g. `job 12 (alice/train) idle on GPUs 0,1: mean 0.8 % over 1h; warning 1 of 2`.
    pub message: String,
    pub evidence: Evidence,
}

/// Why a decision was taken, compactly enough for one audit row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// At most [`MAX_EVIDENCE_SAMPLES`], spread evenly over the window (first and last included),
    /// so the row shows the condition holding across the whole window, not just its last minute.
    pub samples: Vec<EvidenceSample>,
    /// How long the condition was looked at: the idle window, how long a process held its memory,
    /// or the time since SIGTERM.
    pub window_ms: Millis,
    /// The mean utilisation over the window (idle jobs only).
    pub mean_util: Option<f64>,
    /// The memory held at the decision: the job's GPUs' total, or the process's largest holding.
    pub mem: Option<u64>,
    /// The threshold that was crossed, in words: `mean utilisation ≤ 5 % over 1h`.
    pub threshold: String,
}

pub const MAX_EVIDENCE_SAMPLES: usize = 12;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvidenceSample {
    pub at: Millis,
    pub gpu: Option<u32>,
    /// The job's GPUs' mean utilisation, or the utilisation of the GPU the process is on.
    pub util: Option<f64>,
    pub mem: Option<u64>,
}
