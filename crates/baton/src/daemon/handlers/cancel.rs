//! `POST /v1/cancel`: queued jobs end at once; running jobs get SIGTERM on their whole process
//! group and SIGKILL after the grace period (done by their supervisor, or by Slurm: the
//! backend decides how, `Backend::cancel`). All-or-nothing on
//! permissions: a request naming someone else's job changes nothing.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use baton_core::JobId;
use baton_core::lifecycle::Transition;

use crate::api::{CancelRequest, CancelResponse};
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::users;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<CancelRequest>,
) -> Result<Json<CancelResponse>, ApiError> {
    if req.ids.is_empty() {
        return Err(ApiError::BadRequest(
            "name at least one job to cancel".into(),
        ));
    }
    let ids: Vec<JobId> = req.ids.iter().copied().map(JobId).collect();
    cancel_jobs(&daemon, &peer, &ids, req.force, req.session.as_deref())?;
    Ok(Json(CancelResponse {
        jobs: daemon.views(&peer, &ids)?,
    }))
}

/// Cancels the jobs (those already ended are left alone), all or none: every permission is
/// checked before anything changes.
pub(crate) fn cancel_jobs(
    daemon: &Daemon,
    peer: &Peer,
    ids: &[JobId],
    force: bool,
    session: Option<&str>,
) -> Result<(), ApiError> {
    let by = users::name_of(peer.uid);
    let now = now_ms();
    {
        // Everything is checked before anything changes.
        let current = daemon.views(peer, ids)?;
        let mut jobs = crate::daemon::host::Locked(daemon.lock());
        for view in &current {
            let Some(job) = jobs.get(JobId(view.id)) else {
                continue;
            };
            if !peer.may_act_on(job) {
                return Err(ApiError::Forbidden(format!(
                    "job {} belongs to {}; you can cancel only your own jobs",
                    job.id, job.owner
                )));
            }
            // Parallel agents of one user must not kill each other's experiments by mistake:
            // an agent session may cancel another session's job only when it insists.
            if let (Some(mine), Some(theirs)) = (session, &job.session)
                && mine != theirs
                && !force
            {
                let age = match job.started_at() {
                    Some(t) => format!(
                        "has run for {}",
                        baton_core::units::format_duration((now - t).max(0))
                    ),
                    None => format!(
                        "has been queued for {}",
                        baton_core::units::format_duration((now - job.submitted_at).max(0))
                    ),
                };
                return Err(ApiError::Conflict(format!(
                    "job {} was submitted by another agent session ({theirs}) and {age}; \
                     cancel it anyway with --force",
                    job.id
                )));
            }
        }
        let request = || Transition::RequestCancel {
            by: by.clone(),
            reason: format!("cancelling (asked by {by})"),
        };
        for id in ids {
            let Some(job) = jobs.get(*id).cloned() else {
                continue; // already ended: nothing to do
            };
            daemon.cancel(&mut jobs, &job, request())?;
        }
    }
    daemon.notify_changed();
    daemon.wake();
    Ok(())
}
