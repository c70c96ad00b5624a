//! The per-job supervisor: `baton supervise DIR`. It claims the launch in DIR, runs the job (as
//! the submitting user when it runs as root) in its own process group and, where the daemon made
//! one, its own cgroup, enforces the time limit, turns SIGTERM into a graceful stop of everything
//! the job started (SIGTERM, then SIGKILL after the grace period), and records how the attempt
//! ended whether or not a daemon is alive. It is a child subreaper, so whatever the job detaches
//! stays below it, and it exits (freeing the job's GPUs) only once the job's last process is
//! gone (`contain`).

use std::fs::{self, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, poll};
use rustix::fs::{FlockOperation, flock};
use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open};

use super::contain::{self, Cgroup, Descendants, Processes};
use super::{ExitRecord, JobFiles, Launch, RunAs, SupervisorEvent, append_event, read_json};

pub fn run(dir: &Path) -> ExitCode {
    ExitCode::from(run_in(dir) as u8)
}

/// The supervisor's work, as an exit status: 0 once the attempt's end is recorded (or when the
/// launch was not ours to run), 1 if it could not be.
pub fn run_in(dir: &Path) -> i32 {
    // A session of its own: no terminal, no hang-up or Ctrl-C meant for the daemon reaches it,
    // and it outlives the daemon. (The daemon cannot do this for us without forking itself.)
    let _ = rustix::process::setsid();
    let files = JobFiles::new(dir.to_path_buf());
    let record = match OpenOptions::new()
        .create(true)
        .append(true)
        .open(files.supervisor())
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "baton supervise: cannot open {}: {e}",
                files.supervisor().display()
            );
            return 1;
        }
    };
    // Held until this process exits (the descriptor is close-on-exec, so the job never holds it).
    if flock(&record, FlockOperation::LockExclusive).is_err() {
        return 1;
    }
    if fs::rename(files.launch(), files.claimed()).is_err() {
        // Revoked by a recovering daemon, or already run: either way not ours to run.
        return 0;
    }
    let Some(launch) = read_json::<Launch>(&files.claimed()) else {
        eprintln!(
            "baton supervise: unreadable launch description in {}",
            dir.display()
        );
        return 1;
    };
    let exit = run_attempt(&files, &launch, &record);
    if !record_exit(&record, &exit) {
        return 1;
    }
    drop(record);
    0
}

/// Appends the exit record, retrying while it cannot be written (a full disk): the daemon learns
/// how the job ended from nothing else, and holds its GPUs until then. Given up after 10 minutes,
/// when the daemon records the attempt as lost instead.
fn record_exit(record: &fs::File, exit: &ExitRecord) -> bool {
    let give_up = std::time::Instant::now() + Duration::from_secs(600);
    let mut pause = Duration::from_millis(100);
    loop {
        match append_event(record, &SupervisorEvent::Exited(exit.clone())) {
            Ok(()) => return true,
            Err(e) if std::time::Instant::now() < give_up => {
                eprintln!("baton supervise: cannot record the exit yet ({e}); retrying");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(10));
            }
            Err(e) => {
                eprintln!("baton supervise: cannot record the exit: {e}");
                return false;
            }
        }
    }
}

