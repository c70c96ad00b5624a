//! Reaching the daemon: the client of the daemon this user talks to, starting the user's own
//! daemon in the background when none answers (and sending the request again), and waiting for a
//! daemon that restarts under a long wait. The CLI's `submit` and `workflow submit` (DESIGN §2)
//! and every MCP tool start a daemon this way; the CLI's other commands say that none runs
//! (exit 3, DESIGN §3).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::api::client::{Client, ClientError};
use crate::api::{JobView, SubmitRequest};
use crate::paths;

/// The client of the daemon this user talks to ([`paths::client_socket`]).
pub fn client() -> Client {
    Client::new(paths::client_socket())
}

/// Makes `call`; if no daemon runs, starts the user's daemon ([`start_daemon`]) and makes it
/// once more.
pub fn or_start_daemon<T>(
    client: &Client,
    call: impl Fn(&Client) -> Result<T, ClientError>,
) -> Result<T, ClientError> {
    match call(client) {
        Err(ClientError::NotRunning { .. }) => {
            start_daemon(client)?;
            call(client)
        }
        other => other,
    }
}

/// Queues a job, starting the user's daemon if none runs. A submission retries on its own with
/// its request id ([`Client::submit`]), so the daemon is started from within that loop.
pub fn submit(client: &Client, request: &SubmitRequest) -> Result<JobView, ClientError> {
    client.submit(request, &|| start_daemon(client))
}

/// Queues a sweep, starting the user's daemon if none runs (as [`submit`]).
pub fn submit_sweep(
    client: &Client,
    request: &crate::api::SweepRequest,
) -> Result<crate::api::SweepView, ClientError> {
    client.submit_sweep(request, &|| start_daemon(client))
}

/// Starts a user daemon in the background and waits (at most 10 s) until it answers. Only the
/// user's own socket is ever auto-started: a system socket or an explicit `BATON_SOCKET` that
/// nobody serves is reported instead.
pub fn start_daemon(client: &Client) -> Result<(), ClientError> {
    let home = paths::user_home();
    if client.socket() != home.join("baton.sock") {
        return Err(ClientError::NotRunning {
            socket: client.socket().to_path_buf(),
        });
    }
    spawn_daemon(&home)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.info() {
            Ok(_) => return Ok(()),
            Err(ClientError::NotRunning { .. }) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(ClientError::NotRunning { .. }) => {
                return Err(ClientError::StartFailed(format!(
                    "it did not open {} within 10 s; see {}",
                    client.socket().display(),
                    home.join("daemon.log").display()
                )));
            }
            Err(e) => return Err(e),
        }
    }
}

fn spawn_daemon(home: &Path) -> Result<(), ClientError> {
    let fail = |e: std::io::Error| ClientError::StartFailed(e.to_string());
    std::fs::create_dir_all(home).map_err(fail)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("daemon.log"))
        .map_err(fail)?;
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(paths::batond());
    cmd.arg0("baton")
        .arg("serve")
        .env("BATON_HOME", home)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(fail)?)
        .stderr(log);
    // Its own session: the daemon must outlive this terminal and this client.
    unsafe {
        cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(Into::into));
    }
    cmd.spawn().map_err(fail)?;
    eprintln!(
        "baton: started a daemon in the background (state in {}, log in daemon.log)",
        home.display()
    );
    Ok(())
}

/// Whether a long wait that failed with `error` should wait on: the daemon went away or is
/// restarting (running jobs survive that), it is back before `deadline`, and it was reached
/// before (`reached`), since no daemon at all on the first try is no restart but exit 3 at once.
pub fn waits_through_restart(
    client: &Client,
    error: &ClientError,
    reached: bool,
    deadline: Option<Instant>,
) -> bool {
    let restarting = match error {
        ClientError::Transport(_)
        | ClientError::Interrupted { .. }
        | ClientError::Api { status: 503, .. } => true,
        ClientError::NotRunning { .. } => reached,
        _ => false,
    };
    restarting && deadline.is_none_or(|d| Instant::now() < d) && reconnects(client, deadline)
}

/// Waits up to a minute (never past `deadline`) for the daemon to answer again: a held wait
/// ends when the daemon restarts, and running jobs survive that, so a waiter waits on.
pub fn reconnects(client: &Client, deadline: Option<Instant>) -> bool {
    let minute = Instant::now() + Duration::from_secs(60);
    let until = deadline.map_or(minute, |d| d.min(minute));
    while Instant::now() < until {
        if client.info().is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}
