//! Starting an attempt's first process: its program found in the job's `PATH`, its output
//! appended to the job's files, its own process group, its working directory and environment,
//! born in its cgroup, and, on a shared daemon, as its submitter.
//!
//! A job run as the supervisor's own user is started by `start_own`: a `clone` that shares the
//! supervisor's memory and suspends it until the child has exec'd (what `posix_spawn` does),
//! whose child makes the few system calls the job needs (into its cgroup, its own process group,
//! its output files, its directory, its umask, then exec) and nothing else. Neither a copy of the
//! supervisor's memory nor a move of the supervisor between cgroups, and not the two system calls
//! per signal that glibc's `posix_spawn` makes to reset handlers: for a short job these were
//! most of what starting it cost. A job run as another user needs the steps std's `Command`
//! runs between fork and exec (groups, ids, its directory as that user).

use std::ffi::{CString, c_char, c_int, c_void};
use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};

use crate::executor::{JobFiles, Launch, RunAs};

/// Starts the attempt's command; the pid of its first process, which leads its process group.
pub fn spawn(files: &JobFiles, launch: &Launch) -> io::Result<i32> {
    let Some((program, args)) = launch.command.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    };
    let as_other = launch.run_as.is_some() && rustix::process::geteuid().is_root();
    let spawned = if as_other {
        start_as_other(files, launch, program, args)
    } else {
        start_own(files, launch, program, args)
    };
    spawned.map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            io::Error::new(e.kind(), format!("command not found: {program}"))
        } else {
            io::Error::new(e.kind(), format!("cannot run {program}: {e}"))
        }
    })
}

/// A job run as the supervisor's own user (see the module's comment).
fn start_own(files: &JobFiles, launch: &Launch, program: &str, args: &[String]) -> io::Result<i32> {
    // Checked here for a clear message: the child's chdir would say only "no such file".
    if !Path::new(&launch.cwd).is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("working directory {} does not exist", launch.cwd),
        ));
    }
    let found = find_program(program, &launch.env, &launch.cwd)
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    // Opened here, with the supervisor's umask (077): the job's output is its owner's alone.
    let append = |path: &Path| OpenOptions::new().create(true).append(true).open(path);
    let stdout = append(&files.stdout())?;
    let stderr = append(&files.stderr())?;
    let stdin = match &launch.stdin {
        Some(path) => fs::File::open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open --stdin {path}: {e}")))?,
        None => fs::File::open("/dev/null")?,
    };
    let procs = match &launch.cgroup {
        Some(dir) => Some(
            OpenOptions::new()
                .write(true)
                .open(Path::new(dir).join("cgroup.procs"))
                .map_err(|e| {
                    io::Error::other(format!("cannot enter the job's cgroup {dir}: {e}"))
                })?,
        ),
        None => None,
    };
    let env: Vec<CString> = launch
        .env
        .iter()
        .map(|(k, v)| c_string(format!("{k}={v}").into_bytes()))
        .collect::<io::Result<_>>()?;
    let mut argv: Vec<CString> = Vec::with_capacity(args.len() + 1);
    argv.push(c_string(program.as_bytes().to_vec())?);
    for arg in args {
        argv.push(c_string(arg.as_bytes().to_vec())?);
    }
    let plan = |path: &Path, argv: &[CString]| -> io::Result<ChildPlan> {
        Ok(ChildPlan {
            program: c_string(path.as_os_str().as_bytes().to_vec())?,
            argv: argv.to_vec(),
            env: env.clone(),
            cwd: c_string(launch.cwd.as_bytes().to_vec())?,
            stdio: [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd()],
            cgroup_procs: procs.as_ref().map_or(-1, |f| f.as_raw_fd()),
            umask: launch.umask.unwrap_or(0o022) as libc::mode_t,
        })
    };
    match start(&plan(&found, &argv)?) {
        // As execvp does: a file the kernel cannot execute (a script without `#!`) is run by
        // the shell.
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            let mut sh_argv = vec![c_string(b"/bin/sh".to_vec())?];
            sh_argv.push(c_string(found.as_os_str().as_bytes().to_vec())?);
            sh_argv.extend(argv.into_iter().skip(1));
            start(&plan(Path::new("/bin/sh"), &sh_argv)?)
        }
        started => started,
    }
}

