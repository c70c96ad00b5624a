//! The protocol between clients (CLI, and later MCP and the web page) and the daemon: plain serde
//! types and the route paths, nothing else. Every route into the daemon speaks these types, so a
//! feature is written once.

pub mod client;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The API version prefix; a breaking change gets a new one.
pub const PREFIX: &str = "/v1";

/// What `Debug` shows of an environment: its variable names, never their values (they may be
/// tokens, keys, passwords).
pub struct EnvNames<'a>(pub &'a BTreeMap<String, String>);

impl std::fmt::Debug for EnvNames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// Why a Claude Code session will not start a turn for a message on its inbox socket, learnt
/// from its settings, its command line or its hook.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum Inbound {
    /// Kept for a person to approve (bypass-permissions sessions, `crossSessionInbound =
    /// "hold"`).
    Held { why: String },
    /// Turned away (`crossSessionInbound = "refuse"`).
    Refused { why: String },
}

/// `POST /v1/jobs`: queue a job.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    pub command: Vec<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub gpus: u32,
    /// Bytes per GPU; `None` asks for whole GPUs.
    #[serde(default)]
    pub gpu_mem: Option<u64>,
    /// Cores; `None`: the daemon's default (`[resources] default_cpus`).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// Bytes of the machine's memory; `None`: the daemon's default (none reserved).
    #[serde(default)]
    pub mem: Option<u64>,
    #[serde(default)]
    pub priority: i64,
    /// Start after these jobs succeed.
    #[serde(default)]
    pub after: Vec<u64>,
    /// Start after these jobs end, whatever their result.
    #[serde(default)]
    pub after_any: Vec<u64>,
    /// Start only if these jobs do not succeed (Slurm's `afternotok`).
    #[serde(default)]
    pub after_failed: Vec<u64>,
    /// Start only after every earlier job of the same name and owner has ended.
    #[serde(default)]
    pub singleton: bool,
    /// Start no earlier than this (ms since the epoch; the client parses `--begin`).
    #[serde(default)]
    pub begin_at_ms: Option<i64>,
    /// Queue it held: it starts only after `baton release`.
    #[serde(default)]
    pub hold: bool,
    /// Run it in this reservation (`--reservation NAME`): within its window, on its GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// Its checkpoint signal, `SIG[@SECS]` (`--signal`): SIG comes SECS (default 60) before its
    /// time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Absolute path of a file the job reads as its stdin (else /dev/null).
    #[serde(default)]
    pub stdin: Option<String>,
    /// Mid-run detectors (`nan`, `error`) that end the job as failed when they fire
    /// (`--stop-on`), instead of waking its submitter and letting it run.
    #[serde(default)]
    pub stop_on: Vec<String>,
    /// Wake its submitter, while it runs, at the first line matching each pattern
    /// (`--wake-on REGEX`) and the first parsed metric meeting each condition (`--wake-when
    /// 'val_acc>=0.9'`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wake_on: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wake_when: Vec<String>,
    /// Record, without waking anyone, the first parsed metric meeting each condition
    /// (`--note-when`); end the job as failed at the first meeting each (`--stop-when`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub note_when: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_when: Vec<String>,
    /// A short progress digest this often while it runs (`--wake-every`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_every_ms: Option<i64>,
    #[serde(default)]
    pub time_limit_ms: Option<i64>,
    #[serde(default)]
    pub retries: u32,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Absolute working directory.
    pub cwd: String,
    /// The submitter's environment, captured at submit time.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The submitter's file-creation mask; the job runs with it.
    #[serde(default)]
    pub umask: Option<u32>,
    /// Where to deliver the report when the job ends (DESIGN §5); empty means `auto`.
    #[serde(default)]
    pub notify: Vec<String>,
    /// The agent session the submitter runs in, read from the submitter's environment.
    #[serde(default)]
    pub context: AgentContext,
    /// An idempotency key (also the `Idempotency-Key` header): a repeat with the same key from
    /// the same user returns the job the first one queued instead of queuing another.
    #[serde(default)]
    pub request_id: Option<String>,
}

/// Every field, named (a new one cannot be left out unnoticed), the environment by name only.
impl std::fmt::Debug for SubmitRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let SubmitRequest {
            command,
            name,
            gpus,
            gpu_mem,
            cpus,
            mem,
            priority,
            after,
            after_any,
            after_failed,
            singleton,
            begin_at_ms,
            hold,
            reservation,
            signal,
            stdin,
            stop_on,
            wake_on,
            wake_when,
            note_when,
            stop_when,
            wake_every_ms,
            time_limit_ms,
            retries,
            tags,
            cwd,
            env,
            umask,
            notify,
            context,
            request_id,
        } = self;
        f.debug_struct("SubmitRequest")
            .field("command", command)
            .field("name", name)
            .field("gpus", gpus)
            .field("gpu_mem", gpu_mem)
            .field("cpus", cpus)
            .field("mem", mem)
            .field("priority", priority)
            .field("after", after)
            .field("after_any", after_any)
            .field("after_failed", after_failed)
            .field("singleton", singleton)
            .field("begin_at_ms", begin_at_ms)
            .field("hold", hold)
            .field("reservation", reservation)
            .field("signal", signal)
            .field("stdin", stdin)
            .field("stop_on", stop_on)
            .field("wake_on", wake_on)
            .field("wake_when", wake_when)
            .field("note_when", note_when)
            .field("stop_when", stop_when)
            .field("wake_every_ms", wake_every_ms)
            .field("time_limit_ms", time_limit_ms)
            .field("retries", retries)
            .field("tags", tags)
            .field("cwd", cwd)
            .field("env", &EnvNames(env))
            .field("umask", umask)
            .field("notify", notify)
            .field("context", context)
            .field("request_id", request_id)
            .finish()
    }
}

