//! Running jobs on this machine. Every attempt runs under the *supervisor* (`supervisor/`): one
//! process per state directory (baton re-executed as `baton supervisor SOCKET`) in a session of
//! its own, so it outlives the daemon, which reaches it over its socket (`link`). The daemon and
//! the supervisor share what matters through files in the job's directory:
//!
//! - `launch.json`: written by the daemon; the supervisor claims it by renaming it to
//!   `claimed.json`. A launch is run by whoever renames it first, so a recovering daemon can take
//!   back a launch that never started (rename it away) without any chance of a double start.
//! - `supervisor`: flock-ed by whichever process supervises the attempt, for as long as it does
//!   (a free lock means nobody does), and its append-only record, one JSON line per event:
//!   claimed (the supervising pid), spawned (the job's process group) and exited (how the
//!   attempt ended). Readers ignore a line until its newline is written, so a record is never
//!   seen half-written.
//! - `stdout`, `stderr`: the job's output, appended across attempts.
//!
//! Few files, written in place: creating and deleting files is a large part of what a job costs
//! the machine when jobs are short.

mod backend;
pub mod contain;
pub mod limits;
mod link;
pub mod local;
pub mod slurm;
pub mod supervisor;

pub use backend::{Backend, Host, Placed, SignalError, job_env};
pub use link::Events;
pub use local::LocalBackend;

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("job directory {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("could not start the supervisor: {0}")]
    Spawn(io::Error),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ExecutorError + '_ {
    move |source| ExecutorError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The account a job runs as, when the daemon runs as root for several users.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Everything the supervisor needs to run one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    pub job_id: u64,
    pub attempt: u32,
    pub command: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub run_as: Option<RunAs>,
    pub time_limit_ms: Option<i64>,
    /// Time between SIGTERM and SIGKILL when cancelling or at the time limit.
    pub grace_ms: i64,
    /// The file-creation mask for the job (the daemon's own is 077).
    pub umask: Option<u32>,
    /// The cgroup the daemon made for this attempt, which the job's first process enters before
    /// it execs; `None` where the supervisor contains the job as child subreaper alone.
    #[serde(default)]
    pub cgroup: Option<String>,
    /// The cores it reserved: its cgroup's `cpu.max`, where the daemon's cgroup has the cpu
    /// controller.
    #[serde(default)]
    pub cpus: u32,
    /// The memory it reserved, which it may not exceed: its cgroup's `memory.max`, or, where
    /// no cgroup has the memory controller, the supervisor's watch of its processes.
    #[serde(default)]
    pub mem_limit: Option<u64>,
    /// A file the job reads as its stdin (else /dev/null), opened as the job's user.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Its checkpoint signal (`--signal`): sent to every process `lead_ms` before the time
    /// limit.
    #[serde(default)]
    pub checkpoint: Option<baton_core::signal::CheckpointSignal>,
}

/// How an attempt ended, as the supervisor saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    pub attempt: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Stopped by the time limit.
    pub timed_out: bool,
    /// Stopped because the supervisor was asked to (cancel).
    pub cancelled: bool,
    /// The command could not be started at all.
    pub error: Option<String>,
    pub ended_at: i64,
    /// The count of OOM kills when the job ended: its cgroup's (`oom_kill` in `memory.events`)
    /// where the memory controller keeps one, else the kernel's (`oom_kill` in /proc/vmstat);
    /// with the same count at its start, tells a SIGKILL from the OOM killer apart from any
    /// other.
    #[serde(default)]
    pub oom_kills: Option<u64>,
    /// Killed for using more memory than it reserved (the reservation, in bytes).
    #[serde(default)]
    pub memory_exceeded: Option<u64>,
    /// Its checkpoint signal was sent (`--signal`), so long before its time limit.
    #[serde(default)]
    pub checkpoint_signalled: bool,
}

/// One line of the supervisor's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SupervisorEvent {
    Claimed {
        attempt: u32,
        pid: i32,
    },
    Spawned {
        attempt: u32,
        pgid: i32,
        /// The job's start time in clock ticks since boot (`/proc/PID/stat`), so that a
        /// recovering daemon never kills a process group that reused the number.
        #[serde(default)]
        started: Option<u64>,
        /// The count of OOM kills when the job started (its cgroup's, else /proc/vmstat's; see
        /// `ExitRecord::oom_kills`).
        #[serde(default)]
        oom_kills: Option<u64>,
    },
    Exited(ExitRecord),
}

