//! Starting an attempt's first process: its program found in the job's `PATH`, its output
//! appended to the job's files, its own process group, its working directory and environment,
//! born in its cgroup (or entering it before it execs), and, on a shared daemon, as its
//! submitter. A job run as the supervisor's own user is started with `posix_spawn` (no copy of
//! the supervisor's memory); one run as another user needs steps between fork and exec.

use std::fs::{self, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rustix::process::{Pid, Signal};

use crate::executor::{JobFiles, Launch, RunAs};

/// Starts the attempt's command. The supervisor's umask is the job's for the spawn (`configure`
/// sets it) and its own again after, since the supervisor outlives this one job.
pub fn spawn(files: &JobFiles, launch: &Launch) -> std::io::Result<Child> {
    let own = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    rustix::process::umask(own);
    let spawned = spawn_with_umask_set(files, launch);
    rustix::process::umask(own);
    spawned
}

fn spawn_with_umask_set(files: &JobFiles, launch: &Launch) -> std::io::Result<Child> {
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