/// What the submitting environment says about the agent session it runs in: where a report can
/// wake it, and which session owns the job. Captured by the client from its own environment.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentContext {
    /// `CLAUDE_CODE_SESSION_ID`.
    #[serde(default)]
    pub claude_session: Option<String>,
    /// `CLAUDE_CODE_MESSAGING_SOCKET`: the session's inbox socket.
    #[serde(default)]
    pub claude_socket: Option<String>,
    /// `CLAUDE_CODE_MESSAGING_TOKEN`: a secret; stored 0600, never returned.
    #[serde(default)]
    pub claude_token: Option<String>,
    /// Whether the session's inbox would hold or refuse baton's message, as the client found
    /// from the session's settings and command line (`notify::inbound_of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_inbound: Option<Inbound>,
    /// `CODEX_THREAD_ID`.
    #[serde(default)]
    pub codex_thread: Option<String>,
    /// `TMUX`: the tmux server's socket, pid and session.
    #[serde(default)]
    pub tmux: Option<String>,
    /// `TMUX_PANE`, e.g. `%3`.
    #[serde(default)]
    pub tmux_pane: Option<String>,
}

/// The Claude Code inbox token is shown only as whether there is one.
impl std::fmt::Debug for AgentContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let AgentContext {
            claude_session,
            claude_socket,
            claude_token,
            claude_inbound,
            codex_thread,
            tmux,
            tmux_pane,
        } = self;
        f.debug_struct("AgentContext")
            .field("claude_session", claude_session)
            .field("claude_socket", claude_socket)
            .field("claude_token", &claude_token.as_ref().map(|_| "<secret>"))
            .field("claude_inbound", claude_inbound)
            .field("codex_thread", codex_thread)
            .field("tmux", tmux)
            .field("tmux_pane", tmux_pane)
            .finish()
    }
}

impl AgentContext {
    /// The agent session this context belongs to, as shown in job objects: `claude:ID`,
    /// `codex:THREAD` or `tmux:PANE@SOCKET` (pane ids repeat across tmux servers, so the server
    /// is part of it); none for a plain shell outside tmux.
    pub fn session(&self) -> Option<String> {
        if let Some(id) = &self.claude_session {
            return Some(format!("claude:{id}"));
        }
        if let Some(thread) = &self.codex_thread {
            return Some(format!("codex:{thread}"));
        }
        let pane = self.tmux_pane.as_ref()?;
        let server = self
            .tmux
            .as_deref()
            .and_then(|t| t.split(',').next())
            .filter(|s| !s.is_empty());
        Some(match server {
            Some(server) => format!("tmux:{pane}@{server}"),
            None => format!("tmux:{pane}"),
        })
    }
}

/// The job object of DESIGN §3, plus a few fields beyond the contract.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: u64,
    pub name: String,
    pub state: baton_core::JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub gpus: Vec<u32>,
    pub command: Vec<String>,
    pub cwd: String,
    pub owner: String,
    pub priority: i64,
    pub submitted_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub reason: Option<String>,
    pub workflow_id: Option<u64>,
    /// GPUs asked for (the allocation is `gpus`).
    pub gpus_requested: u32,
    /// Bytes per GPU for shared jobs; null for whole GPUs.
    pub gpu_mem: Option<u64>,
    /// Cores reserved.
    #[serde(default)]
    pub cpus: u32,
    /// Bytes of the machine's memory reserved (0: none).
    #[serde(default)]
    pub mem: u64,
    pub time_limit_ms: Option<i64>,
    pub retries: u32,
    /// Attempts started so far (0 while never started).
    pub attempt: u32,
    pub after: Vec<u64>,
    pub after_any: Vec<u64>,
    /// Runs only if these do not succeed.
    #[serde(default)]
    pub after_failed: Vec<u64>,
    /// Who holds it (`baton hold`); it starts only once released.
    #[serde(default)]
    pub held_by: Option<String>,
    /// It starts no earlier than this (RFC 3339; `--begin`).
    #[serde(default)]
    pub begin_at: Option<String>,
    /// The reservation it runs in (`--reservation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// Its checkpoint signal and how long before its time limit it comes: `SIGUSR1@60`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_signal: Option<String>,
    /// The file it reads as stdin (`--stdin`); null: /dev/null.
    #[serde(default)]
    pub stdin: Option<String>,
    pub tags: BTreeMap<String, String>,
    /// Where the report goes when the job ends, as channel specs with secrets omitted.
    pub notify: Vec<String>,
    /// The agent session that submitted the job (`claude:ID`, `codex:THREAD`, `tmux:PANE`).
    pub session: Option<String>,
    /// The job's task name in its workflow.
    #[serde(default)]
    pub task: Option<String>,
    /// For a queued job just submitted: how many queued jobs are ahead of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<usize>,
    /// For a queued job (in `status` listings, and when just submitted): the latest it should
    /// start if every job ahead runs to its time limit (RFC 3339); absent when no bound exists
    /// (a job in the way has no time limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_start: Option<String>,
    /// For a queued job in `status` listings: when it is expected to start if the running
    /// jobs whose progress the viewer may see end when their progress says (their ETA), the
    /// others at their time limits (RFC 3339). An estimate, not a bound; absent unless earlier
    /// than `predicted_start` (or where that has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<String>,
    /// Under the Slurm backend: the Slurm job id of its current attempt, the nodes it runs
    /// on, and Slurm's state for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_job_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_nodes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_state: Option<String>,
    /// Whether one of the job's channels can wake the agent session that submitted it (a
    /// Claude Code inbox, a Codex thread, a tmux pane). When false, nothing will: its report only
    /// lands in files or goes to webhooks and commands, and an agent must wait for it itself
    /// (`baton wait ID`, run in the background).
    #[serde(default)]
    pub wakes_caller: bool,
    /// The sweep or array it is a run of, and its index there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_index: Option<u32>,
    /// Another user's job, seen on a shared daemon: its command, working directory, tags,
    /// channels and session are left out (empty).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
    /// Its mid-run alerts, every attempt's, oldest first: shown when the job is asked for by
    /// id (`baton status ID`, MCP `job_status`), and only to whoever may act on it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alerts: Vec<AlertView>,
    /// How far a running job has got, from the counters it prints (`step 400/1000`, a tqdm
    /// bar), and when it should end at the pace so far: only a job baton follows, once it
    /// printed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressView>,
}

