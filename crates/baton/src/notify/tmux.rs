//! `tmux[:PANE]`: types the message into the pane where the agent runs (DESIGN §5). The text goes
//! in through a paste buffer (bracketed paste, so a TUI takes it as one block, and nothing in it
//! is interpreted as tmux keys), then, after a pause, Enter as a separate key: agent TUIs treat an
//! Enter that arrives with the paste as part of it. A look at the pane afterwards shows whether
//! the text still sits unsent in the input box, and Enter is retried a bounded number of times.
//!
//! Only a pane whose foreground program is a known coding agent is typed into. An agent is known
//! by what the process runs, not only by its name: npm starts Codex, Gemini CLI and others as
//! `node /usr/…/bin/codex` (tmux then names the pane's program `node`), so an interpreter counts
//! when the script it runs is an agent's. Any other program (a shell, `ssh`, `sudo -s`, a bare
//! `node` or Python REPL, an editor) could take the text as commands or keys, so its pane gets a
//! status-line note with the report's path instead, which is `noted`, not `delivered`: it wakes
//! no agent, and the next channel takes over.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

#[cfg(test)]
use super::end_marker;
use super::{Message, Outcome, tail_of};

/// Between the paste and Enter: Claude Code and Codex take a faster Enter as part of the paste.
const ENTER_DELAY: Duration = Duration::from_millis(500);
/// Between Enter and the look at the pane.
const SETTLE: Duration = Duration::from_millis(300);
const ENTER_RETRIES: usize = 3;

/// Programs that take typed text as a message to a model, not as commands. `node` is not here:
/// a Node REPL would run the text (see `INTERPRETERS`).
pub const AGENTS: &[&str] = &[
    "claude",
    "codex",
    "gemini",
    "aider",
    "opencode",
    "goose",
    "amp",
    "crush",
    "qwen",
    "cursor-agent",
];

/// Programs that run an agent when given its script (npm's launchers), and only then.
const INTERPRETERS: &[&str] = &["node", "nodejs", "bun", "deno"];

fn is_interpreter(name: &str) -> bool {
    INTERPRETERS.contains(&name)
        || name
            .strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// npm packages whose launcher scripts are agents, however the script is named.
const AGENT_PACKAGES: &[&str] = &[
    "/@openai/codex/",
    "/@anthropic-ai/claude-code/",
    "/@google/gemini-cli/",
    "/@qwen-code/qwen-code/",
    "/@sourcegraph/amp/",
    "/opencode-ai/",
];

/// Whether a process with this argument vector is a coding agent.
pub fn runs_agent(args: &[String]) -> bool {
    let Some(program) = args.first() else {
        return false;
    };
    let name = crate::procinfo::program_name(program);
    if AGENTS.contains(&name) {
        return true;
    }
    if !is_interpreter(name) {
        return false;
    }
    // The script is the first argument that is not an option; `node -e CODE` and a bare REPL
    // run no script file.
    let mut rest = args[1..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-e" | "--eval" | "-p" | "--print" | "-c" | "-m" | "-i" | "--interactive" => {
                return false;
            }
            "-r" | "--require" | "--import" | "--loader" => {
                rest.next();
            }
            a if a.starts_with('-') => {}
            script => {
                return AGENTS.contains(&crate::procinfo::program_name(script))
                    || AGENT_PACKAGES.iter().any(|p| script.contains(p));
            }
        }
    }
    false
}

/// Whether whatever runs in the foreground of the pane whose first process is `pane_pid` is an
/// agent: tmux's name for it first, then what the foreground processes run.
fn pane_runs_agent(current_command: &str, pane_pid: Option<u32>) -> bool {
    if AGENTS.contains(&current_command) {
        return true;
    }
    let Some(pid) = pane_pid else {
        return false;
    };
    crate::procinfo::terminal_foreground(pid)
        .into_iter()
        .filter_map(crate::procinfo::cmdline)
        .any(|args| runs_agent(&args))
}

struct Tmux<'a> {
    server: Option<&'a str>,
}

impl Tmux<'_> {
    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("tmux");
        if let Some(server) = self.server {
            cmd.arg("-S").arg(server);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs tmux; its stdout, or its complaint.
    async fn run(&self, args: &[&str]) -> Result<String, String> {
        self.run_with_input(args, None).await
    }

    async fn run_with_input(&self, args: &[&str], input: Option<&str>) -> Result<String, String> {
        let mut cmd = self.command(args);
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot run tmux: {e}"))?;
        if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
            stdin
                .write_all(text.as_bytes())
                .await
                .map_err(|e| format!("tmux {}: {e}", args[0]))?;
        }
        let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
            .await
            .map_err(|_| format!("tmux {} did not answer within 10s", args[0]))?
            .map_err(|e| format!("tmux {}: {e}", args[0]))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(tail_of(&out.stderr, 300))
        }
    }
}

