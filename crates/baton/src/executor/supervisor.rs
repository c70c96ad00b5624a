//! The per-job supervisor: `baton supervise DIR`. It claims the launch in DIR, runs the job in its
//! own process group (as the submitting user when it runs as root), enforces the time limit,
//! turns SIGTERM into a graceful stop of the whole group (SIGTERM, then SIGKILL after the grace
//! period), and records how the attempt ended in `exit.json` whether or not a daemon is alive.

use std::fs::{self, OpenOptions};
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};
use rustix::process::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use super::{
    ExitRecord, JobFiles, Launch, RunAs, SupervisorEvent, append_event, kill_group, read_json,
};

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
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("baton supervise: {e}");
            return 1;
        }
    };
    let exit = runtime.block_on(run_attempt(&files, &launch, &record));
    if let Err(e) = append_event(&record, &SupervisorEvent::Exited(exit)) {
        eprintln!("baton supervise: cannot record the exit: {e}");
        return 1;
    }
    drop(record);
    0
}

async fn run_attempt(files: &JobFiles, launch: &Launch, record: &fs::File) -> ExitRecord {
    let mut exit = ExitRecord {
        attempt: launch.attempt,
        exit_code: None,
        signal: None,
        timed_out: false,
        cancelled: false,
        error: None,
        ended_at: 0,
        oom_kills: None,
    };
    let finish = |mut exit: ExitRecord| {
        exit.ended_at = now_ms();
        // Only a SIGKILL can be the OOM killer's; reading /proc/vmstat is not free.
        if exit.signal == Some(9) {
            exit.oom_kills = super::oom_kill_count();
        }
        exit
    };
    // Signal handlers before the record that cancel reads to find us: from then on a SIGTERM may
    // come at any moment, and it is queued for the loop below rather than killing us.
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        exit.error = Some("cannot install signal handlers".into());
        return finish(exit);
    };
    let _ = append_event(
        record,
        &SupervisorEvent::Claimed {
            attempt: launch.attempt,
            pid: std::process::id() as i32,
        },
    );
    let child = match spawn(files, launch) {
        Ok(child) => child,
        Err(e) => {
            exit.exit_code = Some(match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                std::io::ErrorKind::PermissionDenied => 126,
                _ => 1,
            });
            exit.error = Some(e.to_string());
            return finish(exit);
        }
    };
    let mut child = child;
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
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
    let far = Instant::now() + Duration::from_secs(100 * 365 * 86_400);
    let deadline = launch
        .time_limit_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms.max(0) as u64));
    // When set, the job has been asked to stop and is killed outright at this instant.
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = term.recv() => {
                exit.cancelled = !exit.timed_out;
                stop(pgid, &mut kill_at, grace);
            }
            _ = int.recv() => {
                exit.cancelled = !exit.timed_out;
                stop(pgid, &mut kill_at, grace);
            }
            _ = sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && kill_at.is_none() => {
                exit.timed_out = true;
                stop(pgid, &mut kill_at, grace);
            }
            _ = sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() => {
                kill_group(pgid, Signal::KILL);
                kill_at = Some(far);
            }
        }
    };
    // The job is over when its main process is: nothing it left behind in its group may keep
    // holding GPUs or the terminal.
    kill_group(pgid, Signal::KILL);
    match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            exit.exit_code = status.code();
            exit.signal = status.signal();
        }
        Err(e) => exit.error = Some(format!("lost track of the job: {e}")),
    }
    finish(exit)
}

fn stop(pgid: i32, kill_at: &mut Option<Instant>, grace: Duration) {
    if kill_at.is_none() {
        kill_group(pgid, Signal::TERM);
        *kill_at = Some(Instant::now() + grace);
    }
}

fn spawn(files: &JobFiles, launch: &Launch) -> std::io::Result<tokio::process::Child> {
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
    let open = |path: &Path| OpenOptions::new().create(true).append(true).open(path);
    let stdout = open(&files.stdout())?;
    let stderr = open(&files.stderr())?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(false);
    match launch.run_as.clone() {
        Some(run_as) if as_other => drop_privileges(&mut cmd, run_as, &launch.cwd)?,
        _ => {
            cmd.current_dir(&launch.cwd);
        }
    }
    // The daemon's umask (077) protects its own files; the job gets its submitter's. Set here
    // rather than in the child, so that the job can be started with posix_spawn.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(
        launch.umask.unwrap_or(0o022),
    ));
    cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            std::io::Error::new(e.kind(), format!("command not found: {program}"))
        } else {
            std::io::Error::new(e.kind(), format!("cannot run {program}: {e}"))
        }
    })
}

/// Makes the child run as the submitting user: groups, then gid, then uid (the order matters:
/// after setuid there is no permission left to change groups), and only then enters the working
/// directory, so that it gets there with the user's permissions, not root's.
fn drop_privileges(
    cmd: &mut tokio::process::Command,
    run_as: RunAs,
    cwd: &str,
) -> std::io::Result<()> {
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
