//! `POST /v1/jobs`: admission. Validates a submission against the machine and the store, records
//! it, and asks for a scheduling pass.

use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use baton_core::input::{self, InputError};
use baton_core::{DepKind, Dependency, JobId, ResourceRequest, admission};

use crate::api::{JobView, SubmitRequest};
use crate::daemon::views::{job_view, rfc3339};
use crate::daemon::{ApiError, Daemon, Inner, Peer, now_ms};
use crate::notify;
use crate::store::{JobRecord, NewJob};
use crate::users;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Json(req): Json<SubmitRequest>,
) -> Result<Json<JobView>, ApiError> {
    let request_id = request_id(&headers, req.request_id.as_deref())?;
    let singleton = req.singleton;
    let mut job = validate(&daemon, &peer, req)?;
    let view = {
        let mut inner = daemon.lock();
        // A repeat of a submission already queued (its answer was lost): the same job again.
        if let Some(key) = &request_id
            && let Some(id) = inner.jobs.store().job_for_request(peer.uid, key)?
        {
            let record = match inner.jobs.get(id) {
                Some(live) => live.clone(),
                None => inner
                    .jobs
                    .store()
                    .get(id)?
                    .ok_or_else(|| ApiError::Internal(format!("job {id} vanished")))?,
            };
            let mut view = job_view(&record);
            view.reason = inner.jobs.reason_of(&record).map(|r| r.into_owned());
            if record.state() == baton_core::JobState::Queued && daemon.places_here() {
                let (position, start) = queue_outlook(&daemon, &inner, &record);
                view.queue_position = Some(position);
                view.predicted_start = start.map(rfc3339);
            }
            return Ok(Json(view));
        }
        daemon.check_queue_room(&inner, job.owner_uid, 1)?;
        daemon.check_budget(&inner, job.owner_uid, job.request.count > 0)?;
        for dep in &job.deps {
            if !inner.jobs.is_active(dep.job) && inner.jobs.store().get(dep.job)?.is_none() {
                let newest = inner.jobs.store().max_id()?;
                return Err(ApiError::BadRequest(format!(
                    "--after: job {} does not exist (the newest job is {newest})",
                    dep.job
                )));
            }
        }
        if singleton {
            // Slurm's `--dependency=singleton`: after every earlier job of this name and owner
            // that has not ended, whatever their results.
            let name = crate::store::default_name(&job);
            let earlier: Vec<JobId> = inner
                .jobs
                .active()
                .filter(|j| j.owner_uid == job.owner_uid && j.name == name)
                .map(|j| j.id)
                .collect();
            for id in earlier {
                if !job.deps.iter().any(|d| d.job == id) {
                    job.deps.push(Dependency {
                        job: id,
                        kind: DepKind::Any,
                    });
                }
            }
        }
        let record = inner.jobs.submit(&job, request_id.as_deref())?;
        daemon.metrics.job_submitted();
        let mut view = job_view(&record);
        // Under Slurm, Slurm's queue decides: baton's outlook would be a guess about another
        // scheduler (the job's reason says where Slurm has it once submitted).
        if daemon.places_here() {
            let (position, start) = queue_outlook(&daemon, &inner, &record);
            view.queue_position = Some(position);
            view.predicted_start = start.map(rfc3339);
        }
        view
    };
    daemon.wake();
    Ok(Json(view))
}

impl Daemon {
    /// A submission's request: its GPUs (memory without a count means one shared GPU), and its
    /// cores and memory or this daemon's defaults.
    pub(super) fn resource_request(
        &self,
        gpus: u32,
        gpu_mem: Option<u64>,
        cpus: Option<u32>,
        mem: Option<u64>,
    ) -> Result<ResourceRequest, ApiError> {
        let bad = |m: &str| Err(ApiError::BadRequest(m.to_string()));
        let request = match gpu_mem {
            Some(0) => return bad("--gpu-mem must be positive"),
            Some(mem) => ResourceRequest::shared(gpus.max(1), mem),
            None => ResourceRequest::whole(gpus),
        };
        if cpus == Some(0) {
            return bad("--cpus must be at least 1: every process needs a core to run on");
        }
        if mem == Some(0) {
            return bad("--mem must be positive (leave it out to reserve no memory)");
        }
        let host = &self.config.host;
        Ok(request.with_host(
            cpus.unwrap_or(host.default_cpus),
            mem.unwrap_or(host.default_mem),
        ))
    }

