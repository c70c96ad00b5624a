//! The Slurm backend against a real single-node Slurm with 4 fake GPUs
//! (`../shared/slurm/start-slurm.sh`, which `.ci/run` starts): a 2-GPU job sees two devices, its
//! exit code and report come back, a dependent job runs after it (and fails with it), cancel
//! works, a time limit ends a job `timeout`, Slurm's refusal is passed on, and a daemon killed
//! mid-job loses nothing. A sweep is one Slurm job array: capped at `%K`, each run its element
//! with its index, parameters, exit code and output, one comparison report, cancelled element
//! by element, found again after a crash, refused past the cluster's MaxArraySize.
//!
//! Without a Slurm cluster the tests skip, unless `BATON_REQUIRE_SLURM=1` (CI) makes that a
//! failure.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Baton, POLL};
use serde_json::Value;

fn slurm_up() -> bool {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%T"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    if !up {
        assert!(
            std::env::var_os("BATON_REQUIRE_SLURM").is_none(),
            "no Slurm cluster answers `sinfo` (start one with ../shared/slurm/start-slurm.sh)"
        );
        eprintln!("skipping: no Slurm cluster (../shared/slurm/start-slurm.sh starts one)");
    }
    up
}

fn start() -> Baton {
    start_with("[backend]\nkind = \"slurm\"\n")
}

fn start_with(config: &str) -> Baton {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(b.home.join("config.toml"), config).unwrap();
    b.serve_with(&["serve", "--grace", "1s"]);
    b
}

/// Polls until `pred` holds, for up to `secs`.
#[track_caller]
fn poll(b: &Baton, id: u64, secs: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let job = b.job(id);
        if pred(&job) {
            return job;
        }
        assert!(
            Instant::now() < until,
            "job {id} never became {what}: {job:#}\nlog:\n{}",
            b.daemon_log()
        );
        std::thread::sleep(POLL * 4);
    }
}

fn ended(j: &Value) -> bool {
    !matches!(j["state"].as_str(), Some("queued" | "running"))
}

#[test]
fn a_two_gpu_job_sees_two_devices_and_its_exit_code_and_report_come_back() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = b.submit_sh(
        &["--gpus", "2", "--name", "two-gpus"],
        "echo \"devices=$CUDA_VISIBLE_DEVICES job=$BATON_JOB_ID\"; sleep 1; exit 3",
    );
    let running = poll(&b, id, 30, "running", |j| j["state"] == "running");
    let sid = running["slurm_job_id"].as_u64().expect("a Slurm job id");
    assert_eq!(running["gpus"].as_array().unwrap().len(), 2, "{running:#}");
    assert!(running["slurm_nodes"].as_str().is_some(), "{running:#}");
    let status = b.run(&["status"]).expect(0).stdout;
    assert!(status.contains(&format!("Slurm job {sid}")), "{status}");
    let out = b.wait(&[id], "60s");
    assert_eq!(out.code, 1, "the job failed: {out:?}");
    let job = b.job(id);
    assert_eq!(job["state"], "failed");
    assert_eq!(job["exit_code"], 3);
    assert_eq!(job["slurm_state"], "FAILED");
    let stdout = std::fs::read_to_string(b.home.join(format!("jobs/{id}/stdout"))).unwrap();
    let devices = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("devices="))
        .unwrap();
    assert_eq!(devices.split(',').count(), 2, "{stdout}");
    assert!(stdout.contains(&format!("job={id}")), "{stdout}");
    let report = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(report.contains("exit code 3"), "{report}");
    assert!(report.contains("devices="), "{report}");
}

#[test]
fn a_dependent_job_runs_after_its_dependency_and_fails_with_it() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let first = b.submit_sh(&["--gpus", "1"], "sleep 2; date +%s%N > first.done");
    let second = b.submit_sh(
        &["--gpus", "1", "--after", &first.to_string()],
        "date +%s%N > second.start",
    );
    let out = b.wait(&[first, second], "90s");
    assert_eq!(out.code, 0, "{out:?}\n{}", b.daemon_log());
    let done: u128 = b.read("first.done").trim().parse().unwrap();
    let start: u128 = b.read("second.start").trim().parse().unwrap();
    assert!(
        start >= done,
        "the dependent job started before its dependency ended"
    );

    let bad = b.submit_sh(&[], "exit 1");
    let after_bad = b.submit_sh(&["--after", &bad.to_string()], "true");
    let job = poll(&b, after_bad, 60, "ended", ended);
    assert_eq!(job["state"], "failed", "{job:#}");
    assert!(
        job["reason"]
            .as_str()
            .unwrap()
            .contains("dependency failed"),
        "{job:#}"
    );
}

