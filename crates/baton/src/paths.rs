//! Where baton keeps its state and where clients find the daemon (DESIGN §2).

use std::path::{Path, PathBuf};

/// The system daemon's socket, open to every local user (peer credentials decide who may do what).
pub const SYSTEM_SOCKET: &str = "/run/baton/baton.sock";
/// The system daemon's state directory unless `BATON_HOME` says otherwise.
pub const SYSTEM_HOME: &str = "/var/lib/baton";

/// The state directory: `BATON_HOME`, else `$XDG_DATA_HOME/baton`, else `~/.local/share/baton`.
pub fn user_home() -> PathBuf {
    if let Some(home) = non_empty_env("BATON_HOME") {
        return PathBuf::from(home);
    }
    if let Some(data) = non_empty_env("XDG_DATA_HOME") {
        return Path::new(&data).join("baton");
    }
    let home = non_empty_env("HOME").unwrap_or_else(|| "/tmp".into());
    Path::new(&home).join(".local/share/baton")
}

/// The socket a client talks to: `BATON_SOCKET`; else the one in an explicit `BATON_HOME`; else
/// the system daemon's if one runs; else the user's own.
pub fn client_socket() -> PathBuf {
    if let Some(sock) = non_empty_env("BATON_SOCKET") {
        return PathBuf::from(sock);
    }
    if non_empty_env("BATON_HOME").is_none() && Path::new(SYSTEM_SOCKET).exists() {
        return PathBuf::from(SYSTEM_SOCKET);
    }
    user_home().join("baton.sock")
}

fn non_empty_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The per-job directory: output, launch description, supervisor and exit records.
pub fn job_dir(home: &Path, id: u64) -> PathBuf {
    home.join("jobs").join(id.to_string())
}

/// A workflow's directory: its summary report (and, under Slurm, its batch script).
pub fn workflow_dir(home: &Path, id: u64) -> PathBuf {
    home.join("workflows").join(id.to_string())
}

/// Where a workflow's summary report is stored.
pub fn workflow_report(home: &Path, id: u64) -> PathBuf {
    workflow_dir(home, id).join("report.md")
}

/// `batond`, the whole of baton, beside the running binary (itself, when that is `batond`); by
/// name in PATH when there is none beside it.
pub fn batond() -> PathBuf {
    let me = std::env::current_exe().unwrap_or_default();
    if me.file_name().is_some_and(|n| n == "batond") {
        return me;
    }
    let beside = me.with_file_name("batond");
    if beside.is_file() {
        beside
    } else {
        PathBuf::from("batond")
    }
}

/// `baton`, the front end people and agents run, beside the running binary (itself, when none
/// is beside it): what is written into an agent's settings.
pub fn front() -> PathBuf {
    let me = std::env::current_exe().unwrap_or_default();
    let beside = me.with_file_name("baton");
    if me.file_name().is_some_and(|n| n != "baton") && beside.is_file() {
        beside
    } else {
        me
    }
}
