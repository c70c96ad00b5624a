//! State changes the store could not commit yet (a full disk, an I/O error): a job's end, a
//! failed attempt going back to the queue, a workflow's end, a delivery's outcome. Each is kept
//! here, committed again with backoff until it goes through, and only then acted on: a job's
//! GPUs are freed, its report built, its dependents released, once its end is durable, never
//! before. Nothing is lost meanwhile: a job's end is also in its supervisor's record, which a
//! restarted daemon reads. The daemon's own health (`baton status`, `baton info`) says how many
//! changes wait and why.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use baton_core::lifecycle::decide::WorkflowState;
use baton_core::lifecycle::{Ending, Transition};
use baton_core::{JobId, Millis};

use super::{Daemon, Inner, now_ms};
use crate::api::HealthView;
use crate::jobs::TableError;
use crate::notify::Channel;
use crate::store::{DeliveryState, JobRecord, StoreError};

/// A change that must be committed before it is acted on.
pub(super) enum Change {
    /// A job reached its final state, with one delivery per channel in the same commit.
    End {
        id: JobId,
        ending: Ending,
        channels: Vec<Channel>,
    },
    /// A failed attempt goes back to the queue for its retry (a `Transition::Retry`).
    Retry {
        id: JobId,
        retry: Transition,
        at: Millis,
    },
    /// A workflow ended: its summary stored, then its state and the summary's deliveries.
    WorkflowEnd {
        workflow: u64,
        state: WorkflowState,
        at: Millis,
        /// The task whose end ended it (the summary's deliveries ride on its job).
        last: JobId,
        summary: String,
        channels: Vec<Channel>,
    },
    /// A sweep's last run ended: its state and its comparison report's deliveries (the report
    /// is built when they are first sent, once every run's own report is stored).
    SweepEnd {
        sweep: u64,
        state: WorkflowState,
        at: Millis,
        /// The run whose end ended it (the report's deliveries ride on its job).
        last: JobId,
        channels: Vec<Channel>,
    },
    /// How one delivery went, and the inbox file that takes over from a session that is gone.
    Delivery {
        id: i64,
        job: JobId,
        subject: crate::store::Subject,
        state: DeliveryState,
        next: Millis,
        error: Option<String>,
        at: Millis,
        fallback: Option<Channel>,
    },
}

impl Change {
    /// The job the change holds back, if any.
    fn job(&self) -> Option<JobId> {
        match self {
            Change::End { id, .. } | Change::Retry { id, .. } => Some(*id),
            Change::WorkflowEnd { .. } | Change::SweepEnd { .. } | Change::Delivery { .. } => None,
        }
    }

    fn is_end(&self) -> bool {
        matches!(self, Change::End { .. } | Change::Retry { .. })
    }
}

/// What waits to be recorded.
#[derive(Default)]
pub(super) struct Unrecorded {
    changes: Vec<Change>,
    /// Jobs with a change waiting: nothing else happens to them until it is recorded.
    pub(super) jobs: HashSet<JobId>,
    /// Deliveries whose outcome waits: the outbox must not send them again.
    pub(super) deliveries: HashSet<i64>,
    /// The last failed write, while one is unresolved.
    failure: Option<Failure>,
}

struct Failure {
    since: Millis,
    error: String,
    /// The disk (or the database's quota) is full.
    full: bool,
}