#[test]
fn cancel_stops_a_running_job_and_a_queued_one() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = b.submit_sh(&["--gpus", "1"], "sleep 300");
    poll(&b, id, 30, "running", |j| j["state"] == "running");
    // One that waits in Slurm's queue behind its dependency.
    let waiting = b.submit_sh(&["--after", &id.to_string()], "true");
    poll(&b, waiting, 30, "in Slurm", |j| j["slurm_job_id"].is_u64());
    b.run(&["cancel", &id.to_string(), &waiting.to_string()])
        .expect(0);
    let job = poll(&b, id, 60, "cancelled", ended);
    assert_eq!(job["state"], "cancelled", "{job:#}");
    assert!(
        job["reason"].as_str().unwrap().contains("cancelled by"),
        "{job:#}"
    );
    let job = poll(&b, waiting, 60, "cancelled", ended);
    assert_eq!(job["state"], "cancelled", "{job:#}");
}

#[test]
fn a_time_limit_ends_the_job_as_timeout() {
    if !slurm_up() {
        return;
    }
    let b = start();
    // Slurm counts minutes: the shortest limit is one, and it acts within its next check.
    let id = b.submit_sh(&["--time-limit", "1m"], "sleep 600");
    let job = poll(&b, id, 180, "timed out", ended);
    assert_eq!(job["state"], "timeout", "{job:#}");
    let report = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(report.contains("time limit"), "{report}");
}

/// Issue 19: `--signal` goes to Slurm as sbatch's (`B:`, to the job's command): the job gets
/// its checkpoint signal before its limit, saves, and ends well.
#[test]
fn a_checkpoint_signal_reaches_the_job_before_its_slurm_time_limit() {
    if !slurm_up() {
        return;
    }
    let b = start();
    // Slurm's limit is a whole minute, and its signal may come up to a minute early.
    let id = b.submit_sh(
        &["--time-limit", "1m", "--signal", "USR1@30"],
        "trap 'echo checkpointed; exit 0' USR1; while :; do sleep 1; done",
    );
    let job = poll(&b, id, 180, "ended", ended);
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let out = b.run(&["logs", &id.to_string()]).expect(0).stdout;
    assert!(out.contains("checkpointed"), "{out}");
}

#[test]
fn slurms_refusal_is_passed_on() {
    if !slurm_up() {
        return;
    }
    let b = start();
    // The test cluster has 4 GPUs on its one node.
    let id = b.submit(&["--gpus", "5", "--", "true"]);
    let job = poll(&b, id, 30, "refused", ended);
    assert_eq!(job["state"], "failed", "{job:#}");
    let reason = job["reason"].as_str().unwrap();
    assert!(reason.starts_with("Slurm refused the job:"), "{reason}");
    assert!(reason.contains("node configuration"), "{reason}");
}

#[test]
fn a_daemon_killed_mid_job_loses_nothing() {
    if !slurm_up() {
        return;
    }
    let mut b = start();
    let gate = common::wait_for_file("go");
    let id = b.submit_sh(&["--gpus", "1"], &format!("{gate}; exit 7"));
    let running = poll(&b, id, 30, "running", |j| j["state"] == "running");
    let sid = running["slurm_job_id"].as_u64().unwrap();
    b.kill_daemon();
    // The job ends while no daemon watches it.
    b.touch("go");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("squeue")
            .args(["-h", "-t", "all", "-o", "%T", "-j", &sid.to_string()])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).trim() == "FAILED" {
            break;
        }
        assert!(Instant::now() < until, "Slurm job {sid} did not end");
        std::thread::sleep(POLL * 4);
    }
    b.serve();
    let job = poll(&b, id, 30, "ended", ended);
    assert_eq!(
        (job["state"].as_str(), job["exit_code"].as_i64()),
        (Some("failed"), Some(7)),
        "{job:#}"
    );
    assert_eq!(
        job["slurm_job_id"], sid,
        "the same Slurm job, not a second one"
    );
    // And exactly one Slurm job carries its name.
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-o", "%i"])
        .arg(format!("--name=baton-{id}"))
        .output()
        .unwrap();
    let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert!(listed.contains(&sid.to_string()), "{listed:?}");
    let report = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(report.contains("exit code 7"), "{report}");
}

#[test]
fn slurms_end_of_job_mail_makes_the_daemon_look_at_once() {
    if !slurm_up() {
        return;
    }
    // The cluster's MailProg must be `baton slurm-mail` (.ci/run sets it up and says so).
    if std::env::var_os("BATON_SLURM_MAIL_HOOK").is_none() {
        eprintln!("skipping: the cluster's MailProg is not baton slurm-mail");
        return;
    }
    let b = start_with("[backend]\nkind = \"slurm\"\nmail_hook = true\n");
    let id = b.submit_sh(&[], "sleep 1");
    b.wait_ok(&[id]);
    let until = Instant::now() + Duration::from_secs(20);
    while !b
        .daemon_log()
        .contains("Slurm's end-of-job mail says a job changed")
    {
        assert!(
            Instant::now() < until,
            "no poke from Slurm's MailProg; log:\n{}",
            b.daemon_log()
        );
        std::thread::sleep(POLL * 4);
    }
}

