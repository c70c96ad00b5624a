//! Workflows with a real daemon: file errors with line and column, nothing queued from a bad
//! file, atomic gangs competing for 4 simulated GPUs with a stream of small jobs, reservation
//! leases after a crash, critical-path ordering, and dependency failures through a DAG.

mod common;

use std::time::{Duration, Instant};

use common::{Baton, DEADLINE, POLL, wait_for_file};
use serde_json::Value;

fn write(b: &Baton, name: &str, text: &str) -> String {
    std::fs::write(b.path(name), text).unwrap();
    b.path(name).display().to_string()
}

fn submit_workflow(b: &Baton, file: &str) -> u64 {
    let out = b.run(&["workflow", "submit", file]).expect(0);
    out.stdout.trim().parse().unwrap()
}

fn workflow(b: &Baton, id: u64) -> Value {
    b.run(&["workflow", "status", &id.to_string(), "--json"])
        .expect(0)
        .json()
}

fn task<'a>(wf: &'a Value, name: &str) -> &'a Value {
    wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["task"] == name)
        .unwrap_or_else(|| panic!("no task {name} in {wf:#}"))
}

/// Polls the workflow until `pred` holds.
fn poll_workflow(b: &Baton, id: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + DEADLINE;
    loop {
        let wf = workflow(b, id);
        if pred(&wf) {
            return wf;
        }
        assert!(Instant::now() < until, "workflow {id}: {what}: {wf:#}");
        std::thread::sleep(POLL);
    }
}

#[test]
fn bad_files_are_refused_with_line_and_column_and_queue_nothing() {
    let b = Baton::start(4);
    let cycle = write(
        &b,
        "cycle.yaml",
        "name: loop\ntasks:\n  prep: {command: \"true\", after: [eval]}\n  train: {command: \"true\", after: [prep]}\n  eval: {command: \"true\", after: [train]}\n",
    );
    let out = b.run(&["workflow", "submit", &cycle]).expect(2);
    assert!(
        out.stderr.contains(
            "cycle.yaml: line 3, column 3: dependency cycle: prep -> train -> eval -> prep"
        ),
        "{}",
        out.stderr
    );
    let typo = write(
        &b,
        "typo.yaml",
        "name: typo\ntasks:\n  a:\n    command: \"true\"\n    gpu: 1\n",
    );
    let out = b.run(&["workflow", "submit", &typo]).expect(2);
    assert!(
        out.stderr.contains("typo.yaml: line 5, column 5")
            && out.stderr.contains("unknown field `gpu`"),
        "{}",
        out.stderr
    );
    let missing = write(
        &b,
        "missing.yaml",
        "name: m\ntasks:\n  a: {command: \"true\"}\n  b: {command: \"true\", after: [c]}\n",
    );
    let out = b.run(&["workflow", "submit", &missing]).expect(2);
    assert!(out.stderr.contains("no task named \"c\""), "{}", out.stderr);
    let huge = write(
        &b,
        "huge.yaml",
        "name: h\ntasks:\n  a: {command: \"true\", gpus: 9}\n",
    );
    let out = b.run(&["workflow", "submit", &huge]).expect(2);
    assert!(out.stderr.contains("this machine has 4"), "{}", out.stderr);
    let gang = write(
        &b,
        "gang.yaml",
        "name: g\natomic: true\ntasks:\n  a: {command: \"true\", gpus: 3}\n  b: {command: \"true\", gpus: 2}\n",
    );
    let out = b.run(&["workflow", "submit", &gang]).expect(2);
    assert!(
        out.stderr.contains("atomic") && out.stderr.contains("at once"),
        "{}",
        out.stderr
    );
    let all = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(
        all.as_array().unwrap().len(),
        0,
        "a refused workflow queued something: {all}"
    );
}

#[test]
fn a_failed_task_fails_what_depends_on_it_and_the_workflow() {
    let b = Baton::start(2);
    let file = write(
        &b,
        "dag.yaml",
        "name: dag\ntasks:\n  prep: {command: \"echo $BATON_TASK $BATON_WORKFLOW_ID > prep.out\"}\n  \
         train: {command: \"exit 3\", gpus: 1, after: [prep]}\n  eval: {command: \"true\", after: [train]}\n  \
         side: {command: \"true\", after: [prep]}\n",
    );
    let id = submit_workflow(&b, &file);
    let wf = poll_workflow(&b, id, "ends", |w| w["state"] == "failed");
    assert_eq!(task(&wf, "prep")["job"]["state"], "succeeded");
    assert_eq!(task(&wf, "train")["job"]["state"], "failed");
    assert_eq!(task(&wf, "side")["job"]["state"], "succeeded");
    let eval = &task(&wf, "eval")["job"];
    assert_eq!(eval["state"], "failed");
    assert!(
        eval["reason"]
            .as_str()
            .unwrap()
            .contains("dependency failed"),
        "{eval}"
    );
    assert_eq!(eval["workflow_id"], id);
    assert_eq!(b.read("prep.out").trim(), format!("prep {id}"));
    // Each task is a job with its own report.
    let report = b
        .run(&["report", &task(&wf, "train")["job"]["id"].to_string()])
        .expect(0);
    assert!(report.stdout.contains("exit code 3"), "{}", report.stdout);
}

