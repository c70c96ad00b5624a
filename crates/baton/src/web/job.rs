//! The job page (`/jobs/ID`): the job as `baton status` shows it, its mid-run alerts, its
//! report once it ended (Markdown rendered, the output it quotes still fenced, and escaped),
//! the tail of its output, its events and its deliveries; and the actions on it (cancel, hold,
//! release, requeue), each behind a confirmation page. Everything goes through the socket API's
//! own handlers, so a page shows and does exactly what the CLI may: another user's job output
//! is a 403.

use std::fmt::Write;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path as UrlPath, State};
use baton_core::JobId;
use baton_core::report::sanitize_line;

use super::chart::{Line, time_chart};
use super::html::{Live, escape, gpus_text, live_page, page};
use crate::api::{CancelRequest, HoldRequest, RequeueRequest};
use crate::daemon::handlers;
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::monitor::series::Point;
use baton_core::units::format_size;

/// How much of the end of each output stream the page shows.
const TAIL_BYTES: u64 = 16 << 10;

/// What can be done to a job from its page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobAction {
    Cancel,
    Hold,
    Release,
    Requeue,
}

impl JobAction {
    pub fn parse(text: &str) -> Option<JobAction> {
        match text {
            "cancel" => Some(JobAction::Cancel),
            "hold" => Some(JobAction::Hold),
            "release" => Some(JobAction::Release),
            "requeue" => Some(JobAction::Requeue),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            JobAction::Cancel => "cancel",
            JobAction::Hold => "hold",
            JobAction::Release => "release",
            JobAction::Requeue => "requeue",
        }
    }

    /// What the confirmation asks.
    fn question(self, id: u64) -> String {
        match self {
            JobAction::Cancel => format!(
                "Cancel job {id}? A running job gets SIGTERM, then SIGKILL after the grace period."
            ),
            JobAction::Hold => format!("Hold job {id}? It will not start until released."),
            JobAction::Release => format!("Release job {id}? It may start at once."),
            JobAction::Requeue => format!("Run job {id} again, as a new attempt?"),
        }
    }
}

/// The page of job `id` for `peer`.
pub async fn render(daemon: &Arc<Daemon>, peer: Peer, id: u64) -> Result<String, ApiError> {
    // The events first: their handler refuses what `peer` may not read (403, 404).
    let Json(events) =
        handlers::events::handle(State(Arc::clone(daemon)), ConnectInfo(peer), UrlPath(id)).await?;
    let view = daemon
        .views(&peer, &[JobId(id)])?
        .pop()
        .ok_or_else(|| ApiError::NotFound(format!("job {id} does not exist")))?;
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/\">overview</a></p><h1>Job {} ({})</h1><table id=\"job\">",
        id,
        escape(&view.name)
    );
    let command = view.command.join(" ");
    for (label, value) in [
        ("state", view.state.to_string()),
        ("reason", view.reason.clone().unwrap_or_default()),
        ("owner", view.owner.clone()),
        ("command", command),
        ("GPUs", gpus_text(&view)),
        ("submitted", view.submitted_at.clone()),
        ("started", view.started_at.clone().unwrap_or_default()),
        ("ended", view.ended_at.clone().unwrap_or_default()),
        (
            "progress",
            view.progress
                .as_ref()
                .map_or_else(String::new, |p| match &p.eta {
                    Some(eta) => format!("{}; ETA {eta}", p.counters),
                    None => p.counters.clone(),
                }),
        ),
        (
            "predicted start",
            view.predicted_start.clone().unwrap_or_default(),
        ),
        (
            "expected start",
            view.expected_start.clone().unwrap_or_default(),
        ),
    ] {
        if !value.is_empty() {
            let _ = write!(body, "<tr><th>{label}</th><td>{}</td></tr>", escape(&value));
        }
    }
    body.push_str("</table>");
    if let Some(sweep) = view.sweep_id {
        let _ = write!(
            body,
            "<p>A run of <a href=\"/sweeps/{sweep}\">sweep {sweep}</a>.</p>"
        );
    }
    if let Some(wf) = view.workflow_id {
        let _ = write!(
            body,
            "<p>Task {} of <a href=\"/workflows/{wf}\">workflow {wf}</a>.</p>",
            escape(view.task.as_deref().unwrap_or(&view.name))
        );
    }
    // An admin reads other users' jobs but acts only on their own: no buttons that would 403.
    if daemon
        .job(JobId(id))?
        .is_some_and(|job| peer.may_act_on(&job))
    {
        actions(&mut body, id, view.state, view.held_by.is_some());
    }
    if !view.alerts.is_empty() {
        body.push_str(
            "<h2>Mid-run alerts</h2><table id=\"alerts\"><tr><th>when</th><th>detector</th>\
             <th>action</th><th>evidence</th></tr>",
        );
        for alert in &view.alerts {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                escape(&alert.seen_at),
                escape(&alert.detector),
                escape(&alert.action),
                escape(&alert.evidence)
            );
        }
        body.push_str("</table>");
    }
    gpu_charts(&mut body, daemon, JobId(id)).await?;
    if view.state.is_terminal() {
        match handlers::report::handle(State(Arc::clone(daemon)), ConnectInfo(peer), UrlPath(id))
            .await
        {
            Ok(Json(report)) => {
                body.push_str("<h2>Report</h2><div id=\"report\">");
                body.push_str(&markdown(&report.markdown));
                body.push_str("</div><h2>Deliveries</h2><table id=\"deliveries\">");
                for d in &report.deliveries {
                    let _ = write!(
                        body,
                        "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                        escape(&d.channel),
                        escape(&format!("{:?}", d.state).to_lowercase()),
                        escape(d.error.as_deref().unwrap_or(""))
                    );
                }
                body.push_str("</table>");
            }
            Err(e) => {
                let _ = write!(body, "<p>No report: {}</p>", escape(&e.to_string()));
            }
        }
    }
    let files = daemon.files(JobId(id));
    for (title, path) in [("stdout", files.stdout()), ("stderr", files.stderr())] {
        let lines = tail(&path);
        let _ = write!(
            body,
            "<h2>{title} (its end; program output, untrusted)</h2><pre id=\"{title}\">{}</pre>",
            escape(&lines.join("\n"))
        );
    }
    body.push_str("<h2>Events</h2><table id=\"events\">");
    for e in &events {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&e.at),
            escape(&e.kind),
            escape(&e.detail)
        );
    }
    body.push_str("</table>");
    Ok(live_page(
        &format!("baton: job {id}"),
        &body,
        if view.state == baton_core::JobState::Running {
            Live::Samples
        } else {
            Live::Changes
        },
    ))
}

