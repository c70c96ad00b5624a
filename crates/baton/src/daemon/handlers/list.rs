//! `GET /v1/jobs`: the named jobs, the bounded default view (active jobs and the last few
//! ended), or every job a filter selects, one page at a time, newest first.
//!
//! Listings read the store on a read-only connection of their own (`Daemon::read`), never
//! under the daemon's lock. Only the active jobs are then looked up in the job table, in one
//! short hold of the lock: their live copies carry what is shown but not stored (why a queued
//! job waits in the latest pass, an end waiting to be recorded) and the queue's predicted
//! starts (bounds, from time limits) and expected ones (estimates, from the ETAs of the running
//! jobs the viewer may see the progress of). Ended jobs never change, so what the reader says of them is the whole story.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use baton_core::model::RunningJob;
use baton_core::{JobId, JobState, Millis};

use crate::api::{JobView, ListQuery, MORE_HEADER, NEXT_HEADER, PAGE_MAX};
use crate::daemon::views::{alert_views, job_view_for, rfc3339, shown_view};
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::history::Filter;
use crate::store::JobRecord;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let ids = parse_ids(query.ids.as_deref().unwrap_or(""))?;
    if !ids.is_empty() {
        return Ok(json_body(&daemon.views(&peer, &ids)?));
    }
    // All of it off the async workers: the read, the short look at the active jobs, and the
    // JSON of up to a page of jobs, so that listings never hold up a submission's answer.
    let me = daemon.clone();
    daemon
        .blocking(move || {
            let listing = me.listing(&peer, &query, false)?;
            let views = me.shown(&peer, &listing.jobs);
            Ok(paged(json_body(&views), &listing))
        })
        .await
}

/// A JSON answer, serialised where it is made.
pub(crate) fn json_body<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(bytes) => (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response(),
        Err(e) => ApiError::Internal(format!("cannot serialise the answer: {e}")).into_response(),
    }
}

/// Jobs read for a listing, and where it stands among all that match.
pub(crate) struct Listing {
    pub jobs: Vec<JobRecord>,
    pub next_before: Option<u64>,
    pub more_ended: Option<u64>,
}

/// An answer with the listing's paging headers.
pub(crate) fn paged(body: impl IntoResponse, listing: &Listing) -> Response {
    let mut resp = body.into_response();
    let headers = resp.headers_mut();
    for (name, value) in [
        (NEXT_HEADER, listing.next_before),
        (MORE_HEADER, listing.more_ended),
    ] {
        if let Some(v) = value {
            headers.insert(HeaderName::from_static(name), HeaderValue::from(v));
        }
    }
    resp
}

/// The filter a query asks for, checked (400 with the reason).
pub(crate) fn filter_of(query: &ListQuery, peer: &Peer) -> Result<Filter, ApiError> {
    let list = |v: &Option<String>| v.iter().cloned().collect::<Vec<_>>();
    // `status --mine`: a session is one user's (another user's pane `%1` is not this one).
    let session = query
        .session
        .as_ref()
        .map(|s| (s != "none").then(|| s.clone()));
    let mut filter = crate::history::filter::build(
        &list(&query.state),
        query.name.as_deref(),
        &list(&query.owner),
        query.since.as_deref(),
        query.until.as_deref(),
        query.workflow,
        session,
        now_ms(),
    )
    .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    if filter.session.is_some() {
        filter.uid = Some(peer.uid);
    }
    Ok(filter)
}

impl Daemon {
    /// The jobs a listing shows: with filters or `all` (or `paged`), one page of all that
    /// match; else the default view.
    pub(crate) fn listing(
        &self,
        peer: &Peer,
        query: &ListQuery,
        paged: bool,
    ) -> Result<Listing, ApiError> {
        let filter = filter_of(query, peer)?;
        if paged || query.all || filter.narrows() {
            let limit = query.limit.unwrap_or(PAGE_MAX).clamp(1, PAGE_MAX);
            let before = query.before.map(JobId);
            let mut jobs = self
                .readers
                .with(|s| s.list_jobs(&filter, before, limit + 1))?;
            let next_before = (jobs.len() > limit).then(|| {
                jobs.truncate(limit);
                jobs.last().map_or(0, |j| j.id.0)
            });
            return Ok(Listing {
                jobs,
                next_before,
                more_ended: None,
            });
        }
        // The default view: every active job (from memory, below), and the last few ended.
        let since = now_ms() - self.config.recent_ms;
        let shown = self.config.recent_shown;
        let f = filter.clone();
        // Every ended job is counted as they end; a session's, by its index.
        let counted = f
            .session
            .is_none()
            .then(|| self.ended_jobs.load(std::sync::atomic::Ordering::Relaxed));
        let (mut jobs, ended) = self.readers.with(|s| {
            let last = s.last_ended(&f, since, shown)?;
            let ended = match counted {
                Some(n) => n,
                None => s.count_ended(&f)?,
            };
            Ok((last, ended))
        })?;
        let more = ended.saturating_sub(jobs.len() as u64);
        {
            let inner = self.lock();
            let matches = |j: &JobRecord| {
                filter.uid.is_none_or(|uid| uid == j.owner_uid)
                    && filter.session.as_ref().is_none_or(|s| *s == j.session)
            };
            // An ended job the reader read, though, is not shown twice.
            jobs.retain(|j| !inner.jobs.is_active(j.id));
            jobs.extend(
                inner
                    .jobs
                    .active()
                    .filter(|j| matches(j))
                    .map(JobRecord::listed),
            );
        }
        jobs.sort_by_key(|j| j.id);
        Ok(Listing {
            jobs,
            next_before: None,
            more_ended: Some(more),
        })
    }

