//! `/v1/sweeps`: a sweep or array queued as one unit (`POST`), listed (`GET`), and one sweep's
//! status with its comparison so far, its cancel, and a wait for its end. Each run is checked
//! as a submission is (`submit::validate`, once for the template) and its command filled in
//! before anything is queued: a typo in a placeholder queues nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{ConnectInfo, Path as UrlPath, State};
use axum::http::HeaderMap;
use baton_core::sweep::{self, Params};
use baton_core::{JobId, JobState, input};

use super::cancel::cancel_jobs;
use super::submit::{request_id, validate};
use crate::api::{CancelRequest, SweepRequest, SweepRuns, SweepView, SweepWaitRequest};
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, Peer};
use crate::store::{JobRecord, NewSweep, OnFailure, SweepRecord, default_name};

/// How many sweeps `GET /v1/sweeps` lists, newest first.
const LISTED: usize = 200;

pub async fn submit(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    Json(req): Json<SweepRequest>,
) -> Result<Json<SweepView>, ApiError> {
    let bad = |m: String| ApiError::BadRequest(m);
    let request_id = request_id(&headers, req.job.request_id.as_deref())?;
    if req.job.singleton {
        return Err(bad(
            "--singleton does not apply to a sweep: its runs are one unit (use --max-parallel 1 \
             to run them one at a time)"
                .into(),
        ));
    }
    let max = daemon.config.sweeps.max_runs;
    let expanded = expand(&req.runs, max).map_err(|e| bad(e.to_string()))?;
    let max_parallel = match (expanded.cap, req.max_parallel) {
        (_, Some(0)) => return Err(bad("--max-parallel must be at least 1".into())),
        (Some(a), Some(b)) if a != b => {
            return Err(bad(format!(
                "--array ...%{a} and --max-parallel {b} disagree; give one"
            )));
        }
        (a, b) => a.or(b),
    };
    if let Some(rank_by) = &req.rank_by {
        sweep::compare::parse_rank_by(rank_by).map_err(|e| bad(e.to_string()))?;
    }
    let on_failure = match req.on_failure.as_deref() {
        None => OnFailure::Continue,
        Some(text) => OnFailure::parse(text).ok_or_else(|| {
            bad(format!(
                "--on-failure {text:?}: use continue (the default) or stop"
            ))
        })?,
    };
    let template = validate(&daemon, &peer, req.job)?;
    let base = default_name(&template);
    let mut runs = Vec::with_capacity(expanded.runs.len());
    for (index, params) in expanded.runs {
        // `{index}` is each run's index, unless the sweep has a parameter of that name.
        let mut placeholders = params.clone();
        if !placeholders.iter().any(|(name, _)| name == "index") {
            placeholders.push(("index".into(), index.to_string()));
        }
        let command =
            sweep::fill(&template.command, &placeholders).map_err(|e| bad(e.to_string()))?;
        input::check_command(&command).map_err(|e| bad(format!("run {index}'s command: {e}")))?;
        let mut job = template.clone();
        job.command = command;
        job.name = Some(format!("{base}[{index}]"));
        runs.push((job, index, params));
    }
    let name = template
        .name
        .clone()
        .unwrap_or_else(|| match expanded.kind {
            "array" => base.clone(),
            _ => expanded.param_names.join(" x "),
        });
    let queued = {
        let mut inner = daemon.lock();
        // A repeat of a submission already queued (its answer was lost): the same sweep again.
        let repeat = match &request_id {
            Some(key) => inner.jobs.store().sweep_for_request(peer.uid, key)?,
            None => None,
        };
        if let Some(id) = repeat {
            Err(id)
        } else {
            daemon.check_queue_room(&inner, template.owner_uid, runs.len())?;
            daemon.check_budget(&inner, template.owner_uid, template.request.count > 0)?;
            for dep in &template.deps {
                if !inner.jobs.is_active(dep.job) && inner.jobs.store().get(dep.job)?.is_none() {
                    let newest = inner.jobs.store().max_id()?;
                    return Err(bad(format!(
                        "--after: job {} does not exist (the newest job is {newest})",
                        dep.job
                    )));
                }
            }
            let new = NewSweep {
                name,
                kind: expanded.kind.to_string(),
                param_names: expanded.param_names,
                owner_uid: template.owner_uid,
                owner: template.owner.clone(),
                submitted_at: template.submitted_at,
                max_parallel,
                rank_by: req.rank_by,
                notify_each: req.notify_each,
                on_failure,
                notify: template.notify.clone(),
                runs,
            };
            let (record, ids) = inner.jobs.submit_sweep(new, request_id.as_deref())?;
            for _ in &ids {
                daemon.metrics.job_submitted();
            }
            tracing::info!(sweep = record.id, runs = ids.len(), "sweep queued");
            Ok(view_from(
                &record,
                ids.iter().map(|&id| (id, JobState::Queued)),
            ))
        }
    };
    match queued {
        Ok(view) => {
            daemon.notify_changed();
            daemon.wake();
            Ok(Json(view))
        }
        Err(repeat) => Ok(Json(daemon.sweep_view(&peer, repeat, false).await?)),
    }
}