    /// What to do about a machine where no GPU driver was found: simulated GPUs, set where a
    /// daemon started by `baton submit` also finds them.
    pub(super) fn no_gpus_hint(&self) -> Option<String> {
        (self.gpus.is_empty() && self.probe.backend() == "none").then(|| {
            format!(
                "no GPU driver was found, so this daemon (pid {}) has no GPUs. To simulate 4: put \
                 `sim_gpus = 4` under `[daemon]` in {}, then run `baton shutdown` (the next \
                 `baton submit` starts the daemon again, with them); or `baton shutdown` and \
                 `baton serve --sim-gpus 4`",
                std::process::id(),
                self.config.home.join("config.toml").display()
            )
        })
    }
}

/// The submission's idempotency key, from its body or its `Idempotency-Key` header (they must
/// agree when both are given).
pub(super) fn request_id(
    headers: &HeaderMap,
    in_body: Option<&str>,
) -> Result<Option<String>, ApiError> {
    let in_header = match headers.get("idempotency-key") {
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::BadRequest("the Idempotency-Key header must be plain text".into())
        })?),
        None => None,
    };
    let key = match (in_body, in_header) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::BadRequest(format!(
                "request_id {a:?} and the Idempotency-Key header {b:?} differ; give one"
            )));
        }
        (key, None) | (None, key) => key,
        (Some(a), Some(_)) => Some(a),
    };
    match key {
        Some(k) if k.is_empty() || k.len() > 200 || !k.chars().all(|c| c.is_ascii_graphic()) => {
            Err(ApiError::BadRequest(format!(
                "--request-id {k:?}: use 1-200 printable ASCII characters without spaces"
            )))
        }
        key => Ok(key.map(str::to_string)),
    }
}

/// Where a job just queued stands: how many queued jobs go before it (higher priority, or the
/// same priority and earlier), and, when none does, the earliest moment the running jobs' time
/// limits guarantee room for it (now, if it fits now). With jobs ahead, or a running job without a
/// time limit in the way, there is no honest prediction.
pub(super) fn queue_outlook(
    daemon: &Daemon,
    inner: &Inner,
    job: &JobRecord,
) -> (usize, Option<i64>) {
    let ahead = inner
        .jobs
        .active()
        .filter(|j| {
            j.state() == baton_core::JobState::Queued
                && j.id != job.id
                && (j.priority > job.priority || (j.priority == job.priority && j.id < job.id))
        })
        .count();
    // A job that waits for another has no honest prediction until that one ends.
    let waits_on_deps = job.deps.iter().any(|d| {
        inner
            .jobs
            .get(d.job)
            .is_some_and(|dep| !dep.state().is_terminal())
    });
    // A job in a reservation starts within its window, as its note says; no bound here.
    if ahead > 0 || waits_on_deps || job.held_by().is_some() || job.reservation.is_some() {
        return (ahead, None);
    }
    let running: Vec<baton_core::RunningJob> = inner
        .jobs
        .active()
        .filter(|j| j.state() == baton_core::JobState::Running)
        .map(|j| baton_core::RunningJob {
            id: j.id,
            gpus: j.gpus().to_vec(),
            request: j.request,
            ends_by: j.ends_by(),
        })
        .collect();
    let now = now_ms();
    let mut held = daemon.machine.clone();
    for r in &running {
        held.occupy(&r.gpus, &r.request);
    }
    // Not before its `--begin`; and off the GPUs of the reservations it would run into.
    let not_before = job.begin_at.map_or(now, |t| t.max(now));
    let windows = daemon.windows(inner, now);
    if job.request.count > 0 {
        let ends_by = job.time_limit.map(|l| not_before.saturating_add(l));
        held.withhold(&baton_core::windows::kept_from(
            &windows, not_before, ends_by,
        ));
    }
    let fits_now = held.choose(&job.request).is_some();
    if fits_now {
        return (0, Some(not_before));
    }
    (
        0,
        baton_core::scheduler::earliest_start_beside(
            &daemon.machine,
            &running,
            &job.request,
            (&windows, now),
            job.time_limit,
        )
        .map(|t| t.max(not_before)),
    )
}

