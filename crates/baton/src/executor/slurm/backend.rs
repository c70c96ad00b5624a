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
//! - **Cancel** is `scancel` (SIGTERM, SIGKILL after the cluster's KillWait); **signal** is
//!   `scancel --signal=N --full` (every step and the batch script), as the job's owner.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use baton_core::lifecycle::decide::{self, SlurmEnd, WorkflowState};
use baton_core::lifecycle::{Ending, Exit, Runner, SlurmJob, Transition};
use baton_core::{DepKind, JobId, JobState, Millis};

use futures_util::future::BoxFuture;

use super::{HetTask, JobInfo, QueueLine, Slurm, SlurmError, Submission};
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
}

impl SlurmBackend {
    pub fn new(slurm: Slurm) -> SlurmBackend {
        SlurmBackend {
            slurm,
            wake: Arc::new(tokio::sync::Notify::new()),
        }
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
        let Some(sid) = job.slurm_id() else {
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
                for d in &job.deps {
                    let kind = match d.kind {
                        DepKind::Success => "afterok",
                        DepKind::Any => "afterany",
                        DepKind::Failure => "afternotok",
                    };
                    match inner.get(d.job) {
                        Some(dep) => match dep.slurm_id() {
                            Some(sid) => deps.push(format!("{kind}:{sid}")),
                            None => continue 'jobs, // submitted after it
                        },
                        // Ended (or never was): it either allows this job or fails it.
                        None => {
                            let state = ended.get(&d.job).map(|(s, _)| *s);
                            if let Some(why) = decide::dependency_failure(d, state) {
                                failed.push((job.id, why));
                                continue 'jobs;
                            }
                        }
                    }
                }
                match inner.apply(job.id, Transition::SlurmSubmitting { at: now }, now) {
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
        if submit.is_empty() && gangs.is_empty() {
            return next_wakeup;
        }
        let (me, d) = (self.clone(), d.clone());
        d.clone().tasks().spawn_blocking(move || {
            for (workflow, tasks) in gangs {
                me.submit_gang(&d, workflow, &tasks);
            }
            for (job, deps) in submit {
                me.submit_to_slurm(&d, &job, deps);
            }
            d.changed();
            me.wake.notify_one();
        });
        next_wakeup
    }

    fn submit_to_slurm<H: Host>(&self, d: &Arc<H>, job: &JobRecord, dependencies: Vec<String>) {
        let files = d.files(job.id);
        if let Err(e) = std::fs::create_dir_all(&files.dir) {
            tracing::error!(job = job.id.0, "cannot create the job's directory: {e}");
        }
        let attempt = job.attempt() + 1;
        let env = job_env(job, attempt, Placed::ByCluster, d.tag());
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
            .map(|t| job_env(t, t.attempt() + 1, Placed::ByCluster, d.tag()))
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
        for job in interrupted {
            let gang = job.workflow_id.filter(|w| {
                d.lock_jobs()
                    .workflow(*w)
                    .is_some_and(|wf| wf.atomic && wf.state == WorkflowState::Queued)
            });
            let found = match gang {
                Some(w) => self.slurm.find_het(w, job.attempt() + 1),
                None => self.slurm.find(job.id.0, job.attempt() + 1),
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
        // A heterogeneous job lists one line per component: it is over when all are.
        let lines: HashMap<u64, QueueLine> = match self.slurm.queue(&ids) {
            Ok(lines) => {
                let mut by_id: HashMap<u64, QueueLine> = HashMap::new();
                for l in lines {
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
        for &(id, sid) in tracked {
            let line = lines.get(&sid);
            let state = line.map(|l| l.state.as_str()).unwrap_or("");
            let known = d.lock_jobs().get(id).cloned();
            let Some(job) = known.filter(|j| j.slurm_id() == Some(sid)) else {
                continue; // ended or resubmitted meanwhile
            };
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
                let reason = match line {
                    Some(l) if !l.reason.is_empty() && l.reason != "None" => {
                        format!("Slurm job {sid}: {} ({})", l.state, l.reason)
                    }
                    Some(l) => format!("Slurm job {sid}: {}", l.state),
                    None => continue,
                };
                if job.slurm_state() != Some(state) || job.reason() != Some(reason.as_str()) {
                    let seen = Transition::SlurmSeen {
                        state: state.to_string(),
                        reason: Some(reason),
                        nodes: None,
                    };
                    if let Err(e) = d.lock_jobs().apply(id, seen, now_ms()) {
                        tracing::warn!(job = id.0, "cannot record Slurm's word: {e}");
                    }
                    changed = true;
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
                self.slurm_lost(&**d, &job, sid);
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
    fn slurm_lost<H: Host>(&self, d: &H, job: &JobRecord, sid: u64) {
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
        let Some(sid) = job.slurm_id() else {
            return false;
        };
        let slurm = self.slurm.clone();
        let run_as = d.run_as(job).ok().flatten();
        let wake = self.wake.clone();
        let id = job.id;
        d.tasks().spawn_blocking(move || {
            match slurm.cancel(sid, run_as.as_ref()) {
                Ok(()) => tracing::info!(job = id.0, slurm = sid, "scancel sent"),
                Err(e) => tracing::warn!(job = id.0, slurm = sid, "scancel failed: {e}"),
            }
            wake.notify_one();
        });
        true
    }
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
