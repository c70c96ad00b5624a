//! Reading other processes from `/proc`: what a process runs, who its parent is (and what runs
//! below it), when it started, what the foreground of its terminal is. The wake-up channels use it to tell an agent
//! from a shell or a REPL, and a live session (or hook) from a pid that was reused.

use std::path::{Path, PathBuf};

/// The fields of `/proc/PID/stat` we use. The process name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
struct Stat {
    parent: u32,
    /// The terminal's foreground process group (`tpgid`), or -1 without a terminal.
    terminal_group: i32,
    /// Clock ticks after boot.
    started: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // `rest` starts at field 3 (state): ppid is field 4, tpgid 8, starttime 22.
    Some(Stat {
        parent: fields.get(1)?.parse().ok()?,
        terminal_group: fields.get(5)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
    })
}

/// When `pid` started (clock ticks after boot): with the pid, it names one process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.started)
}

/// Whether the process that had `started` as its start time is still `pid` and not a zombie.
pub fn is_alive(pid: u32, started: u64) -> bool {
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| t.rfind(')').map(|i| t[i + 2..].starts_with('Z')))
        .unwrap_or(true);
    !zombie && start_time(pid) == Some(started)
}

pub fn parent(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.parent).filter(|&p| p != 0)
}

/// The argument vector of `pid` (empty for kernel threads and zombies).
pub fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

pub fn cwd(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

/// The processes in the foreground process group of the terminal `pid` is attached to (for a
/// tmux pane's first process: whatever runs in the pane now).
pub fn terminal_foreground(pid: u32) -> Vec<u32> {
    let Some(group) = stat(pid).map(|s| s.terminal_group).filter(|&g| g > 0) else {
        return Vec::new();
    };
    all_pids()
        .into_iter()
        .filter(|&p| process_group(p) == Some(group))
        .collect()
}

fn process_group(pid: u32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    rest.split(' ').nth(2)?.parse().ok()
}

/// Every live process below `ancestor`, parents before their children.
pub fn descendants(ancestor: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = all_pids()
        .into_iter()
        .filter_map(|pid| Some((pid, parent(pid)?)))
        .collect();
    let mut below = vec![ancestor];
    let mut i = 0;
    while i < below.len() {
        let of = below[i];
        below.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == of)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    below.remove(0);
    below
}

pub fn all_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The file name of a path, without the extensions an interpreter's script carries.
pub fn program_name(path: &str) -> &str {
    let name = Path::new(path)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(path);
    for ext in [".js", ".mjs", ".cjs", ".ts", ".py"] {
        if let Some(stem) = name.strip_suffix(ext) {
            return stem;
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_seen_as_it_is() {
        let me = std::process::id();
        let started = start_time(me).unwrap();
        assert!(is_alive(me, started));
        assert!(!is_alive(me, started + 1));
        assert_eq!(parent(me), Some(std::os::unix::process::parent_id()));
        assert!(!cmdline(me).unwrap().is_empty());
        assert_eq!(
            program_name("/usr/lib/node_modules/x/bin/codex.js"),
            "codex"
        );
        assert_eq!(program_name("claude"), "claude");
    }
}
