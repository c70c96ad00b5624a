//! `codex[:THREAD]`: `codex queue --thread THREAD --message TEXT`, which wakes an idle Codex
//! session with the message. `codex queue` refuses a thread that has no session file but does not
//! check that the session is still running (checked on 0.171.0), so we do.
//!
//! "The session is alive" means a Codex TUI still runs for the thread, where a person or agent
//! sees the turn. It is not "some process holds the thread's rollout file open": by default the
//! TUI starts a managed `codex app-server` daemon, which holds the file, runs the turns, and
//! outlives the TUI (it unloads an idle thread about 60 s later); a message queued after `/quit`
//! would run there with nobody watching. So (see docs/agents.md):
//! - a `codex` process other than the app-server holds the rollout: a TUI running without the
//!   daemon (`--disable daemon_auto_start`): alive;
//! - only the app-server holds it: alive if a Codex TUI (a `codex` process on a terminal, with no
//!   subcommand) runs on the same `CODEX_HOME`; with several TUIs on one home this cannot be told
//!   per thread, so a thread whose TUI quit less than a minute ago may still count;
//! - nobody holds it: the session is over.
//!
//! A thread whose session is over is `Gone`, and the next channel (or the inbox file) takes the
//! report.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{Message, Outcome, command_env, tail_of};

pub async fn deliver(thread: &str, msg: &Message) -> Outcome {
    let home = codex_home(msg);
    let Some(rollout) = find_rollout(&home.join("sessions"), thread) else {
        return Outcome::Gone(format!(
            "Codex has no session file for thread {thread} under {}",
            home.display()
        ));
    };
    if let Err(why) = session_alive(&rollout, &home) {
        return Outcome::Gone(format!(
            "the Codex session of thread {thread} has ended: {why}"
        ));
    }
    // Found through the submitter's PATH, as the submitter would run it.
    let program = msg
        .env
        .get("PATH")
        .and_then(|path| find_in_path("codex", path))
        .unwrap_or_else(|| PathBuf::from("codex"));
    let mut cmd = tokio::process::Command::new(program);
    command_env(&mut cmd, msg);
    cmd.env("CODEX_HOME", &home)
        .args(["queue", "--thread", thread, "--message", &msg.text])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(Duration::from_secs(30), cmd.output()).await {
        Err(_) => return Outcome::Failed("codex queue did not finish within 30s".into()),
        Ok(Err(e)) => return Outcome::Failed(format!("cannot run codex: {e}")),
        Ok(Ok(out)) => out,
    };
    if out.status.success() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        return match queued_id(&stdout) {
            Some(item) => taken(&home, &item, &rollout).await,
            None => Outcome::Delivered,
        };
    }
    let why = tail_of(&out.stderr, 300);
    if why.contains("no rollout found") {
        Outcome::Gone(format!("codex queue: {why}"))
    } else {
        Outcome::Failed(format!("codex queue exited with {}: {why}", out.status))
    }
}

/// How long baton watches a queued message: a TUI running without the daemon looks at its
/// queue every 10 s (0.171.0).
const TAKE_WAIT: Duration = Duration::from_secs(12);
const TAKE_LOOK: Duration = Duration::from_millis(200);

/// The id in `codex queue`'s answer, `Queued message <id> for thread <thread>.`
fn queued_id(stdout: &str) -> Option<String> {
    let rest = stdout.split("Queued message ").nth(1)?;
    let id = rest.split_whitespace().next()?;
    (!id.is_empty()).then(|| id.to_string())
}