#[test]
fn an_interrupted_submission_is_found_again_not_made_twice() {
    if !slurm_up() {
        return;
    }
    let mut b = start();
    // The job waits in Slurm (for a job that waits for a file) while the daemon is killed: a
    // crash between `sbatch` and the record of its answer leaves a job that is still queued.
    let blocker = b.submit_sh(&[], &common::wait_for_file("go.first"));
    let gate = common::wait_for_file("go");
    let id = b.submit_sh(&["--after", &blocker.to_string()], &gate);
    let queued = poll(&b, id, 30, "in Slurm", |j| j["slurm_job_id"].is_u64());
    assert_eq!(queued["state"], "queued", "{queued:#}");
    let sid = queued["slurm_job_id"].as_u64().unwrap();
    b.kill_daemon();
    // What a crash between sbatch and the record of its answer leaves: the submission marked
    // as under way, no Slurm id.
    let db = rusqlite::Connection::open(b.home.join("baton.db")).unwrap();
    db.execute_batch(&format!(
        "UPDATE jobs SET slurm_id = NULL, slurm_submitting_at = 1 WHERE id = {id};"
    ))
    .unwrap();
    drop(db);
    b.serve();
    b.touch("go.first");
    b.touch("go");
    let job = poll(&b, id, 60, "ended", ended);
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["slurm_job_id"], sid, "found again: {job:#}");
    // Slurm has exactly one job of this daemon for it.
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-o", "%i|%k"])
        .arg(format!("--name=baton-{id}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let comment = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{sid}|")))
        .unwrap()
        .to_string();
    let tag = comment.rsplitn(3, ':').nth(2).unwrap().to_string();
    let ours: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("|{tag}:")))
        .collect();
    assert_eq!(ours.len(), 1, "{text}");
    assert!(b.daemon_log().contains("found its interrupted submission"));
}

