//! `GET /metrics`: the Prometheus text format, on the API socket (the same registry is served
//! over TCP with `baton serve --metrics-addr`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use crate::daemon::Daemon;
use crate::metrics::Metrics;

pub async fn handle(State(daemon): State<Arc<Daemon>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, Metrics::CONTENT_TYPE)],
        daemon.metrics.encode(),
    )
}
