//! `POST /v1/jobs/{id}/resubmit`: a new job with the spec of job `id` (`baton resubmit`), with
//! the overrides the request names. What is copied: the command, working directory,
//! environment, umask, tags, resources, time limit, retries, priority and name, and where its
//! report goes (the original's channels and agent session, unless the request names channels:
//! then they are resolved in the caller's session as a submission's are). What is not: its
//! dependencies (those jobs have ended or may never run again: name them with `baton submit
//! --after` if they matter), its workflow (a task comes out a job of its own), and its history.
//! The new job belongs to the original's owner.
//!
//! The job is checked exactly as a submission is, by the submit handler's own `validate` (the
//! working directory must still exist, the request must fit this machine, priority within a
//! shared daemon's range, ...): the spec is turned back into the submission it came from.
//! Owner only (or root), like cancel.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use baton_core::JobId;

use crate::api::{JobView, ResubmitRequest, SubmitRequest};
use crate::daemon::views::{job_view, rfc3339};
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::notify::Channel;
use crate::store::JobRecord;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
    Json(req): Json<ResubmitRequest>,
) -> Result<Json<JobView>, ApiError> {
    let id = JobId(id);
    daemon.views(&peer, &[id])?; // an unknown id, with the range of those that exist
    let original = daemon
        .lock()
        .jobs
        .lookup(id)?
        .ok_or_else(|| ApiError::NotFound(format!("job {id} does not exist")))?;
    if !peer.may_act_on(&original) {
        return Err(ApiError::Forbidden(format!(
            "job {id} belongs to {}; you can resubmit only your own jobs",
            original.owner
        )));
    }
    let keep_channels = req.notify.is_empty();
    let submission = submission_of(&original, req);
    let mut job = super::submit::validate(&daemon, &peer, submission)?;
    // As the original's: its owner (root resubmitting a user's job runs it as that user), and
    // unless channels were named, where its report goes and the session it belongs to. A hook's
    // claim was on the original's wake-up, not on this one's.
    job.owner_uid = original.owner_uid;
    job.owner = original.owner.clone();
    if keep_channels {
        job.notify = original
            .notify
            .iter()
            .filter(|c| !matches!(c, Channel::ClaudeHook { .. }))
            .cloned()
            .collect();
        job.session = original.session.clone();
    }
    let view = {
        let mut inner = daemon.lock();
        let record = inner.jobs.submit(&job, None)?;
        daemon.metrics.job_submitted();
        // Each history says where the other went or came from.
        let now = now_ms();
        for (job, detail) in [
            (record.id, format!("from job {id}")),
            (id, format!("as job {}", record.id)),
        ] {
            if let Err(e) = inner
                .jobs
                .store_mut()
                .add_event(job, "resubmitted", &detail, now)
            {
                tracing::warn!(job = job.0, "cannot record the resubmission: {e}");
            }
        }
        let mut view = job_view(&record);
        if daemon.places_here() {
            let (position, start) = super::submit::queue_outlook(&daemon, &inner, &record);
            view.queue_position = Some(position);
            view.predicted_start = start.map(rfc3339);
        }
        view
    };
    daemon.notify_changed();
    daemon.wake();
    Ok(Json(view))
}

/// The submission a job came from (as far as it is kept), with the overrides of `req`.
fn submission_of(job: &JobRecord, req: ResubmitRequest) -> SubmitRequest {
    let request = job.request;
    let gpus = req.gpus.unwrap_or(request.count);
    // `--gpus 0` makes a job of the CPUs alone: a per-GPU memory it had goes with its GPUs.
    let gpu_mem = match (req.gpu_mem, req.gpus) {
        (Some(mem), _) => Some(mem),
        (None, Some(0)) => None,
        (None, _) => request.mem_per_gpu,
    };
    SubmitRequest {
        command: job.command.clone(),
        name: req.name.or_else(|| Some(job.name.clone())),
        gpus,
        gpu_mem,
        cpus: req.cpus.or(Some(request.cpus)),
        mem: req.mem.or((request.mem > 0).then_some(request.mem)),
        priority: req.priority.unwrap_or(job.priority),
        time_limit_ms: req.time_limit_ms.or(job.time_limit),
        retries: job.retries,
        tags: job.tags.clone(),
        cwd: job.cwd.clone(),
        env: job.env.clone(),
        umask: job.umask,
        notify: req.notify,
        context: req.context,
        // The same input; not its hold or its begin time, which were about the first run.
        stdin: job.stdin.clone(),
        stop_on: job.stop_on.iter().map(|d| d.as_str().to_string()).collect(),
        wake_on: job.wake.wake_on.clone(),
        wake_when: job.wake.wake_when.iter().map(|c| c.text()).collect(),
        note_when: (job.wake.note_on.iter().map(|p| format!("/{p}/")))
            .chain(job.wake.note_when.iter().map(|c| c.text()))
            .collect(),
        stop_when: (job.wake.stop_on.iter().map(|p| format!("/{p}/")))
            .chain(job.wake.stop_when.iter().map(|c| c.text()))
            .collect(),
        wake_every_ms: job.wake.wake_every_ms,
        signal: job.signal.map(|s| s.to_string()),
        ..SubmitRequest::default()
    }
}
