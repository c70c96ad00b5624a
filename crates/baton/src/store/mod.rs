//! Durable state in SQLite (WAL): the jobs table and an append-only event log. Every state change
//! the daemon makes is committed here before it is acted on, so a crash at any point leaves a
//! record the next daemon can recover from.

mod monitor;
mod schema;

pub use monitor::{AuditEntry, GpuMinuteSample, JobGpuSample, JobGpuUsage};

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use baton_core::{DepKind, Dependency, GpuRequest, JobId, JobState, Millis};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::notify::Channel;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A file the store keeps beside the database (a workflow's summary).
    #[error("{0}")]
    Io(std::io::Error),
    #[error("corrupt record for job {id}: {detail}")]
    Corrupt { id: u64, detail: String },
    #[error(
        "the database was written by a newer baton (schema version {found}, this one knows {known})"
    )]
    TooNew { found: i64, known: i64 },
}

impl StoreError {
    /// The disk (or the database's size limit) is full: a write may go through once there is
    /// room again.
    pub fn is_full(&self) -> bool {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => {
                e.code == rusqlite::ErrorCode::DiskFull
            }
            StoreError::Io(e) => e.raw_os_error() == Some(libc::ENOSPC),
            _ => false,
        }
    }

    /// The error in a few words, for messages that say what will happen next.
    pub fn short(&self) -> String {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, Some(text))) => {
                format!("{text} ({:?})", e.code)
            }
            other => other.to_string(),
        }
    }
}

/// Everything baton knows about a job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobRecord {
    pub id: JobId,
    pub name: String,
    pub state: JobState,
    pub command: Vec<String>,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub owner_uid: u32,
    pub owner: String,
    pub priority: i64,
    pub request: GpuRequest,
    pub time_limit: Option<Millis>,
    pub retries: u32,
    pub attempt: u32,
    pub deps: Vec<Dependency>,
    pub tags: BTreeMap<String, String>,
    pub submitted_at: Millis,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub gpus: Vec<u32>,
    pub workflow_id: Option<u64>,
    /// Who asked to cancel the running job; its end is then recorded as `cancelled`.
    pub cancel_requested_by: Option<String>,
    /// The submitter's umask, applied to the job.
    pub umask: Option<u32>,
    /// Where the report goes when the job ends.
    pub notify: Vec<Channel>,
    /// The agent session that submitted the job (`claude:ID`, `codex:THREAD`, `tmux:PANE`).
    pub session: Option<String>,
    /// The job's task name in its workflow.
    pub task: Option<String>,
    /// GPUs its atomic workflow's admission reserved for it, while it waits to start.
    pub reserved: Option<Vec<u32>>,
    /// Until when that reservation holds unless the daemon renews it.
    pub lease_until: Option<Millis>,
    /// The predicted longest path from this task to its workflow's end (0 outside workflows).
    pub critical_path: Millis,
    /// The jobs of the tasks it asked to share a node with (`colocate_with`).
    pub colocate: Vec<JobId>,
    /// Under the Slurm backend: the Slurm job id of the current attempt, once `sbatch` gave one.
    pub slurm_id: Option<u64>,
    /// When the current attempt's `sbatch` was about to run (set before it runs, so a crash in
    /// between is found again by the job's name and comment instead of being submitted twice).
    pub slurm_submitting_at: Option<Millis>,
    /// The nodes Slurm ran it on.
    pub slurm_nodes: Option<String>,
    /// Slurm's last word on it (`PENDING`, `RUNNING`, `OUT_OF_MEMORY`, ...).
    pub slurm_state: Option<String>,
    /// A retry waits out its backoff: the next attempt starts no earlier than this.
    pub not_before: Option<Millis>,
}

/// A job as submitted, before it has an id.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub name: Option<String>,
    pub command: Vec<String>,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub owner_uid: u32,
    pub owner: String,
    pub priority: i64,
    pub request: GpuRequest,
    pub time_limit: Option<Millis>,
    pub retries: u32,
    pub deps: Vec<Dependency>,
    pub tags: BTreeMap<String, String>,
    pub submitted_at: Millis,
    pub umask: Option<u32>,
    pub notify: Vec<Channel>,
    pub session: Option<String>,
    pub workflow_id: Option<u64>,
    pub task: Option<String>,
    pub critical_path: Millis,
}

/// A workflow: a DAG of tasks (each a job), admitted whole when `atomic`.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowRecord {
    pub id: u64,
    pub name: String,
    pub atomic: bool,
    /// queued (nothing started), running, then succeeded, failed or cancelled.
    pub state: String,
    pub owner_uid: u32,
    pub owner: String,
    /// The file it came from, as given.
    pub source: String,
    pub submitted_at: Millis,
    /// For an atomic workflow: when its GPUs were reserved.
    pub admitted_at: Option<Millis>,
    pub ended_at: Option<Millis>,
}

/// A workflow as submitted, with its tasks in dependency order (each task's `after` are indices
/// of earlier tasks).
pub struct NewWorkflow {
    pub name: String,
    pub atomic: bool,
    pub owner_uid: u32,
    pub owner: String,
    pub source: String,
    pub submitted_at: Millis,
    pub tasks: Vec<NewTask>,
}

#[cfg(test)]
impl NewJob {
    /// A plain job for tests: `command` as root in `/`, whole GPUs, nothing else set.
    pub fn plain(command: &[&str], gpus: u32) -> NewJob {
        NewJob {
            name: None,
            command: command.iter().map(|s| s.to_string()).collect(),
            cwd: "/".into(),
            env: BTreeMap::new(),
            owner_uid: 0,
            owner: "root".into(),
            priority: 0,
            request: GpuRequest::whole(gpus),
            time_limit: None,
            retries: 0,
            deps: Vec::new(),
            tags: BTreeMap::new(),
            submitted_at: 0,
            umask: None,
            notify: Vec::new(),
            session: None,
            workflow_id: None,
            task: None,
            critical_path: 0,
        }
    }
}

