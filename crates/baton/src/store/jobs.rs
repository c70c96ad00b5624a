//! The `jobs` table: a job as submitted (`NewJob`) and as recorded (`JobRecord`: the submission
//! and its typed `Life`); the queries that read jobs back (by id, active, ended, by session, by
//! idempotency key); and the one way a job's state changes: `Store::apply_all`, which computes
//! each job's new `Life` with `baton_core::lifecycle`, writes every state column from it and
//! logs the transition's event, in one transaction. Only the daemon's job table
//! (`daemon/jobs.rs`) calls it, and it keeps its copy in memory from the records returned.

use std::collections::{BTreeMap, HashMap};

use baton_core::lifecycle::{
    Effects, Ended, Exit, Life, Outcome, Queued, Ran, Reservation, Runner, Running, SlurmJob,
    SlurmQueue, Status, Transition,
};
use baton_core::{DepKind, Dependency, JobId, JobState, Millis, ResourceRequest};
use rusqlite::{OptionalExtension, Row, Transaction, params};

use super::events::log_event;
use super::{Store, StoreError, json};
use crate::api::EnvNames;
use crate::notify::Channel;

/// Everything baton knows about a job.
#[derive(Clone, PartialEq)]
pub struct JobRecord {
    pub id: JobId,
    pub name: String,
    pub command: Vec<String>,
    pub cwd: String,
    pub env: BTreeMap<String, String>,
    pub owner_uid: u32,
    pub owner: String,
    pub priority: i64,
    pub request: ResourceRequest,
    pub time_limit: Option<Millis>,
    pub retries: u32,
    pub deps: Vec<Dependency>,
    pub tags: BTreeMap<String, String>,
    pub submitted_at: Millis,
    pub workflow_id: Option<u64>,
    /// The submitter's umask, applied to the job.
    pub umask: Option<u32>,
    /// Where the report goes when the job ends.
    pub notify: Vec<Channel>,
    /// The agent session that submitted the job (`claude:ID`, `codex:THREAD`, `tmux:PANE`).
    pub session: Option<String>,
    /// The job's task name in its workflow.
    pub task: Option<String>,
    /// The predicted longest path from this task to its workflow's end (0 outside workflows).
    pub critical_path: Millis,
    /// The jobs of the tasks it asked to share a node with (`colocate_with`).
    pub colocate: Vec<JobId>,
    /// It starts no earlier than this (`--begin`).
    pub begin_at: Option<Millis>,
    /// The file its stdin reads (`--stdin`); else /dev/null.
    pub stdin: Option<String>,
    /// The mid-run detectors that stop it as failed (`--stop-on`).
    pub stop_on: Vec<baton_core::midrun::Detector>,
    /// What its submitter asked to be woken for while it runs (`--wake-on`, `--wake-when`).
    pub wake: baton_core::midrun::Milestones,
    /// Its place in a sweep or array (`submit --array/--sweep`).
    pub sweep: Option<SweepRun>,
    /// The parameters it runs with: a sweep's run's, or a workflow matrix task's.
    pub params: baton_core::sweep::Params,
    /// The reservation it runs in (`--reservation`).
    pub reservation: Option<InReservation>,
    /// Its checkpoint signal (`--signal SIG[@SECS]`): sent that long before its time limit.
    pub signal: Option<baton_core::signal::CheckpointSignal>,
    /// Its status and attempts: private, so that only the store (from a transition) makes it.
    life: Life,
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
    pub request: ResourceRequest,
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
    pub begin_at: Option<Millis>,
    pub stdin: Option<String>,
    pub stop_on: Vec<baton_core::midrun::Detector>,
    pub wake: baton_core::midrun::Milestones,
    /// Queued held by this user (`submit --hold`).
    pub held_by: Option<String>,
    pub sweep: Option<SweepRun>,
    pub params: baton_core::sweep::Params,
    pub reservation: Option<InReservation>,
    pub signal: Option<baton_core::signal::CheckpointSignal>,
}

/// The reservation a job runs in (`--reservation NAME`), as it was when the job was submitted:
/// the job starts within its window, on its GPUs, and must end by its end.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InReservation {
    pub id: u64,
    pub name: String,
    pub end: Millis,
}

/// A job's place in its sweep: the sweep and its index (the array index; for a sweep its
/// 0-based position).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SweepRun {
    pub id: u64,
    pub index: u32,
}

impl std::fmt::Debug for JobRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field, named, so that a new one cannot be left out (or printed unredacted)
        // unnoticed.
        let JobRecord {
            id,
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
            workflow_id,
            umask,
            notify,
            session,
            task,
            critical_path,
            colocate,
            begin_at,
            stdin,
            stop_on,
            wake,
            sweep,
            params,
            reservation,
            signal,
            life,
        } = self;
        f.debug_struct("JobRecord")
            .field("id", id)
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
            .field("workflow_id", workflow_id)
            .field("umask", umask)
            .field("notify", notify)
            .field("session", session)
            .field("task", task)
            .field("critical_path", critical_path)
            .field("colocate", colocate)
            .field("begin_at", begin_at)
            .field("stdin", stdin)
            .field("stop_on", stop_on)
            .field("wake", wake)
            .field("sweep", sweep)
            .field("params", params)
            .field("reservation", reservation)
            .field("signal", signal)
            .field("life", life)
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
            begin_at,
            stdin,
            stop_on,
            wake,
            held_by,
            sweep,
            params,
            reservation,
            signal,
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
            .field("begin_at", begin_at)
            .field("stdin", stdin)
            .field("stop_on", stop_on)
            .field("wake", wake)
            .field("held_by", held_by)
            .field("sweep", sweep)
            .field("params", params)
            .field("reservation", reservation)
            .field("signal", signal)
            .finish()
    }
}

/// What `baton update` changes in a queued job; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecChange {
    pub name: Option<String>,
    pub priority: Option<i64>,
    pub time_limit: Option<Millis>,
    pub request: Option<ResourceRequest>,
}