/// Makes `cmd` run as `run_as`: groups, then gid, then uid (after setuid there is no permission
/// left to change groups). For the root daemon's helpers that act for a user.
pub fn run_as_user(cmd: &mut std::process::Command, run_as: &RunAs) {
    use std::os::unix::process::CommandExt;
    let (uid, gid, groups) = (run_as.uid, run_as.gid, run_as.groups.clone());
    // SAFETY: only async-signal-safe calls between fork and exec; `groups` is allocated before.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// What the record says about one attempt's supervisor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisorRecord {
    pub attempt: u32,
    pub pid: i32,
    /// The job's process group (its main process's pid), once started.
    pub pgid: Option<i32>,
    /// The start time of that group's leader, to recognise it later.
    pub started: Option<u64>,
}

/// The files of one job.
#[derive(Clone, Debug)]
pub struct JobFiles {
    pub dir: PathBuf,
}

impl JobFiles {
    pub fn new(dir: PathBuf) -> Self {
        JobFiles { dir }
    }
    pub fn launch(&self) -> PathBuf {
        self.dir.join("launch.json")
    }
    pub fn claimed(&self) -> PathBuf {
        self.dir.join("claimed.json")
    }
    pub fn revoked(&self) -> PathBuf {
        self.dir.join("launch.revoked")
    }
    pub fn supervisor(&self) -> PathBuf {
        self.dir.join("supervisor")
    }
    pub fn stdout(&self) -> PathBuf {
        self.dir.join("stdout")
    }
    pub fn stderr(&self) -> PathBuf {
        self.dir.join("stderr")
    }
    pub fn report_json(&self) -> PathBuf {
        self.dir.join("report.json")
    }
    pub fn report_md(&self) -> PathBuf {
        self.dir.join("report.md")
    }

    /// The complete lines of the supervisor's record (a line still being written is skipped).
    pub fn events(&self) -> Vec<SupervisorEvent> {
        let Ok(text) = fs::read(self.supervisor()) else {
            return Vec::new();
        };
        let complete = text
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(&text[..0], |end| &text[..end]);
        complete
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect()
    }

    /// The supervisor's record as it is now, read once for several questions.
    pub fn record(&self) -> Record {
        Record {
            events: self.events(),
        }
    }

    /// The exit record of `attempt`, if that attempt has ended.
    pub fn exit_of(&self, attempt: u32) -> Option<ExitRecord> {
        self.record().exit_of(attempt)
    }

    /// The supervisor record of `attempt`, if its supervisor has claimed the launch.
    pub fn supervisor_of(&self, attempt: u32) -> Option<SupervisorRecord> {
        self.record().supervisor_of(attempt)
    }
}

/// The complete lines of a job's supervisor record, read at one moment.
pub struct Record {
    events: Vec<SupervisorEvent>,
}

impl Record {
    /// The exit record of `attempt`, if that attempt has ended.
    pub fn exit_of(&self, attempt: u32) -> Option<ExitRecord> {
        self.events.iter().find_map(|e| match e {
            SupervisorEvent::Exited(exit) if exit.attempt == attempt => Some(exit.clone()),
            _ => None,
        })
    }

    /// Why the command of `attempt` could not be started (`command not found: foo`), if its
    /// supervisor recorded an error and never spawned it. An error after the spawn ("lost track
    /// of the job") is not one: the command ran.
    pub fn start_error_of(&self, attempt: u32) -> Option<String> {
        let mut spawned = false;
        let mut error = None;
        for event in &self.events {
            match event {
                SupervisorEvent::Spawned { attempt: a, .. } if *a == attempt => spawned = true,
                SupervisorEvent::Exited(exit) if exit.attempt == attempt => {
                    error = exit.error.clone()
                }
                _ => {}
            }
        }
        error.filter(|_| !spawned)
    }

    /// The supervisor record of `attempt`, if its supervisor has claimed the launch.
    pub fn supervisor_of(&self, attempt: u32) -> Option<SupervisorRecord> {
        let mut record = None;
        for event in &self.events {
            match *event {
                SupervisorEvent::Claimed { attempt: a, pid } if a == attempt => {
                    record = Some(SupervisorRecord {
                        attempt,
                        pid,
                        pgid: None,
                        started: None,
                    });
                }
                SupervisorEvent::Spawned {
                    attempt: a,
                    pgid,
                    started,
                    ..
                } if a == attempt => {
                    if let Some(r) = record.as_mut() {
                        r.pgid = Some(pgid);
                        r.started = started;
                    }
                }
                _ => {}
            }
        }
        record
    }