/// A submission checked and turned into the job to queue (also `resubmit`'s, from a stored
/// job's spec: one set of checks for both).
pub(super) fn validate(
    daemon: &Daemon,
    peer: &Peer,
    req: SubmitRequest,
) -> Result<NewJob, ApiError> {
    let bad = |m: String| Err(ApiError::BadRequest(m));
    if req.command.is_empty() || req.command[0].is_empty() {
        return bad(
            "no command given: put it after `--`, e.g. `baton submit --gpus 1 -- python train.py`"
                .into(),
        );
    }
    input::check_command(&req.command)
        .map_err(|e| ApiError::BadRequest(format!("command: {e}")))?;
    input::check_env(&req.env).map_err(|e| ApiError::BadRequest(format!("environment: {e}")))?;
    input::check_path(&req.cwd)
        .map_err(|e| ApiError::BadRequest(format!("working directory: {e}")))?;
    if !Path::new(&req.cwd).is_absolute() {
        return bad(format!(
            "the working directory must be an absolute path, not {:?}",
            req.cwd
        ));
    }
    check_dir(&req.cwd).map_err(|e| ApiError::BadRequest(format!("the working directory {e}")))?;
    if let Some(name) = &req.name
        && (name.is_empty() || name.len() > 200 || name.chars().any(char::is_control))
    {
        return bad("--name must be 1-200 printable characters".into());
    }
    if let Some(ms) = req.time_limit_ms {
        input::check_time_limit(ms).map_err(time_limit_error)?;
    }
    let request = daemon.resource_request(req.gpus, req.gpu_mem, req.cpus, req.mem)?;
    let gpus = &daemon.gpus;
    // Under Slurm the cluster's GPUs are Slurm's to judge: sbatch refuses what can never run,
    // and its message is passed on.
    let local = daemon.places_here();
    (if local {
        admission::check(&request, gpus, Some(&daemon.config.host.capacity))
    } else {
        Ok(())
    })
    .map_err(|e| match daemon.no_gpus_hint() {
        Some(hint) => ApiError::BadRequest(e.to_string()).with_hint(hint),
        None => ApiError::BadRequest(e.to_string()),
    })?;
    daemon.check_priority(peer, req.priority, "--priority")?;
    // A reservation is what its users were given: the caps on what they hold do not apply in
    // it, its own GPUs do.
    let reservation = match &req.reservation {
        Some(name) => Some(daemon.job_reservation(peer, name, &request)?),
        None => {
            daemon.check_caps(peer.uid, req.context.session().as_deref(), &request)?;
            None
        }
    };
    let max_retries = daemon.config.retries.max;
    if req.retries > max_retries {
        return bad(format!(
            "--retries {} is more than this daemon allows: at most {max_retries} (`[retries] max` \
             in config.toml)",
            req.retries
        ));
    }
    for key in req.tags.keys() {
        if key.is_empty() || key.contains('=') {
            return bad(format!("invalid tag key {key:?}: use --tag KEY=VALUE"));
        }
    }
    let mut deps: Vec<Dependency> = Vec::new();
    for (ids, kind) in [
        (&req.after, DepKind::Success),
        (&req.after_any, DepKind::Any),
        (&req.after_failed, DepKind::Failure),
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
    if let Some(path) = &req.stdin {
        input::check_path(path).map_err(|e| ApiError::BadRequest(format!("--stdin: {e}")))?;
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return bad(format!("--stdin {path} is not a regular file")),
            Err(e) => return bad(format!("--stdin {path}: {e}")),
        }
    }
    let stop_on = stop_on(&req.stop_on)?;
    let mut wake = baton_core::midrun::Milestones::parse(baton_core::midrun::AskedMilestones {
        wake_on: &req.wake_on,
        wake_when: &req.wake_when,
        note_when: &req.note_when,
        stop_when: &req.stop_when,
    })
    .map_err(ApiError::BadRequest)?;
    if let Some(every) = req.wake_every_ms {
        let least = daemon.config.min_wake_every;
        if every < least {
            return bad(format!(
                "--wake-every {}: shorter than this daemon allows ({}, `[midrun] \
                 min_wake_every`)",
                baton_core::units::format_duration(every),
                baton_core::units::format_duration(least)
            ));
        }
        wake.wake_every_ms = Some(every);
    }
    let owner = users::name_of(peer.uid);
    let (env, notify) =
        env_and_channels(daemon, peer, req.env, &req.notify, &req.context, &req.cwd)?;
    let session = req.context.session();
    let signal = match &req.signal {
        Some(text) => {
            let signal = baton_core::signal::parse_checkpoint(text)
                .map_err(|e| ApiError::BadRequest(format!("--signal {e}")))?;
            // Its time limit: its own, or its reservation's window.
            let limit = match (req.time_limit_ms, &reservation) {
                (Some(own), _) => Some(own),
                (None, Some(r)) => Some(r.end - now_ms()),
                (None, None) => None,
            };
            match limit {
                None => {
                    return bad(format!(
                        "--signal {text}: it comes before the time limit, and this job has \
                         none; give --time-limit too"
                    ));
                }
                Some(limit) if signal.lead_ms >= limit => {
                    return bad(format!(
                        "--signal {text}: {} s before a time limit of {} is before the job \
                         starts; give a shorter lead (SIG@SECS)",
                        signal.lead_ms / 1000,
                        baton_core::units::format_duration(limit)
                    ));
                }
                Some(_) => Some(signal),
            }
        }
        None => None,
    };
    Ok(NewJob {
        reservation,
        signal,
        begin_at: req.begin_at_ms,
        stdin: req.stdin,
        stop_on,
        wake,
        held_by: req.hold.then(|| owner.clone()),
        sweep: None,
        params: Vec::new(),
        notify,
        session,
        workflow_id: None,
        task: None,
        critical_path: 0,
        name: req.name,
        command: req.command,
        cwd: req.cwd,
        env,
        owner_uid: peer.uid,
        owner,
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

/// Refuses a working directory the job could not start in: missing, or not a directory. A job
/// refused now loses nothing; one queued with it would wait for its GPUs and then fail to start.
///
/// The daemon can only judge what it can see. In system mode it runs as root and the job runs as
/// its submitter, so a directory that exists but the submitter may not enter passes here and
/// still fails when the job starts (the job's report then says why). A directory removed
/// between now and the start fails the same way.
pub(super) fn check_dir(dir: &str) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!("{dir} is not a directory")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!("{dir} does not exist")),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(format!("{dir} is not a directory (a part of it is a file)"))
        }
        Err(e) => Err(format!("{dir} cannot be used: {e}")),
    }
}