/// `2 GPUs, 4 CPUs, 8 GiB`: a request as an event says it.
fn request_text(r: &ResourceRequest) -> String {
    let gpus = match r.mem_per_gpu {
        None => format!("{} GPU{}", r.count, if r.count == 1 { "" } else { "s" }),
        Some(mem) => format!(
            "{} GPU{} with {}",
            r.count,
            if r.count == 1 { "" } else { "s" },
            baton_core::units::format_size(mem)
        ),
    };
    let mut text = format!(
        "{gpus}, {} CPU{}",
        r.cpus,
        if r.cpus == 1 { "" } else { "s" }
    );
    if r.mem > 0 {
        text.push_str(&format!(", {}", baton_core::units::format_size(r.mem)));
    }
    text
}

/// A job's new life, as committed by [`Store::commit_all`]: only the store makes one, so a
/// record's life is always one the database holds.
pub struct Committed(Life);

impl JobRecord {
    /// A copy without the environment (which is often most of a record), for listings.
    pub fn listed(&self) -> JobRecord {
        // Every field, named, so that a new one cannot be left out unnoticed.
        let JobRecord {
            id,
            name,
            command,
            cwd,
            env: _,
            owner_uid,
            owner,
            priority,
            request,
            time_limit,
            retries,
            deps,
            tags,
            submitted_at,
            workflow_id,
            umask,
            notify,
            session,
            task,
            critical_path,
            colocate,
            begin_at,
            stdin,
            stop_on,
            wake,
            sweep,
            params,
            reservation,
            signal,
            life,
        } = self;
        JobRecord {
            id: *id,
            name: name.clone(),
            command: command.clone(),
            cwd: cwd.clone(),
            env: BTreeMap::new(),
            owner_uid: *owner_uid,
            owner: owner.clone(),
            priority: *priority,
            request: *request,
            time_limit: *time_limit,
            retries: *retries,
            deps: deps.clone(),
            tags: tags.clone(),
            submitted_at: *submitted_at,
            workflow_id: *workflow_id,
            umask: *umask,
            notify: notify.clone(),
            session: session.clone(),
            task: task.clone(),
            critical_path: *critical_path,
            colocate: colocate.clone(),
            begin_at: *begin_at,
            stdin: stdin.clone(),
            stop_on: stop_on.clone(),
            wake: wake.clone(),
            sweep: *sweep,
            params: params.clone(),
            reservation: reservation.clone(),
            signal: *signal,
            life: life.clone(),
        }
    }

    /// Its time limit for an attempt that starts at `start`: its own, or less where its
    /// reservation's window ends first (a job in a reservation ends by its end).
    pub fn time_limit_from(&self, start: Millis) -> Option<Millis> {
        let window = self.reservation.as_ref().map(|r| (r.end - start).max(0));
        match (self.time_limit, window) {
            (Some(own), Some(window)) => Some(own.min(window)),
            (own, window) => own.or(window),
        }
    }

    /// While it runs: when its attempt ends at the latest, by its time limit (`None`: no limit).
    pub fn ends_by(&self) -> Option<Millis> {
        let start = self.started_at()?;
        self.time_limit_from(start)
            .map(|limit| start.saturating_add(limit))
    }

    /// Takes the life the store committed for this job.
    pub fn take(&mut self, committed: Committed) {
        self.life = committed.0;
    }