/// A workflow's task as submitted: its job, and the tasks (positions in
/// [`NewWorkflow::tasks`]) it runs after and asked to share a node with. A task runs only after
/// tasks listed before it.
#[derive(Clone, Debug)]
pub struct NewTask {
    pub job: NewJob,
    pub after: Vec<usize>,
    pub colocate: Vec<usize>,
}

/// How an attempt ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub at: Millis,
}

/// One report delivery through one channel: a row of the outbox.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub id: i64,
    pub job: JobId,
    /// Set for a workflow's summary (sent when `job`, its last task, ended).
    pub workflow: Option<u64>,
    pub channel: Channel,
    pub state: DeliveryState,
    pub attempts: u32,
    pub next_at: Millis,
    pub error: Option<String>,
    pub delivered_at: Option<Millis>,
    /// The earlier link of the wake chain this one stands by for.
    pub after: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

    fn parse(text: &str) -> DeliveryState {
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

/// One row of the event log.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub job: JobId,
    pub at: Millis,
    pub kind: String,
    pub detail: String,
}

pub struct Store {
    conn: Connection,
}

const COLUMNS: &str = "id, name, state, command, cwd, env, owner_uid, owner, priority, gpus_requested, \
     gpu_mem, time_limit_ms, retries, attempt, deps, tags, submitted_at, started_at, ended_at, \
     exit_code, signal, reason, gpus, workflow_id, cancel_requested_by, umask, notify, session, task, \
     reserved, lease_until, critical_path_ms, colocate, slurm_id, slurm_submitting_at, slurm_nodes, \
     slurm_state, not_before";

