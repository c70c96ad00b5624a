//! One attempt under a supervisor, as a state machine that the supervisor's loop drives. It is
//! claimed from its launch description (`claim`) and started (`Attempt::start`); the loop tells
//! it when its first process has been reaped (`main_exited`) or a cancel came (`stop`), and
//! moves it on whenever one of its deadlines comes (`due`, `advance`): the time limit, the
//! SIGKILL after the grace period, the next look at its memory, the next look for processes it
//! left, the next try at writing its record. It is over (`is_over`) once how it ended is in its
//! record, and the record's lock is released then: the daemon may act on the end.

use std::fs::{self, OpenOptions};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};
use rustix::process::Signal;

use super::spawn::spawn;
use crate::executor::contain::{Cgroup, Descendants, Processes};
use crate::executor::{
    ExitRecord, JobFiles, Launch, SupervisorEvent, append_event, limits, oom_kill_count,
    process_start_time, read_json,
};

/// How long processes that outlived SIGKILL (stuck in the kernel) are waited for before the
/// attempt is recorded as ended anyway.
const STUCK_AFTER_KILL: Duration = Duration::from_secs(10);
/// How long an exit record that cannot be written (a full disk) is retried: the daemon learns
/// how the job ended from nothing else, and holds its GPUs until then. After that it records
/// the attempt as lost.
const RECORD_RETRIES: Duration = Duration::from_secs(600);

/// A launch this supervisor took: its record open and locked, its description read.
pub struct Claimed {
    pub files: JobFiles,
    pub launch: Launch,
    pub record: fs::File,
}

/// What became of a launch request.
pub enum Claim {
    Claimed(Box<Claimed>),
    /// Revoked by a recovering daemon, or already taken: not this supervisor's to run.
    NotOurs,
    /// Taken, but it cannot be run; `attempt`'s end says why in its record.
    Unreadable,
    /// Not taken: why (the record cannot be opened or another supervisor holds it).
    Failed(String),
}

/// Takes the launch in `dir`: locks its record (held until the attempt is over: a free lock
/// means no supervisor), then renames `launch.json` to `claimed.json`, which only one claimer can
/// do, so a recovering daemon can take back a launch nobody started.
pub fn claim(dir: &Path, attempt: u32) -> Claim {
    let files = JobFiles::new(dir.to_path_buf());
    let record = match OpenOptions::new()
        .create(true)
        .append(true)
        .open(files.supervisor())
    {
        Ok(f) => f,
        Err(e) => {
            return Claim::Failed(format!("cannot open {}: {e}", files.supervisor().display()));
        }
    };
    // Not waited for: one supervisor runs many jobs, and must not stop for one.
    if flock(&record, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Claim::Failed(format!(
            "{} is held by another supervisor",
            files.supervisor().display()
        ));
    }
    if fs::rename(files.launch(), files.claimed()).is_err() {
        return Claim::NotOurs;
    }
    match read_json::<Launch>(&files.claimed()) {
        Some(launch) => Claim::Claimed(Box::new(Claimed {
            files,
            launch,
            record,
        })),
        None => {
            let mut exit = ExitRecord::new(attempt);
            exit.error = Some(format!(
                "unreadable launch description in {}",
                dir.display()
            ));
            exit.ended_at = crate::clock::now_ms();
            let _ = append_event(&record, &SupervisorEvent::Exited(exit));
            Claim::Unreadable
        }
    }
}

/// One attempt's processes: its cgroup's, or, for a supervisor of this attempt alone, every
/// process below that supervisor (a child subreaper).
enum Procs {
    Cgroup(Cgroup),
    Descendants,
}

impl Procs {
    fn get(&self) -> &dyn Processes {
        match self {
            Procs::Cgroup(cgroup) => cgroup,
            Procs::Descendants => &Descendants,
        }
    }
}

enum Phase {
    /// The first process runs.
    Running {
        pid: i32,
    },
    /// The first process is reaped; what it left is being ended, looked at every `pause`.
    Ending {
        next_look: Instant,
        pause: Duration,
        /// Set once SIGKILL went out: when to stop waiting for processes stuck in the kernel.
        give_up: Option<Instant>,
    },
    /// How it ended is known; the record could not be written yet.
    Recording {
        next_try: Instant,
        pause: Duration,
        give_up: Instant,
    },
    Over,
}