#[test]
fn an_unreachable_slurm_keeps_jobs_queued_with_the_reason() {
    // No cluster needed: Slurm's commands are looked for where there are none.
    let b = start_with("[backend]\nkind = \"slurm\"\nbin_dir = \"/nonexistent/slurm/bin\"\n");
    let id = b.submit(&["--gpus", "1", "--", "true"]);
    let job = poll(&b, id, 30, "waiting for Slurm", |j| {
        j["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("waiting for Slurm"))
    });
    assert_eq!(job["state"], "queued", "{job:#}");
    let reason = job["reason"].as_str().unwrap();
    assert!(reason.contains("/nonexistent/slurm/bin/sbatch"), "{reason}");
    // It is not lost: it stays queued and can be cancelled.
    b.run(&["cancel", &id.to_string()]).expect(0);
    let job = poll(&b, id, 30, "cancelled", ended);
    assert_eq!(job["state"], "cancelled");
}

/// Nodes the cluster has (`.ci/slurm-two-nodes.sh` makes the test cluster two).
#[test]
fn baton_deps_json_lists_what_each_start_under_slurm_guarantees() {
    if !slurm_up() {
        return;
    }
    let b = start();
    // The seeds wait for `go`, so that everything after them goes to Slurm while they run:
    // the file is written at submission, before any of them has ended.
    std::fs::write(
        b.path("seeds.yaml"),
        "name: seeds\n\
         tasks:\n  \
           train:\n    \
             command: sh -c 'while [ ! -e go ]; do sleep 0.2; done; echo val_acc=0.9{seed}'\n    \
             matrix:\n      seed: [1, 2]\n  \
           aggregate:\n    \
             command: python3 -c \"import json,os; d=json.load(open(os.environ['BATON_DEPS_JSON'])); \
print(sorted((p['task'], p['params']['seed'], p['state'], p['exit_code'], open(p['stdout']).read().strip(), 'report_json' in p) for p in d['deps']))\"\n    \
             after: [train]\n",
    )
    .unwrap();
    let out = b.run(&["workflow", "submit", "seeds.yaml"]).expect(0);
    assert!(!out.stdout.trim().is_empty(), "{out:?}");
    let (train0, train1, aggregate) = (1, 2, 3);
    let any = b.submit_sh(
        &["--after-any", &train0.to_string()],
        "cp \"$BATON_DEPS_JSON\" any.json",
    );
    // An array after the aggregate: each element has its own file.
    let sweep = submit_sweep(
        &b,
        &[
            "--array",
            "0-1",
            "--after",
            &aggregate.to_string(),
            "--",
            "sh",
            "-c",
            "cp \"$BATON_DEPS_JSON\" array.{index}.json",
        ],
    );
    let runs = sweep_jobs(&b, sweep);
    for &id in [aggregate, any].iter().chain(&runs) {
        poll(&b, id, 60, "submitted to Slurm", |j| {
            j["slurm_job_id"].as_u64().is_some()
        });
    }
    assert!(!ended(&b.job(train0)), "the seeds are still running");
    std::fs::write(b.path("go"), "").unwrap();
    let mut all = vec![train0, train1, aggregate, any];
    all.extend(&runs);
    let out = b.wait(&all, "90s");
    assert_eq!(out.code, 0, "{out:?}\n{}", b.daemon_log());
    // `success` dependencies: the aggregate started only once they had succeeded.
    let stdout = std::fs::read_to_string(b.home.join(format!("jobs/{aggregate}/stdout"))).unwrap();
    assert_eq!(
        stdout.trim(),
        "[('train.0', '1', 'succeeded', 0, 'val_acc=0.91', False), \
         ('train.1', '2', 'succeeded', 0, 'val_acc=0.92', False)]"
    );
    // `any`: how train.0 would end was not known, so the file does not say.
    let listed: Value = serde_json::from_str(&b.read("any.json")).unwrap();
    let dep = &listed["deps"][0];
    assert_eq!(dep["job"], train0, "{listed:#}");
    assert_eq!(dep["kind"], "any", "{listed:#}");
    assert_eq!(dep["task"], "train.0", "{listed:#}");
    assert!(dep.get("state").is_none(), "{listed:#}");
    assert!(dep.get("exit_code").is_none(), "{listed:#}");
    for (index, run) in runs.iter().enumerate() {
        let listed: Value = serde_json::from_str(&b.read(&format!("array.{index}.json"))).unwrap();
        assert_eq!(listed["job"], *run, "{listed:#}");
        assert_eq!(listed["deps"][0]["job"], aggregate, "{listed:#}");
        assert_eq!(listed["deps"][0]["state"], "succeeded", "{listed:#}");
    }
}

fn nodes() -> usize {
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-o", "%N"])
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names.len()
}

#[test]
fn an_atomic_workflow_is_one_heterogeneous_job_whose_components_start_together() {
    if !slurm_up() {
        return;
    }
    if nodes() < 2 {
        assert!(
            std::env::var_os("BATON_REQUIRE_SLURM").is_none(),
            "heterogeneous jobs need two nodes: run .ci/slurm-two-nodes.sh"
        );
        eprintln!("skipping: one Slurm node (.ci/slurm-two-nodes.sh makes two)");
        return;
    }
    let b = start();
    let file = b.path("gang.yaml");
    std::fs::write(
        &file,
        "name: gang\natomic: true\ntasks:\n  \
         prep: {command: \"echo $CUDA_VISIBLE_DEVICES > prep.gpus\", gpus: 1}\n  \
         train: {command: \"echo $CUDA_VISIBLE_DEVICES $BATON_TASK > train.gpus; cp $BATON_DEPS_JSON train.deps\", gpus: 2, after: [prep]}\n",
    )
    .unwrap();
    let out = b
        .run(&["workflow", "submit", file.to_str().unwrap()])
        .expect(0);
    let wf: u64 = out.stdout.trim().parse().unwrap();
    let until = Instant::now() + Duration::from_secs(90);
    let status = loop {
        let status = b
            .run(&["workflow", "status", &wf.to_string(), "--json"])
            .expect(0)
            .json();
        if status["state"] != "queued" && status["state"] != "running" {
            break status;
        }
        assert!(
            Instant::now() < until,
            "the workflow did not end: {status:#}\n{}",
            b.daemon_log()
        );
        std::thread::sleep(POLL * 4);
    };
    assert_eq!(
        status["state"],
        "succeeded",
        "{status:#}\n{}",
        b.daemon_log()
    );
    let tasks = status["tasks"].as_array().unwrap();
    let sids: Vec<u64> = tasks
        .iter()
        .map(|t| t["job"]["slurm_job_id"].as_u64().unwrap())
        .collect();
    assert!(
        sids.iter().all(|&s| s == sids[0]),
        "one Slurm job: {sids:?}"
    );
    assert_eq!(b.read("prep.gpus").trim().split(',').count(), 1);
    let train = b.read("train.gpus");
    assert_eq!(
        train.split_whitespace().next().unwrap().split(',').count(),
        2,
        "{train}"
    );
    assert!(train.contains("train"), "{train}");
    // The batch script starts train only once prep has succeeded, which its file says.
    let deps: Value = serde_json::from_str(&b.read("train.deps")).unwrap();
    assert_eq!(deps["deps"][0]["task"], "prep", "{deps:#}");
    assert_eq!(deps["deps"][0]["state"], "succeeded", "{deps:#}");
    assert_eq!(deps["deps"][0]["exit_code"], 0, "{deps:#}");
    // Both components were allocated, and started, at the same moment.
    let out = Command::new("squeue")
        .env("SLURM_TIME_FORMAT", "%s")
        .args(["-h", "-t", "all", "-o", "%i|%S", "-j", &sids[0].to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let starts: Vec<&str> = text.lines().filter_map(|l| l.split('|').nth(1)).collect();
    assert_eq!(starts.len(), 2, "two components: {text}");
    assert_eq!(starts[0], starts[1], "started together: {text}");
}

#[test]
fn an_atomic_workflow_bigger_than_the_cluster_is_refused_with_the_reason() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let file = b.path("big.yaml");
    let tasks: String = (0..nodes() + 1)
        .map(|i| format!("  t{i}: {{command: \"true\"}}\n"))
        .collect();
    std::fs::write(&file, format!("name: big\natomic: true\ntasks:\n{tasks}")).unwrap();
    let out = b
        .run(&["workflow", "submit", file.to_str().unwrap()])
        .expect(0);
    let wf: u64 = out.stdout.trim().parse().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let status = b
            .run(&["workflow", "status", &wf.to_string(), "--json"])
            .expect(0)
            .json();
        if status["state"] == "failed" {
            let reason = status["tasks"][0]["job"]["reason"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(reason.contains("nodes"), "{reason}");
            break;
        }
        assert!(Instant::now() < until, "{status:#}");
        std::thread::sleep(POLL * 4);
    }
}

/// Why a job waits in Slurm's queue is recorded, not only shown: a daemon restarted where it
/// cannot reach Slurm (so nothing but its record can say) still says what Slurm last said.
#[test]
fn why_a_job_waits_in_slurm_survives_a_restart() {
    if !slurm_up() {
        return;
    }
    let config = "[backend]\nkind = \"slurm\"\n";
    let mut b = start_with(config);
    let first = b.submit_sh(&["--gpus", "1"], "sleep 300");
    poll(&b, first, 30, "running", |j| j["state"] == "running");
    let waiting = b.submit_sh(&["--after", &first.to_string()], "true");
    let job = poll(
        &b,
        waiting,
        60,
        "waiting in Slurm with Slurm's reason",
        |j| {
            j["slurm_state"] == "PENDING"
                && j["reason"].as_str().is_some_and(|r| r.contains("PENDING"))
        },
    );
    b.kill_daemon();
    std::fs::write(
        b.home.join("config.toml"),
        "[backend]\nkind = \"slurm\"\nbin_dir = \"/nonexistent/slurm/bin\"\n",
    )
    .unwrap();
    b.serve();
    let again = b.job(waiting);
    assert_eq!(
        (&again["state"], &again["reason"], &again["slurm_state"]),
        (&job["state"], &job["reason"], &job["slurm_state"]),
        "{again:#}"
    );
    // Slurm reachable again: both are cancelled there.
    b.kill_daemon();
    std::fs::write(b.home.join("config.toml"), config).unwrap();
    b.serve();
    b.run(&["cancel", &first.to_string(), &waiting.to_string()])
        .expect(0);
    poll(&b, first, 60, "cancelled", ended);
    poll(&b, waiting, 60, "cancelled", ended);
}

#[test]
fn cores_and_memory_become_slurms_and_a_held_job_waits_outside_slurm() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = b.submit_sh(
        &["--cpus", "2", "--mem", "100MiB"],
        "echo \"cpus=$SLURM_CPUS_PER_TASK mem=$SLURM_MEM_PER_NODE baton=$BATON_CPUS\"",
    );
    b.wait_ok(&[id]);
    let stdout = std::fs::read_to_string(b.home.join(format!("jobs/{id}/stdout"))).unwrap();
    assert!(stdout.contains("cpus=2 mem=100 baton=2"), "{stdout}");

    // Held: baton keeps it; Slurm never sees it until it is released.
    let held = b.submit(&["--hold", "--", "true"]);
    let job = b.job(held);
    assert!(job["held_by"].is_string(), "{job:#}");
    b.wait_ok(&[b.submit(&["--", "true"])]);
    assert!(b.job(held)["slurm_job_id"].is_null(), "{:#}", b.job(held));
    b.run(&["release", &held.to_string()]).expect(0);
    let done = poll(&b, held, 60, "ended", ended);
    assert_eq!(done["state"], "succeeded", "{done:#}");
    assert!(done["slurm_job_id"].is_u64(), "{done:#}");
}

#[test]
fn after_failed_is_slurms_afternotok() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let bad = b.submit_sh(&[], "sleep 1; exit 1");
    let good = b.submit_sh(&[], "sleep 1");
    let cleanup = b.submit_sh(&["--after-failed", &bad.to_string()], "echo cleaned");
    let fallback = b.submit_sh(&["--after-failed", &good.to_string()], "echo ran");
    let c = poll(&b, cleanup, 60, "ended", ended);
    assert_eq!(c["state"], "succeeded", "{c:#}");
    let f = poll(&b, fallback, 60, "ended", ended);
    assert_eq!(f["state"], "failed", "{f:#}");
    assert!(
        f["reason"].as_str().unwrap().contains("dependency"),
        "{f:#}"
    );
}

