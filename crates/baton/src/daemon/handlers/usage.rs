//! `GET /v1/usage`: where each user with active jobs stands against `[limits]` (issue 19), the
//! caller always among them: the GPUs, CPUs and memory their jobs hold now, how many run and
//! wait, each cap, and their GPU-hours this period against their budget. What a user holds is
//! as public as the queue it is read from.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use baton_core::JobState;

use crate::api::UsageRow;
use crate::daemon::{Daemon, Peer};

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Json<Vec<UsageRow>> {
    let mut rows: BTreeMap<u32, UsageRow> = BTreeMap::new();
    let blank = |uid: u32, user: String| UsageRow {
        user,
        uid,
        gpus: 0,
        cpus: 0,
        mem: 0,
        running: 0,
        queued: 0,
        max_gpus: None,
        max_cpus: None,
        max_mem: None,
        max_queued: None,
        max_gpus_per_job: None,
        budget: None,
        group_budgets: Vec::new(),
    };
    {
        let inner = daemon.lock();
        for job in inner.jobs.active() {
            let row = rows
                .entry(job.owner_uid)
                .or_insert_with(|| blank(job.owner_uid, job.owner.clone()));
            let holds = match job.state() {
                JobState::Running => {
                    row.running += 1;
                    true
                }
                _ => {
                    row.queued += 1;
                    job.reserved().is_some()
                }
            };
            if holds {
                row.gpus += u64::from(job.request.count);
                row.cpus += u64::from(job.request.cpus);
                row.mem += job.request.mem;
            }
        }
    }
    rows.entry(peer.uid)
        .or_insert_with(|| blank(peer.uid, crate::users::name_of(peer.uid)));
    let mut out: Vec<UsageRow> = rows.into_values().collect();
    if daemon.config.limits.caps_anything() {
        let now = crate::clock::now_ms();
        let inner = daemon.lock();
        for row in &mut out {
            row.budget = daemon.budget_use(&inner, row.uid, now);
            row.group_budgets = daemon.group_budgets_of(&inner, row.uid, now);
        }
    }
    for row in &mut out {
        let caps = daemon.user_caps(row.uid);
        if let Some(held) = &caps.held {
            row.max_gpus = held.cap.gpus;
            row.max_cpus = held.cap.cpus;
            row.max_mem = held.cap.mem;
        }
        row.max_queued = caps.max_queued.as_ref().map(|q| q.0);
        row.max_gpus_per_job = caps.max_gpus_per_job.as_ref().map(|g| g.0);
    }
    out.sort_by(|a, b| a.user.cmp(&b.user));
    Json(out)
}
