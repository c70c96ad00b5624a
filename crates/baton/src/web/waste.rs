//! The waste and usage page (`/waste?since=7d`): `baton stats`'s KPIs over the chosen period
//! (utilisation, GPU-hours allocated and idle, GPU-hours by owner, waste actions) and `baton
//! audit`'s log of the waste rules' decisions, through the API's own handlers (a user of a
//! shared daemon sees the decisions about their own jobs).

use std::fmt::Write;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Query, State};

use super::chart::{Line, time_chart};
use super::html::{escape, page};
use crate::api::SinceQuery;
use crate::daemon::handlers;
use crate::daemon::{ApiError, Daemon, Peer};

/// The most audit entries shown, newest last (the rest: `baton audit`).
const AUDIT_SHOWN: usize = 200;

/// The page for `peer` over the period `since` (as typed: `7d`, `24h`; empty: all kept).
pub async fn render(daemon: &Arc<Daemon>, peer: Peer, since: &str) -> Result<String, ApiError> {
    let since_ms = match since.trim() {
        "" => None,
        text => Some(
            baton_core::units::parse_duration(text)
                .map_err(|e| ApiError::BadRequest(format!("since {text:?}: {e} (e.g. 24h, 7d)")))?,
        ),
    };
    let query = SinceQuery { since_ms };
    let Json(stats) =
        handlers::stats::handle(State(Arc::clone(daemon)), Query(query.clone())).await?;
    let Json(audit) =
        handlers::audit::handle(State(Arc::clone(daemon)), ConnectInfo(peer), Query(query)).await?;
    let mut body = String::from("<p><a href=\"/\">overview</a></p><h1>Waste and usage</h1>");
    let _ = write!(
        body,
        "<form method=\"get\" action=\"/waste\"><label>since <input name=\"since\" value=\"{}\" \
         placeholder=\"7d\"></label> <button type=\"submit\">show</button></form>\
         <p>From {} to {}.</p><table id=\"kpis\">",
        escape(since),
        escape(&stats.since),
        escape(&stats.until),
    );
    let pct = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}%"));
    for (label, value) in [
        ("GPU utilisation", pct(stats.cluster_util_pct)),
        (
            "GPU-hours allocated",
            format!("{:.2}", stats.allocated_gpu_hours),
        ),
        ("GPU-hours idle", format!("{:.2}", stats.idle_gpu_hours)),
        ("idle share", pct(stats.idle_share.map(|s| s * 100.0))),
    ] {
        let _ = write!(
            body,
            "<tr><th>{label}</th><td class=\"num\">{}</td></tr>",
            escape(&value)
        );
    }
    body.push_str("</table>");
    // The period's use over time: all it keeps (a month) when no period is chosen.
    let now = crate::daemon::now_ms();
    let from = now - since_ms.unwrap_or(30 * 86_400_000);
    let lines: Vec<Line> = daemon
        .gpu_series(None, from, now)
        .await?
        .iter()
        .map(|s| Line {
            label: format!("GPU {}", s.gpu),
            points: s
                .points
                .iter()
                .map(|p| (p.at, p.util.map(f64::from)))
                .collect(),
            peaks: false,
        })
        .collect();
    if lines.iter().any(|l| !l.points.is_empty()) {
        let first = lines
            .iter()
            .filter_map(|l| l.points.first().map(|p| p.0))
            .min()
            .unwrap_or(from);
        body.push_str(&time_chart(
            "util-over-time",
            "GPU utilisation",
            &lines,
            (first.max(from), now),
            Some(100.0),
            |v| format!("{v:.0}%"),
        ));
    }
    body.push_str("<h2>GPU-hours by owner</h2><table id=\"owners\">");
    let most = stats
        .owners
        .iter()
        .map(|o| o.gpu_hours)
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    for owner in &stats.owners {
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"num\">{:.2}</td><td><span class=\"alloc\" \
             style=\"width:{}px\"></span></td><td class=\"num\">{} jobs</td></tr>",
            escape(&owner.owner),
            owner.gpu_hours,
            (owner.gpu_hours / most * 200.0).round() as u64,
            owner.jobs
        );
    }
    body.push_str("</table><h2>Each GPU</h2><table id=\"gpu-use\">");
    for gpu in &stats.gpus {
        let util = gpu.util_pct.unwrap_or(0.0).clamp(0.0, 100.0);
        let _ = write!(
            body,
            "<tr><td>GPU {}</td><td class=\"num\">{}</td><td><span class=\"bar\" \
             style=\"width:{}px\"></span></td></tr>",
            gpu.gpu,
            escape(&pct(gpu.util_pct)),
            (util * 2.0).round() as u64
        );
    }
    body.push_str("</table><h2>Waste actions</h2><table id=\"actions\">");
    for w in &stats.waste_actions {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}{}</td><td class=\"num\">{}</td></tr>",
            escape(&w.rule),
            escape(&w.action),
            if w.dry_run { " (dry run)" } else { "" },
            w.count
        );
    }
    let _ = write!(
        body,
        "</table><h2>Audit log</h2><table id=\"audit\"><tr><th>when</th><th>rule</th>\
         <th>job</th><th>pid</th><th>GPU</th><th>action</th><th>what</th><th>outcome</th></tr>"
    );
    let shown = audit.len().saturating_sub(AUDIT_SHOWN);
    for e in &audit[shown..] {
        let _ = write!(
            body,
            "<tr class=\"entry\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}{}</td><td>{}</td><td>{}</td></tr>",
            escape(&e.time),
            escape(&e.rule),
            e.job_id
                .map_or_else(String::new, |j| format!("<a href=\"/jobs/{j}\">{j}</a>")),
            e.pid.map_or_else(String::new, |p| p.to_string()),
            e.gpu.map_or_else(String::new, |g| g.to_string()),
            escape(&e.action),
            if e.dry_run { " (dry run)" } else { "" },
            escape(&e.message),
            escape(&e.outcome)
        );
    }
    body.push_str("</table>");
    if shown > 0 {
        let _ = write!(
            body,
            "<p>{shown} earlier entries: <code>baton audit --since {}</code>.</p>",
            escape(if since.is_empty() { "30d" } else { since })
        );
    }
    Ok(page("baton: waste and usage", &body))
}
