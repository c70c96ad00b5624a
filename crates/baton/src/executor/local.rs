//! The local backend: jobs run on this machine, under the supervisor. Its pass asks the daemon
//! for the pure scheduler's starts (`Host::place`: committed before anything acts on them) and
//! hands them to the supervisor off the async workers; each attempt is watched until the
//! supervisor says it ended, and its record says how. After a restart, or when a watch resolves
//! because the supervisor is gone, `take_up` looks at the job's files to see whether the attempt
//! ended, still runs, never started, or lost its supervisor. The stoppers are this backend's
//! own: a cancel reaches an attempt through them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use baton_core::lifecycle::decide::{self, AttemptExit};
use baton_core::lifecycle::{Ending, Exit, Transition};
use baton_core::{JobId, JobState, Millis};
use futures_util::future::BoxFuture;

use super::backend::cancel_unstarted;
use super::contain::Method;
use super::{
    Backend, ExitRecord, Host, Launch, LocalExecutor, Placed, Recovery, SignalError, Stopper,
    Watch, end_lost_attempt, job_env,
};
use crate::clock::now_ms;
use crate::jobs::TableError;
use crate::store::JobRecord;
use crate::tasks::Until;

/// Jobs run here, under the supervisor.
#[derive(Clone)]
pub struct LocalBackend {
    executor: Arc<LocalExecutor>,
    /// How every process of a job is held (a cgroup per attempt, or a supervisor of the
    /// attempt alone as subreaper), decided once at startup.
    containment: Method,
    /// How a cancel reaches each running job.
    stoppers: Arc<Mutex<HashMap<JobId, Stopper>>>,
}

impl LocalBackend {
    pub fn new(executor: LocalExecutor, containment: Method) -> LocalBackend {
        LocalBackend {
            executor: Arc::new(executor),
            containment,
            stoppers: Arc::default(),
        }
    }

    fn stoppers(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Stopper>> {
        self.stoppers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<H: Host> Backend<H> for LocalBackend {
    fn pass(&self, host: &Arc<H>) -> Option<Millis> {
        let (launches, next_wakeup) = self.place(host);
        if !launches.is_empty() {
            // Launching touches files, the supervisor's socket and (in system mode) the user
            // database: off the async workers, so that requests keep being answered meanwhile.
            let (me, host) = (self.clone(), host.clone());
            host.clone().tasks().spawn_blocking(move || {
                for (job, cgroup) in launches {
                    me.launch(&host, job, cgroup);
                }
            });
        }
        next_wakeup
    }

    fn cancel(
        &self,
        host: &H,
        jobs: &mut H::Locked<'_>,
        job: &JobRecord,
        request: Transition,
    ) -> Result<bool, TableError> {
        if job.state() == JobState::Queued {
            return cancel_unstarted(host, jobs, job, &request);
        }
        if job.cancel_requested_by().is_none() {
            jobs.apply(job.id, request, now_ms())?;
        }
        // Asking again is harmless: the supervisor escalates on its own schedule. An attempt
        // still being handed over has no stopper yet; `watch` delivers the cancel once it has.
        Ok(self.stoppers().get(&job.id).is_some_and(Stopper::stop))
    }

    fn signal(&self, host: &H, job: &JobRecord, signal: i32) -> Result<String, SignalError> {
        if !(1..=64).contains(&signal) || signal == 32 || signal == 33 {
            return Err(SignalError::Failed(format!(
                "signal {signal} cannot be sent"
            )));
        }
        // SAFETY: a real signal number (checked above; 32 and 33, glibc's, are refused), only
        // ever sent to other processes, never used for a handler or mask of this one.
        let sig = unsafe { rustix::process::Signal::from_raw_unchecked(signal) };
        super::signal_attempt(&host.files(job.id), job.attempt(), sig)
            .map_err(SignalError::NothingRuns)
    }

    fn recover(&self, host: &Arc<H>) -> BoxFuture<'static, ()> {
        let (me, host) = (self.clone(), host.clone());
        Box::pin(async move { me.recover(&host).await })
    }

    fn follow(&self, _host: Arc<H>) -> Option<BoxFuture<'static, ()>> {
        None // each attempt is watched from its launch (or its recovery) on
    }

    fn places_here(&self) -> bool {
        true
    }
}

impl LocalBackend {
    /// A scheduling pass: the jobs it started, each with the cgroup made for it (before the
    /// start was committed, with the `contained` event that says so).
    fn place<H: Host>(&self, host: &Arc<H>) -> (Vec<(JobRecord, Option<PathBuf>)>, Option<Millis>) {
        let mut made: HashMap<JobId, Option<PathBuf>> = HashMap::new();
        let (launches, next_wakeup) = host.place(&mut |job| {
            // The attempt it is about to start.
            let (cgroup, contained) = self.containment.prepare(job.id.0, job.attempt() + 1);
            made.insert(job.id, cgroup);
            contained
        });
        let launches: Vec<(JobRecord, Option<PathBuf>)> = launches
            .into_iter()
            .map(|job| {
                let cgroup = made.remove(&job.id).flatten();
                (job, cgroup)
            })
            .collect();
        // Made for a start that could not be recorded: no job is in them.
        for dir in made.into_values().flatten() {
            let _ = std::fs::remove_dir(dir);
        }
        (launches, next_wakeup)
    }