/// Watches the queued message `item` until Codex takes it (it deletes the row of
/// `queue_1.sqlite` when the message's turn starts): taken is `Delivered`. A session that ends
/// with the message still queued never saw it: the message is withdrawn (it would run unwatched
/// on a later `codex resume`) and the delivery is `Gone`. Still queued after `TAKE_WAIT` in a
/// live session (a turn under way), it is taken when that turn ends: `Delivered`.
async fn taken(home: &Path, item: &str, rollout: &Path) -> Outcome {
    let db = home.join("queue_1.sqlite");
    let deadline = tokio::time::Instant::now() + TAKE_WAIT;
    loop {
        let queued = {
            let (db, item) = (db.clone(), item.to_string());
            tokio::task::spawn_blocking(move || still_queued(&db, &item))
                .await
                .unwrap_or(Ok(false))
        };
        match queued {
            Ok(false) => return Outcome::Delivered,
            Ok(true) => {}
            // Unreadable (locked, another schema): what `codex queue` said is all we know.
            Err(_) => return Outcome::Delivered,
        }
        if let Err(why) = session_alive(rollout, home) {
            let (db, owned) = (db.clone(), item.to_string());
            let withdrawn = tokio::task::spawn_blocking(move || withdraw(&db, &owned))
                .await
                .is_ok_and(|r| r.is_ok());
            return Outcome::Gone(format!(
                "the Codex session ended before it took the message ({why}){}",
                if withdrawn {
                    "; the message was withdrawn from its queue"
                } else {
                    ""
                }
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            return Outcome::Delivered;
        }
        tokio::time::sleep(TAKE_LOOK).await;
    }
}

fn still_queued(db: &Path, item: &str) -> rusqlite::Result<bool> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_millis(500))?;
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM queued_items WHERE id = ?1)",
        [item],
        |r| r.get(0),
    )
}

fn withdraw(db: &Path, item: &str) -> rusqlite::Result<()> {
    let conn = rusqlite::Connection::open(db)?;
    conn.busy_timeout(Duration::from_millis(500))?;
    conn.execute("DELETE FROM queued_items WHERE id = ?1", [item])?;
    Ok(())
}

/// `$CODEX_HOME` as the submitter had it, else `~/.codex`.
fn codex_home(msg: &Message) -> PathBuf {
    if let Some(home) = msg.env.get("CODEX_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    let home = msg.env.get("HOME").map(String::as_str).unwrap_or("/");
    Path::new(home).join(".codex")
}

/// `sessions/YYYY/MM/DD/rollout-<time>-<thread>.jsonl`.
fn find_rollout(sessions: &Path, thread: &str) -> Option<PathBuf> {
    let suffix = format!("-{thread}.jsonl");
    let mut stack = vec![(sessions.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && depth < 4 {
                stack.push((path, depth + 1));
            } else if kind.is_file()
                && entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
            {
                return Some(path);
            }
        }
    }
    None
}

/// Whether a Codex TUI still shows the thread whose rollout is `rollout` (the module's comment
/// says how that is told); the error says why not.
fn session_alive(rollout: &Path, home: &Path) -> Result<(), String> {
    let target = rollout
        .canonicalize()
        .unwrap_or_else(|_| rollout.to_path_buf());
    let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
    let mut held_by_daemon = false;
    let mut tui_on_home = false;
    for pid in crate::procinfo::all_pids() {
        let Some(args) = crate::procinfo::cmdline(pid) else {
            continue;
        };
        if !is_native_codex(pid) {
            continue;
        }
        let daemon = args.iter().any(|a| a == "app-server");
        if holds(pid, &target) {
            if !daemon {
                return Ok(());
            }
            held_by_daemon = true;
        }
        if !daemon && is_tui(pid, &args) && codex_home_of(pid).as_deref() == Some(&*home) {
            tui_on_home = true;
        }
    }
    match (held_by_daemon, tui_on_home) {
        (true, true) => Ok(()),
        (true, false) => Err(format!(
            "no Codex TUI runs on {}; only its background app-server still has the thread \
             loaded, and a turn it ran would be seen by nobody",
            home.display()
        )),
        _ => Err(format!("no running process has {} open", rollout.display())),
    }
}

/// Whether this process runs under Codex's managed app-server daemon (a command its model ran).
/// The daemon's environment, and so ours, is that of whichever TUI started it: its `TMUX_PANE`
/// may be another session's pane, or a pane that no longer exists.
pub fn under_app_server() -> bool {
    let mut pid = std::process::id();
    for _ in 0..64 {
        let Some(parent) = crate::procinfo::parent(pid) else {
            return false;
        };
        if is_native_codex(parent)
            && crate::procinfo::cmdline(parent).is_some_and(|a| a.iter().any(|a| a == "app-server"))
        {
            return true;
        }
        pid = parent;
    }
    false
}

/// Whether `pid` runs Codex's native binary (the TUI, its app-server, `codex queue`…), not
/// npm's node launcher.
fn is_native_codex(pid: u32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "codex"))
}

