//! Delivering a job's report to whoever submitted it (DESIGN §5). `spec` turns `--notify` specs
//! and the submitter's agent context into channels; this module words the message and sends it
//! through one channel, one file per channel kind. The outbox (durable rows, retries, restarts)
//! lives in the daemon, which calls `deliver` once per row and records the outcome.
//!
//! What reaches an agent session is worded as a report, never as instructions: a doorbell line
//! that says what it is, then the report, whose quotes of the job's output are fenced and
//! stripped of control sequences by the report builder. Nothing from the report is ever passed
//! through a shell: commands get it on stdin, tmux gets it through a paste buffer.

pub mod claude;
mod cmd;
pub mod codex;
mod file;
pub mod spec;
mod tmux;
mod webhook;

use std::collections::BTreeMap;

use baton_core::report::sanitize_line;
use serde::{Deserialize, Serialize};

pub use claude::inbound_of;
pub use spec::{Channel, Inbound, WebhookFormat, resolve};

/// Everything a channel needs to deliver one job's report.
#[derive(Clone, Serialize, Deserialize)]
pub struct Message {
    pub job: u64,
    pub state: String,
    pub exit_code: Option<i32>,
    /// The doorbell line, the report, and an end marker: what is typed into sessions and
    /// appended to files.
    pub text: String,
    /// The report alone (markdown), for `cmd:` on stdin.
    pub markdown: String,
    /// The webhook body: the report JSON wrapped with the job's id and state. Made only for a
    /// message a webhook is to receive (empty otherwise): it serialises the whole report.
    pub json: String,
    /// Where `report.md` is stored.
    pub report_path: String,
    /// The submitter's environment (PATH, HOME, CODEX_HOME...), for commands run on its behalf.
    pub env: BTreeMap<String, String>,
    /// The job's working directory, where `cmd:` runs.
    pub cwd: String,
    /// The last line of `text`: how tmux delivery recognises its text still sitting unsent.
    pub end: String,
}

/// Shows the environment's variable names only: their values may be tokens and keys.
impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Message {
            job,
            state,
            exit_code,
            text,
            markdown,
            json,
            report_path,
            env,
            cwd,
            end,
        } = self;
        f.debug_struct("Message")
            .field("job", job)
            .field("state", state)
            .field("exit_code", exit_code)
            .field("text", text)
            .field("markdown", markdown)
            .field("json", json)
            .field("report_path", report_path)
            .field("env", &crate::api::EnvNames(env))
            .field("cwd", cwd)
            .field("end", end)
            .finish()
    }
}

impl Message {
    /// A job's end report; `for_webhook`: its webhook body is made too.
    pub fn new(
        report: &baton_core::report::Report,
        markdown: &str,
        report_path: &str,
        env: BTreeMap<String, String>,
        for_webhook: bool,
    ) -> Message {
        let text = format!(
            "[baton] job {id} ended: {state}{exit}. This is baton's automatic end-of-job report, \
             not a request; it follows below and is stored at {report_path}.\n\n{markdown}\n{end}",
            id = report.id,
            state = report.state,
            exit = match (report.exit_code, report.signal) {
                (Some(code), _) => format!(" (exit code {code})"),
                (None, Some(sig)) => format!(" (signal {sig})"),
                _ => String::new(),
            },
            markdown = markdown.trim_end(),
            end = end_marker(report.id),
        );
        let json = if for_webhook {
            serde_json::json!({
                "event": "job.ended",
                "job_id": report.id,
                "state": report.state,
                "exit_code": report.exit_code,
                "headline": report.headline,
                "report_path": report_path,
                "report": report,
                "markdown": markdown,
            })
            .to_string()
        } else {
            String::new()
        };
        Message {
            job: report.id,
            state: report.state.to_string(),
            exit_code: report.exit_code,
            text,
            markdown: markdown.to_string(),
            json,
            report_path: report_path.to_string(),
            cwd: report.cwd.clone(),
            env,
            end: end_marker(report.id),
        }
    }

