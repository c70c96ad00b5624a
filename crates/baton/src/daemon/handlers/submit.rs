//! `POST /v1/jobs`: admission. Validates a submission against the machine and the store, records
//! it, and asks for a scheduling pass.

use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use baton_core::{DepKind, Dependency, GpuRequest, JobId, admission};

use crate::api::{JobView, SubmitRequest};
use crate::daemon::views::job_view;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::store::NewJob;
use crate::users;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<SubmitRequest>,
) -> Result<Json<JobView>, ApiError> {
    let job = validate(&daemon, &peer, req)?;
    let record = {
        let mut inner = daemon.lock();
        for dep in &job.deps {
            if !inner.active.contains_key(&dep.job) && inner.store.get(dep.job)?.is_none() {
                let newest = inner.store.max_id()?;
                return Err(ApiError::BadRequest(format!(
                    "--after: job {} does not exist (the newest job is {newest})",
                    dep.job
                )));
            }
        }
        let record = inner.store.insert(&job)?;
        inner.active.insert(record.id, record.clone());
        record
    };
    daemon.wake();
    Ok(Json(job_view(&record)))
}

fn validate(daemon: &Daemon, peer: &Peer, req: SubmitRequest) -> Result<NewJob, ApiError> {
    let bad = |m: String| Err(ApiError::BadRequest(m));
    if req.command.is_empty() || req.command[0].is_empty() {
        return bad(
            "no command given: put it after `--`, e.g. `baton submit --gpus 1 -- python train.py`"
                .into(),
        );
    }
    if !Path::new(&req.cwd).is_absolute() {
        return bad(format!(
            "the working directory must be an absolute path, not {:?}",
            req.cwd
        ));
    }
    if let Some(name) = &req.name
        && (name.is_empty() || name.len() > 200 || name.chars().any(char::is_control))
    {
        return bad("--name must be 1-200 printable characters".into());
    }
    if let Some(ms) = req.time_limit_ms
        && ms <= 0
    {
        return bad("--time-limit must be positive".into());
    }
    let request = match req.gpu_mem {
        Some(0) => return bad("--gpu-mem must be positive".into()),
        // Memory without a count means one shared GPU.
        Some(mem) => GpuRequest::shared(req.gpus.max(1), mem),
        None => GpuRequest::whole(req.gpus),
    };
    let gpus = &daemon.gpus;
    admission::check(&request, gpus).map_err(|e| {
        let hint = if gpus.is_empty() && daemon.probe.backend() == "none" {
            " (no GPU driver was found; `baton serve --sim-gpus N` simulates N GPUs)"
        } else {
            ""
        };
        ApiError::BadRequest(format!("{e}{hint}"))
    })?;
    for key in req.tags.keys() {
        if key.is_empty() || key.contains('=') {
            return bad(format!("invalid tag key {key:?}: use --tag KEY=VALUE"));
        }
    }
    let mut deps: Vec<Dependency> = Vec::new();
    for (ids, kind) in [
        (&req.after, DepKind::Success),
        (&req.after_any, DepKind::Any),
    ] {
        for &id in ids {
            if !deps.iter().any(|d| d.job.0 == id) {
                deps.push(Dependency {
                    job: JobId(id),
                    kind,
                });
            }
        }
    }
    Ok(NewJob {
        name: req.name,
        command: req.command,
        cwd: req.cwd,
        env: req.env,
        owner_uid: peer.uid,
        owner: users::name_of(peer.uid),
        priority: req.priority,
        request,
        time_limit: req.time_limit_ms,
        retries: req.retries,
        deps,
        tags: req.tags,
        submitted_at: now_ms(),
        umask: req.umask.map(|m| m & 0o777),
    })
}
