//! The daemon: owns the store, the GPUs and the running supervisors, and reacts to events. A
//! submission, a cancel or a supervisor's exit each trigger one scheduling pass at once; nothing
//! runs on a timer. `run` takes the bound listener and a shutdown signal, so tests and `serve`
//! start it the same way.

mod auth;
mod deps;
mod durable;
mod error;
pub(crate) mod handlers;
mod hook;
mod host;
mod limits;
pub(crate) mod midrun;
mod monitor;
mod outbox;
mod place;
pub(crate) mod reservations;
mod retention;
mod server;
mod sweeps;
pub(crate) mod views;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use baton_core::lifecycle::decide::{self};
use baton_core::lifecycle::{Ending, Transition};
use baton_core::{Gpu, JobId, JobState, Millis, PendingJob, RunningJob};
use tokio::net::UnixListener;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::{Notify, watch};

pub use crate::clock::now_ms;
pub use auth::Peer;
pub use error::ApiError;
pub use outbox::deliver_from_stdin;
pub use server::ConnectionLimits;

use crate::executor::contain::Method;
use crate::executor::{Backend, JobFiles, LocalBackend, LocalExecutor, RunAs};
use crate::gpu::{GpuInfo, GpuProbe};
use crate::jobs::JobTable;
pub(crate) use crate::jobs::TableError;
use crate::store::{JobRecord, Store, StoreError};
use crate::tasks;
use crate::users;
pub(crate) use monitor::GpuSeries;

/// What the dashboard's live updates follow (`Daemon::subscribe_changes`).
pub(crate) struct LiveFeed {
    pub changed: watch::Receiver<u64>,
    pub sampled: watch::Receiver<u64>,
    pub stopping: watch::Receiver<bool>,
}

/// How a daemon was started.
#[derive(Clone, Debug)]
pub struct Config {
    pub home: PathBuf,
    /// Shared by several users: jobs run as their submitters, peers are checked per job.
    pub system: bool,
    /// SIGTERM-to-SIGKILL grace when cancelling or at a time limit.
    pub grace_ms: Millis,
    /// `status` without ids shows jobs that ended this recently.
    pub recent_ms: Millis,
    /// ... and at most this many of them (`[daemon] recent_shown`).
    pub recent_shown: usize,
    /// How long ended jobs and their output files are kept (`[retention]`).
    pub retention: crate::history::retention::Retention,
    /// The GPU monitor's interval and the waste rules (`[waste]` in config.toml).
    pub waste: baton_core::waste::WasteConfig,
    /// Where jobs run (`[backend]` in config.toml).
    pub backend: crate::executor::slurm::BackendSettings,
    /// How every process of a job is found and ended (`[daemon] containment`).
    pub containment: Method,
    /// How far `--retries` may go and how long a retry waits (`[retries]`).
    pub retries: crate::config::RetrySettings,
    /// How big a sweep may be and when it counts as broken (`[sweeps]`).
    pub sweeps: crate::config::SweepSettings,
    /// The detectors that follow a running job's output (`[midrun]`).
    pub midrun: baton_core::midrun::Policy,
    /// The shortest `--wake-every` a job may ask for (`[midrun] min_wake_every`).
    pub min_wake_every: Millis,
    /// The py-spy a stall alert reads a Python job's stacks with (`[midrun] py_spy`; empty:
    /// none).
    pub py_spy: String,
    /// What users of a shared daemon may ask for (`[limits]`).
    pub limits: crate::config::LimitSettings,
    /// What one connection may hold and for how long (`[limits]`).
    pub connections: ConnectionLimits,
    /// The cores and memory jobs may take, and a job's defaults (`[resources]`).
    pub host: crate::config::HostResources,
}

#[cfg(test)]
impl Config {
    /// A user-mode daemon in `home` with the defaults, a 1 s grace and no cgroups.
    pub fn for_test(home: &std::path::Path) -> Config {
        Config {
            home: home.to_path_buf(),
            system: false,
            grace_ms: 1_000,
            recent_ms: 3_600_000,
            recent_shown: 10,
            retention: Default::default(),
            waste: baton_core::waste::WasteConfig::default(),
            backend: Default::default(),
            containment: Method::Subreaper {
                why: "a test".into(),
            },
            retries: Default::default(),
            sweeps: Default::default(),
            midrun: Default::default(),
            min_wake_every: 10 * 60_000,
            py_spy: String::new(),
            limits: Default::default(),
            connections: crate::config::LimitSettings::default().connection_limits(),
            host: crate::config::ResourceSettings::default()
                .host(Some(64), Some(256 << 30), (64, 256 << 30))
                .expect("64 cores"),
        }
    }
}