/// One attempt, from its claim to its record.
pub struct Attempt {
    pub files: JobFiles,
    /// The attempt as the daemon asked for it (the launch description says the same).
    pub attempt: u32,
    /// Open and locked until the end is recorded; `None` after.
    record: Option<fs::File>,
    procs: Procs,
    mem_limit: Option<u64>,
    enforced: limits::Enforced,
    /// A memory reservation no cgroup enforces, watched from here.
    watched_memory: Option<u64>,
    grace: Duration,
    exit: ExitRecord,
    phase: Phase,
    deadline: Option<Instant>,
    /// When its checkpoint signal is due (`--signal`), until it has been sent.
    checkpoint_at: Option<(Instant, Signal)>,
    /// When set, the attempt has been asked to stop and is killed outright at this instant.
    kill_at: Option<Instant>,
    killed: bool,
    next_memory_look: Instant,
    /// Whether OOM kills are counted by the attempt's cgroup (its `memory.events`) rather than
    /// by the machine (`/proc/vmstat`, which costs the kernel every one of its counters to read).
    oom_counted_by_cgroup: bool,
}

/// The machine's count of OOM kills (`/proc/vmstat`) for the start of an attempt without a
/// cgroup count of its own: one read serves the starts of the next 100 ms. An older count can
/// only be lower, so an OOM kill is never missed; the window in which another process's OOM kill
/// could be taken for the job's grows by at most that much, beside a job's whole run (a SIGKILL
/// with the count risen is reported as likely the OOM killer, not certainly). Reading it costs
/// the kernel every one of its counters, which was a sixth of the supervisor's work for each
/// start of a short job.
#[derive(Default)]
pub struct OomKillsAtStart {
    read: Option<(Instant, Option<u64>)>,
}

impl OomKillsAtStart {
    const REUSE_FOR: Duration = Duration::from_millis(100);

    fn get(&mut self, now: Instant) -> Option<u64> {
        self.get_with(now, oom_kill_count)
    }

    fn get_with(&mut self, now: Instant, read: impl FnOnce() -> Option<u64>) -> Option<u64> {
        match self.read {
            Some((at, count)) if now.saturating_duration_since(at) < Self::REUSE_FOR => count,
            _ => {
                let count = read();
                self.read = Some((now, count));
                count
            }
        }
    }
}

impl Attempt {
    /// Records the claim, then starts the attempt's first process in its cgroup, or, without
    /// one, below this supervisor (which must then supervise this attempt alone). A start that
    /// fails ends the attempt at once, its error recorded.
    pub fn start(
        claimed: Claimed,
        machine_oom_kills: &mut OomKillsAtStart,
        now: Instant,
    ) -> Attempt {
        let Claimed {
            files,
            launch,
            record,
        } = claimed;
        let _ = append_event(
            &record,
            &SupervisorEvent::Claimed {
                attempt: launch.attempt,
                pid: std::process::id() as i32,
            },
        );
        let procs = match &launch.cgroup {
            Some(dir) => Procs::Cgroup(Cgroup {
                dir: PathBuf::from(dir),
            }),
            None => Procs::Descendants,
        };
        // The count an OOM kill would raise, as the job starts: its new cgroup's own (exact:
        // only its processes count), else the machine's.
        let cgroup_oom_kills = match &procs {
            Procs::Cgroup(cgroup) => limits::oom_kills_in(&cgroup.dir),
            Procs::Descendants => None,
        };
        // Its reservation, held by the kernel where its cgroup can, else watched from here.
        let enforced = match &procs {
            Procs::Cgroup(cgroup) => limits::apply(&cgroup.dir, launch.cpus, launch.mem_limit),
            Procs::Descendants => limits::Enforced::default(),
        };
        let mut attempt = Attempt {
            files,
            attempt: launch.attempt,
            record: Some(record),
            procs,
            mem_limit: launch.mem_limit,
            enforced,
            watched_memory: launch.mem_limit.filter(|_| !enforced.memory),
            grace: Duration::from_millis(launch.grace_ms.max(0) as u64),
            exit: ExitRecord::new(launch.attempt),
            phase: Phase::Over,
            deadline: None,
            checkpoint_at: None,
            kill_at: None,
            killed: false,
            next_memory_look: now + limits::WATCH_INTERVAL,
            oom_counted_by_cgroup: cgroup_oom_kills.is_some(),
        };
        // Whatever the job detaches (setsid, double forks) is reparented to a subreaper rather
        // than to init, so it stays findable below a supervisor of this attempt alone.
        if matches!(attempt.procs, Procs::Descendants)
            && let Err(e) = Descendants::become_subreaper()
        {
            attempt.exit.error = Some(format!("cannot become a child subreaper: {e}"));
            attempt.finish(now);
            return attempt;
        }
        match spawn(&attempt.files, &launch) {
            Ok(pid) => {
                if let Some(record) = &attempt.record {
                    let _ = append_event(
                        record,
                        &SupervisorEvent::Spawned {
                            attempt: launch.attempt,
                            pgid: pid,
                            started: process_start_time(pid),
                            oom_kills: cgroup_oom_kills.or_else(|| machine_oom_kills.get(now)),
                        },
                    );
                }
                attempt.phase = Phase::Running { pid };
                attempt.deadline = launch
                    .time_limit_ms
                    .map(|ms| now + Duration::from_millis(ms.max(0) as u64));
                attempt.checkpoint_at = launch.checkpoint.zip(attempt.deadline).map(|(c, d)| {
                    let lead = Duration::from_millis(c.lead_ms.max(0) as u64);
                    // SAFETY: the daemon sends only signals `signal::parse` accepts (1-64).
                    let sig = unsafe { Signal::from_raw_unchecked(c.signal) };
                    (d.checked_sub(lead).unwrap_or(now).max(now), sig)
                });
            }
            Err(e) => {
                attempt.exit.exit_code = Some(match e.kind() {
                    std::io::ErrorKind::NotFound => 127,
                    std::io::ErrorKind::PermissionDenied => 126,
                    _ => 1,
                });
                attempt.exit.error = Some(e.to_string());
                // A job that never started leaves its (empty) cgroup behind for no one.
                if let Procs::Cgroup(cgroup) = &attempt.procs {
                    cgroup.remove();
                }
                attempt.finish(now);
            }
        }
        attempt
    }

