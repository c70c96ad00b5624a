//! The history page (`/history`): the filtered, paged job history of `baton history`, one row a
//! job (its state and exit, how long it waited and ran, its GPUs and how well it used them),
//! newest first, with the same filters (state, name, owner, since) and the next page's link.

use std::fmt::Write;
use std::sync::Arc;

use baton_core::units::format_duration;

use super::html::{escape, page};
use crate::api::ListQuery;
use crate::daemon::{ApiError, Daemon, Peer};

/// The rows of one page.
const PAGE: usize = 100;

/// The page for `peer` under `query`'s filters.
pub async fn render(
    daemon: &Arc<Daemon>,
    peer: Peer,
    mut query: ListQuery,
) -> Result<String, ApiError> {
    query.all = true;
    query.limit = Some(query.limit.unwrap_or(PAGE).min(PAGE));
    let asked = query.clone();
    let me = Arc::clone(daemon);
    let (rows, listing) = daemon
        .blocking(move || me.history_rows(&peer, &query))
        .await?;
    let mut body = String::from("<p><a href=\"/\">overview</a></p><h1>History</h1>");
    let value = |v: &Option<String>| escape(v.as_deref().unwrap_or(""));
    let _ = write!(
        body,
        "<form method=\"get\" action=\"/history\">\
         <label>state <input name=\"state\" value=\"{}\" placeholder=\"failed,timeout\"></label> \
         <label>name <input name=\"name\" value=\"{}\" placeholder=\"sweep-*\"></label> \
         <label>owner <input name=\"owner\" value=\"{}\"></label> \
         <label>since <input name=\"since\" value=\"{}\" placeholder=\"1d\"></label> \
         <button type=\"submit\">show</button></form>",
        value(&asked.state),
        value(&asked.name),
        value(&asked.owner),
        value(&asked.since),
    );
    body.push_str(
        "<table id=\"history\"><tr><th>job</th><th>name</th><th>owner</th><th>state</th>\
         <th>exit</th><th>waited</th><th>ran</th><th>GPUs</th><th>GPU use</th></tr>",
    );
    for row in &rows {
        let exit = match (row.exit_code, row.signal) {
            (Some(code), _) => code.to_string(),
            (None, Some(sig)) => format!("signal {sig}"),
            (None, None) => String::new(),
        };
        let link = if row.private {
            row.id.to_string()
        } else {
            format!("<a href=\"/jobs/{0}\">{0}</a>", row.id)
        };
        let _ = write!(
            body,
            "<tr class=\"row\"><td>{link}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            escape(&row.name),
            escape(&row.owner),
            row.state,
            exit,
            format_duration(row.wait_ms),
            row.run_ms.map(format_duration).unwrap_or_default(),
            row.gpus_requested,
            row.gpu_util_pct
                .map(|u| format!("{u:.1}%"))
                .unwrap_or_default(),
        );
    }
    body.push_str("</table>");
    if rows.is_empty() {
        body.push_str("<p>No jobs match.</p>");
    }
    if let Some(before) = listing.next_before {
        let mut next = format!("/history?before={before}");
        for (key, v) in [
            ("state", &asked.state),
            ("name", &asked.name),
            ("owner", &asked.owner),
            ("since", &asked.since),
        ] {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                let _ = write!(next, "&{key}={}", percent_encode(v));
            }
        }
        let _ = write!(
            body,
            "<p><a id=\"next\" href=\"{}\">older jobs</a></p>",
            escape(&next)
        );
    }
    Ok(page("baton: history", &body))
}

/// `text` safe in a URL's query: everything but unreserved characters percent-encoded.
fn percent_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'*' | b',') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}
