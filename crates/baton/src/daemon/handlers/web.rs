//! `POST /v1/web/login`: a one-time login link for the dashboard (`baton dashboard`), bound to
//! the caller the socket's peer credentials name. Refused (409) when the daemon serves no
//! dashboard.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};

use crate::api::WebLoginResponse;
use crate::daemon::{ApiError, Daemon, Peer};

pub async fn login(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Json<WebLoginResponse>, ApiError> {
    let Some(base) = daemon
        .web_url
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    else {
        return Err(
            ApiError::Conflict("this daemon serves no dashboard".into()).with_hint(
                "start it with `baton serve --web-addr 127.0.0.1:8080` (or `[daemon] web_addr` in \
             config.toml)",
            ),
        );
    };
    let token = daemon
        .web
        .token_for(peer)
        .ok_or_else(|| ApiError::Internal("no randomness to make a login token with".into()))?;
    Ok(Json(WebLoginResponse {
        url: format!("{base}/login?token={token}"),
        base,
    }))
}