    /// The attempt's first process, while it runs: the supervisor reaps it by this pid.
    pub fn main_pid(&self) -> Option<i32> {
        match self.phase {
            Phase::Running { pid } => Some(pid),
            _ => None,
        }
    }

    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over)
    }

    /// Its first process was reaped with `status`: the attempt is over once what it left is
    /// gone too.
    pub fn main_exited(&mut self, status: ExitStatus, now: Instant) {
        if !matches!(self.phase, Phase::Running { .. }) {
            return;
        }
        self.exit.exit_code = status.code();
        self.exit.signal = status.signal();
        self.phase = Phase::Ending {
            next_look: now,
            pause: Duration::from_millis(5),
            give_up: None,
        };
        self.advance(now);
    }

    /// A cancel: SIGTERM to every process, SIGKILL after the grace period.
    pub fn stop(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Running { .. } | Phase::Ending { .. }) {
            self.exit.cancelled = !self.exit.timed_out;
            self.ask_to_stop(now);
        }
    }

    /// The next instant something is due, if anything is.
    pub fn due(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running { .. } => [
                self.deadline.filter(|_| self.kill_at.is_none()),
                self.checkpoint_at
                    .map(|(at, _)| at)
                    .filter(|_| self.kill_at.is_none()),
                self.kill_at.filter(|_| !self.killed),
                Some(self.next_memory_look)
                    .filter(|_| self.watched_memory.is_some() && !self.killed),
            ]
            .into_iter()
            .flatten()
            .min(),
            Phase::Ending {
                next_look, give_up, ..
            } => Some(match (self.kill_at, give_up) {
                (Some(kill_at), None) => next_look.min(kill_at),
                _ => next_look,
            }),
            Phase::Recording { next_try, .. } => Some(next_try),
            Phase::Over => None,
        }
    }

    /// Does whatever is due by `now`.
    pub fn advance(&mut self, now: Instant) {
        match self.phase {
            Phase::Running { .. } => self.advance_running(now),
            Phase::Ending {
                next_look,
                pause,
                give_up,
            } => {
                if now >= next_look {
                    self.advance_ending(now, pause, give_up);
                }
            }
            Phase::Recording { next_try, .. } => {
                if now >= next_try {
                    self.write_record(now);
                }
            }
            Phase::Over => {}
        }
    }

    fn advance_running(&mut self, now: Instant) {
        if let Some((at, sig)) = self.checkpoint_at
            && now >= at
            && self.kill_at.is_none()
        {
            // Once: to every process of the job, as Slurm's --signal sends it to all steps.
            self.procs.get().signal(sig);
            self.exit.checkpoint_signalled = true;
            self.checkpoint_at = None;
        }
        if self.deadline.is_some_and(|d| now >= d) && self.kill_at.is_none() {
            self.exit.timed_out = true;
            self.ask_to_stop(now);
        }
        if self.kill_at.is_some_and(|k| now >= k) && !self.killed {
            self.procs.get().kill();
            self.killed = true;
        }
        if let Some(limit) = self.watched_memory
            && !self.killed
            && now >= self.next_memory_look
        {
            self.next_memory_look = now + limits::WATCH_INTERVAL;
            if limits::memory_in_use(&self.procs.get().pids()) > limit {
                // Like the kernel's OOM killer at a cgroup's limit: no grace, since what runs
                // past its memory takes it from every other job.
                self.exit.memory_exceeded = Some(limit);
                self.procs.get().kill();
                self.killed = true;
            }
        }
    }

    /// The job is over when its first process is, but its GPUs are free only once everything
    /// it started is gone: the rest get SIGTERM and what is left of the grace period, then
    /// SIGKILL. There is no event for "the last process of a group is gone", so this looks,
    /// briefly, and only while processes are being ended.
    fn advance_ending(&mut self, now: Instant, pause: Duration, mut give_up: Option<Instant>) {
        if !self.procs.get().any_left() {
            self.conclude(true, now);
            return;
        }
        if self.kill_at.is_none() {
            self.procs.get().signal(Signal::TERM);
            self.kill_at = Some(now + self.grace);
        }
        if give_up.is_none() && self.kill_at.is_some_and(|k| now >= k) {
            self.procs.get().kill();
            self.killed = true;
            give_up = Some(now + STUCK_AFTER_KILL);
        }
        if give_up.is_some_and(|g| now >= g) {
            self.conclude(false, now);
            return;
        }
        self.phase = Phase::Ending {
            next_look: now + pause,
            pause: (pause * 2).min(Duration::from_millis(50)),
            give_up,
        };
    }

    /// Asks every process of the attempt to stop, once, and sets when the rest are killed.
    fn ask_to_stop(&mut self, now: Instant) {
        if self.kill_at.is_none() {
            self.procs.get().signal(Signal::TERM);
            self.kill_at = Some(now + self.grace);
        }
    }

    /// Every process is gone (`all_gone`), or some outlived SIGKILL for good.
    fn conclude(&mut self, all_gone: bool, now: Instant) {
        if let (Procs::Cgroup(cgroup), Some(limit)) = (&self.procs, self.mem_limit)
            && self.enforced.memory
            && self.exit.signal == Some(9)
            && limits::oom_killed_in(&cgroup.dir)
        {
            self.exit.memory_exceeded = Some(limit);
        }
        if let Procs::Cgroup(cgroup) = &self.procs {
            // Only a SIGKILL can be an OOM killer's; read while the cgroup is still there.
            if self.oom_counted_by_cgroup && self.exit.signal == Some(9) {
                self.exit.oom_kills = limits::oom_kills_in(&cgroup.dir);
            }
            if all_gone {
                cgroup.remove();
            }
        }
        if !all_gone {
            eprintln!(
                "baton supervisor: some processes of {} outlived SIGKILL",
                self.files.dir.display()
            );
        }
        self.finish(now);
    }

    /// Completes the exit record and writes it.
    fn finish(&mut self, now: Instant) {
        self.exit.ended_at = crate::clock::now_ms();
        // Only a SIGKILL can be the OOM killer's; reading /proc/vmstat is not free.
        if self.exit.signal == Some(9) && !self.oom_counted_by_cgroup {
            self.exit.oom_kills = oom_kill_count();
        }
        self.phase = Phase::Recording {
            next_try: now,
            pause: Duration::from_millis(100),
            give_up: now + RECORD_RETRIES,
        };
        self.write_record(now);
    }

    fn write_record(&mut self, now: Instant) {
        let Phase::Recording { pause, give_up, .. } = self.phase else {
            return;
        };
        let Some(record) = &self.record else {
            self.phase = Phase::Over;
            return;
        };
        match append_event(record, &SupervisorEvent::Exited(self.exit.clone())) {
            Ok(()) => self.release(),
            Err(e) if now < give_up => {
                eprintln!(
                    "baton supervisor: cannot record the end of {} yet ({e}); retrying",
                    self.files.dir.display()
                );
                self.phase = Phase::Recording {
                    next_try: now + pause,
                    pause: (pause * 2).min(Duration::from_secs(10)),
                    give_up,
                };
            }
            Err(e) => {
                eprintln!(
                    "baton supervisor: cannot record the end of {}: {e}",
                    self.files.dir.display()
                );
                self.release();
            }
        }
    }

    /// Over: the record's lock goes with its descriptor.
    fn release(&mut self) {
        self.record = None;
        self.phase = Phase::Over;
    }
}

