//! `--notify SPEC`: parsing the channel specs of DESIGN §5 and resolving them, with the agent
//! context captured at submit time, into the concrete channels a job's report goes to. Pure: the
//! same inputs give the same channels, and the daemon stores the result with the job.

use serde::{Deserialize, Serialize};

use crate::api::AgentContext;

/// One place a report is delivered to, with everything needed to reach it later (when the
/// submitting shell is long gone).
///
/// The session channels of a job (`claude`, `claude-hook`, `codex`, `tmux`) all reach the agent
/// session that submitted it, so they form one chain, in order: the first is tried, and each
/// later one only when the one before it did not reach the agent (it was noted, held, refused,
/// skipped or failed). A session is woken once per event. The others (`file`, `cmd`,
/// `webhook`) are records and bridges, delivered independently.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Channel {
    /// Claude Code's per-session inbox socket.
    Claude {
        socket: String,
        /// A secret: stored in the 0600 database, never printed or returned.
        token: String,
        session: Option<String>,
        /// Known beforehand: the session would hold or refuse a message from baton.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        inbound: Option<Inbound>,
    },
    /// `baton agent wait-hook`, the Claude Code hook, delivers the report itself (it prints it
    /// and exits 2, which starts a turn) where the inbox cannot. The hook process (`pid`, with
    /// its start time against pid reuse) claimed the job; the daemon only waits for its word.
    #[serde(rename = "claude-hook")]
    ClaudeHook {
        session: String,
        pid: u32,
        started: u64,
    },
    /// `codex queue --thread THREAD`.
    Codex { thread: String },
    /// Typed into a tmux pane; `server` is the `$TMUX` socket the pane lives on.
    Tmux {
        pane: String,
        server: Option<String>,
    },
    /// HTTP POST of the report: its JSON, or its text as Slack's or Telegram's webhooks take
    /// it (`slack:URL`, `telegram:URL?chat_id=ID`).
    Webhook {
        url: String,
        #[serde(default, skip_serializing_if = "WebhookFormat::is_json")]
        format: WebhookFormat,
    },
    /// A command run with the report on stdin.
    Cmd { command: String },
    /// Appended to a file.
    File { path: String },
}

/// What a webhook is sent: the report JSON (`webhook:`), or the report's text the way Slack's
/// incoming webhooks (`slack:`) or Telegram's `sendMessage` (`telegram:`) take it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    #[default]
    Json,
    Slack,
    Telegram,
}

impl WebhookFormat {
    fn is_json(&self) -> bool {
        *self == WebhookFormat::Json
    }

    /// The spec's prefix: `webhook`, `slack`, `telegram`.
    pub fn prefix(self) -> &'static str {
        match self {
            WebhookFormat::Json => "webhook",
            WebhookFormat::Slack => "slack",
            WebhookFormat::Telegram => "telegram",
        }
    }
}

/// The chat a `telegram:` URL posts to (its `chat_id` parameter), if it names one.
pub fn telegram_chat(url: &str) -> Option<&str> {
    let (_, query) = url.split_once('?')?;
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix("chat_id="))
        .filter(|id| !id.is_empty())
}

impl Channel {
    /// The spec as shown to people and returned by the API: secrets omitted, and a webhook
    /// shown by scheme and host only, since its path often is the secret (Slack, Discord).
    pub fn public_spec(&self) -> String {
        match self {
            Channel::Claude {
                session, inbound, ..
            } => {
                let spec = match session {
                    Some(id) => format!("claude:{id}"),
                    None => "claude".into(),
                };
                match inbound {
                    Some(Inbound::Held { .. }) => format!("{spec} (held)"),
                    Some(Inbound::Refused { .. }) => format!("{spec} (refused)"),
                    None => spec,
                }
            }
            Channel::ClaudeHook { session, .. } => format!("claude-hook:{session}"),
            Channel::Codex { thread } => format!("codex:{thread}"),
            Channel::Tmux { pane, .. } => format!("tmux:{pane}"),
            Channel::Webhook { url, format } => {
                let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
                let host = rest.split(['/', '?', '#']).next().unwrap_or("");
                // Credentials in the authority (user:pass@host) are secrets too.
                let host = host.rsplit('@').next().unwrap_or(host);
                format!("{}:{scheme}://{host}/…", format.prefix())
            }
            Channel::Cmd { command } => format!("cmd:{command}"),
            Channel::File { path } => format!("file:{path}"),
        }
    }