    /// What an attempt's end depends on, for `lifecycle::decide`.
    pub fn facts(&self) -> baton_core::lifecycle::decide::JobFacts<'_> {
        baton_core::lifecycle::decide::JobFacts {
            cancel_requested_by: self.cancel_requested_by(),
            stop_reason: match &self.life.status {
                Status::Running(r) => r.stop_reason.as_deref(),
                _ => None,
            },
            time_limit: self.attempt_time_limit(),
            limit_from_reservation: self
                .reservation
                .as_ref()
                .filter(|_| self.attempt_time_limit() != self.time_limit)
                .map(|r| r.name.as_str()),
            attempt: self.attempt(),
            retries: self.retries,
        }
    }

    /// The time limit of its last attempt: its own, or less where its reservation ended first.
    pub fn attempt_time_limit(&self) -> Option<Millis> {
        self.started_at()
            .map_or(self.time_limit, |start| self.time_limit_from(start))
    }

    /// Whether it ended after its last attempt ran for at least `ms`.
    pub fn ran_at_least(&self, ms: Millis) -> bool {
        match (self.started_at(), self.ended_at()) {
            (Some(start), Some(end)) => end - start >= ms,
            _ => false,
        }
    }

    /// Its status and attempts (to read; only the store makes a new one).
    pub fn life(&self) -> &Life {
        &self.life
    }

    pub fn state(&self) -> JobState {
        self.life.state()
    }

    /// Attempts started so far (0 while it never started).
    pub fn attempt(&self) -> u32 {
        self.life.attempt
    }

    /// The GPUs of its running attempt, or of its last one once it ended (none while queued).
    pub fn gpus(&self) -> &[u32] {
        match &self.life.status {
            Status::Running(r) => &r.gpus,
            Status::Ended(Ended { ran: Some(ran), .. }) => &ran.gpus,
            _ => &[],
        }
    }

    /// How many GPUs its attempt holds while it runs: those it was placed on, or, where
    /// another scheduler placed it (Slurm), as many as it asked for.
    pub fn gpus_held(&self) -> i64 {
        self.gpus().len().max(self.request.count as usize) as i64
    }

    /// When its running (or, once ended, its last) attempt started.
    pub fn started_at(&self) -> Option<Millis> {
        match &self.life.status {
            Status::Running(r) => Some(r.since),
            Status::Ended(e) => e.ran.as_ref().map(|r| r.since),
            Status::Queued(_) => None,
        }
    }

    pub fn ended_at(&self) -> Option<Millis> {
        match &self.life.status {
            Status::Ended(e) => Some(e.at),
            _ => None,
        }
    }

    /// How it (or, while it waits for a retry, its last attempt) exited.
    fn exit(&self) -> Exit {
        match &self.life.status {
            Status::Queued(q) => q.previous,
            Status::Running(_) => Exit::default(),
            Status::Ended(e) => e.exit,
        }
    }

    pub fn exit_code(&self) -> Option<i32> {
        self.exit().code
    }

    pub fn signal(&self) -> Option<i32> {
        self.exit().signal
    }

    /// The reason recorded with its state (why it waits, what happens to it, why it ended).
    pub fn reason(&self) -> Option<&str> {
        match &self.life.status {
            Status::Queued(q) => q.reason.as_deref(),
            Status::Running(r) => r.reason.as_deref(),
            Status::Ended(e) => e.reason.as_deref(),
        }
    }

    /// Who asked to cancel it.
    pub fn cancel_requested_by(&self) -> Option<&str> {
        match &self.life.status {
            Status::Queued(q) => q.cancel_requested_by.as_deref(),
            Status::Running(r) => r.cancel_requested_by.as_deref(),
            Status::Ended(e) => e.cancel_requested_by.as_deref(),
        }
    }

    fn queued(&self) -> Option<&Queued> {
        match &self.life.status {
            Status::Queued(q) => Some(q),
            _ => None,
        }
    }

    /// The GPUs its atomic workflow's admission set aside for it, while it waits to start.
    pub fn reserved(&self) -> Option<&[u32]> {
        self.queued()?
            .reservation
            .as_ref()
            .map(|r| r.gpus.as_slice())
    }

    /// Until when that reservation holds unless the daemon renews it.
    pub fn lease_until(&self) -> Option<Millis> {
        self.queued()?.reservation.as_ref().map(|r| r.lease_until)
    }

    /// Who holds it, while it is held.
    pub fn held_by(&self) -> Option<&str> {
        self.queued()?.held_by.as_deref()
    }

    /// A retry waits out its backoff: the next attempt starts no earlier than this.
    pub fn not_before(&self) -> Option<Millis> {
        self.queued()?.not_before
    }

    /// The Slurm job of its current (or last) attempt, under the Slurm backend.
    fn slurm_job(&self) -> Option<&SlurmJob> {
        match &self.life.status {
            Status::Queued(q) => q.slurm.as_ref()?.job(),
            Status::Running(Running {
                on: Runner::Slurm(s),
                ..
            }) => Some(s),
            Status::Running(_) => None,
            Status::Ended(e) => e.slurm.as_ref(),
        }
    }

    pub fn slurm_id(&self) -> Option<u64> {
        self.slurm_job().map(|s| s.id)
    }

    /// When the queued job's `sbatch` was about to run (set before it runs, so that a crash in
    /// between is found again by the job's name and comment instead of being submitted twice).
    pub fn slurm_submitting_at(&self) -> Option<Millis> {
        match self.queued()?.slurm.as_ref()? {
            SlurmQueue::Submitting { since } => Some(*since),
            SlurmQueue::Submitted { since, .. } => *since,
        }
    }

    /// The nodes Slurm runs (or ran) it on.
    pub fn slurm_nodes(&self) -> Option<&str> {
        self.slurm_job()?.nodes.as_deref()
    }

    /// Slurm's last word on it (`PENDING`, `RUNNING`, `OUT_OF_MEMORY`, ...).
    pub fn slurm_state(&self) -> Option<&str> {
        self.slurm_job()?.state.as_deref()
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
            request: ResourceRequest::whole(gpus),
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
            begin_at: None,
            stdin: None,
            stop_on: Vec::new(),
            wake: Default::default(),
            held_by: None,
            sweep: None,
            params: Vec::new(),
            reservation: None,
            signal: None,
        }
    }
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
        cpus,
        mem,
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
        held_by,
        begin_at,
        stdin,
        sweep_id,
        sweep_index,
        params,
        stop_on,
        stop_reason,
        wake,
        reservation,
        checkpoint_signal,
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
        Ok(queued_record(JobId(id), job.clone()))
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

    /// The jobs `where_clause` selects, as [`select`](Self::select) but without their
    /// environment (left empty): what listings show, at a fraction of the memory and time (an
    /// environment is often most of a row).
    pub(super) fn select_listed(
        &self,
        where_clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let list = JobColumns::LIST.replacen(", env,", ", '{}' AS env,", 1);
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {list} FROM jobs {where_clause}"))?;
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

    /// Jobs that ended at or after `since`, newest last (read whole: listings page through
    /// `history.rs` instead).
    #[cfg(test)]
    pub fn ended_since(&self, since: Millis) -> Result<Vec<JobRecord>, StoreError> {
        self.select(
            "WHERE state NOT IN ('queued', 'running') AND ended_at >= ?1 ORDER BY id",
            [since],
        )
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

    /// Applies one transition to a job (see [`apply_all`](Self::apply_all)).
    #[cfg(test)]
    pub fn apply(
        &mut self,
        job: &JobRecord,
        transition: &Transition,
        at: Millis,
    ) -> Result<(JobRecord, Effects), StoreError> {
        let mut done = self.apply_all(&[(job, transition.clone())], at, |_| Ok(()))?;
        Ok(done.remove(0))
    }

    /// [`commit_all`](Self::commit_all), returning the jobs as they now are.
    #[cfg(test)]
    pub fn apply_all(
        &mut self,
        changes: &[(&JobRecord, Transition)],
        at: Millis,
        also: impl FnOnce(&Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<Vec<(JobRecord, Effects)>, StoreError> {
        let committed = self.commit_all(changes, at, also)?;
        Ok(changes
            .iter()
            .zip(committed)
            .map(|((job, _), (life, effects))| {
                let mut job = (*job).clone();
                job.take(life);
                (job, effects)
            })
            .collect())
    }

    /// Applies each transition to its job, in one transaction with `also` (the rows of other
    /// tables that go with them): each job's new status comes from `Life::apply`, every state
    /// column is written from it, and the transition's event is logged at `at`. Returns each
    /// job's new life, for its record to [`take`](JobRecord::take), and what each change means
    /// for the shell; on any error nothing is written.
    pub fn commit_all(
        &mut self,
        changes: &[(&JobRecord, Transition)],
        at: Millis,
        also: impl FnOnce(&Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<Vec<(Committed, Effects)>, StoreError> {
        let tx = self.conn.transaction()?;
        let mut done = Vec::with_capacity(changes.len());
        for (job, transition) in changes {
            let (life, effects) =
                job.life
                    .apply(transition)
                    .map_err(|refused| StoreError::Refused {
                        id: job.id.0,
                        refused,
                    })?;
            write_life(&tx, job.id, &life)?;
            if job.state() == JobState::Running && life.state() != JobState::Running {
                record_hold(&tx, job, at)?;
            }
            if let Some((kind, detail)) = Life::event_of(transition) {
                log_event(&tx, job.id.0, at, kind, &detail)?;
            }
            done.push((Committed(life), effects));
        }
        also(&tx)?;
        tx.commit()?;
        Ok(done)
    }

    /// The GPU-milliseconds user `uid`'s ended attempts held after `since` (`gpu_holds`).
    pub fn gpu_ms_held_since(&self, uid: u32, since: Millis) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT coalesce(sum(gpus * (ended_at - max(started_at, ?2))), 0) \
                 FROM gpu_holds WHERE owner_uid = ?1 AND ended_at > ?2",
            )?
            .query_row(params![uid, since], |r| r.get(0))?)
    }

    /// The GPU-milliseconds each owner's ended attempts held since `since`.
    pub fn gpu_ms_held_since_by_owner(&self, since: Millis) -> Result<Vec<(u32, i64)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT owner_uid, sum(gpus * (ended_at - max(started_at, ?1))) \
             FROM gpu_holds WHERE ended_at > ?1 GROUP BY owner_uid",
        )?;
        let rows = stmt.query_map(params![since], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets where a job's report goes (the Claude Code hook claimed its wake-up).
    pub fn set_notify(
        &mut self,
        job: &JobRecord,
        channels: &[Channel],
        at: Millis,
        why: &str,
    ) -> Result<JobRecord, StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET notify = ?1 WHERE id = ?2")?
            .execute(params![json(&channels), job.id.0 as i64])?;
        log_event(&tx, job.id.0, at, "notify", why)?;
        tx.commit()?;
        Ok(JobRecord {
            notify: channels.to_vec(),
            ..job.clone()
        })
    }

    /// Sets a job's priority (a waste rule deprioritised it).
    pub fn set_priority(
        &mut self,
        job: &JobRecord,
        priority: i64,
        at: Millis,
    ) -> Result<JobRecord, StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET priority = ?1 WHERE id = ?2")?
            .execute(params![priority, job.id.0 as i64])?;
        log_event(
            &tx,
            job.id.0,
            at,
            "priority",
            &format!("priority {priority}"),
        )?;
        tx.commit()?;
        Ok(JobRecord {
            priority,
            ..job.clone()
        })
    }

    /// Changes what a queued job asks for (`baton update`), with one event per field changed.
    pub fn update_spec(
        &mut self,
        job: &JobRecord,
        change: &SpecChange,
        at: Millis,
    ) -> Result<JobRecord, StoreError> {
        let mut updated = job.clone();
        let mut events: Vec<(&str, String)> = Vec::new();
        if let Some(name) = &change.name
            && *name != job.name
        {
            events.push(("name", format!("name {name:?} (was {:?})", job.name)));
            updated.name = name.clone();
        }
        if let Some(priority) = change.priority
            && priority != job.priority
        {
            events.push((
                "priority",
                format!("priority {priority} (was {})", job.priority),
            ));
            updated.priority = priority;
        }
        if let Some(limit) = change.time_limit
            && Some(limit) != job.time_limit
        {
            let was = job
                .time_limit
                .map_or("none".to_string(), baton_core::units::format_duration);
            events.push((
                "time-limit",
                format!(
                    "time limit {} (was {was})",
                    baton_core::units::format_duration(limit)
                ),
            ));
            updated.time_limit = Some(limit);
        }
        if let Some(request) = change.request
            && request != job.request
        {
            events.push((
                "resources",
                format!(
                    "{} (was {})",
                    request_text(&request),
                    request_text(&job.request)
                ),
            ));
            updated.request = request;
        }
        if events.is_empty() {
            return Ok(updated);
        }
        let tx = self.conn.transaction()?;
        tx.prepare_cached(
            "UPDATE jobs SET name = ?1, priority = ?2, time_limit_ms = ?3, gpus_requested = ?4, \
             gpu_mem = ?5, cpus = ?6, mem = ?7 WHERE id = ?8",
        )?
        .execute(params![
            updated.name,
            updated.priority,
            updated.time_limit,
            updated.request.count,
            updated.request.mem_per_gpu.map(|m| m as i64),
            updated.request.cpus,
            updated.request.mem as i64,
            job.id.0 as i64,
        ])?;
        for (kind, detail) in &events {
            log_event(&tx, job.id.0, at, &format!("updated-{kind}"), detail)?;
        }
        tx.commit()?;
        Ok(updated)
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

    /// The most GPU memory each of the last 50 successful runs of `command` held (over its
    /// GPUs, each GPU's peak), newest first; runs that held none are left out. What a memory
    /// `slow` (a leak) is judged against.
    pub fn run_memory_peaks(&self, command: &[String]) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT SUM(u.mem_peak) AS peak FROM jobs j JOIN job_gpu_usage u \
             ON u.job_id = j.id AND u.attempt = j.attempt \
             WHERE j.state = 'succeeded' AND j.command = ?1 \
             GROUP BY j.id HAVING peak > 0 ORDER BY j.id DESC LIMIT 50",
        )?;
        let rows = stmt.query_map(params![json(&command)], |r| r.get::<_, i64>("peak"))?;
        Ok(rows
            .map(|r| r.map(|peak| peak.max(0) as u64))
            .collect::<Result<_, _>>()?)
    }
}

