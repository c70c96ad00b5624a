//! A job's lifecycle as data: its typed status ([`Status`]: queued, running or ended, each
//! variant carrying what holds in that state and nothing else), the transitions that change it
//! ([`Transition`]), and the pure decisions that say which transition an event gives
//! ([`decide`]: how an exit, a signal, a time limit or a cancel ends an attempt, retry or end,
//! Slurm's word, a workflow's final state).
//!
//! The daemon's job table is the one caller that changes a job: it asks [`decide`] what an event
//! means, computes the new status with [`Life::apply`], commits the row written from that new
//! status, and only then replaces its copy in memory and acts on the [`Effects`]. So the store
//! and memory are written from the same value and cannot disagree, and the unit and property
//! tests here drive exactly what the daemon runs, with no daemon.

pub mod decide;

use serde::{Deserialize, Serialize};

use crate::model::{JobState, Millis};

/// How an attempt's process ended, as far as baton passes it on (`exit_code`, `signal`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// A job's final state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
    Timeout,
}

impl Outcome {
    pub fn state(self) -> JobState {
        match self {
            Outcome::Succeeded => JobState::Succeeded,
            Outcome::Failed => JobState::Failed,
            Outcome::Cancelled => JobState::Cancelled,
            Outcome::Timeout => JobState::Timeout,
        }
    }

    /// The outcome a terminal state names (`None` for queued and running).
    pub fn of(state: JobState) -> Option<Outcome> {
        match state {
            JobState::Succeeded => Some(Outcome::Succeeded),
            JobState::Failed => Some(Outcome::Failed),
            JobState::Cancelled => Some(Outcome::Cancelled),
            JobState::Timeout => Some(Outcome::Timeout),
            JobState::Queued | JobState::Running => None,
        }
    }
}

/// How a job (or one attempt of it) ended: what [`decide`] makes of an exit, a cancel, a lost
/// supervisor or Slurm's word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ending {
    pub outcome: Outcome,
    pub exit: Exit,
    pub reason: Option<String>,
    pub at: Millis,
}

impl Ending {
    /// A failure with no exit status (a dependency failed, the launch failed, Slurm refused it).
    pub fn failed(reason: impl Into<String>, at: Millis) -> Ending {
        Ending {
            outcome: Outcome::Failed,
            exit: Exit::default(),
            reason: Some(reason.into()),
            at,
        }
    }

    /// A success: exit code 0.
    pub fn succeeded(at: Millis) -> Ending {
        Ending {
            outcome: Outcome::Succeeded,
            exit: Exit {
                code: Some(0),
                signal: None,
            },
            reason: None,
            at,
        }
    }

    /// A cancel of a job that was not running (or whose process is gone).
    pub fn cancelled(reason: impl Into<String>, at: Millis) -> Ending {
        Ending {
            outcome: Outcome::Cancelled,
            exit: Exit::default(),
            reason: Some(reason.into()),
            at,
        }
    }
}

/// GPUs an atomic workflow's admission set aside for a task, held until `lease_until` unless
/// renewed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub gpus: Vec<u32>,
    pub lease_until: Millis,
}

/// A Slurm job that carries an attempt: its id, and Slurm's last word on it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlurmJob {
    pub id: u64,
    /// `PENDING`, `RUNNING`, `OUT_OF_MEMORY`, ...
    pub state: Option<String>,
    /// The nodes it runs (or ran) on.
    pub nodes: Option<String>,
}

/// Where a queued job stands with Slurm, under the Slurm backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlurmQueue {
    /// `sbatch` is about to run or running (recorded before it runs, so that a crash in between
    /// finds the submission again instead of making a second one).
    Submitting { since: Millis },
    /// Slurm has it and it waits in Slurm's queue.
    Submitted {
        job: SlurmJob,
        /// When the submission began (kept: it names the attempt's submission).
        since: Option<Millis>,
    },
}

impl SlurmQueue {
    pub fn job(&self) -> Option<&SlurmJob> {
        match self {
            SlurmQueue::Submitting { .. } => None,
            SlurmQueue::Submitted { job, .. } => Some(job),
        }
    }
}

/// Who runs an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Runner {
    /// A supervisor on this machine.
    Local,
    /// A Slurm job.
    Slurm(SlurmJob),
}