#[test]
fn the_task_on_the_critical_path_starts_first() {
    let b = Baton::start(1);
    // After `root`, two branches compete for the one GPU: `short` (1 min predicted) and
    // `long1 -> long2` (20 min each). The long branch must go first. (`colocate_with` naming a
    // later task is accepted; on one machine every task shares the node anyway.)
    let gate = wait_for_file("go");
    let file = write(
        &b,
        "cp.yaml",
        &format!(
            "name: cp\ntasks:\n  root: {{command: \"{gate}\", gpus: 1, time_limit: 1m}}\n  \
             short: {{command: \"true\", gpus: 1, time_limit: 1m, after: [root]}}\n  \
             long1: {{command: \"true\", gpus: 1, time_limit: 20m, after: [root], colocate_with: [long2]}}\n  \
             long2: {{command: \"true\", gpus: 1, time_limit: 20m, after: [long1]}}\n"
        ),
    );
    let id = submit_workflow(&b, &file);
    let wf = workflow(&b, id);
    assert_eq!(
        wf["critical_path"],
        serde_json::json!(["root", "long1", "long2"])
    );
    b.touch("go");
    let wf = poll_workflow(&b, id, "ends", |w| w["state"] == "succeeded");
    let started = |name: &str| common::millis(&task(&wf, name)["job"]["started_at"]);
    assert!(started("long1") <= started("short"), "{wf:#}");
    // A strict check on the order, beyond equal timestamps: long1 ran before short.
    let long1_end = common::millis(&task(&wf, "long1")["job"]["ended_at"]);
    assert!(long1_end <= started("short"), "{wf:#}");
}

#[test]
fn competing_atomic_gangs_are_admitted_whole_one_at_a_time_despite_small_jobs() {
    let b = Baton::start(4);
    // Two gangs of 3 GPUs each on 4 GPUs: never both, never part of one.
    let gang = |name: &str, gate: &str| {
        write(
            &b,
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\natomic: true\ntasks:\n  big: {{command: \"{}\", gpus: 2}}\n  \
                 small: {{command: \"{}\", gpus: 1}}\n  after: {{command: \"true\", gpus: 1, after: [big, small]}}\n",
                wait_for_file(gate),
                wait_for_file(gate)
            ),
        )
    };
    let a = submit_workflow(&b, &gang("alpha", "go.alpha"));
    let wf_a = poll_workflow(&b, a, "alpha admitted", |w| !w["admitted_at"].is_null());
    assert_eq!(task(&wf_a, "big")["job"]["state"], "running");
    assert_eq!(
        task(&wf_a, "after")["reserved"].as_array().unwrap().len(),
        1,
        "{wf_a:#}"
    );
    let beta = submit_workflow(&b, &gang("beta", "go.beta"));
    // A stream of small jobs with no time limit: each could fit on alpha's spare GPU... except
    // there is none (alpha reserved 4), and none may take GPUs beta is waiting for.
    let small: Vec<u64> = (0..5)
        .map(|_| b.submit(&["--gpus", "1", "--", "true"]))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let wf_b = workflow(&b, beta);
    assert!(
        wf_b["admitted_at"].is_null(),
        "beta admitted beside alpha: {wf_b:#}"
    );
    for t in wf_b["tasks"].as_array().unwrap() {
        assert_eq!(t["job"]["state"], "queued", "{wf_b:#}");
        assert!(t["reserved"].is_null(), "beta partly reserved: {wf_b:#}");
    }
    for id in &small {
        assert_eq!(
            b.state(*id),
            "queued",
            "a small job took GPUs while gangs wait"
        );
    }
    // Alpha ends; beta is admitted whole, before the small jobs that came after it.
    b.touch("go.alpha");
    poll_workflow(&b, a, "alpha ends", |w| w["state"] == "succeeded");
    let wf_b = poll_workflow(&b, beta, "beta admitted", |w| !w["admitted_at"].is_null());
    let reserved: usize = wf_b["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["reserved"].as_array().map_or(0, Vec::len)
                + if t["job"]["state"] == "running" {
                    t["job"]["gpus"].as_array().unwrap().len()
                } else {
                    0
                }
        })
        .sum();
    assert_eq!(reserved, 4, "beta holds all it needs: {wf_b:#}");
    b.touch("go.beta");
    poll_workflow(&b, beta, "beta ends", |w| w["state"] == "succeeded");
    b.wait_ok(&small);
}

