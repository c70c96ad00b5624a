//! The local backend: jobs run on this machine, each attempt under its own supervisor. A
//! scheduling pass asks the pure core (`baton_core::plan`) what to start, commits the starts
//! (the job table's `Start` transitions) in one transaction and only then launches their
//! supervisors; each supervisor is watched through its pidfd until it exits, and its record
//! says how the attempt ended. After a restart, `recover` looks at each running job's files to
//! see whether it ended, still runs, never started, or lost its supervisor.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use baton_core::lifecycle::decide::{self, AttemptExit};
use baton_core::lifecycle::{Ending, Runner, Transition};
use baton_core::{JobId, JobState, Millis};

use super::{
    Backend, ExitRecord, Launch, LocalExecutor, Recovery, Watch, end_lost_attempt, stop_supervisor,
};
use crate::daemon::{
    Daemon, Inner, LEASE_MS, Placed, TableError, facts, job_env, now_ms, scheduling_input, tasks,
};
use crate::store::JobRecord;

/// Jobs run here, under supervisors.
#[derive(Clone)]
pub struct LocalBackend {
    executor: Arc<LocalExecutor>,
}

impl LocalBackend {
    pub fn new(executor: LocalExecutor) -> LocalBackend {
        LocalBackend {
            executor: Arc::new(executor),
        }
    }
}

impl Backend for LocalBackend {
    fn pass(&self, daemon: &Arc<Daemon>) -> Option<Millis> {
        self.schedule(daemon)
    }

    fn cancel(
        &self,
        daemon: &Daemon,
        inner: &mut Inner,
        job: &JobRecord,
        request: Transition,
    ) -> Result<(), TableError> {
        if job.state() == JobState::Queued {
            return super::cancel_unstarted(daemon, inner, job, &request);
        }
        if job.cancel_requested_by().is_none() {
            inner.jobs.apply(job.id, request, now_ms())?;
        }
        // Asking again is harmless: the supervisor escalates on its own schedule. A supervisor
        // still being started has no pidfd yet; `watch` delivers the cancel once it has one.
        if let Some(fd) = inner.supervisors.get(&job.id) {
            stop_supervisor(fd);
        }
        Ok(())
    }

    fn recover(&self, daemon: &Arc<Daemon>) -> futures_util::future::BoxFuture<'static, ()> {
        let (me, daemon) = (self.clone(), daemon.clone());
        Box::pin(async move { me.recover(&daemon).await })
    }

    fn follow(&self, _daemon: Arc<Daemon>) -> Option<futures_util::future::BoxFuture<'static, ()>> {
        None // each supervisor is watched from its launch (or its recovery) on
    }

    fn places_here(&self) -> bool {
        true
    }
}