/// A queued job: waiting for its dependencies, GPUs, a retry's backoff or Slurm.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Queued {
    /// Why it waits, as recorded (a retry's backoff, Slurm's word); the scheduling pass's own
    /// reasons are shown over it and not stored.
    pub reason: Option<String>,
    pub reservation: Option<Reservation>,
    /// A retry waits out its backoff: the next attempt starts no earlier than this.
    pub not_before: Option<Millis>,
    /// How the attempt before this wait ended (a failed attempt waiting for its retry).
    pub previous: Exit,
    pub slurm: Option<SlurmQueue>,
    /// A cancel asked of a job Slurm has in its queue: its end comes back through tracking.
    pub cancel_requested_by: Option<String>,
    /// Held (`baton hold`, `submit --hold`) by this user: it does not start until released.
    pub held_by: Option<String>,
}

/// A running attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    pub gpus: Vec<u32>,
    pub since: Millis,
    pub on: Runner,
    /// Who asked to stop it; its end is then recorded as cancelled.
    pub cancel_requested_by: Option<String>,
    /// What is happening to it ("cancelling (asked by alice)", Slurm's word).
    pub reason: Option<String>,
    /// Why baton itself stops it (a mid-run detector its submitter named in `--stop-on`): its
    /// end is then recorded as failed, with this reason.
    pub stop_reason: Option<String>,
}

/// Where and since when a job's last attempt ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ran {
    pub gpus: Vec<u32>,
    pub since: Millis,
}

/// A job that will never run again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub outcome: Outcome,
    pub exit: Exit,
    pub reason: Option<String>,
    pub at: Millis,
    /// Its last attempt (`None`: it never started).
    pub ran: Option<Ran>,
    /// The Slurm job of its last attempt, under the Slurm backend.
    pub slurm: Option<SlurmJob>,
    pub cancel_requested_by: Option<String>,
}

/// A job's status: exactly one of these, with the data of that state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Queued(Queued),
    Running(Running),
    Ended(Ended),
}

/// The changing part of a job: its status and how many attempts have started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Life {
    /// Attempts started so far (0 while it never started).
    pub attempt: u32,
    pub status: Status,
}

/// One change of a job's status. Each is one event in the job's history (`baton events`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Its atomic workflow was admitted: these GPUs are set aside for it.
    Reserve(Reservation),
    /// The reservation's lease is extended (nothing else changes; not an event).
    RenewLease { until: Millis },
    /// The reservation lapsed while no daemon renewed it: the GPUs are given back.
    Release,
    /// A new attempt starts on these GPUs.
    Start {
        gpus: Vec<u32>,
        at: Millis,
        on: Runner,
    },
    /// The start never happened (the launch was never claimed, so it can never run): back to
    /// the queue, and the attempt it counted is given back.
    Withdraw { reason: String },
    /// Someone asked to stop it.
    RequestCancel { by: String, reason: String },
    /// baton stops a running job that went wrong (`--stop-on`): like a cancel by `baton`, but
    /// it ends as failed with `reason`.
    RequestStop { reason: String },
    /// It must not start until released (`baton hold`).
    Hold { by: String },
    /// The hold is lifted (`baton release`): it may start again.
    Unhold { by: String },
    /// A failed attempt goes back to the queue for its retry.
    Retry {
        exit: Exit,
        reason: String,
        not_before: Millis,
    },
    /// Its final state.
    End(Ending),
    /// A job that failed, was cancelled or timed out goes back to the queue, to run again as a
    /// new attempt of the same id (`baton requeue`, like `scontrol requeue`). A job that
    /// succeeded is never requeued: it is resubmitted as a new job instead.
    Requeue { by: String },
    /// `sbatch` is about to run for it.
    SlurmSubmitting { at: Millis },
    /// `sbatch` gave it this Slurm job id.
    SlurmSubmitted { id: u64, reason: Option<String> },
    /// The submission did not reach Slurm: it waits to be submitted again.
    SlurmNotSubmitted { reason: Option<String> },
    /// What Slurm says of it now (state, why it waits, the nodes it runs on).
    SlurmSeen {
        state: String,
        reason: Option<String>,
        nodes: Option<String>,
    },
}

/// What a held job says while it waits.
pub fn held_reason(by: &str) -> String {
    format!("held by {by}: `baton release` lets it start")
}