#[test]
fn a_requeued_job_runs_again_in_slurm_as_its_next_attempt() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = b.submit_sh(
        &[],
        "echo attempt=$BATON_ATTEMPT; [ \"$BATON_ATTEMPT\" -ge 2 ]",
    );
    let first = poll(&b, id, 60, "ended", ended);
    assert_eq!(first["state"], "failed", "{first:#}");
    let sid = first["slurm_job_id"].as_u64().unwrap();
    b.run(&["requeue", &id.to_string()]).expect(0);
    let again = poll(&b, id, 60, "ended again", |j| {
        ended(j) && j["slurm_job_id"].as_u64() != Some(sid)
    });
    assert_eq!(again["state"], "succeeded", "{again:#}");
    assert_eq!(again["attempt"], 2, "{again:#}");
}

#[test]
fn signal_reaches_a_job_running_in_slurm() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let got = b.path("got-usr1");
    let script = format!(
        "trap 'echo usr1 > {}; exit 0' USR1; echo ready > {}; while :; do sleep 0.1; done",
        got.display(),
        b.path("ready").display()
    );
    let id = b.submit_sh(&[], &script);
    poll(&b, id, 60, "running", |j| j["state"] == "running");
    common::wait_path(&b.path("ready"));
    b.run(&["signal", &id.to_string(), "USR1"]).expect(0);
    common::wait_path(&got);
    let done = poll(&b, id, 60, "ended", ended);
    assert_eq!(done["state"], "succeeded", "{done:#}");
}

