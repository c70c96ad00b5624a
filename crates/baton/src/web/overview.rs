//! The overview page: each GPU with its utilisation next to its allocation, its memory, power
//! and temperature and who holds it; the queue with each job's reason and starts; the running
//! jobs with their progress and ETA (for the jobs whose output the viewer may read).

use std::fmt::Write;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Query, State};

use baton_core::JobState;
use baton_core::units::format_size;

use super::chart::sparkline;
use super::html::{Live, escape, gpus_text, live_page};
use crate::api::{AuditView, JobView, SinceQuery, WorkflowRow};
use crate::daemon::handlers;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};

/// How far back a GPU's sparkline reaches.
const SPARK_SPAN_MS: i64 = 60 * 60_000;
/// How far back the waste flags reach, and how many are listed.
const FLAGS_SPAN_MS: i64 = 60 * 60_000;
const FLAGS_SHOWN: usize = 10;
/// The most ended workflows listed (the newest); every unfinished one is listed.
const ENDED_WORKFLOWS_SHOWN: usize = 5;

/// The overview for `peer`, as the socket's API would show it to them.
pub async fn render(daemon: &Arc<Daemon>, peer: Peer) -> Result<String, ApiError> {
    let workflows =
        handlers::workflow_list::recent(daemon, &peer, ENDED_WORKFLOWS_SHOWN as u32).await?;
    let recent = SinceQuery {
        since_ms: Some(FLAGS_SPAN_MS),
    };
    let Json(flags) =
        handlers::audit::handle(State(Arc::clone(daemon)), ConnectInfo(peer), Query(recent))
            .await?;
    // The probe reads the GPUs (NVML calls block): off the async workers.
    let probe = Arc::clone(daemon);
    let gpus = daemon.blocking(move || Ok(probe.gpu_views())).await?;
    let now = now_ms();
    let series = daemon.gpu_series(None, now - SPARK_SPAN_MS, now).await?;
    let jobs = daemon.active_jobs();
    let views = daemon.shown(&peer, &jobs);
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>baton</h1><p><a href=\"/history\">history</a> · <a href=\"/waste\">waste and \
         usage</a></p>\
         <p>{} GPUs ({}); {} running, {} queued.</p>",
        gpus.gpus.len(),
        escape(&gpus.backend),
        views
            .iter()
            .filter(|j| j.state == JobState::Running)
            .count(),
        views.iter().filter(|j| j.state == JobState::Queued).count(),
    );
    body.push_str(
        "<h2>GPUs</h2><table id=\"gpus\"><tr><th>GPU</th><th>use</th><th>memory</th>\
         <th>allocated</th><th>power</th><th>temp</th><th>last hour</th><th>held by</th></tr>",
    );
    for gpu in &gpus.gpus {
        let util = gpu.utilization.unwrap_or(0).min(100);
        let holders: Vec<String> = gpu
            .jobs
            .iter()
            .map(|id| match views.iter().find(|j| j.id == *id) {
                Some(j) => format!("{} ({}, {})", id, escape(&j.name), escape(&j.owner)),
                None => id.to_string(),
            })
            .collect();
        let points: Vec<(i64, Option<f64>)> = series
            .iter()
            .find(|s| s.gpu == gpu.index)
            .map(|s| {
                s.points
                    .iter()
                    .map(|p| (p.at, p.util.map(f64::from)))
                    .collect()
            })
            .unwrap_or_default();
        let spark = sparkline(
            &points,
            now - SPARK_SPAN_MS,
            now,
            100.0,
            &format!("GPU {} utilisation over the last hour", gpu.index),
        );
        let _ = write!(
            body,
            "<tr class=\"gpu\"><td>{} {}</td>\
             <td class=\"num\">{}<br><span class=\"bar\" style=\"width:{}px\"></span></td>\
             <td class=\"num\">{} / {}</td><td class=\"num\">{}<br>\
             <span class=\"alloc\" style=\"width:{}px\"></span></td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td>{spark}</td><td>{}</td></tr>",
            gpu.index,
            escape(&gpu.model),
            gpu.utilization
                .map_or_else(|| "-".to_string(), |u| format!("{u}%")),
            util,
            format_size(gpu.memory_used),
            format_size(gpu.memory_total),
            format_size(gpu.memory_allocated.min(gpu.memory_total)),
            percent(gpu.memory_allocated, gpu.memory_total),
            gpu.power_watts
                .map_or_else(|| "-".to_string(), |w| format!("{w:.0} W")),
            gpu.temperature_c
                .map_or_else(|| "-".to_string(), |t| format!("{t:.0} °C")),
            if holders.is_empty() {
                "free".to_string()
            } else {
                holders.join("<br>")
            },
        );
    }
    body.push_str("</table>");
    jobs_table(&mut body, "Running", "running", &views, JobState::Running);
    jobs_table(&mut body, "Queue", "queue", &views, JobState::Queued);
    flags_table(&mut body, &flags);
    workflows_table(&mut body, &workflows);
    Ok(live_page("baton", &body, Live::Samples))
}

