//! The daemon's own life: killed with SIGKILL and restarted while jobs run, and started in the
//! background by `baton submit` when none is running.

mod common;

use std::process::Stdio;
use std::time::Instant;

use common::{
    Baton, DEADLINE, POLL, connections_to, processes_of, run_cmd, wait_contains, wait_for_file,
};

#[test]
fn jobs_survive_a_daemon_kill_and_restart() {
    let mut b = Baton::start(2);
    // Each job appends to its own counter file when its command runs.
    let ok = b.submit_sh(
        &["--gpus", "1", "--name", "ok"],
        &format!("echo run >> count.ok; {}; exit 0", wait_for_file("go.ok")),
    );
    let seven = b.submit_sh(
        &["--gpus", "1", "--name", "seven"],
        &format!(
            "echo run >> count.seven; {}; exit 7",
            wait_for_file("go.seven")
        ),
    );
    let queued = b.submit_sh(
        &["--gpus", "1", "--name", "queued"],
        "echo run >> count.queued",
    );
    let after = b.submit_sh(
        &["--gpus", "1", "--name", "after", "--after", &ok.to_string()],
        "echo run >> count.after",
    );
    b.wait_running(ok);
    b.wait_running(seven);
    b.wait_file("count.ok");
    b.wait_file("count.seven");
    assert_eq!(b.state(queued), "queued");
    assert_eq!(b.state(after), "queued");

    // A client waiting on the daemon when it dies waits on once it is back.
    let waiter = connected_waiter(&b, ok);
    let supervisors = supervisors_of(&b);
    assert_eq!(supervisors.len(), 1, "one supervisor runs the jobs");

    b.kill_daemon();
    // While no daemon is alive, job `seven` exits 7: its supervisor records it.
    b.touch("go.seven");
    wait_contains(
        &b.home
            .join("jobs")
            .join(seven.to_string())
            .join("supervisor"),
        r#""event":"exited""#,
    );
    b.serve();
    assert_eq!(
        supervisors_of(&b),
        supervisors,
        "the restarted daemon did not take up the supervisor that ran its jobs"
    );

    let out = b.wait(&[seven], "30s");
    assert_eq!(out.code, 1, "{out:?}");
    let job = b.job(seven);
    assert_eq!(job["state"], "failed", "{job:#}");
    assert_eq!(job["exit_code"], 7, "the true exit code was lost: {job:#}");
    // The job queued before the crash runs after it, on the GPU `seven` gave back.
    b.wait_ok(&[queued]);
    assert_eq!(b.state(ok), "running", "job `ok` should still be running");

    b.touch("go.ok");
    b.wait_ok(&[ok, after]);
    let job = b.job(ok);
    assert_eq!(job["exit_code"], 0, "{job:#}");
    assert_eq!(job["attempt"], 1, "{job:#}");
    let waited = waiter.wait_with_output().unwrap();
    assert_eq!(
        waited.status.code(),
        Some(0),
        "a `baton wait` across the restart: {}",
        String::from_utf8_lossy(&waited.stderr)
    );
    for name in ["ok", "seven", "queued", "after"] {
        assert_eq!(
            b.read(&format!("count.{name}")),
            "run\n",
            "job {name} did not run exactly once"
        );
    }
    assert!(
        !b.daemon_log().contains("panicked"),
        "the daemon panicked:\n{}",
        b.daemon_log()
    );
}

#[test]
fn running_jobs_outlive_a_graceful_daemon_stop() {
    let mut b = Baton::start(1);
    let id = b.submit_sh(
        &["--gpus", "1"],
        &format!("echo $$ > pid; {}; echo done > out", wait_for_file("go")),
    );
    b.wait_running(id);
    b.wait_file("pid");
    // A `wait` held open while the daemon stops is answered, and waits on after the restart.
    let waiter = connected_waiter(&b, id);
    let status = b.stop_daemon();
    assert!(status.success(), "baton serve exited {status} on SIGTERM");
    assert!(
        !b.home.join("baton.sock").exists(),
        "the daemon left its socket behind"
    );
    let pid: i32 = b.read("pid").trim().parse().unwrap();
    assert!(common::alive(pid), "the job died with its daemon");

    b.serve();
    assert_eq!(b.state(id), "running");
    b.touch("go");
    b.wait_ok(&[id]);
    assert_eq!(b.read("out"), "done\n");
    let waited = waiter.wait_with_output().unwrap();
    assert_eq!(
        waited.status.code(),
        Some(0),
        "a `baton wait` across the stop: {}",
        String::from_utf8_lossy(&waited.stderr)
    );
}