/// A running job's progress (`JobView::progress`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressView {
    /// The counters it printed last, most telling first: `step 400/1000, epoch 2/10`.
    pub counters: String,
    /// 0 to 1, by its steps, else its epochs, else its bar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// The time left at the pace so far, and when that is (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<String>,
}

/// A mid-run alert (`baton_core::midrun`) of a job, and how its deliveries went.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertView {
    pub attempt: u32,
    /// `nan`, `error`, `stall`, `finished-but-alive`, `milestone-N`, `digest`.
    pub detector: String,
    /// Its number among the attempt's alerts of this detector, from 1 (a stall raised again
    /// after the job printed again, each digest).
    #[serde(default = "one")]
    pub seq: u32,
    /// `wake` (sent through the job's channels) or `note` (recorded only).
    pub action: String,
    /// When what it tells of was first seen (RFC 3339).
    pub seen_at: String,
    /// The output line that showed it (sanitized; program output, untrusted).
    pub evidence: String,
    /// Where its message is stored.
    pub path: String,
    pub deliveries: Vec<AlertDelivery>,
}

fn one() -> u32 {
    1
}

/// One channel an alert went to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AlertDelivery {
    pub channel: String,
    pub state: DeliveryState,
}

/// `GET /v1/jobs?ids=1,2&all=true` and `GET /v1/history`: the named jobs, or the queue.
///
/// Without ids, filters or `all`, the listing is the bounded default view: every active job
/// and the last few that ended (`[daemon] recent`, `recent_shown`), with [`MORE_HEADER`]
/// saying how many ended jobs it leaves out. With filters or `all`, it is every job they
/// select, newest first, one page at a time: at most `limit` (at most [`PAGE_MAX`]) per
/// answer, the next page asked for with `before` set to [`NEXT_HEADER`]'s value.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ListQuery {
    /// Comma-separated ids; empty for the default listing.
    #[serde(default)]
    pub ids: Option<String>,
    /// Every job the store holds, not only active and recently ended ones.
    #[serde(default)]
    pub all: bool,
    /// Only jobs submitted from this agent session (`status --mine`); `none` for jobs
    /// submitted outside any agent session.
    #[serde(default)]
    pub session: Option<String>,
    /// Comma-separated states (`failed,timeout`), or `active`, `ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The job's name, a glob (`sweep-*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Comma-separated owners (user names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Jobs not ended before this time: a duration before now (`1d`), a date (`2026-11-30`)
    /// or an RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Jobs submitted at or before this time (same forms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Tasks of this workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<u64>,
    /// At most this many jobs in this answer (at most [`PAGE_MAX`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Only jobs with ids below this one: the cursor of the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
}

/// The most jobs one listing answer holds; clients follow [`NEXT_HEADER`] for the rest.
pub const PAGE_MAX: usize = 1_000;

/// The header of a listing answer that has more pages: the `before` of the next one.
pub const NEXT_HEADER: &str = "baton-next-before";

/// The header of a default listing: how many ended jobs it leaves out.
pub const MORE_HEADER: &str = "baton-more-ended";

/// One page of a listing, as the client reads it.
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// The `before` of the next page, when there is one.
    pub next_before: Option<u64>,
    /// For the default view: the ended jobs it leaves out.
    pub more_ended: Option<u64>,
}

