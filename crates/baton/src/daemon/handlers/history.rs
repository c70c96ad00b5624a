//! `GET /v1/history`: one row per job, sacct-like (`baton history`): its state and exit, how
//! long it waited and ran, its GPUs and how well it used them (the mean utilisation of its
//! last attempt's GPU samples). The filters and paging of `GET /v1/jobs`, always paged (every
//! job, newest first); read on a reader connection, without the daemon's lock. Another
//! user's job shows without its GPU use, as it shows without its command in `status`.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::response::Response;

use crate::api::{HistoryView, ListQuery};
use crate::daemon::handlers::list::{Listing, json_body, paged};
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::store::JobRecord;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let me = daemon.clone();
    daemon
        .blocking(move || {
            let (rows, listing) = me.history_rows(&peer, &query)?;
            Ok(paged(json_body(&rows), &listing))
        })
        .await
}

impl Daemon {
    /// The history rows `query` selects for `peer`, and the listing they come from (its
    /// paging). Reads the store: call it off the async workers (`Daemon::blocking`).
    pub(crate) fn history_rows(
        &self,
        peer: &Peer,
        query: &ListQuery,
    ) -> Result<(Vec<HistoryView>, Listing), ApiError> {
        let listing = self.listing(peer, query, true)?;
        let mine: Vec<(baton_core::JobId, u32)> = listing
            .jobs
            .iter()
            .filter(|j| peer.may_read(j) && !j.gpus().is_empty())
            .map(|j| (j.id, j.attempt()))
            .collect();
        let means = self.readers.with(|s| s.gpu_means(&mine))?;
        let now = now_ms();
        let rows = listing
            .jobs
            .iter()
            .map(|j| {
                let mut row = row_of(j, now);
                row.gpu_util_pct = means.get(&j.id).map(|m| (m * 10.0).round() / 10.0);
                row.private = !peer.may_read(j);
                row
            })
            .collect();
        Ok((rows, listing))
    }
}

/// A job's history row, its GPU use left to the caller.
fn row_of(job: &JobRecord, now: baton_core::Millis) -> HistoryView {
    let ended = job.ended_at();
    let started = job.started_at();
    HistoryView {
        id: job.id.0,
        name: job.name.clone(),
        state: job.state(),
        exit_code: job.exit_code(),
        signal: job.signal(),
        owner: job.owner.clone(),
        submitted_at: rfc3339(job.submitted_at),
        started_at: started.map(rfc3339),
        ended_at: ended.map(rfc3339),
        wait_ms: (started.or(ended).unwrap_or(now) - job.submitted_at).max(0),
        run_ms: started.map(|s| (ended.unwrap_or(now) - s).max(0)),
        gpus_requested: job.request.count,
        gpu_mem: job.request.mem_per_gpu,
        gpus: job.gpus().to_vec(),
        gpu_util_pct: None,
        attempt: job.attempt(),
        workflow_id: job.workflow_id,
        private: false,
    }
}
