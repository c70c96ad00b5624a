//! The supervisor spawner: one long-lived `baton spawner` process (baton re-executed once, kept
//! single-threaded) that forks a supervisor per job on request. Forking a small process is much
//! cheaper than executing the baton binary again for every job, which dominated the cost of short
//! jobs (loading, relocating and faulting in a large binary each time).
//!
//! Protocol, over the spawner's stdin (a Unix socket pair): the daemon writes a job directory and a
//! newline; the spawner forks, the child becomes that job's supervisor (`supervisor::run`), and the
//! spawner answers `ok PID\n` with a pidfd for the child attached (SCM_RIGHTS), or `err TEXT\n`.
//! The pidfd is opened before the spawner can reap the child, so it can never name a reused pid.
//! When the daemon goes away the socket closes and the spawner exits; supervisors live on.

use std::io::{self, IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};
use rustix::process::{Pid, PidfdFlags, pidfd_open};

/// The daemon's handle on its spawner; started on first use and again if it dies.
pub struct Spawner {
    exe: PathBuf,
    conn: Mutex<Option<Conn>>,
}

struct Conn {
    sock: UnixStream,
    child: Child,
}

impl Spawner {
    pub fn new(exe: PathBuf) -> Self {
        Spawner {
            exe,
            conn: Mutex::new(None),
        }
    }

    /// Starts a supervisor for the job in `dir`; returns a pidfd for it.
    pub fn spawn(&self, dir: &Path) -> io::Result<OwnedFd> {
        let dir = dir
            .to_str()
            .filter(|d| !d.contains('\n'))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "unusable job path"))?;
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut last = None;
        // A spawner that died (or was killed) is replaced once.
        for _ in 0..2 {
            if conn.is_none() {
                *conn = Some(self.start()?);
            }
            let c = conn.as_mut().expect("just set");
            match c.request(dir) {
                Ok(Ok(fd)) => return Ok(fd),
                // The spawner answered: fork failed; a new spawner would not do better.
                Ok(Err(e)) => return Err(e),
                Err(e) => {
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                    *conn = None;
                    last = Some(e);
                }
            }
        }
        Err(last.expect("the loop ran"))
    }

    fn start(&self) -> io::Result<Conn> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_read_timeout(Some(Duration::from_secs(10)))?;
        let child = Command::new(&self.exe)
            .arg("spawner")
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Conn { sock: ours, child })
    }
}

impl Conn {
    /// Outer error: the spawner is unusable. Inner error: it answered with a failure.
    fn request(&mut self, dir: &str) -> io::Result<io::Result<OwnedFd>> {
        self.sock.write_all(format!("{dir}\n").as_bytes())?;
        let mut reply = Vec::new();
        let mut pidfd = None;
        while !reply.contains(&b'\n') {
            let mut buf = [0u8; 512];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let msg = recvmsg(
                &self.sock,
                &mut [IoSliceMut::new(&mut buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )?;
            if msg.bytes == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "spawner exited",
                ));
            }
            reply.extend_from_slice(&buf[..msg.bytes]);
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(fds) = message {
                    for fd in fds {
                        pidfd = Some(fd);
                    }
                }
            }
        }
        let text = String::from_utf8_lossy(&reply);
        let line = text.trim_end();
        if let Some(rest) = line.strip_prefix("err ") {
            return Ok(Err(io::Error::other(rest.to_string())));
        }
        match (line.starts_with("ok "), pidfd) {
            (true, Some(fd)) => Ok(Ok(fd)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected answer from the spawner: {line:?}"),
            )),
        }
    }
}

extern "C" fn on_sigchld(_: libc::c_int) {}

/// The spawner process (`baton spawner`): serves requests on stdin until it closes.
pub fn serve() -> i32 {
    // SAFETY: fd 0 is the socket the daemon gave us; we own it from here on.
    let sock = unsafe { OwnedFd::from_raw_fd(0) };
    // Finished supervisors are reaped as soon as they exit rather than waiting as zombies for
    // the next request: SIGCHLD stays blocked except inside ppoll, which it then interrupts, so
    // none can slip in between a reap and the wait.
    // SAFETY: a handler that does nothing, and plain signal-mask calls.
    let unblocked = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigchld as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut());
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut previous);
        previous
    };
    let mut pending: Vec<u8> = Vec::new();
    loop {
        reap();
        let Some(end) = pending.iter().position(|&b| b == b'\n') else {
            let mut poll = libc::pollfd {
                fd: sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; the mask is a plain sigset_t.
            let ready = unsafe { libc::ppoll(&mut poll, 1, std::ptr::null(), &unblocked) };
            if ready <= 0 {
                continue; // EINTR: a child exited
            }
            let mut buf = [0u8; 4096];
            match rustix::io::read(&sock, &mut buf) {
                Ok(0) => return 0,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(_) => return 1,
            }
            continue;
        };
        let line: Vec<u8> = pending.drain(..=end).collect();
        let dir = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
        let answer = fork_supervisor(&sock, &dir);
        let sent = match answer {
            Ok((pid, pidfd)) => {
                let fds = [pidfd.as_fd()];
                let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
                let mut control = SendAncillaryBuffer::new(&mut space);
                control.push(SendAncillaryMessage::ScmRights(&fds));
                let text = format!("ok {pid}\n");
                sendmsg(
                    &sock,
                    &[IoSlice::new(text.as_bytes())],
                    &mut control,
                    SendFlags::empty(),
                )
                .map(drop)
            }
            Err(e) => {
                let text = format!("err {}\n", e.to_string().replace('\n', " "));
                rustix::io::write(&sock, text.as_bytes()).map(drop)
            }
        };
        if sent.is_err() {
            return 1;
        }
    }
}

fn fork_supervisor(sock: &OwnedFd, dir: &str) -> io::Result<(i32, OwnedFd)> {
    // SAFETY: this process is single-threaded (it never starts a runtime or a thread), so the
    // child may do anything after fork.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            // SAFETY: in the child: give up the daemon's socket (its end must close when the
            // spawner does) and put /dev/null in its place, and restore SIGCHLD (the supervisor
            // needs it delivered to learn that its job ended).
            unsafe {
                libc::signal(libc::SIGCHLD, libc::SIG_DFL);
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if null >= 0 {
                    libc::dup2(null, sock.as_raw_fd());
                    libc::close(null);
                }
            }
            let code = super::supervisor::run_in(Path::new(dir));
            std::process::exit(code);
        }
        pid => {
            let pidfd = Pid::from_raw(pid)
                .ok_or_else(|| io::Error::other("fork returned an invalid pid"))
                .and_then(|p| pidfd_open(p, PidfdFlags::empty()).map_err(io::Error::from));
            pidfd.map(|fd| (pid, fd))
        }
    }
}

/// Collects every child that has exited, without blocking.
fn reap() {
    loop {
        let mut status = 0;
        // SAFETY: plain waitpid on our own children.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}