/// `GET /v1/history`: one row per job, as `baton history` shows it (sacct-like).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryView {
    pub id: u64,
    pub name: String,
    pub state: baton_core::JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub owner: String,
    pub submitted_at: String,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// From submission to its (last attempt's) start, or to now or its end if it never started.
    pub wait_ms: i64,
    /// From its (last attempt's) start to its end, or to now while it runs; null if it never
    /// started.
    pub run_ms: Option<i64>,
    /// GPUs asked for, and per GPU the memory for shared jobs.
    pub gpus_requested: u32,
    pub gpu_mem: Option<u64>,
    /// The GPUs it ran (or runs) on.
    pub gpus: Vec<u32>,
    /// Mean utilisation of its GPUs over the monitor's samples of its last attempt, in percent;
    /// null without samples (no GPUs, shorter than one sample, another user's job).
    pub gpu_util_pct: Option<f64>,
    pub attempt: u32,
    pub workflow_id: Option<u64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
}

/// `GET /v1/gc?older_than=7d` and `POST /v1/gc?older_than=7d`: retention with a shorter
/// window than `[retention]`'s, this once (for rows and outputs alike).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GcQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub older_than: Option<String>,
}

/// `GET /v1/gc` (what retention would remove now) and `POST /v1/gc` (remove it now).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GcReport {
    /// Whether nothing was removed (the dry run).
    pub dry_run: bool,
    /// The windows applied (`90d`, `30d`).
    pub keep_jobs: String,
    pub keep_outputs: String,
    /// Job rows removed (with their events, deliveries and GPU usage).
    pub jobs: u64,
    pub events: u64,
    pub deliveries: u64,
    pub gpu_usage_rows: u64,
    /// Ended jobs old enough to go but kept: an active job depends on them or their workflow
    /// is still active.
    pub kept_back: u64,
    /// Output files removed (`stdout`, `stderr` of jobs past `keep_outputs`, and whole job
    /// directories of removed rows) and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Ended workflows removed (all their tasks gone).
    pub workflows: u64,
    /// When retention next has something to remove (RFC 3339).
    pub next_due: String,
}

/// `POST /v1/wait`: block until every named job has ended, or the timeout passes.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    pub ids: Vec<u64>,
    #[serde(default)]
    pub timeout_ms: Option<i64>,
    /// Also return the report of each job that ended.
    #[serde(default)]
    pub reports: bool,
    /// The states the caller last saw, in the order of `ids`: the answer comes (with `done`
    /// false) as soon as one differs, so a terminal's spinner can show each change as it
    /// happens. Empty: only when every job has ended.
    #[serde(default)]
    pub unless_changed_from: Vec<baton_core::JobState>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WaitResponse {
    /// False when the timeout passed first.
    pub done: bool,
    pub jobs: Vec<JobView>,
    /// With `reports`: the markdown report of each ended job, in the order of `jobs`.
    #[serde(default)]
    pub reports: Vec<Option<String>>,
    /// With `reports`: each report's headline (`job 7 "train" failed after 2m: ValueError…`).
    #[serde(default)]
    pub headlines: Vec<Option<String>>,
}

/// `GET /v1/jobs/{id}/report`: the end-of-run report (DESIGN §4).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ReportResponse {
    /// What `baton report ID` prints; also `jobs/<id>/report.md`.
    pub markdown: String,
    /// The structured report; also `jobs/<id>/report.json`.
    pub report: baton_core::report::Report,
    /// Where the markdown is stored.
    pub path: String,
    /// How the report went out through each channel.
    pub deliveries: Vec<DeliveryView>,
}

/// How one channel's delivery of a report stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryState {
    /// Not delivered yet; tried again at `next_at`.
    Pending,
    /// A later link of the job's wake chain: tried only if the one before it does not reach
    /// the session.
    Standby,
    /// Reached the agent as input (or the file, command or URL took it).
    Delivered,
    /// An earlier link of the chain woke the session, so this one was not used.
    Unneeded,
    /// Only a note was shown (a tmux pane that runs no agent).
    Noted,
    /// Claude Code would keep it for a person to approve.
    Held,
    /// Claude Code would turn it away.
    Refused,
    /// The target is gone (the agent session ended); other channels carry the report.
    Skipped,
    /// Given up after repeated failures.
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Standby => "standby",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Unneeded => "unneeded",
            DeliveryState::Noted => "noted",
            DeliveryState::Held => "held",
            DeliveryState::Refused => "refused",
            DeliveryState::Skipped => "skipped",
            DeliveryState::Failed => "failed",
        }
    }

    /// The state a stored name says (an unknown one is `pending`: tried again).
    pub fn parse(text: &str) -> DeliveryState {
        match text {
            "standby" => DeliveryState::Standby,
            "delivered" => DeliveryState::Delivered,
            "unneeded" => DeliveryState::Unneeded,
            "noted" => DeliveryState::Noted,
            "held" => DeliveryState::Held,
            "refused" => DeliveryState::Refused,
            "skipped" => DeliveryState::Skipped,
            "failed" => DeliveryState::Failed,
            _ => DeliveryState::Pending,
        }
    }

    /// Settled without reaching the agent: the next link of the chain takes over.
    pub fn passes_on(self) -> bool {
        matches!(
            self,
            DeliveryState::Noted
                | DeliveryState::Held
                | DeliveryState::Refused
                | DeliveryState::Skipped
                | DeliveryState::Failed
        )
    }
}

