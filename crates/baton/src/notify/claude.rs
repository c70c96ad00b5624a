//! `claude`: Claude Code's per-session inbox socket (DESIGN §5). Newline-delimited JSON: an auth
//! line with the session's token, then one user message; an idle session starts a turn with it,
//! a busy one reads it between tool calls. The socket exists only while the session runs, so a
//! missing or refusing socket means the session is gone.

use std::io::ErrorKind;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use super::{Inbound, Message, Outcome};

pub async fn deliver(socket: &str, token: &str, msg: &Message) -> Outcome {
    // A session that stopped reading (suspended, stuck) must not hold the delivery for good.
    match tokio::time::timeout(std::time::Duration::from_secs(10), send(socket, token, msg)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(format!("{socket} did not take the message within 10 s")),
    }
}

async fn send(socket: &str, token: &str, msg: &Message) -> Outcome {
    let mut stream = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            return Outcome::Gone(format!(
                "the Claude Code session's inbox {socket} is gone ({e})"
            ));
        }
        Err(e) => return Outcome::Failed(format!("cannot connect to {socket}: {e}")),
    };
    let auth = serde_json::json!({"type": "auth", "token": token});
    let message = serde_json::json!({
        "type": "user",
        "message": {"role": "user", "content": msg.text},
    });
    let lines = format!("{auth}\n{message}\n");
    if let Err(e) = stream.write_all(lines.as_bytes()).await {
        return Outcome::Failed(format!("sending to {socket}: {e}"));
    }
    let _ = stream.shutdown().await;
    // Written whole: that is the delivery, recorded now. Claude Code answers a message it held
    // or refused the same way as one it passed on (it closes the connection), so waiting for a
    // reply would learn nothing, and would leave a window in which a stopping daemon forgets a
    // message it did send and sends it again after its restart.
    Outcome::Delivered
}

/// The hook that claimed a job delivers its report itself and then records it; until then the
/// daemon only checks that the hook still runs. A hook that is gone (its session quit) leaves
/// the report to the next channel.
pub fn hook_alive(pid: u32, started: u64) -> Outcome {
    if crate::procinfo::is_alive(pid, started) {
        Outcome::Waiting(format!("the Claude Code hook (pid {pid}) delivers it"))
    } else {
        Outcome::Gone(format!(
            "the Claude Code hook (pid {pid}) ended before it delivered the report (the session \
             is over)"
        ))
    }
}

/// Whether the Claude Code session that owns `socket` (`cc-socks/<pid>.sock`) would hold or
/// refuse a message from baton, from its command line and its settings files. Run by the client
/// at submit, inside the session (its environment, its files).
pub fn inbound_of(socket: &str) -> Option<Inbound> {
    let pid: u32 = std::path::Path::new(socket)
        .file_stem()?
        .to_str()?
        .parse()
        .ok()?;
    let args = crate::procinfo::cmdline(pid)?;
    let settings = read_settings(crate::procinfo::cwd(pid).as_deref());
    let bypass =
        bypasses_permissions(&args) || default_mode(&settings) == Some("bypassPermissions");
    decide(bypass, &settings)
}

/// The same, from the hook's side: its stdin says the session's permission mode as of the
/// call (`permission_mode`), and `project` (its `cwd`) where the project's settings are.
pub fn inbound_for_hook(
    permission_mode: Option<&str>,
    project: Option<&std::path::Path>,
) -> Option<Inbound> {
    let settings = read_settings(project);
    let mode = permission_mode.or(default_mode(&settings));
    decide(mode == Some("bypassPermissions"), &settings)
}

/// Whether the Claude Code settings that apply here install baton's hook
/// (`baton agent wait-hook`, as `baton agent setup claude` writes it).
pub fn hook_installed() -> bool {
    let project = std::env::current_dir().ok();
    read_settings(project.as_deref()).iter().any(|s| {
        s.get("disableAllHooks").and_then(|d| d.as_bool()) != Some(true)
            && s.get("hooks")
                .and_then(|h| h.get("PostToolUse"))
                .is_some_and(|p| p.to_string().contains("agent wait-hook"))
    })
}

