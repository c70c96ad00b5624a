//! `GET /v1/jobs/{id}/events`: a job's history from the append-only event log, for its owner
//! (and root) only.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use baton_core::JobId;

use crate::api::EventView;
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, Peer};

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Result<Json<Vec<EventView>>, ApiError> {
    let id = JobId(id);
    daemon.readable_job(&peer, id, "history")?;
    let events = daemon.lock().jobs.store().events(id)?;
    Ok(Json(
        events
            .into_iter()
            .map(|e| EventView {
                job: e.job.0,
                at: rfc3339(e.at),
                kind: e.kind,
                detail: e.detail,
            })
            .collect(),
    ))
}
