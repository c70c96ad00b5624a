//! The signals the supervisor takes (SIGCHLD: a child to reap; SIGTERM and SIGINT: a supervisor
//! of one attempt stops it), caught by a handler that writes each one's number into a pipe, so
//! that the supervisor's loop polls them together with its sockets.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

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
/// supervisor's loop polls them with everything else. A handler, not a blocked mask
/// and a signalfd: std's `Command` hands the parent's mask on to the child, and a job that
/// starts with SIGTERM blocked could not be asked to stop. A handler is reset by exec.
pub struct SignalPipe {
    pub read: OwnedFd,
    _write: OwnedFd,
}

/// Makes the handler write nowhere (a forked child, before it closes its parent's pipe).
pub fn forget() {
    SIGNAL_PIPE.store(-1, Ordering::Relaxed);
}

impl SignalPipe {
    pub fn new(signals: &[libc::c_int]) -> std::io::Result<SignalPipe> {
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
    pub fn take(&self) -> Vec<libc::c_int> {
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

pub fn timespec(wait: std::time::Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos() as i64,
    }
}
