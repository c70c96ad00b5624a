//! `GET /v1/jobs`: the named jobs, or the queue (active and recently ended, or all).

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Query, State};
use baton_core::JobId;

use crate::api::{JobView, ListQuery};
use crate::daemon::views::shown_view;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Vec<JobView>>, ApiError> {
    let ids = parse_ids(query.ids.as_deref().unwrap_or(""))?;
    if !ids.is_empty() {
        return Ok(Json(daemon.views(&peer, &ids)?));
    }
    let inner = daemon.lock();
    if let Some(session) = &query.session {
        // `status --mine`: this session's jobs, live copies for the active ones.
        let since = if query.all {
            i64::MIN
        } else {
            now_ms() - daemon.config.recent_ms
        };
        let session = (session != "none").then_some(session.as_str());
        let mut jobs = inner.jobs.store().by_session(session, since)?;
        // A session is one user's: another user's pane `%1` is not this one.
        jobs.retain(|j| j.owner_uid == peer.uid);
        for job in jobs.iter_mut() {
            if let Some(live) = inner.jobs.get(job.id) {
                *job = live.clone();
            }
        }
        return Ok(Json(
            jobs.iter()
                .map(|j| shown_view(&inner.jobs, &peer, j))
                .collect(),
        ));
    }
    let mut jobs = if query.all {
        inner.jobs.store().all()?
    } else {
        inner
            .jobs
            .store()
            .ended_since(now_ms() - daemon.config.recent_ms)?
    };
    if !query.all {
        jobs.extend(inner.jobs.active().cloned());
    } else {
        // The live copies carry the scheduler's current reasons.
        for job in jobs.iter_mut() {
            if let Some(live) = inner.jobs.get(job.id) {
                *job = live.clone();
            }
        }
    }
    jobs.sort_by_key(|j| j.id);
    let predicted = daemon.predicted_starts(&inner);
    Ok(Json(
        jobs.iter()
            .map(|j| {
                let mut view = shown_view(&inner.jobs, &peer, j);
                if let Some(Some(at)) = predicted.get(&j.id) {
                    view.predicted_start = Some(crate::daemon::views::rfc3339(*at));
                }
                view
            })
            .collect(),
    ))
}

pub fn parse_ids(text: &str) -> Result<Vec<JobId>, ApiError> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse::<u64>()
                .map(JobId)
                .map_err(|_| ApiError::BadRequest(format!("invalid job id {s:?}")))
        })
        .collect()
}

impl Daemon {
    /// The named jobs as `peer` may see them, in the order asked; an unknown id is an error
    /// that says what exists.
    pub(crate) fn views(&self, peer: &Peer, ids: &[JobId]) -> Result<Vec<JobView>, ApiError> {
        let mut out = Vec::with_capacity(ids.len());
        let inner = self.lock();
        for id in ids {
            match inner.jobs.lookup(*id)? {
                Some(job) => out.push(shown_view(&inner.jobs, peer, &job)),
                None => {
                    let newest = inner.jobs.store().max_id()?;
                    return Err(ApiError::NotFound(if newest == 0 {
                        format!("job {id} does not exist (no jobs have been submitted yet)")
                    } else {
                        format!("job {id} does not exist (job ids go from 1 to {newest})")
                    }));
                }
            }
        }
        Ok(out)
    }
}