impl std::fmt::Display for DeliveryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One channel's delivery of a job's report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveryView {
    /// The channel spec, secrets omitted.
    pub channel: String,
    /// `pending`; `standby` (a later link of the wake chain, used only if the ones before it do
    /// not reach the session); `delivered` (it reached the agent as input, or the file, command
    /// or URL took it); `unneeded` (an earlier link woke the session); `noted` (a status-line
    /// note in a pane that runs no agent); `held` / `refused` (Claude Code would keep it for a
    /// person / turn it away); `skipped` (the target is gone); `failed` (gave up after
    /// retries).
    pub state: DeliveryState,
    pub attempts: u32,
    pub delivered_at: Option<String>,
    pub error: Option<String>,
}

/// `POST /v1/hook/claim`: the Claude Code hook (`baton agent wait-hook`), run after the Bash
/// call that submitted `ids`, takes over their wake-up where the session's inbox cannot start
/// a turn. The daemon knows the hook by the calling process.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookClaimRequest {
    pub ids: Vec<u64>,
    /// The Claude Code session the hook runs in (its stdin's `session_id`).
    pub session: String,
    /// What the hook learnt of the session's inbox (its permission mode, its settings).
    #[serde(default)]
    pub inbound: Option<Inbound>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HookClaimResponse {
    pub claims: Vec<HookClaim>,
}

/// Whether the hook delivers one job's report, and why (not).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HookClaim {
    pub id: u64,
    pub claimed: bool,
    pub why: String,
}

/// `POST /v1/hook/delivered`: the hook printed these jobs' reports and is exiting 2, which
/// starts the turn.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookDeliveredRequest {
    pub ids: Vec<u64>,
}

/// `POST /v1/cancel`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub ids: Vec<u64>,
    /// Cancel even jobs that another agent session of the same user submitted.
    #[serde(default)]
    pub force: bool,
    /// The caller's agent session (see `AgentContext::session`).
    #[serde(default)]
    pub session: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CancelResponse {
    /// The jobs as they are after the request (running ones are being stopped).
    pub jobs: Vec<JobView>,
}

/// `POST /v1/requeue`: jobs that failed, were cancelled or timed out run again, each as a new
/// attempt of the same id.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequeueRequest {
    pub ids: Vec<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RequeueResponse {
    /// The jobs as they are after the request: queued again.
    pub jobs: Vec<JobView>,
}

/// `POST /v1/jobs/{id}/resubmit`: a new job with the spec of job `id` (its command, working
/// directory, environment, tags, channels, resources, time limit, retries; not its
/// dependencies), with these overrides. The sizes and durations are as `SubmitRequest` has them.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResubmitRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub gpus: Option<u32>,
    #[serde(default)]
    pub gpu_mem: Option<u64>,
    #[serde(default)]
    pub cpus: Option<u32>,
    #[serde(default)]
    pub mem: Option<u64>,
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub time_limit_ms: Option<i64>,
    /// Where the new job's report goes, resolved in the caller's session as for a submission;
    /// empty: the original job's channels (and its agent session).
    #[serde(default)]
    pub notify: Vec<String>,
    #[serde(default)]
    pub context: AgentContext,
}

/// `POST /v1/jobs/{id}/signal`: a signal for every process of a running job.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// `TERM`, `SIGUSR1`, `10`, ... (`baton_core::signal::parse`).
    pub signal: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SignalResponse {
    pub job: JobView,
    /// The signal sent, by number and name (`SIGUSR1`).
    pub signal: i32,
    pub name: String,
    /// Where it went (`3 processes in cgroup ...`, `Slurm job 812, every step`).
    pub detail: String,
}

/// `GET /v1/workflows`: one row per workflow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRow {
    pub id: u64,
    pub name: String,
    pub state: baton_core::lifecycle::decide::WorkflowState,
    pub atomic: bool,
    pub owner: String,
    pub submitted_at: String,
    pub ended_at: Option<String>,
    /// Tasks that have ended (whatever their end), of `tasks_total`.
    pub tasks_done: u32,
    pub tasks_total: u32,
    /// Another user's workflow on a shared daemon (its source file is not shown anywhere).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
}

/// `POST /v1/resolve`: job names (or globs) to ids, for the commands that take a name where
/// an id goes. Only the caller's own jobs are named.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolveRequest {
    pub refs: Vec<String>,
    /// A glob may name several jobs (`cancel sweep-*`); without it, a glob matching more than
    /// one is an error that lists them.
    #[serde(default)]
    pub many: bool,
    /// Only queued and running jobs (what cancel, hold and release can act on).
    #[serde(default)]
    pub active_only: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResolveResponse {
    pub ids: Vec<u64>,
}

/// `POST /v1/select`: the caller's own queued and running jobs that match every filter given
/// (for `cancel --name/--state/--mine/--all`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectRequest {
    /// A name or glob.
    #[serde(default)]
    pub name: Option<String>,
    /// `queued` or `running`.
    #[serde(default)]
    pub state: Option<baton_core::JobState>,
    /// Only jobs this agent session submitted (`none`: outside every session).
    #[serde(default)]
    pub session: Option<String>,
}

