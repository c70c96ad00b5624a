//! The `sweeps` table: a sweep or array as submitted (`NewSweep`, with its runs' jobs) and as
//! recorded (`SweepRecord`); inserting one with all its runs at once, its state, its end (with
//! its comparison report's deliveries), its early alert (with that alert's deliveries), and the
//! sweep an idempotency key already queued.

use baton_core::lifecycle::decide::WorkflowState;
use baton_core::{JobId, Millis};
use rusqlite::{OptionalExtension, Row, params};

use super::deliveries::{Subject, insert_deliveries};
use super::jobs::{SweepRun, insert_job, queued_record};
use super::{JobRecord, NewJob, Store, StoreError, json};
use crate::notify::Channel;

/// What a failing sweep does with the runs still queued (`--on-failure`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// They go on; the agent is woken early, once, when the sweep is clearly broken.
    #[default]
    Continue,
    /// They are cancelled once the sweep is clearly broken.
    Stop,
}

impl OnFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Continue => "continue",
            OnFailure::Stop => "stop",
        }
    }

    pub fn parse(text: &str) -> Option<OnFailure> {
        match text {
            "continue" => Some(OnFailure::Continue),
            "stop" => Some(OnFailure::Stop),
            _ => None,
        }
    }
}

/// A sweep: many runs of one command template, one unit with one comparison report.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepRecord {
    pub id: u64,
    pub name: String,
    /// `array` (one index) or `sweep` (named parameters).
    pub kind: String,
    /// The parameters, in the order the sweep gave them (`index` for an array).
    pub param_names: Vec<String>,
    /// queued (nothing started), running, then succeeded, failed or cancelled.
    pub state: WorkflowState,
    pub owner_uid: u32,
    pub owner: String,
    pub submitted_at: Millis,
    pub ended_at: Option<Millis>,
    /// How many runs it has.
    pub runs: u32,
    /// How many of its runs may run at once.
    pub max_parallel: Option<u32>,
    /// `--rank-by` as given (`val_acc:max`); `None`: the report chooses.
    pub rank_by: Option<String>,
    /// Each run's own report is delivered too.
    pub notify_each: bool,
    pub on_failure: OnFailure,
    /// Where the comparison report (and an early alert) goes.
    pub notify: Vec<Channel>,
    /// When the agent was woken early because the sweep looked broken.
    pub alerted_at: Option<Millis>,
}

/// A sweep as submitted, with its runs in order.
pub struct NewSweep {
    pub name: String,
    pub kind: String,
    pub param_names: Vec<String>,
    pub owner_uid: u32,
    pub owner: String,
    pub submitted_at: Millis,
    pub max_parallel: Option<u32>,
    pub rank_by: Option<String>,
    pub notify_each: bool,
    pub on_failure: OnFailure,
    pub notify: Vec<Channel>,
    /// Each run's job with its index and parameters (the sweep's id is filled in here).
    pub runs: Vec<(NewJob, u32, baton_core::sweep::Params)>,
}

columns!(
    /// The columns of `sweeps` a `SweepRecord` is read from.
    SweepColumns {
        id,
        name,
        kind,
        param_names,
        state,
        owner_uid,
        owner,
        submitted_at,
        ended_at,
        runs,
        max_parallel,
        rank_by,
        notify_each,
        on_failure,
        notify,
        alerted_at,
    }
);

fn read_sweep(r: &Row<'_>, c: &SweepColumns) -> rusqlite::Result<SweepRecord> {
    let bad = |i: usize, what: String| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, what.into())
    };
    let state: String = r.get(c.state)?;
    let on_failure: String = r.get(c.on_failure)?;
    let names: String = r.get(c.param_names)?;
    let notify: String = r.get(c.notify)?;
    Ok(SweepRecord {
        id: r.get::<_, i64>(c.id)? as u64,
        name: r.get(c.name)?,
        kind: r.get(c.kind)?,
        param_names: serde_json::from_str(&names)
            .map_err(|e| bad(c.param_names, format!("param_names: {e}")))?,
        state: WorkflowState::parse(&state)
            .ok_or_else(|| bad(c.state, format!("unknown sweep state {state:?}")))?,
        owner_uid: r.get(c.owner_uid)?,
        owner: r.get(c.owner)?,
        submitted_at: r.get(c.submitted_at)?,
        ended_at: r.get(c.ended_at)?,
        runs: r.get(c.runs)?,
        max_parallel: r.get(c.max_parallel)?,
        rank_by: r.get(c.rank_by)?,
        notify_each: r.get(c.notify_each)?,
        on_failure: OnFailure::parse(&on_failure)
            .ok_or_else(|| bad(c.on_failure, format!("unknown on_failure {on_failure:?}")))?,
        notify: serde_json::from_str(&notify).map_err(|e| bad(c.notify, format!("notify: {e}")))?,
        alerted_at: r.get(c.alerted_at)?,
    })
}