    /// The channel's kind: `claude`, `codex`, `tmux`, `webhook`, `cmd`, `file`.
    pub fn kind(&self) -> &'static str {
        match self {
            Channel::Claude { .. } => "claude",
            Channel::ClaudeHook { .. } => "claude-hook",
            Channel::Codex { .. } => "codex",
            Channel::Tmux { .. } => "tmux",
            Channel::Webhook { format, .. } => format.prefix(),
            Channel::Cmd { .. } => "cmd",
            Channel::File { .. } => "file",
        }
    }

    /// Channels that type into, or queue for, a live agent session: the links of the job's
    /// wake chain. When none of them reaches the session the report must still reach the inbox
    /// file.
    pub fn is_session(&self) -> bool {
        matches!(
            self,
            Channel::Claude { .. }
                | Channel::ClaudeHook { .. }
                | Channel::Codex { .. }
                | Channel::Tmux { .. }
        )
    }
}

/// Debug output ends up in logs and panic messages: it shows what `public_spec` shows (no inbox
/// token, no webhook path), plus the details that are no secret.
impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Channel::Claude {
                socket,
                session,
                inbound,
                ..
            } => f
                .debug_struct("Claude")
                .field("socket", socket)
                .field("token", &"<secret>")
                .field("session", session)
                .field("inbound", inbound)
                .finish(),
            Channel::ClaudeHook {
                session,
                pid,
                started,
            } => f
                .debug_struct("ClaudeHook")
                .field("session", session)
                .field("pid", pid)
                .field("started", started)
                .finish(),
            Channel::Codex { thread } => f.debug_struct("Codex").field("thread", thread).finish(),
            Channel::Tmux { pane, server } => f
                .debug_struct("Tmux")
                .field("pane", pane)
                .field("server", server)
                .finish(),
            Channel::Webhook { .. } => f.debug_tuple("Webhook").field(&self.public_spec()).finish(),
            Channel::Cmd { command } => f.debug_struct("Cmd").field("command", command).finish(),
            Channel::File { path } => f.debug_struct("File").field("path", path).finish(),
        }
    }
}

impl Channel {
    /// Whether delivering through this channel can start a turn in the agent session (a
    /// `claude` channel whose session holds or refuses messages cannot).
    pub fn can_wake(&self) -> bool {
        self.is_session()
            && !matches!(
                self,
                Channel::Claude {
                    inbound: Some(_),
                    ..
                }
            )
    }
}

pub use crate::api::Inbound;

/// A spec that cannot be honoured, worded for the person or agent who wrote it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("--notify {spec}: {problem}")]
pub struct SpecError {
    pub spec: String,
    pub problem: String,
}

const KINDS: &str = "auto, claude, codex[:THREAD], tmux[:PANE], webhook:URL, slack:URL, telegram:URL?chat_id=ID, \
     cmd:COMMAND, file:PATH";