pub async fn list(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Json<Vec<SweepView>>, ApiError> {
    let records = daemon.lock().jobs.store().sweeps(LISTED)?;
    let mut out = Vec::new();
    for record in records {
        if !may_read(&peer, &record) {
            continue;
        }
        let jobs = daemon.sweep_jobs(record.id)?;
        out.push(view_of(&record, &jobs));
    }
    Ok(Json(out))
}

pub async fn status(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<u64>,
) -> Result<Json<SweepView>, ApiError> {
    Ok(Json(daemon.sweep_view(&peer, id, true).await?))
}

pub async fn cancel(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<u64>,
    Json(req): Json<CancelRequest>,
) -> Result<Json<SweepView>, ApiError> {
    let record = daemon.readable_sweep(&peer, id)?;
    let open: Vec<JobId> = daemon
        .sweep_jobs(record.id)?
        .iter()
        .filter(|j| !j.state().is_terminal())
        .map(|j| j.id)
        .collect();
    if !open.is_empty() {
        cancel_jobs(&daemon, &peer, &open, req.force, req.session.as_deref())?;
    }
    Ok(Json(daemon.sweep_view(&peer, id, false).await?))
}

pub async fn wait(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<u64>,
    Json(req): Json<SweepWaitRequest>,
) -> Result<Json<SweepView>, ApiError> {
    daemon.readable_sweep(&peer, id)?;
    let mut changed = daemon.changed.subscribe();
    let mut shutting_down = daemon.shutting_down.subscribe();
    let deadline = req
        .timeout_ms
        .map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms.max(0) as u64));
    loop {
        changed.borrow_and_update();
        let ended = daemon.lock().jobs.store().sweep_ended(id)?.unwrap_or(false);
        if ended {
            return Ok(Json(daemon.sweep_view(&peer, id, true).await?));
        }
        let timeout = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let timed_out = tokio::select! {
            _ = changed.changed() => false,
            // Not the sweep as it stands: a caller told "not ended" would take it for its own
            // timeout. Like `wait`, it is told to ask again once the daemon is back.
            _ = shutting_down.wait_for(|s| *s) => {
                return Err(ApiError::Unavailable(
                    "the daemon is shutting down; wait again once it is back".into(),
                ));
            }
            _ = timeout => true,
        };
        if timed_out {
            return Ok(Json(daemon.sweep_view(&peer, id, false).await?));
        }
    }
}

/// A sweep's runs as submitted: their indices and parameters, how its parameters are named,
/// and the `%K` of an array.
struct Expanded {
    kind: &'static str,
    param_names: Vec<String>,
    runs: Vec<(u32, Params)>,
    cap: Option<u32>,
}

fn expand(runs: &SweepRuns, max: u64) -> Result<Expanded, sweep::SweepError> {
    match runs {
        SweepRuns::Array { spec } => {
            let array = sweep::parse_array(spec, max)?;
            Ok(Expanded {
                kind: "array",
                param_names: vec!["index".into()],
                runs: array
                    .indices
                    .iter()
                    .map(|&i| (i, vec![("index".to_string(), i.to_string())]))
                    .collect(),
                cap: array.max_parallel,
            })
        }
        SweepRuns::Grid { axes } => {
            let runs = sweep::product(axes, max)?;
            Ok(Expanded {
                kind: "sweep",
                param_names: axes.iter().map(|(name, _)| name.clone()).collect(),
                runs: (0..).zip(runs).collect(),
                cap: None,
            })
        }
        SweepRuns::Runs { runs, .. } => {
            if runs.is_empty() {
                return Err(sweep::SweepError::Empty);
            }
            if runs.len() as u64 > max {
                return Err(sweep::SweepError::TooMany {
                    runs: runs.len() as u64,
                    max,
                });
            }
            let mut param_names: Vec<String> = Vec::new();
            for run in runs {
                for (name, _) in run {
                    sweep::check_name(name)?;
                    if !param_names.contains(name) {
                        param_names.push(name.clone());
                    }
                }
            }
            Ok(Expanded {
                kind: "sweep",
                param_names,
                runs: (0..).zip(runs.iter().cloned()).collect(),
                cap: None,
            })
        }
    }
}

