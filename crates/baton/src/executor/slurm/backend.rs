//! The Slurm backend (`[backend] kind = "slurm"`): Slurm places and runs the jobs; baton keeps
//! its queue view, reports, wake-ups and workflows on top. It changes jobs only through the job
//! table's transitions, as the local backend does.
//!
//! - **Submission** replaces the scheduling pass: every queued job whose dependencies are
//!   submitted (or ended well) goes to `sbatch` at once, its baton dependencies becoming
//!   `--dependency=afterok/afterany` on their Slurm ids. The submission is recorded before
//!   `sbatch` runs; after a crash in between, the job is found again by its name and comment
//!   (`baton-ID`, `baton:TAG:ID:ATTEMPT`) rather than submitted twice.
//! - **Tracking**: one `squeue` for all of this daemon's Slurm jobs, every second while any
//!   runs, backing off to 30 s while they only wait, and at once when poked (`POST
//!   /v1/slurm/poke`, which `baton slurm-mail` sends when Slurm's MailProg reports a job's end).
//!   A job seen running is started in the store with the GPUs Slurm gave it; a job seen ended
//!   (in `scontrol`, else `sacct`) ends through the same path as a local job, so retries,
//!   reports and wake-ups are unchanged.
//! - **Sweeps**: the runs of a sweep or array that can go in one pass go as one job array
//!   (`sbatch --array=INDICES%K`, `array.rs`), each run the element whose task is its index.
//!   A run is tracked by `(array id, task)`: its line in the array's `squeue` listing (the
//!   pending ones are one `ID_[RANGES]` line), its record in `scontrol show job ARRAY` (one
//!   call per array per look). An element gone from both without an accounting record was
//!   cancelled while pending (Slurm 22.05 keeps no record of that) when baton asked for it,
//!   else it is lost. Its end goes through the same transitions as any job's, so the sweep's
//!   one comparison report is built as under the local backend.
//! - **Cancel** is `scancel` (SIGTERM, SIGKILL after the cluster's KillWait), `scancel ID_TASK`
//!   for a run of an array; **signal** is `scancel --signal=N --full` (every step and the
//!   batch script), as the job's owner.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::lifecycle::decide::{self, SlurmEnd, WorkflowState};
use baton_core::lifecycle::{Ending, Exit, Runner, SlurmJob, Transition};
use baton_core::{DepKind, JobId, JobState, Millis};

use futures_util::future::BoxFuture;

use super::array::{ArrayElement, ArraySubmission, task_of_script};
use super::{HetTask, JobInfo, QueueLine, Slurm, SlurmError, SlurmRef, Submission};
use crate::clock::now_ms;
use crate::executor::backend::{SignalError, cancel_unstarted};
use crate::executor::{Backend, Host, Placed, job_env};
use crate::jobs::TableError;
use crate::store::JobRecord;
use crate::tasks;

/// Polling while jobs run, and the longest back-off while they only wait.
const POLL_RUNNING: Duration = Duration::from_secs(1);
const POLL_MAX: Duration = Duration::from_secs(30);
/// How long to wait before submitting again after Slurm did not answer.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(5);

/// Jobs run in a Slurm cluster.
#[derive(Clone)]
pub struct SlurmBackend {
    slurm: Slurm,
    /// Asks the tracker to look now (a submission, a cancel, Slurm's end-of-job mail).
    wake: Arc<tokio::sync::Notify>,
    /// Which jobs are array elements: job → (its Slurm job id, its task), read once from the
    /// job's script (`array::ARRAY_TASK_LINE`), which survives a restart.
    tasks: Arc<Mutex<ArrayTasks>>,
}

/// Job → (the Slurm job id it was seen with, its array task if it is an element).
type ArrayTasks = HashMap<JobId, (u64, Option<u32>)>;

/// Writes the job's `deps.json` before it goes to Slurm (its predecessors as far as they are
/// known then: `daemon::deps`) and names it in the job's environment as `BATON_DEPS_JSON`.
fn with_deps_file<H: Host>(
    d: &H,
    job: &JobRecord,
    all_must_succeed: bool,
    env: &mut BTreeMap<String, String>,
) {
    if let Some(path) = d.deps_file(job, all_must_succeed) {
        env.insert("BATON_DEPS_JSON".into(), path.display().to_string());
    }
}

impl SlurmBackend {
    pub fn new(slurm: Slurm) -> SlurmBackend {
        SlurmBackend {
            slurm,
            wake: Arc::new(tokio::sync::Notify::new()),
            tasks: Arc::default(),
        }
    }

    /// What a job is tracked, cancelled and depended on by in Slurm: its job, or its element
    /// of a sweep's array.
    fn slurm_ref<H: Host>(&self, d: &H, job: &JobRecord) -> Option<SlurmRef> {
        let sid = job.slurm_id()?;
        Some(SlurmRef {
            id: sid,
            task: self.array_task(d, job.id, sid),
        })
    }

    fn array_task<H: Host>(&self, d: &H, id: JobId, sid: u64) -> Option<u32> {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(seen, task)) = tasks.get(&id)
            && seen == sid
        {
            return task;
        }
        let task = std::fs::read_to_string(d.files(id).dir.join("slurm.sh"))
            .ok()
            .and_then(|s| task_of_script(&s));
        tasks.insert(id, (sid, task));
        task
    }
}

impl<H: Host> Backend<H> for SlurmBackend {
    fn pass(&self, host: &Arc<H>) -> Option<Millis> {
        self.slurm_pass(host)
    }

