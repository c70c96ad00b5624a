//! The supervisor: the process that runs a daemon's jobs on this machine and outlives the
//! daemon. One per state directory (`baton supervisor SOCKET`), started by the daemon on first
//! use, in a session of its own; a restarted daemon connects to the one already running. It
//! takes launches over its socket (`protocol`), runs every attempt that has a cgroup itself, and
//! forks a supervisor of its own for each attempt that has none (which must be the child
//! subreaper of that attempt alone, so that everything the job detaches stays below it). It
//! exits once it runs nothing and no daemon is connected.
//!
//! One process for many jobs, not one per job: forking a process for each job and tearing it
//! down again was a third of what a short job cost the machine (`docs/benchmarks.md`).
//!
//! Everything is single-threaded and event-driven: one `poll` on the socket, the connected
//! daemon and a pipe that the signal handler writes to (SIGCHLD says a child is to be reaped),
//! its timeout the next deadline of any attempt (`attempt::Attempt::due`). The same loop, with
//! one attempt and no socket, is `baton supervise DIR`, which the daemon runs when it cannot
//! reach a supervisor, and the forked supervisor of an attempt without a cgroup; SIGTERM stops
//! that one attempt there. The supervisor of many ignores SIGTERM: stopping baton's daemon
//! (`pkill baton`, `systemctl stop`) must not stop the jobs.

mod attempt;
pub mod protocol;
mod signals;
mod spawn;

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::fs::{FlockOperation, flock};

use attempt::{Attempt, Claim, Claimed, OomKillsAtStart};
use protocol::{Ended, Request};
use signals::{SignalPipe, timespec};

/// How long a supervisor started by a daemon waits for that daemon to connect.
const FIRST_CONNECTION: Duration = Duration::from_secs(10);
/// How long a new supervisor waits for one that is exiting to let go of the lock.
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// The lock file beside a supervisor's socket: held by the one supervisor of a state directory.
pub fn lock_path(socket: &Path) -> PathBuf {
    socket.with_extension("lock")
}