    /// Whether the kernel's OOM killer acted while `attempt` ran: the job died of SIGKILL and
    /// the kernel's count of OOM kills went up meanwhile. (Another process may have been the
    /// victim on a busy machine; the report words it as likely, not certain.)
    pub fn oom_killed(&self, attempt: u32) -> bool {
        let mut at_start = None;
        let mut exit = None;
        for event in &self.events {
            match event {
                SupervisorEvent::Spawned {
                    attempt: a,
                    oom_kills,
                    ..
                } if *a == attempt => at_start = *oom_kills,
                SupervisorEvent::Exited(e) if e.attempt == attempt => exit = Some(e),
                _ => {}
            }
        }
        match (at_start, exit) {
            (Some(before), Some(e)) => {
                e.signal == Some(9) && !e.cancelled && !e.timed_out && e.oom_kills > Some(before)
            }
            _ => false,
        }
    }
}

pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Option<T> {
    let text = fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Appends one event as one line with one write. No fsync: the record must survive the crash of
/// a process, which the page cache guarantees; after an OS crash the processes it describes are
/// gone too.
pub fn append_event(file: &fs::File, event: &SupervisorEvent) -> io::Result<()> {
    let mut line = serde_json::to_vec(event).expect("plain data");
    line.push(b'\n');
    io::Write::write_all(&mut &*file, &line)
}

/// How the daemon learns that an attempt ended.
pub enum Watch {
    /// The supervisor it reaches says so, through the link (`LocalBackend`'s `Events`).
    Supervisor,
    /// A supervisor of that attempt alone, this daemon's child, exits.
    Child(tokio::process::Child),
    /// A supervisor of that attempt alone, found alive after a restart, exits.
    Pidfd(AsyncFd<OwnedFd>),
}

impl Watch {
    /// Resolves when the process watched exits (never for `Supervisor`).
    pub async fn exited(self) {
        match self {
            Watch::Supervisor => std::future::pending().await,
            Watch::Child(mut child) => {
                let _ = child.wait().await;
            }
            Watch::Pidfd(fd) => {
                // A pidfd becomes readable when the process exits.
                let _ = fd.readable().await;
            }
        }
    }
}

/// How a cancel reaches an attempt: a request to the supervisor, or SIGTERM, through its pidfd,
/// to a process that supervises that attempt alone (a pidfd cannot reach another process that
/// reused the pid). Either way: SIGTERM to every process of the job, SIGKILL after the grace
/// period.
pub enum Stopper {
    Link(link::Stopper),
    Pidfd(OwnedFd),
}

impl Stopper {
    /// Whether the request went out.
    pub fn stop(&self) -> bool {
        match self {
            Stopper::Link(stopper) => stopper.stop(),
            Stopper::Pidfd(fd) => {
                rustix::process::pidfd_send_signal(fd, rustix::process::Signal::TERM).is_ok()
            }
        }
    }
}

/// What the daemon finds for an attempt it launched and is no longer watching: after a
/// restart, or once its watch resolved.
pub enum Recovery {
    /// The attempt ended.
    Ended(ExitRecord),
    /// The launch was never claimed; it has now been revoked, so it can never start.
    NeverStarted,
    /// Its supervisor runs it; the watch resolves when that ends, the stopper cancels it.
    Running(Watch, Stopper),
    /// Its supervisor died without recording an exit (killed by hand, machine trouble). What it
    /// left running must be ended (`end_lost_attempt`) before the job's GPUs are free.
    Lost,
}

/// Starts jobs on this machine, through the supervisor.
pub struct LocalExecutor {
    /// The baton binary, re-executed as the supervisor.
    exe: PathBuf,
    link: link::Link,
}

impl LocalExecutor {
    /// The executor of the daemon whose state directory is `home`.
    pub fn new(exe: PathBuf, home: &Path) -> Self {
        LocalExecutor {
            link: link::Link::new(exe.clone(), home.join(SUPERVISOR_SOCKET)),
            exe,
        }
    }

    /// Where what the supervisor says goes (set once, before `connect`).
    pub fn set_events(&self, events: std::sync::Arc<dyn link::Events>) {
        self.link.set_events(events);
    }

    /// Connects to the supervisor, starting one if none runs. Blocking.
    pub fn connect(&self) -> io::Result<()> {
        self.link.connect()
    }

    /// Writes the launch description and hands it to the supervisor; if the supervisor cannot
    /// be reached, runs a supervisor of this attempt alone (`baton supervise DIR`). Must be
    /// called from a tokio runtime.
    pub fn launch(
        &self,
        files: &JobFiles,
        launch: &Launch,
    ) -> Result<(Watch, Option<Stopper>), ExecutorError> {
        fs::create_dir_all(&files.dir).map_err(io_err(&files.dir))?;
        // Written whole before the supervisor that reads it is asked, so no temporary file.
        let body = serde_json::to_vec(launch).expect("plain data");
        let path = files.launch();
        fs::write(&path, &body).map_err(io_err(&path))?;
        match self.link.launch(&files.dir, launch.attempt) {
            Ok(stopper) => return Ok((Watch::Supervisor, Some(Stopper::Link(stopper)))),
            Err(e) => tracing::warn!(
                "the supervisor cannot be reached ({e}); running one for job {} alone",
                launch.job_id
            ),
        }
        let mut cmd = tokio::process::Command::new(&self.exe);
        cmd.arg("supervise")
            .arg(&files.dir)
            .arg("--attempt")
            .arg(launch.attempt.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            // No pre_exec: the (multi-threaded) daemon then starts it with posix_spawn rather
            // than a full fork. The supervisor moves itself into a new session first thing.
            .kill_on_drop(false);
        let child = cmd.spawn().map_err(ExecutorError::Spawn)?;
        // Not reaped before `Watch::Child` waits for it, so the pid cannot be reused first.
        let stopper = child
            .id()
            .and_then(|pid| pidfd_of(pid as i32))
            .map(Stopper::Pidfd);
        Ok((Watch::Child(child), stopper))
    }

    /// Decides what became of `attempt` while no daemon was watching it. Blocking, briefly
    /// (it may connect to the supervisor).
    pub async fn recover(&self, files: &JobFiles, attempt: u32) -> Recovery {
        // Connected before the record is read: an end that comes meanwhile is told.
        let reached = self.link.supervisor_pid();
        if let Some(exit) = files.exit_of(attempt) {
            return Recovery::Ended(exit);
        }
        if fs::rename(files.launch(), files.revoked()).is_ok() {
            return Recovery::NeverStarted;
        }
        loop {
            let alive = supervisor_alive(files);
            // Read after the liveness check: a supervisor that exits in between has already
            // written everything it ever will.
            if let Some(exit) = files.exit_of(attempt) {
                return Recovery::Ended(exit);
            }
            let record = files.supervisor_of(attempt);
            match (alive, record) {
                (true, Some(rec)) => {
                    // Run by the supervisor this daemon reaches: it says when the attempt ends.
                    if reached == Some(rec.pid)
                        && let Some(stopper) = self.link.adopt(&files.dir, attempt, rec.pid)
                    {
                        return Recovery::Running(Watch::Supervisor, Stopper::Link(stopper));
                    }
                    // Supervised by a process of its own: watched through its pidfd.
                    if let Some(running) = pidfd_of(rec.pid).and_then(|fd| {
                        let signal = fd.try_clone().ok()?;
                        Some(Recovery::Running(
                            watch_pidfd(fd).ok()?,
                            Stopper::Pidfd(signal),
                        ))
                    }) {
                        return running;
                    }
                    // It exited between the check and pidfd_open: look again.
                }
                // It holds the lock but has not recorded its claim yet: that takes
                // milliseconds, and it must be waited for, since it may still start the job.
                (true, None) => {}
                // No supervisor, and none ever recorded a claim of this attempt: the job was
                // never spawned (the daemon died during the launch, or the supervisor right
                // after taking it), so it can safely go back to the queue.
                (false, None) => return Recovery::NeverStarted,
                (false, Some(_)) => return Recovery::Lost,
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The supervisor's socket in the state directory (its lock file beside it).
pub const SUPERVISOR_SOCKET: &str = "supervisor.sock";

/// Whether some process holds the job's supervisor lock.
fn supervisor_alive(files: &JobFiles) -> bool {
    let Ok(file) = fs::OpenOptions::new().read(true).open(files.supervisor()) else {
        return false;
    };
    use rustix::fs::{FlockOperation, flock};
    // Taking the lock ourselves means nobody held it; closing the file releases it again.
    flock(&file, FlockOperation::NonBlockingLockExclusive).is_err()
}

/// Ends every process an attempt whose supervisor died left behind: its cgroup's, or, with none,
/// those that carry the attempt's key and its process group (its leader provably the same
/// process, so a stranger's group is never hit): SIGTERM, `grace`, then SIGKILL. Returns once
/// they are gone; blocking. A launch never claimed left nothing.
pub fn end_lost_attempt(files: &JobFiles, attempt: u32, grace: Duration) {
    let Some(launch) = read_json::<Launch>(&files.claimed()).filter(|l| l.attempt == attempt)
    else {
        return;
    };
    if let Some(dir) = &launch.cgroup {
        let cgroup = contain::Cgroup {
            dir: PathBuf::from(dir),
        };
        if contain::end_all(&cgroup, grace, None) {
            cgroup.remove();
        }
        return;
    }
    let key = launch
        .env
        .iter()
        .find(|(k, _)| k == contain::KEY_VAR)
        .map(|(_, v)| v.clone());
    let group = files
        .supervisor_of(attempt)
        .and_then(|rec| rec.pgid.zip(rec.started));
    let Some(key) = key else {
        // Launched by a baton that set no key: its process group is all that can be found.
        if let Some((pgid, started)) = group
            && process_start_time(pgid) == Some(started)
        {
            kill_group(pgid, rustix::process::Signal::KILL);
        }
        return;
    };
    contain::end_all(&contain::Marked::new(&key, group), grace, None);
}

/// Sends `sig` to every process of a running `attempt`, found as [`end_lost_attempt`] finds
/// them: its cgroup's, or, with none, those that carry the attempt's key and its process group.
/// The supervisor is never among them (it is outside the cgroup and carries no key), so a
/// signal meant for the job cannot stop it. Returns where the signal went, or why it reached
/// nothing (not started yet, or its processes are gone). Blocking: it reads /proc.
pub fn signal_attempt(
    files: &JobFiles,
    attempt: u32,
    sig: rustix::process::Signal,
) -> Result<String, String> {
    use contain::Processes;
    let not_yet = || "its supervisor has not started it yet".to_string();
    let Some(launch) = read_json::<Launch>(&files.claimed()).filter(|l| l.attempt == attempt)
    else {
        return Err(not_yet());
    };
    // Claimed but not spawned yet: nothing to signal, and nothing gone either.
    let record = files.supervisor_of(attempt);
    if record.as_ref().is_none_or(|rec| rec.pgid.is_none()) && files.exit_of(attempt).is_none() {
        return Err(not_yet());
    }
    let group = record.and_then(|rec| rec.pgid.zip(rec.started));
    let count = |n: usize| match n {
        1 => "1 process".to_string(),
        n => format!("{n} processes"),
    };
    if let Some(dir) = &launch.cgroup {
        let cgroup = contain::Cgroup {
            dir: PathBuf::from(dir),
        };
        let found = cgroup.pids().len();
        if found == 0 {
            return Err("none of its processes is left".into());
        }
        cgroup.signal(sig);
        return Ok(format!("{} in cgroup {dir}", count(found)));
    }
    let Some(key) = launch
        .env
        .iter()
        .find(|(k, _)| k == contain::KEY_VAR)
        .map(|(_, v)| v.clone())
    else {
        return Err("it was started by a baton that marked no process of it".into());
    };
    let marked = contain::Marked::new(&key, group);
    let found = marked.pids().len();
    if found == 0 && !marked.any_left() {
        return Err("none of its processes is left".into());
    }
    marked.signal(sig);
    Ok(format!(
        "{} carrying {}={key}, and its process group",
        count(found),
        contain::KEY_VAR
    ))
}

/// The live processes of a running attempt: its cgroup's, or, without one, those below the
/// process that supervises it alone. `None` while nothing is known of it (not claimed yet).
/// Blocking: it reads /proc.
pub fn attempt_processes(files: &JobFiles, attempt: u32) -> Option<Vec<u32>> {
    use contain::Processes;
    let launch = read_json::<Launch>(&files.claimed()).filter(|l| l.attempt == attempt)?;
    if let Some(dir) = &launch.cgroup {
        let cgroup = contain::Cgroup {
            dir: PathBuf::from(dir),
        };
        return Some(cgroup.pids().into_iter().map(|pid| pid as u32).collect());
    }
    let supervisor = files.supervisor_of(attempt)?;
    Some(crate::procinfo::descendants(supervisor.pid as u32))
}

/// How many processes the kernel's OOM killer has killed since boot (`oom_kill` in
/// /proc/vmstat, Linux 4.13+).
pub fn oom_kill_count() -> Option<u64> {
    let vmstat = fs::read_to_string("/proc/vmstat").ok()?;
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// A process's start time in clock ticks since boot: field 22 of `/proc/PID/stat`.
pub fn process_start_time(pid: i32) -> Option<u64> {
    crate::procinfo::start_time(u32::try_from(pid).ok()?)
}

fn pidfd_of(pid: i32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

fn watch_pidfd(fd: OwnedFd) -> io::Result<Watch> {
    // SAFETY: an OwnedFd stays open and keeps its number until the AsyncFd drops it.
    unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map(Watch::Pidfd)
        .map_err(|e| e.into_parts().1)
}

pub fn kill_group(pgid: i32, sig: rustix::process::Signal) -> bool {
    match rustix::process::Pid::from_raw(pgid) {
        Some(pgid) => rustix::process::kill_process_group(pgid, sig).is_ok(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(signal: Option<i32>, oom_kills: Option<u64>) -> SupervisorEvent {
        SupervisorEvent::Exited(ExitRecord {
            attempt: 1,
            exit_code: None,
            signal,
            timed_out: false,
            cancelled: false,
            error: None,
            ended_at: 5,
            oom_kills,
            memory_exceeded: None,
            checkpoint_signalled: false,
        })
    }

    fn record(events: &[SupervisorEvent]) -> (tempfile::TempDir, JobFiles) {
        let dir = tempfile::tempdir().unwrap();
        let files = JobFiles::new(dir.path().to_path_buf());
        let file = fs::File::create(files.supervisor()).unwrap();
        for e in events {
            append_event(&file, e).unwrap();
        }
        (dir, files)
    }

    #[test]
    fn the_oom_killer_is_blamed_only_for_a_sigkill_while_its_count_went_up() {
        let spawned = |count| SupervisorEvent::Spawned {
            attempt: 1,
            pgid: 42,
            started: Some(1),
            oom_kills: Some(count),
        };
        let (_d, files) = record(&[spawned(3), exit(Some(9), Some(4))]);
        assert!(files.record().oom_killed(1));
        let (_d, files) = record(&[spawned(3), exit(Some(9), Some(3))]);
        assert!(
            !files.record().oom_killed(1),
            "no OOM kill happened meanwhile"
        );
        let (_d, files) = record(&[spawned(3), exit(Some(15), None)]);
        assert!(!files.record().oom_killed(1), "not a SIGKILL");
        let (_d, files) = record(&[spawned(3), exit(Some(9), Some(9))]);
        assert!(!files.record().oom_killed(2), "another attempt");
    }

    #[test]
    fn a_start_error_is_an_error_recorded_before_any_spawn() {
        let failed = |attempt, error: &str| {
            SupervisorEvent::Exited(ExitRecord {
                attempt,
                exit_code: Some(127),
                signal: None,
                timed_out: false,
                cancelled: false,
                error: Some(error.into()),
                ended_at: 5,
                oom_kills: None,
                memory_exceeded: None,
                checkpoint_signalled: false,
            })
        };
        let claimed = |attempt| SupervisorEvent::Claimed { attempt, pid: 7 };
        let (_d, files) = record(&[claimed(1), failed(1, "command not found: foo")]);
        assert_eq!(
            files.record().start_error_of(1).as_deref(),
            Some("command not found: foo")
        );
        assert_eq!(files.record().start_error_of(2), None, "another attempt");
        // An error after the spawn: the command ran.
        let spawned = SupervisorEvent::Spawned {
            attempt: 1,
            pgid: 42,
            started: Some(1),
            oom_kills: None,
        };
        let (_d, files) = record(&[claimed(1), spawned, failed(1, "lost track of the job")]);
        assert_eq!(files.record().start_error_of(1), None);
        // A clean exit.
        let (_d, files) = record(&[claimed(1), exit(None, None)]);
        assert_eq!(files.record().start_error_of(1), None);
    }
}