    fn cancel(
        &self,
        host: &H,
        jobs: &mut H::Locked<'_>,
        job: &JobRecord,
        request: Transition,
    ) -> Result<bool, TableError> {
        // A job Slurm has (or is being given) is cancelled there; its end comes back through
        // tracking. One not given to Slurm yet simply ends.
        let unsubmitted = job.slurm_id().is_none() && job.slurm_submitting_at().is_none();
        if unsubmitted && job.state() == JobState::Queued {
            return cancel_unstarted(host, jobs, job, &request);
        }
        if unsubmitted {
            // Running, but not in Slurm: a job of this machine's supervisors from before the
            // daemon ran under Slurm. Its cancel is recorded; nothing here can reach it.
            if job.cancel_requested_by().is_none() {
                jobs.apply(job.id, request, now_ms())?;
            }
            return Ok(false);
        }
        let job = match job.cancel_requested_by() {
            None => jobs.apply(job.id, request, now_ms())?.0,
            Some(_) => job.clone(),
        };
        Ok(self.slurm_cancel(host, &job))
    }

    fn signal(&self, host: &H, job: &JobRecord, signal: i32) -> Result<String, SignalError> {
        let Some(sid) = self.slurm_ref(host, job) else {
            // Running, but not in Slurm: a job of this machine's supervisors from before the
            // daemon ran under Slurm; nothing here reaches it.
            return Err(SignalError::NothingRuns(
                "it has no Slurm job (it ran under this machine's supervisors)".into(),
            ));
        };
        let run_as = host.run_as(job).map_err(SignalError::Failed)?;
        self.slurm
            .signal(sid, signal, run_as.as_ref())
            .map(|()| format!("Slurm job {sid}, every step and its batch script"))
            .map_err(|e| SignalError::Failed(e.to_string()))
    }

    fn recover(&self, _host: &Arc<H>) -> BoxFuture<'static, ()> {
        // Interrupted submissions are looked for by the tracker, first thing (`follow`).
        Box::pin(async {})
    }

    fn follow(&self, host: Arc<H>) -> Option<BoxFuture<'static, ()>> {
        Some(Box::pin(self.clone().slurm_loop(host)))
    }

    fn poke(&self) {
        self.wake.notify_one();
    }

    fn places_here(&self) -> bool {
        false
    }
}

