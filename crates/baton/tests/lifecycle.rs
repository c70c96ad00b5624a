//! A job's life: time limits, cancelling a job that ignores SIGTERM, retries, and its logs.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Baton, DEADLINE, POLL, alive, millis, wait_for_file};

#[test]
fn time_limit_ends_the_job_as_timeout() {
    let b = Baton::start(1);
    let id = b.submit(&["--gpus", "1", "--time-limit", "1s", "--", "sleep", "30"]);
    let started = Instant::now();
    let out = b.wait(&[id], "20s");
    let took = started.elapsed();
    assert_eq!(out.code, 1, "a timed-out job is not a success: {out:?}");
    let job = b.job(id);
    assert_eq!(job["state"], "timeout", "{job:#}");
    let reason = job["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("time limit"), "{reason:?}");
    // sleep dies of the SIGTERM at the limit, well before the SIGKILL grace.
    assert_eq!(job["signal"], 15, "{job:#}");
    assert!(
        took < Duration::from_secs(6),
        "the 1 s limit took {took:?} to act"
    );
    let ran = millis(&job["ended_at"]) - millis(&job["started_at"]);
    assert!((900..5000).contains(&ran), "ran {ran} ms under a 1 s limit");
}

/// Reads the pids a job recorded, one per line, once there are `n` of them.
fn recorded_pids(b: &Baton, file: &str, n: usize) -> Vec<i32> {
    let until = Instant::now() + DEADLINE;
    loop {
        let pids: Vec<i32> = b
            .read(file)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < until, "the job recorded only {pids:?}");
        std::thread::sleep(POLL);
    }
}

#[test]
fn cancel_kills_the_whole_group_even_when_it_ignores_sigterm() {
    let b = Baton::start(1);
    // The shell and everything it starts ignore SIGTERM (an ignored signal stays ignored across
    // fork and exec): a background sleep, and a nested shell with its own background sleep.
    let script = "trap '' TERM; echo $$ >> pids; \
                  sleep 300 & echo $! >> pids; \
                  sh -c 'echo $$ >> pids; sleep 300 & echo $! >> pids; wait' & \
                  wait";
    let id = b.submit_sh(&["--gpus", "1"], script);
    b.wait_running(id);
    let pids = recorded_pids(&b, "pids", 4);
    for &pid in &pids {
        assert!(
            alive(pid),
            "job process {pid} is not running before the cancel"
        );
    }
    let asked = Instant::now();
    let out = b.run(&["cancel", &id.to_string()]).expect(0);
    assert!(out.stdout.contains("stopping"), "{out:?}");
    let out = b.wait(&[id], "15s");
    let took = asked.elapsed();
    assert_eq!(out.code, 1, "{out:?}");
    let job = b.job(id);
    assert_eq!(job["state"], "cancelled", "{job:#}");
    // SIGTERM was ignored, so only the SIGKILL after the 1 s grace ended it.
    assert_eq!(job["signal"], 9, "{job:#}");
    assert!(
        took >= Duration::from_millis(900),
        "ended {took:?} after the cancel: the grace period was not honoured"
    );
    assert!(
        took < Duration::from_secs(5),
        "ended {took:?} after the cancel (grace 1 s)"
    );
    // The SIGKILL went to the whole group; allow the kernel a moment to finish delivering it.
    let until = Instant::now() + Duration::from_secs(2);
    let mut survivors: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    while !survivors.is_empty() && Instant::now() < until {
        std::thread::sleep(POLL);
        survivors.retain(|&p| alive(p));
    }
    assert!(
        survivors.is_empty(),
        "processes of the cancelled job survive: {survivors:?}"
    );
    // Its GPU is free again.
    let next = b.submit(&["--gpus", "1", "--", "true"]);
    b.wait_ok(&[next]);
}

