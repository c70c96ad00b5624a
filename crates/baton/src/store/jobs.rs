//! The `jobs` table: a job as submitted (`NewJob`), as recorded (`JobRecord`) and how an
//! attempt ended (`Ending`); the queries that read jobs back (by id, active, ended, by session,
//! by idempotency key) and the updates of one job's life (start, end, requeue, cancel, priority,
//! notify, the Slurm backend's fields), each committed with its event.

use std::collections::{BTreeMap, HashMap};

use baton_core::{DepKind, Dependency, GpuRequest, JobId, JobState, Millis};
use rusqlite::{OptionalExtension, Row, params};

use super::deliveries::insert_deliveries;
use super::events::log_event;
use super::{Store, StoreError, json};
use crate::notify::Channel;

/// Everything baton knows about a job.
#[derive(Clone, PartialEq)]
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
#[derive(Clone)]
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

/// The environment's variable names, never their values (tokens, keys, passwords): what `Debug`
/// shows of a job's `env`.
struct EnvNames<'a>(&'a BTreeMap<String, String>);

impl std::fmt::Debug for EnvNames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl std::fmt::Debug for JobRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field, named, so that a new one cannot be left out (or printed unredacted)
        // unnoticed.
        let JobRecord {
            id,
            name,
            state,
            command,
            cwd,
            env,
            owner_uid,
            owner,
            priority,
            request,
            time_limit,
            retries,
            attempt,
            deps,
            tags,
            submitted_at,
            started_at,
            ended_at,
            exit_code,
            signal,
            reason,
            gpus,
            workflow_id,
            cancel_requested_by,
            umask,
            notify,
            session,
            task,
            reserved,
            lease_until,
            critical_path,
            colocate,
            slurm_id,
            slurm_submitting_at,
            slurm_nodes,
            slurm_state,
            not_before,
        } = self;
        f.debug_struct("JobRecord")
            .field("id", id)
            .field("name", name)
            .field("state", state)
            .field("command", command)
            .field("cwd", cwd)
            .field("env", &EnvNames(env))
            .field("owner_uid", owner_uid)
            .field("owner", owner)
            .field("priority", priority)
            .field("request", request)
            .field("time_limit", time_limit)
            .field("retries", retries)
            .field("attempt", attempt)
            .field("deps", deps)
            .field("tags", tags)
            .field("submitted_at", submitted_at)
            .field("started_at", started_at)
            .field("ended_at", ended_at)
            .field("exit_code", exit_code)
            .field("signal", signal)
            .field("reason", reason)
            .field("gpus", gpus)
            .field("workflow_id", workflow_id)
            .field("cancel_requested_by", cancel_requested_by)
            .field("umask", umask)
            .field("notify", notify)
            .field("session", session)
            .field("task", task)
            .field("reserved", reserved)
            .field("lease_until", lease_until)
            .field("critical_path", critical_path)
            .field("colocate", colocate)
            .field("slurm_id", slurm_id)
            .field("slurm_submitting_at", slurm_submitting_at)
            .field("slurm_nodes", slurm_nodes)
            .field("slurm_state", slurm_state)
            .field("not_before", not_before)
            .finish()
    }
}

impl std::fmt::Debug for NewJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let NewJob {
            name,
            command,
            cwd,
            env,
            owner_uid,
            owner,
            priority,
            request,
            time_limit,
            retries,
            deps,
            tags,
            submitted_at,
            umask,
            notify,
            session,
            workflow_id,
            task,
            critical_path,
        } = self;
        f.debug_struct("NewJob")
            .field("name", name)
            .field("command", command)
            .field("cwd", cwd)
            .field("env", &EnvNames(env))
            .field("owner_uid", owner_uid)
            .field("owner", owner)
            .field("priority", priority)
            .field("request", request)
            .field("time_limit", time_limit)
            .field("retries", retries)
            .field("deps", deps)
            .field("tags", tags)
            .field("submitted_at", submitted_at)
            .field("umask", umask)
            .field("notify", notify)
            .field("session", session)
            .field("workflow_id", workflow_id)
            .field("task", task)
            .field("critical_path", critical_path)
            .finish()
    }
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

/// How an attempt ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Ending {
    pub state: JobState,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: Option<String>,
    pub at: Millis,
}

columns!(
    /// The columns of `jobs` a `JobRecord` is read from.
    JobColumns {
        id,
        name,
        state,
        command,
        cwd,
        env,
        owner_uid,
        owner,
        priority,
        gpus_requested,
        gpu_mem,
        time_limit_ms,
        retries,
        attempt,
        deps,
        tags,
        submitted_at,
        started_at,
        ended_at,
        exit_code,
        signal,
        reason,
        gpus,
        workflow_id,
        cancel_requested_by,
        umask,
        notify,
        session,
        task,
        reserved,
        lease_until,
        critical_path_ms,
        colocate,
        slurm_id,
        slurm_submitting_at,
        slurm_nodes,
        slurm_state,
        not_before,
    }
);