impl Store {
    /// Records a sweep and every run as a queued job in one transaction: all of it or none.
    /// `request_id` is the submission's idempotency key (see `sweep_for_request`).
    pub fn insert_sweep(
        &mut self,
        sweep: NewSweep,
        request_id: Option<&str>,
    ) -> Result<(SweepRecord, Vec<JobRecord>), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached(
            "INSERT INTO sweeps (name, kind, param_names, state, owner_uid, owner, submitted_at, \
             runs, max_parallel, rank_by, notify_each, on_failure, notify, request_id) \
             VALUES (?1, ?2, ?3, 'queued', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?
        .execute(params![
            sweep.name,
            sweep.kind,
            json(&sweep.param_names),
            sweep.owner_uid,
            sweep.owner,
            sweep.submitted_at,
            sweep.runs.len() as i64,
            sweep.max_parallel,
            sweep.rank_by,
            sweep.notify_each,
            sweep.on_failure.as_str(),
            json(&sweep.notify),
            request_id,
        ])?;
        let id = tx.last_insert_rowid() as u64;
        // Built as they are written rather than read back: a sweep can have thousands of runs.
        let mut jobs = Vec::with_capacity(sweep.runs.len());
        for (mut job, index, params) in sweep.runs {
            job.sweep = Some(SweepRun { id, index });
            job.params = params;
            let job_id = insert_job(&tx, &job)?;
            jobs.push(queued_record(job_id, job));
        }
        tx.commit()?;
        let record = self.sweep(id)?.ok_or_else(|| StoreError::Corrupt {
            id,
            detail: "sweep vanished after insert".into(),
        })?;
        Ok((record, jobs))
    }

