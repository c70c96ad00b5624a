//! Property test for the job lifecycle: random sequences of events on a few jobs sharing a few
//! GPUs, each turned into a transition the way the daemon does it (the decisions of
//! `lifecycle::decide`, GPUs taken from what is free) and applied with `Life::apply`. After every
//! step: each job is in exactly one state and its state name agrees with its data; the GPUs held,
//! as the effects said, are exactly the GPUs of the running and reserved jobs, none twice;
//! attempts only grow (a start withdrawn before it ran gives back only the attempt it counted);
//! an ended job changes again only by a requeue, which holds nothing and keeps its attempt
//! count, and never once it succeeded.

use std::collections::BTreeSet;

use baton_core::JobState;
use baton_core::lifecycle::decide::{AttemptExit, JobFacts, after_attempt, attempt_ending};
use baton_core::lifecycle::{
    Ending, Exit, Life, Reservation, Runner, SlurmJob, Status, Transition,
};
use proptest::prelude::*;

const GPUS: u32 = 4;

/// One thing that can happen to job `job`; `n` picks GPUs, exit codes and the like.
#[derive(Clone, Debug)]
enum Step {
    Reserve,
    Start,
    StartInSlurm,
    Exit { code: i32, cancelled: bool },
    SupervisorLost,
    Withdraw,
    Cancel,
    Renew,
    Release,
    DependencyFailed,
    SlurmSubmit,
    SlurmSeen,
    Requeue,
}

fn step() -> impl Strategy<Value = (usize, Step, u8)> {
    let step = prop_oneof![
        Just(Step::Reserve),
        Just(Step::Start),
        Just(Step::StartInSlurm),
        (0i32..=2, any::<bool>()).prop_map(|(code, cancelled)| Step::Exit { code, cancelled }),
        Just(Step::SupervisorLost),
        Just(Step::Withdraw),
        Just(Step::Cancel),
        Just(Step::Renew),
        Just(Step::Release),
        Just(Step::DependencyFailed),
        Just(Step::SlurmSubmit),
        Just(Step::SlurmSeen),
        Just(Step::Requeue),
    ];
    (0usize..4, step, any::<u8>())
}

struct Job {
    life: Life,
    retries: u32,
}

/// The transition the daemon would make of `step` for this job, if the step means anything now.
fn transition(job: &Job, step: &Step, n: u8, free: &[u32], now: i64) -> Option<Transition> {
    let cancel_by = match &job.life.status {
        Status::Running(r) => r.cancel_requested_by.as_deref(),
        Status::Queued(q) => q.cancel_requested_by.as_deref(),
        Status::Ended(_) => None,
    };
    let facts = JobFacts {
        cancel_requested_by: cancel_by,
        stop_reason: None,
        time_limit: Some(1_000),
        limit_from_reservation: None,
        attempt: job.life.attempt,
        retries: job.retries,
    };
    let take = |count: usize| -> Option<Vec<u32>> {
        (free.len() >= count).then(|| free[..count].to_vec())
    };
    Some(match step {
        Step::Reserve => Transition::Reserve(Reservation {
            gpus: take(1 + n as usize % 2)?,
            lease_until: now + 60_000,
        }),
        Step::Start | Step::StartInSlurm => {
            let gpus = match &job.life.status {
                Status::Queued(q) => match &q.reservation {
                    Some(r) => r.gpus.clone(),
                    None => take(n as usize % 3)?,
                },
                // Not queued: the transition is refused, whatever GPUs it names.
                _ => vec![n as u32 % GPUS],
            };
            let on = match step {
                Step::StartInSlurm => Runner::Slurm(SlurmJob {
                    id: u64::from(n),
                    ..SlurmJob::default()
                }),
                _ => Runner::Local,
            };
            Transition::Start { gpus, at: now, on }
        }
        Step::Exit { code, cancelled } => {
            let exit = AttemptExit {
                exit: Exit {
                    code: Some(*code),
                    signal: None,
                },
                cancelled: *cancelled,
                ended_at: now,
                ..AttemptExit::default()
            };
            let ending = attempt_ending(facts, Some(&exit), now);
            if !matches!(job.life.status, Status::Running(_)) {
                return Some(Transition::End(ending));
            }
            after_attempt(facts, ending, 1_000, now)
        }
        Step::SupervisorLost => {
            let ending = attempt_ending(facts, None, now);
            after_attempt(facts, ending, 1_000, now)
        }
        Step::Withdraw => Transition::Withdraw {
            reason: "requeued".into(),
        },
        Step::Cancel => match &job.life.status {
            Status::Queued(q) if q.slurm.is_none() => {
                Transition::End(Ending::cancelled("cancelled before it started", now))
            }
            _ => Transition::RequestCancel {
                by: "alice".into(),
                reason: "cancelling".into(),
            },
        },
        Step::Renew => Transition::RenewLease {
            until: now + 60_000,
        },
        Step::Release => Transition::Release,
        Step::DependencyFailed => Transition::End(Ending::failed("dependency failed", now)),
        Step::SlurmSubmit => match n % 2 {
            0 => Transition::SlurmSubmitting { at: now },
            _ => Transition::SlurmSubmitted {
                id: u64::from(n),
                reason: None,
            },
        },
        Step::Requeue => Transition::Requeue { by: "alice".into() },
        Step::SlurmSeen => Transition::SlurmSeen {
            state: "PENDING".into(),
            reason: Some("waiting in Slurm".into()),
            nodes: None,
        },
    })
}