pub struct Daemon {
    pub config: Config,
    inner: Mutex<Inner>,
    /// Asks the scheduler loop for a pass; permits coalesce, so a burst of events costs one pass.
    wake: Notify,
    /// Set by `wake`, cleared as a pass begins: whether a pass is still owed to a wake. A pass
    /// run on the supervisor link's thread (after ends) spares the scheduler loop its own.
    pass_due: std::sync::atomic::AtomicBool,
    /// When the last GPU sample that was recorded was taken: a job that started after it has
    /// no GPU samples to read. Until this daemon records one, when it started: a job started
    /// before that may have samples an earlier daemon recorded.
    gpus_sampled_at: std::sync::atomic::AtomicI64,
    /// When the last pass said to look again (a retry's backoff), wherever it ran.
    next_pass: Mutex<Option<Millis>>,
    /// Bumped after every job state change; `wait` and `logs --follow` listen to it.
    changed: watch::Sender<u64>,
    /// Bumped after every GPU sample; the dashboard's pages that chart the GPUs listen to it.
    sampled: watch::Sender<u64>,
    /// Flips to true when the daemon is shutting down, to end long-polls.
    shutting_down: watch::Sender<bool>,
    /// `baton shutdown` asked the daemon to stop.
    stop_requested: Notify,
    /// Jobs that just ended, for the report builder.
    ended: UnboundedSender<JobRecord>,
    ended_rx: Mutex<Option<UnboundedReceiver<JobRecord>>>,
    /// Jobs that started or stopped running, for the mid-run follower to look at (`midrun`).
    follow_tx: UnboundedSender<JobId>,
    follow_rx: Mutex<Option<UnboundedReceiver<JobId>>>,
    /// Wakes the outbox: a report is ready, or a delivery finished.
    outbox_wake: Notify,
    /// Wakes the loop that commits again what the store refused (`durable`).
    durable_wake: Notify,
    /// Every task the daemon spawns, so that a stop is one place (`run`).
    pub(crate) tasks: tasks::Tasks,
    /// The reports built lately, handed to the outbox and to waiters in memory.
    reports: outbox::Recent,
    /// Held while a sweep's comparison is built, so that the sweep's delivery and a `sweep wait`
    /// asking at the same moment build it once: the second finds it stored.
    sweep_report_building: tokio::sync::Mutex<()>,
    /// Where jobs run: this machine's supervisors, or a Slurm cluster.
    backend: Box<dyn Backend<Daemon>>,
    /// The baton binary, for deliveries run as another user.
    exe: PathBuf,
    probe: Box<dyn GpuProbe>,
    gpu_info: Vec<GpuInfo>,
    pub(crate) gpus: Vec<Gpu>,
    /// This machine, empty, as the scheduler places on it: its GPUs, and the cores and memory
    /// jobs may take.
    pub(crate) machine: baton_core::placement::Occupancy,
    /// The uid the daemon runs as; in user mode, the only one (besides root) it serves.
    uid: u32,
    /// Names this daemon's jobs machine-wide (its state directory and uid, hashed): in Slurm
    /// comments, cgroup names and `BATON_JOB_KEY`.
    pub(crate) tag: String,
    /// What `GET /metrics` serves.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Read-only connections for listings, history and stats: they never take the lock.
    readers: crate::store::Readers,
    /// Each user's `[limits]` caps, resolved once.
    caps: limits::CapsCache,
    /// The uids of `[limits] admins` on a shared daemon, looked up once at startup.
    admin_uids: HashSet<u32>,
    /// Where retention stands (`retention.rs`).
    retention: retention::State,
    /// How many ended jobs the store holds (the default `status` view says how many it leaves
    /// out): counted once at startup, then kept up as jobs end and retention removes them.
    ended_jobs: std::sync::atomic::AtomicU64,
    /// How far each followed job has got (`midrun` writes it, the views read it): its own
    /// small lock, so that a status never waits on the follower or the follower on the daemon.
    progress: Mutex<HashMap<JobId, baton_core::report::progress::Progress>>,
    /// The dashboard's login tokens and sessions (`crate::web`).
    pub(crate) web: crate::web::Sessions,
    /// Where the dashboard is served, once its listener is bound (`baton serve --web-addr`).
    pub(crate) web_url: Mutex<Option<String>>,
}