/// `POST /v1/hold` and `POST /v1/release`: the jobs to hold, or to let start again.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    pub ids: Vec<u64>,
}

/// The jobs as they are after a hold, release or update.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobsResponse {
    pub jobs: Vec<JobView>,
}

/// `POST /v1/jobs/{id}/update`: what to change in a queued job (like `scontrol update`); each
/// field left out stays as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub time_limit_ms: Option<i64>,
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Bytes per GPU; with it the job shares GPUs.
    #[serde(default)]
    pub gpu_mem: Option<u64>,
    #[serde(default)]
    pub cpus: Option<u32>,
    #[serde(default)]
    pub mem: Option<u64>,
}

/// `GET /v1/jobs/{id}/logs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LogsQuery {
    #[serde(default)]
    pub stderr: bool,
    /// Only the last N lines.
    #[serde(default)]
    pub tail: Option<usize>,
    /// Keep the response open and stream new output until the job ends.
    #[serde(default)]
    pub follow: bool,
}

/// `GET /v1/jobs/{id}/events`: one entry of a job's append-only history.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventView {
    pub job: u64,
    pub at: String,
    /// submitted, started, retry, requeued, cancel-requested, or the final state.
    pub kind: String,
    pub detail: String,
}

/// `GET /v1/gpus`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpusResponse {
    /// `nvml`, `simulated`, or `none`.
    pub backend: String,
    pub gpus: Vec<GpuView>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuView {
    pub index: u32,
    pub model: String,
    pub memory_total: u64,
    pub memory_used: u64,
    /// 0-100, when known.
    pub utilization: Option<u32>,
    /// Jobs baton placed on this GPU.
    pub jobs: Vec<u64>,
    /// Memory promised to shared jobs on this GPU.
    pub memory_allocated: u64,
    /// Whether one job holds the whole GPU.
    pub exclusive: bool,
    pub processes: Vec<GpuProcess>,
    /// Mean utilisation over the monitor's samples of the last 5 minutes.
    #[serde(default)]
    pub util_5m: Option<f64>,
    /// Power draw and temperature, when the GPU reports them.
    #[serde(default)]
    pub power_watts: Option<f64>,
    #[serde(default)]
    pub temperature_c: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub memory_used: u64,
}

/// `GET /v1/info`: who the daemon is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InfoResponse {
    pub version: String,
    pub pid: u32,
    pub home: String,
    pub system: bool,
    pub gpu_backend: String,
    pub gpu_count: usize,
    /// The cores and bytes of memory jobs may take, in all.
    #[serde(default)]
    pub cpus: u32,
    #[serde(default)]
    pub memory: u64,
    /// What a job takes when it does not say (`[resources]`).
    #[serde(default)]
    pub default_cpus: u32,
    #[serde(default)]
    pub default_memory: u64,
    /// How the daemon holds every process of a job: a cgroup per job, or the supervisor as
    /// child subreaper (and why no cgroup).
    #[serde(default)]
    pub containment: String,
    /// The directory holding the daemon's jobs' cgroups, when it makes them.
    #[serde(default)]
    pub cgroup_root: Option<String>,
    /// The daemon's own trouble, if any (`null` when healthy).
    #[serde(default)]
    pub health: Option<HealthView>,
}

/// `POST /v1/web/login`: a one-time login link to the dashboard (good for two minutes, once),
/// and where the dashboard is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WebLoginResponse {
    pub url: String,
    pub base: String,
}

/// `POST /v1/shutdown`: the daemon that is stopping.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShutdownResponse {
    pub pid: u32,
}

/// Something wrong with the daemon itself: writes to its state directory that fail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthView {
    /// One sentence for people: what is wrong and what baton does about it.
    pub problem: String,
    /// The state directory's disk is full.
    pub full: bool,
    /// Job ends (and retries) the store has not recorded yet: those jobs wait in `running`.
    pub unrecorded_ends: usize,
    /// Other changes waiting: workflow ends, delivery outcomes.
    pub unrecorded_changes: usize,
    /// Since when (RFC 3339).
    pub since: String,
}

/// The body of every error response, whatever refused the request (a handler, an unknown
/// route, a method the route does not take, a body that is not JSON or too large): 4xx and 5xx
/// answers are never plain text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What is wrong, in one sentence.
    pub error: String,
    /// What to do instead, when there is something to say; absent (not null) otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The largest request body the daemon reads. Bodies are small JSON objects except a workflow
/// submission, which carries the file (at most [`baton_core::workflow::MAX_FILE_BYTES`], and
/// JSON escaping at most doubles what a valid file holds) and, like every submission, the
/// submitter's environment. Clients refuse to send more.
pub const MAX_BODY_BYTES: usize = 8 << 20;

const _: () = assert!(MAX_BODY_BYTES >= 4 * baton_core::workflow::MAX_FILE_BYTES);

