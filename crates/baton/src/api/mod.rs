//! The protocol between clients (CLI, and later MCP and the web page) and the daemon: plain serde
//! types and the route paths, nothing else. Every route into the daemon speaks these types, so a
//! feature is written once.

pub mod client;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The API version prefix; a breaking change gets a new one.
pub const PREFIX: &str = "/v1";

/// `POST /v1/jobs`: queue a job.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub command: Vec<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub gpus: u32,
    /// Bytes per GPU; `None` asks for whole GPUs.
    #[serde(default)]
    pub gpu_mem: Option<u64>,
    #[serde(default)]
    pub priority: i64,
    /// Start after these jobs succeed.
    #[serde(default)]
    pub after: Vec<u64>,
    /// Start after these jobs end, whatever their result.
    #[serde(default)]
    pub after_any: Vec<u64>,
    #[serde(default)]
    pub time_limit_ms: Option<i64>,
    #[serde(default)]
    pub retries: u32,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Absolute working directory.
    pub cwd: String,
    /// The submitter's environment, captured at submit time.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The submitter's file-creation mask; the job runs with it.
    #[serde(default)]
    pub umask: Option<u32>,
}

/// The job object of DESIGN §3, plus a few fields beyond the contract.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: u64,
    pub name: String,
    pub state: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub gpus: Vec<u32>,
    pub command: Vec<String>,
    pub cwd: String,
    pub owner: String,
    pub priority: i64,
    pub submitted_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub reason: Option<String>,
    pub workflow_id: Option<u64>,
    /// GPUs asked for (the allocation is `gpus`).
    pub gpus_requested: u32,
    /// Bytes per GPU for shared jobs; null for whole GPUs.
    pub gpu_mem: Option<u64>,
    pub time_limit_ms: Option<i64>,
    pub retries: u32,
    /// Attempts started so far (0 while never started).
    pub attempt: u32,
    pub after: Vec<u64>,
    pub after_any: Vec<u64>,
    pub tags: BTreeMap<String, String>,
}

/// `GET /v1/jobs?ids=1,2&all=true`: the named jobs, or the queue.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListQuery {
    /// Comma-separated ids; empty for the default listing.
    #[serde(default)]
    pub ids: Option<String>,
    /// Every job the store holds, not only active and recently ended ones.
    #[serde(default)]
    pub all: bool,
}

/// `POST /v1/wait`: block until every named job has ended, or the timeout passes.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    pub ids: Vec<u64>,
    #[serde(default)]
    pub timeout_ms: Option<i64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WaitResponse {
    /// False when the timeout passed first.
    pub done: bool,
    pub jobs: Vec<JobView>,
}

/// `POST /v1/cancel`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub ids: Vec<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CancelResponse {
    /// The jobs as they are after the request (running ones are being stopped).
    pub jobs: Vec<JobView>,
}

/// `GET /v1/jobs/{id}/logs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LogsQuery {
    #[serde(default)]
    pub stderr: bool,
    /// Only the last N lines.
    #[serde(default)]
    pub tail: Option<usize>,
    /// Keep the response open and stream new output until the job ends.
    #[serde(default)]
    pub follow: bool,
}

/// `GET /v1/jobs/{id}/events`: one entry of a job's append-only history.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventView {
    pub job: u64,
    pub at: String,
    /// submitted, started, retry, requeued, cancel-requested, or the final state.
    pub kind: String,
    pub detail: String,
}

/// `GET /v1/gpus`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpusResponse {
    /// `nvml`, `simulated`, or `none`.
    pub backend: String,
    pub gpus: Vec<GpuView>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuView {
    pub index: u32,
    pub model: String,
    pub memory_total: u64,
    pub memory_used: u64,
    /// 0-100, when known.
    pub utilization: Option<u32>,
    /// Jobs baton placed on this GPU.
    pub jobs: Vec<u64>,
    /// Memory promised to shared jobs on this GPU.
    pub memory_allocated: u64,
    /// Whether one job holds the whole GPU.
    pub exclusive: bool,
    pub processes: Vec<GpuProcess>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub memory_used: u64,
}

/// `GET /v1/info`: who the daemon is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InfoResponse {
    pub version: String,
    pub pid: u32,
    pub home: String,
    pub system: bool,
    pub gpu_backend: String,
    pub gpu_count: usize,
}

/// The body of every error response.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}
