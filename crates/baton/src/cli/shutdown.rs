//! `baton shutdown`: stops the daemon this user talks to, as SIGTERM would, and waits until it
//! is gone. Running jobs keep running under their supervisors; the next daemon (`baton serve`,
//! or the next `baton submit`) finds them again.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::print_json;
use crate::api::client::ClientError;
use crate::edge::connect::client;

pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let client = client();
    let stopping = client.shutdown()?;
    // Gone once its process has exited (it drains requests in flight for up to 10 s first).
    // Through a pidfd, taken while it still runs: the event of its exit, and never another
    // process that reused the number.
    let exited = rustix::process::Pid::from_raw(stopping.pid as i32)
        .and_then(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok())
        .map(|fd| {
            use std::os::fd::AsRawFd;
            let mut poll = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; a pidfd turns readable when its process exits.
            unsafe { libc::poll(&mut poll, 1, 20_000) > 0 }
        });
    match exited {
        Some(false) => anyhow::bail!(
            "the daemon (pid {}) was asked to stop but is still running after 20 s",
            stopping.pid
        ),
        // Not ours to watch (another pid namespace): its socket closing will do.
        None => wait_for_the_socket(&client),
        Some(true) => {}
    }
    if json {
        print_json(&stopping);
    } else {
        println!(
            "stopped the baton daemon (pid {}); running jobs keep running under their \
             supervisors, and the next daemon finds them",
            stopping.pid
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn wait_for_the_socket(client: &crate::api::client::Client) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !matches!(client.info(), Err(ClientError::NotRunning { .. })) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
}