fn run_attempt(files: &JobFiles, launch: &Launch, record: &fs::File) -> ExitRecord {
    let mut exit = ExitRecord {
        attempt: launch.attempt,
        exit_code: None,
        signal: None,
        timed_out: false,
        cancelled: false,
        error: None,
        ended_at: 0,
        oom_kills: None,
        memory_exceeded: None,
    };
    let finish = |mut exit: ExitRecord| {
        exit.ended_at = now_ms();
        // Only a SIGKILL can be the OOM killer's; reading /proc/vmstat is not free.
        if exit.signal == Some(9) {
            exit.oom_kills = super::oom_kill_count();
        }
        exit
    };
    // The signals are taken before the record that cancel reads to find us: from then on a
    // SIGTERM may come at any moment, and it waits for the loop below rather than killing us.
    // SIGCHLD says that something the job orphaned has exited, to be reaped.
    let signals = match SignalPipe::new(&[libc::SIGTERM, libc::SIGINT, libc::SIGCHLD]) {
        Ok(signals) => signals,
        Err(e) => {
            exit.error = Some(format!("cannot take signals: {e}"));
            return finish(exit);
        }
    };
    let _ = append_event(
        record,
        &SupervisorEvent::Claimed {
            attempt: launch.attempt,
            pid: std::process::id() as i32,
        },
    );
    let cgroup = launch.cgroup.as_ref().map(|dir| Cgroup {
        dir: PathBuf::from(dir),
    });
    // A job that never started leaves its (empty) cgroup behind for no one.
    let never_started = |exit: ExitRecord| {
        if let Some(cgroup) = &cgroup {
            cgroup.remove();
        }
        finish(exit)
    };
    // Whatever the job detaches (setsid, double forks) is reparented to us rather than to init,
    // so it stays findable below us even where no cgroup holds it.
    if let Err(e) = Descendants::become_subreaper() {
        exit.error = Some(format!("cannot become a child subreaper: {e}"));
        return never_started(exit);
    }
    let procs: &dyn Processes = match &cgroup {
        Some(cgroup) => cgroup,
        None => &Descendants,
    };
    // Its reservation, held by the kernel where its cgroup can, else watched from here.
    let enforced = match &cgroup {
        Some(cgroup) => super::limits::apply(&cgroup.dir, launch.cpus, launch.mem_limit),
        None => super::limits::Enforced::default(),
    };
    let watched_memory = launch.mem_limit.filter(|_| !enforced.memory);
    let mut child = match spawn(files, launch) {
        Ok(child) => child,
        Err(e) => {
            exit.exit_code = Some(match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                std::io::ErrorKind::PermissionDenied => 126,
                _ => 1,
            });
            exit.error = Some(e.to_string());
            return never_started(exit);
        }
    };
    let pgid = child.id() as i32;
    // Our own child, not yet waited for: its pid cannot name another process meanwhile.
    let exited = match Pid::from_raw(pgid).map(|pid| pidfd_open(pid, PidfdFlags::empty())) {
        Some(Ok(fd)) => fd,
        _ => {
            // No pidfd (a kernel before 5.3): the job cannot be followed, so it is not left
            // running unwatched.
            super::kill_group(pgid, Signal::KILL);
            let _ = child.wait();
            exit.error = Some("cannot follow the job: no pidfd".into());
            return never_started(exit);
        }
    };
    let _ = append_event(
        record,
        &SupervisorEvent::Spawned {
            attempt: launch.attempt,
            pgid,
            started: super::process_start_time(pgid),
            oom_kills: super::oom_kill_count(),
        },
    );
    let grace = Duration::from_millis(launch.grace_ms.max(0) as u64);
    let deadline = launch
        .time_limit_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms.max(0) as u64));
    let mut next_memory_look = Instant::now() + super::limits::WATCH_INTERVAL;
    // When set, the job has been asked to stop and is killed outright at this instant.
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        // The next instant something is due: the time limit, the kill after the grace period,
        // or a look at the job's memory.
        let due = [
            deadline.filter(|_| kill_at.is_none()),
            kill_at.filter(|_| !killed),
            Some(next_memory_look).filter(|_| watched_memory.is_some() && !killed),
        ]
        .into_iter()
        .flatten()
        .min();
        let timeout = due.map(|at| at.saturating_duration_since(Instant::now()));
        let mut fds = [
            PollFd::new(&exited, PollFlags::IN),
            PollFd::new(&signals.read, PollFlags::IN),
        ];
        match poll(&mut fds, timeout.map(timespec).as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => break Err(std::io::Error::from(e)),
        }
        let (job_ended, signalled) = (!fds[0].revents().is_empty(), !fds[1].revents().is_empty());
        if job_ended {
            break child.wait();
        }
        if signalled {
            for signo in signals.take() {
                if signo == libc::SIGCHLD {
                    // What the job orphaned and has exited: reaped now, not at the job's end.
                    Descendants::reap_except(Some(pgid));
                } else {
                    exit.cancelled = !exit.timed_out;
                    stop(procs, &mut kill_at, grace);
                }
            }
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) && kill_at.is_none() {
            exit.timed_out = true;
            stop(procs, &mut kill_at, grace);
        }
        if kill_at.is_some_and(|k| now >= k) && !killed {
            procs.kill();
            killed = true;
        }
        if let Some(limit) = watched_memory
            && !killed
            && now >= next_memory_look
        {
            next_memory_look = now + super::limits::WATCH_INTERVAL;
            if super::limits::memory_in_use(&procs.pids()) > limit {
                // Like the kernel's OOM killer at a cgroup's limit: no grace, since what runs
                // past its memory takes it from every other job.
                exit.memory_exceeded = Some(limit);
                procs.kill();
                killed = true;
            }
        }
    };
    match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            exit.exit_code = status.code();
            exit.signal = status.signal();
        }
        Err(e) => exit.error = Some(format!("lost track of the job: {e}")),
    }
    // The job is over when its main process is, but its GPUs are free only once everything it
    // started is gone: the rest get SIGTERM and what is left of the grace period, then SIGKILL.
    let all_gone = contain::end_all(procs, grace, kill_at);
    if let (Some(cgroup), Some(limit)) = (&cgroup, launch.mem_limit)
        && enforced.memory
        && exit.signal == Some(9)
        && super::limits::oom_killed_in(&cgroup.dir)
    {
        exit.memory_exceeded = Some(limit);
    }
    if let Some(cgroup) = &cgroup {
        // Orphans of the job that died meanwhile were reparented to us: not left as zombies.
        let _ = contain::end_all(&Descendants, Duration::ZERO, None);
        if all_gone {
            cgroup.remove();
        }
    }
    if !all_gone {
        eprintln!("baton supervise: some of the job's processes outlived SIGKILL");
    }
    finish(exit)
}