    pub fn sweep(&self, id: u64) -> Result<Option<SweepRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM sweeps WHERE id = ?1",
            SweepColumns::LIST
        ))?;
        let c = SweepColumns::of(&stmt)?;
        Ok(stmt
            .query_row([id as i64], |r| read_sweep(r, &c))
            .optional()?)
    }

    /// Whether the sweep has ended (`None`: no such sweep). What `sweep wait` asks at every
    /// change in the daemon, so it reads one column rather than the whole record.
    pub fn sweep_ended(&self, id: u64) -> Result<Option<bool>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT ended_at IS NOT NULL FROM sweeps WHERE id = ?1")?
            .query_row([id as i64], |r| r.get::<_, bool>(0))
            .optional()?)
    }

    /// The sweep a submission with this idempotency key from this user queued, if any.
    pub fn sweep_for_request(&self, uid: u32, key: &str) -> Result<Option<u64>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT id FROM sweeps WHERE owner_uid = ?1 AND request_id = ?2")?
            .query_row(params![uid, key], |r| r.get::<_, i64>(0))
            .optional()?
            .map(|id| id as u64))
    }

    /// Sweeps that have not ended.
    pub fn active_sweeps(&self) -> Result<Vec<SweepRecord>, StoreError> {
        self.sweeps_where("WHERE state IN ('queued', 'running') ORDER BY id", [])
    }

    /// Every sweep, newest first, at most `limit` (`baton sweep list`).
    pub fn sweeps(&self, limit: usize) -> Result<Vec<SweepRecord>, StoreError> {
        self.sweeps_where("ORDER BY id DESC LIMIT ?1", [limit as i64])
    }

    fn sweeps_where(
        &self,
        clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<SweepRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM sweeps {clause}",
            SweepColumns::LIST
        ))?;
        let c = SweepColumns::of(&stmt)?;
        let rows = stmt.query_map(args, |r| read_sweep(r, &c))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A sweep's runs, in their order, read whole (the daemon reads them from its job table).
    #[cfg(test)]
    pub fn sweep_jobs(&self, id: u64) -> Result<Vec<JobRecord>, StoreError> {
        self.select("WHERE sweep_id = ?1 ORDER BY id", [id as i64])
    }

    /// A sweep's runs without their environments (a status view of thousands of runs).
    pub fn sweep_jobs_listed(&self, id: u64) -> Result<Vec<JobRecord>, StoreError> {
        self.select_listed("WHERE sweep_id = ?1 ORDER BY id", [id as i64])
    }

    /// A sweep's first run started: it is running.
    pub fn set_sweep_running(&mut self, id: u64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE sweeps SET state = 'running' WHERE id = ?1 AND state = 'queued'",
            )?
            .execute([id as i64])?;
        Ok(())
    }

    /// A sweep ended: its final state, and its comparison report queued through each channel,
    /// anchored on the run whose end ended it, in one commit.
    pub fn end_sweep(
        &mut self,
        id: u64,
        state: WorkflowState,
        at: Millis,
        anchor: JobId,
        channels: &[Channel],
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE sweeps SET state = ?1, ended_at = ?2 WHERE id = ?3")?
            .execute(params![state.as_str(), at, id as i64])?;
        insert_deliveries(&tx, anchor, Subject::Sweep(id), channels, at)?;
        tx.commit()?;
        Ok(())
    }

    /// A sweep looked broken: the alert is queued through each channel, anchored on the run
    /// whose report showed it, once (`alerted_at`), in one commit. Returns false when it was
    /// alerted already.
    pub fn alert_sweep(
        &mut self,
        id: u64,
        at: Millis,
        anchor: JobId,
        channels: &[Channel],
    ) -> Result<bool, StoreError> {
        let tx = self.conn.transaction()?;
        let changed = tx
            .prepare_cached(
                "UPDATE sweeps SET alerted_at = ?1 WHERE id = ?2 AND alerted_at IS NULL",
            )?
            .execute(params![at, id as i64])?;
        if changed == 1 {
            insert_deliveries(&tx, anchor, Subject::SweepAlert(id), channels, at)?;
        }
        tx.commit()?;
        Ok(changed == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::new_job;

    fn sweep(runs: usize) -> NewSweep {
        NewSweep {
            name: "lr x bs".into(),
            kind: "sweep".into(),
            param_names: vec!["lr".into(), "bs".into()],
            owner_uid: 1000,
            owner: "alice".into(),
            submitted_at: 1,
            max_parallel: Some(2),
            rank_by: Some("val_acc:max".into()),
            notify_each: false,
            on_failure: OnFailure::Stop,
            notify: Vec::new(),
            runs: (0..runs)
                .map(|i| {
                    (
                        new_job(&["true"]),
                        i as u32,
                        vec![("lr".into(), format!("{i}e-4")), ("bs".into(), "32".into())],
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_sweep_reads_back_whole_with_its_runs_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let (record, jobs) = store.insert_sweep(sweep(3), Some("key-1")).unwrap();
        assert_eq!(record.runs, 3);
        assert_eq!(record.max_parallel, Some(2));
        assert_eq!(record.on_failure, OnFailure::Stop);
        assert_eq!(record.state, WorkflowState::Queued);
        assert_eq!(jobs.len(), 3);
        let run = jobs[2].sweep.unwrap();
        assert_eq!((run.id, run.index), (record.id, 2));
        assert_eq!(jobs[2].params[0], ("lr".to_string(), "2e-4".to_string()));
        assert_eq!(store.get(jobs[2].id).unwrap().unwrap().sweep, jobs[2].sweep);
        // The records it returns are the ones reading them back gives.
        assert_eq!(store.sweep_jobs(record.id).unwrap(), jobs);
        assert_eq!(
            store.sweep_for_request(1000, "key-1").unwrap(),
            Some(record.id)
        );
        assert_eq!(store.sweep_for_request(1001, "key-1").unwrap(), None);
        assert_eq!(store.active_sweeps().unwrap().len(), 1);
    }

    #[test]
    fn an_alert_is_queued_once_and_an_end_ends_the_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let (record, jobs) = store.insert_sweep(sweep(2), None).unwrap();
        let file = Channel::File {
            path: dir.path().join("inbox").display().to_string(),
        };
        assert!(
            store
                .alert_sweep(record.id, 5, jobs[0].id, std::slice::from_ref(&file))
                .unwrap()
        );
        assert!(
            !store
                .alert_sweep(record.id, 6, jobs[0].id, std::slice::from_ref(&file))
                .unwrap()
        );
        let alerts = store.deliveries(jobs[0].id).unwrap();
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].subject, Subject::SweepAlert(record.id));
        store
            .end_sweep(record.id, WorkflowState::Failed, 9, jobs[1].id, &[file])
            .unwrap();
        let ended = store.sweep(record.id).unwrap().unwrap();
        assert_eq!(
            (ended.state, ended.ended_at),
            (WorkflowState::Failed, Some(9))
        );
        assert_eq!(ended.alerted_at, Some(5));
        assert_eq!(
            store.deliveries(jobs[1].id).unwrap()[0].subject,
            Subject::Sweep(record.id)
        );
        assert!(store.active_sweeps().unwrap().is_empty());
    }
}