impl SlurmBackend {
    /// Submits what can be submitted. Runs where the local backend runs its scheduling pass.
    fn slurm_pass<H: Host>(&self, d: &Arc<H>) -> Option<Millis> {
        let now = now_ms();
        // The first moment a retry waiting out its backoff may be submitted.
        let mut next_wakeup: Option<Millis> = None;
        let mut submit: Vec<(JobRecord, Vec<String>)> = Vec::new();
        let mut failed: Vec<(JobId, String)> = Vec::new();
        let mut gangs: Vec<(u64, Vec<JobRecord>)> = Vec::new();
        // A sweep's runs that go now, as one array: sweep → (max_parallel, runs, dependencies).
        type Runs = (Option<u32>, Vec<JobRecord>, Vec<String>);
        let mut arrays: BTreeMap<u64, Runs> = BTreeMap::new();
        {
            let mut inner = d.lock_jobs();
            // Atomic workflows go whole, as one heterogeneous job, once none of their tasks is
            // in Slurm yet (a retried task later goes alone, below).
            let atomic: Vec<u64> = inner
                .workflows()
                .filter(|w| w.atomic && w.state == WorkflowState::Queued)
                .map(|w| w.id)
                .collect();
            for w in atomic {
                let tasks: Vec<JobRecord> = inner
                    .active()
                    .filter(|j| j.workflow_id == Some(w))
                    .cloned()
                    .collect();
                let fresh = !tasks.is_empty() && tasks.iter().all(|t| unsubmitted(&t));
                if !fresh {
                    continue;
                }
                let changes = tasks
                    .iter()
                    .map(|t| (t.id, Transition::SlurmSubmitting { at: now }))
                    .collect();
                match inner.apply_all(changes, now, |_| Ok(())) {
                    Ok(submitting) => {
                        gangs.push((w, submitting.into_iter().map(|(t, _)| t).collect()))
                    }
                    Err(e) => tracing::error!(workflow = w, "cannot record the submission: {e}"),
                }
            }
            let queued: Vec<JobRecord> = inner.active().filter(unsubmitted).cloned().collect();
            let mut ended = Vec::new();
            for job in &queued {
                for d in &job.deps {
                    if !inner.is_active(d.job) {
                        ended.push(d.job);
                    }
                }
            }
            let ended = match inner.store().states(&ended) {
                Ok(states) => states,
                Err(e) => {
                    tracing::error!("Slurm pass skipped: {e}");
                    return None;
                }
            };
            'jobs: for job in queued {
                // Held: baton keeps it until it is released (its reason says so).
                if job.held_by().is_some() {
                    continue;
                }
                let later = job.not_before().into_iter().chain(job.begin_at).max();
                if let Some(at) = later.filter(|&at| at > now) {
                    next_wakeup = Some(next_wakeup.map_or(at, |n| n.min(at)));
                    continue;
                }
                let mut deps = Vec::new();
                for dep in &job.deps {
                    let kind = match dep.kind {
                        DepKind::Success => "afterok",
                        DepKind::Any => "afterany",
                        DepKind::Failure => "afternotok",
                    };
                    match inner.get(dep.job) {
                        // On a run of an array: on its element.
                        Some(on) => match self.slurm_ref(&**d, on) {
                            Some(sref) => deps.push(format!("{kind}:{sref}")),
                            None => continue 'jobs, // submitted after it
                        },
                        // Ended (or never was): it either allows this job or fails it.
                        None => {
                            let state = ended.get(&dep.job).map(|(s, _)| *s);
                            if let Some(why) = decide::dependency_failure(dep, state) {
                                failed.push((job.id, why));
                                continue 'jobs;
                            }
                        }
                    }
                }
                match inner.apply(job.id, Transition::SlurmSubmitting { at: now }, now) {
                    Ok((job, _)) if job.sweep.is_some() => {
                        let sweep = job.sweep.as_ref().map_or(0, |r| r.id);
                        let max = inner.sweep(sweep).and_then(|s| s.max_parallel);
                        let group = arrays.entry(sweep).or_insert((max, Vec::new(), Vec::new()));
                        group.1.push(job);
                        for dep in deps {
                            if !group.2.contains(&dep) {
                                group.2.push(dep);
                            }
                        }
                    }
                    Ok((job, _)) => submit.push((job, deps)),
                    Err(e) => {
                        tracing::error!(job = job.id.0, "cannot record the submission: {e}")
                    }
                }
            }
            for (id, reason) in failed {
                d.end(&mut inner, id, Ending::failed(reason, now));
            }
        }
        if submit.is_empty() && gangs.is_empty() && arrays.is_empty() {
            return next_wakeup;
        }
        let (me, d) = (self.clone(), d.clone());
        d.clone().tasks().spawn_blocking(move || {
            let mut sent: Vec<JobId> = Vec::new();
            for (workflow, tasks) in gangs {
                sent.extend(tasks.iter().map(|t| t.id));
                me.submit_gang(&d, workflow, &tasks);
            }
            for (sweep, (max, runs, deps)) in arrays {
                sent.extend(runs.iter().map(|r| r.id));
                me.submit_array(&d, sweep, max, &runs, deps, now);
            }
            for (job, deps) in submit {
                sent.push(job.id);
                me.submit_to_slurm(&d, &job, deps);
            }
            d.changed();
            me.wake.notify_one();
            // A job queued meanwhile that runs after one of these waited for its Slurm id (its
            // `--dependency` names it): now that Slurm has some, another pass submits it. Not
            // when Slurm took none (unreachable): that retry waits for its own timer.
            let took_some = {
                let jobs = d.lock_jobs();
                sent.iter()
                    .any(|id| jobs.get(*id).is_some_and(|j| j.slurm_id().is_some()))
            };
            if took_some {
                d.wake();
            }
        });
        next_wakeup
    }

    fn submit_to_slurm<H: Host>(&self, d: &Arc<H>, job: &JobRecord, dependencies: Vec<String>) {
        let files = d.files(job.id);
        if let Err(e) = std::fs::create_dir_all(&files.dir) {
            tracing::error!(job = job.id.0, "cannot create the job's directory: {e}");
        }
        let attempt = job.attempt() + 1;
        let mut env = job_env(job, attempt, Placed::ByCluster, d.tag());
        with_deps_file(&**d, job, false, &mut env);
        let run_as = d.run_as(job);
        let submission = Submission {
            job: job.id.0,
            attempt,
            command: &job.command,
            cwd: &job.cwd,
            gpus: job.request.count,
            cpus: job.request.cpus,
            mem: job.request.mem,
            time_limit_ms: job.time_limit,
            signal: job.signal,
            dependencies,
            dir: &files.dir,
            env,
            umask: job.umask,
            mail_to: self
                .slurm
                .settings
                .mail_hook
                .then(|| d.socket().display().to_string()),
        };
        let result = match &run_as {
            Err(e) => Err(SlurmError::Refused(e.clone())),
            Ok(run_as) => self.slurm.submit(&submission, run_as.as_ref()),
        };
        let now = now_ms();
        let mut inner = d.lock_jobs();
        match result {
            Ok(sid) => {
                tracing::info!(job = job.id.0, slurm = sid, "submitted to Slurm");
                let submitted = Transition::SlurmSubmitted {
                    id: sid,
                    reason: Some(format!("Slurm job {sid}: submitted")),
                };
                let cancel = match inner.apply(job.id, submitted, now) {
                    // Cancelled while sbatch ran: cancel it in Slurm now.
                    Ok((j, _)) => j.cancel_requested_by().is_some().then_some(j),
                    Err(e) => {
                        tracing::error!(job = job.id.0, "cannot record Slurm job {sid}: {e}");
                        None
                    }
                };
                drop(inner);
                if let Some(j) = cancel {
                    self.slurm_cancel(&**d, &j);
                }
            }
            Err(SlurmError::Refused(message)) => {
                tracing::warn!(job = job.id.0, "Slurm refused the job: {message}");
                let ending = Ending::failed(format!("Slurm refused the job: {message}"), now);
                d.end(&mut inner, job.id, ending);
            }
            Err(e @ SlurmError::Unreachable(_)) => {
                tracing::warn!(job = job.id.0, "{e}; trying again in 5 s");
                self.submit_later(d, &mut inner, &[job.id], &e);
            }
        }
    }

    /// Submits an atomic workflow as one heterogeneous job: Slurm allocates every task's GPUs
    /// at once or none; the batch script starts each task as its dependencies succeed.
    fn submit_gang<H: Host>(&self, d: &Arc<H>, workflow: u64, tasks: &[JobRecord]) {
        let mut tasks: Vec<&JobRecord> = tasks.iter().collect();
        tasks.sort_by_key(|t| t.id); // inserted in dependency order
        let position: HashMap<JobId, usize> =
            tasks.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
        let dirs: Vec<std::path::PathBuf> = tasks.iter().map(|t| d.files(t.id).dir).collect();
        let envs: Vec<_> = tasks
            .iter()
            .map(|t| {
                let mut env = job_env(t, t.attempt() + 1, Placed::ByCluster, d.tag());
                // The batch script starts a task only once those before it succeeded.
                with_deps_file(&**d, t, true, &mut env);
                env
            })
            .collect();
        let het: Vec<HetTask<'_>> = tasks
            .iter()
            .zip(&dirs)
            .zip(&envs)
            .map(|((t, dir), env)| HetTask {
                job: t.id.0,
                command: &t.command,
                cwd: &t.cwd,
                gpus: t.request.count,
                cpus: t.request.cpus,
                mem: t.request.mem,
                dir,
                after: t
                    .deps
                    .iter()
                    .filter_map(|d| position.get(&d.job).copied())
                    .collect(),
                env: env.clone(),
                umask: t.umask,
            })
            .collect();
        // Every component lives until the last task ends: the sum of the tasks' limits.
        let limit = tasks
            .iter()
            .map(|t| t.time_limit)
            .try_fold(0_i64, |sum, l| l.map(|l| sum.saturating_add(l)));
        let dir = crate::paths::workflow_dir(d.home(), workflow);
        let result = match d.run_as(tasks[0]) {
            Err(e) => Err(SlurmError::Refused(e)),
            Ok(run_as) => self.slurm.submit_het(
                workflow,
                tasks[0].attempt() + 1,
                &het,
                limit,
                &dir,
                &tasks[0].env,
                run_as.as_ref(),
            ),
        };
        let now = now_ms();
        let mut inner = d.lock_jobs();
        match result {
            Ok(sid) => {
                tracing::info!(
                    workflow,
                    slurm = sid,
                    tasks = tasks.len(),
                    "submitted to Slurm as one heterogeneous job"
                );
                let changes = tasks
                    .iter()
                    .map(|t| {
                        let submitted = Transition::SlurmSubmitted {
                            id: sid,
                            reason: Some(format!("Slurm job {sid}: submitted (heterogeneous)")),
                        };
                        (t.id, submitted)
                    })
                    .collect();
                if let Err(e) = inner.apply_all(changes, now, |_| Ok(())) {
                    tracing::error!(workflow, "cannot record Slurm job {sid}: {e}");
                }
            }
            Err(SlurmError::Refused(message)) => {
                for t in &tasks {
                    let reason = format!("Slurm refused the workflow: {message}");
                    d.end(&mut inner, t.id, Ending::failed(reason, now));
                }
            }
            Err(e @ SlurmError::Unreachable(_)) => {
                tracing::warn!(workflow, "{e}; trying again in 5 s");
                let ids: Vec<JobId> = tasks.iter().map(|t| t.id).collect();
                self.submit_later(d, &mut inner, &ids, &e);
            }
        }
    }

    /// Submits runs of one sweep as one job array: run `i` is the element with task `i` (its
    /// index), at most `max` of them running at once. Runs of one submission share their
    /// resources, directory and umask; the first run's are the array's.
    fn submit_array<H: Host>(
        &self,
        d: &Arc<H>,
        sweep: u64,
        max: Option<u32>,
        runs: &[JobRecord],
        dependencies: Vec<String>,
        since: Millis,
    ) {
        let mut runs: Vec<&JobRecord> = runs.iter().collect();
        runs.sort_by_key(|r| r.sweep.as_ref().map_or(0, |s| s.index));
        let first = runs[0];
        // What sbatch runs in, and so every element starts with: the submitter's variables.
        let mut base = first.env.clone();
        base.remove("CUDA_VISIBLE_DEVICES");
        let dirs: Vec<std::path::PathBuf> = runs.iter().map(|r| d.files(r.id).dir).collect();
        // Each run's variables beyond sbatch's; those all runs have alike are set once.
        let envs: Vec<BTreeMap<String, String>> = runs
            .iter()
            .map(|r| {
                let mut env = job_env(r, r.attempt() + 1, Placed::ByCluster, d.tag());
                with_deps_file(&**d, r, false, &mut env);
                env.into_iter()
                    .filter(|(k, v)| base.get(k) != Some(v))
                    .collect()
            })
            .collect();
        let mut common = envs[0].clone();
        common.retain(|k, v| envs.iter().all(|e| e.get(k) == Some(v)));
        let elements: Vec<ArrayElement<'_>> = runs
            .iter()
            .zip(&dirs)
            .zip(envs)
            .map(|((r, dir), mut env)| {
                env.retain(|k, _| !common.contains_key(k));
                ArrayElement {
                    job: r.id.0,
                    task: r.sweep.as_ref().map_or(0, |s| s.index),
                    command: &r.command,
                    dir,
                    env,
                }
            })
            .collect();
        // In the first run's directory: sbatch reads it as the runs' owner.
        let script = dirs[0].join("slurm-array.sh");
        let submission = ArraySubmission {
            sweep,
            since,
            elements,
            max_parallel: max,
            cwd: &first.cwd,
            gpus: first.request.count,
            cpus: first.request.cpus,
            mem: first.request.mem,
            time_limit_ms: first.time_limit,
            signal: first.signal,
            dependencies,
            umask: first.umask,
            env: base,
            common,
            script: &script,
            mail_to: self
                .slurm
                .settings
                .mail_hook
                .then(|| d.socket().display().to_string()),
        };
        let result = match d.run_as(first) {
            Err(e) => Err(SlurmError::Refused(e)),
            Ok(run_as) => self.slurm.submit_array(&submission, run_as.as_ref()),
        };
        let now = now_ms();
        let mut inner = d.lock_jobs();
        match result {
            Ok(sid) => {
                tracing::info!(
                    sweep,
                    slurm = sid,
                    runs = runs.len(),
                    "submitted to Slurm as one job array"
                );
                {
                    let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
                    for e in &submission.elements {
                        tasks.insert(JobId(e.job), (sid, Some(e.task)));
                    }
                }
                let changes = submission
                    .elements
                    .iter()
                    .map(|e| {
                        let submitted = Transition::SlurmSubmitted {
                            id: sid,
                            reason: Some(format!("Slurm job {sid}_{}: submitted", e.task)),
                        };
                        (JobId(e.job), submitted)
                    })
                    .collect();
                let cancel: Vec<JobRecord> = match inner.apply_all(changes, now, |_| Ok(())) {
                    // Cancelled while sbatch ran: cancelled in Slurm now.
                    Ok(done) => done
                        .into_iter()
                        .map(|(j, _)| j)
                        .filter(|j| j.cancel_requested_by().is_some())
                        .collect(),
                    Err(e) => {
                        tracing::error!(sweep, "cannot record Slurm job {sid}: {e}");
                        Vec::new()
                    }
                };
                drop(inner);
                for j in cancel {
                    self.slurm_cancel(&**d, &j);
                }
            }
            Err(SlurmError::Refused(message)) => {
                tracing::warn!(sweep, "Slurm refused the sweep: {message}");
                for r in &runs {
                    let reason = format!("Slurm refused the sweep: {message}");
                    d.end(&mut inner, r.id, Ending::failed(reason, now));
                }
            }
            Err(e @ SlurmError::Unreachable(_)) => {
                tracing::warn!(sweep, "{e}; trying again in 5 s");
                let ids: Vec<JobId> = runs.iter().map(|r| r.id).collect();
                self.submit_later(d, &mut inner, &ids, &e);
            }
        }
    }

    /// Slurm did not answer: the jobs go back to waiting for submission, with the reason, and
    /// the next pass in a few seconds tries again.
    fn submit_later<H: Host>(
        &self,
        d: &Arc<H>,
        inner: &mut H::Locked<'_>,
        ids: &[JobId],
        e: &SlurmError,
    ) {
        let changes = ids
            .iter()
            .map(|id| {
                let again = Transition::SlurmNotSubmitted {
                    reason: Some(format!("waiting for Slurm: {e}")),
                };
                (*id, again)
            })
            .collect();
        if let Err(e) = inner.apply_all(changes, now_ms(), |_| Ok(())) {
            tracing::error!("cannot record that the submission waits: {e}");
        }
        let me = d.clone();
        d.tasks().spawn(tasks::Until::Stop, async move {
            tokio::time::sleep(RETRY_UNREACHABLE).await;
            me.wake();
        });
    }

    /// Whether a job is a task of an atomic workflow that went to Slurm as one heterogeneous
    /// job (its state then comes from the files its step leaves). Its script says so, which
    /// survives a restart; a retried task goes alone with a plain script.
    fn in_gang<H: Host>(&self, d: &H, job: &JobRecord) -> bool {
        job.workflow_id.is_some()
            && std::fs::read_to_string(d.files(job.id).dir.join("slurm.sh"))
                .is_ok_and(|s| s.contains(crate::executor::slurm::HET_MARKER))
    }

    /// After a restart: submissions that were under way when the daemon stopped are found in
    /// Slurm by their name and comment, or made again if Slurm never got them.
    fn slurm_recover<H: Host>(&self, d: &Arc<H>) {
        let interrupted: Vec<JobRecord> = d
            .lock_jobs()
            .active()
            .filter(|j| j.slurm_id().is_none() && j.slurm_submitting_at().is_some())
            .cloned()
            .collect();
        // A sweep's runs submitted together are one array: looked for once.
        let mut arrays: HashMap<(u64, Millis), Result<Option<u64>, String>> = HashMap::new();
        for job in interrupted {
            let gang = job.workflow_id.filter(|w| {
                d.lock_jobs()
                    .workflow(*w)
                    .is_some_and(|wf| wf.atomic && wf.state == WorkflowState::Queued)
            });
            let found = match (gang, &job.sweep) {
                (Some(w), _) => self.slurm.find_het(w, job.attempt() + 1),
                (None, Some(run)) => {
                    let since = job.slurm_submitting_at().unwrap_or(0);
                    arrays
                        .entry((run.id, since))
                        .or_insert_with(|| {
                            self.slurm
                                .find_array(run.id, since)
                                .map_err(|e| e.to_string())
                        })
                        .clone()
                        .map_err(SlurmError::Unreachable)
                }
                (None, None) => self.slurm.find(job.id.0, job.attempt() + 1),
            };
            let mut inner = d.lock_jobs();
            match found {
                Ok(Some(sid)) => {
                    tracing::info!(
                        job = job.id.0,
                        slurm = sid,
                        "found its interrupted submission"
                    );
                    let found = Transition::SlurmSubmitted {
                        id: sid,
                        reason: None,
                    };
                    if let Err(e) = inner.apply(job.id, found, now_ms()) {
                        tracing::error!(job = job.id.0, "cannot record Slurm job {sid}: {e}");
                    }
                }
                Ok(None) => {
                    tracing::info!(job = job.id.0, "its submission never reached Slurm; again");
                    let again = Transition::SlurmNotSubmitted { reason: None };
                    if let Err(e) = inner.apply(job.id, again, now_ms()) {
                        tracing::error!(job = job.id.0, "cannot record it: {e}");
                    }
                }
                Err(e) => {
                    // Left as it is: the next pass cannot submit it twice, and the next
                    // restart looks again.
                    tracing::warn!(job = job.id.0, "cannot look for its submission: {e}");
                }
            }
        }
    }

    /// Follows this daemon's Slurm jobs until shutdown.
    async fn slurm_loop<H: Host>(self, d: Arc<H>) {
        let (me, daemon) = (self.clone(), d.clone());
        let _ = d
            .tasks()
            .spawn_blocking(move || me.slurm_recover(&daemon))
            .await;
        d.wake();
        let mut interval = POLL_RUNNING;
        loop {
            let tracked: Vec<(JobId, u64)> = d
                .lock_jobs()
                .active()
                .filter_map(|j| j.slurm_id().map(|sid| (j.id, sid)))
                .collect();
            if tracked.is_empty() {
                self.wake.notified().await;
                interval = POLL_RUNNING;
                continue;
            }
            let (me, daemon) = (self.clone(), d.clone());
            let outcome = d
                .tasks()
                .spawn_blocking(move || me.slurm_check(&daemon, &tracked))
                .await
                .unwrap_or(Check::Quiet { running: false });
            interval = match outcome {
                Check::Changed => POLL_RUNNING,
                Check::Quiet { running: true } => (interval * 2).min(POLL_RUNNING * 4),
                Check::Quiet { running: false } => (interval * 2).min(POLL_MAX),
            };
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = self.wake.notified() => interval = POLL_RUNNING,
            }
        }
    }

    /// One look at the tracked jobs; applies what changed.
    fn slurm_check<H: Host>(&self, d: &Arc<H>, tracked: &[(JobId, u64)]) -> Check {
        let ids: Vec<u64> = tracked.iter().map(|(_, sid)| *sid).collect();
        let mut ids = ids;
        ids.sort_unstable();
        ids.dedup();
        // A heterogeneous job lists one line per component: it is over when all are. An
        // array lists a line per element it has started and one for its pending elements.
        let mut elements: HashMap<(u64, u32), QueueLine> = HashMap::new();
        let lines: HashMap<u64, QueueLine> = match self.slurm.queue(&ids) {
            Ok(lines) => {
                let mut by_id: HashMap<u64, QueueLine> = HashMap::new();
                for l in lines {
                    if !l.tasks.is_empty() {
                        for &t in &l.tasks {
                            elements.insert((l.id, t), l.clone());
                        }
                        continue;
                    }
                    match by_id.get(&l.id) {
                        Some(seen) if !crate::executor::slurm::parse::is_final(&seen.state) => {}
                        _ => {
                            by_id.insert(l.id, l);
                        }
                    }
                }
                by_id
            }
            Err(e) => {
                tracing::warn!("{e}");
                return Check::Quiet { running: true };
            }
        };
        let mut changed = false;
        let mut running = false;
        let mut arrays = ArrayDetails::default();
        for &(id, sid) in tracked {
            let line = lines.get(&sid);
            let state = line.map(|l| l.state.as_str()).unwrap_or("");
            let known = d.lock_jobs().get(id).cloned();
            let Some(job) = known.filter(|j| j.slurm_id() == Some(sid)) else {
                continue; // ended or resubmitted meanwhile
            };
            if let Some(task) = self.array_task(&**d, id, sid) {
                let line = elements.get(&(sid, task));
                match self.element_check(&**d, &job, sid, task, line, &mut arrays) {
                    Some(true) => changed = true,
                    Some(false) => running = true,
                    None => {}
                }
                continue;
            }
            let is_final = line.is_none() || crate::executor::slurm::parse::is_final(state);
            if self.in_gang(&**d, &job) {
                match self.gang_task_check(&**d, &job, sid, is_final) {
                    Some(true) => changed = true,
                    Some(false) => running = true,
                    None => {}
                }
                continue;
            }
            if !is_final && state != "RUNNING" && state != "COMPLETING" {
                // Waiting in Slurm's queue (or suspended): say why.
                if let Some(l) = line {
                    let sref = SlurmRef {
                        id: sid,
                        task: None,
                    };
                    changed |= self.waiting(&**d, &job, sref, l);
                }
                continue;
            }
            // Running or done: the details come from scontrol (sacct once forgotten).
            let info = match self.slurm.show(sid) {
                Ok(Some(info)) => Some(info),
                Ok(None) => self.slurm.accounting(sid).unwrap_or_default(),
                Err(e) => {
                    tracing::warn!("{e}");
                    running = true;
                    continue;
                }
            };
            let Some(info) = info else {
                self.slurm_lost(
                    &**d,
                    &job,
                    SlurmRef {
                        id: sid,
                        task: None,
                    },
                );
                changed = true;
                continue;
            };
            if job.state() == JobState::Queued {
                self.slurm_started(&**d, &job, &info);
                changed = true;
            }
            if info.ended() {
                self.slurm_ended(&**d, id, &info);
                changed = true;
            } else {
                running = true;
            }
        }
        if changed {
            d.changed();
            Check::Changed
        } else {
            Check::Quiet { running }
        }
    }

    /// The job waits in Slurm's queue (or is suspended): its reason says why. Returns whether
    /// that changed.
    fn waiting<H: Host>(&self, d: &H, job: &JobRecord, sref: SlurmRef, l: &QueueLine) -> bool {
        let reason = if !l.reason.is_empty() && l.reason != "None" {
            format!("Slurm job {sref}: {} ({})", l.state, l.reason)
        } else {
            format!("Slurm job {sref}: {}", l.state)
        };
        if job.slurm_state() == Some(l.state.as_str()) && job.reason() == Some(reason.as_str()) {
            return false;
        }
        let seen = Transition::SlurmSeen {
            state: l.state.clone(),
            reason: Some(reason),
            nodes: None,
        };
        if let Err(e) = d.lock_jobs().apply(job.id, seen, now_ms()) {
            tracing::warn!(job = job.id.0, "cannot record Slurm's word: {e}");
        }
        true
    }

    /// A run of a sweep's array, element `task` of Slurm job `sid`, from its line in the
    /// array's listing and its record (`scontrol`, else `sacct`). `Some(true)`: something
    /// changed; `Some(false)`: it runs (or Slurm did not answer); `None`: it waits.
    fn element_check<H: Host>(
        &self,
        d: &H,
        job: &JobRecord,
        sid: u64,
        task: u32,
        line: Option<&QueueLine>,
        arrays: &mut ArrayDetails,
    ) -> Option<bool> {
        let sref = SlurmRef {
            id: sid,
            task: Some(task),
        };
        let active = |state: &str| state == "RUNNING" || state == "COMPLETING";
        if let Some(l) = line
            && !crate::executor::slurm::parse::is_final(&l.state)
            && !active(&l.state)
        {
            return self.waiting(d, job, sref, l).then_some(true);
        }
        // Running, ended, or not listed: its record says which.
        let shown = arrays.shown.entry(sid).or_insert_with(|| {
            self.slurm
                .show_all(sid)
                .map_err(|e| tracing::warn!("{e}"))
                .ok()
        });
        let Some(shown) = shown else {
            return Some(false); // Slurm did not answer: the next look asks again
        };
        let of_task = |infos: &[JobInfo]| {
            infos
                .iter()
                .find(|i| {
                    i.array
                        .as_ref()
                        .is_some_and(|(a, tasks)| *a == sid && tasks.contains(&task))
                })
                .cloned()
        };
        let info = of_task(shown).or_else(|| {
            let accounted = arrays
                .accounted
                .entry(sid)
                .or_insert_with(|| self.slurm.accounting_all(sid).unwrap_or_default());
            of_task(accounted)
        });
        let Some(info) = info else {
            // Gone from the listing and from Slurm's records, with no accounting: Slurm keeps
            // nothing of an element cancelled while it was pending.
            let mut inner = d.lock_jobs();
            if !inner.is_active(job.id) {
                return None;
            }
            match job.cancel_requested_by() {
                Some(by) if job.state() == JobState::Queued => {
                    let reason = format!("cancelled by {by} before it started (Slurm job {sref})");
                    d.end(&mut inner, job.id, Ending::cancelled(reason, now_ms()));
                }
                _ => {
                    drop(inner);
                    self.slurm_lost(d, job, sref);
                }
            }
            return Some(true);
        };
        if !info.ended() && !active(&info.state) {
            // Still among the array's pending elements (or held there): not lost.
            return None;
        }
        let mut changed = false;
        if job.state() == JobState::Queued {
            self.slurm_started(d, job, &info);
            changed = true;
        }
        if info.ended() {
            self.slurm_ended(d, job.id, &info);
            return Some(true);
        }
        if changed { Some(true) } else { Some(false) }
    }

    /// A task of a heterogeneous job, from the files its runner and step leave: started (with
    /// its GPUs and node), ended (exit code, or `dep`), or never run because Slurm ended the
    /// whole job first. `Some(true)`: something changed; `Some(false)`: still going.
    fn gang_task_check<H: Host>(
        &self,
        d: &H,
        job: &JobRecord,
        sid: u64,
        slurm_done: bool,
    ) -> Option<bool> {
        let dir = d.files(job.id).dir;
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        let started =
            read(crate::executor::slurm::HET_START).and_then(|s| s.trim().parse::<i64>().ok());
        let exit = read(crate::executor::slurm::HET_EXIT).map(|s| s.trim().to_string());
        let mut changed = false;
        if job.state() == JobState::Queued
            && let Some(start) = started
        {
            let placed = read(crate::executor::slurm::HET_GPUS).unwrap_or_default();
            let mut lines = placed.lines();
            let info = JobInfo {
                id: sid,
                state: "RUNNING".into(),
                start: Some(start * 1000),
                gpus: lines
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .filter_map(|g| g.trim().parse().ok())
                    .collect(),
                nodes: lines.next().unwrap_or("").trim().to_string(),
                ..JobInfo::default()
            };
            // Wait for the step to say where it runs, unless it has already ended.
            if !placed.is_empty() || exit.is_some() {
                self.slurm_started(d, job, &info);
                changed = true;
            }
        }
        let now = now_ms();
        let ending = match exit.as_deref() {
            Some("dep") => Some(Ending::failed(
                "dependency failed: a task it runs after did not succeed",
                now,
            )),
            Some(code) => {
                let code: i32 = code.parse().unwrap_or(1);
                let info = JobInfo {
                    id: sid,
                    state: if code == 0 { "COMPLETED" } else { "FAILED" }.into(),
                    exit_code: Some(code),
                    end: Some(now),
                    ..JobInfo::default()
                };
                Some(slurm_ending(job, &info, now))
            }
            // Slurm ended the whole job (a time limit, a cancel, a node failure) before this
            // task's step ended: Slurm's state says why.
            None if slurm_done => {
                let info = self
                    .slurm
                    .show(sid)
                    .ok()
                    .flatten()
                    .or_else(|| self.slurm.accounting(sid).ok().flatten())
                    .unwrap_or(JobInfo {
                        id: sid,
                        state: "FAILED".into(),
                        ..JobInfo::default()
                    });
                Some(slurm_ending(job, &info, now))
            }
            None => None,
        };
        let Some(ending) = ending else {
            return Some(changed);
        };
        // No retries inside a heterogeneous job: its allocation is the workflow's, and the tasks
        // after this one have already been told how it went.
        let mut inner = d.lock_jobs();
        if inner.is_active(job.id) {
            d.end(&mut inner, job.id, ending);
        }
        Some(true)
    }

    /// Slurm started the job: it is running, on the GPUs Slurm gave it.
    fn slurm_started<H: Host>(&self, d: &H, job: &JobRecord, info: &JobInfo) {
        let start = info.start.unwrap_or_else(now_ms);
        let mut inner = d.lock_jobs();
        let started = Transition::Start {
            gpus: info.gpus.clone(),
            at: start,
            on: Runner::Slurm(SlurmJob {
                // The id it was tracked by (a heterogeneous job's components share it).
                id: job.slurm_id().unwrap_or(info.id),
                state: Some(info.state.clone()),
                nodes: Some(info.nodes.clone()),
            }),
        };
        match inner.apply(job.id, started, start) {
            Ok((job, _)) => d.started(&mut inner, &job),
            Err(e) => {
                tracing::error!(job = job.id.0, "cannot record the start: {e}");
                return;
            }
        }
        tracing::info!(job = job.id.0, slurm = info.id, nodes = %info.nodes, gpus = ?info.gpus, "running in Slurm");
    }

    /// Slurm is done with the job: its end, as Slurm tells it.
    fn slurm_ended<H: Host>(&self, d: &H, id: JobId, info: &JobInfo) {
        let mut inner = d.lock_jobs();
        let seen = Transition::SlurmSeen {
            state: info.state.clone(),
            reason: None,
            nodes: None,
        };
        // Its start could not be recorded yet (the store refused it): the next look starts it,
        // then ends it.
        if inner.get(id).is_none_or(|j| j.state() != JobState::Running) {
            return;
        }
        let job = match inner.apply(id, seen, now_ms()) {
            Ok((job, _)) => job,
            Err(e) => {
                tracing::warn!(job = id.0, "cannot record Slurm's word: {e}");
                match inner.get(id) {
                    Some(job) => job.clone(),
                    None => return,
                }
            }
        };
        let ending = slurm_ending(&job, info, now_ms());
        tracing::info!(job = id.0, slurm = info.id, state = %info.state, "ended in Slurm");
        d.attempt_over(inner, &job, ending);
    }

    /// Slurm no longer knows the job and there is no accounting to ask.
    fn slurm_lost<H: Host>(&self, d: &H, job: &JobRecord, sid: SlurmRef) {
        let mut inner = d.lock_jobs();
        let ending = Ending::failed(
            format!("Slurm no longer knows Slurm job {sid}, and it has no accounting to ask"),
            now_ms(),
        );
        if job.state() == JobState::Running {
            d.attempt_over(inner, job, ending);
        } else {
            d.end(&mut inner, job.id, ending);
        }
    }

    /// Cancels a job that Slurm has (queued or running there); its end arrives through
    /// tracking, as `cancelled`. Called with the daemon's lock held, so `scancel` runs on a
    /// thread of its own. Returns whether `scancel` was sent (a job still in `sbatch` is
    /// cancelled as soon as it has an id).
    fn slurm_cancel<H: Host>(&self, d: &H, job: &JobRecord) -> bool {
        let Some(sid) = self.slurm_ref(d, job) else {
            return false;
        };
        let slurm = self.slurm.clone();
        let run_as = d.run_as(job).ok().flatten();
        let wake = self.wake.clone();
        let id = job.id;
        d.tasks().spawn_blocking(move || {
            match slurm.cancel(sid, run_as.as_ref()) {
                Ok(()) => tracing::info!(job = id.0, slurm = %sid, "scancel sent"),
                Err(e) => tracing::warn!(job = id.0, slurm = %sid, "scancel failed: {e}"),
            }
            wake.notify_one();
        });
        true
    }
}

/// The records of the arrays one look needed, each asked for once.
#[derive(Default)]
struct ArrayDetails {
    /// `scontrol show job ARRAY` (`None`: Slurm did not answer).
    shown: HashMap<u64, Option<Vec<JobInfo>>>,
    /// `sacct -j ARRAY`.
    accounted: HashMap<u64, Vec<JobInfo>>,
}

/// What one look at Slurm found.
enum Check {
    Changed,
    Quiet { running: bool },
}

/// A queued job that has not gone to Slurm yet.
fn unsubmitted(job: &&JobRecord) -> bool {
    job.state() == JobState::Queued
        && job.slurm_id().is_none()
        && job.slurm_submitting_at().is_none()
}

/// The terminal state of a job Slurm reports ended (`decide::slurm_ending`).
fn slurm_ending(job: &JobRecord, info: &JobInfo, now: Millis) -> Ending {
    let end = SlurmEnd {
        state: info.state.clone(),
        reason: info.reason.clone(),
        exit: Exit {
            code: info.exit_code,
            signal: info.signal,
        },
        nodes: info.nodes.clone(),
        end: info.end,
    };
    decide::slurm_ending(job.facts(), &end, now)
}
