//! `POST /v1/hold` and `POST /v1/release`: a queued job is kept from starting until released
//! (`baton hold`, `submit --hold`), like Slurm's `scontrol hold`/`release`. All or nothing:
//! every job is checked before any changes, and a request naming someone else's job, a job
//! that is not queued, or (for release) one that is not held changes nothing.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use baton_core::lifecycle::{Status, Transition};
use baton_core::{JobId, JobState};

use crate::api::{HoldRequest, JobsResponse};
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::store::JobRecord;
use crate::users;

pub async fn hold(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<HoldRequest>,
) -> Result<Json<JobsResponse>, ApiError> {
    change(&daemon, &peer, &req, true)
}

pub async fn release(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<HoldRequest>,
) -> Result<Json<JobsResponse>, ApiError> {
    change(&daemon, &peer, &req, false)
}

fn change(
    daemon: &Daemon,
    peer: &Peer,
    req: &HoldRequest,
    hold: bool,
) -> Result<Json<JobsResponse>, ApiError> {
    let verb = if hold { "hold" } else { "release" };
    if req.ids.is_empty() {
        return Err(ApiError::BadRequest(format!(
            "name at least one job to {verb}"
        )));
    }
    let ids: Vec<JobId> = req.ids.iter().copied().map(JobId).collect();
    // Unknown ids are refused with what exists.
    daemon.views(peer, &ids)?;
    let by = users::name_of(peer.uid);
    {
        let mut inner = daemon.lock();
        let mut changes = Vec::with_capacity(ids.len());
        for &id in &ids {
            let job = match inner.jobs.get(id) {
                Some(job) => job,
                None => {
                    let state = inner
                        .jobs
                        .lookup(id)?
                        .map_or(JobState::Succeeded, |j| j.state());
                    return Err(ApiError::Conflict(format!(
                        "job {id} has ended ({state}); only a queued job can be {}",
                        if hold { "held" } else { "released" }
                    )));
                }
            };
            if !peer.may_act_on(job) {
                return Err(ApiError::Forbidden(format!(
                    "job {id} belongs to {}; you can {verb} only your own jobs",
                    job.owner
                )));
            }
            refusal(&inner.jobs, job, hold).map_or(Ok(()), Err)?;
            let transition = if hold {
                Transition::Hold { by: by.clone() }
            } else {
                Transition::Unhold { by: by.clone() }
            };
            changes.push((id, transition));
        }
        inner.jobs.apply_all(changes, now_ms(), |_| Ok(()))?;
    }
    daemon.notify_changed();
    if !hold {
        daemon.wake();
    }
    Ok(Json(JobsResponse {
        jobs: daemon.views(peer, &ids)?,
    }))
}

/// Why `job` cannot be held (or released), if it cannot.
fn refusal(table: &crate::jobs::JobTable, job: &JobRecord, hold: bool) -> Option<ApiError> {
    let id = job.id;
    let conflict = |m: String| Some(ApiError::Conflict(m));
    let Status::Queued(q) = &job.life().status else {
        return conflict(format!(
            "job {id} is {}; only a queued job can be {}",
            job.state(),
            if hold { "held" } else { "released" }
        ));
    };
    if !hold {
        return match &q.held_by {
            Some(_) => None,
            None => conflict(format!("job {id} is not held")),
        };
    }
    if let Some(by) = &q.held_by {
        return conflict(format!("job {id} is already held (by {by})"));
    }
    if q.reservation.is_some() || table.in_waiting_gang(job).is_some() {
        return conflict(format!(
            "job {id} is a task of an atomic workflow, whose tasks start together or not at all; \
             cancel the workflow instead"
        ));
    }
    if let Some(slurm) = q.slurm.as_ref().and_then(|s| s.job()) {
        return conflict(format!(
            "job {id} is already in Slurm's queue as Slurm job {}; hold it there with `scontrol \
             hold {}`",
            slurm.id, slurm.id
        ));
    }
    None
}