impl LocalBackend {
    /// One scheduling pass: decide with the pure core, commit the decisions, then act on them.
    /// Returns when a queued job's retry backoff ends, if one waits for that.
    fn schedule(&self, d: &Arc<Daemon>) -> Option<Millis> {
        let now = now_ms();
        let mut launches = Vec::new();
        let mut cascade = false;
        let next_wakeup;
        {
            let mut inner = d.lock();
            let (running, pending, states) = match scheduling_input(&inner, &d.gpus) {
                Ok(input) => input,
                Err(e) => {
                    tracing::error!("scheduling pass skipped: {e}");
                    return None;
                }
            };
            d.metrics
                .set_queue(pending.len() as i64, running.len() as i64);
            if pending.is_empty() {
                return None;
            }
            let plan = baton_core::plan(&d.gpus, &running, &pending, &states, now);
            next_wakeup = plan.next_wakeup;

            // Atomic workflows first: every task's GPUs reserved in one transaction, or, if
            // that cannot be recorded, none of its tasks starts in this pass.
            let mut unrecorded: Vec<JobId> = Vec::new();
            for admission in &plan.admissions {
                let lease = now + LEASE_MS;
                match inner
                    .jobs
                    .admit(admission.gang, &admission.reserved, lease, now)
                {
                    Ok(_) => {
                        tracing::info!(workflow = admission.gang, "atomic workflow admitted");
                    }
                    Err(e) => {
                        tracing::error!(
                            workflow = admission.gang,
                            "cannot record the admission: {e}"
                        );
                        unrecorded.extend(admission.reserved.iter().map(|(id, _)| *id));
                    }
                }
            }

            for (id, reason) in &plan.dependency_failed {
                d.finish(&mut inner, *id, Ending::failed(reason.clone(), now));
                cascade = true;
            }
            let starts: Vec<(JobId, Vec<u32>)> = plan
                .starts
                .iter()
                .filter(|s| !unrecorded.contains(&s.job))
                .map(|s| (s.job, s.gpus.clone()))
                .collect();
            if !starts.is_empty() {
                // Whether each could start at once (no dependency, never waited for GPUs): its
                // submit-to-start latency is what the dispatch path costs.
                let prompt: Vec<Option<Millis>> = starts
                    .iter()
                    .map(|(id, _)| {
                        inner
                            .jobs
                            .get(*id)
                            .filter(|j| {
                                j.deps.is_empty() && j.attempt() == 0 && !inner.jobs.has_waited(*id)
                            })
                            .map(|j| j.submitted_at)
                    })
                    .collect();
                let changes = starts
                    .iter()
                    .map(|(id, gpus)| {
                        let start = Transition::Start {
                            gpus: gpus.clone(),
                            at: now,
                            on: Runner::Local,
                        };
                        (*id, start)
                    })
                    .collect();
                let started = match inner.jobs.apply_all(changes, now, |_| Ok(())) {
                    Ok(started) => started,
                    Err(e) => {
                        // Nothing started; the pass is tried again in a second.
                        tracing::error!("cannot record job starts; not starting them: {e}");
                        d.write_failed(&mut inner, &e);
                        let again = now + 1_000;
                        return Some(next_wakeup.map_or(again, |n| n.min(again)));
                    }
                };
                d.write_succeeded(&mut inner);
                d.metrics.set_queue(
                    (pending.len() - starts.len()) as i64,
                    (running.len() + starts.len()) as i64,
                );
                for ((job, _), submitted_at) in started.into_iter().zip(prompt) {
                    if let Some(at) = submitted_at {
                        d.metrics
                            .observe_schedule_latency((now - at).max(0) as f64 / 1000.0);
                    }
                    d.workflow_task_started(&mut inner, &job);
                    launches.push(job);
                }
            }
            inner.jobs.set_waiting(plan.waiting);
        }
        if cascade || !launches.is_empty() {
            d.notify_changed();
        }
        if cascade {
            // A job failed for its dependency may itself be a dependency.
            d.wake();
        }
        if !launches.is_empty() {
            // Launching touches files, the spawner's socket and (in system mode) the user
            // database: off the async workers, so that requests keep being answered meanwhile.
            let (me, d) = (self.clone(), d.clone());
            d.clone().tasks.spawn_blocking(move || {
                for job in launches {
                    me.launch(&d, job);
                }
            });
        }
        next_wakeup
    }

    fn launch(&self, d: &Arc<Daemon>, job: JobRecord) {
        let files = d.files(job.id);
        let (cgroup, contained) = d.config.containment.prepare(job.id.0, job.attempt());
        let made = cgroup.clone();
        let result = self.launch_description(d, &job, cgroup).and_then(|launch| {
            self.executor
                .launch(&files, &launch)
                .map_err(|e| e.to_string())
        });
        match result {
            Ok((watch, signal)) => {
                // Which way its processes are held, for `baton events`: a cgroup, or the
                // supervisor as subreaper (and why no cgroup).
                if let Err(e) =
                    d.lock()
                        .jobs
                        .store_mut()
                        .add_event(job.id, "contained", &contained, now_ms())
                {
                    tracing::warn!(
                        job = job.id.0,
                        "cannot record how the job is contained: {e}"
                    );
                }
                self.watch(d, job.id, job.attempt(), watch, signal)
            }
            Err(e) => {
                tracing::error!(job = job.id.0, "cannot start: {e}");
                if let Some(dir) = made {
                    let _ = std::fs::remove_dir(dir);
                }
                let ending = Ending::failed(format!("could not start: {e}"), now_ms());
                let mut inner = d.lock();
                d.finish(&mut inner, job.id, ending);
            }
        }
    }

    fn launch_description(
        &self,
        d: &Daemon,
        job: &JobRecord,
        cgroup: Option<std::path::PathBuf>,
    ) -> Result<Launch, String> {
        let env = job_env(job, job.attempt(), Placed::Here(job.gpus()), &d.tag);
        let run_as = d.run_as(job)?;
        Ok(Launch {
            job_id: job.id.0,
            attempt: job.attempt(),
            command: job.command.clone(),
            cwd: job.cwd.clone(),
            env: env.into_iter().collect(),
            run_as,
            time_limit_ms: job.time_limit,
            grace_ms: d.config.grace_ms,
            umask: job.umask,
            cgroup: cgroup.map(|dir| dir.display().to_string()),
        })
    }

