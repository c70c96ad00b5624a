//! The verbs Slurm and pueue users reach for: `requeue` (a failed job runs again under its id,
//! with a new report and one new wake-up), `resubmit` (a new job with an old one's spec),
//! `signal` (every process of a running job) and `workflow list`. Each against a real daemon on
//! simulated GPUs, with the refusals: jobs in the wrong state, unknown ids, bad signal names,
//! workflow tasks; another user's jobs are in `system.rs`.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use common::{Baton, wait_contains, wait_for_file, wait_path};
use serde_json::Value;

/// How many reports of job `id` the file channel at `path` holds.
fn reports_in(path: &std::path::Path, id: u64) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .matches(&format!("[baton] job {id} ended:"))
        .count()
}

/// One raw API call: its status and its JSON body.
fn api(b: &Baton, method: &str, target: &str, body: &str) -> (u16, Value) {
    let mut s = UnixStream::connect(b.home.join("baton.sock")).unwrap();
    let message = format!(
        "{method} /v1{target} HTTP/1.0\r\nHost: baton\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(message.as_bytes()).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn a_failed_job_is_requeued_as_its_next_attempt_with_a_new_report_and_one_new_wake() {
    let b = Baton::start(1);
    let inbox = b.path("reports.md");
    let notify = format!("file:{}", inbox.display());
    // Fails on its first attempt, succeeds on the next.
    let id = b.submit_sh(
        &["--gpus", "1", "--notify", &notify],
        "echo attempt $BATON_ATTEMPT; [ \"$BATON_ATTEMPT\" -ge 2 ] || exit 3",
    );
    assert_eq!(b.wait(&[id], "30s").code, 1, "the first attempt fails");
    wait_contains(&inbox, &format!("[baton] job {id} ended: failed"));
    assert_eq!(reports_in(&inbox, id), 1);

    let out = b.run(&["requeue", &id.to_string(), "--json"]).expect(0);
    let job = &out.json()[0];
    assert_eq!(job["id"], id);
    assert_eq!(job["attempt"], 1, "{job:#}");
    assert_ne!(job["state"], "failed", "{job:#}");

    let out = b.wait(&[id], "30s");
    assert_eq!(out.code, 0, "the requeued attempt succeeds: {out:?}");
    let job = b.job(id);
    assert_eq!(
        (job["state"].as_str(), job["attempt"].as_u64()),
        (Some("succeeded"), Some(2)),
        "{job:#}"
    );
    // Its output is appended across attempts; its history says who requeued it.
    let logs = b.run(&["logs", &id.to_string()]).expect(0).stdout;
    assert!(
        logs.contains("attempt 1") && logs.contains("attempt 2"),
        "{logs}"
    );
    let events = b.run(&["events", &id.to_string()]).expect(0).stdout;
    assert!(
        events
            .lines()
            .any(|l| l.contains("requeued") && l.contains("by ")),
        "{events}"
    );

    // The new end brings a new report, delivered once through each channel; the first end's
    // deliveries are not the job's any more, and the first report is not sent again.
    wait_contains(&inbox, &format!("[baton] job {id} ended: succeeded"));
    let report = b
        .run(&["report", &id.to_string(), "--json"])
        .expect(0)
        .json();
    assert!(
        report["markdown"].as_str().unwrap().contains("succeeded"),
        "{report:#}"
    );
    let deliveries = report["deliveries"].as_array().unwrap();
    assert_eq!(
        deliveries.len(),
        job["notify"].as_array().unwrap().len(),
        "one delivery per channel, of this end only: {report:#}"
    );
    for d in deliveries {
        if d["channel"].as_str().unwrap().starts_with("file:") {
            assert_eq!(d["state"], "delivered", "{d}");
            assert_eq!(d["attempts"], 1, "{d}");
        }
    }
    // The builder and the outbox are done with this job once `wait` and the file say so; a
    // second delivery of the old report would have come with the new one.
    b.wait_ok(&[id]);
    assert_eq!(reports_in(&inbox, id), 2, "{}", b.read("reports.md"));
    let text = std::fs::read_to_string(&inbox).unwrap();
    let failed_at = text.find(&format!("job {id} ended: failed")).unwrap();
    let succeeded_at = text.find(&format!("job {id} ended: succeeded")).unwrap();
    assert!(failed_at < succeeded_at, "{text}");
}

#[test]
fn requeue_refuses_what_cannot_run_again_and_changes_nothing() {
    let b = Baton::start(1);
    let ok = b.submit_sh(&[], "true");
    let failed = b.submit_sh(&[], "exit 1");
    b.wait(&[ok, failed], "30s");
    let running = b.submit_sh(&[], &wait_for_file("go.requeue"));
    b.wait_running(running);

    let refused = |args: &[&str], needle: &str| {
        let mut full = vec!["requeue"];
        full.extend_from_slice(args);
        let out = b.run(&full);
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stderr.contains(needle), "{needle:?} not in {out:?}");
    };
    refused(&[&ok.to_string()], "succeeded");
    refused(&[&ok.to_string()], "baton resubmit");
    refused(&[&running.to_string()], "is running");
    refused(&["9999"], "does not exist");
    // All or nothing: the failed job named with a succeeded one stays failed.
    refused(&[&failed.to_string(), &ok.to_string()], "succeeded");
    assert_eq!(b.state(failed), "failed");
    // The API says the same in its JSON error shape.
    let (status, body) = api(&b, "POST", "/requeue", &format!("{{\"ids\":[{ok}]}}"));
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("succeeded"),
        "{body}"
    );
    assert!(
        body["hint"].as_str().unwrap().contains("resubmit"),
        "{body}"
    );
    let (status, body) = api(&b, "POST", "/requeue", "{\"ids\":[]}");
    assert_eq!(status, 400, "{body}");
    let (status, _) = api(&b, "POST", "/requeue", "{\"ids\":\"x\"}");
    assert_eq!(status, 422);

    // A workflow's task is not requeued alone.
    let wf = b.path("wf.yaml");
    std::fs::write(&wf, "name: w\ntasks:\n  boom: {command: \"exit 2\"}\n").unwrap();
    let w = b
        .run(&["workflow", "submit", &wf.to_string_lossy(), "--json"])
        .expect(0)
        .json();
    let task = w["tasks"][0]["job"]["id"].as_u64().unwrap();
    b.wait(&[task], "30s");
    refused(&[&task.to_string()], "workflow");
    assert_eq!(b.state(task), "failed");

    b.touch("go.requeue");
    b.wait_ok(&[running]);
    // A job requeued twice is fine: each end is its own.
    b.run(&["requeue", &failed.to_string()]).expect(0);
    assert_eq!(b.wait(&[failed], "30s").code, 1);
    b.run(&["requeue", &failed.to_string()]).expect(0);
    assert_eq!(b.wait(&[failed], "30s").code, 1);
    assert_eq!(b.job(failed)["attempt"], 3);
}