    /// Hands a job the pass started to the supervisor, and watches it. `cgroup`: the one made
    /// for this attempt, if any.
    fn launch<H: Host>(&self, host: &Arc<H>, job: JobRecord, cgroup: Option<PathBuf>) {
        let files = host.files(job.id);
        let made = cgroup.clone();
        let result = self
            .launch_description(&**host, &job, cgroup)
            .and_then(|launch| {
                self.executor
                    .launch(&files, &launch)
                    .map_err(|e| e.to_string())
            });
        match result {
            Ok((watch, signal)) => self.watch(host, job.id, job.attempt(), watch, signal),
            Err(e) => {
                tracing::error!(job = job.id.0, "cannot start: {e}");
                if let Some(dir) = made {
                    let _ = std::fs::remove_dir(dir);
                }
                let ending = Ending::failed(format!("could not start: {e}"), now_ms());
                let mut jobs = host.lock_jobs();
                host.end(&mut jobs, job.id, ending);
            }
        }
    }

    fn launch_description<H: Host>(
        &self,
        host: &H,
        job: &JobRecord,
        cgroup: Option<std::path::PathBuf>,
    ) -> Result<Launch, String> {
        let mut env = job_env(job, job.attempt(), Placed::Here(job.gpus()), host.tag());
        if let Some(path) = host.deps_file(job, false) {
            env.insert("BATON_DEPS_JSON".into(), path.display().to_string());
        }
        let run_as = host.run_as(job)?;
        Ok(Launch {
            job_id: job.id.0,
            attempt: job.attempt(),
            command: job.command.clone(),
            cwd: job.cwd.clone(),
            env: env.into_iter().collect(),
            run_as,
            time_limit_ms: job.attempt_time_limit(),
            grace_ms: host.grace_ms(),
            umask: job.umask,
            cgroup: cgroup.map(|dir| dir.display().to_string()),
            cpus: job.request.cpus,
            mem_limit: (job.request.mem > 0).then_some(job.request.mem),
            stdin: job.stdin.clone(),
            checkpoint: job.signal,
        })
    }

    /// Follows an attempt until its watch resolves. `stopper` is how cancel reaches it; a
    /// cancel that came while it was being handed over is delivered now.
    fn watch<H: Host>(
        &self,
        host: &Arc<H>,
        id: JobId,
        attempt: u32,
        watch: Watch,
        stopper: Option<Stopper>,
    ) {
        if let Some(stopper) = stopper {
            // Under the daemon's lock, so that a cancel cannot come between the look and the
            // stopper being where the next cancel finds it.
            let jobs = host.lock_jobs();
            let cancelled = jobs
                .get(id)
                .is_some_and(|j| j.attempt() == attempt && j.cancel_requested_by().is_some());
            if cancelled {
                stopper.stop();
            }
            self.stoppers().insert(id, stopper);
            drop(jobs);
        }
        // The supervisor's word comes through the link (`SupervisorEvents`): nothing to await.
        if matches!(watch, Watch::Supervisor) {
            return;
        }
        let (me, host) = (self.clone(), host.clone());
        // Cancelled at a stop: the job runs on, and the next daemon watches it again.
        host.clone().tasks().spawn(Until::Drained, async move {
            watch.exited().await;
            // Almost always the record says how it ended; when the supervisor is gone instead,
            // the attempt may never have started, or may run on under a supervisor of its own.
            let files = host.files(id);
            let found = match files.exit_of(attempt) {
                Some(exit) => Recovery::Ended(exit),
                None => me.executor.recover(&files, attempt).await,
            };
            me.take_up(&host, id, attempt, found, "its supervisor stopped");
        });
    }