/// `baton supervisor SOCKET`: the supervisor of a daemon's jobs. Says `ready` (or `busy`, when
/// another supervisor holds the lock) on stdout once it listens, for the daemon that started it.
pub fn run_host(socket: &Path) -> ExitCode {
    // A session of its own: no terminal, no hang-up or Ctrl-C meant for the daemon reaches it,
    // and it outlives the daemon. The root directory: it must keep no file system busy.
    let _ = rustix::process::setsid();
    let _ = std::env::set_current_dir("/");
    let mut out = io::stdout();
    let (lock, listener) = match listen(socket) {
        Ok(Some(taken)) => taken,
        Ok(None) => {
            let _ = out.write_all(b"busy\n");
            return ExitCode::from(1);
        }
        Err(e) => {
            let _ = writeln!(out, "error {e}");
            return ExitCode::from(1);
        }
    };
    // Orphans of the jobs come back here rather than to init, and are reaped.
    let _ = crate::executor::contain::Descendants::become_subreaper();
    let Ok(signals) = SignalPipe::new(&[libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
    else {
        return ExitCode::from(1);
    };
    let _ = out.write_all(b"ready\n");
    let _ = out.flush();
    // Nobody reads it any more.
    if let Ok(null) = fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 onto fd 1, which nothing in this process holds as an object.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
    let mut reactor = Reactor {
        host: Some(Host {
            listener,
            socket: socket.to_path_buf(),
            _lock: lock,
            daemon: None,
            connected_once: false,
            started: Instant::now(),
        }),
        signals,
        attempts: Vec::new(),
        forked: HashMap::new(),
        oom_kills_at_start: OomKillsAtStart::default(),
    };
    reactor.run();
    if let Some(host) = reactor.host.take() {
        // The socket goes before the lock does, so that the next supervisor (which takes the
        // lock first) never finds this one's socket in its place.
        let Host {
            listener, socket, ..
        } = host;
        drop(listener);
        let _ = fs::remove_file(socket);
    }
    ExitCode::SUCCESS
}

/// `baton supervise DIR`: the supervisor of the one attempt launched in DIR, for a daemon that
/// could not reach its supervisor. SIGTERM stops the attempt.
pub fn run_one(dir: &Path, attempt: u32) -> ExitCode {
    let _ = rustix::process::setsid();
    match attempt::claim(dir, attempt) {
        Claim::Claimed(claimed) => ExitCode::from(supervise_one(*claimed) as u8),
        Claim::NotOurs | Claim::Unreadable => ExitCode::SUCCESS,
        Claim::Failed(e) => {
            eprintln!("baton supervise: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs one claimed attempt to its recorded end in this process; 0 once it is recorded.
fn supervise_one(claimed: Claimed) -> i32 {
    let signals = match SignalPipe::new(&[libc::SIGCHLD, libc::SIGTERM, libc::SIGINT]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("baton supervise: cannot take signals: {e}");
            return 1;
        }
    };
    let mut reactor = Reactor {
        host: None,
        signals,
        attempts: Vec::new(),
        forked: HashMap::new(),
        oom_kills_at_start: OomKillsAtStart::default(),
    };
    let started = Attempt::start(claimed, &mut reactor.oom_kills_at_start, Instant::now());
    reactor.attempts.push(started);
    reactor.run();
    0
}

/// Takes the lock (waiting a little for a supervisor that is exiting), then the socket, made
/// afresh and readable by this user alone. `None`: another supervisor runs.
fn listen(socket: &Path) -> io::Result<Option<(fs::File, UnixListener)>> {
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(socket))?;
    let until = Instant::now() + LOCK_WAIT;
    while flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        if Instant::now() >= until {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(socket)?;
    fs::set_permissions(socket, fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    Ok(Some((lock, listener)))
}

/// What the supervisor of many has that one of a single attempt has not.
struct Host {
    listener: UnixListener,
    socket: PathBuf,
    /// Held while this process lives: one supervisor per state directory.
    _lock: fs::File,
    daemon: Option<DaemonConn>,
    connected_once: bool,
    started: Instant,
}

/// The connected daemon: its requests come in lines; `ended` lines wait in `outgoing` while the
/// socket cannot take them (a daemon busy elsewhere must not stop the supervisor).
struct DaemonConn {
    stream: UnixStream,
    incoming: Vec<u8>,
    outgoing: Vec<u8>,
}

/// An attempt run by a supervisor forked for it alone.
struct Forked {
    attempt: u32,
    dir: String,
}

struct Reactor {
    /// `None`: this supervises one attempt (`baton supervise DIR`, or forked for an attempt
    /// without a cgroup).
    host: Option<Host>,
    signals: SignalPipe,
    attempts: Vec<Attempt>,
    /// Supervisors forked for attempts without a cgroup, by pid.
    forked: HashMap<i32, Forked>,
    oom_kills_at_start: OomKillsAtStart,
}

impl Reactor {
    fn run(&mut self) {
        loop {
            let now = Instant::now();
            self.reap(now);
            for attempt in &mut self.attempts {
                attempt.advance(now);
            }
            self.tell_ended();
            if self.done(now) {
                return;
            }
            self.wait(now);
        }
    }

    /// Whether nothing is left to do: no attempt here or below, and (for the supervisor of
    /// many) no daemon connected, nor one still to come.
    fn done(&self, now: Instant) -> bool {
        if !self.attempts.is_empty() || !self.forked.is_empty() {
            return false;
        }
        match &self.host {
            None => true,
            Some(host) => {
                host.daemon.is_none()
                    && (host.connected_once || now >= host.started + FIRST_CONNECTION)
            }
        }
    }

    /// Sleeps until a request, a signal or the next deadline.
    fn wait(&mut self, now: Instant) {
        let mut due = self.attempts.iter().filter_map(Attempt::due).min();
        if let Some(host) = &self.host
            && !host.connected_once
        {
            let first = host.started + FIRST_CONNECTION;
            due = Some(due.map_or(first, |d| d.min(first)));
        }
        let timeout = due.map(|at| timespec(at.saturating_duration_since(now)));
        let mut fds = vec![PollFd::new(&self.signals.read, PollFlags::IN)];
        if let Some(host) = &self.host {
            fds.push(PollFd::new(&host.listener, PollFlags::IN));
            if let Some(daemon) = &host.daemon {
                let mut flags = PollFlags::IN;
                if !daemon.outgoing.is_empty() {
                    flags |= PollFlags::OUT;
                }
                fds.push(PollFd::new(&daemon.stream, flags));
            }
        }
        match poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                eprintln!("baton supervisor: poll: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
        drop(fds);
        if ready[0] {
            for signo in self.signals.take() {
                // SIGCHLD needs nothing here: the loop reaps first thing. A supervisor of one
                // attempt takes SIGTERM as its cancel; the supervisor of many lets the daemon
                // ask over its socket, and outlives whatever stops the daemon.
                if signo != libc::SIGCHLD && self.host.is_none() {
                    let now = Instant::now();
                    for attempt in &mut self.attempts {
                        attempt.stop(now);
                    }
                }
            }
        }
        if ready.get(1) == Some(&true) {
            self.accept();
        }
        if ready.get(2) == Some(&true) {
            self.serve_daemon();
        }
    }

    /// Collects every child that exited: an attempt's first process, a forked supervisor, or
    /// something a job orphaned (reparented here, reaped and forgotten).
    fn reap(&mut self, now: Instant) {
        loop {
            let mut status = 0;
            // SAFETY: plain waitpid on our own children.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                return;
            }
            if let Some(attempt) = self.attempts.iter_mut().find(|a| a.main_pid() == Some(pid)) {
                attempt.main_exited(ExitStatus::from_raw(status), now);
            } else if let Some(forked) = self.forked.remove(&pid) {
                self.send(Ended {
                    attempt: forked.attempt,
                    dir: forked.dir,
                });
            }
        }
    }

    /// Forgets the attempts whose end is recorded, telling the daemon.
    fn tell_ended(&mut self) {
        let mut i = 0;
        while i < self.attempts.len() {
            if self.attempts[i].is_over() {
                let over = self.attempts.swap_remove(i);
                let dir = over.files.dir.display().to_string();
                self.send(Ended {
                    attempt: over.attempt,
                    dir,
                });
            } else {
                i += 1;
            }
        }
    }

    fn accept(&mut self) {
        let Some(host) = &mut self.host else { return };
        while let Ok((stream, _)) = host.listener.accept() {
            // Only a daemon of this user: the socket is this user's alone, and this says so
            // again whatever its file's mode.
            let same_user = rustix::net::sockopt::socket_peercred(&stream)
                .is_ok_and(|cred| cred.uid == rustix::process::geteuid());
            if !same_user || stream.set_nonblocking(true).is_err() {
                continue;
            }
            // One daemon per state directory: a new connection is a restarted daemon, and
            // the old one is gone.
            host.daemon = Some(DaemonConn {
                stream,
                incoming: Vec::new(),
                outgoing: Vec::new(),
            });
            host.connected_once = true;
        }
    }

    /// Reads the daemon's requests and acts on each; writes what waits for it.
    fn serve_daemon(&mut self) {
        let mut requests = Vec::new();
        {
            let Some(host) = &mut self.host else { return };
            let Some(daemon) = &mut host.daemon else {
                return;
            };
            let mut gone = flush(daemon).is_err();
            let mut buf = [0u8; 8192];
            while !gone {
                match (&daemon.stream).read(&mut buf) {
                    Ok(0) => gone = true,
                    Ok(n) => daemon.incoming.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => gone = true,
                }
            }
            while let Some(end) = daemon.incoming.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = daemon.incoming.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                match Request::parse(&line) {
                    Some(request) => requests.push(request),
                    None => eprintln!("baton supervisor: unknown request {line:?}"),
                }
            }
            if gone {
                host.daemon = None;
            }
        }
        for request in requests {
            match request {
                Request::Launch { attempt, dir } => self.launch(attempt, dir),
                Request::Stop { attempt, dir } => self.stop(attempt, &dir),
            }
        }
    }

    fn launch(&mut self, attempt: u32, dir: String) {
        match attempt::claim(Path::new(&dir), attempt) {
            Claim::Claimed(claimed) if claimed.launch.cgroup.is_some() => {
                let started =
                    Attempt::start(*claimed, &mut self.oom_kills_at_start, Instant::now());
                self.attempts.push(started);
            }
            Claim::Claimed(claimed) => self.fork_one(*claimed, attempt, dir),
            Claim::NotOurs | Claim::Unreadable => self.send(Ended { attempt, dir }),
            Claim::Failed(e) => {
                eprintln!("baton supervisor: {e}");
                self.send(Ended { attempt, dir });
            }
        }
    }

    fn stop(&mut self, attempt: u32, dir: &str) {
        let now = Instant::now();
        if let Some(running) = self
            .attempts
            .iter_mut()
            .find(|a| a.attempt == attempt && a.files.dir.as_os_str() == dir)
        {
            running.stop(now);
        } else if let Some((&pid, _)) = self
            .forked
            .iter()
            .find(|(_, f)| f.attempt == attempt && f.dir == dir)
        {
            // Our child, not reaped yet: the pid cannot name another process.
            // SAFETY: kill(2) on a pid we own.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    /// An attempt without a cgroup gets a supervisor of its own, forked from this one: only a
    /// subreaper that supervises it alone knows which processes are its.
    fn fork_one(&mut self, claimed: Claimed, attempt: u32, dir: String) {
        let keep = claimed.record.as_raw_fd();
        // SAFETY: this process is single-threaded, so the child may do anything after fork.
        match unsafe { libc::fork() } {
            -1 => {
                let e = io::Error::last_os_error();
                let mut exit = crate::executor::ExitRecord::new(claimed.launch.attempt);
                exit.error = Some(format!("cannot fork a supervisor for it: {e}"));
                exit.ended_at = crate::clock::now_ms();
                let _ = crate::executor::append_event(
                    &claimed.record,
                    &crate::executor::SupervisorEvent::Exited(exit),
                );
                drop(claimed);
                self.send(Ended { attempt, dir });
            }
            0 => {
                // The child keeps its standard streams and the attempt's record, and nothing of
                // the supervisor of many: not its socket, not the daemon's connection, not its
                // lock (which would outlive it here), not the other attempts' records (whose
                // locks would then outlive their ends). The signal handler writes nowhere until
                // this child has its own pipe.
                signals::forget();
                close_all_but(&[keep]);
                // Its own process group: a signal to the group of the supervisor of many is
                // not its to take.
                // SAFETY: plain setpgid on ourselves.
                unsafe { libc::setpgid(0, 0) };
                std::process::exit(supervise_one(claimed));
            }
            pid => {
                // The record's lock is the child's now; this copy of it goes.
                drop(claimed);
                self.forked.insert(pid, Forked { attempt, dir });
            }
        }
    }

    /// Tells the connected daemon; with none connected, its next one reads the record instead.
    fn send(&mut self, ended: Ended) {
        let Some(host) = &mut self.host else { return };
        let Some(daemon) = &mut host.daemon else {
            return;
        };
        daemon.outgoing.extend_from_slice(ended.line().as_bytes());
        if flush(daemon).is_err() {
            host.daemon = None;
        }
    }
}

/// Writes what the socket takes now; the rest waits for the next `POLLOUT`.
fn flush(daemon: &mut DaemonConn) -> io::Result<()> {
    while !daemon.outgoing.is_empty() {
        match (&daemon.stream).write(&daemon.outgoing) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                daemon.outgoing.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Closes every descriptor of this process but the standard streams and `keep`.
fn close_all_but(keep: &[RawFd]) {
    let open: Vec<RawFd> = fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for fd in open {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing descriptors this forked child inherited and will never use; the
            // objects that owned them in the parent are never dropped here (the child exits).
            unsafe { libc::close(fd) };
        }
    }
}