pub async fn deliver(pane: &str, server: Option<&str>, msg: &Message) -> Outcome {
    let tmux = Tmux { server };
    let foreground = match tmux
        .run(&[
            "display-message",
            "-p",
            "-t",
            pane,
            "#{pane_id} #{pane_pid} #{pane_current_command}",
        ])
        .await
    {
        Ok(out) => out.trim().to_string(),
        // No server, no such pane: the session this pane belonged to is over.
        Err(e)
            if e.contains("can't find")
                || e.contains("no server")
                || e.contains("error connecting")
                || e.contains("No such file") =>
        {
            return Outcome::Gone(format!("tmux pane {pane} is gone: {e}"));
        }
        Err(e) => return Outcome::Failed(e),
    };
    // A pane that has closed, on a server that still runs, is no error to tmux: it prints an
    // empty line (tmux 3.3). Only the pane's own id says it is still there.
    let mut fields = foreground.splitn(3, ' ');
    let (pane_id, pane_pid, current_command) = (
        fields.next().unwrap_or(""),
        fields.next().unwrap_or(""),
        fields.next().unwrap_or(""),
    );
    if pane_id.is_empty() || (pane.starts_with('%') && pane_id != pane) {
        return Outcome::Gone(format!("tmux pane {pane} is gone"));
    }
    if !pane_runs_agent(current_command, pane_pid.parse().ok()) {
        let note = format!(
            "baton: job {} ended ({}); report at {}",
            msg.job, msg.state, msg.report_path
        );
        return match tmux
            .run(&["display-message", "-d", "15000", "-t", pane, &note])
            .await
        {
            Ok(_) => Outcome::Noted(format!(
                "pane {pane} runs {current_command:?}, not an agent: only a status-line note \
                 was shown there"
            )),
            Err(e) => Outcome::Failed(e),
        };
    }
    let buffer = format!("baton-job-{}", msg.job);
    if let Err(e) = tmux
        .run_with_input(&["load-buffer", "-b", &buffer, "-"], Some(&msg.text))
        .await
    {
        return Outcome::Failed(e);
    }
    if let Err(e) = tmux
        .run(&["paste-buffer", "-p", "-d", "-b", &buffer, "-t", pane])
        .await
    {
        return Outcome::Failed(e);
    }
    let marker = msg.end.clone();
    for _ in 0..=ENTER_RETRIES {
        tokio::time::sleep(ENTER_DELAY).await;
        if let Err(e) = tmux.run(&["send-keys", "-t", pane, "Enter"]).await {
            return Outcome::Failed(e);
        }
        tokio::time::sleep(SETTLE).await;
        match tmux.run(&["capture-pane", "-p", "-t", pane]).await {
            Ok(screen) if still_unsent(&screen, &marker) => continue,
            // Taken, or the pane cannot be read back: the text and an Enter did go in.
            _ => return Outcome::Delivered,
        }
    }
    // The text is in the pane; pasting it again would only make a second copy.
    Outcome::Delivered
}

/// Whether the bottom of the pane (where agent TUIs keep their input box) still shows the
/// message's last line, or a collapsed paste, after Enter.
fn still_unsent(screen: &str, marker: &str) -> bool {
    let bottom: Vec<&str> = screen
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    bottom
        .iter()
        .any(|l| l.contains(marker) || l.contains("[Pasted text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_are_known_by_what_they_run_and_repls_are_not_agents() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(runs_agent(&args(&["claude", "--debug"])));
        assert!(runs_agent(&args(&["/usr/bin/codex"])));
        assert!(runs_agent(&args(&[
            "node",
            "/usr/bin/codex",
            "--disable",
            "x"
        ])));
        assert!(runs_agent(&args(&[
            "node",
            "--no-warnings",
            "/usr/lib/node_modules/@openai/codex/bin/codex.js"
        ])));
        assert!(runs_agent(&args(&[
            "node",
            "/opt/x/@google/gemini-cli/dist/index.js"
        ])));
        assert!(!runs_agent(&args(&["node"])));
        assert!(!runs_agent(&args(&["node", "-i"])));
        assert!(!runs_agent(&args(&["node", "-e", "require('codex')"])));
        assert!(!runs_agent(&args(&["node", "server.js"])));
        assert!(!runs_agent(&args(&["python3", "train.py"])));
        assert!(!runs_agent(&args(&["python3.11", "-q"])));
        assert!(runs_agent(&args(&[
            "/usr/bin/python3.11",
            "/opt/bin/aider"
        ])));
        assert!(!runs_agent(&args(&["pythonista", "/opt/bin/aider"])));
        assert!(!runs_agent(&args(&["bash"])));
        assert!(!runs_agent(&[]));
    }

    #[test]
    fn an_input_box_still_holding_the_message_is_seen() {
        let marker = end_marker(7);
        let sent = "> [baton] job 7 ended\n  ...\n  [end of baton report for job 7]\n\n⏺ Reading the report\n\n╭──────╮\n│ >    │\n╰──────╯\n  ? for shortcuts\n";
        assert!(!still_unsent(sent, &marker));
        let unsent =
            "⏺ done\n\n╭──────╮\n│ > ...lines\n│ [end of baton report for job 7] │\n╰──────╯\n";
        assert!(still_unsent(unsent, &marker));
        assert!(still_unsent("│ > [Pasted text #1 +40 lines] │\n", &marker));
    }
}
