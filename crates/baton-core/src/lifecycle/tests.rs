use super::decide::*;
use super::*;

fn facts(attempt: u32, retries: u32) -> JobFacts<'static> {
    JobFacts {
        cancel_requested_by: None,
        stop_reason: None,
        time_limit: Some(60_000),
        limit_from_reservation: None,
        attempt,
        retries,
    }
}

fn running(gpus: &[u32]) -> Life {
    Life {
        attempt: 1,
        status: Status::Running(Running {
            gpus: gpus.to_vec(),
            since: 10,
            on: Runner::Local,
            cancel_requested_by: None,
            reason: None,
            stop_reason: None,
        }),
    }
}

#[test]
fn a_start_counts_an_attempt_and_holds_its_gpus() {
    let (life, fx) = Life::submitted()
        .apply(&Transition::Start {
            gpus: vec![2, 3],
            at: 5,
            on: Runner::Local,
        })
        .unwrap();
    assert_eq!(life.attempt, 1);
    assert_eq!(life.state(), JobState::Running);
    assert_eq!(life.status.held(), &[2, 3]);
    assert_eq!((fx.hold, fx.free, fx.ended), (vec![2, 3], vec![], false));
}

#[test]
fn a_reserved_job_starts_on_what_it_already_holds() {
    let (reserved, fx) = Life::submitted()
        .apply(&Transition::Reserve(Reservation {
            gpus: vec![0, 1],
            lease_until: 99,
        }))
        .unwrap();
    assert_eq!(fx.hold, vec![0, 1]);
    let (life, fx) = reserved
        .apply(&Transition::Start {
            gpus: vec![0, 1],
            at: 5,
            on: Runner::Local,
        })
        .unwrap();
    assert_eq!(life.status.held(), &[0, 1]);
    assert!(fx.hold.is_empty() && fx.free.is_empty(), "{fx:?}");
}

#[test]
fn a_retry_keeps_how_the_attempt_ended_and_frees_the_gpus() {
    let life = running(&[4]);
    let ending = attempt_ending(
        facts(1, 2),
        Some(&AttemptExit {
            exit: Exit {
                code: Some(3),
                signal: None,
            },
            ended_at: 50,
            ..AttemptExit::default()
        }),
        60,
    );
    let t = after_attempt(facts(1, 2), ending, 1_000, 60);
    let Transition::Retry {
        exit, not_before, ..
    } = &t
    else {
        panic!("{t:?}")
    };
    assert_eq!((exit.code, *not_before), (Some(3), 1_060));
    let (life, fx) = life.apply(&t).unwrap();
    let Status::Queued(q) = &life.status else {
        panic!()
    };
    assert_eq!(q.previous.code, Some(3));
    assert_eq!(
        q.reason.as_deref(),
        Some("attempt 1 exit code 3; retrying in 1s (2 retries left)")
    );
    assert_eq!(fx.free, vec![4]);
    assert_eq!(
        life.attempt, 1,
        "a retry does not count an attempt until it starts"
    );
}

#[test]
fn a_job_asked_to_cancel_is_not_retried_even_if_it_failed_first() {
    let asked = JobFacts {
        cancel_requested_by: Some("alice"),
        ..facts(1, 3)
    };
    let ending = Ending::failed("exit code 1", 5);
    assert!(matches!(
        after_attempt(asked, ending, 1_000, 5),
        Transition::End(_)
    ));
}

#[test]
fn the_last_retry_is_the_end() {
    let ending = Ending::failed("exit code 1", 5);
    assert!(matches!(
        after_attempt(facts(3, 2), ending.clone(), 1_000, 5),
        Transition::End(_)
    ));
    let ok = Ending {
        outcome: Outcome::Succeeded,
        ..ending
    };
    assert!(matches!(
        after_attempt(facts(1, 2), ok, 1_000, 5),
        Transition::End(_)
    ));
}

#[test]
fn an_ended_job_never_changes_again() {
    let (ended, fx) = running(&[1])
        .apply(&Transition::End(Ending::failed("x", 9)))
        .unwrap();
    assert!(fx.ended && fx.free == vec![1]);
    let Status::Ended(e) = &ended.status else {
        panic!()
    };
    assert_eq!(
        e.ran,
        Some(Ran {
            gpus: vec![1],
            since: 10
        })
    );
    for t in [
        Transition::End(Ending::failed("again", 10)),
        Transition::Start {
            gpus: vec![1],
            at: 11,
            on: Runner::Local,
        },
        Transition::RequestCancel {
            by: "a".into(),
            reason: "r".into(),
        },
    ] {
        let err = ended.apply(&t).unwrap_err();
        assert_eq!(err.job_state, JobState::Failed);
    }
}