/// Whether `pid` has `file` open.
fn holds(pid: u32, file: &Path) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link == file))
}

/// Codex subcommands that are not the interactive TUI.
const NOT_TUI: &[&str] = &[
    "app-server",
    "exec",
    "e",
    "queue",
    "mcp",
    "mcp-server",
    "login",
    "logout",
    "apply",
    "sandbox",
    "debug",
    "completion",
    "cloud",
    "features",
];

/// A Codex TUI: a terminal on its stdin, and no subcommand that is something else.
fn is_tui(pid: u32, args: &[String]) -> bool {
    let on_terminal =
        std::fs::read_link(format!("/proc/{pid}/fd/0")).is_ok_and(|t| t.starts_with("/dev/pts/"));
    let subcommand = args.iter().skip(1).find(|a| !a.starts_with('-'));
    on_terminal && !subcommand.is_some_and(|s| NOT_TUI.contains(&s.as_str()))
}

/// The `CODEX_HOME` a Codex process runs with (default `$HOME/.codex`).
fn codex_home_of(pid: u32) -> Option<PathBuf> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let var = |name: &str| {
        environ.split(|&b| b == 0).find_map(|kv| {
            let kv = std::str::from_utf8(kv).ok()?;
            kv.strip_prefix(name)?.strip_prefix('=').map(str::to_string)
        })
    };
    let home = var("CODEX_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| Path::new(&h).join(".codex")))?;
    Some(home.canonicalize().unwrap_or(home))
}

fn find_in_path(program: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rollout_is_found_by_thread_and_seen_open_only_while_held() {
        let dir = tempfile::tempdir().unwrap();
        let day = dir.path().join("sessions/2026/11/30");
        std::fs::create_dir_all(&day).unwrap();
        let thread = "0199a213-81c0-7800-8aa1-bbab2a035a53";
        let file = day.join(format!("rollout-2026-11-30T11-00-00-{thread}.jsonl"));
        std::fs::write(&file, "{}\n").unwrap();
        assert_eq!(
            find_rollout(&dir.path().join("sessions"), thread),
            Some(file.clone())
        );
        assert_eq!(find_rollout(&dir.path().join("sessions"), "other"), None);
        let me = std::process::id();
        assert!(!holds(me, &file));
        let held = std::fs::File::open(&file).unwrap();
        assert!(holds(me, &file));
        // Held by a process that is not Codex: no session.
        assert!(session_alive(&file, dir.path()).is_err());
        drop(held);
        assert!(!holds(me, &file));
    }

    #[test]
    fn the_queued_message_is_named_by_codex_queue() {
        assert_eq!(
            queued_id("Queued message 7f3e-11 for thread 0199a.\n").as_deref(),
            Some("7f3e-11")
        );
        assert_eq!(queued_id("something else"), None);
    }

    #[test]
    fn only_an_interactive_codex_counts_as_a_tui() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // This test's stdin is no terminal, so even a bare `codex` is not a TUI here.
        let me = std::process::id();
        assert!(!is_tui(me, &args(&["codex"])));
        assert!(NOT_TUI.contains(&"app-server") && NOT_TUI.contains(&"queue"));
    }
}