impl Store {
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
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM jobs WHERE id = ?1",
            JobColumns::LIST
        ))?;
        let cols = JobColumns::of(&stmt)?;
        stmt.query_row([id.0 as i64], |r| read_row(r, &cols))
            .optional()?
            .transpose()
    }

    /// The jobs `where_clause` selects (with its ORDER BY), read whole.
    pub(super) fn select(
        &self,
        where_clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM jobs {where_clause}",
            JobColumns::LIST
        ))?;
        let cols = JobColumns::of(&stmt)?;
        let rows = stmt.query_map(args, |r| read_row(r, &cols))?;
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
            .query_row("SELECT COALESCE(MAX(id), 0) AS max_id FROM jobs", [], |r| {
                r.get::<_, i64>("max_id")
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
                    Ok((r.get::<_, String>("state")?, r.get::<_, String>("gpus")?))
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
            .query_row(params![owner_uid, request_id], |r| r.get::<_, i64>("id"))
            .optional()?
            .map(|id| JobId(id as u64)))
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

    /// Run times (ms) of the last successful runs of the same task of a workflow of the same
    /// name, or of the same command, newest first: what predictions are made from.
    pub fn run_history(
        &self,
        command: &[String],
        task: &str,
        workflow: &str,
    ) -> Result<Vec<Millis>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT ended_at - started_at AS run_ms FROM jobs WHERE state = 'succeeded' \
             AND started_at IS NOT NULL AND ended_at IS NOT NULL \
             AND (command = ?1 OR (task = ?2 AND workflow_id IN \
                  (SELECT id FROM workflows WHERE name = ?3))) \
             ORDER BY id DESC LIMIT 50",
        )?;
        let rows = stmt.query_map(params![json(&command), task, workflow], |r| r.get("run_ms"))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// The default name is the program's file name, as squeue shows it.
fn default_name(job: &NewJob) -> String {
    job.name.clone().unwrap_or_else(|| {
        let program = job.command.first().map(String::as_str).unwrap_or("job");
        program.rsplit('/').next().unwrap_or(program).to_string()
    })
}