/// Submits a sweep or array (`baton submit ARGS`) and returns its id.
#[track_caller]
fn submit_sweep(b: &Baton, args: &[&str]) -> u64 {
    let mut full = vec!["submit"];
    full.extend_from_slice(args);
    let out = b.run(&full).expect(0);
    out.stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("submit printed {:?}, not a sweep id", out.stdout))
}

fn sweep_status(b: &Baton, id: u64) -> Value {
    b.run(&["sweep", "status", &id.to_string(), "--json"])
        .expect(0)
        .json()
}

/// The runs' job ids of a sweep, in order.
fn sweep_jobs(b: &Baton, id: u64) -> Vec<u64> {
    sweep_status(b, id)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_u64().unwrap())
        .collect()
}

/// `squeue -r -j SID` lines as (array job id, task, state), every state (finished elements stay listed
/// for the cluster's MinJobAge, 300 s on the test cluster).
fn array_listing(sid: u64) -> Vec<(String, String, String)> {
    let out = Command::new("squeue")
        .env("SLURM_BITSTR_LEN", "0")
        // -r: one line per element, the pending ones too.
        .args(["-h", "-r", "-t", "all", "-o", "%F|%K|%T", "-j"])
        .arg(sid.to_string())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('|');
            Some((
                f.next()?.to_string(),
                f.next()?.to_string(),
                f.next()?.to_string(),
            ))
        })
        .collect()
}