    /// Follows a supervisor until it exits. `signal` (its pidfd) is how cancel reaches it; a
    /// cancel that came while it was being started is delivered now.
    fn watch(
        &self,
        d: &Arc<Daemon>,
        id: JobId,
        attempt: u32,
        watch: Watch,
        signal: Option<OwnedFd>,
    ) {
        if let Some(fd) = signal {
            let mut inner = d.lock();
            let cancelled = inner
                .jobs
                .get(id)
                .is_some_and(|j| j.attempt() == attempt && j.cancel_requested_by().is_some());
            if cancelled {
                stop_supervisor(&fd);
            }
            inner.supervisors.insert(id, fd);
        }
        let (me, d) = (self.clone(), d.clone());
        // Cancelled at a stop: the job runs on, and the next daemon watches it again.
        d.clone().tasks.spawn(tasks::Until::Drained, async move {
            watch.exited().await;
            let exit = d.files(id).exit_of(attempt);
            match exit {
                Some(exit) => me.attempt_ended(&d, id, attempt, Some(exit)),
                None => me.lost(d, id, attempt).await,
            }
        });
    }

    /// An attempt whose supervisor died without recording how it ended (`kill -9`, machine
    /// trouble): what it left running is ended first, and only then is the attempt over and its
    /// GPUs free.
    async fn lost(self, d: Arc<Daemon>, id: JobId, attempt: u32) {
        tracing::warn!(
            job = id.0,
            "the supervisor died without recording an exit; ending what it left running"
        );
        let files = d.files(id);
        let grace = std::time::Duration::from_millis(d.config.grace_ms.max(0) as u64);
        let ended = d
            .tasks
            .spawn_blocking(move || end_lost_attempt(&files, attempt, grace));
        if let Err(e) = ended.await {
            tracing::error!(
                job = id.0,
                "ending the lost attempt's processes failed: {e}"
            );
        }
        self.attempt_ended(&d, id, attempt, None);
    }

    /// Records the end of an attempt: final state, or back to the queue for a retry. One lock
    /// from the look at the job to the record of its fate, so a cancel cannot slip in between.
    fn attempt_ended(&self, d: &Daemon, id: JobId, attempt: u32, exit: Option<ExitRecord>) {
        let now = now_ms();
        let mut inner = d.lock();
        let job = match inner.jobs.get(id) {
            Some(job) if job.state() == JobState::Running && job.attempt() == attempt => {
                job.clone()
            }
            // Already recorded (a recovery and a watch can both see one exit); one being
            // recorded is left alone by `conclude_attempt`.
            _ => return,
        };
        inner.supervisors.remove(&id);
        let exit = exit.map(|e| AttemptExit {
            exit: baton_core::lifecycle::Exit {
                code: e.exit_code,
                signal: e.signal,
            },
            timed_out: e.timed_out,
            cancelled: e.cancelled,
            error: e.error,
            ended_at: e.ended_at,
        });
        let ending = decide::attempt_ending(facts(&job), exit.as_ref(), now);
        d.conclude_attempt(inner, &job, ending);
    }

    /// Picks up the jobs the store says are running after a restart: each ended while the
    /// daemon was away, still runs (watched again), never started (back to the queue), or lost
    /// its supervisor (what it left is ended, then so is the attempt).
    async fn recover(&self, d: &Arc<Daemon>) {
        // A job with a Slurm id was a Slurm backend's (the daemon ran with `kind = "slurm"`
        // before): no supervisor of this machine has it, so it is left as it is.
        for job in d.running().into_iter().filter(|j| j.slurm_id().is_none()) {
            let files = d.files(job.id);
            let attempt = job.attempt();
            match self.executor.recover(&files, attempt).await {
                Recovery::Ended(exit) => {
                    tracing::info!(job = job.id.0, "ended while the daemon was away");
                    self.attempt_ended(d, job.id, attempt, Some(exit));
                }
                Recovery::Running(watch, signal) => {
                    tracing::info!(job = job.id.0, "still running; watching it again");
                    self.watch(d, job.id, attempt, watch, Some(signal));
                }
                Recovery::NeverStarted => {
                    tracing::info!(job = job.id.0, "launch never started; back to the queue");
                    let withdraw = Transition::Withdraw {
                        reason: "requeued: the daemon stopped before it could start".into(),
                    };
                    if let Err(e) = d.lock().jobs.apply(job.id, withdraw, now_ms()) {
                        tracing::error!(job = job.id.0, "cannot put it back in the queue: {e}");
                    }
                }
                Recovery::Lost => {
                    d.tasks.spawn(
                        tasks::Until::Drained,
                        self.clone().lost(d.clone(), job.id, attempt),
                    );
                }
            }
        }
    }
}