/// Why a transition does not apply to a job's status (a bug in the caller, or a race the caller
/// lost: the job moved on meanwhile).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {job_state} job cannot {what}")]
pub struct Refused {
    pub job_state: JobState,
    pub what: &'static str,
}

/// What the shell must do after a transition is committed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// GPUs this job now holds that it did not (a start off the free pool, a reservation).
    pub hold: Vec<u32>,
    /// GPUs this job no longer holds.
    pub free: Vec<u32>,
    /// The job ended: build its report and deliver it; dependents may now be decided.
    pub ended: bool,
}

impl Status {
    /// The state's name (what JSON, SQL and the scheduler use).
    pub fn state(&self) -> JobState {
        match self {
            Status::Queued(_) => JobState::Queued,
            Status::Running(_) => JobState::Running,
            Status::Ended(e) => e.outcome.state(),
        }
    }

    /// The GPUs the job holds now: its running attempt's, or its reservation's.
    pub fn held(&self) -> &[u32] {
        match self {
            Status::Running(r) => &r.gpus,
            Status::Queued(Queued {
                reservation: Some(r),
                ..
            }) => &r.gpus,
            _ => &[],
        }
    }
}

impl Life {
    /// A job just submitted.
    pub fn submitted() -> Life {
        Life {
            attempt: 0,
            status: Status::Queued(Queued::default()),
        }
    }

    pub fn state(&self) -> JobState {
        self.status.state()
    }

    /// The history entry (kind, detail) a transition writes, if it writes one.
    pub fn event_of(transition: &Transition) -> Option<(&'static str, String)> {
        Some(match transition {
            Transition::Reserve(r) => ("reserved", format!("gpus {:?}", r.gpus)),
            Transition::RenewLease { .. } => return None,
            Transition::Release => ("released", "reservation lease expired".into()),
            Transition::Start { gpus, .. } => ("started", format!("gpus {gpus:?}")),
            Transition::Withdraw { reason } => ("requeued", reason.clone()),
            Transition::RequestCancel { by, .. } => ("cancel-requested", by.clone()),
            Transition::RequestStop { reason } => ("stop-requested", reason.clone()),
            Transition::Hold { by } => ("held", by.clone()),
            Transition::Unhold { by } => ("hold-released", by.clone()),
            Transition::Retry { reason, .. } => ("retry", reason.clone()),
            Transition::End(e) => (
                e.outcome.state().as_str(),
                e.reason.clone().unwrap_or_default(),
            ),
            Transition::Requeue { by } => ("requeued", format!("by {by}")),
            Transition::SlurmSubmitting { .. } => return None,
            Transition::SlurmSubmitted { id, .. } => ("slurm-submitted", format!("Slurm job {id}")),
            Transition::SlurmNotSubmitted { .. } => return None,
            Transition::SlurmSeen { .. } => return None,
        })
    }