impl ExitRecord {
    /// An attempt's record before anything is known of its end.
    pub fn new(attempt: u32) -> ExitRecord {
        ExitRecord {
            attempt,
            exit_code: None,
            signal: None,
            timed_out: false,
            cancelled: false,
            error: None,
            ended_at: 0,
            oom_kills: None,
            memory_exceeded: None,
            checkpoint_signalled: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(attempt: u32) -> Launch {
        Launch {
            job_id: 7,
            attempt,
            command: vec!["true".into()],
            cwd: "/".into(),
            env: Vec::new(),
            run_as: None,
            time_limit_ms: None,
            grace_ms: 1000,
            umask: None,
            cgroup: None,
            cpus: 1,
            mem_limit: None,
            stdin: None,
            checkpoint: None,
        }
    }

    #[test]
    fn a_launch_is_claimed_once_and_its_record_stays_locked_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let files = JobFiles::new(dir.path().to_path_buf());
        fs::write(files.launch(), serde_json::to_vec(&launch(2)).unwrap()).unwrap();
        let Claim::Claimed(claimed) = claim(dir.path(), 2) else {
            panic!("not claimed");
        };
        assert_eq!(claimed.launch.attempt, 2);
        assert!(files.claimed().exists() && !files.launch().exists());
        // A second claimer finds the record held.
        assert!(matches!(claim(dir.path(), 2), Claim::Failed(e) if e.contains("another")));
        drop(claimed);
        // Released, but the launch is gone: not ours. (Another test of this binary forking at
        // the moment of the drop holds a copy of the record's descriptor, and with it the lock,
        // until its child execs: a moment, so the claim is tried again for a while.)
        let until = Instant::now() + Duration::from_secs(5);
        let again = loop {
            match claim(dir.path(), 2) {
                Claim::Failed(e) if e.contains("another") && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => break other,
            }
        };
        assert!(matches!(again, Claim::NotOurs));
    }

    #[test]
    fn the_machines_oom_count_is_read_once_per_window_of_starts() {
        let mut at_start = OomKillsAtStart::default();
        let t0 = Instant::now();
        let mut reads = 0;
        let mut read = |n| {
            reads += 1;
            Some(n)
        };
        assert_eq!(at_start.get_with(t0, || read(3)), Some(3));
        // Within the window the earlier (never higher) count serves.
        let soon = t0 + Duration::from_millis(99);
        assert_eq!(at_start.get_with(soon, || read(4)), Some(3));
        // Past it, the count is read again.
        let later = t0 + OomKillsAtStart::REUSE_FOR;
        assert_eq!(at_start.get_with(later, || read(5)), Some(5));
        assert_eq!(reads, 2);
    }

    #[test]
    fn a_revoked_launch_is_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let files = JobFiles::new(dir.path().to_path_buf());
        fs::write(files.launch(), serde_json::to_vec(&launch(1)).unwrap()).unwrap();
        fs::rename(files.launch(), files.revoked()).unwrap();
        assert!(matches!(claim(dir.path(), 1), Claim::NotOurs));
        assert!(files.events().is_empty(), "nothing recorded");
    }

    #[test]
    fn an_unreadable_launch_ends_its_attempt_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let files = JobFiles::new(dir.path().to_path_buf());
        fs::write(files.launch(), b"{not json").unwrap();
        assert!(matches!(claim(dir.path(), 3), Claim::Unreadable));
        let exit = files.exit_of(3).expect("an exit record");
        assert!(
            exit.error
                .unwrap()
                .contains("unreadable launch description"),
            "{:?}",
            files.events()
        );
    }
}
