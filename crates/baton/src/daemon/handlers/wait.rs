//! `POST /v1/wait`: holds the request open until every named job has ended (or the timeout
//! passes). It sleeps on the daemon's change signal: no polling on either side.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{ConnectInfo, State};

use crate::api::{WaitRequest, WaitResponse};
use crate::daemon::{ApiError, Daemon, Peer};
use baton_core::JobId;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<WaitRequest>,
) -> Result<Json<WaitResponse>, ApiError> {
    if req.ids.is_empty() {
        return Err(ApiError::BadRequest(
            "name at least one job to wait for".into(),
        ));
    }
    let ids: Vec<JobId> = req.ids.iter().copied().map(JobId).collect();
    // Anyone may wait for a job to end (to start theirs after it), but only its owner reads its
    // report: refused before waiting, not after.
    if req.reports {
        for id in &ids {
            daemon
                .readable_job(&peer, *id, "reports")
                .map_err(|e| match e {
                    ApiError::Forbidden(_) => e.with_hint(
                        "`baton wait --brief` waits for another user's job without its report",
                    ),
                    other => other,
                })?;
        }
    }
    // Subscribe before looking, so a change between the look and the sleep is not missed.
    let mut changed = daemon.changed.subscribe();
    let mut shutting_down = daemon.shutting_down.subscribe();
    let deadline = req
        .timeout_ms
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms.max(0) as u64));
    loop {
        changed.borrow_and_update();
        let jobs = daemon.views(&peer, &ids)?;
        let ended = |j: &crate::api::JobView| j.state.is_terminal();
        // Done when every job has ended and its report is stored, so what `wait` prints is
        // the report the channels deliver.
        let done = jobs.iter().all(ended) && {
            let inner = daemon.lock();
            ids.iter().all(|id| !inner.reports_pending.contains(id))
        };
        if done {
            let (mut reports, mut headlines) = (Vec::new(), Vec::new());
            if req.reports {
                for id in &ids {
                    let built = daemon.report_of(*id).await;
                    reports.push(built.as_ref().map(|b| b.markdown().to_string()));
                    headlines.push(built.map(|b| b.report.headline.clone()));
                }
            }
            return Ok(Json(WaitResponse {
                done,
                jobs,
                reports,
                headlines,
            }));
        }
        let moved = !req.unless_changed_from.is_empty()
            && jobs
                .iter()
                .map(|j| j.state)
                .ne(req.unless_changed_from.iter().copied());
        if moved {
            return Ok(Json(WaitResponse {
                done: false,
                jobs,
                reports: Vec::new(),
                headlines: Vec::new(),
            }));
        }
        let timeout = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = changed.changed() => {}
            _ = shutting_down.wait_for(|s| *s) => {
                return Err(ApiError::Unavailable("the daemon is shutting down; wait again once it is back".into()));
            }
            _ = timeout => return Ok(Json(WaitResponse {
                done: false,
                jobs,
                reports: Vec::new(),
                headlines: Vec::new(),
            })),
        }
    }
}
