//! `POST /v1/resolve` and `POST /v1/select`: a user's jobs by name, glob or filter. Names are
//! looked up among the caller's own jobs only: `wait train-lr3` means mine, never another
//! user's job of that name. A plain name is the newest job that has it; a glob names every
//! match where the command takes several (`cancel sweep-*`), and must name exactly one where
//! it takes one, else the error lists the candidates.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use baton_core::JobId;

use crate::api::{JobsResponse, ResolveRequest, ResolveResponse, SelectRequest};
use crate::daemon::{ApiError, Daemon, Peer};
use crate::store::{NamedJob, is_glob};

/// The most jobs one glob may name.
const MOST: usize = 10_000;

pub async fn resolve(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<ResolveRequest>,
) -> Result<Json<ResolveResponse>, ApiError> {
    let mut ids: Vec<u64> = Vec::new();
    for r in &req.refs {
        if let Ok(id) = r.parse::<u64>() {
            ids.push(id);
            continue;
        }
        if r.is_empty() {
            return Err(ApiError::BadRequest("an empty job name".into()));
        }
        let found = {
            let inner = daemon.lock();
            inner
                .jobs
                .store()
                .jobs_named(peer.uid, r, req.active_only, MOST + 1)?
        };
        let glob = is_glob(r);
        match found.as_slice() {
            [] => {
                let which = if req.active_only {
                    "queued or running "
                } else {
                    ""
                };
                return Err(
                    ApiError::NotFound(format!("no {which}job of yours is named {r:?}"))
                        .with_hint("`baton status --all` lists your jobs with their names"),
                );
            }
            [one, ..] if !glob => ids.push(one.id.0),
            many if many.len() > MOST => {
                return Err(ApiError::BadRequest(format!(
                    "{r:?} names more than {MOST} jobs; narrow it"
                )));
            }
            [one] => ids.push(one.id.0),
            many if req.many => ids.extend(many.iter().map(|j| j.id.0)),
            many => return Err(ApiError::Conflict(ambiguous(r, many))),
        }
    }
    let mut seen = std::collections::HashSet::new();
    ids.retain(|id| seen.insert(*id));
    Ok(Json(ResolveResponse { ids }))
}

/// `"train-*" names 3 of your jobs: 12 train-b (running), 9 train-a (failed), …; give one id`.
fn ambiguous(pattern: &str, jobs: &[NamedJob]) -> String {
    const SHOWN: usize = 10;
    let listed: Vec<String> = jobs
        .iter()
        .take(SHOWN)
        .map(|j| format!("{} {} ({})", j.id, j.name, j.state))
        .collect();
    let more = if jobs.len() > SHOWN {
        format!(", and {} more", jobs.len() - SHOWN)
    } else {
        String::new()
    };
    format!(
        "{pattern:?} names {} of your jobs: {}{more}; give one id",
        jobs.len(),
        listed.join(", ")
    )
}

pub async fn select(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<SelectRequest>,
) -> Result<Json<JobsResponse>, ApiError> {
    if let Some(state) = req.state
        && state.is_terminal()
    {
        return Err(ApiError::BadRequest(format!(
            "--state {state}: only queued and running jobs can be selected here"
        )));
    }
    let ids: Vec<JobId> = {
        let inner = daemon.lock();
        let mut ids: Vec<JobId> = match &req.name {
            Some(name) => inner
                .jobs
                .store()
                .jobs_named(peer.uid, name, true, usize::MAX >> 1)?
                .into_iter()
                .map(|j| j.id)
                .collect(),
            None => inner
                .jobs
                .active()
                .filter(|j| j.owner_uid == peer.uid)
                .map(|j| j.id)
                .collect(),
        };
        ids.retain(|id| {
            inner.jobs.get(*id).is_some_and(|j| {
                j.owner_uid == peer.uid
                    && req.state.is_none_or(|s| j.state() == s)
                    && req
                        .session
                        .as_deref()
                        .is_none_or(|s| j.session.as_deref().unwrap_or("none") == s)
            })
        });
        ids.sort();
        ids
    };
    let jobs = daemon.views(&peer, &ids)?;
    Ok(Json(JobsResponse { jobs }))
}
