//! Building the daemon's requests from what a caller asked for and where it asks from: this
//! process's environment and file-creation mask (which jobs run with), the working directory,
//! the agent session the request speaks for, and a submission's request id. The CLI and the MCP
//! server each turn their own arguments into these inputs; everything a request carries about
//! its caller is filled in here, once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::{AgentContext, CancelRequest, SubmitRequest, WaitRequest, WorkflowSubmitRequest};

/// Why a request is not sent: what the caller gave cannot be right (the CLI's exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("working directory {}: {error}", dir.display())]
    WorkingDirectory { dir: PathBuf, error: std::io::Error },
    #[error("{} is not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error("--stdin {}: {error}", path.display())]
    Stdin {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A job as its caller asked for it: everything in a submission but what [`submit_request`]
/// adds about the caller. No `Debug`: its environment may hold secrets.
pub struct Job {
    pub command: Vec<String>,
    pub name: Option<String>,
    pub gpus: u32,
    pub gpu_mem: Option<u64>,
    pub cpus: Option<u32>,
    pub mem: Option<u64>,
    pub priority: i64,
    pub after: Vec<u64>,
    pub after_any: Vec<u64>,
    pub after_failed: Vec<u64>,
    pub singleton: bool,
    pub begin_at_ms: Option<i64>,
    pub hold: bool,
    /// The reservation to run in (`--reservation NAME`).
    pub reservation: Option<String>,
    /// Its checkpoint signal, `SIG[@SECS]` (`--signal`).
    pub signal: Option<String>,
    /// A file the job reads as stdin, as the caller gave it (made absolute here).
    pub stdin: Option<PathBuf>,
    /// Mid-run detectors that end it as failed (`--stop-on`).
    pub stop_on: Vec<String>,
    /// Milestones while it runs: lines and conditions that wake its submitter (`--wake-on`,
    /// `--wake-when`), conditions recorded only (`--note-when`) or that stop it
    /// (`--stop-when`).
    pub wake_on: Vec<String>,
    pub wake_when: Vec<String>,
    pub note_when: Vec<String>,
    pub stop_when: Vec<String>,
    pub wake_every_ms: Option<i64>,
    pub time_limit_ms: Option<i64>,
    pub retries: u32,
    pub tags: BTreeMap<String, String>,
    pub notify: Vec<String>,
    pub request_id: Option<String>,
    /// Where it runs, as the caller gave it; a relative path is taken from this process's
    /// directory.
    pub cwd: PathBuf,
    /// Variables on top of this process's environment.
    pub env: BTreeMap<String, String>,
}

/// The submission for `job`, sent on behalf of the agent session `context`: its working
/// directory made absolute (and checked to be one, so that a typo is refused here, not when the
/// job starts), and this process's environment and umask, which the job runs with.
pub fn submit_request(job: Job, context: AgentContext) -> Result<SubmitRequest, RequestError> {
    let cwd = working_directory(&job.cwd)?;
    let mut env = captured_env();
    env.extend(job.env);
    Ok(SubmitRequest {
        command: job.command,
        name: job.name,
        gpus: job.gpus,
        gpu_mem: job.gpu_mem,
        cpus: job.cpus,
        mem: job.mem,
        priority: job.priority,
        after: job.after,
        after_any: job.after_any,
        after_failed: job.after_failed,
        singleton: job.singleton,
        begin_at_ms: job.begin_at_ms,
        hold: job.hold,
        reservation: job.reservation,
        signal: job.signal,
        stdin: match &job.stdin {
            Some(path) => Some(stdin_file(path)?.display().to_string()),
            None => None,
        },
        stop_on: job.stop_on,
        wake_on: job.wake_on,
        wake_when: job.wake_when,
        note_when: job.note_when,
        stop_when: job.stop_when,
        wake_every_ms: job.wake_every_ms,
        time_limit_ms: job.time_limit_ms,
        retries: job.retries,
        tags: job.tags,
        cwd: cwd.display().to_string(),
        env,
        umask: Some(current_umask()),
        notify: job.notify,
        context,
        request_id: job.request_id,
    })
}

/// The file a job reads as stdin: absolute, and one the caller can read (the daemon, maybe
/// root, opens it as the job's user; a file the caller cannot read is refused here).
fn stdin_file(path: &Path) -> Result<PathBuf, RequestError> {
    let bad = |error| RequestError::Stdin {
        path: path.to_path_buf(),
        error,
    };
    let absolute = path.canonicalize().map_err(bad)?;
    std::fs::File::open(&absolute).map_err(bad)?;
    if !absolute.is_file() {
        return Err(bad(std::io::Error::other("not a regular file")));
    }
    Ok(absolute)
}

fn working_directory(dir: &Path) -> Result<PathBuf, RequestError> {
    let cwd = dir
        .canonicalize()
        .map_err(|error| RequestError::WorkingDirectory {
            dir: dir.to_path_buf(),
            error,
        })?;
    if !cwd.is_dir() {
        return Err(RequestError::NotADirectory { dir: cwd });
    }
    Ok(cwd)
}

/// The submission of a workflow whose file ([`super::workflow::read`]) says `text`: `source`
/// names it in messages, `base_dir` is its directory (the tasks' working directory). Its tasks
/// run with this process's environment and umask.
pub fn workflow_request(
    source: String,
    text: String,
    base_dir: &Path,
    notify: Vec<String>,
    context: AgentContext,
) -> WorkflowSubmitRequest {
    WorkflowSubmitRequest {
        source,
        text,
        base_dir: base_dir.display().to_string(),
        env: captured_env(),
        umask: Some(current_umask()),
        notify,
        context,
    }
}

/// A wait for `ids`, for at most `timeout` (none: until they end), with their reports or not.
pub fn wait_request(ids: Vec<u64>, timeout: Option<Duration>, reports: bool) -> WaitRequest {
    WaitRequest {
        ids,
        timeout_ms: timeout.map(|t| t.as_millis() as i64),
        reports,
        unless_changed_from: Vec::new(),
    }
}

/// A cancel of `ids` on behalf of the agent session `context`: the daemon refuses a job another
/// session submitted unless `force`.
pub fn cancel_request(ids: Vec<u64>, force: bool, context: &AgentContext) -> CancelRequest {
    CancelRequest {
        ids,
        force,
        session: context.session(),
    }
}

/// The session whose jobs "mine" means: this agent session's, or outside any, `none` (the jobs
/// submitted outside every agent session).
pub fn mine(context: &AgentContext) -> String {
    context.session().unwrap_or_else(|| "none".into())
}

/// This process's file-creation mask, which jobs run with. It can only be read by setting it;
/// it is set straight back.
pub fn current_umask() -> u32 {
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    rustix::process::umask(old);
    old.bits()
}

/// This process's environment as a job gets it: every variable whose name and value are text and
/// that a process can be started with. `std::env::vars` would panic on one that is not UTF-8,
/// and the daemon refuses a name that is empty or holds `=` (a Windows-style `=C:` entry).
pub fn captured_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| !k.is_empty() && !k.contains('='))
        .collect()
}

/// The agent session this process runs in, read from its environment (empty values count as
/// unset): where a report can wake it, and which session owns the jobs it submits.
pub fn agent_context() -> AgentContext {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let claude_socket = var("CLAUDE_CODE_MESSAGING_SOCKET");
    let codex_thread = var("CODEX_THREAD_ID");
    // Under Codex's app-server daemon, `TMUX`/`TMUX_PANE` are the daemon's, inherited from
    // whichever TUI started it: possibly another session's pane. Not ours to type into.
    let tmux_is_ours = codex_thread.is_none() || !crate::notify::codex::under_app_server();
    AgentContext {
        claude_session: var("CLAUDE_CODE_SESSION_ID"),
        claude_inbound: claude_socket.as_deref().and_then(crate::notify::inbound_of),
        claude_socket,
        claude_token: var("CLAUDE_CODE_MESSAGING_TOKEN"),
        codex_thread,
        tmux: var("TMUX").filter(|_| tmux_is_ours),
        tmux_pane: var("TMUX_PANE").filter(|_| tmux_is_ours),
    }
}