#[test]
fn an_array_is_one_slurm_array_job_capped_at_k_and_reported_as_one() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = submit_sweep(
        &b,
        &[
            "--array",
            "0-5%2",
            "--",
            "sh",
            "-c",
            "echo \"$BATON_ARRAY_INDEX $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_JOB_ID $BATON_JOB_ID {index}\" > idx.{index}; \
             s=$(date +%s%N); sleep 1; e=$(date +%s%N); echo \"$s $e\" > span.{index}; \
             echo 'val_acc=0.{index}'; [ {index} != 3 ] || exit 4",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "120s"]);
    assert_eq!(out.code, 1, "run 3 failed: {out:?}\n{}", b.daemon_log());
    let jobs = sweep_jobs(&b, id);
    assert_eq!(jobs.len(), 6);
    // One Slurm job for all six runs.
    let sids: Vec<u64> = jobs
        .iter()
        .map(|&j| b.job(j)["slurm_job_id"].as_u64().expect("a Slurm job id"))
        .collect();
    assert!(sids.iter().all(|&s| s == sids[0]), "{sids:?}");
    let listing = array_listing(sids[0]);
    let mut tasks: Vec<String> = listing.iter().map(|(_, t, _)| t.clone()).collect();
    tasks.sort();
    assert_eq!(tasks, ["0", "1", "2", "3", "4", "5"], "{listing:?}");
    assert!(
        listing.iter().all(|(a, _, _)| *a == sids[0].to_string()),
        "one array job: {listing:?}"
    );
    let mut spans: Vec<(i64, i64)> = Vec::new();
    for (index, &job) in jobs.iter().enumerate() {
        // Each run is its element: its index is the task Slurm gave it.
        assert_eq!(
            b.read(&format!("idx.{index}")).trim(),
            format!("{index} {index} {} {job} {index}", sids[0])
        );
        let span = b.read(&format!("span.{index}"));
        let mut parts = span.split_whitespace().map(|p| p.parse::<i64>().unwrap());
        spans.push((parts.next().unwrap(), parts.next().unwrap()));
        // Its output is in its own job directory, as under the local backend.
        let stdout = std::fs::read_to_string(b.home.join(format!("jobs/{job}/stdout"))).unwrap();
        assert_eq!(stdout.trim(), format!("val_acc=0.{index}"));
    }
    // At no run's start were more than two running (%2).
    for (start, _) in &spans {
        let at_once = spans
            .iter()
            .filter(|(s, e)| s <= start && start < e)
            .count();
        assert!(at_once <= 2, "{at_once} runs at once: {spans:?}");
    }
    let failed = b.job(jobs[3]);
    assert_eq!(failed["state"], "failed", "{failed:#}");
    assert_eq!(failed["exit_code"], 4, "{failed:#}");
    assert_eq!(failed["slurm_state"], "FAILED", "{failed:#}");
    let view = sweep_status(&b, id);
    assert_eq!(view["state"], "failed", "{view:#}");
    assert_eq!(view["counts"]["succeeded"], 5, "{view:#}");
    assert_eq!(view["counts"]["failed"], 1, "{view:#}");
    // One comparison report of all six.
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(b.home.join(format!("sweeps/{id}/report.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(stored["rows"].as_array().unwrap().len(), 6, "{stored:#}");
    let report = b
        .run(&["sweep", "status", &id.to_string(), "--report"])
        .expect(0)
        .stdout;
    assert!(report.contains(&format!("sweep {id}")), "{report}");
}

#[test]
fn sweep_cancel_cancels_the_arrays_pending_and_running_elements() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = submit_sweep(&b, &["--array", "0-3%1", "--", "sleep", "300"]);
    let jobs = sweep_jobs(&b, id);
    poll(&b, jobs[0], 30, "running", |j| j["state"] == "running");
    // The others wait in Slurm, behind the cap.
    let waiting = poll(&b, jobs[2], 30, "pending in Slurm", |j| {
        j["reason"].as_str().is_some_and(|r| r.contains("PENDING"))
    });
    let sid = waiting["slurm_job_id"].as_u64().unwrap();
    assert!(
        waiting["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("Slurm job {sid}_2")),
        "{waiting:#}"
    );
    // One pending element cancelled alone: Slurm keeps no record of it, and the others wait on.
    // (It cannot start meanwhile: run 0 runs for 300 s and the cap is 1.)
    b.run(&["cancel", &jobs[3].to_string()]).expect(0);
    let alone = poll(&b, jobs[3], 60, "cancelled", ended);
    assert_eq!(alone["state"], "cancelled", "{alone:#}\n{}", b.daemon_log());
    let reason = alone["reason"].as_str().unwrap();
    assert!(reason.contains("before it started"), "{reason}");
    let listing = array_listing(sid);
    assert!(
        !listing.iter().any(|(_, t, _)| t == "3"),
        "task 3 is gone: {listing:?}"
    );
    assert!(
        listing.iter().any(|(_, t, s)| t == "2" && s == "PENDING"),
        "task 2 still waits: {listing:?}"
    );
    assert_eq!(b.state(jobs[2]), "queued");
    b.run(&["sweep", "cancel", &id.to_string()]).expect(0);
    for &job in &jobs {
        let j = poll(&b, job, 60, "cancelled", ended);
        assert_eq!(j["state"], "cancelled", "{j:#}\n{}", b.daemon_log());
    }
    let until = Instant::now() + Duration::from_secs(30);
    while array_listing(sid)
        .iter()
        .any(|(_, _, state)| state == "PENDING" || state == "RUNNING")
    {
        assert!(
            Instant::now() < until,
            "still in Slurm: {:?}",
            array_listing(sid)
        );
        std::thread::sleep(POLL * 4);
    }
    let until = Instant::now() + Duration::from_secs(30);
    while sweep_status(&b, id)["state"] != "cancelled" {
        assert!(Instant::now() < until, "{:#}", sweep_status(&b, id));
        std::thread::sleep(POLL * 4);
    }
}

#[test]
fn an_interrupted_array_submission_is_found_again_not_made_twice() {
    if !slurm_up() {
        return;
    }
    let mut b = start();
    // The array waits in Slurm (for a job that waits for a file) while the daemon is killed: a
    // crash between `sbatch` and the record of its answer leaves runs that are still queued.
    let blocker = b.submit_sh(&[], &common::wait_for_file("go.first"));
    let gate = common::wait_for_file("go");
    let after = blocker.to_string();
    let id = submit_sweep(
        &b,
        &["--array", "1-3", "--after", &after, "--", "sh", "-c", &gate],
    );
    let jobs = sweep_jobs(&b, id);
    let mut sids = Vec::new();
    for &job in &jobs {
        let j = poll(&b, job, 30, "in Slurm", |j| j["slurm_job_id"].is_u64());
        assert_eq!(j["state"], "queued", "{j:#}");
        sids.push(j["slurm_job_id"].as_u64().unwrap());
    }
    b.kill_daemon();
    // What a crash between sbatch and the record of its answer leaves: the submission marked
    // as under way (since when, which names it), no Slurm id.
    let db = rusqlite::Connection::open(b.home.join("baton.db")).unwrap();
    db.execute_batch(&format!(
        "UPDATE jobs SET slurm_id = NULL WHERE sweep_id = {id};"
    ))
    .unwrap();
    drop(db);
    b.serve();
    b.touch("go.first");
    b.touch("go");
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "60s"]);
    assert_eq!(out.code, 0, "{out:?}\n{}", b.daemon_log());
    for (&job, &sid) in jobs.iter().zip(&sids) {
        assert_eq!(b.job(job)["slurm_job_id"], sid, "found again");
    }
    // Slurm has exactly one array of this daemon for the sweep (other tests' daemons name
    // theirs alike: this one's tag, in the comment, tells them apart).
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-o", "%F|%k"])
        .arg(format!("--name=baton-s{id}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let comment = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{}|", sids[0])))
        .unwrap()
        .to_string();
    let tag = comment.rsplitn(3, ':').nth(2).unwrap().to_string();
    let mut arrays: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!("|{tag}:")))
        .filter_map(|l| l.split('|').next())
        .collect();
    arrays.sort_unstable();
    arrays.dedup();
    assert_eq!(arrays, [sids[0].to_string()], "{text}");
    assert!(b.daemon_log().contains("found its interrupted submission"));
}

