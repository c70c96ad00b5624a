//! The job table: the one owner of every job's state and of the workflows', the store and the
//! daemon's in-memory view together. Every change is a [`Transition`] (`baton_core::lifecycle`):
//! the store computes the new status with `Life::apply`, commits the row written from it (and the
//! history entry), and returns the new record, which then replaces the copy here. Nothing else
//! writes a job: the map is private, and a record's status can only be made by the store. So
//! memory and the database are written from the same value and cannot disagree.
//!
//! Two things are shown but not stored, because they are derived afresh: why a queued job waits
//! in the latest scheduling pass, and that a job's end waits to be recorded (`durable`). They sit
//! beside the records here (`shown`), never in them.

use std::collections::{BTreeMap, HashMap};

use baton_core::lifecycle::decide::WorkflowState;
use baton_core::lifecycle::{Effects, Transition};
use baton_core::{JobId, JobState, Millis, WaitReason};

use crate::notify::Channel;
use crate::store::{
    JobRecord, NewJob, NewSweep, NewWorkflow, Store, StoreError, SweepRecord, Transaction,
    WorkflowRecord,
};

pub struct JobTable {
    store: Store,
    /// Queued and running jobs, as last committed.
    active: BTreeMap<JobId, JobRecord>,
    /// Workflows that have not ended, as last committed.
    workflows: HashMap<u64, WorkflowRecord>,
    /// Sweeps that have not ended, as last committed.
    sweeps: HashMap<u64, SweepRecord>,
    /// The lowest and highest job id of each such sweep's runs still active (they are queued
    /// together, so their ids are consecutive): its runs are found without a scan of all jobs.
    sweep_runs: HashMap<u64, (JobId, JobId)>,
    /// Why each queued job waited in the last pass (kept as data: its text is made when shown).
    waiting: HashMap<JobId, WaitReason>,
    /// A word shown over a job's reason until it changes again (its end waits to be recorded).
    shown: HashMap<JobId, String>,
}

impl JobTable {
    /// Loads the active jobs and workflows of `store`.
    pub fn load(store: Store) -> Result<JobTable, StoreError> {
        let active = store.active()?.into_iter().map(|j| (j.id, j)).collect();
        let workflows = store
            .active_workflows()?
            .into_iter()
            .map(|w| (w.id, w))
            .collect();
        let sweeps = store
            .active_sweeps()?
            .into_iter()
            .map(|s| (s.id, s))
            .collect();
        let mut sweep_runs: HashMap<u64, (JobId, JobId)> = HashMap::new();
        for job in BTreeMap::values(&active) {
            let job: &JobRecord = job;
            if let Some(run) = &job.sweep {
                let range = sweep_runs.entry(run.id).or_insert((job.id, job.id));
                range.0 = range.0.min(job.id);
                range.1 = range.1.max(job.id);
            }
        }
        Ok(JobTable {
            store,
            active,
            workflows,
            sweeps,
            sweep_runs,
            waiting: HashMap::new(),
            shown: HashMap::new(),
        })
    }

    /// The store, for the tables this one does not own (deliveries, events, monitor) and for
    /// reads.
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// An active job.
    pub fn get(&self, id: JobId) -> Option<&JobRecord> {
        self.active.get(&id)
    }

    pub fn is_active(&self, id: JobId) -> bool {
        self.active.contains_key(&id)
    }

    /// The queued and running jobs, by id.
    pub fn active(&self) -> impl Iterator<Item = &JobRecord> {
        self.active.values()
    }

    /// A job, active or not: the live copy if it is active, else the stored one.
    pub fn lookup(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        match self.active.get(&id) {
            Some(job) => Ok(Some(job.clone())),
            None => self.store.get(id),
        }
    }

    /// The reason to show for a job: a derived word (why it waits now, an end not yet recorded)
    /// over the one recorded.
    pub fn reason_of<'a>(&'a self, job: &'a JobRecord) -> Option<std::borrow::Cow<'a, str>> {
        if let Some(word) = self.shown.get(&job.id) {
            return Some(word.as_str().into());
        }
        if job.state() == JobState::Queued
            && let Some(why) = self.waiting.get(&job.id)
        {
            return Some(why.to_string().into());
        }
        job.reason().map(Into::into)
    }

