//! The workflow page (`/workflows/ID`): the DAG drawn as SVG, each task a box coloured by its
//! state, the predicted critical path drawn heavier, and the GPUs an atomic workflow's admission
//! reserved for a task shown on it; then the tasks as a table. The workflow comes from the
//! socket API's own handler (`baton workflow status`), so another user's is shown as the queue
//! shows it.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path as UrlPath, State};
use baton_core::JobState;

use super::html::{Live, escape, gpu_list, gpus_text, live_page};
use crate::api::{WorkflowTaskView, WorkflowView};
use crate::daemon::handlers;
use crate::daemon::{ApiError, Daemon, Peer};

/// A task's box, and the room given to each.
const BOX_W: f64 = 168.0;
const BOX_H: f64 = 48.0;
const COL_W: f64 = 208.0;
const ROW_H: f64 = 64.0;
const MARGIN: f64 = 12.0;

/// The fill of a task in `state` (a held task is drawn as held, whatever it waits for).
fn colour(state: JobState, held: bool) -> &'static str {
    match state {
        _ if held => "#e8d48a",
        JobState::Queued => "#d9d9d9",
        JobState::Running => "#8db8e8",
        JobState::Succeeded => "#93cf9b",
        JobState::Failed | JobState::Timeout => "#eb9a9a",
        JobState::Cancelled => "#bdb3a6",
    }
}

/// The page of workflow `id` for `peer`.
pub async fn render(daemon: &Arc<Daemon>, peer: Peer, id: u64) -> Result<String, ApiError> {
    let Json(wf) =
        handlers::workflow::status(State(Arc::clone(daemon)), ConnectInfo(peer), UrlPath(id))
            .await?;
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/\">overview</a></p><h1>Workflow {} ({})</h1><table id=\"workflow\">",
        wf.id,
        escape(&wf.name)
    );
    for (label, value) in [
        ("state", wf.state.to_string()),
        ("owner", wf.owner.clone()),
        (
            "admission",
            if wf.atomic {
                "atomic (all its GPUs reserved before any task starts)".to_string()
            } else {
                "task by task".to_string()
            },
        ),
        ("submitted", wf.submitted_at.clone()),
        ("admitted", wf.admitted_at.clone().unwrap_or_default()),
        ("ended", wf.ended_at.clone().unwrap_or_default()),
        ("critical path", wf.critical_path.join(" → ")),
    ] {
        if !value.is_empty() {
            let _ = write!(body, "<tr><th>{label}</th><td>{}</td></tr>", escape(&value));
        }
    }
    body.push_str("</table>");
    dag(&mut body, &wf);
    tasks_table(&mut body, &wf);
    Ok(live_page(
        &format!("baton: workflow {}", wf.id),
        &body,
        Live::Changes,
    ))
}

/// Each task's column: one past the furthest of the tasks it runs after (tasks come in
/// dependency order, so each one's predecessors are placed before it).
fn columns(tasks: &[WorkflowTaskView]) -> Vec<usize> {
    let mut column_of: HashMap<&str, usize> = HashMap::new();
    let mut columns = Vec::with_capacity(tasks.len());
    for task in tasks {
        let column = task
            .after
            .iter()
            .filter_map(|a| column_of.get(a.as_str()))
            .map(|c| c + 1)
            .max()
            .unwrap_or(0);
        column_of.insert(&task.task, column);
        columns.push(column);
    }
    columns
}

