//! `claude`: Claude Code's per-session inbox socket (DESIGN §5). Newline-delimited JSON: an auth
//! line with the session's token, then one user message; an idle session starts a turn with it,
//! a busy one reads it between tool calls. The socket exists only while the session runs, so a
//! missing or refusing socket means the session is gone.
//!
//! Claude Code closes the connection the same way whether it passed the message on, held it for
//! a person (a bypass-permissions session, where a sender that is not its child and does not
//! attest bypass mode is held) or refused it (`crossSessionInbound = "refuse"`). What it does
//! offer (2.1.332) are receipts: a sender that names a reply socket of its own in the session's
//! `cc-socks` folder (`from`) gets `peer_message_status` lines there when the message is held,
//! refused or dropped; an accepted message gets none. So baton listens there for a moment after
//! sending, and records `delivered` only after that silence.
//!
//! baton does not attest a permission mode (`from-mode="bypass"` would make a bypass session
//! accept it): it has none, and the check exists to keep other processes from steering an
//! unattended session. In such sessions the hook delivers instead (`daemon/hook.rs`).

use std::io::ErrorKind;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use super::{Inbound, Message, Outcome};

/// How long silence on the reply socket takes to mean "accepted": a hold or refusal receipt
/// comes within milliseconds of the message.
const RECEIPT_WAIT: Duration = Duration::from_millis(1500);

pub async fn deliver(socket: &str, token: &str, msg: &Message) -> Outcome {
    // A session that stopped reading (suspended, stuck) must not hold the delivery for good.
    match tokio::time::timeout(Duration::from_secs(10), send(socket, token, msg)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(format!("{socket} did not take the message within 10 s")),
    }
}

/// The reply socket, removed when dropped.
struct ReplySocket {
    path: std::path::PathBuf,
    listener: UnixListener,
}

impl Drop for ReplySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Binds the reply socket beside the session's own: the same name for the same message, so a
/// message sent again after a daemon crash comes from the same sender and Claude Code drops it
/// as a duplicate instead of starting a second turn.
fn reply_socket(socket: &str, msg: &Message) -> Option<ReplySocket> {
    let dir = std::path::Path::new(socket).parent()?;
    let tag = msg.end.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let path = dir.join(format!("baton-{}-{:08x}.sock", msg.job, tag as u32));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).ok()?;
    Some(ReplySocket { path, listener })
}

/// `uds:PATH`, with what Claude Code's address syntax does not allow percent-encoded.
fn address(path: &std::path::Path) -> String {
    let mut out = String::from("uds:");
    for b in path.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b":_/.-".contains(b) {
            out.push(*b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn message_id() -> String {
    let mut bytes = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut bytes);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
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
    let reply = reply_socket(socket, msg);
    let msg_id = message_id();
    let auth = serde_json::json!({"type": "auth", "token": token});
    let mut message = serde_json::json!({
        "msgV": 1,
        "msg_id": msg_id,
        "type": "user",
        "message": {"role": "user", "content": msg.text},
        "priority": "next",
    });
    if let Some(reply) = &reply {
        message["from"] = address(&reply.path).into();
    }
    let lines = format!("{auth}\n{message}\n");
    if let Err(e) = stream.write_all(lines.as_bytes()).await {
        return Outcome::Failed(format!("sending to {socket}: {e}"));
    }
    let _ = stream.shutdown().await;
    match reply {
        Some(reply) => match tokio::time::timeout(RECEIPT_WAIT, receipt(&reply, &msg_id)).await {
            Ok(Some(outcome)) => outcome,
            // Silence: accepted, and on its way to the model.
            _ => Outcome::Delivered,
        },
        // No reply socket (the folder is not ours to write in): written whole is all we know.
        None => Outcome::Delivered,
    }
}

/// The first receipt for `msg_id` on the reply socket, as an outcome.
async fn receipt(reply: &ReplySocket, msg_id: &str) -> Option<Outcome> {
    loop {
        let (conn, _) = reply.listener.accept().await.ok()?;
        let mut lines = BufReader::new(conn).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(outcome) = outcome_of_receipt(&line, msg_id) {
                return Some(outcome);
            }
        }
    }
}

/// What a `peer_message_status` line says of our message, if it is about it. Pure.
pub fn outcome_of_receipt(line: &str, msg_id: &str) -> Option<Outcome> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v.get("action")?.as_str()? != "peer_message_status"
        || v.get("orig_msg_id").and_then(|m| m.as_str()) != Some(msg_id)
    {
        return None;
    }
    let reason = v
        .get("reason")
        .and_then(|r| r.as_str())
        .map(|r| super::tail_of(r.as_bytes(), 300))
        .unwrap_or_default();
    let detail = v.get("status_detail").and_then(|d| d.as_str());
    Some(match v.get("status")?.as_str()? {
        "delivered" => Outcome::Delivered,
        "held" => Outcome::Held(format!(
            "Claude Code holds it for a person to approve (a person may still deliver it from \
             its prompt): {reason}"
        )),
        "expired" if detail == Some("refused") => {
            Outcome::Refused(format!("Claude Code refused it: {reason}"))
        }
        "denied" | "expired" => {
            Outcome::Refused(format!("Claude Code did not pass it on: {reason}"))
        }
        "dropped" => {
            let why = v.get("drop_reason").and_then(|d| d.as_str()).unwrap_or("");
            if why.contains("duplicate") {
                // The same message from the same sender, taken before (a resend after a crash).
                Outcome::Delivered
            } else {
                Outcome::Failed(format!("Claude Code dropped it ({why}): {reason}"))
            }
        }
        _ => return None,
    })
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
    fn receipts_say_held_refused_or_dropped_and_only_for_our_message() {
        let receipt = |status: &str, extra: &str| {
            format!(
                r#"{{"type":"control","action":"peer_message_status","status":"{status}","reason":"r","orig_msg_id":"m-1"{extra}}}"#
            )
        };
        assert!(matches!(
            outcome_of_receipt(&receipt("held", ""), "m-1"),
            Some(Outcome::Held(_))
        ));
        assert!(matches!(
            outcome_of_receipt(&receipt("expired", r#","status_detail":"refused""#), "m-1"),
            Some(Outcome::Refused(_))
        ));
        assert!(matches!(
            outcome_of_receipt(&receipt("dropped", r#","drop_reason":"rate""#), "m-1"),
            Some(Outcome::Failed(_))
        ));
        assert_eq!(
            outcome_of_receipt(&receipt("dropped", r#","drop_reason":"duplicate""#), "m-1"),
            Some(Outcome::Delivered)
        );
        assert_eq!(outcome_of_receipt(&receipt("held", ""), "m-2"), None);
        assert_eq!(outcome_of_receipt("not json", "m-1"), None);
        assert_eq!(
            address(std::path::Path::new("/run/user/1/cc-socks/a b.sock")),
            "uds:/run/user/1/cc-socks/a%20b.sock"
        );
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