#[test]
fn an_expired_reservation_from_before_a_crash_is_released_and_a_live_one_kept() {
    let mut b = Baton::start(2);
    // Hold both GPUs, so the atomic workflow waits (unadmitted) while we stop the daemon.
    let blocker = b.submit_sh(&["--gpus", "2"], &wait_for_file("never"));
    b.wait_running(blocker);
    let file = write(
        &b,
        "gang.yaml",
        "name: leased\natomic: true\ntasks:\n  a: {command: \"echo $CUDA_VISIBLE_DEVICES > a.gpus\", gpus: 1}\n  \
         b: {command: \"echo $CUDA_VISIBLE_DEVICES > b.gpus\", gpus: 1, after: [a]}\n",
    );
    let id = submit_workflow(&b, &file);
    b.kill_daemon();
    common::kill_processes_of(&b.home);
    // The state a crash right after an admission's commit leaves behind: GPUs reserved for every
    // task, none started. Task a's lease ran out long ago.
    let db = rusqlite::Connection::open(b.home.join("baton.db")).unwrap();
    db.execute_batch(&format!(
        "UPDATE jobs SET state = 'cancelled', ended_at = 1 WHERE id = {blocker};
         UPDATE jobs SET reserved = '[1]', lease_until = 1 WHERE workflow_id = {id} AND task = 'a';
         UPDATE jobs SET reserved = '[0]', lease_until = 1 WHERE workflow_id = {id} AND task = 'b';
         UPDATE workflows SET admitted_at = 1 WHERE id = {id};"
    ))
    .unwrap();
    drop(db);
    b.serve();
    let wf = poll_workflow(&b, id, "ends", |w| w["state"] == "succeeded");
    let a_job = task(&wf, "a")["job"]["id"].as_u64().unwrap();
    let kinds: Vec<String> = b
        .run(&["events", &a_job.to_string(), "--json"])
        .expect(0)
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_string())
        .collect();
    let released = kinds
        .iter()
        .position(|k| k == "released")
        .expect("never released");
    let reserved = kinds
        .iter()
        .rposition(|k| k == "reserved")
        .expect("never re-admitted");
    assert!(released < reserved, "{kinds:?}");

    // A reservation whose lease is still good survives a restart: the task starts on exactly
    // the reserved GPU.
    let blocker = b.submit_sh(&["--gpus", "2"], &wait_for_file("never2"));
    b.wait_running(blocker);
    let id = submit_workflow(&b, &file);
    b.kill_daemon();
    common::kill_processes_of(&b.home);
    let far = 4_102_444_800_000i64; // 2100-01-01
    let db = rusqlite::Connection::open(b.home.join("baton.db")).unwrap();
    db.execute_batch(&format!(
        "UPDATE jobs SET state = 'cancelled', ended_at = 1 WHERE id = {blocker};
         UPDATE jobs SET reserved = '[1]', lease_until = {far} WHERE workflow_id = {id} AND task = 'a';
         UPDATE jobs SET reserved = '[0]', lease_until = {far} WHERE workflow_id = {id} AND task = 'b';
         UPDATE workflows SET admitted_at = 1 WHERE id = {id};"
    ))
    .unwrap();
    drop(db);
    std::fs::remove_file(b.path("a.gpus")).unwrap();
    std::fs::remove_file(b.path("b.gpus")).unwrap();
    b.serve();
    poll_workflow(&b, id, "ends", |w| w["state"] == "succeeded");
    assert_eq!(b.read("a.gpus").trim(), "1");
    assert_eq!(b.read("b.gpus").trim(), "0");
}

#[test]
fn cancelling_a_workflow_cancels_what_has_not_ended() {
    let b = Baton::start(1);
    let file = write(
        &b,
        "c.yaml",
        &format!(
            "name: c\ntasks:\n  first: {{command: \"{}\", gpus: 1}}\n  second: {{command: \"true\", after: [first]}}\n",
            wait_for_file("never")
        ),
    );
    let id = submit_workflow(&b, &file);
    poll_workflow(&b, id, "first runs", |w| {
        task(w, "first")["job"]["state"] == "running"
    });
    let out = b
        .run(&["workflow", "cancel", &id.to_string(), "--json"])
        .expect(0);
    assert_eq!(out.json()["id"], id);
    let wf = poll_workflow(&b, id, "ends", |w| w["state"] == "cancelled");
    assert_eq!(task(&wf, "first")["job"]["state"], "cancelled");
    assert_eq!(task(&wf, "second")["job"]["state"], "cancelled");
}