#[test]
fn a_withdrawn_start_gives_its_attempt_back() {
    let (life, fx) = running(&[0])
        .apply(&Transition::Withdraw {
            reason: "requeued: the daemon stopped before it could start".into(),
        })
        .unwrap();
    assert_eq!((life.attempt, life.state()), (0, JobState::Queued));
    assert_eq!(fx.free, vec![0]);
}

#[test]
fn a_cancel_of_a_local_queued_job_is_its_end_not_a_request() {
    let err = Life::submitted()
        .apply(&Transition::RequestCancel {
            by: "a".into(),
            reason: "cancelling".into(),
        })
        .unwrap_err();
    assert_eq!(err.job_state, JobState::Queued);
}

#[test]
fn slurm_submission_then_tracking() {
    let (life, _) = Life::submitted()
        .apply(&Transition::SlurmSubmitting { at: 3 })
        .unwrap();
    let (life, _) = life
        .apply(&Transition::SlurmSubmitted {
            id: 77,
            reason: Some("Slurm job 77: submitted".into()),
        })
        .unwrap();
    let (life, _) = life
        .apply(&Transition::SlurmSeen {
            state: "PENDING".into(),
            reason: Some("Slurm job 77: PENDING (Resources)".into()),
            nodes: None,
        })
        .unwrap();
    let Status::Queued(q) = &life.status else {
        panic!()
    };
    assert_eq!(
        q.reason.as_deref(),
        Some("Slurm job 77: PENDING (Resources)")
    );
    let Some(SlurmQueue::Submitted { job, since }) = &q.slurm else {
        panic!()
    };
    assert_eq!(
        (job.id, job.state.as_deref(), *since),
        (77, Some("PENDING"), Some(3))
    );
    // A job not being submitted has no submission to forget.
    assert!(
        Life::submitted()
            .apply(&Transition::SlurmNotSubmitted { reason: None })
            .is_err()
    );
}

#[test]
fn exits_end_attempts_as_the_supervisor_says() {
    let exit = |code, signal, f: fn(&mut AttemptExit)| {
        let mut e = AttemptExit {
            exit: Exit { code, signal },
            ended_at: 7,
            ..AttemptExit::default()
        };
        f(&mut e);
        e
    };
    let none: fn(&mut AttemptExit) = |_| {};
    let e = attempt_ending(facts(1, 0), Some(&exit(Some(0), None, none)), 9);
    assert_eq!((e.outcome, e.reason, e.at), (Outcome::Succeeded, None, 7));
    let e = attempt_ending(facts(1, 0), Some(&exit(None, Some(9), none)), 9);
    assert_eq!(e.reason.as_deref(), Some("killed by signal 9 (SIGKILL)"));
    let over: fn(&mut AttemptExit) = |e| e.memory_exceeded = Some(8 << 30);
    let e = attempt_ending(facts(1, 0), Some(&exit(None, Some(9), over)), 9);
    assert_eq!(
        (e.outcome, e.reason.as_deref()),
        (
            Outcome::Failed,
            Some("exceeded its 8 GiB memory request (killed)")
        )
    );
    let e = attempt_ending(
        facts(1, 0),
        Some(&exit(None, Some(15), |e| e.timed_out = true)),
        9,
    );
    assert_eq!(
        (e.outcome, e.reason.as_deref()),
        (Outcome::Timeout, Some("time limit of 1m00s reached"))
    );
    // The window's end came first: the reason says so.
    let e = attempt_ending(
        JobFacts {
            limit_from_reservation: Some("deadline"),
            ..facts(1, 0)
        },
        Some(&exit(None, Some(15), |e| e.timed_out = true)),
        9,
    );
    assert_eq!(
        (e.outcome, e.reason.as_deref()),
        (
            Outcome::Timeout,
            Some("its reservation deadline ended: a job in a reservation ends with its window")
        )
    );
    let e = attempt_ending(
        facts(1, 0),
        Some(&exit(Some(127), None, |e| {
            e.error = Some("command not found: foo".into())
        })),
        9,
    );
    assert_eq!(
        e.reason.as_deref(),
        Some("could not start: command not found: foo")
    );
    let asked = JobFacts {
        cancel_requested_by: Some("alice"),
        ..facts(1, 0)
    };
    let e = attempt_ending(
        asked,
        Some(&exit(None, Some(15), |e| e.cancelled = true)),
        9,
    );
    assert_eq!(
        (e.outcome, e.reason.as_deref()),
        (Outcome::Cancelled, Some("cancelled by alice"))
    );
    // A cancel asked but not what ended it (it exited first): the exit decides.
    let e = attempt_ending(asked, Some(&exit(Some(1), None, none)), 9);
    assert_eq!(e.outcome, Outcome::Failed);
    let e = attempt_ending(facts(1, 0), None, 9);
    assert_eq!(
        (e.outcome, e.at),
        (Outcome::Failed, 9),
        "a supervisor gone without a record"
    );
    assert_eq!(attempt_ending(asked, None, 9).outcome, Outcome::Cancelled);
}

