//! The GPU monitor and the waste rules with a real daemon, simulated GPUs and short thresholds.
//! GPU processes are real processes: the simulated backend puts a live pid on GPU N when
//! `$BATON_HOME/sim/gpuN/PID` holds `<bytes> <util%>`. Each test reads the audit trail
//! (`baton audit --json`) and checks what happened to the processes themselves.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Baton, POLL};
use serde_json::Value;

/// Thresholds short enough for a test: 1 s samples, act within seconds.
fn config(mode: &str) -> String {
    format!(
        "[waste]\nmode = \"{mode}\"\nsample_interval = \"1s\"\ngrace = \"1s\"\n\n\
         [waste.zombie]\nmin_mem = \"1GiB\"\nafter = \"2s\"\n\n\
         [waste.idle_job]\nmax_util = 5\nwarn_after = \"2s\"\nact_after = \"5s\"\n\n\
         [waste.held_after_exit]\nmin_mem = \"256MiB\"\nafter = \"2s\"\n"
    )
}

fn start(gpus: u32, mode: &str) -> Baton {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(b.home.join("config.toml"), config(mode)).unwrap();
    let gpus = gpus.to_string();
    b.serve_with(&["serve", "--sim-gpus", &gpus, "--grace", "1s"]);
    b
}

/// Puts `pid` on simulated GPU `gpu` holding `bytes` at `util` percent.
fn on_gpu(home: &Path, gpu: u32, pid: u32, bytes: u64, util: u32) {
    let dir = home.join("sim").join(format!("gpu{gpu}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(pid.to_string()), format!("{bytes} {util}\n")).unwrap();
}

fn audit(b: &Baton) -> Vec<Value> {
    b.run(&["audit", "--json"])
        .expect(0)
        .json()
        .as_array()
        .unwrap()
        .clone()
}

/// Polls the audit log until `pred` holds for it.
fn poll_audit(b: &Baton, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let entries = audit(b);
        if pred(&entries) {
            return entries;
        }
        assert!(
            Instant::now() < until,
            "{what}: audit {entries:#?}\nlog:\n{}",
            b.daemon_log()
        );
        std::thread::sleep(POLL * 8);
    }
}

fn actions(entries: &[Value], pred: impl Fn(&Value) -> bool) -> Vec<String> {
    entries
        .iter()
        .filter(|e| pred(e))
        .map(|e| e["action"].as_str().unwrap().to_string())
        .collect()
}

/// A process of no job: `sleep`, started by the test (not by baton).
struct Stranger(Child);

impl Stranger {
    fn start() -> Stranger {
        Stranger::claiming(None)
    }

    /// One whose environment claims it belongs to baton job `job` (anyone can set that).
    fn claiming(job: Option<&str>) -> Stranger {
        let mut cmd = Command::new("sleep");
        cmd.arg("120").stdin(Stdio::null());
        match job {
            Some(id) => cmd.env("BATON_JOB_ID", id),
            None => cmd.env_remove("BATON_JOB_ID"),
        };
        Stranger(cmd.spawn().unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Reaps it if it died (a zombie still "exists" in /proc otherwise).
    fn dead(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_stranger_holding_2_gib_is_killed_in_enforce_mode() {
    let b = start(2, "enforce");
    // It claims to be job 999, which does not exist: a claim is not enough to be spared.
    let mut stranger = Stranger::claiming(Some("999"));
    on_gpu(&b.home, 1, stranger.pid(), 2 << 30, 0);
    let pid = stranger.pid();
    let entries = poll_audit(&b, "the stranger is signalled", |e| {
        e.iter()
            .any(|e| e["action"] == "sigterm" && e["pid"] == pid && e["outcome"] != "pending")
    });
    let ours = |e: &Value| e["pid"] == pid && e["rule"] == "zombie";
    assert_eq!(
        actions(&entries, ours),
        ["notify", "sigterm"],
        "{entries:#?}"
    );
    let term = entries.iter().find(|e| e["action"] == "sigterm").unwrap();
    assert_eq!(term["job_id"], Value::Null, "a stranger has no job");
    assert_eq!(term["gpu"], 1);
    assert_eq!(term["dry_run"], false);
    assert!(
        term["outcome"].as_str().unwrap().contains("SIGTERM sent"),
        "{term:#}"
    );
    assert!(!term["evidence"]["samples"].as_array().unwrap().is_empty());
    let until = Instant::now() + Duration::from_secs(10);
    while !stranger.dead() {
        assert!(Instant::now() < until, "the stranger survived SIGTERM");
        std::thread::sleep(POLL);
    }
    // The text view says the same.
    let text = b.run(&["audit"]).expect(0).stdout;
    assert!(
        text.contains("zombie") && text.contains("sigterm"),
        "{text}"
    );
}

#[test]
fn a_stranger_is_only_logged_in_dry_run() {
    let b = start(1, "dry-run");
    let mut stranger = Stranger::start();
    let pid = stranger.pid();
    on_gpu(&b.home, 0, pid, 2 << 30, 0);
    // The whole ladder is logged, each step once, as what would happen.
    let entries = poll_audit(&b, "the dry-run ladder reaches sigkill", |e| {
        e.iter()
            .any(|e| e["action"] == "sigkill" && e["pid"] == pid)
    });
    let ours: Vec<&Value> = entries.iter().filter(|e| e["pid"] == pid).collect();
    assert_eq!(
        ours.iter()
            .map(|e| e["action"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["notify", "sigterm", "sigkill"]
    );
    assert!(
        ours.iter()
            .all(|e| e["dry_run"] == true && e["outcome"] == "dry-run"),
        "{ours:#?}"
    );
    // Nothing was done, and nothing repeats.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!stranger.dead(), "dry-run must not kill");
    assert_eq!(audit(&b).iter().filter(|e| e["pid"] == pid).count(), 3);
}

#[test]
fn an_idle_job_is_warned_then_stopped_and_a_protected_one_is_left_alone() {
    let b = start(2, "enforce");
    // Both sit on their GPU at 0 % utilisation.
    let idle = b.submit(&["--gpus", "1", "--name", "idle", "--", "sleep", "60"]);
    let kept = b.submit(&[
        "--gpus",
        "1",
        "--name",
        "serving",
        "--tag",
        "protect=true",
        "--",
        "sleep",
        "60",
    ]);
    let entries = poll_audit(&b, "the idle job is stopped", |e| {
        e.iter()
            .any(|e| e["job_id"] == idle && e["action"] == "sigterm")
    });
    // (A sigkill may follow on a loaded machine if the job takes a second to go.)
    let steps = actions(&entries, |e| e["job_id"] == idle);
    assert_eq!(
        steps[..4],
        ["notify", "notify", "deprioritize", "sigterm"],
        "{entries:#?}"
    );
    let job = b.poll_job(idle, "ends", |j| j["state"] == "cancelled");
    let reason = job["reason"].as_str().unwrap();
    assert!(reason.contains("idle_job"), "{reason}");
    assert_eq!(job["priority"], -10, "deprioritised before it was stopped");
    // The owner heard about it through the job's channels (here: the inbox file).
    let inbox = std::fs::read_to_string(b.home.join("inbox.md")).unwrap_or_default();
    assert!(
        inbox.contains(&format!("notice about job {idle}")),
        "{inbox}"
    );
    // Its report says how it ended and how it used its GPU.
    let report = b.run(&["report", &idle.to_string()]).expect(0).stdout;
    assert!(report.contains("GPU efficiency"), "{report}");

    // The protected job: one skip, nothing else, still running.
    let about_kept: Vec<&Value> = entries.iter().filter(|e| e["job_id"] == kept).collect();
    assert_eq!(about_kept.len(), 1, "{about_kept:#?}");
    assert_eq!(about_kept[0]["action"], "skip");
    assert!(
        about_kept[0]["message"]
            .as_str()
            .unwrap()
            .contains("protect"),
        "{about_kept:#?}"
    );
    assert_eq!(b.state(kept), "running");
    b.run(&["cancel", &kept.to_string()]).expect(0);
}

/// A job that said it had finished and then sits idle holding its GPU (a forgotten `input()`
/// after "Training finished"): the finished-but-alive detector notes it, and the waste rules
/// then treat what it holds as held after finish (DESIGN §7): its owner is told and it is
/// stopped, while one that prints again is left alone.
#[test]
fn a_job_that_said_it_finished_and_holds_its_gpu_idle_is_held_after_finish() {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        "[midrun]\nfinished_grace = \"2s\"\nstall_after = \"1h\"\n\n\
         [waste]\nmode = \"enforce\"\nsample_interval = \"1s\"\ngrace = \"1s\"\n\n\
         [waste.held_after_exit]\nmin_mem = \"256MiB\"\nafter = \"2s\"\n",
    )
    .unwrap();
    b.serve_with(&["serve", "--sim-gpus", "2", "--grace", "1s"]);
    // It holds 2 GiB at 0 % from its own main process (`exec` keeps the pid).
    let hold = "d=\"$BATON_HOME/sim/gpu$CUDA_VISIBLE_DEVICES\"; mkdir -p \"$d\"; \
                echo \"$(( 2 << 30 )) 0\" > \"$d/$$\"";
    let done = b.submit_sh(
        &["--gpus", "1", "--name", "done"],
        &format!("{hold}; echo 'step 900 loss=0.02'; echo 'Training finished.'; exec sleep 120"),
    );
    // It said so too, but keeps printing: not finished after all.
    let chatty = b.submit_sh(
        &["--gpus", "1", "--name", "chatty"],
        &format!(
            "{hold}; echo 'Training finished.'; \
             while true; do echo 'still evaluating'; sleep 0.5; done"
        ),
    );
    let entries = poll_audit(&b, "the finished job is stopped", |e| {
        e.iter()
            .any(|e| e["job_id"] == done && e["action"] == "sigterm")
    });
    let steps = actions(&entries, |e| e["job_id"] == done);
    assert_eq!(steps[..2], ["notify", "sigterm"], "{entries:#?}");
    let term = entries
        .iter()
        .find(|e| e["job_id"] == done && e["action"] == "sigterm")
        .unwrap();
    assert_eq!(term["rule"], "held_after_exit");
    assert_eq!(term["pid"], Value::Null, "the job is stopped as a whole");
    let message = term["message"].as_str().unwrap();
    assert!(
        message.contains("said it had finished") && message.contains("finished-but-alive"),
        "{message}"
    );
    let job = b.poll_job(done, "ends", |j| j["state"] == "cancelled");
    let reason = job["reason"].as_str().unwrap();
    assert!(reason.contains("held_after_exit"), "{reason}");
    assert_eq!(
        job["alerts"][0]["detector"], "finished-but-alive",
        "{job:#}"
    );
    let inbox = std::fs::read_to_string(b.home.join("inbox.md")).unwrap_or_default();
    assert!(
        inbox.contains(&format!("notice about job {done}")),
        "{inbox}"
    );

    // The one that prints on was never said to be finished: nothing against it.
    assert!(
        audit(&b).iter().all(|e| e["job_id"] != chatty),
        "{:#?}",
        audit(&b)
    );
    assert_eq!(b.state(chatty), "running");
    b.run(&["cancel", &chatty.to_string()]).expect(0);
}

/// A process of a job that outlives it holding GPU memory. baton's containment ends everything a
/// job starts itself (tests/containment.rs), so this one is what escapes it: a process that
/// carries the job's identity but was started outside it (here, by the test, as a service the
/// job asked to start something would).
#[test]
fn a_process_left_holding_gpu_memory_after_its_job_ended_is_caught() {
    let b = start(1, "enforce");
    let sim = b.home.join("sim").join("gpu0");
    std::fs::create_dir_all(&sim).unwrap();
    let job = b.submit_sh(&["--gpus", "1"], "exit 0");
    b.wait_ok(&[job]);
    let mut leftover = std::process::Command::new("sleep")
        .arg("120")
        .env("BATON_JOB_ID", job.to_string())
        .env("BATON_ATTEMPT", "1")
        .spawn()
        .unwrap();
    let child = leftover.id() as i32;
    std::fs::write(sim.join(child.to_string()), "1073741824 0\n").unwrap();
    let entries = poll_audit(&b, "the leftover child is signalled", |e| {
        e.iter().any(|e| {
            e["rule"] == "held_after_exit" && e["action"] == "sigterm" && e["outcome"] != "pending"
        })
    });
    let term = entries
        .iter()
        .find(|e| e["rule"] == "held_after_exit" && e["action"] == "sigterm")
        .unwrap();
    assert_eq!(term["job_id"], job, "{term:#}");
    assert_eq!(term["pid"], child, "{term:#}");
    assert_eq!(
        actions(&entries, |e| e["rule"] == "held_after_exit"),
        ["notify", "sigterm"]
    );
    let until = Instant::now() + Duration::from_secs(10);
    while leftover.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "the leftover process survived");
        std::thread::sleep(POLL);
    }
}

#[test]
fn stats_and_gpus_report_what_the_monitor_saw() {
    let b = start(2, "dry-run");
    let job = b.submit_sh(
        &["--gpus", "1"],
        "d=\"$BATON_HOME/sim/gpu$CUDA_VISIBLE_DEVICES\"; mkdir -p \"$d\"; \
         echo \"$(( 3 << 30 )) 80\" > \"$d/$$\"; sleep 4",
    );
    b.wait_running(job);
    // Wait for a few samples of the job at 80 %.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let gpus = b.run(&["gpus", "--json"]).expect(0).json();
        let g0 = &gpus["gpus"][0];
        if g0["utilization"] == 80 && g0["util_5m"].as_f64().is_some_and(|u| u > 0.0) {
            assert_eq!(g0["processes"][0]["memory_used"], 3u64 << 30);
            assert!(g0["power_watts"].as_f64().unwrap() > 60.0);
            break;
        }
        assert!(Instant::now() < until, "{gpus:#}");
        std::thread::sleep(POLL * 8);
    }
    b.wait_ok(&[job]);
    let report = b
        .run(&["report", &job.to_string(), "--json"])
        .expect(0)
        .json();
    let usage = &report["report"]["gpus"][0];
    assert!(usage["samples"].as_u64().unwrap() >= 2, "{report:#}");
    assert_eq!(usage["peak_mem_bytes"], 3u64 << 30, "{report:#}");
    assert_eq!(usage["peak_util_pct"], 80.0, "{report:#}");
    let eff = &report["report"]["efficiency"];
    assert_eq!(eff["peak_util_pct"], 80.0, "{report:#}");

    let stats = b
        .run(&["stats", "--json", "--since", "1h"])
        .expect(0)
        .json();
    assert!(stats["cluster_util_pct"].as_f64().is_some(), "{stats:#}");
    assert!(
        stats["allocated_gpu_hours"].as_f64().unwrap() > 0.0,
        "{stats:#}"
    );
    assert_eq!(stats["owners"].as_array().unwrap().len(), 1, "{stats:#}");
    let text = b.run(&["stats"]).expect(0).stdout;
    assert!(text.contains("cluster GPU utilisation"), "{text}");
}
