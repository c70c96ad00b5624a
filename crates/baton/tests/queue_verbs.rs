//! The queue's verbs a Slurm or pueue user reaches for: hold and release (and `submit --hold`),
//! `update` of a queued job, `--after-failed`, `--singleton`, `--begin`, `--env` and `--stdin`.

mod common;

use common::{Baton, wait_for_file};
use serde_json::Value;

fn events(b: &Baton, id: u64) -> String {
    b.run(&["events", &id.to_string()]).expect(0).stdout
}

#[test]
fn a_held_job_waits_until_released_and_says_so() {
    let b = Baton::start(1);
    let out = b
        .run(&["submit", "--hold", "--name", "later", "--", "true"])
        .expect(0);
    let held: u64 = out.stdout.trim().parse().unwrap();
    // Never "it starts now" for a job that will not.
    assert!(
        out.stderr.contains(&format!(
            "it is held: it starts only after `baton release {held}`"
        )),
        "{out:?}"
    );
    let job = b.job(held);
    assert_eq!(job["state"], "queued", "{job:#}");
    assert!(job["held_by"].is_string(), "{job:#}");
    let reason = job["reason"].as_str().unwrap().to_string();
    assert!(reason.starts_with("held by "), "{reason}");
    assert!(reason.contains("baton release"), "{reason}");
    // A job after it is not held up by anything else: it runs while the held one waits.
    let other = b.submit(&["--", "true"]);
    b.wait_ok(&[other]);
    assert_eq!(b.state(held), "queued");

    let out = b.run(&["release", &held.to_string()]).expect(0);
    assert!(out.stdout.contains("released"), "{out:?}");
    b.wait_ok(&[held]);
    let ev = events(&b, held);
    assert!(ev.contains("held") && ev.contains("hold-released"), "{ev}");

    // `baton hold` on a queued job; twice is refused; a running or ended job cannot be held.
    let gate = b.submit_sh(&[], &wait_for_file("go"));
    let queued = b.submit(&["--after", &gate.to_string(), "--", "true"]);
    b.run(&["hold", &queued.to_string()]).expect(0);
    let out = b.run(&["hold", &queued.to_string()]).expect(2);
    assert!(out.stderr.contains("already held"), "{out:?}");
    b.wait_running(gate);
    let out = b.run(&["hold", &gate.to_string()]).expect(2);
    assert!(
        out.stderr.contains("only a queued job can be held"),
        "{out:?}"
    );
    let out = b.run(&["release", &other.to_string()]).expect(2);
    assert!(out.stderr.contains("has ended"), "{out:?}");
    let out = b.run(&["release", "999"]).expect(2);
    assert!(out.stderr.contains("does not exist"), "{out:?}");
    // All or nothing: a bad id among good ones releases none.
    let out = b
        .run(&["release", &queued.to_string(), &gate.to_string()])
        .expect(2);
    assert!(out.stderr.contains("running"), "{out:?}");
    assert!(b.job(queued)["held_by"].is_string());
    // The dependency ends; the held job still waits, and cancel still works on it.
    b.touch("go");
    b.wait_ok(&[gate]);
    assert_eq!(b.state(queued), "queued");
    b.run(&["cancel", &queued.to_string()]).expect(0);
    assert_eq!(b.state(queued), "cancelled");
}

#[test]
fn a_held_job_stays_held_across_a_daemon_restart() {
    let mut b = Baton::start(1);
    let held = b.submit(&["--hold", "--", "true"]);
    b.kill_daemon();
    b.serve();
    let job = b.job(held);
    assert_eq!(job["state"], "queued", "{job:#}");
    assert!(job["held_by"].is_string(), "{job:#}");
    b.run(&["release", &held.to_string()]).expect(0);
    b.wait_ok(&[held]);
}