/// The default name is the program's file name, as squeue shows it.
pub fn default_name(job: &NewJob) -> String {
    job.name.clone().unwrap_or_else(|| {
        let program = job.command.first().map(String::as_str).unwrap_or("job");
        program.rsplit('/').next().unwrap_or(program).to_string()
    })
}

/// `--stop-on` as stored: the detectors' names, comma-separated; `None` for none.
fn stop_on_text(detectors: &[baton_core::midrun::Detector]) -> Option<String> {
    (!detectors.is_empty()).then(|| {
        detectors
            .iter()
            .map(|d| d.as_str())
            .collect::<Vec<_>>()
            .join(",")
    })
}

/// `--stop-on` read back; a name this baton does not know (a newer one wrote it) is skipped.
fn stop_on_of(text: Option<&str>) -> Vec<baton_core::midrun::Detector> {
    text.unwrap_or_default()
        .split(',')
        .filter_map(baton_core::midrun::Detector::parse)
        .collect()
}

/// Inserts a queued job and its `submitted` event.
/// The record of a job just inserted as `id`, as reading it back would give it.
pub(super) fn queued_record(id: JobId, job: NewJob) -> JobRecord {
    let name = default_name(&job);
    let life = submitted_life(&job);
    JobRecord {
        id,
        name,
        command: job.command,
        cwd: job.cwd,
        env: job.env,
        owner_uid: job.owner_uid,
        owner: job.owner,
        priority: job.priority,
        request: job.request,
        time_limit: job.time_limit,
        retries: job.retries,
        deps: job.deps,
        tags: job.tags,
        submitted_at: job.submitted_at,
        workflow_id: job.workflow_id,
        umask: job.umask,
        notify: job.notify,
        session: job.session,
        task: job.task,
        critical_path: job.critical_path,
        colocate: Vec::new(),
        begin_at: job.begin_at,
        stdin: job.stdin,
        stop_on: job.stop_on,
        wake: job.wake,
        sweep: job.sweep,
        params: job.params,
        reservation: job.reservation,
        signal: job.signal,
        life,
    }
}