    /// The reasons to show for these jobs where they are not the recorded ones.
    pub fn shown_reasons(&self, jobs: &[JobRecord]) -> HashMap<JobId, String> {
        jobs.iter()
            .filter_map(|j| {
                let shown = self.reason_of(j)?;
                (Some(shown.as_ref()) != j.reason()).then(|| (j.id, shown.into_owned()))
            })
            .collect()
    }

    // ---- transitions -------------------------------------------------------------------------

    /// Queues a job.
    pub fn submit(
        &mut self,
        job: &NewJob,
        request_id: Option<&str>,
    ) -> Result<JobRecord, StoreError> {
        let record = self.store.insert_requested(job, request_id)?;
        self.active.insert(record.id, record.clone());
        Ok(record)
    }

    /// Queues a workflow and all its tasks, all or none.
    pub fn submit_workflow(
        &mut self,
        wf: &NewWorkflow,
    ) -> Result<(WorkflowRecord, Vec<JobRecord>), StoreError> {
        let (record, jobs) = self.store.insert_workflow(wf)?;
        for job in &jobs {
            self.active.insert(job.id, job.clone());
        }
        self.workflows.insert(record.id, record.clone());
        Ok((record, jobs))
    }

    /// Queues a sweep and all its runs, all or none.
    /// Queues a sweep's runs; returns the sweep and its runs' ids.
    pub fn submit_sweep(
        &mut self,
        sweep: NewSweep,
        request_id: Option<&str>,
    ) -> Result<(SweepRecord, Vec<JobId>), StoreError> {
        let (record, jobs) = self.store.insert_sweep(sweep, request_id)?;
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
        if let (Some(&first), Some(&last)) = (ids.iter().min(), ids.iter().max()) {
            self.sweep_runs.insert(record.id, (first, last));
        }
        for job in jobs {
            self.active.insert(job.id, job);
        }
        self.sweeps.insert(record.id, record.clone());
        Ok((record, ids))
    }

    /// Applies one transition to an active job: committed, then mirrored. Returns the job as it
    /// now is and what the shell must do.
    pub fn apply(
        &mut self,
        id: JobId,
        transition: Transition,
        at: Millis,
    ) -> Result<(JobRecord, Effects), TableError> {
        let mut done = self.apply_all(vec![(id, transition)], at, |_| Ok(()))?;
        Ok(done.remove(0))
    }

