//! `POST /v1/jobs/{id}/update`: changes what a queued job asks for (`baton update`, like
//! `scontrol update`): its name, priority, time limit, GPUs, cores and memory, each change an
//! event. The new request gets the checks a submission gets. A running job keeps what it
//! started with (its supervisor enforces the time limit it was given and its GPUs are its
//! own); only its name may change.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path as UrlPath, State};
use baton_core::lifecycle::Status;
use baton_core::{JobId, admission, input};

use crate::api::{JobView, UpdateRequest};
use crate::daemon::views::shown_view;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::store::SpecChange;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<u64>,
    Json(req): Json<UpdateRequest>,
) -> Result<Json<JobView>, ApiError> {
    let id = JobId(id);
    daemon.views(&peer, &[id])?;
    let bad = |m: String| Err(ApiError::BadRequest(m));
    if let Some(name) = &req.name
        && (name.is_empty() || name.len() > 200 || name.chars().any(char::is_control))
    {
        return bad("--name must be 1-200 printable characters".into());
    }
    if let Some(ms) = req.time_limit_ms {
        input::check_time_limit(ms)
            .map_err(|e| ApiError::BadRequest(format!("--time-limit: {e}")))?;
    }
    if let Some(p) = req.priority {
        daemon.check_priority(&peer, p, "--priority")?;
    }
    let resources =
        req.gpus.is_some() || req.gpu_mem.is_some() || req.cpus.is_some() || req.mem.is_some();
    let view = {
        let mut inner = daemon.lock();
        let Some(job) = inner.jobs.get(id) else {
            return Err(ApiError::Conflict(format!(
                "job {id} has ended; only a queued job can be updated (`baton resubmit {id}` \
                 queues a new one like it)"
            )));
        };
        if !peer.may_act_on(job) {
            return Err(ApiError::Forbidden(format!(
                "job {id} belongs to {}; you can update only your own jobs",
                job.owner
            )));
        }
        let fixed = resources || req.priority.is_some() || req.time_limit_ms.is_some();
        match &job.life().status {
            Status::Running(_) if fixed => {
                return Err(ApiError::Conflict(format!(
                    "job {id} is running: its resources, priority and time limit are fixed once \
                     it starts (only --name can change)"
                )));
            }
            Status::Queued(q) if q.reservation.is_some() && resources => {
                return Err(ApiError::Conflict(format!(
                    "job {id} holds GPUs its atomic workflow reserved; its resources can no \
                     longer change"
                )));
            }
            Status::Queued(q)
                if q.slurm.is_some() && (resources || req.time_limit_ms.is_some()) =>
            {
                return Err(ApiError::Conflict(format!(
                    "job {id} is already in Slurm's queue; change it there with `scontrol \
                     update`"
                )));
            }
            _ => {}
        }
        let request = if resources {
            let old = job.request;
            // `--gpus` alone keeps a shared job shared; `--gpu-mem` alone keeps the count.
            let gpu_mem = req.gpu_mem.or(old.mem_per_gpu);
            let request = daemon.resource_request(
                req.gpus.unwrap_or(old.count),
                gpu_mem,
                Some(req.cpus.unwrap_or(old.cpus)),
                Some(req.mem.unwrap_or(old.mem)).filter(|&m| m > 0),
            )?;
            if daemon.places_here() {
                admission::check(&request, &daemon.gpus, Some(&daemon.config.host.capacity))
                    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
            }
            // A job in a reservation runs on its GPUs: it may ask for 1 to all of them.
            if let Some(r) = &job.reservation {
                let kept = inner
                    .reservations
                    .iter()
                    .find(|x| x.id == r.id)
                    .map_or(0, |x| x.made.gpus.len() as u32);
                if request.count == 0 || request.count > kept {
                    return bad(format!(
                        "job {id} runs in reservation {}, which keeps {kept} GPU{}: it asks \
                         for 1 to {kept}",
                        r.name,
                        if kept == 1 { "" } else { "s" }
                    ));
                }
            }
            Some(request)
        } else {
            None
        };
        let change = SpecChange {
            name: req.name,
            priority: req.priority,
            time_limit: req.time_limit_ms,
            request,
        };
        let job = inner.jobs.update_spec(id, &change, now_ms())?;
        shown_view(&inner.jobs, &peer, &job)
    };
    daemon.notify_changed();
    daemon.wake();
    Ok(Json(view))
}