/// A `sweep wait` held open while the daemon stops waits on through the restart and returns the
/// comparison: a restart is not the caller's timeout (it used to exit 124 there, "not ended").
#[test]
fn a_sweep_wait_held_across_a_daemon_stop_waits_on_for_the_comparison() {
    let mut b = Baton::start(2);
    let out = b
        .run(&[
            "submit",
            "--array",
            "1-2",
            "--gpus",
            "1",
            "--",
            "sh",
            "-c",
            &format!("echo run.{{index}} >> ran; {}", wait_for_file("go")),
        ])
        .expect(0);
    let sweep = out.stdout.trim().to_string();
    b.poll_job(1, "running", |j| j["state"] == "running");
    b.poll_job(2, "running", |j| j["state"] == "running");
    let waiter = connected(&b, &["sweep", "wait", &sweep, "--timeout", "60s"]);
    let status = b.stop_daemon();
    assert!(status.success(), "baton serve exited {status} on SIGTERM");
    b.serve();
    b.touch("go");
    let waited = waiter.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&waited.stdout);
    assert_eq!(
        waited.status.code(),
        Some(0),
        "a `baton sweep wait` across the stop: {stdout}{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    assert!(stdout.contains("all 2 succeeded"), "{stdout}");
}

#[test]
fn submit_starts_a_daemon_when_none_runs() {
    let b = Baton::unstarted();
    assert!(!b.home.exists());
    let submit = |script: &str| {
        let mut cmd = b.cmd(["submit", "--gpus", "1", "--", "sh", "-c", script]);
        cmd.env("BATON_SIM_GPUS", "2");
        run_cmd(cmd).expect(0)
    };
    let out = submit("echo $CUDA_VISIBLE_DEVICES > out");
    assert!(
        out.stderr.contains("started a daemon"),
        "submit did not say it started a daemon: {out:?}"
    );
    let id: u64 = out.stdout.trim().parse().unwrap();
    b.wait_ok(&[id]);
    assert_eq!(b.read("out"), "0\n");

    // It is a `baton serve` for this BATON_HOME, with the simulated GPUs it was asked for.
    let daemons: Vec<i32> = processes_of(&b.home)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.split(|&b| b == 0).any(|arg| arg == b"serve"))
                .unwrap_or(false)
        })
        .collect();
    assert_eq!(daemons.len(), 1, "expected one daemon, found {daemons:?}");
    let gpus = b.run(&["gpus", "--json"]).expect(0).json();
    assert_eq!(gpus["gpus"].as_array().map(Vec::len), Some(2), "{gpus:#}");

    // The next submit finds it and starts no other.
    let out = submit("true");
    assert!(!out.stderr.contains("started a daemon"), "{out:?}");
    b.wait_ok(&[out.stdout.trim().parse().unwrap()]);
    // Dropping `b` kills the daemon it started (found through its BATON_HOME).
}

/// The supervisors serving the daemon of `home`: `baton supervisor SOCKET` processes.
fn supervisors_of(b: &Baton) -> Vec<i32> {
    processes_of(&b.home)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == b"supervisor"))
        })
        .collect()
}