    /// The jobs as `peer` may see them. The active ones are shown as the job table has them
    /// (live reasons, predicted starts), in one short hold of the lock.
    pub(crate) fn shown(&self, peer: &Peer, jobs: &[JobRecord]) -> Vec<JobView> {
        let mut views: Vec<JobView> = jobs.iter().map(|j| job_view_for(peer, j)).collect();
        let active: Vec<usize> = (0..jobs.len())
            .filter(|&i| !jobs[i].state().is_terminal())
            .collect();
        if active.is_empty() {
            return views;
        }
        let inner = self.lock();
        let queued = active.iter().any(|&i| {
            inner
                .jobs
                .get(jobs[i].id)
                .is_some_and(|j| j.state() == JobState::Queued)
        });
        // What the queue's outlook is computed from is copied under the lock; the outlook
        // itself is computed after it.
        let input = queued
            .then(|| crate::daemon::scheduling_input(&inner, &self.gpus).ok())
            .flatten();
        // When the running jobs whose progress this viewer may read expect to end (their ETA):
        // what refines the queue's outlook into an estimate.
        let now = now_ms();
        let windows = self.windows(&inner, now);
        let etas: HashMap<JobId, Millis> = match &input {
            Some((running, _, _)) => running
                .iter()
                .filter_map(|r| {
                    let job = inner.jobs.get(r.id).filter(|j| peer.may_read(j))?;
                    Some((r.id, now + self.progress_view(job)?.remaining_ms?))
                })
                .collect(),
            None => HashMap::new(),
        };
        for &i in &active {
            if let Some(live) = inner.jobs.get(jobs[i].id) {
                views[i] = shown_view(&inner.jobs, peer, live);
                // Read from its output: only whoever may read that sees it.
                if peer.may_read(live) {
                    views[i].progress = self.progress_view(live);
                }
            } // else it ended since the reader looked: as read
        }
        drop(inner);
        if let Some((running, pending, _)) = input {
            let predicted = baton_core::scheduler::predicted_starts(
                &self.machine,
                &running,
                &pending,
                now,
                500,
                &windows,
            );
            let expected = (!etas.is_empty()).then(|| {
                let by_eta: Vec<RunningJob> = running
                    .iter()
                    .map(|r| RunningJob {
                        ends_by: match (r.ends_by, etas.get(&r.id)) {
                            (Some(limit), Some(&eta)) => Some(limit.min(eta)),
                            (limit, eta) => limit.or(eta.copied()),
                        },
                        ..r.clone()
                    })
                    .collect();
                baton_core::scheduler::predicted_starts(
                    &self.machine,
                    &by_eta,
                    &pending,
                    now,
                    500,
                    &windows,
                )
            });
            for i in active {
                let bound = predicted.get(&jobs[i].id).copied().flatten();
                if let Some(at) = bound {
                    views[i].predicted_start = Some(rfc3339(at));
                }
                let estimate = expected
                    .as_ref()
                    .and_then(|e| e.get(&jobs[i].id).copied().flatten());
                if let Some(at) = estimate.filter(|at| bound.is_none_or(|b| at < &b)) {
                    views[i].expected_start = Some(rfc3339(at));
                }
            }
        }
        views
    }

    /// The named jobs as `peer` may see them, in the order asked; an unknown id is an error
    /// that says what exists.
    pub(crate) fn views(&self, peer: &Peer, ids: &[JobId]) -> Result<Vec<JobView>, ApiError> {
        let mut out = Vec::with_capacity(ids.len());
        let inner = self.lock();
        for id in ids {
            match inner.jobs.lookup(*id)? {
                Some(job) => {
                    let mut view = shown_view(&inner.jobs, peer, &job);
                    if peer.may_read(&job) {
                        view.progress = self.progress_view(&job);
                        view.alerts = alert_views(inner.jobs.store(), &self.files(*id), *id)?;
                    }
                    out.push(view);
                }
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