/// `POST /v1/workflows`: queue a workflow (DESIGN §6) from the text of its YAML file.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowSubmitRequest {
    /// The file's path as the user gave it, for messages (`pipeline.yaml: line 4, column 12: …`).
    pub source: String,
    /// The file's contents.
    pub text: String,
    /// The file's directory: the tasks' working directory, and what a relative `cwd` is
    /// relative to.
    pub base_dir: String,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub umask: Option<u32>,
    /// Where each task's report goes (as `submit --notify`); empty means `auto`.
    #[serde(default)]
    pub notify: Vec<String>,
    #[serde(default)]
    pub context: AgentContext,
}

/// Every field, named, the environment by name only.
impl std::fmt::Debug for WorkflowSubmitRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let WorkflowSubmitRequest {
            source,
            text,
            base_dir,
            env,
            umask,
            notify,
            context,
        } = self;
        f.debug_struct("WorkflowSubmitRequest")
            .field("source", source)
            .field("text", text)
            .field("base_dir", base_dir)
            .field("env", &EnvNames(env))
            .field("umask", umask)
            .field("notify", notify)
            .field("context", context)
            .finish()
    }
}

/// A workflow and its tasks, as `baton workflow status` shows them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkflowView {
    pub id: u64,
    pub name: String,
    pub atomic: bool,
    /// queued, running, succeeded, failed or cancelled.
    pub state: baton_core::lifecycle::decide::WorkflowState,
    pub owner: String,
    pub source: String,
    pub submitted_at: String,
    /// For an atomic workflow: when all its GPUs were reserved.
    pub admitted_at: Option<String>,
    pub ended_at: Option<String>,
    /// The predicted longest chain of tasks, first to last.
    pub critical_path: Vec<String>,
    pub tasks: Vec<WorkflowTaskView>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkflowTaskView {
    pub task: String,
    /// The tasks it runs after.
    pub after: Vec<String>,
    /// GPUs reserved for it by the workflow's admission, while it waits to start.
    pub reserved: Option<Vec<u32>>,
    /// Its predicted time to the workflow's end along the longest path, in ms.
    pub critical_path_ms: i64,
    pub job: JobView,
}

/// `GET /v1/usage`: where a user stands against `[limits]` (`baton usage`, MCP `usage`): what
/// their jobs hold now and how many they have queued, beside their caps (`None`: no cap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    pub user: String,
    pub uid: u32,
    /// Held by their running jobs and by GPUs reserved for their queued ones.
    pub gpus: u64,
    pub cpus: u64,
    pub mem: u64,
    pub running: u32,
    pub queued: u32,
    pub max_gpus: Option<u32>,
    pub max_cpus: Option<u32>,
    pub max_mem: Option<u64>,
    pub max_queued: Option<u32>,
    pub max_gpus_per_job: Option<u32>,
    /// Their GPU-hours this period against their budget (`[limits] gpu_hours_per_user`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<baton_core::limits::BudgetUse>,
    /// The pooled budgets of their groups (`gpu_hours_per_group`): what all members used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_budgets: Vec<baton_core::limits::BudgetUse>,
}

/// `POST /v1/reservations`: keep GPUs for some users for a window of time (`baton reserve`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveRequest {
    /// What `--reservation NAME` will name; `None`: `resv-ID`.
    #[serde(default)]
    pub name: Option<String>,
    pub gpus: u32,
    /// The window, in ms since the epoch (the client reads `--start` and `--duration`).
    pub start_ms: i64,
    pub end_ms: i64,
    /// The users whose jobs may run in it; empty: the caller.
    #[serde(default)]
    pub users: Vec<String>,
}

/// A reservation (`baton reservations --json`; what `POST /v1/reservations` made).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationView {
    pub id: u64,
    pub name: String,
    /// The GPUs it keeps.
    pub gpus: Vec<u32>,
    /// RFC 3339, and the same in ms since the epoch.
    pub start: String,
    pub end: String,
    pub start_ms: i64,
    pub end_ms: i64,
    pub users: Vec<String>,
    pub created_by: String,
    /// `upcoming`, `active`, `ended` or `cancelled`.
    pub state: String,
    /// Its jobs queued and running now.
    pub queued: u32,
    pub running: u32,
}

/// What `POST /v1/reservations` answers: the reservation, and what may keep it from having
/// all its GPUs at its start (running jobs that may still hold them then).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveResponse {
    pub reservation: ReservationView,
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// `GET /v1/reservations?all=true`: ended and cancelled ones too (of the last week).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReservationsQuery {
    #[serde(default)]
    pub all: bool,
}

/// `GET /v1/audit?since_ms=MS` and `GET /v1/stats?since_ms=MS`: how far back to look (a
/// duration before now; absent: everything kept).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SinceQuery {
    pub since_ms: Option<i64>,
}

/// One waste decision from the audit log (`baton audit --json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditView {
    /// RFC 3339.
    pub time: String,
    /// `zombie`, `idle_job` or `held_after_exit`.
    pub rule: String,
    /// `null` for a process of no job (a stranger).
    pub job_id: Option<u64>,
    pub pid: Option<u32>,
    pub gpu: Option<u32>,
    /// `notify`, `deprioritize`, `sigterm`, `sigkill` or `skip`.
    pub action: String,
    /// `dry-run`, `skipped`, `pending`, or what carrying it out did (`SIGTERM sent to pid 42`,
    /// `failed: …`).
    pub outcome: String,
    pub dry_run: bool,
    /// One line for people.
    pub message: String,
    /// The samples and the threshold behind the decision.
    pub evidence: serde_json::Value,
}

