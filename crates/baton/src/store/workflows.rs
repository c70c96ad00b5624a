//! The `workflows` table: a workflow as submitted (`NewWorkflow`, its `NewTask`s) and as
//! recorded (`WorkflowRecord`); inserting one with all its tasks' jobs at once, its state, its
//! end (with its summary's deliveries), and when an atomic workflow was admitted (its tasks'
//! reservations are job transitions, `jobs.rs`), and every workflow with its tasks' progress
//! (`workflow_rows`).

use baton_core::lifecycle::decide::WorkflowState;
use baton_core::{DepKind, Dependency, JobId, Millis};
use rusqlite::{OptionalExtension, Row, Transaction, params};

use super::deliveries::insert_deliveries;
use super::jobs::insert_job;
use super::{JobRecord, NewJob, Store, StoreError, json};

/// A workflow: a DAG of tasks (each a job), admitted whole when `atomic`.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkflowRecord {
    pub id: u64,
    pub name: String,
    pub atomic: bool,
    /// queued (nothing started), running, then succeeded, failed or cancelled.
    pub state: WorkflowState,
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

/// A workflow's task as submitted: its job, and the tasks (positions in
/// [`NewWorkflow::tasks`]) it runs after and asked to share a node with. A task runs only after
/// tasks listed before it.
#[derive(Clone, Debug)]
pub struct NewTask {
    pub job: NewJob,
    pub after: Vec<usize>,
    pub colocate: Vec<usize>,
}

columns!(
    /// The columns of `workflows` a `WorkflowRecord` is read from.
    WorkflowColumns {
        id,
        name,
        atomic,
        state,
        owner_uid,
        owner,
        source,
        submitted_at,
        admitted_at,
        ended_at,
    }
);

fn read_workflow(r: &Row<'_>, c: &WorkflowColumns) -> rusqlite::Result<WorkflowRecord> {
    Ok(WorkflowRecord {
        id: r.get::<_, i64>(c.id)? as u64,
        name: r.get(c.name)?,
        atomic: r.get(c.atomic)?,
        state: {
            let text: String = r.get(c.state)?;
            WorkflowState::parse(&text).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    c.state,
                    rusqlite::types::Type::Text,
                    format!("unknown workflow state {text:?}").into(),
                )
            })?
        },
        owner_uid: r.get(c.owner_uid)?,
        owner: r.get(c.owner)?,
        source: r.get(c.source)?,
        submitted_at: r.get(c.submitted_at)?,
        admitted_at: r.get(c.admitted_at)?,
        ended_at: r.get(c.ended_at)?,
    })
}