#[test]
fn slurm_states_map_to_outcomes_and_reasons() {
    let info = |state: &str, code: Option<i32>, signal: Option<i32>| SlurmEnd {
        state: state.into(),
        exit: Exit { code, signal },
        end: Some(5_000),
        nodes: "gpu07".into(),
        ..SlurmEnd::default()
    };
    let job = facts(1, 0);
    let e = slurm_ending(job, &info("COMPLETED", Some(0), None), 9);
    assert_eq!(
        (e.outcome, e.reason, e.at),
        (Outcome::Succeeded, None, 5_000)
    );
    let e = slurm_ending(job, &info("FAILED", Some(3), None), 9);
    assert_eq!(
        (e.outcome, e.reason.as_deref()),
        (Outcome::Failed, Some("exit code 3"))
    );
    let e = slurm_ending(job, &info("FAILED", None, Some(9)), 9);
    assert_eq!(e.reason.as_deref(), Some("killed by signal 9 (SIGKILL)"));
    assert_eq!(
        slurm_ending(job, &info("TIMEOUT", None, Some(15)), 9).outcome,
        Outcome::Timeout
    );
    let e = slurm_ending(job, &info("OUT_OF_MEMORY", None, Some(9)), 9);
    assert!(e.reason.unwrap().contains("OUT_OF_MEMORY"));
    let e = slurm_ending(job, &info("NODE_FAIL", None, None), 9);
    assert!(e.reason.unwrap().contains("gpu07"));
    let e = slurm_ending(job, &info("CANCELLED", None, Some(15)), 9);
    assert_eq!(e.outcome, Outcome::Cancelled);
    let asked = JobFacts {
        cancel_requested_by: Some("alice"),
        ..job
    };
    let e = slurm_ending(asked, &info("CANCELLED", None, Some(15)), 9);
    assert_eq!(e.reason.as_deref(), Some("cancelled by alice"));
    let mut dep = info("CANCELLED", None, None);
    dep.reason = "DependencyNeverSatisfied".into();
    assert_eq!(slurm_ending(job, &dep, 9).outcome, Outcome::Failed);
}

#[test]
fn workflows_end_as_their_tasks_did() {
    use JobState::*;
    assert_eq!(
        workflow_outcome(&[Succeeded, Succeeded]),
        WorkflowState::Succeeded
    );
    assert_eq!(
        workflow_outcome(&[Succeeded, Cancelled]),
        WorkflowState::Cancelled
    );
    assert_eq!(
        workflow_outcome(&[Cancelled, Failed]),
        WorkflowState::Failed
    );
    assert_eq!(
        workflow_outcome(&[Cancelled, Timeout]),
        WorkflowState::Failed
    );
    for s in WorkflowState::ALL {
        assert_eq!(WorkflowState::parse(s.as_str()), Some(s));
    }
}

#[test]
fn a_dependency_fails_a_job_only_when_it_can_never_be_met() {
    use crate::model::{DepKind, Dependency, JobId};
    let after = |kind| Dependency {
        job: JobId(3),
        kind,
    };
    let ok = after(DepKind::Success);
    let any = after(DepKind::Any);
    assert_eq!(
        dependency_failure(&ok, None).as_deref(),
        Some("dependency failed: job 3 does not exist")
    );
    assert_eq!(
        dependency_failure(&ok, Some(JobState::Failed)).as_deref(),
        Some("dependency failed: job 3 ended failed")
    );
    assert_eq!(dependency_failure(&any, Some(JobState::Failed)), None);
    assert_eq!(dependency_failure(&ok, Some(JobState::Succeeded)), None);
    assert_eq!(
        dependency_failure(&ok, Some(JobState::Running)),
        None,
        "it waits"
    );
    assert!(dependency_failure(&any, None).is_some());
}