/// The supervisor can die (OOM killer, a stray `kill -9`): the jobs it ran fail, saying so, with
/// nothing of them left running; the daemon starts a new supervisor, and later jobs run.
#[test]
fn a_killed_supervisor_fails_its_jobs_and_a_new_one_runs_the_next() {
    let b = Baton::start(2);
    let first = b.submit(&["--gpus", "1", "--", "true"]);
    b.wait_ok(&[first]);
    let running: Vec<u64> = (0..2)
        .map(|i| {
            b.submit_sh(
                &["--gpus", "1"],
                &format!(
                    "setsid sleep 1000 & echo $! > left.{i}; touch up.{i}; {}",
                    wait_for_file("never")
                ),
            )
        })
        .collect();
    b.wait_file("up.0");
    b.wait_file("up.1");
    let supervisors = supervisors_of(&b);
    assert_eq!(supervisors.len(), 1, "one supervisor serves the daemon");
    let pid = rustix::process::Pid::from_raw(supervisors[0]).expect("a positive pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill the supervisor");
    b.wait(&running, "30s");
    for id in &running {
        let job = b.job(*id);
        assert_eq!(job["state"], "failed", "{job:#}");
        assert!(
            job["reason"].as_str().unwrap().contains("supervisor died"),
            "{job:#}"
        );
    }
    for i in 0..2 {
        let left: i32 = b.read(&format!("left.{i}")).trim().parse().unwrap();
        assert!(
            !common::alive(left),
            "job {i}'s detached process outlived it"
        );
    }
    let ids: Vec<u64> = (0..3)
        .map(|_| b.submit(&["--gpus", "1", "--", "true"]))
        .collect();
    b.wait_ok(&ids);
    let now = supervisors_of(&b);
    assert_eq!(now.len(), 1, "one new supervisor: {now:?}");
    assert_ne!(now[0], supervisors[0]);
}

/// A daemon killed in the middle of launching a large batch: every job of the batch still runs,
/// exactly once, whether its supervisor had started before the crash or not.
#[test]
fn a_crash_during_a_batch_launch_neither_loses_nor_repeats_jobs() {
    let mut b = Baton::start(1);
    let gate = b.submit_sh(&[], &wait_for_file("go.gate"));
    let after = gate.to_string();
    let batch: Vec<u64> = (0..120)
        .map(|_| b.submit_sh(&["--after", &after], "echo ran >> ran.$BATON_JOB_ID"))
        .collect();
    // Releasing the gate starts all 120 in one pass; kill the daemon while it launches them.
    b.touch("go.gate");
    b.poll_job(batch[0], "the batch to start", |j| j["state"] != "queued");
    b.kill_daemon();
    b.serve();
    b.wait_ok(&batch);
    for id in batch {
        assert_eq!(
            b.read(&format!("ran.{id}")),
            "ran\n",
            "job {id} ran a wrong number of times"
        );
    }
}

/// A `baton wait ID` in the background, returned once its request has reached the daemon (a
/// `wait` that finds no daemon at all is exit 3, not a restart to wait through).
fn connected_waiter(b: &Baton, id: u64) -> std::process::Child {
    connected(b, &["wait", &id.to_string(), "--timeout", "60s"])
}

/// `baton ARGS` started, once it holds a connection to the daemon.
fn connected(b: &Baton, args: &[&str]) -> std::process::Child {
    let waiter = b
        .cmd(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let socket = b.home.join("baton.sock");
    let until = Instant::now() + DEADLINE;
    while connections_to(&socket) == 0 {
        assert!(Instant::now() < until, "`baton wait` never connected");
        std::thread::sleep(POLL);
    }
    waiter
}

/// A failed attempt waiting out its retry's backoff shows how it exited, and still does after a
/// restart: what the daemon shows and what it recorded are the same record (the store used to
/// keep no exit code for it while the daemon's memory did).
#[test]
fn a_retry_waiting_out_its_backoff_shows_its_exit_code_before_and_after_a_restart() {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        "[retries]\ndelay = \"1h\"\nmax_delay = \"1h\"\n",
    )
    .unwrap();
    b.serve_with(&["serve", "--sim-gpus", "1"]);
    let id = b.submit(&["--retries", "1", "--", "sh", "-c", "exit 3"]);
    let waiting = b.poll_job(id, "back in the queue for its retry", |j| {
        j["state"] == "queued" && j["attempt"] == 1
    });
    assert_eq!(waiting["exit_code"], 3, "{waiting}");
    b.stop_daemon();
    b.serve();
    let again = b.job(id);
    assert_eq!(
        (&again["state"], &again["attempt"], &again["exit_code"]),
        (
            &waiting["state"],
            &waiting["attempt"],
            &waiting["exit_code"]
        ),
        "{again}"
    );
    let events = b.run(&["events", &id.to_string()]).expect(0).stdout;
    assert!(events.contains("retry"), "{events}");
}
