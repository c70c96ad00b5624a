//! `POST /v1/requeue`: jobs that failed, were cancelled or timed out go back to the queue, each
//! to run again as a new attempt of the same id (`scontrol requeue`; `baton requeue`). The
//! attempt count goes on (`BATON_ATTEMPT` says which attempt runs), its output is appended to
//! the job's logs, and its end brings a new report and a new wake-up; the deliveries of the
//! earlier end that were not sent yet never will be (`Store::supersede_deliveries`). Its
//! dependencies are those it was submitted with, as they stand now.
//!
//! Refused, with the reason and what to do instead: a job that is queued or running (nothing to
//! requeue), one that succeeded (`baton resubmit` runs it again as a new job), another user's
//! (403, as for cancel), and a workflow's task: its workflow has ended with it, or decides its
//! other tasks on its end, so a task is not run again alone; resubmit the workflow (or the
//! task's command, with `baton resubmit`). All or nothing: every job is checked before any
//! changes.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use baton_core::{JobId, JobState};

use crate::api::{RequeueRequest, RequeueResponse};
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::store::JobRecord;
use crate::users;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<RequeueRequest>,
) -> Result<Json<RequeueResponse>, ApiError> {
    if req.ids.is_empty() {
        return Err(ApiError::BadRequest(
            "name at least one job to requeue".into(),
        ));
    }
    let ids: Vec<JobId> = req.ids.iter().copied().map(JobId).collect();
    // Unknown ids are refused here, with the range of those that exist.
    daemon.views(&peer, &ids)?;
    let by = users::name_of(peer.uid);
    {
        let mut inner = daemon.lock();
        let mut requeue = Vec::with_capacity(ids.len());
        for id in &ids {
            let job = inner
                .jobs
                .lookup(*id)?
                .ok_or_else(|| ApiError::NotFound(format!("job {id} does not exist")))?;
            if !peer.may_act_on(&job) {
                return Err(ApiError::Forbidden(format!(
                    "job {id} belongs to {}; you can requeue only your own jobs",
                    job.owner
                )));
            }
            refusal(&job)?;
            // Its report is being written this very moment (it has just ended): what it says
            // is about to be handed to its channels.
            if inner.reports_pending.contains(id) {
                return Err(ApiError::Conflict(format!(
                    "job {id} has just ended and its report is being written; requeue it in a \
                     moment"
                )));
            }
            if !requeue.contains(id) {
                requeue.push(*id);
            }
        }
        let now = now_ms();
        for id in requeue {
            daemon.forget_report(id);
            inner.sweep_runs.forget(id);
            let job = inner.jobs.requeue(id, &by, now)?;
            daemon.reopened();
            tracing::info!(job = id.0, attempt = job.attempt(), by = %by, "requeued");
        }
    }
    daemon.notify_changed();
    daemon.wake();
    Ok(Json(RequeueResponse {
        jobs: daemon.views(&peer, &ids)?,
    }))
}

/// Why `job` cannot be requeued, if it cannot (its owner is checked before).
fn refusal(job: &JobRecord) -> Result<(), ApiError> {
    let id = job.id;
    if let Some(w) = job.workflow_id {
        let task = job.task.as_deref().unwrap_or(&job.name);
        return Err(ApiError::Conflict(format!(
            "job {id} is task {task} of workflow {w}; a workflow's task is not requeued alone \
             (its workflow decided its other tasks on its end)"
        ))
        .with_hint(format!(
            "submit the workflow again (`baton workflow submit FILE`), or run this task's \
             command again as a new job outside the workflow with `baton resubmit {id}`"
        )));
    }
    match job.state() {
        JobState::Failed | JobState::Cancelled | JobState::Timeout => Ok(()),
        JobState::Succeeded => Err(ApiError::Conflict(format!(
            "job {id} succeeded; only a job that failed, was cancelled or timed out is requeued"
        ))
        .with_hint(format!("`baton resubmit {id}` runs it again as a new job"))),
        JobState::Queued => Err(ApiError::Conflict(format!(
            "job {id} is queued already; it runs when its turn comes"
        ))),
        JobState::Running => Err(ApiError::Conflict(format!(
            "job {id} is running; a job is requeued once it has ended"
        ))
        .with_hint(format!(
            "`baton cancel {id}` ends it; `baton requeue {id}` then runs it again"
        ))),
    }
}