pub(super) fn insert_job(
    tx: &rusqlite::Transaction<'_>,
    job: &NewJob,
) -> Result<JobId, StoreError> {
    tx.prepare_cached(
        "INSERT INTO jobs (name, state, command, cwd, env, owner_uid, owner, priority, \
         gpus_requested, gpu_mem, time_limit_ms, retries, attempt, deps, tags, submitted_at, gpus, umask, \
         notify, session, workflow_id, task, critical_path_ms, cpus, mem, begin_at, stdin, held_by, \
         reason, sweep_id, sweep_index, params, stop_on, wake, reservation, checkpoint_signal) \
         VALUES (?1, 'queued', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 0, ?12, ?13, ?14, '[]', ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33)",
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
        job.request.cpus,
        job.request.mem as i64,
        job.begin_at,
        job.stdin,
        job.held_by,
        job.held_by.as_deref().map(baton_core::lifecycle::held_reason),
        job.sweep.as_ref().map(|s| s.id as i64),
        job.sweep.as_ref().map(|s| s.index),
        (!job.params.is_empty()).then(|| json(&job.params)),
        stop_on_text(&job.stop_on),
        (!job.wake.is_empty()).then(|| json(&job.wake)),
        job.reservation.as_ref().map(json),
        job.signal.as_ref().map(json),
    ])?;
    let id = tx.last_insert_rowid() as u64;
    log_event(tx, id, job.submitted_at, "submitted", &job.owner)?;
    if let Some(by) = &job.held_by {
        log_event(tx, id, job.submitted_at, "held", by)?;
    }
    Ok(JobId(id))
}

/// A job's life as it is queued: held, when it was submitted held.
fn submitted_life(job: &NewJob) -> Life {
    let mut life = Life::submitted();
    if let (Some(by), Status::Queued(q)) = (&job.held_by, &mut life.status) {
        q.held_by = Some(by.clone());
        q.reason = Some(baton_core::lifecycle::held_reason(by));
    }
    life
}