fn read_settings(project: Option<&std::path::Path>) -> Vec<serde_json::Value> {
    settings_files(project)
        .into_iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            serde_json::from_str::<serde_json::Value>(&text).ok()
        })
        .collect()
}

/// `permissions.defaultMode` from the most binding file that sets it.
fn default_mode(settings: &[serde_json::Value]) -> Option<&str> {
    settings
        .iter()
        .find_map(|s| s.get("permissions")?.get("defaultMode")?.as_str())
}

/// Claude Code's settings files, most binding first: managed, the project's local and shared
/// files, the user's.
fn settings_files(project: Option<&std::path::Path>) -> Vec<std::path::PathBuf> {
    let mut files = vec![std::path::PathBuf::from(
        "/etc/claude-code/managed-settings.json",
    )];
    if let Some(dir) = project {
        files.push(dir.join(".claude/settings.local.json"));
        files.push(dir.join(".claude/settings.json"));
    }
    let config = std::env::var_os("CLAUDE_CONFIG_DIR")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".claude")));
    if let Some(config) = config {
        files.push(config.join("settings.json"));
    }
    files
}

/// The decision from whether the session bypasses permissions and from its settings (most
/// binding first). Pure.
pub fn decide(bypass: bool, settings: &[serde_json::Value]) -> Option<Inbound> {
    let cross = settings
        .iter()
        .find_map(|s| s.get("crossSessionInbound")?.as_str());
    match cross {
        Some("refuse") => Some(Inbound::Refused {
            why: "the session's settings say crossSessionInbound = \"refuse\": Claude Code turns \
                  messages from other processes away"
                .into(),
        }),
        Some("hold") => Some(Inbound::Held {
            why: "the session's settings say crossSessionInbound = \"hold\": Claude Code keeps \
                  messages from other processes for a person to approve"
                .into(),
        }),
        _ if bypass => Some(Inbound::Held { why: BYPASS.into() }),
        _ => None,
    }
}

/// What a bypass-permissions session does with baton's message (seen on 2.1.332).
pub const BYPASS: &str = "the session runs with bypassPermissions: Claude Code keeps messages \
                          from processes that are not its own children for a person to approve";

fn bypasses_permissions(args: &[String]) -> bool {
    args.iter().enumerate().any(|(i, a)| {
        a == "--dangerously-skip-permissions"
            || a == "--permission-mode=bypassPermissions"
            || (a == "--permission-mode"
                && args.get(i + 1).map(String::as_str) == Some("bypassPermissions"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_session_that_would_hold_or_refuse_is_recognised() {
        let json = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        assert!(!bypasses_permissions(&args(&["claude"])));
        assert!(bypasses_permissions(&args(&[
            "claude",
            "--dangerously-skip-permissions"
        ])));
        assert!(bypasses_permissions(&args(&[
            "claude",
            "--permission-mode",
            "bypassPermissions"
        ])));
        assert!(!bypasses_permissions(&args(&[
            "claude",
            "--permission-mode",
            "plan"
        ])));
        assert_eq!(decide(false, &[]), None);
        assert!(matches!(decide(true, &[]), Some(Inbound::Held { .. })));
        let bypass_default = json(r#"{"permissions":{"defaultMode":"bypassPermissions"}}"#);
        assert_eq!(
            default_mode(&[json("{}"), bypass_default]),
            Some("bypassPermissions")
        );
        // The most binding file decides: a project's "refuse" over the user's "accept".
        let refuse = json(r#"{"crossSessionInbound":"refuse"}"#);
        let accept = json(r#"{"crossSessionInbound":"accept"}"#);
        assert!(matches!(
            decide(false, &[refuse.clone(), accept.clone()]),
            Some(Inbound::Refused { .. })
        ));
        assert_eq!(decide(false, &[accept, refuse]), None);
        assert!(matches!(
            decide(false, &[json(r#"{"crossSessionInbound":"hold"}"#)]),
            Some(Inbound::Held { .. })
        ));
    }
}