fn c_string(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

/// What the child of `start` does, all of it prepared before the clone: the child may not
/// allocate, since it runs in the supervisor's memory.
struct ChildPlan {
    program: CString,
    argv: Vec<CString>,
    env: Vec<CString>,
    cwd: CString,
    /// What becomes its stdin, stdout and stderr.
    stdio: [RawFd; 3],
    /// Its cgroup's `cgroup.procs`, open for writing; -1 for none.
    cgroup_procs: RawFd,
    umask: libc::mode_t,
}

/// What the child reads, and where it says why it failed.
#[repr(C)]
struct ChildArgs {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    stdio: [c_int; 3],
    cgroup_procs: c_int,
    umask: libc::mode_t,
    /// The errno of the step that failed, set by the child before it exits.
    error: AtomicI32,
}

/// The child's stack. Its few calls need little; a signal handler cannot run on it, since every
/// signal is blocked until just before the exec.
const CHILD_STACK: usize = 64 << 10;

/// Starts the process `plan` describes; its pid, once it has exec'd.
fn start(plan: &ChildPlan) -> io::Result<i32> {
    let pointers = |strings: &[CString]| -> Vec<*const c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let argv = pointers(&plan.argv);
    let envp = pointers(&plan.env);
    let args = ChildArgs {
        program: plan.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: plan.cwd.as_ptr(),
        stdio: plan.stdio,
        cgroup_procs: plan.cgroup_procs,
        umask: plan.umask,
        error: AtomicI32::new(0),
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down from its end, 16-byte aligned as the ABI wants.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    // SAFETY: every signal is blocked around the clone, so that none is handled in the child
    // on a handler of ours before it execs; the child only reads `args` and writes its atomic
    // `error`, and the supervisor is suspended (CLONE_VFORK) until the child has exec'd or
    // exited, so `args`, `argv`, `envp` and `stack` outlive everything the child does with them.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        let pid = libc::clone(
            child_main,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &args as *const ChildArgs as *mut c_void,
        );
        let clone_error = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        if pid < 0 {
            return Err(clone_error);
        }
        pid
    };
    drop(stack);
    match args.error.load(Ordering::Acquire) {
        0 => Ok(pid),
        errno => {
            // It exited without exec'ing: collected here, before the supervisor's loop could
            // take it for a job that ran.
            // SAFETY: waitpid on our own child, which has exited.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// The child of `start`: only system calls on what the supervisor prepared, then exec.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `ChildArgs` of `start`, alive until this process execs or exits.
    let args = unsafe { &*(arg as *const ChildArgs) };
    // SAFETY: each call below is a plain system call wrapper on values prepared before the
    // clone; nothing here allocates or takes a lock.
    unsafe {
        // The Rust runtime ignores SIGPIPE in the supervisor; a job starts with it at its
        // default, as from a shell. Signals it handles are reset by the exec itself.
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        if libc::sigaction(libc::SIGPIPE, &default, std::ptr::null_mut()) != 0 {
            fail(args);
        }
        // Into its cgroup before it can run anything, so everything it starts is born there.
        if args.cgroup_procs >= 0 && libc::write(args.cgroup_procs, b"0".as_ptr().cast(), 1) != 1 {
            fail(args);
        }
        if libc::setpgid(0, 0) != 0 {
            fail(args);
        }
        for (target, &fd) in args.stdio.iter().enumerate() {
            if libc::dup2(fd, target as c_int) < 0 {
                fail(args);
            }
        }
        if libc::chdir(args.cwd) != 0 {
            fail(args);
        }
        libc::umask(args.umask);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(args.program, args.argv, args.envp);
        fail(args)
    }
}

/// Says why in `args.error` and exits (the supervisor then reaps this child itself).
fn fail(args: &ChildArgs) -> ! {
    // SAFETY: reading errno, then _exit, which runs nothing of the supervisor's.
    unsafe {
        args.error
            .store((*libc::__errno_location()).max(1), Ordering::Release);
        libc::_exit(127)
    }
}

/// A job run as another user: std's fork and exec, with the steps between them that enter its
/// cgroup and drop to that user. The supervisor's umask is the job's for the spawn and its own
/// again after, since it outlives this one job.
fn start_as_other(
    files: &JobFiles,
    launch: &Launch,
    program: &str,
    args: &[String],
) -> io::Result<i32> {
    let own = rustix::process::umask(rustix::fs::Mode::from_raw_mode(
        launch.umask.unwrap_or(0o022),
    ));
    let mut cmd = Command::new(program);
    let spawned = configure(&mut cmd, files, launch, args).and_then(|()| cmd.spawn());
    rustix::process::umask(own);
    // Not waited for through std: the supervisor reaps it by its pid.
    spawned.map(|child| child.id() as i32)
}

/// Everything of the job's command but its program: arguments, environment, output files,
/// process group, stdin, and the steps between fork and exec that enter its cgroup and drop to
/// its user.
fn configure(
    cmd: &mut Command,
    files: &JobFiles,
    launch: &Launch,
    args: &[String],
) -> io::Result<()> {
    // Opened before the umask is the job's: the output is the job's owner's alone.
    let open = |path: &Path| OpenOptions::new().create(true).append(true).open(path);
    let (stdout, stderr) = (open(&files.stdout())?, open(&files.stderr())?);
    cmd.args(args)
        .env_clear()
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0);
    // Opened here, written by the child before it drops privileges and execs: the job's first
    // process is in its cgroup before it can run anything, so everything it starts is too.
    if let Some(dir) = &launch.cgroup {
        let path = Path::new(dir).join("cgroup.procs");
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| io::Error::other(format!("cannot enter the job's cgroup {dir}: {e}")))?;
        enter_cgroup(cmd, OwnedFd::from(file));
    }
    if let Some(run_as) = launch.run_as.clone() {
        drop_privileges(cmd, run_as, &launch.cwd)?;
    }
    if let Some(path) = &launch.stdin {
        // Opened by the child once it is the job's user, so that the file is read with that
        // user's permissions, not root's.
        stdin_as_user(cmd, path)?;
    }
    Ok(())
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