#[test]
fn resubmit_queues_a_copy_of_the_spec_with_overrides_and_no_dependencies() {
    let b = Baton::start(2);
    let first = b.submit_sh(&[], "true");
    b.wait_ok(&[first]);
    let mut cmd = b.cmd([
        "submit",
        "--name",
        "orig",
        "--gpus",
        "1",
        "--time-limit",
        "1h",
        "--retries",
        "1",
        "--tag",
        "k=v",
        "--after",
        &first.to_string(),
        "--",
        "sh",
        "-c",
        "echo \"$FOO $BATON_GPUS $BATON_JOB_NAME\" > out.$BATON_JOB_ID",
    ]);
    cmd.env("FOO", "from-submit");
    let out = common::run_cmd(cmd).expect(0);
    let orig: u64 = out.stdout.trim().parse().unwrap();
    b.wait_ok(&[orig]);

    let out = b
        .run(&[
            "resubmit",
            &orig.to_string(),
            "--name",
            "copy",
            "--gpus",
            "2",
            "--json",
        ])
        .expect(0);
    let copy = out.json();
    let id = copy["id"].as_u64().unwrap();
    assert_ne!(id, orig);
    assert_eq!(copy["name"], "copy");
    assert_eq!(copy["gpus_requested"], 2);
    assert_eq!(copy["time_limit_ms"], 3_600_000);
    assert_eq!(copy["retries"], 1);
    assert_eq!(copy["tags"]["k"], "v");
    assert_eq!(
        copy["after"],
        serde_json::json!([]),
        "dependencies are not copied"
    );
    assert!(
        out.stderr.contains(&format!("copy of job {orig}")),
        "{out:?}"
    );
    b.wait_ok(&[id]);
    // The same command, directory and environment; the new GPUs.
    assert_eq!(b.read(&format!("out.{id}")).trim(), "from-submit 0,1 copy");
    assert_eq!(b.read(&format!("out.{orig}")).trim(), "from-submit 0 orig");
    let events = b.run(&["events", &id.to_string()]).expect(0).stdout;
    assert!(events.contains(&format!("from job {orig}")), "{events}");

    // Plain text prints the id alone on stdout; the original's name is kept.
    let out = b.run(&["resubmit", &orig.to_string()]).expect(0);
    let again: u64 = out.stdout.trim().parse().unwrap();
    assert_eq!(b.job(again)["name"], "orig");
    b.wait_ok(&[again]);

    // Overrides are checked as a submission's are.
    let out = b.run(&["resubmit", &orig.to_string(), "--gpus", "9"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("GPU"), "{out:?}");
    let out = b.run(&["resubmit", &orig.to_string(), "--cpus", "0"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = b.run(&["resubmit", "9999"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("does not exist"), "{out:?}");
    // A working directory gone since is refused, not queued to fail.
    let gone = b.path("gone");
    std::fs::create_dir(&gone).unwrap();
    let mut cmd = b.cmd(["submit", "--", "true"]);
    cmd.current_dir(&gone);
    let there: u64 = common::run_cmd(cmd)
        .expect(0)
        .stdout
        .trim()
        .parse()
        .unwrap();
    b.wait_ok(&[there]);
    std::fs::remove_dir(&gone).unwrap();
    let out = b.run(&["resubmit", &there.to_string()]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("does not exist"), "{out:?}");
}

/// A daemon on one simulated GPU that contains its jobs as `containment` says (a cgroup where
/// it may make one, or the subreaper and the attempt's `BATON_JOB_KEY`).
fn contained_by(containment: &str) -> Baton {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        format!("[daemon]\ncontainment = \"{containment}\"\n"),
    )
    .unwrap();
    b.serve_with(&["serve", "--sim-gpus", "1", "--grace", "1s"]);
    b
}

#[test]
fn signal_reaches_every_process_of_a_running_job_and_only_a_running_one() {
    // A cgroup where the daemon may make one (as root, as the tests run here), else the
    // subreaper: either way every process.
    signal_reaches_every_process(contained_by("auto"), "cgroup");
}

#[test]
fn signal_reaches_every_process_of_a_running_job_subreaper() {
    signal_reaches_every_process(contained_by("subreaper"), "BATON_JOB_KEY");
}

/// `where_` is how the job should be contained (`cgroup` only where the daemon could make one;
/// `BATON_JOB_KEY`: the subreaper, the daemon finding its processes by their key).
fn signal_reaches_every_process(b: Baton, where_: &str) {
    // The job's shell and a process it detached into a session of its own both trap USR1.
    let script = format!(
        "trap 'echo main >> sig.main' USR1; \
         setsid sh -c \"trap 'echo child >> sig.child' USR1; touch child.ready; \
             while [ ! -e go.signal ]; do sleep 0.05; done\" & \
         while [ ! -e child.ready ]; do sleep 0.02; done; touch ready; {}",
        wait_for_file("go.signal")
    );
    let id = b.submit_sh(&[], &script);
    wait_path(&b.path("ready"));
    let out = b.run(&["signal", &id.to_string(), "SIGUSR1"]).expect(0);
    assert!(out.stdout.contains("SIGUSR1 sent to"), "{out:?}");
    // Found as the job's containment holds them: its cgroup, or its marked processes.
    let events = b.run(&["events", &id.to_string()]).expect(0).stdout;
    let in_cgroup = events
        .lines()
        .any(|l| l.contains("contained") && l.contains("in cgroup"));
    let how = if in_cgroup {
        "in cgroup"
    } else {
        "BATON_JOB_KEY"
    };
    assert!(how == where_ || where_ == "cgroup", "{events}");
    assert!(out.stdout.contains(how), "{how}: {out:?}\n{events}");
    wait_contains(&b.path("sig.main"), "main");
    wait_contains(&b.path("sig.child"), "child");
    // By number, and as JSON.
    let out = b
        .run(&["signal", &id.to_string(), "10", "--json"])
        .expect(0);
    assert_eq!(out.json()["signal"], 10);
    assert_eq!(out.json()["name"], "SIGUSR1");
    let events = b.run(&["events", &id.to_string()]).expect(0).stdout;
    assert!(
        events
            .lines()
            .any(|l| l.contains("signal") && l.contains("SIGUSR1 by")),
        "{events}"
    );

    // Names that are no signal are refused before any daemon is asked, and by the API.
    for bad in ["BOGUS", "0", "65", "33", "-9", ""] {
        let out = b.run(&["signal", &id.to_string(), bad]);
        assert_eq!(out.code, 2, "{bad:?}: {out:?}");
    }
    let (status, body) = api(
        &b,
        "POST",
        &format!("/jobs/{id}/signal"),
        "{\"signal\":\"NOPE\"}",
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("unknown signal"),
        "{body}"
    );
    let out = b.run(&["signal", "9999", "TERM"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("does not exist"), "{out:?}");

    b.touch("go.signal");
    b.wait_ok(&[id]);
    let out = b.run(&["signal", &id.to_string(), "TERM"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("not running"), "{out:?}");

    // KILL is allowed: the job ends as killed by it. A queued job gets no signal.
    let victim = b.submit_sh(&["--gpus", "1"], &wait_for_file("never"));
    let queued = b.submit_sh(&["--gpus", "1"], "true");
    b.wait_spawned(victim);
    let out = b.run(&["signal", &queued.to_string(), "TERM"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("has not started"), "{out:?}");
    b.run(&["signal", &victim.to_string(), "KILL"]).expect(0);
    assert_eq!(b.wait(&[victim], "30s").code, 1);
    let job = b.job(victim);
    assert_eq!(job["state"], "failed");
    assert_eq!(job["signal"], 9, "{job:#}");
    b.wait_ok(&[queued]);
}

#[test]
fn workflow_list_has_one_row_per_workflow_with_its_progress() {
    let b = Baton::start(1);
    let out = b.run(&["workflow", "list"]).expect(0);
    assert!(out.stdout.contains("no workflows"), "{out:?}");
    let wf = b.path("two.yaml");
    std::fs::write(
        &wf,
        "name: two\ntasks:\n  a: {command: \"true\"}\n  b: {command: \"exit 1\", after: [a]}\n",
    )
    .unwrap();
    let first = b
        .run(&["workflow", "submit", &wf.to_string_lossy(), "--json"])
        .expect(0)
        .json();
    let tasks: Vec<u64> = first["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["job"]["id"].as_u64().unwrap())
        .collect();
    b.wait(&tasks, "30s");
    let held = b.path("held.yaml");
    std::fs::write(
        &held,
        format!(
            "name: held\ntasks:\n  wait: {{command: \"{}\"}}\n",
            wait_for_file("go.list")
        ),
    )
    .unwrap();
    let second = b
        .run(&["workflow", "submit", &held.to_string_lossy(), "--json"])
        .expect(0)
        .json();
    let rows = b.run(&["workflow", "list", "--json"]).expect(0).json();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["id"], first["id"]);
    assert_eq!(rows[0]["name"], "two");
    assert_eq!(rows[0]["state"], "failed");
    assert_eq!(
        (
            rows[0]["tasks_done"].as_u64(),
            rows[0]["tasks_total"].as_u64()
        ),
        (Some(2), Some(2))
    );
    assert_eq!(rows[1]["id"], second["id"]);
    assert_eq!(rows[1]["tasks_done"], 0);
    assert_eq!(rows[1]["tasks_total"], 1);
    assert!(rows[1]["ended_at"].is_null());
    assert!(
        rows[0].get("private").is_none(),
        "one's own workflow is not private"
    );
    let text = b.run(&["workflow", "list"]).expect(0).stdout;
    assert!(text.starts_with("ID"), "{text}");
    assert!(text.contains("2/2") && text.contains("0/1"), "{text}");
    b.touch("go.list");
    let task = second["tasks"][0]["job"]["id"].as_u64().unwrap();
    b.wait_ok(&[task]);
}