#[test]
fn an_array_beyond_the_clusters_max_array_size_is_refused_naming_it() {
    if !slurm_up() {
        return;
    }
    let b = start();
    // The test cluster's MaxArraySize is Slurm's default, 1001: indices up to 1000.
    let id = submit_sweep(&b, &["--array", "999-1001", "--", "true"]);
    for job in sweep_jobs(&b, id) {
        let j = poll(&b, job, 30, "refused", ended);
        assert_eq!(j["state"], "failed", "{j:#}");
        let reason = j["reason"].as_str().unwrap();
        assert!(reason.starts_with("Slurm refused the sweep:"), "{reason}");
        assert!(reason.contains("MaxArraySize is 1001"), "{reason}");
    }
}

#[test]
fn a_sweeps_parameters_reach_each_element_verbatim() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = submit_sweep(
        &b,
        &[
            "--sweep",
            "lr=it's $HOME `id`,two  spaces",
            "--",
            "sh",
            "-c",
            "printf '%s' \"$BATON_PARAM_LR\" > param.$BATON_ARRAY_INDEX",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "60s"]);
    assert_eq!(out.code, 0, "{out:?}\n{}", b.daemon_log());
    assert_eq!(b.read("param.0"), "it's $HOME `id`");
    assert_eq!(b.read("param.1"), "two  spaces");
    let jobs = sweep_jobs(&b, id);
    let sid = b.job(jobs[0])["slurm_job_id"].as_u64().unwrap();
    assert_eq!(b.job(jobs[1])["slurm_job_id"], sid, "one array");
}

#[test]
fn an_elements_time_limit_ends_it_as_timeout_and_the_others_run_on() {
    if !slurm_up() {
        return;
    }
    let b = start();
    // Slurm counts minutes: the shortest limit is one.
    let id = submit_sweep(
        &b,
        &[
            "--array",
            "0-1",
            "--time-limit",
            "1m",
            "--",
            "sh",
            "-c",
            "[ {index} = 0 ] && exit 0; sleep 600",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "180s"]);
    assert_eq!(out.code, 1, "{out:?}\n{}", b.daemon_log());
    let jobs = sweep_jobs(&b, id);
    assert_eq!(b.job(jobs[0])["state"], "succeeded");
    let slow = b.job(jobs[1]);
    assert_eq!(slow["state"], "timeout", "{slow:#}");
    assert_eq!(slow["slurm_state"], "TIMEOUT", "{slow:#}");
    assert_eq!(sweep_status(&b, id)["state"], "failed");
}

#[test]
fn a_retried_element_runs_again_as_an_array_of_one_with_its_task_id() {
    if !slurm_up() {
        return;
    }
    let b = start();
    let id = submit_sweep(
        &b,
        &[
            "--array",
            "0-2",
            "--retries",
            "1",
            "--",
            "sh",
            "-c",
            "echo \"$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID\" > t.{index}.$BATON_ATTEMPT; \
             [ \"$BATON_ATTEMPT\" = 1 ] && [ {index} = 1 ] && exit 3; true",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "90s"]);
    assert_eq!(out.code, 0, "{out:?}\n{}", b.daemon_log());
    let jobs = sweep_jobs(&b, id);
    let first: Vec<String> = b
        .read("t.1.1")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let again: Vec<String> = b
        .read("t.1.2")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(
        (first[1].as_str(), again[1].as_str()),
        ("1", "1"),
        "task ids"
    );
    assert_ne!(first[0], again[0], "the retry is a Slurm job of its own");
    let retried = b.job(jobs[1]);
    assert_eq!(
        retried["slurm_job_id"].as_u64().unwrap().to_string(),
        again[0]
    );
    assert_eq!(retried["attempt"], 2, "{retried:#}");
}