/// Resolves `specs` (empty means `auto`) into channels, best first, without duplicates.
/// `inbox` is the default `file` target of `auto`; relative `file:` paths are taken from `cwd`.
pub fn resolve(
    specs: &[String],
    ctx: &AgentContext,
    inbox: &str,
    cwd: &str,
) -> Result<Vec<Channel>, SpecError> {
    let auto = ["auto".to_string()];
    let specs = if specs.is_empty() { &auto[..] } else { specs };
    let mut out: Vec<Channel> = Vec::new();
    let mut push = |c: Channel| {
        if !out.contains(&c) {
            out.push(c);
        }
    };
    for spec in specs {
        let err = |problem: String| SpecError {
            spec: spec.clone(),
            problem,
        };
        let (kind, arg) = match spec.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (spec.as_str(), None),
        };
        match (kind, arg) {
            ("auto", None) => {
                if let Some(c) = claude(ctx) {
                    push(c);
                }
                if let Some(thread) = &ctx.codex_thread {
                    push(Channel::Codex {
                        thread: thread.clone(),
                    });
                }
                if let Some(pane) = &ctx.tmux_pane {
                    push(Channel::Tmux {
                        pane: pane.clone(),
                        server: tmux_server(ctx),
                    });
                }
                push(Channel::File {
                    path: inbox.to_string(),
                });
            }
            ("claude", None) => push(claude(ctx).ok_or_else(|| {
                err("this environment has no CLAUDE_CODE_MESSAGING_SOCKET and \
                     CLAUDE_CODE_MESSAGING_TOKEN (Claude Code sets them in sessions that accept \
                     messages); use --notify auto to pick what is available"
                    .into())
            })?),
            ("codex", None) => {
                let thread = ctx.codex_thread.clone().ok_or_else(|| {
                    err("CODEX_THREAD_ID is not set (not inside a Codex session?); \
                         name the thread: --notify codex:THREAD"
                        .into())
                })?;
                push(Channel::Codex { thread })
            }
            ("codex", Some(thread)) => {
                if thread.is_empty()
                    || !thread
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    return Err(err(format!("{thread:?} is not a Codex thread id")));
                }
                push(Channel::Codex {
                    thread: thread.to_string(),
                })
            }
            ("tmux", None) => {
                let pane = ctx.tmux_pane.clone().ok_or_else(|| {
                    err("TMUX_PANE is not set (not inside tmux?); name the pane: \
                         --notify tmux:%3"
                        .into())
                })?;
                push(Channel::Tmux {
                    pane,
                    server: tmux_server(ctx),
                })
            }
            ("tmux", Some(pane)) => {
                if pane.is_empty() || pane.starts_with('-') || pane.chars().any(char::is_control) {
                    return Err(err(format!("{pane:?} is not a tmux pane (e.g. %3)")));
                }
                push(Channel::Tmux {
                    pane: pane.to_string(),
                    server: tmux_server(ctx),
                })
            }
            (kind @ ("webhook" | "slack" | "telegram"), Some(url)) => {
                let valid = (url.starts_with("http://") || url.starts_with("https://"))
                    && url.split("://").nth(1).is_some_and(|r| !r.is_empty())
                    && !url.chars().any(|c| c.is_whitespace() || c.is_control());
                if !valid {
                    return Err(err("expected an http:// or https:// URL".into()));
                }
                let format = match kind {
                    "slack" => WebhookFormat::Slack,
                    "telegram" => WebhookFormat::Telegram,
                    _ => WebhookFormat::Json,
                };
                if format == WebhookFormat::Telegram && telegram_chat(url).is_none() {
                    return Err(err("expected the bot's sendMessage URL with the chat: \
                         https://api.telegram.org/botTOKEN/sendMessage?chat_id=ID"
                        .into()));
                }
                push(Channel::Webhook {
                    url: url.to_string(),
                    format,
                })
            }
            ("cmd", Some(command)) => {
                if command.trim().is_empty() {
                    return Err(err("expected a command after cmd:".into()));
                }
                push(Channel::Cmd {
                    command: command.to_string(),
                })
            }
            ("file", Some(path)) => {
                if path.is_empty() || path.contains('\0') {
                    return Err(err("expected a file path after file:".into()));
                }
                let path = if path.starts_with('/') {
                    path.to_string()
                } else {
                    format!("{}/{path}", cwd.trim_end_matches('/'))
                };
                push(Channel::File { path })
            }
            ("webhook" | "cmd" | "file", None) => {
                return Err(err(format!("{kind} needs a target: {kind}:…")));
            }
            _ => return Err(err(format!("unknown channel; expected one of {KINDS}"))),
        }
    }
    Ok(out)
}

fn claude(ctx: &AgentContext) -> Option<Channel> {
    Some(Channel::Claude {
        socket: ctx.claude_socket.clone()?,
        token: ctx.claude_token.clone()?,
        session: ctx.claude_session.clone(),
        inbound: ctx.claude_inbound.clone(),
    })
}