    /// The summary of a workflow that has ended, sent through its tasks' channels. `anchor` is
    /// the job whose end ended the workflow (the outbox keeps deliveries by job).
    #[allow(clippy::too_many_arguments)]
    pub fn workflow(
        workflow: u64,
        name: &str,
        state: &str,
        anchor: u64,
        summary: &str,
        path: &str,
        cwd: &str,
        env: BTreeMap<String, String>,
    ) -> Message {
        let end = format!("[end of baton report for workflow {workflow}]");
        let text = format!(
            "[baton] workflow {workflow} ({name}) ended: {state}. This is baton's automatic \
             end-of-workflow summary, not a request; it follows below and is stored at {path}.\n\n\
             {}\n{end}",
            summary.trim_end()
        );
        let json = serde_json::json!({
            "event": "workflow.ended",
            "workflow_id": workflow,
            "name": name,
            "state": state,
            "report_path": path,
            "markdown": summary,
        })
        .to_string();
        Message {
            job: anchor,
            state: state.to_string(),
            exit_code: None,
            text,
            markdown: summary.to_string(),
            json,
            report_path: path.to_string(),
            env,
            cwd: cwd.to_string(),
            end,
        }
    }
}

impl Message {
    /// A mid-run alert (`baton_core::midrun`): the job still runs; `markdown` says what was
    /// seen and is stored at `path`.
    pub fn alert(
        job: u64,
        detector: &str,
        markdown: &str,
        path: &str,
        cwd: &str,
        env: BTreeMap<String, String>,
    ) -> Message {
        let end = format!("[end of baton alert for job {job}]");
        // What the first line says is what happened: a milestone or a digest was asked for.
        let what = if detector.starts_with("milestone") {
            format!("reached a milestone you asked for ({detector})")
        } else if detector == "digest" {
            "is running: the progress digest you asked for (--wake-every)".to_string()
        } else {
            format!("needs a look while it runs ({detector})")
        };
        let text = format!(
            "[baton] job {job} {what}. This is baton's automatic mid-run alert, not a request; \
             it follows below and is stored at {path}.\n\n{}\n{end}",
            markdown.trim_end()
        );
        let json = serde_json::json!({
            "event": "job.alert",
            "job_id": job,
            "detector": detector,
            "state": "running",
            "report_path": path,
            "markdown": markdown,
        })
        .to_string();
        Message {
            job,
            state: "running".to_string(),
            exit_code: None,
            text,
            markdown: markdown.to_string(),
            json,
            report_path: path.to_string(),
            env,
            cwd: cwd.to_string(),
            end,
        }
    }

    /// A sweep's comparison report once its last run ended, or (`alert`) its early alert
    /// while runs remain, sent through the sweep's channels. `anchor` is the run whose end (or
    /// report) brought it.
    #[allow(clippy::too_many_arguments)]
    pub fn sweep(
        sweep: u64,
        name: &str,
        state: &str,
        alert: bool,
        anchor: u64,
        markdown: &str,
        path: &str,
        cwd: &str,
        env: BTreeMap<String, String>,
    ) -> Message {
        let name = sanitize_line(name.as_bytes());
        let (what, event, end) = if alert {
            (
                format!(
                    "[baton] sweep {sweep} ({name}) looks broken. This is baton's automatic early alert, not a request; it follows below and is stored at {path}."
                ),
                "sweep.alert",
                format!("[end of baton alert for sweep {sweep}]"),
            )
        } else {
            (
                format!(
                    "[baton] sweep {sweep} ({name}) ended: {state}. This is baton's automatic comparison of its runs, not a request; it follows below and is stored at {path}."
                ),
                "sweep.ended",
                format!("[end of baton report for sweep {sweep}]"),
            )
        };
        let text = format!("{what}\n\n{}\n{end}", markdown.trim_end());
        let json = serde_json::json!({
            "event": event,
            "sweep_id": sweep,
            "name": name,
            "state": state,
            "report_path": path,
            "markdown": markdown,
        })
        .to_string();
        Message {
            job: anchor,
            state: state.to_string(),
            exit_code: None,
            text,
            markdown: markdown.to_string(),
            json,
            report_path: path.to_string(),
            env,
            cwd: cwd.to_string(),
            end,
        }
    }

    /// A notice about a running job from baton's GPU waste rules (it sits idle, it will be
    /// stopped), sent through the job's channels.
    pub fn notice(job: &Noticed<'_>, line: &str, env: &BTreeMap<String, String>) -> Message {
        let end = format!("[end of baton notice for job {}]", job.id);
        let text = format!(
            "[baton] notice about job {id} ({name}), from baton's GPU waste rules; not a \
             request:\n{line}\n{end}",
            id = job.id,
            name = sanitize_line(job.name.as_bytes()),
            line = sanitize_line(line.as_bytes()),
        );
        let json = serde_json::json!({
            "event": "job.waste_notice",
            "job_id": job.id,
            "state": job.state,
            "message": line,
        })
        .to_string();
        Message {
            job: job.id,
            state: job.state.to_string(),
            exit_code: None,
            text,
            markdown: format!("{line}\n"),
            json,
            report_path: String::new(),
            env: env.clone(),
            cwd: job.cwd.to_string(),
            end,
        }
    }
}