/// Programs are found and run as `execvp` would: through the job's PATH (its own `bin/` first
/// here), a script without `#!` by the shell, and a missing one as "command not found" (127).
#[test]
fn programs_are_found_in_the_jobs_path_and_scripts_without_a_shebang_run_with_sh() {
    use std::os::unix::fs::PermissionsExt;
    let b = Baton::start(1);
    std::fs::create_dir_all(b.path("bin")).unwrap();
    let script = b.path("bin/greet");
    std::fs::write(&script, "echo \"hello $1 from $0\" > greeted\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        b.path("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let out = b
        .cmd(["submit", "--gpus", "1", "--", "greet", "world"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    b.wait_ok(&[id]);
    assert_eq!(
        b.read("greeted"),
        format!("hello world from {}\n", script.display())
    );
    let missing = b.submit(&["--gpus", "1", "--", "no-such-program-here"]);
    assert_eq!(b.wait(&[missing], "10s").code, 1);
    let job = b.job(missing);
    assert_eq!(job["exit_code"], 127, "{job:#}");
}

/// A job starts with no signal blocked, whatever its supervisor does with signals: one blocked
/// SIGTERM would make every stop wait for the SIGKILL. The job is `grep` itself, not a shell,
/// since a shell clears its mask on start.
#[test]
fn a_job_starts_with_no_signals_blocked() {
    let b = Baton::start(1);
    let id = b.submit(&["--gpus", "1", "--", "grep", "SigBlk", "/proc/self/status"]);
    b.wait_ok(&[id]);
    let out = b.run(&["logs", &id.to_string()]).expect(0);
    assert_eq!(
        out.stdout.split_whitespace().nth(1),
        Some("0000000000000000"),
        "{out:?}"
    );
}

#[test]
fn cancel_of_a_queued_job_ends_it_at_once() {
    let b = Baton::start(1);
    let blocker = b.submit_sh(&["--gpus", "1"], &wait_for_file("go"));
    b.wait_running(blocker);
    let queued = b.submit_sh(&["--gpus", "1"], "touch ran");
    b.run(&["cancel", &queued.to_string()]).expect(0);
    assert_eq!(b.wait(&[queued], "5s").code, 1);
    assert_eq!(b.state(queued), "cancelled");
    b.touch("go");
    b.wait_ok(&[blocker]);
    assert!(!b.path("ran").exists(), "a cancelled queued job ran");
}

#[test]
fn retries_run_the_job_again_until_it_succeeds() {
    let b = Baton::start(1);
    // Fails on attempt 1, succeeds on attempt 2.
    let flaky = b.submit_sh(
        &["--gpus", "1", "--retries", "1"],
        "echo $BATON_ATTEMPT >> attempts.flaky; [ \"$BATON_ATTEMPT\" -ge 2 ]",
    );
    // Always fails: runs 1 + 2 times, then stays failed.
    let broken = b.submit_sh(
        &["--gpus", "1", "--retries", "2"],
        "echo $BATON_ATTEMPT >> attempts.broken; exit 5",
    );
    b.wait_ok(&[flaky]);
    let job = b.job(flaky);
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["attempt"], 2, "{job:#}");
    assert_eq!(job["exit_code"], 0, "{job:#}");
    assert_eq!(b.read("attempts.flaky"), "1\n2\n");

    assert_eq!(b.wait(&[broken], "30s").code, 1);
    let job = b.job(broken);
    assert_eq!(job["state"], "failed", "{job:#}");
    assert_eq!(job["attempt"], 3, "{job:#}");
    assert_eq!(job["exit_code"], 5, "{job:#}");
    assert_eq!(b.read("attempts.broken"), "1\n2\n3\n");
}

/// A job that fails at once re-runs only after a backoff that doubles up to its cap, and a
/// submission cannot ask for an endless number of retries.
#[test]
fn retries_back_off_and_are_capped() {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        "[retries]\nmax = 10\ndelay = \"400ms\"\nmax_delay = \"800ms\"\n",
    )
    .unwrap();
    b.serve_with(&["serve", "--sim-gpus", "1", "--grace", "1s"]);

    let out = b
        .run(&["submit", "--retries", "4294967295", "--", "false"])
        .expect(2);
    assert!(out.stderr.contains("at most 10"), "{}", out.stderr);
    let out = b
        .run(&["submit", "--retries", "11", "--", "false"])
        .expect(2);
    assert!(out.stderr.contains("at most 10"), "{}", out.stderr);

    let id = b.submit_sh(&["--retries", "3"], "date +%s%3N >> runs; exit 1");
    // Between two attempts it waits, and says why.
    let waiting = b.poll_job(id, "waiting to retry", |j| {
        j["state"] == "queued" && j["attempt"].as_u64() >= Some(1)
    });
    assert!(
        waiting["reason"].as_str().unwrap().contains("retr"),
        "{waiting:#}"
    );
    assert_eq!(b.wait(&[id], "30s").code, 1);
    assert_eq!(b.job(id)["attempt"], 4);
    let runs: Vec<i64> = b.read("runs").lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(runs.len(), 4, "{runs:?}");
    let gaps: Vec<i64> = runs.windows(2).map(|w| w[1] - w[0]).collect();
    for (gap, least) in gaps.iter().zip([400, 800, 800]) {
        assert!(
            *gap >= least,
            "attempts {gaps:?} ms apart; expected at least 400, 800, 800"
        );
    }
    let events = b.run(&["events", &id.to_string()]).expect(0).stdout;
    assert!(events.contains("retrying in 400ms"), "{events}");
    assert!(events.contains("retrying in 800ms"), "{events}");
}

#[test]
fn logs_tail_stderr_and_follow() {
    let b = Baton::start(1);
    let id = b.submit_sh(
        &[],
        "for i in 1 2 3 4 5; do echo line$i; done; echo oops >&2; echo boom >&2",
    );
    b.wait_ok(&[id]);
    let id_s = id.to_string();
    let all = b.run(&["logs", &id_s]).expect(0);
    assert_eq!(all.stdout, "line1\nline2\nline3\nline4\nline5\n");
    let tail = b.run(&["logs", &id_s, "--tail", "2"]).expect(0);
    assert_eq!(tail.stdout, "line4\nline5\n");
    let err = b.run(&["logs", &id_s, "--stderr"]).expect(0);
    assert_eq!(err.stdout, "oops\nboom\n");
    let err_tail = b.run(&["logs", &id_s, "--stderr", "--tail", "1"]).expect(0);
    assert_eq!(err_tail.stdout, "boom\n");

    // --follow: prints output as it comes and returns once the job has ended.
    let id = b.submit_sh(
        &[],
        &format!("echo first; {}; echo second", wait_for_file("go")),
    );
    let mut follow = b
        .cmd(["logs", &id.to_string(), "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                return;
            }
        }
    });
    let first = rx.recv_timeout(DEADLINE);
    if first.as_deref() != Ok("first") {
        let _ = follow.kill();
        panic!("logs --follow did not stream the first line: {first:?}");
    }
    assert!(
        follow.try_wait().unwrap().is_none(),
        "logs --follow returned while the job was still running"
    );
    b.touch("go");
    let second = rx.recv_timeout(DEADLINE);
    let end = rx.recv_timeout(DEADLINE);
    if second.as_deref() != Ok("second") || end != Err(mpsc::RecvTimeoutError::Disconnected) {
        let _ = follow.kill();
        panic!("logs --follow: then {second:?}, then {end:?}");
    }
    let status = follow.wait().unwrap();
    assert!(status.success(), "logs --follow exited {status}");
    assert_eq!(b.state(id), "succeeded");
}

/// A cancel that arrives while the job is still being launched (no supervisor record yet) is
/// not lost, and asking twice is harmless.
#[test]
fn cancel_right_after_submit_is_never_lost() {
    let b = Baton::start(4);
    let ids: Vec<u64> = (0..6)
        .map(|_| b.submit(&["--gpus", "1", "--", "sleep", "300"]))
        .collect();
    for id in &ids {
        b.run(&["cancel", &id.to_string()]).expect(0);
        b.run(&["cancel", &id.to_string()]).expect(0);
    }
    let out = b.wait(&ids, "20s");
    assert_eq!(out.code, 1, "{out:?}");
    for id in ids {
        assert_eq!(b.state(id), "cancelled", "job {id}");
    }
}
