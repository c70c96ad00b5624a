//! The sweep page (`/sweeps/ID`): the sweep's state and counts, and once its comparison is built
//! the table of parameters against each run's final metrics, sortable by any column (`?sort=`),
//! with the ranking metric drawn against each parameter. Through the API's own handler.

use std::cmp::Ordering;
use std::fmt::Write;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path, State};
use baton_core::sweep::compare::{ComparisonReport, Row};

use super::html::{Live, escape, live_page};
use crate::daemon::handlers;
use crate::daemon::{ApiError, Daemon, Peer};

/// The page of sweep `id` for `peer`, its table sorted by `sort` (a column's name; `-NAME`
/// for descending).
pub async fn render(
    daemon: &Arc<Daemon>,
    peer: Peer,
    id: u64,
    sort: &str,
) -> Result<String, ApiError> {
    let Json(sweep) =
        handlers::sweep::status(State(Arc::clone(daemon)), ConnectInfo(peer), Path(id)).await?;
    let mut body = String::from("<p><a href=\"/\">overview</a></p>");
    let _ = write!(
        body,
        "<h1>Sweep {} ({})</h1><p>{} runs, {}: {}</p>",
        sweep.id,
        escape(&sweep.name),
        sweep.runs,
        escape(&sweep.state),
        escape(
            &sweep
                .counts
                .iter()
                .map(|(state, n)| format!("{n} {state}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    match &sweep.comparison {
        Some(report) => comparison(&mut body, id, report, sort),
        None => {
            body.push_str("<p>Its comparison is built when its last run ends. Its runs:</p><ul>");
            for job in &sweep.jobs {
                let _ = write!(body, "<li><a href=\"/jobs/{job}\">job {job}</a></li>");
            }
            body.push_str("</ul>");
        }
    }
    Ok(live_page(
        &format!("baton: sweep {id}"),
        &body,
        Live::Changes,
    ))
}

/// One column's value in a row, for sorting and showing.
fn cell(report: &ComparisonReport, row: &Row, column: &str) -> String {
    if column == "state" {
        return row.state.to_string();
    }
    if column == "rank" {
        return row.rank.map_or_else(String::new, |r| r.to_string());
    }
    if let Some((_, v)) = row.params.iter().find(|(k, _)| k == column) {
        return v.clone();
    }
    report
        .metric_columns
        .iter()
        .position(|m| m == column)
        .and_then(|i| row.metrics.get(i).cloned().flatten())
        .unwrap_or_default()
}

/// Numbers as numbers, then text; empty cells last.
fn compare_cells(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        _ => a.cmp(b),
    }
}

fn comparison(body: &mut String, id: u64, report: &ComparisonReport, sort: &str) {
    let _ = write!(body, "<p id=\"headline\">{}</p>", escape(&report.headline));
    let mut columns: Vec<String> = vec!["rank".into()];
    columns.extend(report.param_columns.iter().cloned());
    columns.push("state".into());
    columns.extend(report.metric_columns.iter().cloned());
    let (key, descending) = match sort.strip_prefix('-') {
        Some(key) => (key, true),
        None => (sort, false),
    };
    let mut rows: Vec<&Row> = report.rows.iter().collect();
    if columns.iter().any(|c| c == key) {
        rows.sort_by(|a, b| {
            let order = compare_cells(&cell(report, a, key), &cell(report, b, key));
            if descending { order.reverse() } else { order }
        });
    }
    body.push_str("<table id=\"comparison\"><tr><th>job</th>");
    for column in &columns {
        let next = if column == key && !descending {
            format!("-{column}")
        } else {
            column.clone()
        };
        let _ = write!(
            body,
            "<th><a href=\"/sweeps/{id}?sort={}\">{}</a></th>",
            escape(&percent(&next)),
            escape(column)
        );
    }
    body.push_str("</tr>");
    for row in &rows {
        let _ = write!(
            body,
            "<tr class=\"run\"><td><a href=\"/jobs/{0}\">{0}</a></td>",
            row.job
        );
        for column in &columns {
            let _ = write!(body, "<td>{}</td>", escape(&cell(report, row, column)));
        }
        body.push_str("</tr>");
    }
    body.push_str("</table>");
    if let Some(rank_by) = &report.rank_by {
        let _ = write!(
            body,
            "<h2>{} against each parameter</h2>",
            escape(&rank_by.metric)
        );
        for param in &report.param_columns {
            chart(body, report, param, &rank_by.metric);
        }
    }
    for group in &report.failures {
        let _ = write!(
            body,
            "<p class=\"failure\">{}: {} runs</p>",
            escape(&group.cause),
            group.count
        );
    }
}

/// The ranking metric (y) against `param` (x, its values in sweep order), as an SVG scatter.
fn chart(body: &mut String, report: &ComparisonReport, param: &str, metric: &str) {
    let mut xs: Vec<String> = Vec::new();
    for row in &report.rows {
        let v = cell(report, row, param);
        if !xs.contains(&v) {
            xs.push(v);
        }
    }
    xs.sort_by(|a, b| compare_cells(a, b));
    let points: Vec<(usize, f64)> = report
        .rows
        .iter()
        .filter_map(|row| {
            let x = xs.iter().position(|v| *v == cell(report, row, param))?;
            Some((x, row.value?))
        })
        .collect();
    let (lo, hi) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), (_, y)| {
            (lo.min(*y), hi.max(*y))
        });
    let (w, h, pad) = (320.0, 160.0, 24.0);
    let _ = write!(
        body,
        "<figure><svg class=\"chart\" width=\"{w}\" height=\"{h}\" role=\"img\" \
         aria-label=\"{} against {}\"><rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" \
         fill=\"#fafafa\" stroke=\"#ddd\"/>",
        escape(metric),
        escape(param)
    );
    let span_x = (xs.len().max(2) - 1) as f64;
    let span_y = if hi > lo { hi - lo } else { 1.0 };
    for (x, y) in &points {
        let cx = pad + (*x as f64) / span_x * (w - 2.0 * pad);
        let cy = h - pad - (y - lo) / span_y * (h - 2.0 * pad);
        let _ = write!(
            body,
            "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"4\" fill=\"#47a\"/>"
        );
    }
    let _ = write!(
        body,
        "</svg><figcaption>{} ({}) against {} ({})</figcaption></figure>",
        escape(metric),
        if points.is_empty() {
            "no values".to_string()
        } else {
            format!("{lo} to {hi}")
        },
        escape(param),
        escape(&xs.join(", "))
    );
}

/// `text` safe in a URL's query.
fn percent(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}