impl Store {
    /// Opens (creating and migrating as needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        // WAL: readers never block the writer. synchronous=NORMAL: a commit is in the WAL before
        // it returns, so it survives any crash of the daemon (the promise jobs rely on); only an
        // OS crash or power loss can drop the last commits, and that also kills every job they
        // describe. FULL would add an fsync to every submit, start and end.
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; \
             PRAGMA busy_timeout=5000;",
        )?;
        schema::migrate(&conn)?;
        Ok(Store { conn })
    }

    #[cfg(test)]
    pub fn insert(&mut self, job: &NewJob) -> Result<JobRecord, StoreError> {
        self.insert_requested(job, None)
    }

    /// Queues a job under its submission's idempotency key, if it has one (unique per owner;
    /// see `job_for_request`).
    pub fn insert_requested(
        &mut self,
        job: &NewJob,
        request_id: Option<&str>,
    ) -> Result<JobRecord, StoreError> {
        let tx = self.conn.transaction()?;
        let id = insert_job(&tx, job)?.0;
        if let Some(key) = request_id {
            tx.prepare_cached("UPDATE jobs SET request_id = ?1 WHERE id = ?2")?
                .execute(params![key, id as i64])?;
        }
        tx.commit()?;
        let name = default_name(job);
        Ok(JobRecord {
            id: JobId(id),
            name,
            state: JobState::Queued,
            command: job.command.clone(),
            cwd: job.cwd.clone(),
            env: job.env.clone(),
            owner_uid: job.owner_uid,
            owner: job.owner.clone(),
            priority: job.priority,
            request: job.request,
            time_limit: job.time_limit,
            retries: job.retries,
            attempt: 0,
            deps: job.deps.clone(),
            tags: job.tags.clone(),
            submitted_at: job.submitted_at,
            started_at: None,
            ended_at: None,
            exit_code: None,
            signal: None,
            reason: None,
            gpus: Vec::new(),
            workflow_id: job.workflow_id,
            cancel_requested_by: None,
            umask: job.umask,
            notify: job.notify.clone(),
            session: job.session.clone(),
            task: job.task.clone(),
            reserved: None,
            lease_until: None,
            critical_path: job.critical_path,
            colocate: Vec::new(),
            slurm_id: None,
            slurm_submitting_at: None,
            slurm_nodes: None,
            slurm_state: None,
            not_before: None,
        })
    }

    pub fn get(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        self.conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"))?
            .query_row([id.0 as i64], read_row)
            .optional()?
            .transpose()
    }

    fn select(
        &self,
        where_clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {COLUMNS} FROM jobs {where_clause}"))?;
        let rows = stmt.query_map(args, read_row)?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row??);
        }
        Ok(out)
    }

    /// Queued and running jobs.
    pub fn active(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.select("WHERE state IN ('queued', 'running') ORDER BY id", [])
    }

    /// Jobs that ended at or after `since`, newest last.
    pub fn ended_since(&self, since: Millis) -> Result<Vec<JobRecord>, StoreError> {
        self.select(
            "WHERE state NOT IN ('queued', 'running') AND ended_at >= ?1 ORDER BY id",
            [since],
        )
    }

    pub fn all(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.select("ORDER BY id", [])
    }

    /// The highest id ever handed out (0 when none).
    pub fn max_id(&self) -> Result<u64, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT COALESCE(MAX(id), 0) FROM jobs", [], |r| {
                r.get::<_, i64>(0)
            })? as u64)
    }

    /// The states of the given jobs; ids that do not exist are absent.
    /// The state of each of these jobs that exists, and the GPUs it last ran on (where its data
    /// is, for the jobs placed after it).
    pub fn states(
        &self,
        ids: &[JobId],
    ) -> Result<HashMap<JobId, (JobState, Vec<u32>)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT state, gpus FROM jobs WHERE id = ?1")?;
        let mut out = HashMap::new();
        for id in ids {
            if let Some((state, gpus)) = stmt
                .query_row([id.0 as i64], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
                .optional()?
            {
                let gpus = serde_json::from_str(&gpus).map_err(|e| StoreError::Corrupt {
                    id: id.0,
                    detail: format!("gpus: {e}"),
                })?;
                out.insert(*id, (parse_state(id.0, &state)?, gpus));
            }
        }
        Ok(out)
    }

    /// Records that these jobs start now on these GPUs, as a new attempt each, in one transaction.
    pub fn mark_started(
        &mut self,
        starts: &[(JobId, Vec<u32>)],
        at: Millis,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for (id, gpus) in starts {
            tx.prepare_cached(
                "UPDATE jobs SET state = 'running', gpus = ?1, started_at = ?2, attempt = attempt + 1, \
                 reason = NULL, exit_code = NULL, signal = NULL, ended_at = NULL, reserved = NULL, \
                 lease_until = NULL, not_before = NULL WHERE id = ?3",
            )?
            .execute(
                params![json(gpus), at, id.0 as i64],
            )?;
            log_event(&tx, id.0, at, "started", &format!("gpus {gpus:?}"))?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Records the end of a job (or of a queued job that will never run) and, in the same
    /// transaction, one pending delivery of its report per channel: a crash right after this
    /// commit still delivers every report, and a crash before it leaves the job to recovery.
    pub fn mark_ended(
        &mut self,
        id: JobId,
        end: &Ending,
        channels: &[Channel],
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        insert_deliveries(&tx, id, None, channels, end.at)?;
        tx.prepare_cached(
            "UPDATE jobs SET state = ?1, exit_code = ?2, signal = ?3, reason = ?4, ended_at = ?5 \
             WHERE id = ?6",
        )?
        .execute(params![
            end.state.as_str(),
            end.exit_code,
            end.signal,
            end.reason,
            end.at,
            id.0 as i64
        ])?;
        log_event(
            &tx,
            id.0,
            end.at,
            end.state.as_str(),
            end.reason.as_deref().unwrap_or(""),
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Puts a job back in the queue: after a failed attempt with retries left (`retry`; it may
    /// start again at `not_before`), or after a launch that provably never happened (the
    /// attempt is taken back).
    pub fn requeue(
        &mut self,
        id: JobId,
        retry: bool,
        reason: &str,
        not_before: Option<Millis>,
        at: Millis,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        let attempt_change = if retry { "" } else { ", attempt = attempt - 1" };
        tx.execute(
            &format!(
                "UPDATE jobs SET state = 'queued', gpus = '[]', reason = ?1, started_at = NULL, \
                 cancel_requested_by = NULL, slurm_id = NULL, slurm_submitting_at = NULL, \
                 slurm_nodes = NULL, not_before = ?3{attempt_change} \
                 WHERE id = ?2"
            ),
            params![reason, id.0 as i64, not_before],
        )?;
        log_event(
            &tx,
            id.0,
            at,
            if retry { "retry" } else { "requeued" },
            reason,
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Records that the job's `sbatch` is about to run (before it does).
    pub fn mark_slurm_submitting(&mut self, id: JobId, at: Millis) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE jobs SET slurm_submitting_at = ?1 WHERE id = ?2")?
            .execute(params![at, id.0 as i64])?;
        Ok(())
    }

    /// Records the Slurm job id `sbatch` gave the job (or the interrupted submission found).
    pub fn set_slurm_id(&mut self, id: JobId, slurm_id: u64, at: Millis) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET slurm_id = ?1 WHERE id = ?2")?
            .execute(params![slurm_id as i64, id.0 as i64])?;
        log_event(
            &tx,
            id.0,
            at,
            "slurm-submitted",
            &format!("Slurm job {slurm_id}"),
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Forgets a submission that never reached Slurm, so that it is made again.
    pub fn clear_slurm_submitting(&mut self, id: JobId) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE jobs SET slurm_submitting_at = NULL WHERE id = ?1")?
            .execute([id.0 as i64])?;
        Ok(())
    }

    /// Records what Slurm last said of the job: its state and the nodes it runs on.
    pub fn set_slurm_state(
        &mut self,
        id: JobId,
        state: &str,
        nodes: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE jobs SET slurm_state = ?1, slurm_nodes = COALESCE(?2, slurm_nodes) \
                 WHERE id = ?3",
            )?
            .execute(params![state, nodes, id.0 as i64])?;
        Ok(())
    }

    /// Sets where a job's report goes (the Claude Code hook claimed its wake-up).
    pub fn set_notify(
        &mut self,
        id: JobId,
        channels: &[Channel],
        at: Millis,
        why: &str,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET notify = ?1 WHERE id = ?2")?
            .execute(params![json(&channels), id.0 as i64])?;
        log_event(&tx, id.0, at, "notify", why)?;
        tx.commit()?;
        Ok(())
    }

    /// Sets a job's priority (a waste rule deprioritised it).
    pub fn set_priority(&mut self, id: JobId, priority: i64, at: Millis) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET priority = ?1 WHERE id = ?2")?
            .execute(params![priority, id.0 as i64])?;
        log_event(&tx, id.0, at, "priority", &format!("priority {priority}"))?;
        tx.commit()?;
        Ok(())
    }

    pub fn mark_cancel_requested(
        &mut self,
        id: JobId,
        by: &str,
        at: Millis,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET cancel_requested_by = ?1 WHERE id = ?2")?
            .execute(params![by, id.0 as i64])?;
        log_event(&tx, id.0, at, "cancel-requested", by)?;
        tx.commit()?;
        Ok(())
    }

    /// The job `owner_uid` queued with the idempotency key `request_id`, if any.
    pub fn job_for_request(
        &self,
        owner_uid: u32,
        request_id: &str,
    ) -> Result<Option<JobId>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT id FROM jobs WHERE owner_uid = ?1 AND request_id = ?2")?
            .query_row(params![owner_uid, request_id], |r| r.get::<_, i64>(0))
            .optional()?
            .map(|id| JobId(id as u64)))
    }

    /// Adds one entry to a job's history (`baton events ID`).
    pub fn add_event(
        &mut self,
        id: JobId,
        kind: &str,
        detail: &str,
        at: Millis,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO events (job_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![id.0 as i64, at, kind, detail])?;
        Ok(())
    }

    /// Pending deliveries due at `now`, oldest first, at most `limit`.
    pub fn due_deliveries(&self, now: Millis, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries_where(
            "WHERE state = 'pending' AND next_at <= ?1 ORDER BY next_at, id LIMIT ?2",
            params![now, limit as i64],
        )
    }

    /// When the next pending delivery falls due, if any is pending.
    pub fn next_delivery_at(&self) -> Result<Option<Millis>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT MIN(next_at) FROM deliveries WHERE state = 'pending'")?
            .query_row([], |r| r.get(0))?)
    }

    /// Every delivery of a job's report, in channel order.
    pub fn deliveries(&self, job: JobId) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries_where("WHERE job_id = ?1 ORDER BY id", params![job.0 as i64])
    }

    fn deliveries_where(
        &self,
        clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT id, job_id, channel, state, attempts, next_at, error, delivered_at, workflow_id, \
             after_id FROM deliveries {clause}"
        ))?;
        let rows = stmt.query_map(args, |r| {
            let job = r.get::<_, i64>(1)? as u64;
            let channel: String = r.get(2)?;
            let state: String = r.get(3)?;
            Ok((
                job,
                channel,
                Delivery {
                    id: r.get(0)?,
                    job: JobId(job),
                    workflow: r.get::<_, Option<i64>>(8)?.map(|w| w as u64),
                    channel: Channel::File {
                        path: String::new(),
                    },
                    state: DeliveryState::parse(&state),
                    attempts: r.get(4)?,
                    next_at: r.get(5)?,
                    error: r.get(6)?,
                    delivered_at: r.get(7)?,
                    after: r.get(9)?,
                },
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (job, channel, mut delivery) = row?;
            delivery.channel = serde_json::from_str(&channel).map_err(|e| StoreError::Corrupt {
                id: job,
                detail: format!("delivery {}: {e}", delivery.id),
            })?;
            out.push(delivery);
        }
        Ok(out)
    }

    /// Records the outcome of one delivery attempt: its new state, and for a retry when. The
    /// wake chain moves on in the same transaction: a delivery that woke the session makes the
    /// links standing by `unneeded`; one that passes on (noted, held, refused, skipped, failed)
    /// makes the next link pending now. Only an unsettled row changes: a hook's word that it
    /// delivered is never overwritten by the outbox's look at it. (The hook may say so while its
    /// link still stands by: it waited on the job, not on the chain.)
    pub fn record_delivery(
        &mut self,
        id: i64,
        state: DeliveryState,
        next_at: Millis,
        error: Option<&str>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        let changed = tx
            .prepare_cached(
                "UPDATE deliveries SET state = ?1, attempts = attempts + 1, next_at = ?2, \
                 error = ?3, delivered_at = CASE WHEN ?1 = 'delivered' THEN ?4 ELSE delivered_at \
                 END WHERE id = ?5 AND state IN ('pending', 'standby')",
            )?
            .execute(params![state.as_str(), next_at, error, now, id])?;
        if changed > 0 {
            advance_chain(&tx, id, state, now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Whether a later link of a wake chain stands by for delivery `id`.
    pub fn has_standby_after(&self, id: i64) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM deliveries WHERE after_id = ?1 AND state = 'standby')",
            )?
            .query_row(params![id], |r| r.get(0))?)
    }

    /// Looks at a pending delivery again at `next_at` without counting an attempt (a hook that
    /// has not delivered yet).
    pub fn recheck_delivery(&mut self, id: i64, next_at: Millis) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE deliveries SET next_at = ?1 WHERE id = ?2 AND state = 'pending'",
            )?
            .execute(params![next_at, id])?;
        Ok(())
    }

    /// Puts the Claude Code hook into the wake chain of a job that has ended, in one commit: the
    /// job's channels, the inbox's state as the hook learnt it (`correct`: it only held or
    /// refused what it was sent), the links after the inbox back on standby if the inbox's
    /// "delivery" had made them `unneeded`, and the hook's link, pending, right after `before`
    /// (or at the head of the chain), with what stood by for `before` standing by for it.
    #[allow(clippy::too_many_arguments)]
    pub fn claim_ended(
        &mut self,
        job: JobId,
        channels: &[Channel],
        before: Option<i64>,
        correct: Option<(i64, DeliveryState, String)>,
        hook: &Channel,
        now: Millis,
        why: &str,
    ) -> Result<i64, StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET notify = ?1 WHERE id = ?2")?
            .execute(params![json(&channels), job.0 as i64])?;
        log_event(&tx, job.0, now, "notify", why)?;
        if let Some((id, state, error)) = correct {
            tx.prepare_cached("UPDATE deliveries SET state = ?1, error = ?2 WHERE id = ?3")?
                .execute(params![state.as_str(), error, id])?;
        }
        if let Some(before) = before {
            tx.prepare_cached(
                "WITH RECURSIVE later(id) AS ( \
                     SELECT id FROM deliveries WHERE after_id = ?1 \
                     UNION SELECT d.id FROM deliveries d JOIN later ON d.after_id = later.id) \
                 UPDATE deliveries SET state = 'standby' \
                 WHERE id IN (SELECT id FROM later) AND state = 'unneeded'",
            )?
            .execute(params![before])?;
        }
        tx.prepare_cached(
            "INSERT INTO deliveries (job_id, channel, state, next_at, after_id) \
             VALUES (?1, ?2, 'pending', ?3, ?4)",
        )?
        .execute(params![job.0 as i64, json(hook), now, before])?;
        let link = tx.last_insert_rowid();
        if let Some(before) = before {
            tx.prepare_cached(
                "UPDATE deliveries SET after_id = ?1 WHERE after_id = ?2 AND id != ?1",
            )?
            .execute(params![link, before])?;
        }
        tx.commit()?;
        Ok(link)
    }

    /// Queues a workflow's summary through each channel, anchored on the task whose end ended it.
    pub fn add_workflow_deliveries(
        &mut self,
        anchor: JobId,
        workflow: u64,
        channels: &[Channel],
        now: Millis,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        insert_deliveries(&tx, anchor, Some(workflow), channels, now)?;
        tx.commit()?;
        Ok(())
    }

    /// Adds a delivery for a job that has ended (the inbox fallback when its agent session is
    /// gone), unless the job already has one through that channel.
    pub fn add_delivery(
        &mut self,
        job: JobId,
        workflow: Option<u64>,
        channel: &Channel,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let existing = self.deliveries(job)?;
        if existing
            .iter()
            .any(|d| &d.channel == channel && d.workflow == workflow)
        {
            return Ok(false);
        }
        self.conn
            .prepare_cached(
                "INSERT INTO deliveries (job_id, channel, state, next_at, workflow_id) \
                 VALUES (?1, ?2, 'pending', ?3, ?4)",
            )?
            .execute(params![
                job.0 as i64,
                json(channel),
                now,
                workflow.map(|w| w as i64)
            ])?;
        Ok(true)
    }

    /// Jobs of `session` (or, for `None`, jobs submitted outside any agent session) that are
    /// active or ended at or after `since`.
    pub fn by_session(
        &self,
        session: Option<&str>,
        since: Millis,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let recent = "(state IN ('queued', 'running') OR ended_at >= ?1)";
        match session {
            Some(s) => self.select(
                &format!("WHERE session = ?2 AND {recent} ORDER BY id"),
                params![since, s],
            ),
            None => self.select(
                &format!("WHERE session IS NULL AND {recent} ORDER BY id"),
                params![since],
            ),
        }
    }

    /// Records a workflow and all its tasks as queued jobs in one transaction: all of it or none.
    pub fn insert_workflow(
        &mut self,
        wf: &NewWorkflow,
    ) -> Result<(WorkflowRecord, Vec<JobRecord>), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached(
            "INSERT INTO workflows (name, atomic, state, owner_uid, owner, source, submitted_at) \
             VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            wf.name,
            wf.atomic,
            wf.owner_uid,
            wf.owner,
            wf.source,
            wf.submitted_at
        ])?;
        let wf_id = tx.last_insert_rowid() as u64;
        let mut ids: Vec<JobId> = Vec::with_capacity(wf.tasks.len());
        for task in &wf.tasks {
            let mut job = task.job.clone();
            job.workflow_id = Some(wf_id);
            job.deps = task
                .after
                .iter()
                .filter_map(|&i| ids.get(i))
                .map(|&job| Dependency {
                    job,
                    kind: DepKind::Success,
                })
                .collect();
            ids.push(insert_job(&tx, &job)?);
        }
        // Partners may come later in the list: known only once every task has its id.
        for (task, id) in wf.tasks.iter().zip(&ids) {
            if !task.colocate.is_empty() {
                let partners: Vec<u64> = task
                    .colocate
                    .iter()
                    .filter_map(|&i| ids.get(i))
                    .map(|j| j.0)
                    .collect();
                tx.prepare_cached("UPDATE jobs SET colocate = ?1 WHERE id = ?2")?
                    .execute(params![json(&partners), id.0 as i64])?;
            }
        }
        tx.commit()?;
        let record = self.workflow(wf_id)?.ok_or_else(|| StoreError::Corrupt {
            id: wf_id,
            detail: "workflow vanished after insert".into(),
        })?;
        let mut jobs = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(job) = self.get(id)? {
                jobs.push(job);
            }
        }
        Ok((record, jobs))
    }

    pub fn workflow(&self, id: u64) -> Result<Option<WorkflowRecord>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(&format!(
                "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id = ?1"
            ))?
            .query_row([id as i64], read_workflow)
            .optional()?)
    }

    /// Workflows that have not ended.
    pub fn active_workflows(&self) -> Result<Vec<WorkflowRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE state IN ('queued', 'running') ORDER BY id"
        ))?;
        let rows = stmt.query_map([], read_workflow)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A workflow's tasks, in the order they were submitted.
    pub fn workflow_jobs(&self, id: u64) -> Result<Vec<JobRecord>, StoreError> {
        self.select("WHERE workflow_id = ?1 ORDER BY id", [id as i64])
    }

    /// Run times (ms) of the last successful runs of the same task of a workflow of the same
    /// name, or of the same command, newest first: what predictions are made from.
    pub fn run_history(
        &self,
        command: &[String],
        task: &str,
        workflow: &str,
    ) -> Result<Vec<Millis>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT ended_at - started_at FROM jobs WHERE state = 'succeeded' \
             AND started_at IS NOT NULL AND ended_at IS NOT NULL \
             AND (command = ?1 OR (task = ?2 AND workflow_id IN \
                  (SELECT id FROM workflows WHERE name = ?3))) \
             ORDER BY id DESC LIMIT 50",
        )?;
        let rows = stmt.query_map(params![json(&command), task, workflow], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Reserves GPUs for every task of an atomic workflow at once, under a lease.
    pub fn reserve(
        &mut self,
        workflow: u64,
        reserved: &[(JobId, Vec<u32>)],
        lease_until: Millis,
        now: Millis,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for (id, gpus) in reserved {
            tx.prepare_cached("UPDATE jobs SET reserved = ?1, lease_until = ?2 WHERE id = ?3")?
                .execute(params![json(gpus), lease_until, id.0 as i64])?;
            log_event(&tx, id.0, now, "reserved", &format!("gpus {gpus:?}"))?;
        }
        tx.prepare_cached("UPDATE workflows SET admitted_at = ?1 WHERE id = ?2")?
            .execute(params![now, workflow as i64])?;
        tx.commit()?;
        Ok(())
    }

    /// Extends the lease of every reservation still waiting to be used.
    pub fn renew_leases(&mut self, until: Millis) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "UPDATE jobs SET lease_until = ?1 WHERE reserved IS NOT NULL AND state = 'queued'",
            )?
            .execute([until])?)
    }

    /// Gives back every reservation of a workflow: it waits for admission again.
    pub fn release_reservations(&mut self, workflow: u64, now: Millis) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        let ids: Vec<i64> = {
            let mut stmt = tx.prepare_cached(
                "SELECT id FROM jobs WHERE workflow_id = ?1 AND reserved IS NOT NULL",
            )?;
            let rows = stmt.query_map([workflow as i64], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for id in ids {
            tx.prepare_cached("UPDATE jobs SET reserved = NULL, lease_until = NULL WHERE id = ?1")?
                .execute([id])?;
            log_event(&tx, id as u64, now, "released", "reservation lease expired")?;
        }
        tx.prepare_cached("UPDATE workflows SET admitted_at = NULL WHERE id = ?1")?
            .execute([workflow as i64])?;
        tx.commit()?;
        Ok(())
    }

    pub fn set_workflow_state(
        &mut self,
        id: u64,
        state: &str,
        ended_at: Option<Millis>,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE workflows SET state = ?1, ended_at = ?2 WHERE id = ?3")?
            .execute(params![state, ended_at, id as i64])?;
        Ok(())
    }

    pub fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT job_id, at, kind, detail FROM events WHERE job_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([id.0 as i64], |r| {
            Ok(Event {
                job: JobId(r.get::<_, i64>(0)? as u64),
                at: r.get(1)?,
                kind: r.get(2)?,
                detail: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

const WORKFLOW_COLUMNS: &str =
    "id, name, atomic, state, owner_uid, owner, source, submitted_at, admitted_at, ended_at";

fn read_workflow(r: &Row<'_>) -> rusqlite::Result<WorkflowRecord> {
    Ok(WorkflowRecord {
        id: r.get::<_, i64>(0)? as u64,
        name: r.get(1)?,
        atomic: r.get(2)?,
        state: r.get(3)?,
        owner_uid: r.get(4)?,
        owner: r.get(5)?,
        source: r.get(6)?,
        submitted_at: r.get(7)?,
        admitted_at: r.get(8)?,
        ended_at: r.get(9)?,
    })
}

/// The default name is the program's file name, as squeue shows it.
fn default_name(job: &NewJob) -> String {
    job.name.clone().unwrap_or_else(|| {
        let program = job.command.first().map(String::as_str).unwrap_or("job");
        program.rsplit('/').next().unwrap_or(program).to_string()
    })
}

fn insert_job(tx: &rusqlite::Transaction<'_>, job: &NewJob) -> Result<JobId, StoreError> {
    tx.prepare_cached(
        "INSERT INTO jobs (name, state, command, cwd, env, owner_uid, owner, priority, \
         gpus_requested, gpu_mem, time_limit_ms, retries, attempt, deps, tags, submitted_at, gpus, umask, \
         notify, session, workflow_id, task, critical_path_ms) \
         VALUES (?1, 'queued', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12, ?13, ?14, '[]', ?15, ?16, ?17, \
         ?18, ?19, ?20)",
    )?
    .execute(params![
        default_name(job),
        json(&job.command),
        job.cwd,
        json(&job.env),
        job.owner_uid,
        job.owner,
        job.priority,
        job.request.count,
        job.request.mem_per_gpu.map(|m| m as i64),
        job.time_limit,
        job.retries,
        json(&deps_to_json(&job.deps)),
        json(&job.tags),
        job.submitted_at,
        job.umask,
        json(&job.notify),
        job.session,
        job.workflow_id.map(|w| w as i64),
        job.task,
        job.critical_path,
    ])?;
    let id = tx.last_insert_rowid() as u64;
    log_event(tx, id, job.submitted_at, "submitted", &job.owner)?;
    Ok(JobId(id))
}

/// One pending delivery per channel; the session channels after the first stand by, each for
/// the one before it (the wake chain, `Channel` says why).
fn insert_deliveries(
    tx: &rusqlite::Transaction<'_>,
    job: JobId,
    workflow: Option<u64>,
    channels: &[Channel],
    at: Millis,
) -> Result<(), StoreError> {
    let mut previous_link: Option<i64> = None;
    for channel in channels {
        let after = if channel.is_session() {
            previous_link
        } else {
            None
        };
        let state = if after.is_some() {
            DeliveryState::Standby
        } else {
            DeliveryState::Pending
        };
        tx.prepare_cached(
            "INSERT INTO deliveries (job_id, channel, state, next_at, workflow_id, after_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            job.0 as i64,
            json(channel),
            state.as_str(),
            at,
            workflow.map(|w| w as i64),
            after
        ])?;
        if channel.is_session() {
            previous_link = Some(tx.last_insert_rowid());
        }
    }
    Ok(())
}

/// Moves a wake chain on after link `id` settled as `state` (see `record_delivery`).
fn advance_chain(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    state: DeliveryState,
    now: Millis,
) -> Result<(), StoreError> {
    if state == DeliveryState::Delivered {
        // Every link after this one, however far down the chain.
        tx.prepare_cached(
            "WITH RECURSIVE later(id) AS ( \
                 SELECT id FROM deliveries WHERE after_id = ?1 \
                 UNION SELECT d.id FROM deliveries d JOIN later ON d.after_id = later.id) \
             UPDATE deliveries SET state = 'unneeded', error = NULL \
             WHERE id IN (SELECT id FROM later) AND state = 'standby'",
        )?
        .execute(params![id])?;
    } else if state.passes_on() {
        tx.prepare_cached(
            "UPDATE deliveries SET state = 'pending', next_at = ?1 \
             WHERE after_id = ?2 AND state = 'standby'",
        )?
        .execute(params![now, id])?;
    }
    Ok(())
}

fn log_event(
    tx: &rusqlite::Transaction<'_>,
    id: u64,
    at: Millis,
    kind: &str,
    detail: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached("INSERT INTO events (job_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![id as i64, at, kind, detail])?;
    Ok(())
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data always serialises")
}

fn deps_to_json(deps: &[Dependency]) -> Vec<(u64, &'static str)> {
    deps.iter()
        .map(|d| {
            (
                d.job.0,
                match d.kind {
                    DepKind::Success => "success",
                    DepKind::Any => "any",
                },
            )
        })
        .collect()
}

fn parse_state(id: u64, text: &str) -> Result<JobState, StoreError> {
    text.parse()
        .map_err(|e: baton_core::model::UnknownState| StoreError::Corrupt {
            id,
            detail: e.to_string(),
        })
}

fn read_row(r: &Row<'_>) -> rusqlite::Result<Result<JobRecord, StoreError>> {
    let id = r.get::<_, i64>(0)? as u64;
    let text = |i: usize| r.get::<_, String>(i);
    let corrupt = |detail: String| StoreError::Corrupt { id, detail };
    let parse = |i: usize, what: &str| -> Result<serde_json::Value, StoreError> {
        let t: String = r.get(i).map_err(StoreError::from)?;
        serde_json::from_str(&t).map_err(|e| corrupt(format!("{what}: {e}")))
    };
    let build = || -> Result<JobRecord, StoreError> {
        let deps_raw: Vec<(u64, String)> = serde_json::from_value(parse(14, "deps")?)
            .map_err(|e| corrupt(format!("deps: {e}")))?;
        let deps = deps_raw
            .into_iter()
            .map(|(job, kind)| Dependency {
                job: JobId(job),
                kind: if kind == "any" {
                    DepKind::Any
                } else {
                    DepKind::Success
                },
            })
            .collect();
        fn from<T: serde::de::DeserializeOwned>(
            v: serde_json::Value,
            what: &str,
            id: u64,
        ) -> Result<T, StoreError> {
            serde_json::from_value(v).map_err(|e| StoreError::Corrupt {
                id,
                detail: format!("{what}: {e}"),
            })
        }
        Ok(JobRecord {
            id: JobId(id),
            name: text(1)?,
            state: parse_state(id, &text(2)?)?,
            command: from(parse(3, "command")?, "command", id)?,
            cwd: text(4)?,
            env: from(parse(5, "env")?, "env", id)?,
            owner_uid: r.get(6)?,
            owner: text(7)?,
            priority: r.get(8)?,
            request: GpuRequest {
                count: r.get(9)?,
                mem_per_gpu: r.get::<_, Option<i64>>(10)?.map(|m| m as u64),
            },
            time_limit: r.get(11)?,
            retries: r.get(12)?,
            attempt: r.get(13)?,
            deps,
            tags: from(parse(15, "tags")?, "tags", id)?,
            submitted_at: r.get(16)?,
            started_at: r.get(17)?,
            ended_at: r.get(18)?,
            exit_code: r.get(19)?,
            signal: r.get(20)?,
            reason: r.get(21)?,
            gpus: from(parse(22, "gpus")?, "gpus", id)?,
            workflow_id: r.get::<_, Option<i64>>(23)?.map(|w| w as u64),
            cancel_requested_by: r.get(24)?,
            umask: r.get(25)?,
            notify: from(parse(26, "notify")?, "notify", id)?,
            session: r.get(27)?,
            task: r.get(28)?,
            reserved: match r.get::<_, Option<String>>(29)? {
                Some(t) => {
                    Some(serde_json::from_str(&t).map_err(|e| corrupt(format!("reserved: {e}")))?)
                }
                None => None,
            },
            lease_until: r.get(30)?,
            critical_path: r.get(31)?,
            colocate: from::<Vec<u64>>(parse(32, "colocate")?, "colocate", id)?
                .into_iter()
                .map(JobId)
                .collect(),
            slurm_id: r.get::<_, Option<i64>>(33)?.map(|v| v as u64),
            slurm_submitting_at: r.get(34)?,
            slurm_nodes: r.get(35)?,
            slurm_state: r.get(36)?,
            not_before: r.get(37)?,
        })
    };
    Ok(build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_job(command: &[&str]) -> NewJob {
        NewJob {
            name: None,
            command: command.iter().map(|s| s.to_string()).collect(),
            cwd: "/tmp".into(),
            env: BTreeMap::from([("A".into(), "1".into())]),
            owner_uid: 1000,
            owner: "alice".into(),
            priority: 3,
            request: GpuRequest::shared(2, 8 << 30),
            time_limit: Some(60_000),
            retries: 1,
            deps: vec![Dependency {
                job: JobId(7),
                kind: DepKind::Any,
            }],
            tags: BTreeMap::from([("protect".into(), "true".into())]),
            submitted_at: 1_000,
            umask: Some(0o022),
            notify: vec![Channel::File {
                path: "/tmp/inbox.md".into(),
            }],
            session: Some("tmux:%1".into()),
            workflow_id: None,
            task: None,
            critical_path: 0,
        }
    }

    /// The states of a job's deliveries, by channel kind, in order.
    fn chain_states(store: &Store, job: JobId) -> Vec<(&'static str, &'static str)> {
        store
            .deliveries(job)
            .unwrap()
            .iter()
            .map(|d| (d.channel.kind(), d.state.as_str()))
            .collect()
    }

    #[test]
    fn a_wake_chain_uses_each_link_only_if_the_one_before_did_not_wake() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let claude = Channel::Claude {
            socket: "/s".into(),
            token: "t".into(),
            session: Some("s".into()),
            inbound: None,
        };
        let tmux = Channel::Tmux {
            pane: "%1".into(),
            server: None,
        };
        let file = Channel::File {
            path: "/tmp/inbox.md".into(),
        };
        let channels = [claude, tmux, file];
        let end = |store: &mut Store| {
            let job = store.insert(&new_job(&["true"])).unwrap();
            let ending = Ending {
                state: JobState::Succeeded,
                exit_code: Some(0),
                signal: None,
                reason: None,
                at: 10,
            };
            store.mark_ended(job.id, &ending, &channels).unwrap();
            let ids: Vec<i64> = store
                .deliveries(job.id)
                .unwrap()
                .iter()
                .map(|d| d.id)
                .collect();
            (job.id, ids)
        };
        // The first link and the file are sent; the tmux link stands by.
        let (woken, ids) = end(&mut store);
        assert_eq!(
            chain_states(&store, woken),
            [
                ("claude", "pending"),
                ("tmux", "standby"),
                ("file", "pending")
            ]
        );
        assert!(store.has_standby_after(ids[0]).unwrap());
        assert_eq!(store.due_deliveries(10, 10).unwrap().len(), 2);
        store
            .record_delivery(ids[0], DeliveryState::Delivered, 11, None, 11)
            .unwrap();
        assert_eq!(
            chain_states(&store, woken),
            [
                ("claude", "delivered"),
                ("tmux", "unneeded"),
                ("file", "pending")
            ]
        );
        // A link that passes on (held, noted, gone, failed) hands over to the next one, at once.
        let (passed, ids) = end(&mut store);
        store
            .record_delivery(ids[0], DeliveryState::Held, 12, Some("bypass"), 12)
            .unwrap();
        assert_eq!(
            chain_states(&store, passed),
            [("claude", "held"), ("tmux", "pending"), ("file", "pending")]
        );
        // A settled row is never overwritten (the outbox's late look after the hook's word).
        store
            .record_delivery(ids[0], DeliveryState::Delivered, 13, None, 13)
            .unwrap();
        assert_eq!(chain_states(&store, passed)[0], ("claude", "held"));
        // The hook takes the inbox's place after the fact (the inbox had been "delivered", as
        // far as its socket said): the inbox becomes held, what it made unneeded stands by again,
        // for the hook.
        let (hooked, ids) = end(&mut store);
        store
            .record_delivery(ids[0], DeliveryState::Delivered, 13, None, 13)
            .unwrap();
        let hook = Channel::ClaudeHook {
            session: "s".into(),
            pid: 1,
            started: 1,
        };
        let link = store
            .claim_ended(
                hooked,
                &channels,
                Some(ids[0]),
                Some((ids[0], DeliveryState::Held, "bypass".into())),
                &hook,
                14,
                "the hook",
            )
            .unwrap();
        assert_eq!(
            chain_states(&store, hooked),
            [
                ("claude", "held"),
                ("tmux", "standby"),
                ("file", "pending"),
                ("claude-hook", "pending")
            ]
        );
        // A hook that is gone passes the wake on to the pane.
        store
            .record_delivery(link, DeliveryState::Skipped, 15, Some("gone"), 15)
            .unwrap();
        assert_eq!(chain_states(&store, hooked)[1], ("tmux", "pending"));
    }

    #[test]
    fn a_job_round_trips_and_its_history_is_logged() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let job = store
            .insert(&new_job(&["/usr/bin/python3", "train.py"]))
            .unwrap();
        assert_eq!(job.id, JobId(1));
        assert_eq!(job.name, "python3");
        assert_eq!(job.state, JobState::Queued);
        assert_eq!(job.request, GpuRequest::shared(2, 8 << 30));
        assert_eq!(job.deps[0].kind, DepKind::Any);

        store.mark_started(&[(job.id, vec![0, 1])], 2_000).unwrap();
        let running = store.get(job.id).unwrap().unwrap();
        assert_eq!((running.state, running.attempt), (JobState::Running, 1));
        assert_eq!(running.gpus, vec![0, 1]);

        store
            .requeue(job.id, true, "attempt 1 failed", Some(4_000), 3_000)
            .unwrap();
        assert_eq!(store.get(job.id).unwrap().unwrap().not_before, Some(4_000));
        store.mark_started(&[(job.id, vec![1, 0])], 4_000).unwrap();
        store
            .mark_ended(
                job.id,
                &Ending {
                    state: JobState::Failed,
                    exit_code: Some(3),
                    signal: None,
                    reason: Some("exit code 3".into()),
                    at: 5_000,
                },
                &job.notify,
            )
            .unwrap();
        let ended = store.get(job.id).unwrap().unwrap();
        assert_eq!(
            (ended.state, ended.attempt, ended.exit_code),
            (JobState::Failed, 2, Some(3))
        );
        assert_eq!(ended.not_before, None, "a start clears the backoff");
        let kinds: Vec<String> = store
            .events(job.id)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds,
            ["submitted", "started", "retry", "started", "failed"]
        );
        assert_eq!(store.ended_since(5_000).unwrap().len(), 1);
        assert!(store.active().unwrap().is_empty());
        let states = store.states(&[job.id, JobId(99)]).unwrap();
        assert_eq!(states.len(), 1);
        assert_eq!(states[&job.id], (JobState::Failed, ended.gpus.clone()));
    }

    #[test]
    fn an_idempotency_key_names_one_job_per_owner() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let keyed = store
            .insert_requested(&new_job(&["true"]), Some("k-1"))
            .unwrap();
        assert_eq!(
            store.job_for_request(keyed.owner_uid, "k-1").unwrap(),
            Some(keyed.id)
        );
        assert_eq!(
            store.job_for_request(keyed.owner_uid + 1, "k-1").unwrap(),
            None
        );
        assert_eq!(store.job_for_request(keyed.owner_uid, "k-2").unwrap(), None);
        assert!(
            store
                .insert_requested(&new_job(&["true"]), Some("k-1"))
                .is_err(),
            "the key is unique per owner"
        );
    }

    #[test]
    fn a_workflow_keeps_its_dependencies_and_colocation_as_job_ids() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let task = |after: &[usize], colocate: &[usize]| NewTask {
            job: new_job(&["true"]),
            after: after.to_vec(),
            colocate: colocate.to_vec(),
        };
        // prep; train after prep, with eval; eval after train (a partner listed later).
        let wf = NewWorkflow {
            name: "pipe".into(),
            atomic: false,
            owner_uid: 1000,
            owner: "alice".into(),
            source: "pipe.yaml".into(),
            submitted_at: 1,
            tasks: vec![task(&[], &[]), task(&[0], &[2]), task(&[1], &[])],
        };
        let (_, jobs) = store.insert_workflow(&wf).unwrap();
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
        assert_eq!(
            jobs[1].deps.iter().map(|d| d.job).collect::<Vec<_>>(),
            [ids[0]]
        );
        assert_eq!(jobs[1].colocate, [ids[2]]);
        assert!(jobs[0].colocate.is_empty() && jobs[2].colocate.is_empty());
        assert_eq!(store.get(ids[1]).unwrap().unwrap().colocate, [ids[2]]);
    }

    #[test]
    fn state_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baton.db");
        {
            let mut store = Store::open(&path).unwrap();
            store.insert(&new_job(&["true"])).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.max_id().unwrap(), 1);
        assert_eq!(store.active().unwrap().len(), 1);
    }
}