thread_local! {
    /// Set while this thread defers its wakes (`Daemon::deferring_wakes`).
    static WAKES_DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// What the daemon's lock guards. The backends (`crate::executor`) work on it too.
pub(crate) struct Inner {
    /// Every job's and workflow's state: the store and the live view together.
    pub(crate) jobs: JobTable,
    /// Ended jobs whose report is being built; `wait` returns once it is stored.
    reports_pending: HashSet<JobId>,
    /// Jobs whose deliveries are in flight, so the outbox never sends one twice at once.
    delivering: HashSet<JobId>,
    /// GPU use of jobs that ended in the last `USAGE_WINDOW_MS`, for fair share.
    recent_uses: Vec<baton_core::fair_share::Use>,
    /// The GPU monitor's series and the waste engine's state.
    monitor: monitor::MonitorState,
    /// Changes the store could not commit yet, retried until it does.
    unrecorded: durable::Unrecorded,
    /// What the comparison needs of the runs of active sweeps that have ended.
    sweep_runs: sweeps::SweepRuns,
    /// Reservations that stand or ended in the last week (`baton reserve`), by start.
    pub(crate) reservations: Vec<crate::store::ReservationRecord>,
}

/// How far back ended jobs count for fair share (seven half-lives: what is older weighs < 1%).
const USAGE_WINDOW_MS: Millis = 7 * baton_core::fair_share::HALF_LIFE_MS;

/// How long a reservation holds without renewal: after a crash, GPUs reserved for an atomic
/// workflow none of whose tasks started are given back once this has passed.
pub const LEASE_MS: Millis = 60_000;

/// A short, stable tag that names this daemon's jobs machine-wide (in Slurm comments, cgroup
/// names, `BATON_JOB_KEY`): its state directory and user, hashed.
pub fn tag_for(home: &std::path::Path, uid: u32) -> String {
    // FNV-1a: stable across builds and Rust versions, unlike the std hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in home
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .chain(&uid.to_le_bytes())
    {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:08x}", hash as u32)
}

impl Daemon {
    pub fn new(
        config: Config,
        store: Store,
        probe: Box<dyn GpuProbe>,
        exe: PathBuf,
    ) -> Result<Arc<Daemon>, StoreError> {
        // Streamed from the few columns it needs: reading a week of ended jobs whole (their
        // environments) would leave the allocator holding their size for good.
        let mut recent_uses = Vec::new();
        store.each_held_since(now_ms() - USAGE_WINDOW_MS, |h| {
            recent_uses.push(baton_core::fair_share::Use {
                owner: h.owner_uid,
                gpus: gpu_share(h.gpus_requested, h.gpu_mem),
                start: h.started_at,
                end: Some(h.ended_at),
            })
        })?;
        recent_uses.shrink_to_fit();
        let readers = crate::store::Readers::new(&config.home.join("baton.db"));
        let admin_uids = if config.system {
            let admins = config.limits.admins.iter();
            admins
                .filter_map(|name| users::by_name(name).map(|a| a.uid))
                .collect()
        } else {
            HashSet::new()
        };
        let ended_jobs = store.count_ended(&Default::default())?.into();
        let reservations = store.reservations_ending_after(now_ms() - reservations::KEPT_MS)?;
        let jobs = JobTable::load(store)?;
        let gpu_info = probe.gpus();
        let gpus = gpu_info
            .iter()
            .map(|g| Gpu {
                index: g.index,
                memory_total: g.memory_total,
                node: 0,
            })
            .collect::<Vec<Gpu>>();
        let machine = baton_core::placement::Occupancy::with_hosts(&gpus, &[config.host.capacity]);
        let (ended, ended_rx) = unbounded_channel();
        let (follow_tx, follow_rx) = unbounded_channel();
        let monitor_state = monitor::MonitorState::new(config.waste.clone());
        let uid = rustix::process::geteuid().as_raw();
        let tag = tag_for(&config.home, uid);
        let backend: Box<dyn Backend<Daemon>> =
            if config.backend.kind == crate::executor::slurm::BackendKind::Slurm {
                let slurm = crate::executor::slurm::Slurm::new(config.backend.clone(), tag.clone());
                Box::new(crate::executor::slurm::SlurmBackend::new(slurm))
            } else {
                let executor = LocalExecutor::new(exe.clone(), &config.home);
                Box::new(LocalBackend::new(executor, config.containment.clone()))
            };
        Ok(Arc::new(Daemon {
            config,
            inner: Mutex::new(Inner {
                jobs,
                reports_pending: HashSet::new(),
                delivering: HashSet::new(),
                recent_uses,
                monitor: monitor_state,
                unrecorded: Default::default(),
                sweep_runs: Default::default(),
                reservations,
            }),
            wake: Notify::new(),
            pass_due: std::sync::atomic::AtomicBool::new(true),
            next_pass: Mutex::new(None),
            gpus_sampled_at: std::sync::atomic::AtomicI64::new(now_ms()),
            changed: watch::Sender::new(0),
            sampled: watch::Sender::new(0),
            shutting_down: watch::Sender::new(false),
            stop_requested: Notify::new(),
            ended,
            ended_rx: Mutex::new(Some(ended_rx)),
            follow_tx,
            follow_rx: Mutex::new(Some(follow_rx)),
            outbox_wake: Notify::new(),
            durable_wake: Notify::new(),
            tasks: tasks::Tasks::new(),
            reports: outbox::Recent::default(),
            sweep_report_building: tokio::sync::Mutex::new(()),
            backend,
            exe,
            probe,
            gpu_info,
            gpus,
            machine,
            uid,
            tag,
            metrics: Arc::new(crate::metrics::Metrics::new()),
            readers,
            caps: Default::default(),
            admin_uids,
            retention: Default::default(),
            ended_jobs,
            progress: Mutex::new(HashMap::new()),
            web: Default::default(),
            web_url: Mutex::new(None),
        }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock must not wedge every later request.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn files(&self, id: JobId) -> JobFiles {
        JobFiles::new(crate::paths::job_dir(&self.config.home, id.0))
    }

    /// Runs `f` on one of the read-only connections, on the blocking pool: a listing neither
    /// takes the daemon's lock nor holds up an async worker.
    pub(crate) async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let me = self.clone();
        self.tasks
            .spawn_blocking(move || me.readers.with(f))
            .await
            .map_err(|e| ApiError::Internal(format!("a read failed: {e}")))?
            .map_err(ApiError::from)
    }

    /// Runs `f` on the blocking pool (a listing's read, its JSON): off the async workers.
    pub(crate) async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.tasks
            .spawn_blocking(f)
            .await
            .map_err(|e| ApiError::Internal(format!("a listing failed: {e}")))?
    }

    /// An ended job is active again (requeued): one ended job fewer in the store.
    pub(crate) fn reopened(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = self
            .ended_jobs
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(1)));
    }

    pub(crate) fn notify_changed(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Serves the API on `listener` until `shutdown` resolves. Running jobs are left running.
    pub async fn run(
        self: Arc<Self>,
        listener: UnixListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        // Recovery runs after the socket is bound, so a supervisor that exits meanwhile is
        // already covered by the watch we set up for it or by the exit file it leaves.
        self.recover().await;
        use tasks::Until::{Drained, Stop};
        let tasks = &self.tasks;
        tasks.spawn(Stop, self.clone().scheduler_loop());
        tasks.spawn(Stop, self.clone().outbox_loop());
        tasks.spawn(Stop, self.clone().midrun_loop());
        tasks.spawn(Stop, self.clone().monitor_loop());
        if let Some(rx) = self.ended_rx.lock().ok().and_then(|mut rx| rx.take()) {
            tasks.spawn(Drained, self.clone().report_loop(rx));
        }
        tasks.spawn(Drained, self.clone().lease_loop());
        tasks.spawn(Drained, self.clone().durable_loop());
        tasks.spawn(Stop, self.clone().retention_loop());
        if let Some(follow) = self.backend.follow(self.clone()) {
            tasks.spawn(Drained, follow);
        }
        let app = handlers::router(self.clone());
        let limits = server::fit_to_descriptors(self.config.connections);
        let me = self.clone();
        let asked = self.clone();
        let stop = async move {
            tokio::select! {
                _ = shutdown => {}
                _ = asked.stop_requested.notified() => {}
            }
        };
        // On a worker thread of its own task, not the thread that blocks on the runtime: each
        // connection's task, spawned from there, is then run by that worker as soon as the
        // accept loop yields, rather than handed to another thread to be woken.
        let served = tokio::spawn(server::serve(listener, app, limits, stop, move || {
            tracing::info!("shutting down; running jobs keep running under their supervisors");
            me.shutting_down.send_replace(true);
        }))
        .await;
        let result = served.unwrap_or_else(|e| Err(std::io::Error::other(e)));
        // No new work: no pass, no new delivery, no waste action. The deliveries in flight
        // finish and are recorded, so none goes twice; then every other task is cancelled (a
        // supervisor's watch among them: its job runs on) and all are awaited.
        tasks.stop_starting();
        // Long enough for a Codex delivery to see its message taken (`notify::codex`).
        self.drain_deliveries(std::time::Duration::from_secs(15))
            .await;
        tasks.stop().await;
        self.config.containment.tidy();
        result
    }

    /// Runs a pass per wake-up; also when a retry's backoff ends, since no event marks that.
    async fn scheduler_loop(self: Arc<Self>) {
        let mut next: Option<Millis> = None;
        loop {
            // A pass that ran elsewhere (on the supervisor link's thread) may have set a sooner
            // time to look again.
            let elsewhere = *self.next_pass.lock().unwrap_or_else(|p| p.into_inner());
            let at = match (next, elsewhere) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let backoff_over = async {
                match at {
                    Some(at) => {
                        let wait = (at - now_ms()).max(0) as u64;
                        tokio::time::sleep(std::time::Duration::from_millis(wait)).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Woken for a pass that another one has covered since: only the timer is new.
                _ = self.wake.notified() => if !self.pass_due() { continue },
                _ = backoff_over => {}
            }
            // A bug in one pass must not stop every later one.
            let pass = std::panic::AssertUnwindSafe(|| self.backend.pass(&self));
            next = std::panic::catch_unwind(pass).unwrap_or_else(|_| {
                tracing::error!("a scheduling pass panicked; the next event starts a new one");
                None
            });
        }
    }

    /// Whether baton itself places jobs on this machine's GPUs (see `Backend::places_here`).
    pub fn places_here(&self) -> bool {
        self.backend.places_here()
    }

    /// Stops a job, queued or running, as `request` (a `RequestCancel`) asks; its backend says
    /// how. Called with the lock held.
    pub(crate) fn cancel(
        &self,
        jobs: &mut host::Locked<'_>,
        job: &JobRecord,
        request: Transition,
    ) -> Result<bool, TableError> {
        self.backend.cancel(self, jobs, job, request)
    }

    /// Sends signal `signal` to every process of a running job; its backend says how. Blocking
    /// (it reads /proc, or runs scancel): called off the async workers, without the lock.
    pub(crate) fn signal(
        &self,
        job: &JobRecord,
        signal: i32,
    ) -> Result<String, crate::executor::SignalError> {
        self.backend.signal(self, job, signal)
    }

    /// Something outside says a job changed (Slurm's end-of-job mail): the backend looks now.
    pub fn poke(&self) {
        self.backend.poke();
    }

    /// Asks for a scheduling pass soon (coalesced with any already pending).
    pub fn wake(&self) {
        self.pass_due
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if !WAKES_DEFERRED.get() {
            self.wake.notify_one();
        }
    }

    /// Runs `f` with this thread's wakes deferred: they mark a pass as due without waking the
    /// scheduler loop, for a caller that runs the pass itself right after (`pass_due`).
    pub fn deferring_wakes(&self, f: &mut dyn FnMut()) {
        WAKES_DEFERRED.set(true);
        f();
        WAKES_DEFERRED.set(false);
    }

    /// Whether a `wake` came since the last pass began.
    pub fn pass_due(&self) -> bool {
        self.pass_due.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The identity a job's processes (and its Slurm commands) run as: its owner's, when the
    /// daemon serves other users; `None` to stay as the daemon.
    pub(crate) fn run_as(&self, job: &JobRecord) -> Result<Option<RunAs>, String> {
        if !(self.config.system && job.owner_uid != self.uid) {
            return Ok(None);
        }
        let account = users::by_uid(job.owner_uid)
            .ok_or_else(|| format!("user {} no longer exists", job.owner_uid))?;
        Ok(Some(RunAs {
            uid: account.uid,
            gid: account.gid,
            groups: users::groups_of(&account),
        }))
    }

    /// The end of a running attempt, by either backend: back to the queue if the job failed
    /// and has retries left, else its terminal state (`decide::after_attempt`).
    pub(crate) fn conclude_attempt(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        job: &JobRecord,
        ending: Ending,
    ) {
        let (id, now) = (job.id, now_ms());
        if inner.unrecorded.jobs.contains(&id) {
            return; // its end waits to be recorded already
        }
        // Backs off, so a job that fails at once never re-runs in a tight loop.
        let delay = self.config.retries.delay_after(job.attempt());
        // The retry's event is dated when the attempt ended, as its end would have been.
        let at = ending.at;
        match decide::after_attempt(job.facts(), ending, delay, now) {
            Transition::End(ending) => self.finish(&mut inner, id, ending),
            retry => self.record_change(&mut inner, durable::Change::Retry { id, retry, at }),
        }
    }

    /// Records a terminal state with one pending delivery per channel, frees the job's GPUs,
    /// and hands the job to the report builder. Called with the lock held.
    /// The channels a job's own messages go through (its report, its mid-run alerts).
    pub(crate) fn end_channels(
        &self,
        inner: &Inner,
        job: &JobRecord,
    ) -> Vec<crate::notify::Channel> {
        match self.run_channels(inner, job) {
            // A sweep's run: its sweep's comparison is delivered, not each run's report.
            Some(none) => none,
            // Queued before reports existed: the inbox file, as `auto` always includes.
            None if job.notify.is_empty() => vec![crate::notify::Channel::File {
                path: self.inbox_for(job.owner_uid, &job.env),
            }],
            None => job.notify.clone(),
        }
    }

    pub(crate) fn finish(&self, inner: &mut Inner, id: JobId, ending: Ending) {
        if inner.unrecorded.jobs.contains(&id) {
            return; // its end waits to be recorded already
        }
        let Some(job) = inner.jobs.get(id) else {
            return; // ended already
        };
        let channels = self.end_channels(inner, job);
        self.record_change(
            inner,
            durable::Change::End {
                id,
                ending,
                channels,
            },
        );
    }

    /// A failed attempt's retry is recorded: the job waits in the queue again, until its
    /// backoff is over.
    fn requeued_for_retry(&self) {
        self.notify_changed();
        self.wake();
    }

    /// A job's final state is recorded (`job` is the job as it ended): its GPUs are free, its
    /// report is built, and its workflow may have ended with it.
    fn ended(&self, inner: &mut Inner, job: &JobRecord) {
        let (id, at) = (job.id, job.ended_at().unwrap_or_else(now_ms));
        let ran = job.started_at().map(|s| (at - s).max(0) as f64 / 1000.0);
        self.metrics.job_ended(job.state().as_str(), ran);
        if let Some(u) = use_of(job, Some(at)) {
            let horizon = at - USAGE_WINDOW_MS;
            inner
                .recent_uses
                .retain(|u| u.end.is_none_or(|e| e >= horizon));
            inner.recent_uses.push(u);
        }
        inner.reports_pending.insert(id);
        self.ended_jobs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The job as it ended goes with it: the report need not read it back from the store.
        let _ = self.ended.send(job.clone());
        if let Some(w) = job.workflow_id {
            self.workflow_task_ended(inner, w, id, at);
        }
        if let Some(run) = &job.sweep {
            self.sweep_run_ended(inner, run.id, id, at);
        }
        tracing::info!(job = id.0, state = %job.state(), reason = job.reason().unwrap_or(""), "job ended");
        self.notify_changed();
        self.wake();
    }

    /// Asks the mid-run follower to look at a job that started or stopped running.
    pub(crate) fn follow(&self, id: JobId) {
        let _ = self.follow_tx.send(id);
    }

    /// A task started: its workflow, if it was still queued, is running.
    pub(crate) fn workflow_task_started(&self, inner: &mut Inner, job: &JobRecord) {
        self.follow(job.id);
        if let Some(w) = job.workflow_id
            && let Err(e) = inner.jobs.workflow_started(w)
        {
            tracing::error!(workflow = w, "cannot record the start: {e}");
        }
        self.sweep_run_started(inner, job);
    }

    /// Ends a workflow once its last task has ended: succeeded if every task did, cancelled if
    /// any was cancelled and none failed, else failed.
    fn workflow_task_ended(&self, inner: &mut Inner, workflow: u64, last: JobId, at: Millis) {
        if inner.jobs.active().any(|j| j.workflow_id == Some(workflow)) {
            return;
        }
        let jobs = match inner.jobs.store().workflow_jobs(workflow) {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::error!(workflow, "cannot read the workflow's tasks: {e}");
                return;
            }
        };
        let states: Vec<JobState> = jobs.iter().map(|j| j.state()).collect();
        let state = decide::workflow_outcome(&states);
        tracing::info!(workflow, state = state.as_str(), "workflow ended");
        // The summary, stored, then sent through the tasks' channels with the last task's report.
        let Some(wf) = inner.jobs.workflow(workflow).cloned() else {
            return;
        };
        let view = handlers::workflow_view(&wf, &jobs, &HashMap::new());
        let lines: Vec<baton_core::workflow::TaskLine> = jobs
            .iter()
            .map(|j| baton_core::workflow::TaskLine {
                task: j.task.clone().unwrap_or_else(|| j.name.clone()),
                job: j.id.0,
                state: j.state(),
                started_at: j.started_at(),
                ended_at: j.ended_at(),
                reason: j.reason().map(str::to_string),
            })
            .collect();
        let summary = baton_core::workflow::summary(
            workflow,
            &wf.name,
            state.as_str(),
            wf.submitted_at,
            at,
            &view.critical_path,
            &lines,
        );
        // A task's hook waits on that task's report, not on the workflow's summary.
        let channels: Vec<crate::notify::Channel> = jobs
            .first()
            .map(|j| j.notify.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| !matches!(c, crate::notify::Channel::ClaudeHook { .. }))
            .collect();
        self.record_change(
            inner,
            durable::Change::WorkflowEnd {
                workflow,
                state,
                at,
                last,
                summary,
                channels,
            },
        );
    }

    /// Renews the leases of reservations still waiting to be used, so they outlive nothing but
    /// the daemon itself. Not on the dispatch path: a timer for crash recovery only.
    async fn lease_loop(self: Arc<Self>) {
        let mut tick =
            tokio::time::interval(std::time::Duration::from_millis((LEASE_MS / 3) as u64));
        loop {
            tick.tick().await;
            let mut inner = self.lock();
            let now = now_ms();
            if let Err(e) = inner.jobs.renew_leases(now + LEASE_MS, now) {
                tracing::error!("cannot renew reservation leases: {e}");
            }
        }
    }

    /// After a crash: an atomic workflow whose reservations' lease has run out and none of whose
    /// tasks has started gives its GPUs back and waits for admission again.
    fn release_expired_reservations(&self) {
        let now = now_ms();
        let mut inner = self.lock();
        let expired: Vec<u64> = inner
            .jobs
            .workflows()
            .filter(|wf| wf.atomic && wf.admitted_at.is_some())
            .filter(|wf| {
                let tasks: Vec<&JobRecord> = inner
                    .jobs
                    .active()
                    .filter(|j| j.workflow_id == Some(wf.id))
                    .collect();
                let none_started = tasks.iter().all(|j| j.attempt() == 0);
                let lapsed = tasks
                    .iter()
                    .any(|j| j.lease_until().is_some_and(|until| until < now));
                none_started && lapsed
            })
            .map(|wf| wf.id)
            .collect();
        for w in expired {
            match inner.jobs.release(w, now) {
                Ok(()) => {
                    tracing::warn!(
                        workflow = w,
                        "reservation lease expired while the daemon was away; GPUs released"
                    );
                }
                Err(e) => tracing::error!(workflow = w, "cannot release expired reservations: {e}"),
            }
        }
    }

    /// Told of every job state change and of every GPU sample (counts that go up), and of the
    /// daemon's stop: what the dashboard's live updates follow.
    pub(crate) fn subscribe_changes(&self) -> LiveFeed {
        LiveFeed {
            changed: self.changed.subscribe(),
            sampled: self.sampled.subscribe(),
            stopping: self.shutting_down.subscribe(),
        }
    }

    /// Tells the dashboard's listeners that the GPUs were sampled.
    fn notify_sampled(&self) {
        self.sampled.send_modify(|n| *n += 1);
    }

    /// Every job not yet ended (queued, held, running), as the job table has them.
    pub(crate) fn active_jobs(&self) -> Vec<JobRecord> {
        self.lock().jobs.active().cloned().collect()
    }

    pub(crate) fn running(&self) -> Vec<JobRecord> {
        self.lock()
            .jobs
            .active()
            .filter(|j| j.state() == JobState::Running)
            .cloned()
            .collect()
    }

    /// Picks up after a restart: reservations whose lease lapsed are given back, and the
    /// backend takes up the jobs it was running.
    async fn recover(self: &Arc<Self>) {
        self.release_expired_reservations();
        self.backend.recover(self).await;
        self.wake();
    }

    /// A job the caller may read (its owner, or root), or the error that says why not.
    /// `what` names what is read, for the refusal ("output", "reports").
    fn readable_job(&self, peer: &Peer, id: JobId, what: &str) -> Result<JobRecord, ApiError> {
        let job = self.existing_job(peer, id)?;
        if !peer.may_read(&job) {
            return Err(ApiError::Forbidden(format!(
                "job {id} belongs to {}; you can read only your own jobs' {what}",
                job.owner
            )));
        }
        Ok(job)
    }

    /// A job the caller may act on (its owner, or root), or the error that says why not.
    /// `what` names what is done, for the refusal ("wake-ups").
    fn own_job(&self, peer: &Peer, id: JobId, what: &str) -> Result<JobRecord, ApiError> {
        let job = self.existing_job(peer, id)?;
        if !peer.may_act_on(&job) {
            return Err(ApiError::Forbidden(format!(
                "job {id} belongs to {}; you can claim only your own jobs' {what}",
                job.owner
            )));
        }
        Ok(job)
    }

    /// Job `id`, or a 404 that says which ids exist.
    fn existing_job(&self, peer: &Peer, id: JobId) -> Result<JobRecord, ApiError> {
        match self.job(id)? {
            Some(job) => Ok(job),
            None => {
                self.views(peer, &[id])?; // says which ids exist
                Err(ApiError::NotFound(format!("job {id} does not exist")))
            }
        }
    }

    /// Looks a job up: the live copy if it is active, else the stored one.
    pub(crate) fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.lock().jobs.lookup(id)
    }
}

type SchedulingInput = (Vec<RunningJob>, Vec<PendingJob>, HashMap<JobId, JobState>);

/// What the pure scheduler needs: running and queued jobs, the state of every dependency, and
/// the node each queued job should prefer (where its `colocate_with` partners or its
/// predecessors run or ran).
pub(crate) fn scheduling_input(inner: &Inner, gpus: &[Gpu]) -> Result<SchedulingInput, StoreError> {
    let mut running = Vec::new();
    let mut pending = Vec::new();
    let mut states: HashMap<JobId, JobState> = HashMap::new();
    // The GPUs of the jobs queued jobs depend on or want to be with: where their data is.
    let mut placed: HashMap<JobId, Vec<u32>> = HashMap::new();
    let mut missing = Vec::new();
    // Sweeps that cap their runs at once: how many of each run now (`--max-parallel`).
    let mut sweep_running: HashMap<u64, u32> = inner
        .jobs
        .sweeps()
        .filter(|s| s.max_parallel.is_some())
        .map(|s| (s.id, 0))
        .collect();
    if !sweep_running.is_empty() {
        for job in inner.jobs.active() {
            if let Some(run) = &job.sweep
                && (job.state() == JobState::Running || job.reserved().is_some())
                && let Some(n) = sweep_running.get_mut(&run.id)
            {
                *n += 1;
            }
        }
    }
    for job in inner.jobs.active() {
        match job.state() {
            JobState::Running => running.push(RunningJob {
                id: job.id,
                gpus: job.gpus().to_vec(),
                request: job.request,
                ends_by: job.ends_by(),
            }),
            // A queued job whose end waits to be recorded is not planned again, nor is a held
            // one (its recorded reason says it is held).
            JobState::Queued if inner.unrecorded.jobs.contains(&job.id) => {}
            JobState::Queued if job.held_by().is_some() => {}
            JobState::Queued => {
                let partners = job.deps.iter().map(|d| d.job).chain(job.colocate.clone());
                for other in partners {
                    match inner.jobs.get(other) {
                        Some(d) => {
                            states.insert(other, d.state());
                            placed.insert(other, d.gpus().to_vec());
                        }
                        None => missing.push(other),
                    }
                }
                pending.push(Queued {
                    owner: job.owner_uid,
                    job: PendingJob {
                        gang: inner.jobs.in_waiting_gang(job),
                        reserved: job.reserved().map(<[u32]>::to_vec),
                        colocate: job.colocate.clone(),
                        critical_path: job.critical_path,
                        not_before: job.not_before(),
                        begin: job.begin_at,
                        window: job.reservation.as_ref().map(|r| r.id),
                        throttle: job.sweep.as_ref().and_then(|run| {
                            let sweep = inner.jobs.sweep(run.id)?;
                            Some(baton_core::Throttle {
                                group: run.id,
                                max: sweep.max_parallel?,
                                running: *sweep_running.get(&run.id)?,
                            })
                        }),
                        ..PendingJob::new(
                            job.id,
                            job.priority,
                            job.submitted_at,
                            job.request,
                            job.time_limit,
                            job.deps.clone(),
                        )
                    },
                });
            }
            _ => {}
        }
    }
    // Dependencies that already ended are no longer active: ask the store.
    for (id, (state, gpus)) in inner.jobs.store().states(&missing)? {
        states.insert(id, state);
        placed.insert(id, gpus);
    }
    // A dependency whose report is still being built has not quite ended for its dependents:
    // they start once it is stored (milliseconds), so that what `BATON_DEPS_JSON` names exists.
    for (id, state) in states.iter_mut() {
        if state.is_terminal() && inner.reports_pending.contains(id) {
            *state = JobState::Running;
        }
    }
    let node_of_gpu: HashMap<u32, u32> = gpus.iter().map(|g| (g.index, g.node)).collect();
    let node_of = |job: JobId| {
        placed
            .get(&job)
            .and_then(|g| g.first())
            .and_then(|g| node_of_gpu.get(g).copied())
    };
    for p in &mut pending {
        let deps: Vec<JobId> = p.job.deps.iter().map(|d| d.job).collect();
        p.job.prefer_node = baton_core::locality::preferred_node(&p.job.colocate, &deps, node_of);
    }
    // Fair share matters only when several users wait: then each job carries its owner's use.
    let first = pending.first().map(|p| p.owner);
    if pending.iter().any(|p| Some(p.owner) != first) {
        let mut uses = inner.recent_uses.clone();
        uses.extend(inner.jobs.active().filter_map(|j| use_of(j, None)));
        let usage =
            baton_core::fair_share::usage(&uses, now_ms(), baton_core::fair_share::HALF_LIFE_MS);
        for p in &mut pending {
            p.job.owner_usage = usage.get(&p.owner).copied().unwrap_or(0);
        }
    }
    let pending = pending.into_iter().map(|p| p.job).collect();
    Ok((running, pending, states))
}

/// A queued job and its owner, while the scheduling input is put together.
struct Queued {
    job: PendingJob,
    owner: u32,
}

/// A job's use of the GPUs for fair share: GPUs held (a share of one for a memory-sized job)
/// from its start to `end` (`None`: still running).
fn use_of(job: &JobRecord, end: Option<Millis>) -> Option<baton_core::fair_share::Use> {
    let start = job.started_at()?;
    Some(baton_core::fair_share::Use {
        owner: job.owner_uid,
        gpus: gpu_share(job.request.count, job.request.mem_per_gpu),
        start,
        end,
    })
}

/// The GPUs a request holds for fair share: a memory-sized job counts the part of an 80 GiB
/// GPU it asked for.
fn gpu_share(count: u32, mem_per_gpu: Option<u64>) -> f64 {
    match mem_per_gpu {
        None => count as f64,
        Some(mem) => count as f64 * (mem as f64 / (80u64 << 30) as f64).min(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::tag_for;

    #[test]
    fn tags_are_stable_and_differ_by_home_and_user() {
        let a = tag_for(std::path::Path::new("/home/a/.local/share/baton"), 1000);
        assert_eq!(
            a,
            tag_for(std::path::Path::new("/home/a/.local/share/baton"), 1000)
        );
        assert_ne!(
            a,
            tag_for(std::path::Path::new("/home/b/.local/share/baton"), 1000)
        );
        assert_ne!(
            a,
            tag_for(std::path::Path::new("/home/a/.local/share/baton"), 1001)
        );
        assert_eq!(a.len(), 8);
    }
}