/// Asks every process of the job to stop, once, and sets when the rest are killed.
fn stop(procs: &dyn Processes, kill_at: &mut Option<Instant>, grace: Duration) {
    if kill_at.is_none() {
        procs.signal(Signal::TERM);
        *kill_at = Some(Instant::now() + grace);
    }
}

fn spawn(files: &JobFiles, launch: &Launch) -> std::io::Result<Child> {
    let Some((program, args)) = launch.command.split_first() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty command",
        ));
    };
    // Checked here only when the job runs as ourselves: a job run as another user must find its
    // directory with that user's permissions, which the child checks after dropping to them.
    let as_other = launch.run_as.is_some() && rustix::process::geteuid().is_root();
    if !as_other && !Path::new(&launch.cwd).is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("working directory {} does not exist", launch.cwd),
        ));
    }
    // A job run as ourselves needs no step between fork and exec, so it is started with
    // posix_spawn (no copy of this process's memory). That takes a program found here, in the
    // job's PATH, since a PATH of the job's own would otherwise make std fall back to fork.
    if as_other {
        let mut cmd = Command::new(program);
        configure(&mut cmd, files, launch, args, as_other)?;
        return started(program, cmd.spawn());
    }
    let found = find_program(program, &launch.env, &launch.cwd).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("command not found: {program}"),
        )
    })?;
    let spawn = |cmd: &mut Command| match &launch.cgroup {
        Some(dir) => spawn_in_cgroup(cmd, Path::new(dir)),
        None => Ok(cmd.spawn()),
    };
    let mut cmd = Command::new(&found);
    cmd.arg0(program);
    configure(&mut cmd, files, launch, args, as_other)?;
    let mut spawned = spawn(&mut cmd)?;
    if matches!(&spawned, Err(e) if e.raw_os_error() == Some(libc::ENOEXEC)) {
        // As execvp does: a file the kernel cannot execute (a script without `#!`) is run by
        // the shell.
        let mut sh = Command::new("/bin/sh");
        sh.arg(&found);
        configure(&mut sh, files, launch, args, as_other)?;
        spawned = spawn(&mut sh)?;
    }
    started(program, spawned)
}

