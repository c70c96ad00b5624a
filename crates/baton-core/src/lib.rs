//! baton-core: the pure heart of baton.
//!
//! Everything here is deterministic code over plain data and an explicit clock ([`model::Millis`]):
//! no tokio, no files, no sockets. The daemon, the unit tests, the trace simulator and the
//! benchmarks all call the same functions, so what the tests prove is what the daemon does.

pub mod admission;
pub mod begin;
pub mod fair_share;
pub mod input;
pub mod lifecycle;
pub mod limits;
pub mod locality;
pub mod midrun;
pub mod model;
pub mod placement;
pub mod report;
pub mod scheduler;
pub mod signal;
pub mod sim;
pub mod sweep;
pub mod units;
pub mod waste;
pub mod windows;
pub mod workflow;

pub use model::{
    DepKind, Dependency, Gpu, JobId, JobState, Millis, PendingJob, ResourceRequest, RunningJob,
    Throttle, retry_delay,
};
pub use scheduler::{Plan, Start, WaitReason, earliest_start, plan};