#[test]
fn a_held_job_does_not_start_until_released() {
    let by = || "alice".to_string();
    let (held, fx) = Life::submitted()
        .apply(&Transition::Hold { by: by() })
        .unwrap();
    assert_eq!(fx, Effects::default());
    let Status::Queued(q) = &held.status else {
        panic!("{held:?}")
    };
    assert_eq!(q.held_by.as_deref(), Some("alice"));
    assert_eq!(q.reason.as_deref(), Some(held_reason("alice").as_str()));
    let start = Transition::Start {
        gpus: vec![0],
        at: 5,
        on: Runner::Local,
    };
    assert_eq!(
        held.apply(&start).unwrap_err().what,
        "start while it is held"
    );
    assert!(held.apply(&Transition::Hold { by: by() }).is_err(), "twice");
    let (free, _) = held.apply(&Transition::Unhold { by: by() }).unwrap();
    assert_eq!(free, Life::submitted());
    assert!(free.apply(&Transition::Unhold { by: by() }).is_err());
    assert!(free.apply(&start).is_ok());
    // Not a job its atomic workflow reserved GPUs for, nor one in Slurm's queue.
    let (reserved, _) = Life::submitted()
        .apply(&Transition::Reserve(Reservation {
            gpus: vec![1],
            lease_until: 9,
        }))
        .unwrap();
    assert!(reserved.apply(&Transition::Hold { by: by() }).is_err());
    let (in_slurm, _) = Life::submitted()
        .apply(&Transition::SlurmSubmitting { at: 1 })
        .unwrap();
    assert!(in_slurm.apply(&Transition::Hold { by: by() }).is_err());
    // A running job cannot be held.
    assert!(running(&[0]).apply(&Transition::Hold { by: by() }).is_err());
}

#[test]
fn a_job_that_did_not_succeed_is_requeued_as_its_next_attempt() {
    let requeue = Transition::Requeue { by: "alice".into() };
    for ending in [
        Ending::failed("exit code 1", 20),
        Ending::cancelled("cancelled by alice", 20),
        Ending {
            outcome: Outcome::Timeout,
            exit: Exit {
                code: None,
                signal: Some(15),
            },
            reason: Some("time limit of 1m reached".into()),
            at: 20,
        },
    ] {
        let (ended, _) = running(&[1])
            .apply(&Transition::End(ending.clone()))
            .unwrap();
        let (life, fx) = ended.apply(&requeue).unwrap();
        // The same attempt count: the next start is attempt 2.
        assert_eq!(life.attempt, 1);
        let Status::Queued(q) = &life.status else {
            panic!("not queued: {life:?}");
        };
        assert_eq!(q.reason.as_deref(), Some("requeued by alice"));
        assert_eq!(q.previous, ending.exit, "the last exit is kept");
        assert!(q.reservation.is_none() && q.cancel_requested_by.is_none());
        assert_eq!(fx, Effects::default(), "a requeue holds and frees nothing");
        let (next, _) = life
            .apply(&Transition::Start {
                gpus: vec![0],
                at: 30,
                on: Runner::Local,
            })
            .unwrap();
        assert_eq!(next.attempt, 2);
        assert_eq!(
            Life::event_of(&requeue),
            Some(("requeued", "by alice".to_string()))
        );
    }
}

#[test]
fn only_an_ended_job_that_did_not_succeed_can_be_requeued() {
    let requeue = Transition::Requeue { by: "bob".into() };
    let (succeeded, _) = running(&[0])
        .apply(&Transition::End(Ending::succeeded(20)))
        .unwrap();
    let refused = succeeded.apply(&requeue).unwrap_err();
    assert_eq!(refused.to_string(), "a succeeded job cannot be requeued");
    assert_eq!(
        running(&[0]).apply(&requeue).unwrap_err().job_state,
        JobState::Running
    );
    assert_eq!(
        Life::submitted().apply(&requeue).unwrap_err().job_state,
        JobState::Queued
    );
}

#[test]
fn a_stop_by_baton_ends_the_job_as_failed_with_its_reason_and_no_retry() {
    let (life, _) = running(&[0])
        .apply(&Transition::RequestStop {
            reason: "stopped by baton: its loss became NaN (--stop-on nan)".into(),
        })
        .unwrap();
    let Status::Running(r) = &life.status else {
        panic!("still running until it exits: {life:?}");
    };
    assert_eq!(r.cancel_requested_by.as_deref(), Some("baton"));
    assert!(
        life.apply(&Transition::RequestStop {
            reason: "again".into()
        })
        .is_err(),
        "stopping twice is refused"
    );
    let facts = JobFacts {
        cancel_requested_by: Some("baton"),
        stop_reason: r.stop_reason.as_deref(),
        ..facts(1, 3)
    };
    let exit = AttemptExit {
        exit: Exit {
            code: None,
            signal: Some(15),
        },
        cancelled: true,
        ..AttemptExit::default()
    };
    let ending = attempt_ending(facts, Some(&exit), 100);
    assert_eq!(ending.outcome, Outcome::Failed);
    assert_eq!(
        ending.reason.as_deref(),
        Some("stopped by baton: its loss became NaN (--stop-on nan)")
    );
    assert!(
        matches!(after_attempt(facts, ending, 1000, 100), Transition::End(_)),
        "a stopped job is not retried"
    );
    // Its supervisor killed without a record: still failed for that reason.
    let ending = attempt_ending(facts, None, 100);
    assert_eq!(ending.outcome, Outcome::Failed);
}