/// The DAG as SVG: columns left to right in dependency order, an edge from each task to each
/// task that runs after it.
fn dag(body: &mut String, wf: &WorkflowView) {
    let columns = columns(&wf.tasks);
    let mut rows_used: Vec<usize> = Vec::new();
    let mut place: HashMap<&str, (f64, f64)> = HashMap::new();
    for (task, &column) in wf.tasks.iter().zip(&columns) {
        if rows_used.len() <= column {
            rows_used.resize(column + 1, 0);
        }
        let row = rows_used[column];
        rows_used[column] += 1;
        place.insert(
            &task.task,
            (MARGIN + column as f64 * COL_W, MARGIN + row as f64 * ROW_H),
        );
    }
    let width = MARGIN * 2.0 + (rows_used.len().max(1) - 1) as f64 * COL_W + BOX_W;
    let height = MARGIN * 2.0
        + (rows_used.iter().copied().max().unwrap_or(1).max(1) - 1) as f64 * ROW_H
        + BOX_H;
    let critical: Vec<(&str, &str)> = wf
        .critical_path
        .windows(2)
        .map(|pair| (pair[0].as_str(), pair[1].as_str()))
        .collect();
    let _ = write!(
        body,
        "<h2>Graph</h2><div class=\"scroll\"><svg id=\"dag\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"the workflow's tasks and \
         what each runs after\"><defs><marker id=\"arrow\" viewBox=\"0 0 8 8\" refX=\"8\" \
         refY=\"4\" markerWidth=\"6\" markerHeight=\"6\" orient=\"auto\">\
         <path d=\"M0,0 L8,4 L0,8 z\" fill=\"#666\"/></marker></defs>"
    );
    for task in &wf.tasks {
        let (x, y) = place[task.task.as_str()];
        for before in &task.after {
            let Some(&(bx, by)) = place.get(before.as_str()) else {
                continue;
            };
            let on_path = critical.contains(&(before.as_str(), task.task.as_str()));
            let _ = write!(
                body,
                "<path class=\"edge{}\" d=\"M{:.1},{:.1} C{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\" \
                 fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" marker-end=\"url(#arrow)\"/>",
                if on_path { " critical" } else { "" },
                bx + BOX_W,
                by + BOX_H / 2.0,
                bx + BOX_W + 20.0,
                by + BOX_H / 2.0,
                x - 20.0,
                y + BOX_H / 2.0,
                x,
                y + BOX_H / 2.0,
                if on_path { "#b03030" } else { "#888" },
                if on_path { 3 } else { 1 },
            );
        }
    }
    for task in &wf.tasks {
        let (x, y) = place[task.task.as_str()];
        let on_path = wf.critical_path.contains(&task.task);
        let state = task.job.state;
        let detail = match &task.reserved {
            Some(gpus) if state == JobState::Queued => format!("reserved GPU {}", gpu_list(gpus)),
            _ if task.job.held_by.is_some() => "held".to_string(),
            _ => state.to_string(),
        };
        let _ = write!(
            body,
            "<a href=\"/jobs/{id}\"><g class=\"task {state}{crit}\" data-task=\"{name}\">\
             <title>{name}: {detail} (job {id})</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"6\" \
             fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{sw}\"/>\
             <text x=\"{tx}\" y=\"{ty1}\" font-size=\"13\" font-weight=\"600\">{short}</text>\
             <text x=\"{tx}\" y=\"{ty2}\" font-size=\"11\">{detail}</text></g></a>",
            id = task.job.id,
            state = state,
            crit = if on_path { " critical" } else { "" },
            name = escape(&task.task),
            detail = escape(&detail),
            fill = colour(state, task.job.held_by.is_some()),
            stroke = if on_path { "#b03030" } else { "#777" },
            sw = if on_path { 2.5 } else { 1.0 },
            tx = x + 8.0,
            ty1 = y + 19.0,
            ty2 = y + 37.0,
            short = escape(&shorten(&task.task, 22)),
        );
    }
    body.push_str("</svg></div><p class=\"legend\">");
    for (label, state, held) in [
        ("queued", JobState::Queued, false),
        ("held", JobState::Queued, true),
        ("running", JobState::Running, false),
        ("succeeded", JobState::Succeeded, false),
        ("failed or timed out", JobState::Failed, false),
        ("cancelled", JobState::Cancelled, false),
    ] {
        let _ = write!(
            body,
            "<span class=\"key\" style=\"background:{}\"></span> {label} ",
            colour(state, held)
        );
    }
    body.push_str(
        "<span class=\"key\" style=\"background:#b03030\"></span> the predicted critical path</p>",
    );
}

/// `text` cut to `max` characters, marked where it was cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// The tasks, one row each, in the order they were queued.
fn tasks_table(body: &mut String, wf: &WorkflowView) {
    body.push_str(
        "<h2>Tasks</h2><table id=\"tasks\"><tr><th>task</th><th>job</th><th>state</th>\
         <th>after</th><th>GPUs</th><th>predicted to the end</th><th>why it waits</th></tr>",
    );
    for task in &wf.tasks {
        let gpus = match &task.reserved {
            Some(reserved) => format!("GPU {} (reserved)", gpu_list(reserved)),
            None => gpus_text(&task.job),
        };
        // A prediction, so only while the task has yet to end.
        let left = if task.job.state.is_terminal() {
            String::new()
        } else {
            baton_core::units::format_duration(task.critical_path_ms.max(0))
        };
        let _ = write!(
            body,
            "<tr class=\"task\"><td>{name}</td><td><a href=\"/jobs/{id}\">{id}</a></td>\
             <td>{state}</td><td>{after}</td><td>{gpus}</td><td class=\"num\">{left}</td>\
             <td>{why}</td></tr>",
            name = escape(&task.task),
            id = task.job.id,
            state = escape(&task.job.state.to_string()),
            after = escape(&task.after.join(", ")),
            gpus = escape(&gpus),
            left = escape(&left),
            why = escape(task.job.reason.as_deref().unwrap_or("")),
        );
    }
    body.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_goes_one_column_past_its_furthest_predecessor() {
        let task = |name: &str, after: &[&str]| WorkflowTaskView {
            task: name.into(),
            after: after.iter().map(|s| s.to_string()).collect(),
            reserved: None,
            critical_path_ms: 0,
            job: crate::api::JobView::default(),
        };
        let tasks = [
            task("prep", &[]),
            task("train", &["prep"]),
            task("eval", &["train"]),
            task("report", &["prep", "eval"]),
            task("lint", &[]),
        ];
        assert_eq!(columns(&tasks), [0, 1, 2, 3, 0]);
    }

    #[test]
    fn long_names_are_cut_and_marked() {
        assert_eq!(shorten("short", 22), "short");
        assert_eq!(shorten("abcdefghij", 5), "abcd…");
    }
}