#[test]
fn update_changes_a_queued_job_and_refuses_a_running_one() {
    let b = Baton::start(2);
    let gate = b.submit_sh(&[], &wait_for_file("go"));
    let id = b.submit_sh(
        &["--after", &gate.to_string(), "--name", "before"],
        "echo \"gpus=$CUDA_VISIBLE_DEVICES cpus=$BATON_CPUS\" > seen",
    );
    let sid = id.to_string();
    b.run(&[
        "update",
        &sid,
        "--name",
        "after",
        "--priority",
        "5",
        "--time-limit",
        "10m",
        "--gpus",
        "2",
        "--cpus",
        "3",
    ])
    .expect(0);
    let job = b.job(id);
    assert_eq!(job["name"], "after");
    assert_eq!(job["priority"], 5);
    assert_eq!(job["time_limit_ms"], 600_000);
    assert_eq!(
        (job["gpus_requested"].clone(), job["cpus"].clone()),
        (2.into(), 3.into())
    );
    let ev = events(&b, id);
    for kind in [
        "updated-name",
        "updated-priority",
        "updated-time-limit",
        "updated-resources",
    ] {
        assert!(ev.contains(kind), "{kind} missing from:\n{ev}");
    }
    // What no machine here can meet is refused like a submission, and changes nothing.
    let out = b.run(&["update", &sid, "--gpus", "3"]).expect(2);
    assert!(
        out.stderr.contains("asked for 3 GPUs; this machine has 2"),
        "{out:?}"
    );
    let out = b.run(&["update", &sid, "--cpus", "0"]).expect(2);
    assert!(out.stderr.contains("--cpus must be at least 1"), "{out:?}");
    let out = b.run(&["update", &sid]).expect(2);
    assert!(out.stderr.contains("nothing to change"), "{out:?}");
    assert_eq!(b.job(id)["gpus_requested"], 2);

    b.touch("go");
    b.wait_ok(&[gate, id]);
    assert_eq!(b.read("seen").trim(), "gpus=0,1 cpus=3");

    // A running job keeps what it started with, but may be renamed.
    let running = b.submit_sh(&[], &wait_for_file("stop"));
    b.wait_running(running);
    let rid = running.to_string();
    let out = b.run(&["update", &rid, "--gpus", "1"]).expect(2);
    assert!(out.stderr.contains("is running"), "{out:?}");
    b.run(&["update", &rid, "--name", "renamed"]).expect(0);
    assert_eq!(b.job(running)["name"], "renamed");
    b.touch("stop");
    b.wait_ok(&[running]);
    let out = b.run(&["update", &rid, "--priority", "1"]).expect(2);
    assert!(out.stderr.contains("has ended"), "{out:?}");
}

#[test]
fn after_failed_runs_only_when_its_dependency_does_not_succeed() {
    let b = Baton::start(1);
    let bad = b.submit(&["--", "false"]);
    let cleanup = b.submit_sh(
        &["--after-failed", &bad.to_string()],
        "echo cleaned > cleanup",
    );
    b.wait_ok(&[cleanup]);
    assert_eq!(b.read("cleanup").trim(), "cleaned");
    assert_eq!(b.job(cleanup)["after_failed"], Value::from(vec![bad]));

    let good = b.submit(&["--", "true"]);
    let fallback = b.submit_sh(
        &["--after-failed", &good.to_string()],
        "echo ran > fallback",
    );
    let out = b.wait(&[fallback], "30s");
    assert_eq!(out.code, 1, "{out:?}");
    let job = b.job(fallback);
    assert_eq!(job["state"], "failed", "{job:#}");
    let reason = job["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("job {good} succeeded")),
        "{reason}"
    );
    assert!(!b.path("fallback").exists(), "it must not have run");
}

