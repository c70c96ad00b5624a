//! `POST /v1/shutdown`: stops the daemon as SIGTERM would (`baton shutdown`). Running jobs keep
//! running under their supervisors; the next daemon finds them. Only the daemon's own user and
//! root may ask; on a shared daemon, root alone.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};

use crate::api::ShutdownResponse;
use crate::daemon::{ApiError, Daemon, Peer};

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Json<ShutdownResponse>, ApiError> {
    if daemon.config.system && !peer.is_root() {
        return Err(ApiError::Forbidden(
            "only root may stop the shared daemon".into(),
        ));
    }
    tracing::info!(uid = peer.uid, "asked to shut down");
    daemon.stop_requested.notify_one();
    Ok(Json(ShutdownResponse {
        pid: std::process::id(),
    }))
}