/// Everything of the job's command but its program: arguments, environment, output files,
/// process group, working directory, stdin, and (run as another user) the steps between fork
/// and exec that enter its cgroup and drop to that user.
fn configure(
    cmd: &mut Command,
    files: &JobFiles,
    launch: &Launch,
    args: &[String],
    as_other: bool,
) -> std::io::Result<()> {
    let open = |path: &Path| OpenOptions::new().create(true).append(true).open(path);
    cmd.args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(open(&files.stdout())?)
        .stderr(open(&files.stderr())?)
        .process_group(0);
    // Opened here, written by the child before it drops privileges and execs: the job's first
    // process is in its cgroup before it can run anything, so everything it starts is too. A
    // job started directly is born there instead (`spawn_in_cgroup`).
    if let Some(dir) = launch.cgroup.as_ref().filter(|_| as_other) {
        let path = Path::new(dir).join("cgroup.procs");
        let file = OpenOptions::new().write(true).open(&path).map_err(|e| {
            std::io::Error::other(format!("cannot enter the job's cgroup {dir}: {e}"))
        })?;
        enter_cgroup(cmd, OwnedFd::from(file));
    }
    match launch.run_as.clone() {
        Some(run_as) if as_other => drop_privileges(cmd, run_as, &launch.cwd)?,
        _ => {
            cmd.current_dir(&launch.cwd);
        }
    }
    if let Some(path) = &launch.stdin {
        if as_other {
            // Opened by the child once it is the job's user, so that the file is read with
            // that user's permissions, not root's.
            stdin_as_user(cmd, path)?;
        } else {
            let file = fs::File::open(path).map_err(|e| {
                std::io::Error::new(e.kind(), format!("cannot open --stdin {path}: {e}"))
            })?;
            cmd.stdin(file);
        }
    }
    // The daemon's umask (077) protects its own files; the job gets its submitter's. Set here
    // rather than in the child, so that the job can be started with posix_spawn.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(
        launch.umask.unwrap_or(0o022),
    ));
    Ok(())
}

/// The spawn's outcome, its error saying which program could not be run.
fn started(program: &str, spawned: std::io::Result<Child>) -> std::io::Result<Child> {
    spawned.map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            std::io::Error::new(e.kind(), format!("command not found: {program}"))
        } else {
            std::io::Error::new(e.kind(), format!("cannot run {program}: {e}"))
        }
    })
}

/// Starts the job in its cgroup `dir` without a step between fork and exec: a child is born in
/// its parent's cgroup, so the supervisor steps into the job's for the spawn and back into its
/// own, `dir`'s grandparent (the layout `contain::Method::prepare` makes), right after. The
/// job's first process is in its cgroup before it runs anything, as with `enter_cgroup`. The
/// outer error is the cgroup's; the inner one the spawn's.
fn spawn_in_cgroup(cmd: &mut Command, dir: &Path) -> std::io::Result<std::io::Result<Child>> {
    let own = dir
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| std::io::Error::other(format!("{} is not a job's cgroup", dir.display())))?;
    fs::write(dir.join("cgroup.procs"), "0").map_err(|e| {
        std::io::Error::other(format!(
            "cannot enter the job's cgroup {}: {e}",
            dir.display()
        ))
    })?;
    let spawned = cmd.spawn();
    if let Err(e) = fs::write(own.join("cgroup.procs"), "0") {
        // Still in the job's cgroup: the job must not run on with its supervisor counted as
        // one of its processes (ending it would end the supervisor too).
        if let Ok(child) = &spawned
            && let Some(pid) = Pid::from_raw(child.id() as i32)
        {
            let _ = rustix::process::kill_process_group(pid, Signal::KILL);
        }
        return Err(std::io::Error::other(format!(
            "cannot leave the job's cgroup {} for {}: {e}",
            dir.display(),
            own.display()
        )));
    }
    Ok(spawned)
}