#[test]
fn singleton_jobs_of_one_name_run_one_at_a_time() {
    let b = Baton::start(4);
    let script = "echo start >> log; sleep 0.3; echo end >> log";
    let ids: Vec<u64> = (0..3)
        .map(|_| b.submit_sh(&["--singleton", "--name", "db-migrate"], script))
        .collect();
    // Another name is not held up by them.
    let other = b.submit_sh(&["--singleton", "--name", "other"], "true");
    b.wait_ok(&[other]);
    b.wait_ok(&ids);
    let log = b.read("log");
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["start", "end", "start", "end", "start", "end"],
        "they overlapped:\n{log}"
    );
    assert_eq!(
        b.job(ids[2])["after_any"],
        Value::from(vec![ids[0], ids[1]])
    );
}

#[test]
fn begin_holds_a_job_until_its_time() {
    let b = Baton::start(1);
    let id = b.submit(&["--begin", "now+2s", "--", "true"]);
    let reason = b.wait_reason(id);
    assert!(reason.starts_with("begin: it may start in"), "{reason}");
    let job = b.job(id);
    assert!(job["begin_at"].is_string(), "{job:#}");
    b.wait_ok(&[id]);
    let job = b.job(id);
    let started = common::millis(&job["started_at"]);
    let submitted = common::millis(&job["submitted_at"]);
    assert!(
        started - submitted >= 1_900,
        "started {}ms after submit",
        started - submitted
    );
    for bad in ["tomorrow", "25:00", "now+soon"] {
        let out = b.run(&["submit", "--begin", bad, "--", "true"]).expect(2);
        assert!(out.stderr.contains("now+DURATION"), "{bad}: {out:?}");
    }
    // A clock time: queued now, for later (today or tomorrow), with a begin time in the future.
    let out = b
        .run(&["submit", "--begin", "23:59:59", "--", "true"])
        .expect(0);
    let later: u64 = out.stdout.trim().parse().unwrap();
    assert!(out.stderr.contains("it starts no earlier than"), "{out:?}");
    let reason = b.wait_reason(later);
    assert!(reason.starts_with("begin:"), "{reason}");
    b.run(&["cancel", &later.to_string()]).expect(0);
}

#[test]
fn env_and_stdin_reach_the_job() {
    let b = Baton::start(1);
    std::fs::write(b.path("input.txt"), "line one\nline two\n").unwrap();
    let id = b.submit_sh(
        &[
            "--env",
            "LR=3e-4",
            "--env",
            "EMPTY=",
            "--stdin",
            "input.txt",
        ],
        "echo \"lr=$LR empty=[$EMPTY]\" > env.out; wc -l > lines.out",
    );
    b.wait_ok(&[id]);
    assert_eq!(b.read("env.out").trim(), "lr=3e-4 empty=[]");
    assert_eq!(b.read("lines.out").trim(), "2");
    assert_eq!(
        b.job(id)["stdin"],
        b.path("input.txt")
            .canonicalize()
            .unwrap()
            .display()
            .to_string()
    );
    // Without --stdin the job reads /dev/null, and a pipe into `baton submit` is said to be
    // ignored rather than silently lost.
    let mut cmd = b.cmd(["submit", "--", "sh", "-c", "wc -c > piped.out"]);
    cmd.stdin(std::process::Stdio::piped());
    cmd.stdout(std::process::Stdio::piped());
    cmd.stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"data for nobody\n")
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the job's stdin is /dev/null"), "{stderr}");
    assert!(stderr.contains("--stdin FILE"), "{stderr}");
    let piped: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    b.wait_ok(&[piped]);
    assert_eq!(b.read("piped.out").trim(), "0");
    // A file that is not there, or not a file, is refused before anything is queued.
    let out = b
        .run(&["submit", "--stdin", "missing.txt", "--", "true"])
        .expect(2);
    assert!(out.stderr.contains("--stdin"), "{out:?}");
    let out = b.run(&["submit", "--stdin", ".", "--", "true"]).expect(2);
    assert!(out.stderr.contains("not a regular file"), "{out:?}");
    let out = b
        .run(&["submit", "--env", "NOEQUALS", "--", "true"])
        .expect(2);
    assert!(out.stderr.contains("KEY=VALUE"), "{out:?}");
}