/// The message for a time limit out of range, with the way to run longer.
fn time_limit_error(e: InputError) -> ApiError {
    let error = ApiError::BadRequest(format!("--time-limit: {e}"));
    match e {
        InputError::TimeLimitTooLong { .. } => {
            error.with_hint("a job submitted without --time-limit has no limit at all")
        }
        _ => error,
    }
}

/// A submission's job environment and report channels, for jobs and workflows alike. The inbox
/// token is the claude channel's secret alone: a job that prints its environment must not put it
/// in its report, the inbox file or a webhook body.
pub(super) fn env_and_channels(
    daemon: &Daemon,
    peer: &Peer,
    mut env: std::collections::BTreeMap<String, String>,
    specs: &[String],
    context: &crate::api::AgentContext,
    cwd: &str,
) -> Result<
    (
        std::collections::BTreeMap<String, String>,
        Vec<notify::Channel>,
    ),
    ApiError,
> {
    env.remove("CLAUDE_CODE_MESSAGING_TOKEN");
    let inbox = daemon.inbox_for(peer.uid, &env);
    let channels = notify::resolve(specs, context, &inbox, cwd)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((env, channels))
}

/// `--stop-on`: names of mid-run detectors, each known (400 naming those that exist).
pub(crate) fn stop_on(names: &[String]) -> Result<Vec<baton_core::midrun::Detector>, ApiError> {
    use baton_core::midrun::Detector;
    let mut out = Vec::new();
    for name in names {
        let Some(d) = Detector::parse(name.trim()) else {
            let known: Vec<&str> = Detector::ALL.iter().map(|d| d.as_str()).collect();
            return Err(ApiError::BadRequest(format!(
                "--stop-on {name:?}: no such detector (there are: {})",
                known.join(", ")
            )));
        };
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}