    /// What became of an attempt the supervisor reported ended without a record of its end
    /// (it was not its to run), or left unfinished when it went away: read from its files.
    fn settle<H: Host>(&self, host: &Arc<H>, id: JobId, attempt: u32) {
        let (me, host) = (self.clone(), host.clone());
        host.clone().tasks().spawn(Until::Drained, async move {
            let found = me.executor.recover(&host.files(id), attempt).await;
            me.take_up(&host, id, attempt, found, "its supervisor stopped");
        });
    }

    /// An attempt whose supervisor died without recording how it ended (`kill -9`, machine
    /// trouble): what it left running is ended first, and only then is the attempt over and its
    /// GPUs free.
    async fn lost<H: Host>(self, host: Arc<H>, id: JobId, attempt: u32) {
        tracing::warn!(
            job = id.0,
            "the supervisor died without recording an exit; ending what it left running"
        );
        let files = host.files(id);
        let grace = std::time::Duration::from_millis(host.grace_ms().max(0) as u64);
        let ended = host
            .tasks()
            .spawn_blocking(move || end_lost_attempt(&files, attempt, grace));
        if let Err(e) = ended.await {
            tracing::error!(
                job = id.0,
                "ending the lost attempt's processes failed: {e}"
            );
        }
        self.attempt_ended(&*host, id, attempt, None);
    }

    /// Records the end of an attempt: final state, or back to the queue for a retry. One lock
    /// from the look at the job to the record of its fate, so a cancel cannot slip in between.
    fn attempt_ended<H: Host>(&self, host: &H, id: JobId, attempt: u32, exit: Option<ExitRecord>) {
        let now = now_ms();
        let jobs = host.lock_jobs();
        let job = match jobs.get(id) {
            Some(job) if job.state() == JobState::Running && job.attempt() == attempt => {
                job.clone()
            }
            // Already recorded (a recovery and a watch can both see one exit); one being
            // recorded is left alone by `attempt_over`.
            _ => return,
        };
        self.stoppers().remove(&id);
        let exit = exit.map(|e| AttemptExit {
            exit: Exit {
                code: e.exit_code,
                signal: e.signal,
            },
            timed_out: e.timed_out,
            cancelled: e.cancelled,
            error: e.error,
            ended_at: e.ended_at,
            memory_exceeded: e.memory_exceeded,
        });
        let ending = decide::attempt_ending(job.facts(), exit.as_ref(), now);
        host.attempt_over(jobs, &job, ending);
    }

    /// Picks up the jobs the store says are running after a restart: each ended while the
    /// daemon was away, still runs (watched again), never started (back to the queue), or lost
    /// its supervisor (what it left is ended, then so is the attempt).
    async fn recover<H: Host>(&self, host: &Arc<H>) {
        self.executor.set_events(Arc::new(SupervisorEvents {
            backend: self.clone(),
            host: host.clone(),
            runtime: tokio::runtime::Handle::current(),
        }));
        // The supervisor that still runs jobs of an earlier daemon, or a new one, ready before
        // the first job is (starting one takes milliseconds; connecting blocks).
        let me = self.clone();
        let connected = host.tasks().spawn_blocking(move || me.executor.connect());
        match connected.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the supervisor cannot be reached yet: {e}"),
            Err(e) => tracing::warn!("connecting to the supervisor failed: {e}"),
        }
        // A job with a Slurm id was a Slurm backend's (the daemon ran with `kind = "slurm"`
        // before): no supervisor of this machine has it, so it is left as it is.
        let running: Vec<JobRecord> = host
            .lock_jobs()
            .active()
            .filter(|j| j.state() == JobState::Running && j.slurm_id().is_none())
            .cloned()
            .collect();
        for job in running {
            let files = host.files(job.id);
            let attempt = job.attempt();
            let found = self.executor.recover(&files, attempt).await;
            self.take_up(host, job.id, attempt, found, "the daemon stopped");
        }
    }

