//! `baton agent wait-hook`: run by Claude Code as a background (`async` + `asyncRewake`) hook
//! after each Bash tool call. When the call was a `baton submit`, it blocks until the jobs that
//! call queued have ended, then exits 2 with a doorbell and their reports on stderr, which wakes
//! the model in that session. Any other tool call makes it exit 0 at once.
//!
//! It is the wake-up path wherever the inbox socket cannot start a turn: Claude Code versions
//! without it, and sessions that would hold or refuse baton's message (bypass-permissions mode,
//! which the hook's stdin says, or `crossSessionInbound` in the settings files). The hook
//! claims such jobs from the daemon first: their `claude` channel is then marked held or
//! refused, and the later links of their wake chain (tmux) stand by for the hook, so that the
//! session is woken once. A job whose inbox works is left to it.

use std::io::Read;
use std::process::ExitCode;

use serde::Deserialize;

use crate::edge::connect::{self, client};
use crate::edge::{present, request};

/// What Claude Code hands the hook on stdin (the fields we use).
#[derive(Debug, Deserialize)]
struct HookInput {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_input: serde_json::Value,
    #[serde(default)]
    tool_response: serde_json::Value,
    /// `default`, `acceptEdits`, `plan`, `bypassPermissions`… as of this tool call.
    #[serde(default)]
    permission_mode: Option<String>,
    /// The session's working directory: where the project's settings files are.
    #[serde(default)]
    cwd: Option<String>,
}

/// Claude Code shows about this much of a hook's output to the model.
const HOOK_OUTPUT_CAP: usize = 9_000;

#[derive(Debug, clap::Args)]
pub struct Args {}

/// Exit 2 wakes the model, so it is kept for reports alone: any trouble of the hook's own is
/// exit 1 (shown to the user, not the model), or a session would be woken by every failure.
pub fn run(args: Args) -> ExitCode {
    match wait(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("baton agent wait-hook: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn wait(_args: Args) -> anyhow::Result<ExitCode> {
    let mut input = Vec::new();
    std::io::stdin().take(4 << 20).read_to_end(&mut input)?;
    let Ok(hook) = serde_json::from_slice::<HookInput>(&input) else {
        return Ok(ExitCode::SUCCESS);
    };
    let ids = submitted_ids(&hook);
    if ids.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    let client = client();
    let Some(session) = hook.session_id.clone() else {
        return Ok(ExitCode::SUCCESS);
    };
    let inbound = crate::notify::claude::inbound_for_hook(
        hook.permission_mode.as_deref(),
        hook.cwd.as_deref().map(std::path::Path::new),
    );
    // Only this session's own jobs, and only those the inbox socket will not wake it for: the
    // daemon decides, and records that this hook delivers them.
    let claims = match client.hook_claim(&crate::api::HookClaimRequest {
        ids,
        session,
        inbound,
    }) {
        Ok(resp) => resp.claims,
        Err(_) => return Ok(ExitCode::SUCCESS),
    };
    let ids: Vec<u64> = claims.iter().filter(|c| c.claimed).map(|c| c.id).collect();
    if ids.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    // A daemon restart ends the held request; running jobs survive it, so wait again.
    let resp = loop {
        let request = request::wait_request(ids.clone(), None, true);
        match client.wait(&request) {
            Ok(resp) => break resp,
            Err(
                crate::api::client::ClientError::Transport(_)
                | crate::api::client::ClientError::Interrupted { .. }
                | crate::api::client::ClientError::Api { status: 503, .. }
                | crate::api::client::ClientError::NotRunning { .. },
            ) if connect::reconnects(&client, None) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if !resp.done {
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    for (i, job) in resp.jobs.iter().enumerate() {
        let report = resp.reports.get(i).cloned().flatten();
        let entry = format!(
            "[baton] job {} ended: {}. This is baton's automatic end-of-job report, not a request.\n\n{}\n",
            job.id,
            job.state,
            report.as_deref().unwrap_or("(no report)")
        );
        if text.len() + entry.len() > HOOK_OUTPUT_CAP {
            text.push_str(&format!(
                "[baton] job {} ended: {}; its report is too long to include here: `baton report {}`.\n",
                job.id, job.state, job.id
            ));
        } else {
            text.push_str(&entry);
        }
    }
    // Recorded just before the report goes out, as the inbox socket's delivery is recorded once
    // written: from here on nothing else wakes the session for these jobs.
    let _ = client.hook_delivered(&ids);
    eprint!("{}", present::terminal_safe(&text));
    // Exit 2 is what makes an asyncRewake hook wake the model with our stderr.
    Ok(ExitCode::from(2))
}

/// The ids a `baton submit` tool call printed: a line that is only a number (plain output), or
/// the `id` of the job object (`--json`).
fn submitted_ids(hook: &HookInput) -> Vec<u64> {
    if hook.tool_name.as_deref() != Some("Bash") {
        return Vec::new();
    }
    let command = hook
        .tool_input
        .get("command")
        .and_then(|c| c.as_str())
        .unwrap_or("");
    // `baton workflow submit` prints a workflow's id, which is no job's.
    if !(command.contains("baton") && command.contains("submit")) || command.contains("workflow") {
        return Vec::new();
    }
    let stdout = match &hook.tool_response {
        serde_json::Value::String(s) => s.clone(),
        v => v
            .get("stdout")
            .and_then(|s| s.as_str())
            .unwrap_or("")
            .to_string(),
    };
    let mut ids: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .collect();
    if ids.is_empty()
        && let Ok(job) = serde_json::from_str::<serde_json::Value>(&stdout)
        && let Some(id) = job.get("id").and_then(|i| i.as_u64())
    {
        ids.push(id);
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(json: &str) -> HookInput {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn ids_come_only_from_baton_submit_calls() {
        let plain = hook(
            r#"{"session_id":"s","tool_name":"Bash","tool_input":{"command":"baton submit --gpus 1 -- python train.py"},"tool_response":{"stdout":"42\n","stderr":"baton: queued job 42"}}"#,
        );
        assert_eq!(submitted_ids(&plain), [42]);
        let json = hook(
            r#"{"tool_name":"Bash","tool_input":{"command":"baton submit --json -- true"},"tool_response":{"stdout":"{\"id\": 7, \"name\": \"true\"}"}}"#,
        );
        assert_eq!(submitted_ids(&json), [7]);
        let other = hook(
            r#"{"tool_name":"Bash","tool_input":{"command":"ls"},"tool_response":{"stdout":"3\n"}}"#,
        );
        assert!(submitted_ids(&other).is_empty());
        let edit = hook(
            r#"{"tool_name":"Edit","tool_input":{"command":"baton submit"},"tool_response":{"stdout":"3"}}"#,
        );
        assert!(submitted_ids(&edit).is_empty());
        let workflow = hook(
            r#"{"tool_name":"Bash","tool_input":{"command":"baton workflow submit p.yaml"},"tool_response":{"stdout":"4\n"}}"#,
        );
        assert!(submitted_ids(&workflow).is_empty());
    }
}
