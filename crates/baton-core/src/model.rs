//! The job and resource model shared by every part of baton: ids, states, GPU requests,
//! dependencies, and the two views of a job the scheduler works on (pending and running).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Milliseconds since the Unix epoch. The core never reads a clock: callers pass `now`.
pub type Millis = i64;

/// A job's id: positive, increasing in submission order, never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The lifecycle of a job (DESIGN §3): `queued` → `running` → one terminal state, or `queued` →
/// `cancelled`. Retries move a failed attempt back to `queued` on the same job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    #[default]
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Timeout,
}

impl JobState {
    pub const ALL: [JobState; 6] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Timeout => "timeout",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Queued | JobState::Running)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "unknown job state {0:?} (expected one of queued, running, succeeded, failed, cancelled, timeout)"
)]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// What a job asks of the node it runs on: `count` GPUs, each either whole (`mem_per_gpu ==
/// None`) or shared with other memory-sized jobs up to the GPU's memory, and `cpus` cores and
/// `mem` bytes of the node's own memory (0: none reserved), taken from the node's capacity
/// (see [`NodeCapacity`]) like GPUs, so CPU-only jobs queue once the cores are taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceRequest {
    pub count: u32,
    pub mem_per_gpu: Option<u64>,
    #[serde(default)]
    pub cpus: u32,
    #[serde(default)]
    pub mem: u64,
}

impl ResourceRequest {
    pub fn whole(count: u32) -> Self {
        ResourceRequest {
            count,
            mem_per_gpu: None,
            cpus: 0,
            mem: 0,
        }
    }

    pub fn shared(count: u32, mem_per_gpu: u64) -> Self {
        ResourceRequest {
            count,
            mem_per_gpu: Some(mem_per_gpu),
            cpus: 0,
            mem: 0,
        }
    }

    /// The same request with `cpus` cores and `mem` bytes of the node's memory.
    pub fn with_host(self, cpus: u32, mem: u64) -> Self {
        ResourceRequest { cpus, mem, ..self }
    }

    /// Whether it asks anything of the node besides GPUs.
    pub fn uses_host(&self) -> bool {
        self.cpus > 0 || self.mem > 0
    }
}

/// What one node offers besides its GPUs: the cores and the memory jobs may take (the machine's
/// own, less what is kept for the system). A node with no capacity given has no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    pub node: u32,
    pub cpus: u32,
    pub mem: u64,
}

/// A cluster as the scheduler sees it: its GPUs and, per node, the cores and memory jobs may
/// take. Without `hosts`, cores and memory are not limited (the simulator's traces).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub gpus: Vec<Gpu>,
    #[serde(default)]
    pub hosts: Vec<NodeCapacity>,
}

impl Cluster {
    /// GPUs only: cores and memory unlimited.
    pub fn gpus(gpus: &[Gpu]) -> Cluster {
        Cluster {
            gpus: gpus.to_vec(),
            hosts: Vec::new(),
        }
    }
}

/// One GPU as the scheduler sees it. `index` is unique across the cluster; `node` says which
/// machine it is in (0 for a single machine). A job's GPUs always come from one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    pub memory_total: u64,
    #[serde(default)]
    pub node: u32,
}

/// Whether a dependency must succeed (`--after`) or merely end (`--after-any`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DepKind {
    /// After it succeeds (`--after`, Slurm's `afterok`).
    Success,
    /// After it ends, whatever the result (`--after-any`, `afterany`).
    Any,
    /// Only after it does not succeed (`--after-failed`, `afternotok`): a clean-up or a
    /// fallback; if it succeeds, the dependent never runs.
    Failure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub job: JobId,
    pub kind: DepKind,
}

/// A queued job as the scheduler needs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingJob {
    pub id: JobId,
    /// Higher first.
    pub priority: i64,
    /// Ties in priority go to the earlier submission.
    pub submitted_at: Millis,
    pub request: ResourceRequest,
    /// The job's wall-clock limit; `None` means it may run forever (backfill treats it so).
    pub time_limit: Option<Millis>,
    pub deps: Vec<Dependency>,
    /// The atomic workflow this job belongs to, while that workflow waits for admission: all of
    /// its jobs are admitted together or none is.
    #[serde(default)]
    pub gang: Option<u64>,
    /// GPUs reserved for this job by its workflow's admission: it starts on exactly these once
    /// its dependencies allow, and nothing else may use them meanwhile.
    #[serde(default)]
    pub reserved: Option<Vec<u32>>,
    /// The node to place it on if it fits there (where its predecessors' data is; see
    /// [`crate::locality`]).
    #[serde(default)]
    pub prefer_node: Option<u32>,
    /// Jobs it asked to share a node with (`colocate_with`). One that starts in the same pass
    /// before it decides its node, ahead of `prefer_node`.
    #[serde(default)]
    pub colocate: Vec<JobId>,
    /// For a workflow's task: the predicted time from its start to the end of its workflow along
    /// the longest path through it. Among jobs of equal priority submitted together, the one
    /// with the longest path goes first (critical path first).
    #[serde(default)]
    pub critical_path: Millis,
    /// Its owner's recent use of the GPUs (see `fair_share`): among jobs of equal priority, the
    /// owner who used less goes first, so one user's long sweep cannot lock out another.
    #[serde(default)]
    pub owner_usage: u64,
    /// A retried job waits out its backoff: it starts no earlier than this (see [`retry_delay`]).
    #[serde(default)]
    pub not_before: Option<Millis>,
    /// It was submitted to start no earlier than this (`--begin`).
    #[serde(default)]
    pub begin: Option<Millis>,
    /// A run of a sweep that caps how many of its runs go at once (`--array 0-99%4`).
    #[serde(default)]
    pub throttle: Option<Throttle>,
    /// The reservation it runs in (`--reservation NAME`): the id of its [`crate::windows::Window`].
    #[serde(default)]
    pub window: Option<u64>,
}

impl PendingJob {
    /// A plain queued job: no workflow, no reservation, no placement preference.
    pub fn new(
        id: JobId,
        priority: i64,
        submitted_at: Millis,
        request: ResourceRequest,
        time_limit: Option<Millis>,
        deps: Vec<Dependency>,
    ) -> PendingJob {
        PendingJob {
            id,
            priority,
            submitted_at,
            request,
            time_limit,
            deps,
            gang: None,
            reserved: None,
            prefer_node: None,
            colocate: Vec::new(),
            critical_path: 0,
            owner_usage: 0,
            not_before: None,
            begin: None,
            throttle: None,
            window: None,
        }
    }
}

/// A cap on how many jobs of one group (a sweep's runs) run at once: `running` of the group
/// hold resources when the pass begins (running, or with a reservation), and at most `max` may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttle {
    pub group: u64,
    pub max: u32,
    pub running: u32,
}

/// How long a failed job waits before its next attempt: `first` after the first failure,
/// doubling with every further one, at most `max`. A job that fails at once must not re-run in
/// a tight loop (`--retries 100 -- false` would otherwise start a hundred times a second).
pub fn retry_delay(failed_attempts: u32, first: Millis, max: Millis) -> Millis {
    let doublings = failed_attempts.saturating_sub(1).min(62);
    first
        .max(0)
        .saturating_mul(1i64.checked_shl(doublings).unwrap_or(i64::MAX))
        .min(max)
}

/// A running job: what it holds and when it will have ended at the latest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningJob {
    pub id: JobId,
    pub gpus: Vec<u32>,
    pub request: ResourceRequest,
    /// `started_at + time_limit`; `None` when the job has no limit.
    pub ends_by: Option<Millis>,
}
