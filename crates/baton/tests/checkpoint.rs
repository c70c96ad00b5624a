//! `submit --signal SIG[@SECS]` (issue 19): a job's checkpoint signal comes SECS before its
//! time limit, to every process of the job, as Slurm's `--signal` sends it. A job that traps it
//! saves a checkpoint and exits in time; one that ignores it is still stopped at its limit.
//! What cannot work is refused at submission.

mod common;

use common::Baton;

fn ran_ms(job: &serde_json::Value) -> i64 {
    common::millis(&job["ended_at"]) - common::millis(&job["started_at"])
}

#[test]
fn a_job_gets_its_checkpoint_signal_before_its_time_limit() {
    let b = Baton::start(1);
    // 18 s before a 20 s limit: at about 2 s.
    let saver = b.submit_sh(
        &["--time-limit", "20s", "--signal", "USR1@18"],
        "trap 'echo saved > ckpt; echo checkpointed; exit 0' USR1; sleep 60 & wait",
    );
    assert_eq!(b.job(saver)["checkpoint_signal"], "SIGUSR1@18");
    b.wait_ok(&[saver]);
    let job = b.job(saver);
    assert_eq!(b.read("ckpt").trim(), "saved");
    let ran = ran_ms(&job);
    assert!((1_500..15_000).contains(&ran), "ran {ran} ms: {job}");
    let out = b.run(&["logs", &saver.to_string()]).expect(0).stdout;
    assert!(out.contains("checkpointed"), "{out}");
    // Its report says the signal came, and when.
    let report = b.run(&["report", &saver.to_string()]).expect(0).stdout;
    assert!(
        report.contains("its checkpoint signal SIGUSR1 came 18 s before its time limit"),
        "{report}"
    );

    // One that ignores it runs on to its limit, and is stopped there.
    let stubborn = b.submit_sh(
        &["--time-limit", "3s", "--signal", "USR2@2"],
        "trap '' USR2; sleep 60",
    );
    b.wait(&[stubborn], "60s");
    let job = b.job(stubborn);
    assert_eq!(job["state"], "timeout", "{job}");
    assert!(ran_ms(&job) >= 2_500, "{job}");
}

#[test]
fn a_checkpoint_signal_that_cannot_come_is_refused() {
    let b = Baton::start(1);
    for (args, why) in [
        (
            &["--signal", "USR1"][..],
            "this job has none; give --time-limit too",
        ),
        (
            &["--time-limit", "30s", "--signal", "USR1@60"][..],
            "give a shorter lead",
        ),
        (
            &["--time-limit", "5m", "--signal", "KILL@5"][..],
            "cannot be caught",
        ),
        (
            &["--time-limit", "5m", "--signal", "USR1@soon"][..],
            "whole seconds",
        ),
        (
            &["--time-limit", "5m", "--signal", "NOPE"][..],
            "unknown signal",
        ),
    ] {
        let mut full = vec!["submit"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--", "true"]);
        let out = b.run(&full).expect(2);
        assert!(out.stderr.contains(why), "{args:?}: {out:?}");
    }
}
