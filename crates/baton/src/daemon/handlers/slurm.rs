//! `POST /v1/slurm/poke`: Slurm's end-of-job mail hook (`baton slurm-mail`) says one of this
//! daemon's jobs changed; the tracker looks at once instead of at its next poll. It carries no
//! data: whatever sends it can only make the daemon look sooner.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use crate::daemon::Daemon;

pub async fn poke(State(daemon): State<Arc<Daemon>>) -> StatusCode {
    tracing::info!("Slurm's end-of-job mail says a job changed; looking now");
    daemon.poke();
    StatusCode::NO_CONTENT
}