    /// Applies transitions to several active jobs in one transaction, with `also` (the rows of
    /// other tables that go with them: a job's deliveries, a workflow's admission) in the same
    /// commit: all of it or none.
    pub fn apply_all(
        &mut self,
        changes: Vec<(JobId, Transition)>,
        at: Millis,
        also: impl FnOnce(&Transaction<'_>) -> Result<(), StoreError>,
    ) -> Result<Vec<(JobRecord, Effects)>, TableError> {
        let mut current = Vec::with_capacity(changes.len());
        let mut moves = Vec::with_capacity(changes.len());
        for (id, t) in changes {
            let job = self.active.get(&id).ok_or(TableError::NotActive(id))?;
            moves.push((id, moves_state(&t)));
            current.push((job, t));
        }
        let committed = self.store.commit_all(&current, at, also)?;
        drop(current);
        let mut done = Vec::with_capacity(committed.len());
        for ((id, moved), (life, effects)) in moves.into_iter().zip(committed) {
            // A word shown over the reason lasts until the job moves on (not a lease renewal
            // or a look at Slurm).
            if moved {
                self.shown.remove(&id);
            }
            let Some(job) = self.active.get_mut(&id) else {
                continue; // looked up above; the same job twice in one batch is a caller's bug
            };
            job.take(life);
            let state = job.state();
            if state != JobState::Queued {
                self.waiting.remove(&id);
            }
            // An ended job leaves memory: the caller gets the record itself, no copy.
            let job = match state.is_terminal() {
                true => self.active.remove(&id),
                false => self.active.get(&id).cloned(),
            };
            done.extend(job.map(|job| (job, effects)));
        }
        Ok(done)
    }

    /// Puts an ended job back in the queue (`Transition::Requeue`): the store's copy is the one
    /// changed, since an ended job is not in memory, and the deliveries of its earlier end are
    /// superseded in the same commit (none of them still waiting is sent). The job is active
    /// again from then on. A job that has not ended, or that succeeded, is refused by
    /// `Life::apply`, and nothing changes.
    pub fn requeue(&mut self, id: JobId, by: &str, at: Millis) -> Result<JobRecord, TableError> {
        let mut job = self.lookup(id)?.ok_or(TableError::Unknown(id))?;
        let requeue = Transition::Requeue { by: by.to_string() };
        let committed = self
            .store
            .commit_all(&[(&job, requeue)], at, |tx| {
                crate::store::supersede_deliveries(tx, id, at)
            })?
            .into_iter()
            .next();
        let Some((life, _effects)) = committed else {
            return Err(TableError::Unknown(id)); // one change in, one out: not reached
        };
        job.take(life);
        self.shown.remove(&id);
        self.active.insert(id, job.clone());
        Ok(job)
    }

    /// Sets a job's priority (a waste rule lowered it).
    pub fn set_priority(&mut self, id: JobId, priority: i64, at: Millis) -> Result<(), TableError> {
        let job = self.active.get(&id).ok_or(TableError::NotActive(id))?;
        let job = self.store.set_priority(job, priority, at)?;
        self.active.insert(id, job);
        Ok(())
    }

    /// Changes what a queued job asks for (`baton update`); the caller checked it may.
    pub fn update_spec(
        &mut self,
        id: JobId,
        change: &crate::store::SpecChange,
        at: Millis,
    ) -> Result<JobRecord, TableError> {
        let job = self.active.get(&id).ok_or(TableError::NotActive(id))?;
        let job = self.store.update_spec(job, change, at)?;
        self.active.insert(id, job.clone());
        Ok(job)
    }

    /// Sets where an active job's report goes (the Claude Code hook claimed its wake-up).
    pub fn set_notify(
        &mut self,
        id: JobId,
        channels: &[Channel],
        at: Millis,
        why: &str,
    ) -> Result<(), TableError> {
        let job = self.active.get(&id).ok_or(TableError::NotActive(id))?;
        let job = self.store.set_notify(job, channels, at, why)?;
        self.active.insert(id, job);
        Ok(())
    }

    /// Notes why each queued job waits after a pass; the text is made only when shown.
    pub fn set_waiting(&mut self, plan_waiting: Vec<(JobId, WaitReason)>) {
        let active = &self.active;
        self.waiting.retain(|id, _| {
            active
                .get(id)
                .is_some_and(|j| j.state() == JobState::Queued)
        });
        for (id, why) in plan_waiting {
            self.waiting.insert(id, why);
        }
    }

    /// Whether a job waited in an earlier pass (its start is then not a measure of dispatch).
    pub fn has_waited(&self, id: JobId) -> bool {
        self.waiting.contains_key(&id)
    }

    /// Shows `word` as a job's reason until its next transition.
    pub fn show(&mut self, id: JobId, word: String) {
        if self.active.contains_key(&id) {
            self.shown.insert(id, word);
        }
    }

    // ---- workflows ---------------------------------------------------------------------------

    pub fn workflow(&self, id: u64) -> Option<&WorkflowRecord> {
        self.workflows.get(&id)
    }

    /// The workflows that have not ended.
    pub fn workflows(&self) -> impl Iterator<Item = &WorkflowRecord> {
        self.workflows.values()
    }

    /// Whether the job is a task of an atomic workflow that waits for admission (its tasks are
    /// then placed together or not at all).
    pub fn in_waiting_gang(&self, job: &JobRecord) -> Option<u64> {
        job.workflow_id.filter(|w| {
            self.workflows
                .get(w)
                .is_some_and(|wf| wf.atomic && wf.admitted_at.is_none())
        })
    }

    /// An atomic workflow's admission: every task's reservation and the workflow's admission
    /// time in one commit.
    pub fn admit(
        &mut self,
        workflow: u64,
        reserved: &[(JobId, Vec<u32>)],
        lease_until: Millis,
        at: Millis,
    ) -> Result<Vec<(JobRecord, Effects)>, TableError> {
        let changes = reserved
            .iter()
            .map(|(id, gpus)| {
                (
                    *id,
                    Transition::Reserve(baton_core::lifecycle::Reservation {
                        gpus: gpus.clone(),
                        lease_until,
                    }),
                )
            })
            .collect();
        let done = self.apply_all(changes, at, |tx| {
            Store::set_workflow_admitted(tx, workflow, Some(at))
        })?;
        if let Some(wf) = self.workflows.get_mut(&workflow) {
            wf.admitted_at = Some(at);
        }
        Ok(done)
    }

    /// Gives back every reservation of a workflow whose lease lapsed: it waits for admission
    /// again.
    pub fn release(&mut self, workflow: u64, at: Millis) -> Result<(), TableError> {
        let changes = self
            .active
            .values()
            .filter(|j| j.workflow_id == Some(workflow) && j.reserved().is_some())
            .map(|j| (j.id, Transition::Release))
            .collect();
        self.apply_all(changes, at, |tx| {
            Store::set_workflow_admitted(tx, workflow, None)
        })?;
        if let Some(wf) = self.workflows.get_mut(&workflow) {
            wf.admitted_at = None;
        }
        Ok(())
    }

    /// Extends the lease of every reservation still waiting to be used.
    pub fn renew_leases(&mut self, until: Millis, at: Millis) -> Result<(), TableError> {
        let changes: Vec<(JobId, Transition)> = self
            .active
            .values()
            .filter(|j| j.reserved().is_some())
            .map(|j| (j.id, Transition::RenewLease { until }))
            .collect();
        if !changes.is_empty() {
            self.apply_all(changes, at, |_| Ok(()))?;
        }
        Ok(())
    }

    /// A workflow's first task started: the workflow is running.
    pub fn workflow_started(&mut self, workflow: u64) -> Result<(), StoreError> {
        let Some(wf) = self.workflows.get(&workflow) else {
            return Ok(());
        };
        if wf.state != WorkflowState::Queued {
            return Ok(());
        }
        self.store
            .set_workflow_state(workflow, WorkflowState::Running, None)?;
        if let Some(wf) = self.workflows.get_mut(&workflow) {
            wf.state = WorkflowState::Running;
        }
        Ok(())
    }

    // ---- sweeps ------------------------------------------------------------------------------

    /// A sweep that has not ended.
    pub fn sweep(&self, id: u64) -> Option<&SweepRecord> {
        self.sweeps.get(&id)
    }

    /// The sweeps that have not ended.
    pub fn sweeps(&self) -> impl Iterator<Item = &SweepRecord> {
        self.sweeps.values()
    }

    /// The active (queued or running) runs of a sweep.
    pub fn active_runs(&self, sweep: u64) -> impl Iterator<Item = &JobRecord> {
        let range = self.sweep_runs.get(&sweep).copied();
        range
            .into_iter()
            .flat_map(move |(first, last)| self.active.range(first..=last))
            .map(|(_, job)| job)
            .filter(move |job| job.sweep.is_some_and(|r| r.id == sweep))
    }

    /// A sweep's first run started: the sweep is running.
    pub fn sweep_started(&mut self, sweep: u64) -> Result<(), StoreError> {
        match self.sweeps.get_mut(&sweep) {
            Some(s) if s.state == WorkflowState::Queued => {
                self.store.set_sweep_running(sweep)?;
                s.state = WorkflowState::Running;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// A sweep ended: its state and its comparison report's deliveries, in one commit.
    pub fn end_sweep(
        &mut self,
        sweep: u64,
        state: WorkflowState,
        at: Millis,
        last: JobId,
        channels: &[Channel],
    ) -> Result<(), StoreError> {
        self.store.end_sweep(sweep, state, at, last, channels)?;
        self.sweeps.remove(&sweep);
        self.sweep_runs.remove(&sweep);
        Ok(())
    }

    /// A sweep looked broken: its alert's deliveries, once. False when it was alerted already.
    pub fn alert_sweep(
        &mut self,
        sweep: u64,
        at: Millis,
        anchor: JobId,
        channels: &[Channel],
    ) -> Result<bool, StoreError> {
        let queued = self.store.alert_sweep(sweep, at, anchor, channels)?;
        if let Some(s) = self.sweeps.get_mut(&sweep) {
            s.alerted_at.get_or_insert(at);
        }
        Ok(queued)
    }

    /// A workflow ended: its state and its summary's deliveries, in one commit.
    pub fn end_workflow(
        &mut self,
        workflow: u64,
        state: WorkflowState,
        at: Millis,
        last: JobId,
        channels: &[Channel],
    ) -> Result<(), StoreError> {
        self.store
            .end_workflow(workflow, state, at, last, channels)?;
        self.workflows.remove(&workflow);
        Ok(())
    }
}

/// Whether a transition moves a job to another state (or another attempt).
fn moves_state(transition: &Transition) -> bool {
    matches!(
        transition,
        Transition::Start { .. }
            | Transition::Withdraw { .. }
            | Transition::Retry { .. }
            | Transition::End(_)
            | Transition::Requeue { .. }
    )
}

/// Why the table did not make a change.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("job {0} is not queued or running")]
    NotActive(JobId),
    #[error("job {0} does not exist")]
    Unknown(JobId),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl TableError {
    pub fn short(&self) -> String {
        match self {
            TableError::Store(e) => e.short(),
            other => other.to_string(),
        }
    }

    /// The change can never go through (the job is not where the change expects it): trying
    /// again is pointless.
    pub fn is_moot(&self) -> bool {
        matches!(
            self,
            TableError::NotActive(_)
                | TableError::Unknown(_)
                | TableError::Store(StoreError::Refused { .. })
        )
    }

    /// The disk is full: the change may go through once there is room.
    pub fn is_full(&self) -> bool {
        matches!(self, TableError::Store(e) if e.is_full())
    }
}

#[cfg(test)]
mod tests {
    use baton_core::lifecycle::{Ending, Runner};

    use super::*;

    fn table(dir: &std::path::Path) -> JobTable {
        JobTable::load(Store::open(&dir.join("baton.db")).unwrap()).unwrap()
    }

    /// After every change, what the table holds in memory is what the store reads back, and an
    /// ended job leaves memory (the store keeps it).
    #[test]
    fn memory_and_the_store_agree_after_every_change() {
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = table(dir.path());
        let id = jobs.submit(&NewJob::plain(&["true"], 1), None).unwrap().id;
        let agree = |jobs: &JobTable| {
            let stored = jobs.store().get(id).unwrap().unwrap();
            assert_eq!(jobs.get(id), Some(&stored));
        };
        agree(&jobs);
        let start = Transition::Start {
            gpus: vec![0],
            at: 10,
            on: Runner::Local,
        };
        let (running, effects) = jobs.apply(id, start, 10).unwrap();
        assert_eq!(
            (running.state(), effects.hold),
            (JobState::Running, vec![0])
        );
        agree(&jobs);
        let cancel = Transition::RequestCancel {
            by: "alice".into(),
            reason: "cancelling (asked by alice)".into(),
        };
        jobs.apply(id, cancel, 11).unwrap();
        agree(&jobs);
        jobs.apply(
            id,
            Transition::End(Ending::cancelled("cancelled by alice", 12)),
            12,
        )
        .unwrap();
        assert!(!jobs.is_active(id));
        let ended = jobs.lookup(id).unwrap().unwrap();
        assert_eq!(
            (ended.state(), ended.cancel_requested_by()),
            (JobState::Cancelled, Some("alice"))
        );
        // An ended job is not the table's to change.
        let again = jobs.apply(id, Transition::End(Ending::failed("x", 13)), 13);
        assert!(matches!(again, Err(TableError::NotActive(_))));
        // A restart loads what is active.
        drop(jobs);
        assert_eq!(table(dir.path()).active().count(), 0);
    }

    /// A requeue takes an ended job from the store back into memory, where both agree; a job
    /// that succeeded, or that does not exist, is refused and nothing changes.
    #[test]
    fn a_requeued_job_is_active_again_and_agrees_with_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = table(dir.path());
        let failed = jobs.submit(&NewJob::plain(&["false"], 1), None).unwrap().id;
        let ok = jobs.submit(&NewJob::plain(&["true"], 1), None).unwrap().id;
        for (id, ending) in [
            (failed, Ending::failed("exit code 1", 2)),
            (ok, Ending::succeeded(2)),
        ] {
            let start = Transition::Start {
                gpus: vec![0],
                at: 1,
                on: Runner::Local,
            };
            jobs.apply(id, start, 1).unwrap();
            jobs.apply(id, Transition::End(ending), 2).unwrap();
        }
        let job = jobs.requeue(failed, "alice", 3).unwrap();
        assert_eq!((job.state(), job.attempt()), (JobState::Queued, 1));
        assert_eq!(jobs.get(failed), Some(&job));
        assert_eq!(jobs.store().get(failed).unwrap().as_ref(), Some(&job));
        let refused = jobs.requeue(ok, "alice", 4).unwrap_err();
        assert!(refused.is_moot(), "{refused}");
        assert!(!jobs.is_active(ok));
        assert!(matches!(
            jobs.requeue(JobId(99), "alice", 4),
            Err(TableError::Unknown(_))
        ));
        // Queued again: requeued twice is refused until it ends.
        assert!(jobs.requeue(failed, "alice", 5).unwrap_err().is_moot());
    }

    /// Why a queued job waits in the latest pass is shown over its recorded reason, and goes
    /// with its next transition; it is never stored.
    #[test]
    fn derived_reasons_are_shown_not_stored() {
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = table(dir.path());
        let job = jobs.submit(&NewJob::plain(&["true"], 1), None).unwrap();
        jobs.set_waiting(vec![(job.id, WaitReason::Dependency { on: JobId(99) })]);
        let shown = jobs
            .reason_of(jobs.get(job.id).unwrap())
            .map(|r| r.into_owned());
        assert!(shown.is_some_and(|r| r.contains("99")));
        assert_eq!(jobs.store().get(job.id).unwrap().unwrap().reason(), None);
        jobs.show(
            job.id,
            "it has ended, but its end is not recorded yet".into(),
        );
        assert_eq!(
            jobs.reason_of(jobs.get(job.id).unwrap()).as_deref(),
            Some("it has ended, but its end is not recorded yet")
        );
        let start = Transition::Start {
            gpus: vec![0],
            at: 5,
            on: Runner::Local,
        };
        jobs.apply(job.id, start, 5).unwrap();
        assert_eq!(jobs.reason_of(jobs.get(job.id).unwrap()), None);
    }

    /// A word shown over a job's reason outlives the changes that do not move the job on (a
    /// lease renewal), and goes with the one that does.
    #[test]
    fn a_shown_word_lasts_until_the_job_moves_on() {
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = table(dir.path());
        let id = jobs.submit(&NewJob::plain(&["true"], 1), None).unwrap().id;
        let reserve = Transition::Reserve(baton_core::lifecycle::Reservation {
            gpus: vec![0],
            lease_until: 100,
        });
        jobs.apply(id, reserve, 1).unwrap();
        jobs.show(id, "its end is not recorded yet".into());
        jobs.renew_leases(200, 2).unwrap();
        assert_eq!(jobs.get(id).unwrap().lease_until(), Some(200));
        let shown = |jobs: &JobTable| {
            jobs.reason_of(jobs.get(id).unwrap())
                .map(|r| r.into_owned())
        };
        assert_eq!(shown(&jobs).as_deref(), Some("its end is not recorded yet"));
        jobs.apply(id, Transition::End(Ending::cancelled("cancelled", 3)), 3)
            .unwrap();
        assert!(!jobs.is_active(id));
    }
}
