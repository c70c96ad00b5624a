//! `POST /v1/hook/claim` and `POST /v1/hook/delivered`: the Claude Code hook takes over the
//! wake-up of jobs whose session's inbox cannot start a turn, then says when it delivered
//! (`daemon::hook` has the why).

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};

use crate::api::{HookClaimRequest, HookClaimResponse, HookDeliveredRequest};
use crate::daemon::{ApiError, Daemon, Peer};

pub async fn claim(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<HookClaimRequest>,
) -> Result<Json<HookClaimResponse>, ApiError> {
    let claims = daemon.claim_for_hook(&peer, &req)?;
    Ok(Json(HookClaimResponse { claims }))
}

pub async fn delivered(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<HookDeliveredRequest>,
) -> Result<Json<serde_json::Value>, ApiError> {
    daemon.hook_delivered(&peer, &req.ids)?;
    Ok(Json(serde_json::json!({ "recorded": req.ids })))
}