/// The server socket from `$TMUX` (`socket,pid,session`), so delivery reaches the same server
/// even when it is not the default one.
fn tmux_server(ctx: &AgentContext) -> Option<String> {
    let tmux = ctx.tmux.as_deref()?;
    let socket = tmux.split(',').next()?;
    (!socket.is_empty()).then(|| socket.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn agent() -> AgentContext {
        AgentContext {
            claude_session: Some("s-1".into()),
            claude_socket: Some("/run/user/1/cc-socks/9.sock".into()),
            claude_token: Some("0123456789abcdef0123456789abcdef".into()),
            claude_inbound: None,
            codex_thread: None,
            tmux: Some("/tmp/tmux-1/default,77,0".into()),
            tmux_pane: Some("%3".into()),
        }
    }

    #[test]
    fn auto_picks_every_possible_channel_best_first_and_always_the_inbox() {
        let got = resolve(&[], &agent(), "/h/inbox.md", "/w").unwrap();
        let shown: Vec<String> = got.iter().map(Channel::public_spec).collect();
        assert_eq!(shown, ["claude:s-1", "tmux:%3", "file:/h/inbox.md"]);
        assert_eq!(
            got[1],
            Channel::Tmux {
                pane: "%3".into(),
                server: Some("/tmp/tmux-1/default".into())
            }
        );
        let plain = resolve(&specs(&["auto"]), &AgentContext::default(), "/h/i.md", "/w").unwrap();
        assert_eq!(
            plain,
            [Channel::File {
                path: "/h/i.md".into()
            }]
        );
    }

    #[test]
    fn a_session_known_to_hold_messages_keeps_its_inbox_but_it_cannot_wake() {
        let held = AgentContext {
            claude_inbound: Some(Inbound::Held {
                why: "bypass".into(),
            }),
            ..agent()
        };
        let got = resolve(&[], &held, "/h/inbox.md", "/w").unwrap();
        let shown: Vec<String> = got.iter().map(Channel::public_spec).collect();
        assert_eq!(shown, ["claude:s-1 (held)", "tmux:%3", "file:/h/inbox.md"]);
        assert!(!got[0].can_wake() && got[0].is_session());
        assert!(got[1].can_wake());
        assert!(!got[2].can_wake());
    }

    #[test]
    fn explicit_specs_resolve_and_duplicates_collapse() {
        let got = resolve(
            &specs(&[
                "cmd:notify-send done",
                "file:out/inbox.md",
                "file:/w/out/inbox.md",
                "codex:0199a-b",
            ]),
            &AgentContext::default(),
            "/h/inbox.md",
            "/w",
        )
        .unwrap();
        assert_eq!(
            got,
            [
                Channel::Cmd {
                    command: "notify-send done".into()
                },
                Channel::File {
                    path: "/w/out/inbox.md".into()
                },
                Channel::Codex {
                    thread: "0199a-b".into()
                },
            ]
        );
    }

    #[test]
    fn secrets_never_appear_in_public_specs() {
        let got = resolve(
            &specs(&[
                "claude",
                "webhook:https://bob:pw@hooks.example.com/T000/B000/XXXX?x=1",
            ]),
            &agent(),
            "/h/inbox.md",
            "/w",
        )
        .unwrap();
        let shown: Vec<String> = got.iter().map(Channel::public_spec).collect();
        assert_eq!(shown, ["claude:s-1", "webhook:https://hooks.example.com/…"]);
        for s in &shown {
            assert!(!s.contains("0123456789abcdef") && !s.contains("XXXX") && !s.contains("pw"));
        }
    }

    #[test]
    fn debug_output_keeps_the_secrets_out() {
        let got = resolve(
            &specs(&["claude", "webhook:https://hooks.example.com/T000/B000/XXXX"]),
            &agent(),
            "/h/inbox.md",
            "/w",
        )
        .unwrap();
        let shown = format!("{got:?}");
        assert!(
            !shown.contains("0123456789abcdef") && !shown.contains("XXXX"),
            "{shown}"
        );
        assert!(
            shown.contains("s-1") && shown.contains("hooks.example.com"),
            "{shown}"
        );
    }

    #[test]
    fn impossible_specs_say_what_is_missing() {
        let none = AgentContext::default();
        let e = resolve(&specs(&["claude"]), &none, "/i", "/w").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--notify claude: this environment has no CLAUDE_CODE_MESSAGING_SOCKET"
            ),
            "{e}"
        );
        let e = resolve(&specs(&["tmux"]), &none, "/i", "/w").unwrap_err();
        assert!(e.problem.contains("TMUX_PANE is not set"), "{e}");
        let e = resolve(&specs(&["pager"]), &none, "/i", "/w").unwrap_err();
        assert!(e.problem.contains("expected one of auto, claude"), "{e}");
        let e = resolve(&specs(&["webhook:ftp://x"]), &none, "/i", "/w").unwrap_err();
        assert!(e.problem.contains("http:// or https://"), "{e}");
        let e = resolve(&specs(&["file"]), &none, "/i", "/w").unwrap_err();
        assert!(e.problem.contains("file needs a target"), "{e}");
        let e = resolve(&specs(&["tmux:-t"]), &none, "/i", "/w").unwrap_err();
        assert!(e.problem.contains("not a tmux pane"), "{e}");
    }

    #[test]
    fn session_prefers_claude_then_codex_then_tmux() {
        assert_eq!(agent().session().as_deref(), Some("claude:s-1"));
        let codex = AgentContext {
            codex_thread: Some("t-9".into()),
            tmux_pane: Some("%1".into()),
            ..AgentContext::default()
        };
        assert_eq!(codex.session().as_deref(), Some("codex:t-9"));
        assert_eq!(AgentContext::default().session(), None);
        let tmux = AgentContext {
            tmux: Some("/tmp/tmux-1/default,77,0".into()),
            tmux_pane: Some("%1".into()),
            ..AgentContext::default()
        };
        assert_eq!(
            tmux.session().as_deref(),
            Some("tmux:%1@/tmp/tmux-1/default")
        );
    }
}