    /// The status after `transition`, and what the shell must do about it; `self` is unchanged,
    /// so the caller can commit the new status before it replaces the old one.
    pub fn apply(&self, transition: &Transition) -> Result<(Life, Effects), Refused> {
        let refuse = |what| Refused {
            job_state: self.state(),
            what,
        };
        let mut effects = Effects::default();
        let attempt = self.attempt;
        let status = match (&self.status, transition) {
            (Status::Queued(q), Transition::Reserve(r)) if q.reservation.is_none() => {
                effects.hold = r.gpus.clone();
                Status::Queued(Queued {
                    reservation: Some(r.clone()),
                    ..q.clone()
                })
            }
            (Status::Queued(q), Transition::RenewLease { until }) => {
                let Some(r) = &q.reservation else {
                    return Err(refuse("renew a reservation it does not have"));
                };
                Status::Queued(Queued {
                    reservation: Some(Reservation {
                        gpus: r.gpus.clone(),
                        lease_until: *until,
                    }),
                    ..q.clone()
                })
            }
            (Status::Queued(q), Transition::Release) => {
                effects.free = q.held_gpus();
                Status::Queued(Queued {
                    reservation: None,
                    ..q.clone()
                })
            }
            (Status::Queued(q), Transition::Start { .. }) if q.held_by.is_some() => {
                return Err(refuse("start while it is held"));
            }
            (Status::Queued(q), Transition::Start { gpus, at, on }) => {
                // A reserved job starts on its reservation: those GPUs are held already.
                let reserved = q.held_gpus();
                effects.hold = gpus
                    .iter()
                    .filter(|g| !reserved.contains(g))
                    .copied()
                    .collect();
                effects.free = reserved
                    .iter()
                    .filter(|g| !gpus.contains(g))
                    .copied()
                    .collect();
                return Ok((
                    Life {
                        attempt: attempt + 1,
                        status: Status::Running(Running {
                            gpus: gpus.clone(),
                            since: *at,
                            on: on.clone(),
                            // A cancel asked while Slurm had it queued still stands.
                            cancel_requested_by: q.cancel_requested_by.clone(),
                            reason: None,
                            stop_reason: None,
                        }),
                    },
                    effects,
                ));
            }
            (Status::Running(r), Transition::Withdraw { reason }) => {
                effects.free = r.gpus.clone();
                return Ok((
                    Life {
                        attempt: attempt.saturating_sub(1),
                        status: Status::Queued(Queued {
                            reason: Some(reason.clone()),
                            ..Queued::default()
                        }),
                    },
                    effects,
                ));
            }
            (Status::Running(r), Transition::RequestCancel { by, reason }) => {
                Status::Running(Running {
                    cancel_requested_by: Some(by.clone()),
                    reason: Some(reason.clone()),
                    ..r.clone()
                })
            }
            (Status::Running(r), Transition::RequestStop { reason })
                if r.cancel_requested_by.is_none() =>
            {
                Status::Running(Running {
                    cancel_requested_by: Some("baton".into()),
                    reason: Some(format!("stopping: {reason}")),
                    stop_reason: Some(reason.clone()),
                    ..r.clone()
                })
            }
            (Status::Queued(q), Transition::RequestCancel { by, reason }) if q.slurm.is_some() => {
                Status::Queued(Queued {
                    cancel_requested_by: Some(by.clone()),
                    reason: Some(reason.clone()),
                    ..q.clone()
                })
            }
            (Status::Queued(q), Transition::Hold { by }) => {
                if q.reservation.is_some() {
                    return Err(refuse(
                        "be held while its atomic workflow holds GPUs for it",
                    ));
                }
                if q.slurm.is_some() {
                    return Err(refuse("be held by baton once it is in Slurm's queue"));
                }
                if q.held_by.is_some() {
                    return Err(refuse("be held twice"));
                }
                Status::Queued(Queued {
                    held_by: Some(by.clone()),
                    reason: Some(held_reason(by)),
                    ..q.clone()
                })
            }
            (Status::Queued(q), Transition::Unhold { .. }) if q.held_by.is_some() => {
                Status::Queued(Queued {
                    held_by: None,
                    reason: None,
                    ..q.clone()
                })
            }
            (
                Status::Running(r),
                Transition::Retry {
                    exit,
                    reason,
                    not_before,
                },
            ) => {
                effects.free = r.gpus.clone();
                Status::Queued(Queued {
                    reason: Some(reason.clone()),
                    reservation: None,
                    not_before: Some(*not_before),
                    previous: *exit,
                    slurm: None,
                    cancel_requested_by: None,
                    held_by: None,
                })
            }
            (Status::Ended(_), Transition::End(_)) => return Err(refuse("end again")),
            (Status::Ended(e), Transition::Requeue { by }) if e.outcome != Outcome::Succeeded => {
                // Nothing held, nothing freed: its GPUs went back when it ended. Its last exit
                // is kept, as a retry keeps it, and the attempt count goes on from where it was.
                Status::Queued(Queued {
                    reason: Some(format!("requeued by {by}")),
                    previous: e.exit,
                    ..Queued::default()
                })
            }
            (current, Transition::End(e)) => {
                effects.free = current.held().to_vec();
                effects.ended = true;
                let (ran, slurm, cancel) = match current {
                    Status::Running(r) => (
                        Some(Ran {
                            gpus: r.gpus.clone(),
                            since: r.since,
                        }),
                        match &r.on {
                            Runner::Slurm(s) => Some(s.clone()),
                            Runner::Local => None,
                        },
                        r.cancel_requested_by.clone(),
                    ),
                    Status::Queued(q) => (
                        None,
                        q.slurm.as_ref().and_then(|s| s.job().cloned()),
                        q.cancel_requested_by.clone(),
                    ),
                    Status::Ended(_) => unreachable!("matched above"),
                };
                Status::Ended(Ended {
                    outcome: e.outcome,
                    exit: e.exit,
                    reason: e.reason.clone(),
                    at: e.at,
                    ran,
                    slurm,
                    cancel_requested_by: cancel,
                })
            }
            (Status::Queued(q), Transition::SlurmSubmitting { at }) if q.slurm.is_none() => {
                Status::Queued(Queued {
                    slurm: Some(SlurmQueue::Submitting { since: *at }),
                    ..q.clone()
                })
            }
            (Status::Queued(q), Transition::SlurmSubmitted { id, reason }) => {
                let since = match &q.slurm {
                    Some(SlurmQueue::Submitting { since }) => Some(*since),
                    Some(SlurmQueue::Submitted { since, .. }) => *since,
                    None => None,
                };
                Status::Queued(Queued {
                    slurm: Some(SlurmQueue::Submitted {
                        job: SlurmJob {
                            id: *id,
                            state: None,
                            nodes: None,
                        },
                        since,
                    }),
                    reason: reason.clone().or_else(|| q.reason.clone()),
                    ..q.clone()
                })
            }
            (Status::Queued(q), Transition::SlurmNotSubmitted { reason })
                if matches!(q.slurm, Some(SlurmQueue::Submitting { .. })) =>
            {
                Status::Queued(Queued {
                    slurm: None,
                    reason: reason.clone().or_else(|| q.reason.clone()),
                    ..q.clone()
                })
            }
            (
                Status::Queued(q),
                Transition::SlurmSeen {
                    state,
                    reason,
                    nodes,
                },
            ) => {
                let Some(SlurmQueue::Submitted { job, since }) = &q.slurm else {
                    return Err(refuse("be seen in Slurm before it is submitted"));
                };
                Status::Queued(Queued {
                    slurm: Some(SlurmQueue::Submitted {
                        job: SlurmJob {
                            id: job.id,
                            state: Some(state.clone()),
                            nodes: nodes.clone().or_else(|| job.nodes.clone()),
                        },
                        since: *since,
                    }),
                    reason: reason.clone().or_else(|| q.reason.clone()),
                    ..q.clone()
                })
            }
            (
                Status::Running(r),
                Transition::SlurmSeen {
                    state,
                    reason,
                    nodes,
                },
            ) => {
                let Runner::Slurm(job) = &r.on else {
                    return Err(refuse("be seen in Slurm when it runs here"));
                };
                Status::Running(Running {
                    on: Runner::Slurm(SlurmJob {
                        id: job.id,
                        state: Some(state.clone()),
                        nodes: nodes.clone().or_else(|| job.nodes.clone()),
                    }),
                    reason: reason.clone().or_else(|| r.reason.clone()),
                    ..r.clone()
                })
            }
            (_, t) => return Err(refuse(t.verb())),
        };
        Ok((Life { attempt, status }, effects))
    }
}