    /// Acts on what became of an attempt nobody watched any more: recorded as ended, watched
    /// again, back to the queue (`who` stopped before it could start), or its leftovers ended
    /// and the attempt lost.
    fn take_up<H: Host>(&self, host: &Arc<H>, id: JobId, attempt: u32, found: Recovery, who: &str) {
        match found {
            Recovery::Ended(exit) => self.attempt_ended(&**host, id, attempt, Some(exit)),
            Recovery::Running(watch, stopper) => {
                tracing::info!(job = id.0, "still running; watching it again");
                self.watch(host, id, attempt, watch, Some(stopper));
            }
            Recovery::NeverStarted => {
                tracing::info!(job = id.0, "launch never started; back to the queue");
                self.stoppers().remove(&id);
                let withdraw = Transition::Withdraw {
                    reason: format!("requeued: {who} before it could start"),
                };
                let mut jobs = host.lock_jobs();
                let still_ours = jobs
                    .get(id)
                    .is_some_and(|j| j.state() == JobState::Running && j.attempt() == attempt);
                if still_ours && let Err(e) = jobs.apply(id, withdraw, now_ms()) {
                    tracing::error!(job = id.0, "cannot put it back in the queue: {e}");
                }
                drop(jobs);
                host.wake();
            }
            Recovery::Lost => {
                let lost = self.clone().lost(host.clone(), id, attempt);
                host.tasks().spawn(Until::Drained, lost);
            }
        }
    }
}

/// What the supervisor says, acted on where it is read (the link's thread): each batch of ends
/// is recorded, then the jobs that can start on what they freed are started, in one go on that
/// thread. Handing them to the async workers and then to a blocking thread for the launch cost
/// each short job about a millisecond of waiting for a core between the hops.
struct SupervisorEvents<H: Host> {
    backend: LocalBackend,
    host: Arc<H>,
    /// For the tasks it starts (the rare cases that read files and wait).
    runtime: tokio::runtime::Handle,
}

impl<H: Host> SupervisorEvents<H> {
    /// The job whose directory is `dir`.
    fn job_of(&self, dir: &str) -> Option<JobId> {
        let id = JobId(
            std::path::Path::new(dir)
                .file_name()?
                .to_str()?
                .parse()
                .ok()?,
        );
        (self.host.files(id).dir.as_os_str() == dir).then_some(id)
    }
}

impl<H: Host> super::Events for SupervisorEvents<H> {
    fn ended(&self, ended: &[super::supervisor::protocol::Ended]) {
        let _runtime = self.runtime.enter();
        // The pass these ends ask for is run here, just after: the scheduler loop is not woken
        // for it.
        self.host.deferring_wakes(&mut || {
            for end in ended {
                let Some(id) = self.job_of(&end.dir) else {
                    continue;
                };
                match self.host.files(id).exit_of(end.attempt) {
                    Some(exit) => {
                        self.backend
                            .attempt_ended(&*self.host, id, end.attempt, Some(exit))
                    }
                    None => self.backend.settle(&self.host, id, end.attempt),
                }
            }
        });
        if !self.host.pass_due() {
            return;
        }
        if self.host.tasks().stopping() {
            // No new work at a stop; whatever asked for the pass is the next daemon's.
            return;
        }
        let (launches, _) = self.backend.place(&self.host);
        for (job, cgroup) in launches {
            self.backend.launch(&self.host, job, cgroup);
        }
    }

    fn gone(&self, unfinished: Vec<super::supervisor::protocol::Ended>) {
        let _runtime = self.runtime.enter();
        for end in unfinished {
            if let Some(id) = self.job_of(&end.dir) {
                self.backend.settle(&self.host, id, end.attempt);
            }
        }
    }
}
