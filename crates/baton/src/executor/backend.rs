//! The seam between the daemon and where its jobs run. A [`Backend`] (this machine's
//! supervisors, `local.rs`, or a Slurm cluster, `slurm/backend.rs`) is driven by the daemon
//! through these few calls, and asks the daemon for what it needs through [`Host`]: the job
//! table under the daemon's lock (every change a transition), and the daemon's verdicts on an
//! attempt's end. Neither side names the other's type: the daemon asks its backend, never
//! which one it is, and a backend could be driven by a test host.

use std::collections::BTreeMap;
use std::ops::DerefMut;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_core::lifecycle::{Ending, Transition};
use baton_core::{JobId, Millis};
use futures_util::future::BoxFuture;

use super::{JobFiles, RunAs};
use crate::jobs::{JobTable, TableError};
use crate::store::JobRecord;
use crate::tasks::Tasks;

/// What a backend may ask of the daemon that drives it.
pub trait Host: Send + Sync + 'static {
    /// The job table, held under the daemon's lock until dropped.
    type Locked<'a>: DerefMut<Target = JobTable>
    where
        Self: 'a;

    fn lock_jobs(&self) -> Self::Locked<'_>;

    /// One scheduling pass over this machine's GPUs by the pure scheduler: the starts it
    /// decided, committed (each job `Start`ed), for the backend to launch, and when to look
    /// again if a job waits for a moment rather than an event (a retry's backoff). `contain`
    /// is asked, before the commit, how each job about to start is contained (it may make its
    /// cgroup): that `contained` event is committed with the start.
    fn place(
        &self,
        contain: &mut dyn FnMut(&JobRecord) -> String,
    ) -> (Vec<JobRecord>, Option<Millis>);

    /// Records a job's end (with its deliveries) and acts on it: GPUs free, report, dependents.
    fn end(&self, jobs: &mut Self::Locked<'_>, id: JobId, ending: Ending);

    /// A running attempt is over: the daemon decides retry or end (`decide::after_attempt`).
    fn attempt_over(&self, jobs: Self::Locked<'_>, job: &JobRecord, ending: Ending);

    /// A job started: its workflow may start with it.
    fn started(&self, jobs: &mut Self::Locked<'_>, job: &JobRecord);

    /// Jobs changed: waiters look again.
    fn changed(&self);

    /// Asks for a pass soon.
    fn wake(&self);

    /// Whether a pass is owed to a `wake` (none began since).
    fn pass_due(&self) -> bool;

    /// Runs `f` with this thread's wakes only marking a pass as due: the caller runs it.
    fn deferring_wakes(&self, f: &mut dyn FnMut());

    /// Where the backend's tasks are spawned, so that a stop drains them.
    fn tasks(&self) -> &Tasks;

    fn files(&self, id: JobId) -> JobFiles;

    /// The identity a job's processes run as (its owner's, on a shared daemon).
    fn run_as(&self, job: &JobRecord) -> Result<Option<RunAs>, String>;

    /// Names this daemon's jobs machine-wide (cgroups, Slurm comments, `BATON_JOB_KEY`).
    fn tag(&self) -> &str;

    /// The SIGTERM-to-SIGKILL grace of a cancel or a time limit.
    fn grace_ms(&self) -> Millis;

    /// The daemon's state directory.
    fn home(&self) -> &Path;

    /// Writes the file that lists a job's predecessors (`BATON_DEPS_JSON`): as it starts here,
    /// as it is submitted to Slurm; its path, or `None` for a job without any.
    /// `all_must_succeed`: the job starts only after every predecessor succeeded (a task of an
    /// atomic workflow under Slurm), which the file may then say of those not ended yet.
    fn deps_file(&self, job: &JobRecord, all_must_succeed: bool) -> Option<std::path::PathBuf>;

    /// The daemon's socket (Slurm's end-of-job mail pokes it).
    fn socket(&self) -> PathBuf {
        self.home().join("baton.sock")
    }
}

/// Where jobs run. The daemon calls these; it never asks which backend it has.
pub trait Backend<H: Host>: Send + Sync {
    /// Starts (here) or submits (to the cluster) the queued jobs that can go now. Returns when
    /// to look again if a job waits for a moment rather than an event (a retry's backoff).
    fn pass(&self, host: &Arc<H>) -> Option<Millis>;

    /// Stops `job`, queued or running, as `request` (a `Transition::RequestCancel`) asks: a job
    /// the backend does not have yet ends at once; one it has is asked to stop, and its end
    /// comes back as any end does. Returns whether the job's runner was reached now (a
    /// supervisor still being started is told once it is up). Called under the daemon's lock.
    fn cancel(
        &self,
        host: &H,
        jobs: &mut H::Locked<'_>,
        job: &JobRecord,
        request: Transition,
    ) -> Result<bool, TableError>;

    /// Sends signal number `signal` (1-31 or 34-64, `baton_core::signal::parse`) to every
    /// process of `job`'s running attempt, and says where it went. Here through its
    /// containment (its cgroup, else the processes carrying its `BATON_JOB_KEY` and its process
    /// group); under Slurm with `scancel --signal --full` (every step and the batch script).
    /// Blocking (it reads /proc, or runs scancel): called off the async workers, without the
    /// daemon's lock.
    fn signal(&self, host: &H, job: &JobRecord, signal: i32) -> Result<String, SignalError>;

    /// After a restart: takes up the running jobs this backend had.
    fn recover(&self, host: &Arc<H>) -> BoxFuture<'static, ()>;

    /// Follows the backend's jobs until the daemon stops, when that takes a loop of its own.
    fn follow(&self, host: Arc<H>) -> Option<BoxFuture<'static, ()>>;

    /// Something outside says a job changed (Slurm's end-of-job mail): look now.
    fn poke(&self) {}

    /// Whether baton itself places jobs on this machine's GPUs: requests are then checked
    /// against them, queue outlooks are baton's own, and the GPU monitor's samples describe the
    /// jobs. Under Slurm, the cluster judges and places.
    fn places_here(&self) -> bool;
}

/// Why a signal did not reach a job's processes.
#[derive(Debug, thiserror::Error)]
pub enum SignalError {
    /// Nothing of the job runs to be signalled (not started yet, already gone).
    #[error("{0}")]
    NothingRuns(String),
    /// The backend could not send it (scancel refused, Slurm unreachable).
    #[error("{0}")]
    Failed(String),
}

/// Ends a queued job that no backend has yet, as `request` (a cancel) asks.
pub(super) fn cancel_unstarted<H: Host>(
    host: &H,
    jobs: &mut H::Locked<'_>,
    job: &JobRecord,
    request: &Transition,
) -> Result<bool, TableError> {
    let by = match request {
        Transition::RequestCancel { by, .. } => by.as_str(),
        _ => "someone",
    };
    let end = Ending::cancelled(
        format!("cancelled by {by} before it started"),
        crate::clock::now_ms(),
    );
    host.end(jobs, job.id, end);
    Ok(true)
}

/// Where a launch's GPUs are known: here, for a local launch; or only to the cluster, which
/// sets `CUDA_VISIBLE_DEVICES` itself (the Slurm scripts then copy it to `BATON_GPUS`).
pub enum Placed<'a> {
    Here(&'a [u32]),
    ByCluster,
}

/// The environment of attempt `attempt` of a job (DESIGN §2), for every launch path: the
/// submitter's variables, then baton's (`BATON_JOB_ID`, `BATON_JOB_NAME`, `BATON_ATTEMPT`,
/// `BATON_WORKFLOW_ID`, `BATON_TASK`, and `BATON_JOB_KEY`, which names the attempt's processes
/// machine-wide), and the GPUs when baton placed them.
pub fn job_env(
    job: &JobRecord,
    attempt: u32,
    placed: Placed<'_>,
    tag: &str,
) -> BTreeMap<String, String> {
    let mut env = job.env.clone();
    match placed {
        Placed::Here(gpus) => {
            let visible = gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            env.insert("CUDA_VISIBLE_DEVICES".into(), visible.clone());
            env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
            env.insert("BATON_GPUS".into(), visible);
        }
        // What the submitter's shell had must not override what the cluster gives the job.
        Placed::ByCluster => {
            env.remove("CUDA_VISIBLE_DEVICES");
        }
    }
    // What it reserved, for a program that sizes its thread pools or caches to it.
    env.insert("BATON_CPUS".into(), job.request.cpus.to_string());
    if job.request.mem > 0 {
        env.insert("BATON_MEM".into(), job.request.mem.to_string());
    }
    env.insert("BATON_JOB_ID".into(), job.id.to_string());
    env.insert("BATON_JOB_NAME".into(), job.name.clone());
    env.insert("BATON_ATTEMPT".into(), attempt.to_string());
    if let Some(w) = job.workflow_id {
        env.insert("BATON_WORKFLOW_ID".into(), w.to_string());
    }
    if let Some(task) = &job.task {
        env.insert("BATON_TASK".into(), task.clone());
    }
    // A sweep's run: its sweep, its index (also as Slurm's, for scripts written for arrays)
    // and each parameter.
    if let Some(run) = &job.sweep {
        env.insert("BATON_SWEEP_ID".into(), run.id.to_string());
        env.insert("BATON_ARRAY_ID".into(), run.id.to_string());
        env.insert("BATON_ARRAY_INDEX".into(), run.index.to_string());
        env.insert("SLURM_ARRAY_TASK_ID".into(), run.index.to_string());
    }
    // A sweep's run's parameters, or a workflow matrix task's.
    env.extend(baton_core::sweep::param_env(&job.params));
    env.insert(
        super::contain::KEY_VAR.into(),
        format!("{tag}.{}.{attempt}", job.id),
    );
    env
}