fn held_by_statuses(jobs: &[Job]) -> Vec<u32> {
    let mut all: Vec<u32> = jobs
        .iter()
        .flat_map(|j| j.life.status.held().to_vec())
        .collect();
    all.sort_unstable();
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn lifecycle_invariants_hold(
        retries in prop::collection::vec(0u32..=2, 4),
        steps in prop::collection::vec(step(), 1..60),
    ) {
        let mut jobs: Vec<Job> = retries
            .into_iter()
            .map(|retries| Job { life: Life::submitted(), retries })
            .collect();
        // The GPUs held, as the effects of the applied transitions say.
        let mut held: BTreeSet<u32> = BTreeSet::new();
        for (now, (index, step, n)) in steps.into_iter().enumerate() {
            let now = now as i64 * 10;
            let free: Vec<u32> = (0..GPUS).filter(|g| !held.contains(g)).collect();
            let Some(t) = transition(&jobs[index], &step, n, &free, now) else {
                continue;
            };
            let before = jobs[index].life.clone();
            match before.apply(&t) {
                Ok((after, effects)) => {
                    // An ended job changes again only by a requeue, and never once it
                    // succeeded; a requeue applies to nothing else.
                    let ended = matches!(before.status, Status::Ended(_));
                    let requeue = matches!(t, Transition::Requeue { .. });
                    prop_assert_eq!(ended, requeue, "{:?} moved a {} job", t, before.state());
                    prop_assert!(
                        before.state() != JobState::Succeeded,
                        "a succeeded job moved: {t:?}"
                    );
                    if requeue {
                        prop_assert!(matches!(after.status, Status::Queued(_)));
                        prop_assert!(effects.hold.is_empty() && effects.free.is_empty());
                    }
                    for g in &effects.free {
                        prop_assert!(held.remove(g), "freed GPU {g} it did not hold: {t:?}");
                    }
                    for g in &effects.hold {
                        prop_assert!(held.insert(*g), "GPU {g} held twice: {t:?}");
                    }
                    // Attempts only grow; a withdrawn start gives back exactly its own.
                    match &t {
                        Transition::Withdraw { .. } => {
                            prop_assert_eq!(after.attempt + 1, before.attempt);
                            prop_assert!(matches!(before.status, Status::Running(_)));
                        }
                        Transition::Start { .. } => {
                            prop_assert_eq!(after.attempt, before.attempt + 1)
                        }
                        _ => prop_assert_eq!(after.attempt, before.attempt),
                    }
                    prop_assert_eq!(effects.ended, matches!(after.status, Status::Ended(_)));
                    jobs[index].life = after;
                }
                Err(refused) => prop_assert_eq!(refused.job_state, before.state()),
            }
            // Exactly one state, whose name agrees with its data.
            for job in &jobs {
                let state = job.life.state();
                match &job.life.status {
                    Status::Queued(q) => {
                        prop_assert_eq!(state, JobState::Queued);
                        prop_assert!(q.reservation.as_ref().is_none_or(|r| !r.gpus.is_empty()));
                    }
                    Status::Running(_) => {
                        prop_assert_eq!(state, JobState::Running);
                        prop_assert!(job.life.attempt >= 1, "running without an attempt");
                    }
                    Status::Ended(e) => {
                        prop_assert!(state.is_terminal());
                        prop_assert_eq!(Some(e.outcome), baton_core::lifecycle::Outcome::of(state));
                    }
                }
            }
            // The GPUs held are exactly those of running and reserved jobs, none twice.
            let by_status = held_by_statuses(&jobs);
            let ledger: Vec<u32> = held.iter().copied().collect();
            prop_assert_eq!(by_status, ledger);
        }
    }
}