/// Inserts a queued job and its `submitted` event.
pub(super) fn insert_job(
    tx: &rusqlite::Transaction<'_>,
    job: &NewJob,
) -> Result<JobId, StoreError> {
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

/// One row of a `SELECT {JobColumns::LIST}`, its columns found by name in `c`.
fn read_row(r: &Row<'_>, c: &JobColumns) -> rusqlite::Result<Result<JobRecord, StoreError>> {
    let id = r.get::<_, i64>(c.id)? as u64;
    let text = |i: usize| r.get::<_, String>(i);
    let corrupt = |detail: String| StoreError::Corrupt { id, detail };
    let parse = |i: usize, what: &str| -> Result<serde_json::Value, StoreError> {
        let t: String = r.get(i).map_err(StoreError::from)?;
        serde_json::from_str(&t).map_err(|e| corrupt(format!("{what}: {e}")))
    };
    let build = || -> Result<JobRecord, StoreError> {
        let deps_raw: Vec<(u64, String)> = serde_json::from_value(parse(c.deps, "deps")?)
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
            name: text(c.name)?,
            state: parse_state(id, &text(c.state)?)?,
            command: from(parse(c.command, "command")?, "command", id)?,
            cwd: text(c.cwd)?,
            env: from(parse(c.env, "env")?, "env", id)?,
            owner_uid: r.get(c.owner_uid)?,
            owner: text(c.owner)?,
            priority: r.get(c.priority)?,
            request: GpuRequest {
                count: r.get(c.gpus_requested)?,
                mem_per_gpu: r.get::<_, Option<i64>>(c.gpu_mem)?.map(|m| m as u64),
            },
            time_limit: r.get(c.time_limit_ms)?,
            retries: r.get(c.retries)?,
            attempt: r.get(c.attempt)?,
            deps,
            tags: from(parse(c.tags, "tags")?, "tags", id)?,
            submitted_at: r.get(c.submitted_at)?,
            started_at: r.get(c.started_at)?,
            ended_at: r.get(c.ended_at)?,
            exit_code: r.get(c.exit_code)?,
            signal: r.get(c.signal)?,
            reason: r.get(c.reason)?,
            gpus: from(parse(c.gpus, "gpus")?, "gpus", id)?,
            workflow_id: r.get::<_, Option<i64>>(c.workflow_id)?.map(|w| w as u64),
            cancel_requested_by: r.get(c.cancel_requested_by)?,
            umask: r.get(c.umask)?,
            notify: from(parse(c.notify, "notify")?, "notify", id)?,
            session: r.get(c.session)?,
            task: r.get(c.task)?,
            reserved: match r.get::<_, Option<String>>(c.reserved)? {
                Some(t) => {
                    Some(serde_json::from_str(&t).map_err(|e| corrupt(format!("reserved: {e}")))?)
                }
                None => None,
            },
            lease_until: r.get(c.lease_until)?,
            critical_path: r.get(c.critical_path_ms)?,
            colocate: from::<Vec<u64>>(parse(c.colocate, "colocate")?, "colocate", id)?
                .into_iter()
                .map(JobId)
                .collect(),
            slurm_id: r.get::<_, Option<i64>>(c.slurm_id)?.map(|v| v as u64),
            slurm_submitting_at: r.get(c.slurm_submitting_at)?,
            slurm_nodes: r.get(c.slurm_nodes)?,
            slurm_state: r.get(c.slurm_state)?,
            not_before: r.get(c.not_before)?,
        })
    };
    Ok(build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::new_job;

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
    fn every_column_reads_back_into_its_own_field() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let mut submitted = new_job(&["/bin/train", "--fast"]);
        submitted.name = Some("train".into());
        submitted.task = Some("fit".into());
        submitted.critical_path = 90_000;
        let inserted = store.insert(&submitted).unwrap();
        store
            .mark_started(&[(inserted.id, vec![3])], 2_000)
            .unwrap();
        store.mark_slurm_submitting(inserted.id, 2_100).unwrap();
        store.set_slurm_id(inserted.id, 4242, 2_200).unwrap();
        store
            .set_slurm_state(inserted.id, "RUNNING", Some("node7"))
            .unwrap();
        store
            .mark_cancel_requested(inserted.id, "bob", 2_300)
            .unwrap();
        store.set_priority(inserted.id, 9, 2_400).unwrap();
        store
            .mark_ended(
                inserted.id,
                &Ending {
                    state: JobState::Cancelled,
                    exit_code: Some(143),
                    signal: Some(15),
                    reason: Some("cancelled by bob".into()),
                    at: 3_000,
                },
                &[],
            )
            .unwrap();
        let read = store.get(inserted.id).unwrap().unwrap();
        let expected = JobRecord {
            state: JobState::Cancelled,
            priority: 9,
            attempt: 1,
            started_at: Some(2_000),
            ended_at: Some(3_000),
            exit_code: Some(143),
            signal: Some(15),
            reason: Some("cancelled by bob".into()),
            gpus: vec![3],
            cancel_requested_by: Some("bob".into()),
            slurm_id: Some(4242),
            slurm_submitting_at: Some(2_100),
            slurm_nodes: Some("node7".into()),
            slurm_state: Some("RUNNING".into()),
            ..inserted
        };
        assert_eq!(read, expected);
        // A reservation, and a retry's backoff.
        let waiting = store.insert(&new_job(&["true"])).unwrap();
        store
            .reserve(0, &[(waiting.id, vec![1, 2])], 5_000, 1_500)
            .unwrap();
        store
            .requeue(waiting.id, true, "backing off", Some(6_000), 1_600)
            .unwrap();
        let waiting = JobRecord {
            reason: Some("backing off".into()),
            reserved: Some(vec![1, 2]),
            lease_until: Some(5_000),
            not_before: Some(6_000),
            ..waiting
        };
        assert_eq!(store.all().unwrap(), [expected, waiting]);
    }

    #[test]
    fn debug_output_shows_env_names_but_not_their_values() {
        let mut job = new_job(&["true"]);
        job.env = BTreeMap::from([
            ("HF_TOKEN".into(), "hf_s3cr3tvalue".into()),
            ("PATH".into(), "/opt/private/bin".into()),
        ]);
        let shown = format!("{job:?}");
        assert!(
            !shown.contains("hf_s3cr3tvalue") && !shown.contains("/opt/private/bin"),
            "{shown}"
        );
        assert!(
            shown.contains("HF_TOKEN") && shown.contains("PATH"),
            "{shown}"
        );
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let record = store.insert(&job).unwrap();
        let shown = format!("{record:?} {:#?}", store.get(record.id).unwrap());
        assert!(
            !shown.contains("hf_s3cr3tvalue") && !shown.contains("/opt/private/bin"),
            "{shown}"
        );
        assert!(shown.contains("HF_TOKEN"), "{shown}");
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
}
