//! `GET /v1/jobs/{id}/report`: an ended job's report (DESIGN §4) and how its deliveries went.
//! Built on demand for a job that ended before reports existed.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use baton_core::JobId;

use crate::api::{DeliveryView, ReportResponse};
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, Peer};

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Result<Json<ReportResponse>, ApiError> {
    let id = JobId(id);
    let job = daemon.readable_job(&peer, id, "reports")?;
    if !job.state().is_terminal() {
        return Err(ApiError::Conflict(format!(
            "job {id} is {}; its report is written when it ends (`baton wait {id}` blocks until then)",
            job.state()
        )));
    }
    let built = daemon
        .report_of(id)
        .await
        .ok_or_else(|| ApiError::Internal(format!("the report of job {id} could not be built")))?;
    let built = Arc::unwrap_or_clone(built);
    let deliveries = daemon
        .lock()
        .jobs
        .store()
        .deliveries(id)?
        .into_iter()
        .map(|d| DeliveryView {
            channel: d.channel.public_spec(),
            state: d.state,
            attempts: d.attempts,
            delivered_at: d.delivered_at.map(rfc3339),
            error: d.error,
        })
        .collect();
    let path = crate::report::markdown_file(&daemon.files(id), &built)
        .display()
        .to_string();
    Ok(Json(ReportResponse {
        markdown: built.markdown().to_string(),
        report: built.report,
        path,
        deliveries,
    }))
}
