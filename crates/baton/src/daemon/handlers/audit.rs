//! `GET /v1/audit`: the waste rules' decisions and what came of them, oldest first. In system
//! mode a user sees the decisions about their own jobs; root sees everything, strangers included.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Query, State};

use baton_core::JobId;

use crate::api::{AuditView, SinceQuery};
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Query(q): Query<SinceQuery>,
) -> Result<Json<Vec<AuditView>>, ApiError> {
    let since = q.since_ms.map_or(0, |ms| now_ms() - ms.max(0));
    let sees_all = !daemon.config.system || peer.reads_everything() || peer.uid == daemon.uid;
    let uid = peer.uid;
    // On a read-only connection: the dashboard's overview asks on every refresh.
    let out = daemon
        .read(move |store| {
            let mut theirs: HashMap<JobId, bool> = HashMap::new();
            let mut out = Vec::new();
            for e in store.audit_since(since)? {
                if !sees_all {
                    let Some(job) = e.job else { continue };
                    let mine = match theirs.get(&job) {
                        Some(&mine) => mine,
                        None => {
                            let mine = store.get(job)?.is_some_and(|j| j.owner_uid == uid);
                            theirs.insert(job, mine);
                            mine
                        }
                    };
                    if !mine {
                        continue;
                    }
                }
                out.push(AuditView {
                    time: rfc3339(e.at),
                    rule: e.rule,
                    job_id: e.job.map(|j| j.0),
                    pid: e.pid,
                    gpu: e.gpu,
                    action: e.action,
                    outcome: e.outcome,
                    dry_run: e.dry_run,
                    message: e.message,
                    evidence: e.evidence,
                });
            }
            Ok(out)
        })
        .await?;
    Ok(Json(out))
}