/// The waste rules' newest decisions of the last hour (the viewer's own jobs' on a shared
/// daemon), newest first; the rest on the waste page.
fn flags_table(body: &mut String, flags: &[AuditView]) {
    if flags.is_empty() {
        return;
    }
    body.push_str(
        "<h2>Waste flags (last hour)</h2><table id=\"flags\"><tr><th>when</th><th>rule</th>\
         <th>job</th><th>GPU</th><th>action</th><th>what</th></tr>",
    );
    for e in flags.iter().rev().take(FLAGS_SHOWN) {
        let _ = write!(
            body,
            "<tr class=\"flag\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td>\
             <td>{}</td></tr>",
            escape(&e.time),
            escape(&e.rule),
            e.job_id
                .map_or_else(String::new, |j| format!("<a href=\"/jobs/{j}\">{j}</a>")),
            e.gpu.map_or_else(String::new, |g| g.to_string()),
            escape(&e.action),
            if e.dry_run { " (dry run)" } else { "" },
            escape(&e.message)
        );
    }
    let _ = write!(
        body,
        "</table><p><a href=\"/waste?since=1h\">all {} of the last hour</a></p>",
        flags.len()
    );
}

/// The workflows not yet ended and the newest few that have, newest first.
fn workflows_table(body: &mut String, workflows: &[WorkflowRow]) {
    let ended = workflows.iter().filter(|w| w.ended_at.is_some()).count();
    let skip_ended = ended.saturating_sub(ENDED_WORKFLOWS_SHOWN);
    let mut skipped = 0;
    let shown: Vec<&WorkflowRow> = workflows
        .iter()
        .filter(|w| {
            if w.ended_at.is_some() && skipped < skip_ended {
                skipped += 1;
                return false;
            }
            true
        })
        .collect();
    if shown.is_empty() {
        return;
    }
    body.push_str(
        "<h2>Workflows</h2><table id=\"workflows\"><tr><th>workflow</th><th>name</th>\
         <th>owner</th><th>state</th><th>tasks ended</th></tr>",
    );
    for wf in shown.iter().rev() {
        let _ = write!(
            body,
            "<tr><td><a href=\"/workflows/{0}\">{0}</a></td><td>{1}</td><td>{2}</td>\
             <td>{3}</td><td class=\"num\">{4} / {5}</td></tr>",
            wf.id,
            escape(&wf.name),
            escape(&wf.owner),
            escape(&wf.state.to_string()),
            wf.tasks_done,
            wf.tasks_total
        );
    }
    body.push_str("</table>");
}

/// `part` of `whole` as a percentage, 0 to 100.
fn percent(part: u64, whole: u64) -> u64 {
    (part.min(whole) * 100).checked_div(whole).unwrap_or(0)
}

/// The jobs in `state`, one row each.
fn jobs_table(body: &mut String, title: &str, id: &str, views: &[JobView], state: JobState) {
    let rows: Vec<&JobView> = views.iter().filter(|j| j.state == state).collect();
    let _ = write!(body, "<h2>{title}</h2>");
    if rows.is_empty() {
        let _ = write!(body, "<p id=\"{id}\">None.</p>");
        return;
    }
    let _ = write!(
        body,
        "<table id=\"{id}\"><tr><th>job</th><th>name</th><th>owner</th><th>GPUs</th>\
         <th>{}</th></tr>",
        if state == JobState::Running {
            "progress"
        } else {
            "why it waits"
        }
    );
    for job in rows {
        let detail = if state == JobState::Running {
            match &job.progress {
                Some(p) => match &p.eta {
                    Some(eta) => format!("{}; ETA {}", p.counters, eta),
                    None => p.counters.clone(),
                },
                None => String::new(),
            }
        } else {
            let mut why = job.reason.clone().unwrap_or_default();
            for (label, at) in [
                ("starts by", &job.predicted_start),
                ("expected", &job.expected_start),
            ] {
                if let Some(at) = at {
                    if !why.is_empty() {
                        why.push_str("; ");
                    }
                    let _ = write!(why, "{label} {at}");
                }
            }
            why
        };
        let gpus = gpus_text(job);
        let _ = write!(
            body,
            "<tr class=\"job\"><td><a href=\"/jobs/{0}\">{0}</a></td><td>{1}</td><td>{2}</td>\
             <td>{3}</td><td>{4}</td></tr>",
            job.id,
            escape(&job.name),
            escape(&job.owner),
            gpus,
            escape(&detail)
        );
    }
    body.push_str("</table>");
}
