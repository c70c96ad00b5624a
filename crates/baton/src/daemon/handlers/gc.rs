//! `GET /v1/gc`: what retention would remove now (`baton gc --dry-run`); `POST /v1/gc`: remove
//! it now (`baton gc`). Retention is the daemon's own policy (`[retention]`), applied on its
//! schedule whoever asks; on a shared daemon only root and `[limits] admins` may run it early.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Query, State};

use crate::api::{GcQuery, GcReport};
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, Peer};
use crate::history::retention::Retention;

pub async fn dry_run(
    State(daemon): State<Arc<Daemon>>,
    Query(q): Query<GcQuery>,
) -> Result<Json<GcReport>, ApiError> {
    let windows = windows(&daemon, &q)?;
    run(daemon, true, windows).await
}

/// The windows of this pass: `[retention]`'s, or shorter this once.
fn windows(daemon: &Daemon, q: &GcQuery) -> Result<Option<Retention>, ApiError> {
    let Some(text) = &q.older_than else {
        return Ok(None);
    };
    let ms = crate::history::retention::parse_window(text)
        .map_err(|e| ApiError::BadRequest(format!("older_than: {e}")))?;
    let r = daemon.config.retention;
    Ok(Some(Retention {
        jobs: ms.min(r.jobs),
        outputs: ms.min(r.outputs),
    }))
}

pub async fn now(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Query(q): Query<GcQuery>,
) -> Result<Json<GcReport>, ApiError> {
    let windows = windows(&daemon, &q)?;
    let admin = || {
        let name = crate::users::name_of(peer.uid);
        daemon.config.limits.admins.contains(&name)
    };
    if daemon.config.system && !peer.is_root() && !admin() {
        return Err(ApiError::Forbidden(
            "only root and [limits] admins may run retention early on a shared daemon".into(),
        )
        .with_hint(
            "`baton gc --dry-run` shows what it would remove; the daemon removes it when due",
        ));
    }
    run(daemon, false, windows).await
}

async fn run(
    daemon: Arc<Daemon>,
    dry_run: bool,
    windows: Option<Retention>,
) -> Result<Json<GcReport>, ApiError> {
    let me = daemon.clone();
    let swept = daemon
        .tasks
        .spawn_blocking(move || me.sweep(dry_run, windows))
        .await
        .map_err(|e| ApiError::Internal(format!("the retention pass failed: {e}")))??;
    let r = windows.unwrap_or(daemon.config.retention);
    Ok(Json(GcReport {
        dry_run,
        keep_jobs: window(r.jobs),
        keep_outputs: window(r.outputs),
        jobs: swept.removed.jobs,
        events: swept.removed.events,
        deliveries: swept.removed.deliveries,
        gpu_usage_rows: swept.removed.gpu_usage,
        kept_back: swept.kept_back,
        files: swept.files,
        bytes: swept.bytes,
        workflows: swept.workflows,
        next_due: rfc3339(swept.next_due),
    }))
}

/// A retention window as config.toml would say it: `90d`, else `36h`, `90s`.
fn window(ms: baton_core::Millis) -> String {
    const DAY: baton_core::Millis = 86_400_000;
    if ms >= DAY && ms.rem_euclid(DAY) == 0 {
        format!("{}d", ms / DAY)
    } else {
        baton_core::units::duration_text(ms)
    }
}
