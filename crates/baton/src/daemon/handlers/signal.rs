//! `POST /v1/jobs/{id}/signal`: sends a signal to every process of a running job (`baton
//! signal`), through its backend (`Backend::signal`): here to the processes of its containment
//! (its cgroup, else those carrying its `BATON_JOB_KEY` and its process group), never to its
//! supervisor; under Slurm with `scancel --signal --full`. Any signal from 1 to 64 (but glibc's
//! 32 and 33), `KILL` and `STOP` included, as Slurm allows: a job killed this way ends as any
//! job killed by a signal does (failed, and retried if it has retries left); a stopped one
//! keeps its GPUs and its time limit runs on. Recorded in the job's history (`signal`: which,
//! by whom, where it went). Refused for a job that is not running (409) and for another user's
//! (403); a name that is no signal is a 400.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use baton_core::{JobId, JobState};

use crate::api::{SignalRequest, SignalResponse};
use crate::daemon::views::shown_view;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::executor::SignalError;
use crate::users;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
    Json(req): Json<SignalRequest>,
) -> Result<Json<SignalResponse>, ApiError> {
    let id = JobId(id);
    let signal = baton_core::signal::parse(&req.signal)
        .map_err(|e| ApiError::BadRequest(format!("{}: {e}", req.signal.trim())))?;
    let name = baton_core::signal::name(signal);
    daemon.views(&peer, &[id])?; // an unknown id, with the range of those that exist
    let job = daemon
        .lock()
        .jobs
        .lookup(id)?
        .ok_or_else(|| ApiError::NotFound(format!("job {id} does not exist")))?;
    if !peer.may_act_on(&job) {
        return Err(ApiError::Forbidden(format!(
            "job {id} belongs to {}; you can signal only your own jobs",
            job.owner
        )));
    }
    if job.state() != JobState::Running {
        let what = match job.state() {
            JobState::Queued => "it has not started".to_string(),
            ended => format!("it has ended ({ended})"),
        };
        return Err(ApiError::Conflict(format!(
            "job {id} is not running: {what}; only a running job's processes get signals"
        )));
    }
    let sent = {
        let (me, job) = (daemon.clone(), job.clone());
        daemon
            .tasks
            .spawn_blocking(move || me.signal(&job, signal))
            .await
            .map_err(|e| ApiError::Internal(format!("the signal was not sent: {e}")))?
    };
    let by = users::name_of(peer.uid);
    let detail = match sent {
        Ok(detail) => detail,
        Err(SignalError::NothingRuns(why)) => {
            return Err(ApiError::Conflict(format!(
                "job {id} is running, but {name} reached none of its processes: {why}"
            )));
        }
        Err(SignalError::Failed(why)) => {
            return Err(ApiError::Internal(format!(
                "{name} could not be sent to job {id}: {why}"
            )));
        }
    };
    if let Err(e) = daemon.lock().jobs.store_mut().add_event(
        id,
        "signal",
        &format!("{name} by {by}, to {detail}"),
        now_ms(),
    ) {
        tracing::warn!(job = id.0, "cannot record the signal: {e}");
    }
    tracing::info!(job = id.0, signal = %name, by = %by, "{detail}");
    let view = {
        let inner = daemon.lock();
        let current = inner.jobs.lookup(id)?.unwrap_or(job);
        shown_view(&inner.jobs, &peer, &current)
    };
    Ok(Json(SignalResponse {
        job: view,
        signal,
        name,
        detail,
    }))
}