/// The utilisation and memory of the GPUs job `id` ran on, while it ran (its last attempt):
/// the monitor's samples within the last hour, per-minute means before that.
async fn gpu_charts(body: &mut String, daemon: &Arc<Daemon>, id: JobId) -> Result<(), ApiError> {
    let Some(job) = daemon.job(id)? else {
        return Ok(());
    };
    let (Some(from), gpus) = (job.started_at(), job.gpus()) else {
        return Ok(());
    };
    if gpus.is_empty() {
        return Ok(());
    }
    let to = job.ended_at().unwrap_or_else(now_ms);
    let series = daemon.gpu_series(Some(gpus), from, to).await?;
    body.push_str("<h2>GPU use</h2>");
    if series.iter().all(|s| s.points.is_empty()) {
        body.push_str("<p id=\"gpu-use\">No samples of its GPUs yet.</p>");
        return Ok(());
    }
    let line = |s: &crate::daemon::GpuSeries, value: &dyn Fn(&Point) -> Option<f64>, peaks| Line {
        label: format!("GPU {}", s.gpu),
        points: s.points.iter().map(|p| (p.at, value(p))).collect(),
        peaks,
    };
    let util: Vec<Line> = series
        .iter()
        .map(|s| line(s, &|p| p.util.map(f64::from), false))
        .collect();
    let memory: Vec<Line> = series
        .iter()
        .map(|s| line(s, &|p| Some(p.mem as f64), true))
        .collect();
    body.push_str(&time_chart(
        "gpu-util",
        "utilisation",
        &util,
        (from, to),
        Some(100.0),
        |v| format!("{v:.0}%"),
    ));
    body.push_str(&time_chart(
        "gpu-memory",
        "memory used",
        &memory,
        (from, to),
        None,
        |v| format_size(v as u64),
    ));
    Ok(())
}

/// The buttons for what may be done to a job in `state`: each leads to its confirmation.
fn actions(body: &mut String, id: u64, state: baton_core::JobState, held: bool) {
    use baton_core::JobState::*;
    let possible: &[JobAction] = match state {
        Queued if held => &[JobAction::Release, JobAction::Cancel],
        Queued => &[JobAction::Cancel, JobAction::Hold],
        Running => &[JobAction::Cancel],
        Failed | Cancelled | Timeout => &[JobAction::Requeue],
        Succeeded => &[],
    };
    for action in possible {
        let _ = write!(
            body,
            "<a class=\"action\" href=\"/jobs/{id}/confirm/{}\">{}</a> ",
            action.as_str(),
            action.as_str()
        );
    }
}

