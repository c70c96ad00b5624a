//! `GET /v1/workflows`: one row per workflow, oldest first (`baton workflow list`): its id,
//! name, state, how many of its tasks have ended of how many, when it was submitted and ended,
//! and its owner. Another user's workflow on a shared daemon is listed too, as `status` lists
//! another user's jobs: its name and progress are not private, its source file (shown only by
//! `workflow status`) is, and the row is marked `private`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};

use crate::api::WorkflowRow;
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, Peer};
use crate::store::WorkflowRecord;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Result<Json<Vec<WorkflowRow>>, ApiError> {
    // On a read-only connection: the overview asks on every refresh.
    let rows = daemon.read(|store| store.workflow_rows()).await?;
    Ok(Json(rows_for(&peer, rows)))
}

/// The unfinished workflows and the `ended` newest that ended, as `handle` lists them (the
/// dashboard's overview).
pub(crate) async fn recent(
    daemon: &Arc<Daemon>,
    peer: &Peer,
    ended: u32,
) -> Result<Vec<WorkflowRow>, ApiError> {
    let rows = daemon
        .read(move |store| store.workflow_rows_recent(ended))
        .await?;
    Ok(rows_for(peer, rows))
}

fn rows_for(peer: &Peer, rows: Vec<(WorkflowRecord, u32, u32)>) -> Vec<WorkflowRow> {
    rows.into_iter()
        .map(|(wf, tasks_done, tasks_total)| WorkflowRow {
            id: wf.id,
            name: wf.name,
            state: wf.state,
            atomic: wf.atomic,
            owner: wf.owner,
            submitted_at: rfc3339(wf.submitted_at),
            ended_at: wf.ended_at.map(rfc3339),
            tasks_done,
            tasks_total,
            private: !(peer.reads_everything() || peer.uid == wf.owner_uid),
        })
        .collect()
}