fn deps_to_json(deps: &[Dependency]) -> Vec<(u64, &'static str)> {
    deps.iter()
        .map(|d| {
            (
                d.job.0,
                match d.kind {
                    DepKind::Success => "success",
                    DepKind::Any => "any",
                    DepKind::Failure => "failure",
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
                kind: match kind.as_str() {
                    "any" => DepKind::Any,
                    "failure" => DepKind::Failure,
                    _ => DepKind::Success,
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
        let state = parse_state(id, &text(c.state)?)?;
        let gpus: Vec<u32> = from(parse(c.gpus, "gpus")?, "gpus", id)?;
        let reserved: Option<Vec<u32>> = match r.get::<_, Option<String>>(c.reserved)? {
            Some(t) => {
                Some(serde_json::from_str(&t).map_err(|e| corrupt(format!("reserved: {e}")))?)
            }
            None => None,
        };
        let columns = LifeColumns {
            state,
            attempt: r.get(c.attempt)?,
            gpus,
            started_at: r.get(c.started_at)?,
            ended_at: r.get(c.ended_at)?,
            exit: Exit {
                code: r.get(c.exit_code)?,
                signal: r.get(c.signal)?,
            },
            reason: r.get(c.reason)?,
            reserved,
            lease_until: r.get(c.lease_until)?,
            cancel_requested_by: r.get(c.cancel_requested_by)?,
            slurm_id: r.get::<_, Option<i64>>(c.slurm_id)?.map(|v| v as u64),
            slurm_submitting_at: r.get(c.slurm_submitting_at)?,
            slurm_nodes: r.get(c.slurm_nodes)?,
            slurm_state: r.get(c.slurm_state)?,
            not_before: r.get(c.not_before)?,
            held_by: r.get(c.held_by)?,
            stop_reason: r.get(c.stop_reason)?,
        };
        let life = columns.into_life().map_err(corrupt)?;
        Ok(JobRecord {
            id: JobId(id),
            name: text(c.name)?,
            command: from(parse(c.command, "command")?, "command", id)?,
            cwd: text(c.cwd)?,
            env: from(parse(c.env, "env")?, "env", id)?,
            owner_uid: r.get(c.owner_uid)?,
            owner: text(c.owner)?,
            priority: r.get(c.priority)?,
            request: ResourceRequest {
                count: r.get(c.gpus_requested)?,
                mem_per_gpu: r.get::<_, Option<i64>>(c.gpu_mem)?.map(|m| m as u64),
                cpus: r.get(c.cpus)?,
                mem: r.get::<_, i64>(c.mem)?.max(0) as u64,
            },
            time_limit: r.get(c.time_limit_ms)?,
            retries: r.get(c.retries)?,
            deps,
            tags: from(parse(c.tags, "tags")?, "tags", id)?,
            submitted_at: r.get(c.submitted_at)?,
            workflow_id: r.get::<_, Option<i64>>(c.workflow_id)?.map(|w| w as u64),
            umask: r.get(c.umask)?,
            notify: from(parse(c.notify, "notify")?, "notify", id)?,
            session: r.get(c.session)?,
            task: r.get(c.task)?,
            critical_path: r.get(c.critical_path_ms)?,
            colocate: from::<Vec<u64>>(parse(c.colocate, "colocate")?, "colocate", id)?
                .into_iter()
                .map(JobId)
                .collect(),
            begin_at: r.get(c.begin_at)?,
            stdin: r.get(c.stdin)?,
            stop_on: stop_on_of(r.get::<_, Option<String>>(c.stop_on)?.as_deref()),
            wake: match r.get::<_, Option<String>>(c.wake)? {
                Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(format!("wake: {e}")))?,
                None => Default::default(),
            },
            sweep: match r.get::<_, Option<i64>>(c.sweep_id)? {
                Some(sweep) => Some(SweepRun {
                    id: sweep as u64,
                    index: r.get::<_, Option<u32>>(c.sweep_index)?.unwrap_or(0),
                }),
                None => None,
            },
            params: match r.get::<_, Option<String>>(c.params)? {
                Some(t) => serde_json::from_str(&t).map_err(|e| corrupt(format!("params: {e}")))?,
                None => Vec::new(),
            },
            reservation: match r.get::<_, Option<String>>(c.reservation)? {
                Some(t) => Some(
                    serde_json::from_str(&t).map_err(|e| corrupt(format!("reservation: {e}")))?,
                ),
                None => None,
            },
            signal: match r.get::<_, Option<String>>(c.checkpoint_signal)? {
                Some(t) => {
                    Some(serde_json::from_str(&t).map_err(|e| corrupt(format!("signal: {e}")))?)
                }
                None => None,
            },
            life,
        })
    };
    Ok(build())
}

/// The state columns of a job's row: what a `Life` is written as and read back from. The two
/// directions are the only place that knows which column holds what in which state.
#[derive(Debug, PartialEq)]
struct LifeColumns {
    state: JobState,
    attempt: u32,
    gpus: Vec<u32>,
    started_at: Option<Millis>,
    ended_at: Option<Millis>,
    exit: Exit,
    reason: Option<String>,
    reserved: Option<Vec<u32>>,
    lease_until: Option<Millis>,
    cancel_requested_by: Option<String>,
    slurm_id: Option<u64>,
    slurm_submitting_at: Option<Millis>,
    slurm_nodes: Option<String>,
    slurm_state: Option<String>,
    not_before: Option<Millis>,
    held_by: Option<String>,
    stop_reason: Option<String>,
}

impl LifeColumns {
    fn of(life: &Life) -> LifeColumns {
        let mut c = LifeColumns {
            state: life.state(),
            attempt: life.attempt,
            gpus: Vec::new(),
            started_at: None,
            ended_at: None,
            exit: Exit::default(),
            reason: None,
            reserved: None,
            lease_until: None,
            cancel_requested_by: None,
            slurm_id: None,
            slurm_submitting_at: None,
            slurm_nodes: None,
            slurm_state: None,
            not_before: None,
            held_by: None,
            stop_reason: None,
        };
        let mut slurm = |job: Option<&SlurmJob>| {
            if let Some(job) = job {
                c.slurm_id = Some(job.id);
                c.slurm_nodes = job.nodes.clone();
                c.slurm_state = job.state.clone();
            }
        };
        match &life.status {
            Status::Queued(q) => {
                slurm(q.slurm.as_ref().and_then(SlurmQueue::job));
                c.slurm_submitting_at = match &q.slurm {
                    Some(SlurmQueue::Submitting { since }) => Some(*since),
                    Some(SlurmQueue::Submitted { since, .. }) => *since,
                    None => None,
                };
                c.exit = q.previous;
                c.reason = q.reason.clone();
                c.reserved = q.reservation.as_ref().map(|r| r.gpus.clone());
                c.lease_until = q.reservation.as_ref().map(|r| r.lease_until);
                c.cancel_requested_by = q.cancel_requested_by.clone();
                c.not_before = q.not_before;
                c.held_by = q.held_by.clone();
            }
            Status::Running(r) => {
                if let Runner::Slurm(job) = &r.on {
                    slurm(Some(job));
                }
                c.gpus = r.gpus.clone();
                c.started_at = Some(r.since);
                c.reason = r.reason.clone();
                c.cancel_requested_by = r.cancel_requested_by.clone();
                c.stop_reason = r.stop_reason.clone();
            }
            Status::Ended(e) => {
                slurm(e.slurm.as_ref());
                if let Some(ran) = &e.ran {
                    c.gpus = ran.gpus.clone();
                    c.started_at = Some(ran.since);
                }
                c.ended_at = Some(e.at);
                c.exit = e.exit;
                c.reason = e.reason.clone();
                c.cancel_requested_by = e.cancel_requested_by.clone();
            }
        }
        c
    }

    /// The life these columns describe. Columns that mean nothing in the row's state (a
    /// reservation left on a job cancelled while it waited, written by an older baton) are
    /// ignored.
    fn into_life(self) -> Result<Life, String> {
        let slurm_job = self.slurm_id.map(|id| SlurmJob {
            id,
            state: self.slurm_state.clone(),
            nodes: self.slurm_nodes.clone(),
        });
        let status = match self.state {
            JobState::Queued => Status::Queued(Queued {
                reason: self.reason,
                reservation: self.reserved.map(|gpus| Reservation {
                    gpus,
                    lease_until: self.lease_until.unwrap_or(0),
                }),
                not_before: self.not_before,
                previous: self.exit,
                slurm: match (slurm_job, self.slurm_submitting_at) {
                    (Some(job), since) => Some(SlurmQueue::Submitted { job, since }),
                    (None, Some(since)) => Some(SlurmQueue::Submitting { since }),
                    (None, None) => None,
                },
                cancel_requested_by: self.cancel_requested_by,
                held_by: self.held_by,
            }),
            // Every baton records a start time with the start; a row without one still reads
            // (as started at the epoch) rather than keeping the daemon from opening.
            JobState::Running => Status::Running(Running {
                since: self.started_at.unwrap_or_default(),
                gpus: self.gpus,
                on: slurm_job.map_or(Runner::Local, Runner::Slurm),
                cancel_requested_by: self.cancel_requested_by,
                reason: self.reason,
                stop_reason: self.stop_reason,
            }),
            terminal => Status::Ended(Ended {
                outcome: Outcome::of(terminal).ok_or("an unknown final state")?,
                exit: self.exit,
                reason: self.reason,
                at: self.ended_at.or(self.started_at).unwrap_or_default(),
                ran: self.started_at.map(|since| Ran {
                    gpus: self.gpus,
                    since,
                }),
                slurm: slurm_job,
                cancel_requested_by: self.cancel_requested_by,
            }),
        };
        Ok(Life {
            attempt: self.attempt,
            status,
        })
    }
}

/// The GPUs `job`'s running attempt held, from its start until `at` (its end, or its requeue),
/// counted against its owner's GPU-hour budget.
fn record_hold(tx: &Transaction<'_>, job: &JobRecord, at: Millis) -> Result<(), StoreError> {
    let gpus = job.gpus_held();
    let Some(started) = job.started_at() else {
        return Ok(());
    };
    if gpus == 0 {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT OR REPLACE INTO gpu_holds (job_id, attempt, owner_uid, gpus, started_at, ended_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        job.id.0 as i64,
        job.attempt(),
        job.owner_uid,
        gpus,
        started,
        at.max(started),
    ])?;
    Ok(())
}

/// Writes every state column of a job's row from its life.
fn write_life(tx: &Transaction<'_>, id: JobId, life: &Life) -> Result<(), StoreError> {
    let c = LifeColumns::of(life);
    tx.prepare_cached(
        "UPDATE jobs SET state = ?1, attempt = ?2, gpus = ?3, started_at = ?4, ended_at = ?5, \
         exit_code = ?6, signal = ?7, reason = ?8, reserved = ?9, lease_until = ?10, \
         cancel_requested_by = ?11, slurm_id = ?12, slurm_submitting_at = ?13, slurm_nodes = ?14, \
         slurm_state = ?15, not_before = ?16, held_by = ?17, stop_reason = ?18 WHERE id = ?19",
    )?
    .execute(params![
        c.state.as_str(),
        c.attempt,
        json(&c.gpus),
        c.started_at,
        c.ended_at,
        c.exit.code,
        c.exit.signal,
        c.reason,
        c.reserved.as_ref().map(json),
        c.lease_until,
        c.cancel_requested_by,
        c.slurm_id.map(|v| v as i64),
        c.slurm_submitting_at,
        c.slurm_nodes,
        c.slurm_state,
        c.not_before,
        c.held_by,
        c.stop_reason,
        id.0 as i64,
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use baton_core::lifecycle::Ending;

    use super::*;
    use crate::store::tests::new_job;

    fn start(gpus: &[u32], at: Millis) -> Transition {
        Transition::Start {
            gpus: gpus.to_vec(),
            at,
            on: Runner::Local,
        }
    }

    #[test]
    fn a_hold_is_written_and_read_back_and_a_held_job_does_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let job = store
            .insert(&NewJob {
                held_by: Some("alice".into()),
                ..new_job(&["true"])
            })
            .unwrap();
        assert_eq!(store.get(job.id).unwrap().unwrap(), job);
        assert_eq!(job.held_by(), Some("alice"));
        assert!(job.reason().unwrap().starts_with("held by alice"));
        assert!(matches!(
            store.apply(&job, &start(&[0], 10), 10),
            Err(StoreError::Refused { .. })
        ));
        let by = "bob".to_string();
        let (released, _) = store
            .apply(&job, &Transition::Unhold { by: by.clone() }, 20)
            .unwrap();
        assert_eq!(store.get(job.id).unwrap().unwrap(), released);
        assert_eq!((released.held_by(), released.reason()), (None, None));
        let (held, _) = store
            .apply(&released, &Transition::Hold { by }, 30)
            .unwrap();
        assert_eq!(store.get(job.id).unwrap().unwrap(), held);
        assert_eq!(held.held_by(), Some("bob"));
        let kinds: Vec<String> = store
            .events(job.id)
            .unwrap()
            .into_iter()
            .map(|e| e.kind)
            .collect();
        assert_eq!(kinds, ["submitted", "held", "hold-released", "held"]);
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
        assert_eq!(job.state(), JobState::Queued);
        assert_eq!(job.request, ResourceRequest::shared(2, 8 << 30));
        assert_eq!(job.deps[0].kind, DepKind::Any);
        let read = store.get(job.id).unwrap().unwrap();
        assert_eq!(read.wake.wake_on, [r"Epoch \d+ done"], "milestones kept");
        assert_eq!(read.wake.wake_when[0].text(), "val_acc>=0.9");

        let (running, _) = store.apply(&job, &start(&[0, 1], 2_000), 2_000).unwrap();
        assert_eq!(store.get(job.id).unwrap().unwrap(), running);
        assert_eq!((running.state(), running.attempt()), (JobState::Running, 1));
        assert_eq!(running.gpus(), [0, 1]);

        let retry = Transition::Retry {
            exit: Exit {
                code: Some(3),
                signal: None,
            },
            reason: "attempt 1 failed".into(),
            not_before: 4_000,
        };
        let (waiting, _) = store.apply(&running, &retry, 3_000).unwrap();
        let read = store.get(job.id).unwrap().unwrap();
        assert_eq!(read, waiting, "what memory gets is what the row says");
        assert_eq!(
            (read.not_before(), read.exit_code()),
            (Some(4_000), Some(3))
        );
        let (running, _) = store.apply(&read, &start(&[1, 0], 4_000), 4_000).unwrap();
        let end = Ending {
            outcome: Outcome::Failed,
            exit: Exit {
                code: Some(3),
                signal: None,
            },
            reason: Some("exit code 3".into()),
            at: 5_000,
        };
        store
            .apply_all(&[(&running, Transition::End(end))], 5_000, |tx| {
                crate::store::insert_deliveries(
                    tx,
                    job.id,
                    crate::store::Subject::Job,
                    &job.notify,
                    5_000,
                )
            })
            .unwrap();
        let ended = store.get(job.id).unwrap().unwrap();
        assert_eq!(
            (ended.state(), ended.attempt(), ended.exit_code()),
            (JobState::Failed, 2, Some(3))
        );
        assert_eq!(ended.not_before(), None, "a start clears the backoff");
        assert_eq!(ended.started_at(), Some(4_000));
        // Both attempts held their two GPUs for a second each, counted for the owner's budget
        // (a share of the second after 4.5 s).
        let uid = ended.owner_uid;
        assert_eq!(store.gpu_ms_held_since(uid, 0).unwrap(), 4_000);
        assert_eq!(store.gpu_ms_held_since(uid, 4_500).unwrap(), 1_000);
        assert_eq!(store.gpu_ms_held_since(uid, 5_000).unwrap(), 0);
        assert_eq!(store.gpu_ms_held_since(uid + 1, 0).unwrap(), 0);
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
        assert_eq!(states[&job.id], (JobState::Failed, ended.gpus().to_vec()));
        // An ended job never changes again, and a refused change writes nothing.
        let again = store.apply(&ended, &start(&[0], 6_000), 6_000).unwrap_err();
        assert!(matches!(again, StoreError::Refused { .. }), "{again}");
        assert_eq!(store.get(job.id).unwrap().unwrap(), ended);
    }

    #[test]
    fn every_life_reads_back_as_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let mut submitted = new_job(&["/bin/train", "--fast"]);
        submitted.name = Some("train".into());
        submitted.task = Some("fit".into());
        submitted.critical_path = 90_000;
        let job = store.insert(&submitted).unwrap();
        // Every kind of change a job goes through, under both backends; after each, the row
        // reads back as exactly the record the change returned.
        let steps = [
            Transition::Reserve(Reservation {
                gpus: vec![1, 2],
                lease_until: 5_000,
            }),
            Transition::RenewLease { until: 9_000 },
            Transition::Release,
            Transition::SlurmSubmitting { at: 2_100 },
            Transition::SlurmNotSubmitted {
                reason: Some("waiting for Slurm: sbatch did not answer".into()),
            },
            Transition::SlurmSubmitting { at: 2_150 },
            Transition::SlurmSubmitted {
                id: 4242,
                reason: Some("Slurm job 4242: submitted".into()),
            },
            Transition::SlurmSeen {
                state: "PENDING".into(),
                reason: Some("Slurm job 4242: PENDING (Resources)".into()),
                nodes: None,
            },
            Transition::Start {
                gpus: vec![3],
                at: 2_200,
                on: Runner::Slurm(SlurmJob {
                    id: 4242,
                    state: Some("RUNNING".into()),
                    nodes: Some("node7".into()),
                }),
            },
            Transition::RequestCancel {
                by: "bob".into(),
                reason: "cancelling (asked by bob)".into(),
            },
            Transition::Retry {
                exit: Exit {
                    code: Some(1),
                    signal: Some(15),
                },
                reason: "attempt 1 exit code 1; retrying in 1s (1 retry left)".into(),
                not_before: 3_000,
            },
            start(&[0], 3_100),
            Transition::Withdraw {
                reason: "requeued: the daemon stopped before it could start".into(),
            },
            start(&[0], 3_200),
            Transition::End(Ending {
                outcome: Outcome::Cancelled,
                exit: Exit {
                    code: Some(143),
                    signal: Some(15),
                },
                reason: Some("cancelled by bob".into()),
                at: 4_000,
            }),
        ];
        let mut current = job;
        for (i, step) in steps.iter().enumerate() {
            let (next, _) = store.apply(&current, step, 2_000 + i as i64).unwrap();
            let read = store.get(next.id).unwrap().unwrap();
            assert_eq!(read, next, "after {step:?}");
            assert_eq!(
                LifeColumns::of(read.life()).into_life().unwrap(),
                *read.life()
            );
            current = next;
        }
        assert_eq!(current.attempt(), 2);
        assert_eq!(current.gpus(), [0]);
        assert_eq!(current.started_at(), Some(3_200));
        let priority = store.set_priority(&current, 9, 5_000).unwrap();
        assert_eq!(store.get(current.id).unwrap().unwrap(), priority);
    }

    #[test]
    fn a_retried_job_keeps_its_last_exit_and_slurm_reasons_survive_a_restart() {
        // The three places where the daemon's memory and the database used to disagree.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baton.db");
        let mut store = Store::open(&path).unwrap();
        let job = store.insert(&new_job(&["false"])).unwrap();
        let (running, _) = store.apply(&job, &start(&[0], 10), 10).unwrap();
        let retry = Transition::Retry {
            exit: Exit {
                code: Some(2),
                signal: None,
            },
            reason: "attempt 1 exit code 2; retrying in 1s (1 retry left)".into(),
            not_before: 1_020,
        };
        let (queued, _) = store.apply(&running, &retry, 20).unwrap();
        assert_eq!(
            (queued.exit_code(), queued.cancel_requested_by()),
            (Some(2), None)
        );
        let (running, _) = store.apply(&queued, &start(&[0], 1_100), 1_100).unwrap();
        let cancel = Transition::RequestCancel {
            by: "alice".into(),
            reason: "cancelling (asked by alice)".into(),
        };
        let (asked, _) = store.apply(&running, &cancel, 1_200).unwrap();
        let withdraw = Transition::Withdraw {
            reason: "requeued: the daemon stopped before it could start".into(),
        };
        let (withdrawn, _) = store.apply(&asked, &withdraw, 1_300).unwrap();
        assert_eq!(
            (
                withdrawn.reason(),
                withdrawn.cancel_requested_by(),
                withdrawn.attempt()
            ),
            (
                Some("requeued: the daemon stopped before it could start"),
                None,
                1
            )
        );
        let other = store.insert(&new_job(&["true"])).unwrap();
        let (other, _) = store
            .apply(&other, &Transition::SlurmSubmitting { at: 5 }, 5)
            .unwrap();
        let (other, _) = store
            .apply(
                &other,
                &Transition::SlurmSubmitted {
                    id: 7,
                    reason: None,
                },
                6,
            )
            .unwrap();
        let seen = Transition::SlurmSeen {
            state: "PENDING".into(),
            reason: Some("Slurm job 7: PENDING (Priority)".into()),
            nodes: None,
        };
        let (other, _) = store.apply(&other, &seen, 7).unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.get(withdrawn.id).unwrap().unwrap(), withdrawn);
        let reopened = store.get(other.id).unwrap().unwrap();
        assert_eq!(reopened.reason(), Some("Slurm job 7: PENDING (Priority)"));
        assert_eq!(reopened.slurm_state(), Some("PENDING"));
        assert_eq!(reopened, other);
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
