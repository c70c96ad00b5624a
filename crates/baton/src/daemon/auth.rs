//! Who is calling: the peer credentials of the Unix socket connection, and what they may do. In
//! user mode only the daemon's own user (and root) is served; in system mode everyone is, and each
//! may act only on their own jobs (root on all).

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use tokio::net::UnixStream;

use super::{ApiError, Daemon};
use crate::store::JobRecord;

impl Daemon {
    /// Refuses a priority outside `[limits]` from a user of a shared daemon who is neither root
    /// nor one of its admins; `what` names the setting for the message (`--priority`).
    pub(crate) fn check_priority(
        &self,
        peer: &Peer,
        priority: i64,
        what: &str,
    ) -> Result<(), ApiError> {
        let limits = &self.config.limits;
        let allowed = limits.min_priority..=limits.max_priority;
        if !self.config.system || peer.is_root() || allowed.contains(&priority) {
            return Ok(());
        }
        let name = crate::users::name_of(peer.uid);
        if limits.admins.contains(&name) {
            return Ok(());
        }
        Err(ApiError::BadRequest(format!(
            "{what} {priority} is outside the range this shared daemon allows: {} to {}",
            limits.min_priority, limits.max_priority
        ))
        .with_hint("root and the users in config.toml's `[limits] admins` may go beyond it"))
    }
}

/// The caller, as the kernel vouches for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    /// The connecting process, where the kernel says (the Claude Code hook claims jobs by it).
    pub pid: Option<u32>,
    /// One of a shared daemon's `[limits] admins`: reads every job as root does (its output,
    /// report and history), and still acts only on its own. Set by [`admit`].
    pub reads_all: bool,
}

impl Peer {
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Cancel, hold, signal, requeue, update: the owner and root.
    pub fn may_act_on(&self, job: &JobRecord) -> bool {
        self.is_root() || job.owner_uid == self.uid
    }

    /// Its output, report, events, alerts, command: the owner, root and the admins.
    pub fn may_read(&self, job: &JobRecord) -> bool {
        self.reads_all || self.may_act_on(job)
    }

    /// Whether it reads what any user owns (workflows and sweeps too): root and the admins.
    pub fn reads_everything(&self) -> bool {
        self.reads_all || self.is_root()
    }
}

/// A uid no account has: what an unreadable credential is treated as (it gets refused).
const NOBODY: u32 = u32::MAX;

impl Peer {
    /// The caller on the other end of `stream`, as the kernel says (SO_PEERCRED).
    pub fn of(stream: &UnixStream) -> Peer {
        match stream.peer_cred() {
            Ok(cred) => Peer {
                uid: cred.uid(),
                gid: cred.gid(),
                pid: cred.pid().and_then(|p| u32::try_from(p).ok()),
                reads_all: false,
            },
            Err(_) => Peer {
                uid: NOBODY,
                gid: NOBODY,
                pid: None,
                reads_all: false,
            },
        }
    }
}

/// Refuses every request from a caller this daemon does not serve, and marks a shared daemon's
/// admins as readers of every job.
pub async fn admit(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(mut peer): ConnectInfo<Peer>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if peer.uid == NOBODY {
        return Err(ApiError::Forbidden(
            "cannot read the caller's credentials".into(),
        ));
    }
    if !daemon.config.system && !peer.is_root() && peer.uid != daemon.uid {
        return Err(ApiError::Forbidden(format!(
            "this daemon belongs to {}; start your own with `baton serve`",
            crate::users::name_of(daemon.uid)
        )));
    }
    if daemon.admin_uids.contains(&peer.uid) {
        peer.reads_all = true;
        request.extensions_mut().insert(ConnectInfo(peer));
    }
    Ok(next.run(request).await)
}
