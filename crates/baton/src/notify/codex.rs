//! `codex[:THREAD]`: `codex queue --thread THREAD --message TEXT`, which wakes an idle Codex
//! session with the message. `codex queue` refuses a thread that has no session file but does not
//! check that the session is still running (checked on 0.171.0), so we do: some live process must
//! hold the thread's rollout file open. A thread whose session is over is `Gone`, and the report
//! goes to the inbox file instead.

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
    if !held_open(&rollout) {
        return Outcome::Gone(format!(
            "the Codex session of thread {thread} has ended (no running process has {} open)",
            rollout.display()
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
        return Outcome::Delivered;
    }
    let why = tail_of(&out.stderr, 300);
    if why.contains("no rollout found") {
        Outcome::Gone(format!("codex queue: {why}"))
    } else {
        Outcome::Failed(format!("codex queue exited with {}: {why}", out.status))
    }
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

/// Whether any process we can see has `file` open (`/proc/PID/fd/*` links to it).
fn held_open(file: &Path) -> bool {
    let target = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    for proc_entry in procs.flatten() {
        let name = proc_entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(proc_entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|link| link == target) {
                return true;
            }
        }
    }
    false
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
        assert!(!held_open(&file));
        let held = std::fs::File::open(&file).unwrap();
        assert!(held_open(&file));
        drop(held);
        assert!(!held_open(&file));
    }
}