/// How long the first retry of a failed write waits; it doubles up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Daemon {
    /// Commits `change` and acts on it, or, if the store refuses it, keeps it to commit again
    /// and acts on it only then. Called with the lock held.
    pub(super) fn record_change(&self, inner: &mut Inner, change: Change) {
        match self.commit(inner, &change) {
            Ok(job) => {
                if inner.unrecorded.changes.is_empty() {
                    inner.unrecorded.failure = None;
                }
                self.apply(inner, change, job);
            }
            // The job moved on meanwhile (it ended by another path): nothing to record.
            Err(e) if e.is_moot() => tracing::warn!("a change no longer applies: {e}"),
            Err(e) => {
                tracing::error!("cannot record a change yet, retrying: {e}");
                self.write_failed(inner, &e);
                if let Some(id) = change.job() {
                    inner.unrecorded.jobs.insert(id);
                    let word = format!(
                        "it has ended, but its end is not recorded yet ({}); retrying",
                        e.short()
                    );
                    inner.jobs.show(id, word);
                }
                if let Change::Delivery { id, .. } = &change {
                    inner.unrecorded.deliveries.insert(*id);
                }
                inner.unrecorded.changes.push(change);
                self.durable_wake.notify_one();
            }
        }
    }

    /// Notes that a durable write failed (for the daemon's health).
    pub(crate) fn write_failed(&self, inner: &mut Inner, e: &TableError) {
        let failure = inner.unrecorded.failure.get_or_insert(Failure {
            since: now_ms(),
            error: String::new(),
            full: false,
        });
        failure.error = e.short();
        failure.full = e.is_full();
    }

    /// Notes that a durable write went through: with nothing left waiting, the daemon is healthy.
    pub(crate) fn write_succeeded(&self, inner: &mut Inner) {
        if inner.unrecorded.changes.is_empty() {
            inner.unrecorded.failure = None;
        }
    }

    /// Commits a change; for a job's, returns the job as it now is.
    fn commit(&self, inner: &mut Inner, change: &Change) -> Result<Option<JobRecord>, TableError> {
        match change {
            Change::End {
                id,
                ending,
                channels,
            } => {
                let end = Transition::End(ending.clone());
                let mut done = inner.jobs.apply_all(vec![(*id, end)], ending.at, |tx| {
                    crate::store::insert_deliveries(
                        tx,
                        *id,
                        crate::store::Subject::Job,
                        channels,
                        ending.at,
                    )
                })?;
                Ok(Some(done.remove(0).0))
            }
            Change::Retry { id, retry, at } => {
                Ok(Some(inner.jobs.apply(*id, retry.clone(), *at)?.0))
            }
            Change::WorkflowEnd {
                workflow,
                state,
                at,
                last,
                summary,
                channels,
            } => {
                let path = crate::paths::workflow_report(&self.config.home, *workflow);
                path.parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| std::fs::write(&path, summary))
                    .map_err(StoreError::Io)?;
                inner
                    .jobs
                    .end_workflow(*workflow, *state, *at, *last, channels)?;
                Ok(None)
            }
            Change::SweepEnd {
                sweep,
                state,
                at,
                last,
                channels,
            } => {
                inner.jobs.end_sweep(*sweep, *state, *at, *last, channels)?;
                Ok(None)
            }
            Change::Delivery {
                id,
                job,
                subject,
                state,
                next,
                error,
                at,
                fallback,
            } => {
                let store = inner.jobs.store_mut();
                store.record_delivery(*id, *state, *next, error.as_deref(), *at)?;
                if let Some(inbox) = fallback {
                    store.add_delivery(*job, *subject, inbox, *at)?;
                }
                Ok(None)
            }
        }
    }

    /// What a recorded change sets in motion (`job`: the job as the commit left it).
    fn apply(&self, inner: &mut Inner, change: Change, job: Option<JobRecord>) {
        match change {
            Change::End { .. } => {
                if let Some(job) = job {
                    // Only a job that ran long enough was followed (`midrun::FOLLOW_AFTER_MS`).
                    if job.ran_at_least(super::midrun::FOLLOW_AFTER_MS) {
                        self.follow(job.id);
                    }
                    self.ended(inner, &job);
                }
            }
            Change::Retry { id, .. } => {
                self.follow(id);
                self.requeued_for_retry();
            }
            Change::WorkflowEnd { .. } | Change::SweepEnd { .. } | Change::Delivery { .. } => {
                self.outbox_wake.notify_one()
            }
        }
    }

    /// Commits the changes that wait, in order, with backoff while the store still refuses;
    /// sleeps while none waits.
    pub(super) async fn durable_loop(self: Arc<Self>) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            if self.lock().unrecorded.changes.is_empty() {
                backoff = FIRST_BACKOFF;
                self.durable_wake.notified().await;
                continue;
            }
            tokio::time::sleep(backoff).await;
            let progressed = {
                let mut inner = self.lock();
                let waiting = std::mem::take(&mut inner.unrecorded.changes);
                let mut progressed = false;
                let mut rest = waiting.into_iter();
                for change in rest.by_ref() {
                    match self.commit(&mut inner, &change) {
                        Ok(job) => {
                            progressed = true;
                            if let Some(id) = change.job() {
                                inner.unrecorded.jobs.remove(&id);
                            }
                            if let Change::Delivery { id, .. } = &change {
                                inner.unrecorded.deliveries.remove(id);
                            }
                            self.apply(&mut inner, change, job);
                        }
                        Err(e) if e.is_moot() => {
                            tracing::warn!("a change no longer applies: {e}");
                            if let Some(id) = change.job() {
                                inner.unrecorded.jobs.remove(&id);
                            }
                        }
                        Err(e) => {
                            self.write_failed(&mut inner, &e);
                            // Order matters (a retry before its end): keep this one and the rest.
                            let mut kept = vec![change];
                            kept.extend(rest);
                            kept.append(&mut inner.unrecorded.changes);
                            inner.unrecorded.changes = kept;
                            break;
                        }
                    }
                }
                if inner.unrecorded.changes.is_empty() {
                    inner.unrecorded.failure = None;
                    tracing::info!("every change that waited is recorded");
                }
                progressed
            };
            if progressed {
                self.notify_changed();
                self.wake();
            }
            backoff = if progressed {
                FIRST_BACKOFF
            } else {
                (backoff * 2).min(MAX_BACKOFF)
            };
        }
    }

    /// The daemon's own trouble, if it has any: what `baton status` and `baton info` say.
    pub(super) fn health(&self) -> Option<HealthView> {
        let inner = self.lock();
        let failure = inner.unrecorded.failure.as_ref()?;
        let ends = inner
            .unrecorded
            .changes
            .iter()
            .filter(|c| c.is_end())
            .count();
        let other = inner.unrecorded.changes.len() - ends;
        let what = if failure.full {
            format!("state directory full ({})", self.config.home.display())
        } else {
            format!(
                "cannot write the state directory {} ({})",
                self.config.home.display(),
                failure.error
            )
        };
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut problem = format!(
            "{what}: {} not yet recorded",
            plural(ends, "job end", "job ends")
        );
        if other > 0 {
            problem.push_str(&format!(
                ", and {}",
                plural(other, "other change", "other changes")
            ));
        }
        problem.push_str(if failure.full {
            "; baton retries by itself once there is room again"
        } else {
            "; baton retries by itself"
        });
        Some(HealthView {
            problem,
            full: failure.full,
            unrecorded_ends: ends,
            unrecorded_changes: other,
            since: super::views::rfc3339(failure.since),
        })
    }
}