/// `GET /v1/stats`: the efficiency figures an admin reports (`baton stats`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsResponse {
    /// RFC 3339: the start of the period.
    pub since: String,
    pub until: String,
    /// Mean utilisation of every GPU over the period, from the monitor's samples.
    pub cluster_util_pct: Option<f64>,
    pub gpus: Vec<GpuStats>,
    /// GPU-hours held by each owner's jobs in the period, most first.
    pub owners: Vec<OwnerStats>,
    /// GPU-hours held by jobs in the period.
    pub allocated_gpu_hours: f64,
    /// Of the allocated GPU time the monitor sampled, the share at or below the idle
    /// threshold (`[waste.idle_job] max_util`).
    pub idle_share: Option<f64>,
    pub idle_gpu_hours: f64,
    /// Waste decisions in the period, by rule and action.
    pub waste_actions: Vec<WasteCount>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuStats {
    pub gpu: u32,
    pub util_pct: Option<f64>,
    pub samples: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OwnerStats {
    pub owner: String,
    pub gpu_hours: f64,
    pub jobs: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WasteCount {
    pub rule: String,
    pub action: String,
    pub dry_run: bool,
    pub count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_keeps_the_environment_and_the_inbox_token_out() {
        let env = BTreeMap::from([("HF_TOKEN".to_string(), "hf_s3cr3t".to_string())]);
        let context = AgentContext {
            claude_token: Some("tok-s3cr3t".into()),
            ..AgentContext::default()
        };
        let submit = SubmitRequest {
            env: env.clone(),
            context: context.clone(),
            ..SubmitRequest::default()
        };
        let workflow = WorkflowSubmitRequest {
            env,
            context,
            ..WorkflowSubmitRequest::default()
        };
        let shown = format!("{submit:?} {workflow:#?}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(
            shown.contains("HF_TOKEN") && shown.contains("<secret>"),
            "{shown}"
        );
    }
}

/// The runs of a sweep as the submitter wrote them; the daemon expands them (and checks how
/// many there are against `[sweeps] max_runs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SweepRuns {
    /// `--array 0-99:2%4` (Slurm's syntax): one run per index.
    Array { spec: String },
    /// `--sweep NAME=V1,V2` repeated: the Cartesian product, the last name fastest.
    Grid { axes: Vec<(String, Vec<String>)> },
    /// One set of parameters per run (`--sweep-file runs.jsonl`).
    Runs {
        source: String,
        runs: Vec<baton_core::sweep::Params>,
    },
}

/// `POST /v1/sweeps`: queue many runs of one command template as one sweep (issue 16).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepRequest {
    /// Everything a run shares, as a submission; its command has `{name}` placeholders.
    pub job: SubmitRequest,
    pub runs: SweepRuns,
    /// How many runs may run at once (`--max-parallel`, or the `%K` of `--array`).
    #[serde(default)]
    pub max_parallel: Option<u32>,
    /// `METRIC[:max|min]` the comparison ranks by; `None`: a validation metric, else the loss.
    #[serde(default)]
    pub rank_by: Option<String>,
    /// Deliver each run's own report too, not only the comparison.
    #[serde(default)]
    pub notify_each: bool,
    /// `continue` (default) or `stop`: cancel the rest once the sweep is clearly broken.
    #[serde(default)]
    pub on_failure: Option<String>,
}

/// A sweep as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepView {
    pub id: u64,
    pub name: String,
    /// `array` or `sweep`.
    pub kind: String,
    /// queued, running, succeeded, failed or cancelled.
    pub state: String,
    pub owner: String,
    pub params: Vec<String>,
    pub runs: u32,
    /// How many runs are in each state, e.g. `{"running": 4, "queued": 8}`.
    pub counts: BTreeMap<String, u32>,
    /// Its runs' job ids, in order (thousands of numbers at most).
    pub jobs: Vec<u64>,
    pub max_parallel: Option<u32>,
    pub rank_by: Option<String>,
    pub notify_each: bool,
    pub on_failure: String,
    /// Where the comparison report goes (public specs).
    pub notify: Vec<String>,
    /// Whether one of those channels can wake the submitter's agent session.
    pub wakes_caller: bool,
    pub submitted_at: String,
    pub ended_at: Option<String>,
    /// When the submitter was woken early because the sweep looked broken.
    pub alerted_at: Option<String>,
    /// The comparison so far (every run's parameters, state and final metrics), in `status`.
    #[serde(default)]
    pub comparison: Option<baton_core::sweep::compare::ComparisonReport>,
    /// The comparison's markdown, in `status --report` and `wait`.
    #[serde(default)]
    pub markdown: Option<String>,
}

/// `POST /v1/sweeps/{id}/wait`: until the sweep has ended and its comparison is stored, or
/// `timeout_ms` has passed (the sweep as it stands, not ended); 503 when the daemon stops
/// meanwhile, to be asked again once it is back.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SweepWaitRequest {
    #[serde(default)]
    pub timeout_ms: Option<i64>,
}