/// Where `execvp` would find `program` in the job's PATH (its default when the job has none),
/// relative entries taken from the job's directory; `program` itself when it names a path.
fn find_program(program: &str, env: &[(String, String)], cwd: &str) -> Option<PathBuf> {
    let executable =
        |p: &Path| p.is_file() && rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok();
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    if program.is_empty() {
        return None;
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/bin:/usr/bin", |(_, v)| v.as_str());
    path.split(':')
        .map(|entry| Path::new(cwd).join(entry).join(program))
        .find(|p| executable(p))
}

/// Makes the child open `path` as its stdin after it has dropped to the job's user (the
/// pre-exec steps run in order; `drop_privileges` registered its own first).
fn stdin_as_user(cmd: &mut Command, path: &str) -> std::io::Result<()> {
    let path = std::ffi::CString::new(path)
        .map_err(|_| std::io::Error::other("--stdin path holds a NUL byte"))?;
    // SAFETY: open, dup2 and close are async-signal-safe; the path was made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::dup2(fd, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            Ok(())
        });
    }
    Ok(())
}

/// Makes the child move itself into the cgroup whose `cgroup.procs` is `procs` ("0" names the
/// writer), first thing after the fork.
fn enter_cgroup(cmd: &mut Command, procs: OwnedFd) {
    // SAFETY: one write(2), which is async-signal-safe; the descriptor was opened before.
    unsafe {
        cmd.pre_exec(move || {
            if libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the child run as the submitting user: groups, then gid, then uid (the order matters:
/// after setuid there is no permission left to change groups), and only then enters the working
/// directory, so that it gets there with the user's permissions, not root's.
fn drop_privileges(cmd: &mut Command, run_as: RunAs, cwd: &str) -> std::io::Result<()> {
    let groups: Vec<libc::gid_t> = run_as.groups.clone();
    let cwd = std::ffi::CString::new(cwd)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in cwd"))?;
    // SAFETY: only async-signal-safe system calls between fork and exec; `groups` and `cwd` were
    // allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(run_as.gid) != 0
                || libc::setuid(run_as.uid) != 0
                || libc::chdir(cwd.as_ptr()) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Where the signal handler writes: the write end of `SignalPipe`'s pipe, or -1 before one.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signo: libc::c_int) {
    // SAFETY: write(2) is async-signal-safe; errno is put back as it was, since the handler may
    // interrupt code that is about to read it.
    unsafe {
        let errno = *libc::__errno_location();
        let byte = signo as u8;
        libc::write(
            SIGNAL_PIPE.load(Ordering::Relaxed),
            (&byte as *const u8).cast(),
            1,
        );
        *libc::__errno_location() = errno;
    }
}

/// Signals caught by a handler that writes each one's number into a pipe, so that the
/// supervisor's loop polls them together with the job's pidfd. A handler, not a blocked mask
/// and a signalfd: std's `Command` hands the parent's mask on to the child, and a job that
/// starts with SIGTERM blocked could not be asked to stop. A handler is reset by exec.
struct SignalPipe {
    read: OwnedFd,
    _write: OwnedFd,
}

impl SignalPipe {
    fn new(signals: &[libc::c_int]) -> std::io::Result<SignalPipe> {
        let (read, write) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )?;
        SIGNAL_PIPE.store(write.as_raw_fd(), Ordering::Relaxed);
        // SAFETY: the handler only writes to the pipe; the action is a zeroed struct filled in.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            for &signo in signals {
                if libc::sigaction(signo, &action, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(SignalPipe {
            read,
            _write: write,
        })
    }

    /// The signals that came since the last look, each once.
    fn take(&self) -> Vec<libc::c_int> {
        let mut taken = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = rustix::io::read(&self.read, &mut buf) {
            for &byte in &buf[..n] {
                let signo = libc::c_int::from(byte);
                if !taken.contains(&signo) {
                    taken.push(signo);
                }
            }
        }
        taken
    }
}

fn timespec(wait: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos() as i64,
    }
}