impl Store {
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
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM workflows WHERE id = ?1",
            WorkflowColumns::LIST
        ))?;
        let c = WorkflowColumns::of(&stmt)?;
        Ok(stmt
            .query_row([id as i64], |r| read_workflow(r, &c))
            .optional()?)
    }

    /// Workflows that have not ended.
    pub fn active_workflows(&self) -> Result<Vec<WorkflowRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM workflows WHERE state IN ('queued', 'running') ORDER BY id",
            WorkflowColumns::LIST
        ))?;
        let c = WorkflowColumns::of(&stmt)?;
        let rows = stmt.query_map([], |r| read_workflow(r, &c))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every workflow, oldest first, with how many of its tasks have ended and how many it has
    /// (`baton workflow list`).
    pub fn workflow_rows(&self) -> Result<Vec<(WorkflowRecord, u32, u32)>, StoreError> {
        self.workflow_rows_where("", -1)
    }

    /// The workflows not yet ended and the `ended` newest that have, oldest first, as
    /// [`Store::workflow_rows`] (the dashboard's overview: bounded however long the history).
    pub fn workflow_rows_recent(
        &self,
        ended: u32,
    ) -> Result<Vec<(WorkflowRecord, u32, u32)>, StoreError> {
        self.workflow_rows_where(
            "WHERE ended_at IS NULL OR id IN (SELECT id FROM workflows \
             WHERE ended_at IS NOT NULL ORDER BY id DESC LIMIT ?1)",
            i64::from(ended),
        )
    }

    /// The rows `clause` selects (`?1` is `limit`, when it uses one).
    fn workflow_rows_where(
        &self,
        clause: &str,
        limit: i64,
    ) -> Result<Vec<(WorkflowRecord, u32, u32)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {}, \
             (SELECT COUNT(*) FROM jobs WHERE workflow_id = workflows.id \
                 AND state NOT IN ('queued', 'running')) AS tasks_done, \
             (SELECT COUNT(*) FROM jobs WHERE workflow_id = workflows.id) AS tasks_total \
             FROM workflows {clause} ORDER BY id",
            WorkflowColumns::LIST
        ))?;
        let c = WorkflowColumns::of(&stmt)?;
        let bound: Vec<i64> = if clause.contains("?1") {
            vec![limit]
        } else {
            Vec::new()
        };
        let rows = stmt.query_map(rusqlite::params_from_iter(bound), |r| {
            Ok((
                read_workflow(r, &c)?,
                r.get("tasks_done")?,
                r.get("tasks_total")?,
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A workflow's tasks, in the order they were submitted.
    pub fn workflow_jobs(&self, id: u64) -> Result<Vec<JobRecord>, StoreError> {
        self.select("WHERE workflow_id = ?1 ORDER BY id", [id as i64])
    }

    /// Records when an atomic workflow's tasks got their reservations (`None`: given back), in
    /// the transaction that records the reservations.
    pub(crate) fn set_workflow_admitted(
        tx: &Transaction<'_>,
        workflow: u64,
        at: Option<Millis>,
    ) -> Result<(), StoreError> {
        tx.prepare_cached("UPDATE workflows SET admitted_at = ?1 WHERE id = ?2")?
            .execute(params![at, workflow as i64])?;
        Ok(())
    }

    /// A workflow's first task started: it is running.
    pub fn set_workflow_state(
        &mut self,
        id: u64,
        state: WorkflowState,
        ended_at: Option<Millis>,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE workflows SET state = ?1, ended_at = ?2 WHERE id = ?3")?
            .execute(params![state.as_str(), ended_at, id as i64])?;
        Ok(())
    }

    /// A workflow ended: its final state, and its summary queued through each channel, anchored
    /// on the task whose end ended it, in one commit.
    pub fn end_workflow(
        &mut self,
        id: u64,
        state: WorkflowState,
        at: Millis,
        anchor: JobId,
        channels: &[crate::notify::Channel],
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE workflows SET state = ?1, ended_at = ?2 WHERE id = ?3")?
            .execute(params![state.as_str(), at, id as i64])?;
        insert_deliveries(&tx, anchor, super::Subject::Workflow(id), channels, at)?;
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::new_job;

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
    fn the_recent_rows_are_the_unfinished_and_the_newest_ended() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let mut ids = Vec::new();
        for n in 0..4 {
            let wf = NewWorkflow {
                name: format!("wf{n}"),
                atomic: false,
                owner_uid: 1000,
                owner: "alice".into(),
                source: "wf.yaml".into(),
                submitted_at: n,
                tasks: vec![NewTask {
                    job: new_job(&["true"]),
                    after: Vec::new(),
                    colocate: Vec::new(),
                }],
            };
            ids.push(store.insert_workflow(&wf).unwrap().0.id);
        }
        // The first, second and fourth ended; the third has not.
        for &i in &[0, 1, 3] {
            store
                .set_workflow_state(ids[i], WorkflowState::Succeeded, Some(10))
                .unwrap();
        }
        let shown = |rows: Vec<(WorkflowRecord, u32, u32)>| -> Vec<u64> {
            rows.iter().map(|(w, _, _)| w.id).collect()
        };
        assert_eq!(
            shown(store.workflow_rows_recent(2).unwrap()),
            [ids[1], ids[2], ids[3]]
        );
        assert_eq!(shown(store.workflow_rows_recent(0).unwrap()), [ids[2]]);
        let all = store.workflow_rows().unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!((all[0].1, all[0].2), (0, 1), "tasks ended, of how many");
    }

    #[test]
    fn a_workflow_reads_back_whole_and_its_admission_comes_and_goes() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let wf = NewWorkflow {
            name: "pipe".into(),
            atomic: true,
            owner_uid: 1000,
            owner: "alice".into(),
            source: "pipe.yaml".into(),
            submitted_at: 1,
            tasks: vec![NewTask {
                job: new_job(&["true"]),
                after: Vec::new(),
                colocate: Vec::new(),
            }],
        };
        let (record, jobs) = store.insert_workflow(&wf).unwrap();
        let expected = WorkflowRecord {
            id: record.id,
            name: "pipe".into(),
            atomic: true,
            state: WorkflowState::Queued,
            owner_uid: 1000,
            owner: "alice".into(),
            source: "pipe.yaml".into(),
            submitted_at: 1,
            admitted_at: None,
            ended_at: None,
        };
        assert_eq!(record, expected);
        assert_eq!(jobs[0].workflow_id, Some(record.id));
        let reserve =
            baton_core::lifecycle::Transition::Reserve(baton_core::lifecycle::Reservation {
                gpus: vec![0],
                lease_until: 100,
            });
        store
            .apply_all(&[(&jobs[0], reserve)], 10, |tx| {
                Store::set_workflow_admitted(tx, record.id, Some(10))
            })
            .unwrap();
        assert_eq!(
            store.workflow(record.id).unwrap().unwrap().admitted_at,
            Some(10)
        );
        let reserved = store.workflow_jobs(record.id).unwrap().remove(0);
        assert_eq!(reserved.reserved(), Some(&[0][..]));
        store
            .apply_all(
                &[(&reserved, baton_core::lifecycle::Transition::Release)],
                20,
                |tx| Store::set_workflow_admitted(tx, record.id, None),
            )
            .unwrap();
        assert_eq!(store.workflow_jobs(record.id).unwrap()[0].reserved(), None);
        store
            .end_workflow(record.id, WorkflowState::Cancelled, 30, jobs[0].id, &[])
            .unwrap();
        assert_eq!(
            store.workflow(record.id).unwrap().unwrap(),
            WorkflowRecord {
                state: WorkflowState::Cancelled,
                ended_at: Some(30),
                ..expected
            }
        );
        assert!(store.active_workflows().unwrap().is_empty());
    }
}