/// Only a sweep's owner (and root and the admins) sees it: its runs' commands and output are
/// theirs.
fn may_read(peer: &Peer, sweep: &SweepRecord) -> bool {
    peer.reads_everything() || peer.uid == sweep.owner_uid
}

fn view_of(record: &SweepRecord, jobs: &[JobRecord]) -> SweepView {
    view_from(record, jobs.iter().map(|j| (j.id, j.state())))
}

/// The view of a sweep whose runs are these jobs in these states.
fn view_from(record: &SweepRecord, runs: impl Iterator<Item = (JobId, JobState)>) -> SweepView {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut jobs = Vec::new();
    for (id, state) in runs {
        *counts.entry(state.as_str().to_string()).or_default() += 1;
        jobs.push(id.0);
    }
    SweepView {
        id: record.id,
        name: record.name.clone(),
        kind: record.kind.clone(),
        state: record.state.as_str().to_string(),
        owner: record.owner.clone(),
        params: record.param_names.clone(),
        runs: record.runs,
        counts,
        jobs,
        max_parallel: record.max_parallel,
        rank_by: record.rank_by.clone(),
        notify_each: record.notify_each,
        on_failure: record.on_failure.as_str().to_string(),
        notify: record.notify.iter().map(|c| c.public_spec()).collect(),
        wakes_caller: record.notify.iter().any(|c| c.can_wake()),
        submitted_at: rfc3339(record.submitted_at),
        ended_at: record.ended_at.map(rfc3339),
        alerted_at: record.alerted_at.map(rfc3339),
        comparison: None,
        markdown: None,
    }
}

impl Daemon {
    /// A sweep the caller may read, or why not.
    fn readable_sweep(&self, peer: &Peer, id: u64) -> Result<SweepRecord, ApiError> {
        let record = {
            let inner = self.lock();
            match inner.jobs.sweep(id) {
                Some(s) => s.clone(),
                None => inner
                    .jobs
                    .store()
                    .sweep(id)?
                    .ok_or_else(|| ApiError::NotFound(format!("sweep {id} does not exist")))?,
            }
        };
        if !may_read(peer, &record) {
            return Err(ApiError::Forbidden(format!(
                "sweep {id} belongs to {}; you can see only your own sweeps",
                record.owner
            )));
        }
        Ok(record)
    }

    /// A sweep's runs without their environments, the live copies of those still active.
    fn sweep_jobs(&self, id: u64) -> Result<Vec<JobRecord>, ApiError> {
        let inner = self.lock();
        let mut jobs = inner.jobs.store().sweep_jobs_listed(id)?;
        let live: HashMap<JobId, &JobRecord> = jobs
            .iter()
            .filter_map(|j| inner.jobs.get(j.id).map(|l| (j.id, l)))
            .collect();
        let updated: Vec<JobRecord> = jobs
            .iter()
            .map(|j| live.get(&j.id).map_or_else(|| j.clone(), |l| l.listed()))
            .collect();
        jobs = updated;
        Ok(jobs)
    }

    /// The sweep as the API shows it; with `comparison`, every run's row and the markdown.
    pub(crate) async fn sweep_view(
        self: &Arc<Self>,
        peer: &Peer,
        id: u64,
        comparison: bool,
    ) -> Result<SweepView, ApiError> {
        let record = self.readable_sweep(peer, id)?;
        let jobs = self.sweep_jobs(id)?;
        let mut view = view_of(&record, &jobs);
        if comparison && let Some(built) = self.sweep_report(id).await {
            view.comparison = Some(built.report.clone());
            view.markdown = Some(built.markdown.clone());
        }
        Ok(view)
    }
}