impl Queued {
    fn held_gpus(&self) -> Vec<u32> {
        self.reservation
            .as_ref()
            .map(|r| r.gpus.clone())
            .unwrap_or_default()
    }
}

impl Transition {
    /// What the transition does, for a refusal.
    fn verb(&self) -> &'static str {
        match self {
            Transition::Reserve(_) => "be reserved GPUs",
            Transition::RenewLease { .. } => "renew a lease",
            Transition::Release => "give back a reservation",
            Transition::Start { .. } => "start",
            Transition::Withdraw { .. } => "have its start withdrawn",
            Transition::RequestCancel { .. } => "be asked to cancel",
            Transition::RequestStop { .. } => {
                "be stopped by baton (it is not running, or \
                                               is being cancelled already)"
            }
            Transition::Hold { .. } => "be held",
            Transition::Unhold { .. } => "be released (it is not held)",
            Transition::Retry { .. } => "be retried",
            Transition::End(_) => "end",
            Transition::Requeue { .. } => "be requeued",
            Transition::SlurmSubmitting { .. } => "be submitted to Slurm",
            Transition::SlurmSubmitted { .. } => "get a Slurm job id",
            Transition::SlurmNotSubmitted { .. } => "forget a submission it is not making",
            Transition::SlurmSeen { .. } => "be seen in Slurm",
        }
    }
}

#[cfg(test)]
mod tests;