/// The confirmation of `action` on job `id`: a form that posts it, with the session's CSRF
/// token.
pub fn confirmation(id: u64, action: JobAction, csrf: &str) -> String {
    page(
        &format!("baton: {} job {id}?", action.as_str()),
        &format!(
            "<p>{}</p><form method=\"post\" action=\"/jobs/{id}/{}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\" id=\"confirm\">Yes, {}</button> \
             <a href=\"/jobs/{id}\">No, back</a></form>",
            escape(&action.question(id)),
            action.as_str(),
            escape(csrf),
            action.as_str()
        ),
    )
}

/// Carries `action` out on job `id` for `peer`, through the API's own handler (so the same
/// checks apply).
pub async fn act(
    daemon: &Arc<Daemon>,
    peer: Peer,
    id: u64,
    action: JobAction,
) -> Result<(), ApiError> {
    let state = State(Arc::clone(daemon));
    let who = ConnectInfo(peer);
    // The jobs as they are after it are the API's answer; the page is reloaded instead.
    match action {
        JobAction::Cancel => {
            let request = CancelRequest {
                ids: vec![id],
                force: false,
                session: None,
            };
            let _ = handlers::cancel::handle(state, who, Json(request)).await?;
        }
        JobAction::Hold => {
            let _ = handlers::hold::hold(state, who, Json(HoldRequest { ids: vec![id] })).await?;
        }
        JobAction::Release => {
            let request = HoldRequest { ids: vec![id] };
            let _ = handlers::hold::release(state, who, Json(request)).await?;
        }
        JobAction::Requeue => {
            let request = RequeueRequest { ids: vec![id] };
            let _ = handlers::requeue::handle(state, who, Json(request)).await?;
        }
    }
    Ok(())
}

/// The last lines of an output file, made safe to show (control characters and escapes gone).
fn tail(path: &Path) -> Vec<String> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(TAIL_BYTES);
    if file.seek(SeekFrom::Start(from)).is_err() {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(TAIL_BYTES).read_to_end(&mut bytes);
    let mut lines: Vec<String> = bytes.split(|&b| b == b'\n').map(sanitize_line).collect();
    if from > 0 && !lines.is_empty() {
        lines.remove(0); // cut at its start
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// The report's Markdown as HTML: headings, list items, fenced blocks (kept as preformatted
/// text) and paragraphs, every piece escaped. A report only holds these.
pub fn markdown(text: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<String> = None;
    let mut in_list = false;
    for line in text.lines() {
        if let Some(open) = &fence {
            if line.trim_start().starts_with(open.as_str()) && line.trim() == open.as_str() {
                out.push_str("</pre>");
                fence = None;
            } else {
                out.push_str(&escape(line));
                out.push('\n');
            }
            continue;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            let ticks: String = trimmed.chars().take_while(|c| *c == '`').collect();
            if in_list {
                out.push_str("</ul>");
                in_list = false;
            }
            out.push_str("<pre>");
            fence = Some(ticks);
            continue;
        }
        if let Some(item) = line.strip_prefix("- ") {
            if !in_list {
                out.push_str("<ul>");
                in_list = true;
            }
            let _ = write!(out, "<li>{}</li>", escape(item));
            continue;
        }
        if in_list {
            out.push_str("</ul>");
            in_list = false;
        }
        if let Some(h) = line.strip_prefix("## ") {
            let _ = write!(out, "<h4>{}</h4>", escape(h));
        } else if let Some(h) = line.strip_prefix("# ") {
            let _ = write!(out, "<h3>{}</h3>", escape(h));
        } else if !line.trim().is_empty() {
            let _ = write!(out, "<p>{}</p>", escape(line));
        }
    }
    if fence.is_some() {
        out.push_str("</pre>");
    }
    if in_list {
        out.push_str("</ul>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_renders_with_its_quoted_output_fenced_and_escaped() {
        let md = "# Job 3 failed\n\n- cause: `RuntimeError`\n- <b>x</b>\n\nLast output:\n\
                  ````text\n<script>alert(1)</script>\n```\n````\nafter\n";
        let html = markdown(md);
        assert!(html.contains("<h3>Job 3 failed</h3>"), "{html}");
        assert!(html.contains("<li>&lt;b&gt;x&lt;/b&gt;</li>"), "{html}");
        assert!(
            html.contains("<pre>&lt;script&gt;alert(1)&lt;/script&gt;\n```\n</pre>"),
            "a shorter fence inside stays text: {html}"
        );
        assert!(
            html.contains("<p>after</p>") && !html.contains("<script>"),
            "{html}"
        );
    }
}
