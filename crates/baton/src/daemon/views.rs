//! The job object of the API, built from a stored record.

use std::time::{Duration, UNIX_EPOCH};

use baton_core::{DepKind, Millis};

use crate::api::JobView;
use crate::daemon::Peer;
use crate::store::JobRecord;

pub fn rfc3339(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The job as `peer` may see it: whole for its owner, root and the admins; for another user of
/// a shared daemon without what is theirs alone (command, working directory, tags, channels,
/// session), as Slurm's `PrivateData=jobs` would.
pub fn job_view_for(peer: &Peer, job: &JobRecord) -> JobView {
    let mut view = job_view(job);
    if !peer.may_read(job) {
        view.command = Vec::new();
        view.cwd = String::new();
        view.tags = Default::default();
        view.notify = Vec::new();
        view.session = None;
        view.stdin = None;
        view.wakes_caller = false;
        view.private = true;
    }
    view
}

/// The job as `peer` may see it, with the reason the job table shows for it (why it waits now,
/// an end not recorded yet) over the recorded one.
pub fn shown_view(table: &crate::jobs::JobTable, peer: &Peer, job: &JobRecord) -> JobView {
    let mut view = job_view_for(peer, job);
    view.reason = table.reason_of(job).map(|r| r.into_owned());
    view
}

pub fn job_view(job: &JobRecord) -> JobView {
    let deps = |kind| {
        job.deps
            .iter()
            .filter(|d| d.kind == kind)
            .map(|d| d.job.0)
            .collect()
    };
    JobView {
        id: job.id.0,
        name: job.name.clone(),
        state: job.state(),
        exit_code: job.exit_code(),
        signal: job.signal(),
        gpus: job.gpus().to_vec(),
        command: job.command.clone(),
        cwd: job.cwd.clone(),
        owner: job.owner.clone(),
        priority: job.priority,
        submitted_at: rfc3339(job.submitted_at),
        started_at: job.started_at().map(rfc3339),
        ended_at: job.ended_at().map(rfc3339),
        reason: job.reason().map(str::to_string),
        workflow_id: job.workflow_id,
        gpus_requested: job.request.count,
        gpu_mem: job.request.mem_per_gpu,
        cpus: job.request.cpus,
        mem: job.request.mem,
        time_limit_ms: job.time_limit,
        retries: job.retries,
        attempt: job.attempt(),
        after: deps(DepKind::Success),
        after_any: deps(DepKind::Any),
        after_failed: deps(DepKind::Failure),
        held_by: job.held_by().map(str::to_string),
        begin_at: job.begin_at.map(rfc3339),
        reservation: job.reservation.as_ref().map(|r| r.name.clone()),
        checkpoint_signal: job.signal.map(|s| s.to_string()),
        stdin: job.stdin.clone(),
        tags: job.tags.clone(),
        notify: job.notify.iter().map(|c| c.public_spec()).collect(),
        session: job.session.clone(),
        task: job.task.clone(),
        queue_position: None,
        predicted_start: None,
        expected_start: None,
        slurm_job_id: job.slurm_id(),
        slurm_nodes: job
            .slurm_nodes()
            .map(str::to_string)
            .filter(|n| !n.is_empty()),
        slurm_state: job.slurm_state().map(str::to_string),
        wakes_caller: job.notify.iter().any(|c| c.can_wake()),
        sweep_id: job.sweep.as_ref().map(|r| r.id),
        sweep_index: job.sweep.as_ref().map(|r| r.index),
        private: false,
        alerts: Vec::new(),
        progress: None,
    }
}

/// A job's mid-run alerts with their deliveries' states (`JobView::alerts`).
pub fn alert_views(
    store: &crate::store::Store,
    files: &crate::executor::JobFiles,
    id: baton_core::JobId,
) -> Result<Vec<crate::api::AlertView>, crate::store::StoreError> {
    let alerts = store.alerts(id)?;
    if alerts.is_empty() {
        return Ok(Vec::new());
    }
    let deliveries = store.deliveries(id)?;
    Ok(alerts
        .iter()
        .map(|a| crate::api::AlertView {
            attempt: a.attempt,
            detector: a.detector.as_str().to_string(),
            seq: a.seq,
            action: a.action.as_str().to_string(),
            seen_at: rfc3339(a.seen_at),
            evidence: a.evidence.clone(),
            path: super::midrun::alert_path(files, a.attempt, a.detector, a.seq)
                .display()
                .to_string(),
            deliveries: deliveries
                .iter()
                .filter(|d| d.subject == crate::store::Subject::JobAlert(a.id))
                .map(|d| crate::api::AlertDelivery {
                    channel: d.channel.public_spec(),
                    state: d.state,
                })
                .collect(),
        })
        .collect())
}