/// The job a notice is about, as the notice names it.
pub struct Noticed<'a> {
    pub id: u64,
    pub name: &'a str,
    pub state: baton_core::JobState,
    /// Where `cmd:` runs.
    pub cwd: &'a str,
}

/// The last line of every message: lets tmux delivery see whether its text still sits unsent
/// in an input box, and lets readers of an inbox file see where one report ends.
pub fn end_marker(job: u64) -> String {
    format!("[end of baton report for job {job}]")
}

/// How one delivery attempt went. Only `Delivered` means the message reached the agent (or the
/// file, command or URL) as input; every other outcome leaves the session to the next channel
/// of its chain (DESIGN §5: one wake per event).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "lowercase")]
pub enum Outcome {
    Delivered,
    /// Only a note was shown (a tmux status-line message in a pane that runs no agent): a person
    /// may see it, the agent does not.
    Noted(String),
    /// Claude Code keeps the message for a person to approve (a bypass-permissions session):
    /// no turn starts.
    Held(String),
    /// Claude Code turns the message away (`crossSessionInbound = "refuse"`).
    Refused(String),
    /// Another process delivers it and has not yet said it did (the Claude Code hook, still
    /// waiting on the job): look again soon, without counting an attempt.
    Waiting(String),
    /// The target no longer exists (the agent session ended, the pane closed): retrying cannot
    /// help, and the report must reach the inbox file instead.
    Gone(String),
    /// Worth retrying later.
    Failed(String),
}

impl Outcome {
    /// Why it was not delivered, if it was not.
    pub fn detail(&self) -> Option<&str> {
        match self {
            Outcome::Delivered => None,
            Outcome::Noted(why)
            | Outcome::Held(why)
            | Outcome::Refused(why)
            | Outcome::Waiting(why)
            | Outcome::Gone(why)
            | Outcome::Failed(why) => Some(why),
        }
    }
}

/// Delivers `msg` through `channel`, once.
pub async fn deliver(channel: &Channel, msg: &Message) -> Outcome {
    match channel {
        Channel::File { path } => file::deliver(path, msg),
        Channel::Cmd { command } => cmd::deliver(command, msg).await,
        Channel::Webhook { url, format } => webhook::deliver(url, *format, msg).await,
        Channel::Claude {
            socket,
            token,
            inbound,
            ..
        } => match inbound {
            // Known beforehand not to start a turn: nothing is sent, so no person is asked to
            // approve a message the hook (or the next channel) delivers anyway.
            Some(Inbound::Held { why }) => Outcome::Held(why.clone()),
            Some(Inbound::Refused { why }) => Outcome::Refused(why.clone()),
            None => claude::deliver(socket, token, msg).await,
        },
        Channel::ClaudeHook { pid, started, .. } => claude::hook_alive(*pid, *started),
        Channel::Tmux { pane, server } => tmux::deliver(pane, server.as_deref(), msg).await,
        Channel::Codex { thread } => codex::deliver(thread, msg).await,
    }
}

/// The last `max` bytes of a command's diagnostics, on one line, for an error message.
fn tail_of(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let start = text.len().saturating_sub(max);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A process environment for commands run on the submitter's behalf: theirs, as captured.
fn command_env(cmd: &mut tokio::process::Command, msg: &Message) {
    cmd.env_clear().envs(&msg.env);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_shows_env_names_but_not_their_values() {
        let env = BTreeMap::from([
            ("OPENAI_API_KEY".to_string(), "sk-s3cr3tvalue".to_string()),
            ("HOME".to_string(), "/home/private-alice".to_string()),
        ]);
        let msg = Message::workflow(3, "pipe", "succeeded", 9, "all done", "/r.md", "/w", env);
        let shown = format!("{msg:?} {msg:#?}");
        assert!(
            !shown.contains("sk-s3cr3tvalue") && !shown.contains("/home/private-alice"),
            "{shown}"
        );
        assert!(
            shown.contains("OPENAI_API_KEY")
                && shown.contains("HOME")
                && shown.contains("all done"),
            "{shown}"
        );
    }
}
