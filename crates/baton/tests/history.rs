//! History that scales (issue 15): `baton status` filters and its bounded default view, paged
//! listings, `baton history` (`--json`, `--csv`), and retention (`[retention]`, `baton gc`).

mod common;

use std::io::{Read, Write};
use std::time::Instant;

use common::{Baton, DEADLINE, POLL, run_cmd, wait_for_file};
use serde_json::Value;

/// The ids of a JSON listing, in its order.
fn ids(listing: &Value) -> Vec<u64> {
    listing
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {listing}"))
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect()
}

/// `baton status ARGS --json`, as ids.
#[track_caller]
fn listed(b: &Baton, args: &[&str]) -> Vec<u64> {
    let mut full = vec!["status"];
    full.extend_from_slice(args);
    full.push("--json");
    ids(&b.run(&full).expect(0).json())
}

/// A raw `GET` on the daemon's socket: the status line and headers, and the body.
fn get(b: &Baton, target: &str) -> (String, String) {
    let mut s = std::os::unix::net::UnixStream::connect(b.home.join("baton.sock")).unwrap();
    write!(s, "GET {target} HTTP/1.0\r\nHost: baton\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_ascii_lowercase(), body.to_string())
}

#[test]
fn every_status_filter_selects_its_jobs() {
    let b = Baton::start(2);
    let s1 = b.submit(&["--name", "sweep-1", "--", "true"]);
    let s2 = b.submit(&["--name", "sweep-2", "--", "true"]);
    b.wait_ok(&[s1, s2]);
    let failed = b.submit(&["--name", "broken", "--", "false"]);
    assert_eq!(b.wait(&[failed], "30s").code, 1);
    let wf_file = b.path("wf.yaml");
    std::fs::write(
        &wf_file,
        "name: pipe\ntasks:\n  a: {command: [\"true\"]}\n  b: {command: [\"true\"], after: [a]}\n",
    )
    .unwrap();
    let out = b
        .run(&["workflow", "submit", &wf_file.to_string_lossy()])
        .expect(0);
    let wf: u64 = out.stdout.trim().parse().unwrap();
    let tasks = listed(&b, &["--workflow", &wf.to_string()]);
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    b.wait_ok(&tasks);
    let running = b.submit_sh(&["--name", "hold", "--gpus", "1"], &wait_for_file("go"));
    b.wait_running(running);
    let everything = [s1, s2, failed, tasks[0], tasks[1], running];

    assert_eq!(listed(&b, &["--all"]), everything);
    assert_eq!(listed(&b, &["--state", "failed"]), [failed]);
    assert_eq!(
        listed(&b, &["--state", "running,failed"]),
        [failed, running]
    );
    assert_eq!(listed(&b, &["--state", "active"]), [running]);
    assert_eq!(
        listed(&b, &["--state", "ended"]),
        [s1, s2, failed, tasks[0], tasks[1]]
    );
    assert_eq!(listed(&b, &["--name", "sweep-*"]), [s1, s2]);
    assert_eq!(listed(&b, &["--name", "sweep-2"]), [s2]);
    assert_eq!(listed(&b, &["--owner", "root"]), everything);
    assert_eq!(listed(&b, &["--owner", "nobody-here"]), Vec::<u64>::new());
    assert_eq!(listed(&b, &["--workflow", &wf.to_string()]), tasks);
    assert_eq!(listed(&b, &["--limit", "2"]), [tasks[1], running]);
    // Time windows: since keeps what had not ended before it (and what runs); until what was
    // submitted by then. Both take RFC 3339, dates and durations ago.
    let failed_end = b.job(failed)["ended_at"].as_str().unwrap().to_string();
    assert_eq!(
        listed(&b, &["--since", &failed_end]),
        [failed, tasks[0], tasks[1], running]
    );
    let s2_submitted = b.job(s2)["submitted_at"].as_str().unwrap().to_string();
    assert_eq!(listed(&b, &["--until", &s2_submitted]), [s1, s2]);
    assert_eq!(listed(&b, &["--since", "1h"]), everything);
    assert_eq!(listed(&b, &["--until", "1h"]), Vec::<u64>::new());
    assert_eq!(listed(&b, &["--since", "2000-01-01"]), everything);
    assert_eq!(
        listed(
            &b,
            &["--since", "1d", "--state", "ended", "--name", "sweep-*"]
        ),
        [s1, s2]
    );
    let none = b.run(&["status", "--name", "nothing-*"]).expect(0);
    assert_eq!(none.stdout.trim(), "no jobs match");

    // Mistakes exit 2 and say what is wrong, here and from the API (400, JSON).
    for (args, says) in [
        (&["status", "--state", "finished"][..], "finished"),
        (&["status", "--since", "yesterday"], "yesterday"),
        (
            &["status", "--since", "1h", "--until", "2h"],
            "after --until",
        ),
        (&["status", "--limit", "0"], "--limit"),
        (&["status", "1", "--state", "failed"], "drop"),
        (&["history", "--until", "2026-02-30"], "2026-02-30"),
    ] {
        let out = b.run(args).expect(2);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
    }
    let (head, body) = get(&b, "/v1/jobs?since=soon");
    assert!(head.contains(" 400 "), "{head}");
    let err: Value = serde_json::from_str(&body).unwrap();
    assert!(err["error"].as_str().unwrap().contains("soon"), "{err}");
    b.touch("go");
    b.wait_ok(&[running]);
}

#[test]
fn the_default_view_is_bounded_and_says_how_many_more_ended() {
    let b = Baton::with_config(1, "[daemon]\nrecent_shown = 2\n");
    // One after another, so that the last two to end are the last two submitted.
    let ended: Vec<u64> = (0..5)
        .map(|_| {
            let id = b.submit(&["--", "true"]);
            b.wait_ok(&[id]);
            id
        })
        .collect();
    let running = b.submit_sh(&["--gpus", "1"], &wait_for_file("go"));
    let queued = b.submit(&["--gpus", "1", "--", "true"]);
    b.wait_running(running);
    // Active jobs, and the last two that ended; the JSON stays a list of job objects.
    assert_eq!(listed(&b, &[]), [ended[3], ended[4], running, queued]);
    let table = b.run(&["status"]).expect(0).stdout;
    assert!(
        table.ends_with("… and 3 more ended jobs: `baton history`, or `baton status --all`\n"),
        "{table}"
    );
    // The queued job still says why it waits: its live reason, not the recorded one.
    let view = b.run(&["status", "--json"]).expect(0).json();
    let q = view
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == queued)
        .unwrap();
    assert!(q["reason"].as_str().unwrap().contains("resources"), "{q:#}");
    let (head, _) = get(&b, "/v1/jobs");
    assert!(head.contains("baton-more-ended: 3"), "{head}");
    assert_eq!(listed(&b, &["--all"]).len(), 7);
    b.touch("go");
    b.wait_ok(&[running, queued]);
    // A job put back in the queue is active again, not one more ended job left out.
    let failed = b.submit(&["--", "false"]);
    assert_eq!(b.wait(&[failed], "30s").code, 1);
    let (head, _) = get(&b, "/v1/jobs");
    assert!(head.contains("baton-more-ended: 6"), "{head}");
    b.run(&["requeue", &failed.to_string()]).expect(0);
    assert_eq!(b.wait(&[failed], "30s").code, 1);
    let (head, _) = get(&b, "/v1/jobs");
    assert!(head.contains("baton-more-ended: 6"), "{head}");
}

#[test]
fn listings_are_paged_and_the_cli_follows_every_page() {
    let b = Baton::start(1);
    let jobs: Vec<u64> = (0..7).map(|_| b.submit(&["--", "true"])).collect();
    b.wait_ok(&jobs);
    // The API answers one bounded page, newest first, and says where the next one starts.
    let (head, body) = get(&b, "/v1/jobs?all=true&limit=3");
    assert!(head.contains("baton-next-before: 5"), "{head}");
    assert_eq!(ids(&serde_json::from_str(&body).unwrap()), [7, 6, 5]);
    let (head, body) = get(&b, "/v1/jobs?all=true&limit=3&before=2");
    assert!(!head.contains("baton-next-before"), "{head}");
    assert_eq!(ids(&serde_json::from_str(&body).unwrap()), [1]);
    // The CLI asks two at a time here and still prints everything, oldest first.
    for args in [&["status", "--all", "--json"][..], &["history", "--json"]] {
        let mut cmd = b.cmd(args);
        cmd.env("BATON_PAGE_SIZE", "2");
        assert_eq!(ids(&run_cmd(cmd).expect(0).json()), jobs, "{args:?}");
    }
    let mut cmd = b.cmd(["status", "--limit", "3", "--json"]);
    cmd.env("BATON_PAGE_SIZE", "2");
    assert_eq!(ids(&run_cmd(cmd).expect(0).json()), jobs[4..]);
}

#[test]
fn history_has_a_row_per_job_with_its_wait_run_and_gpu_use() {
    let b = Baton::with_config(1, "[waste]\nsample_interval = \"1s\"\n");
    let used = b.submit_sh(
        &["--gpus", "1", "--name", "train,v2"],
        "d=\"$BATON_HOME/sim/gpu$CUDA_VISIBLE_DEVICES\"; mkdir -p \"$d\"; \
         echo \"$(( 1 << 30 )) 60\" > \"$d/$$\"; sleep 2.5",
    );
    let failed = b.submit(&["--gpus", "1", "--name", "bad", "--", "sh", "-c", "exit 3"]);
    let out = b.wait(&[used, failed], "60s");
    assert_eq!(out.code, 1, "{out:?}");
    let rows = b.run(&["history", "--json"]).expect(0).json();
    assert_eq!(ids(&rows), [used, failed]);
    let (u, f) = (&rows[0], &rows[1]);
    assert_eq!(
        (u["state"].as_str(), u["exit_code"].as_i64()),
        (Some("succeeded"), Some(0))
    );
    assert_eq!(u["gpus"], serde_json::json!([0]));
    assert!(u["run_ms"].as_i64().unwrap() >= 2_000, "{u:#}");
    assert_eq!(u["gpu_util_pct"].as_f64(), Some(60.0), "{u:#}");
    assert_eq!(
        (f["state"].as_str(), f["exit_code"].as_i64()),
        (Some("failed"), Some(3))
    );
    assert!(f["gpu_util_pct"].is_null(), "{f:#}");
    assert!(
        f["wait_ms"].as_i64().unwrap() >= 2_000,
        "it waited for the GPU job: {f:#}"
    );

    let table = b.run(&["history"]).expect(0).stdout;
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .filter(|c| !c.is_empty())
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        [
            "ID", "NAME", "STATE", "EXIT", "WAIT", "RAN", "GPUS", "GPU EFF"
        ],
        "{table}"
    );
    assert!(table.contains("60.0%"), "{table}");
    let csv = b.run(&["history", "--csv"]).expect(0).stdout;
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("id,name,state,exit_code,"), "{csv}");
    assert!(
        lines[1].starts_with(&format!("{used},\"train,v2\",succeeded,0,")),
        "{csv}"
    );
    assert!(lines[1].ends_with(",1,,0,60.0"), "{csv}");
    assert!(
        lines[2].starts_with(&format!("{failed},bad,failed,3,")),
        "{csv}"
    );
    // The filters are status's.
    let only = b
        .run(&["history", "--state", "failed", "--json"])
        .expect(0)
        .json();
    assert_eq!(ids(&only), [failed]);
}

/// Polls (bounded) until `done` holds: retention works on the clock, and no event marks a
/// row falling due.
#[track_caller]
fn eventually(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !done() {
        assert!(
            Instant::now() < until,
            "{what} did not happen within {DEADLINE:?}"
        );
        std::thread::sleep(POLL * 4);
    }
}

#[test]
fn retention_removes_old_jobs_and_outputs_but_not_what_active_jobs_need() {
    let b = Baton::with_config(1, "[retention]\njobs = \"3s\"\noutputs = \"1s\"\n");
    let needed = b.submit(&["--", "sh", "-c", "echo kept-for-its-dependent"]);
    let plain = b.submit(&["--", "sh", "-c", "echo old-output"]);
    b.wait_ok(&[needed, plain]);
    // An active job that runs after `needed` keeps it.
    let dependent = b.submit_sh(&["--after-any", &needed.to_string()], &wait_for_file("go"));
    b.wait_running(dependent);
    let dir = |id: u64| b.home.join("jobs").join(id.to_string());
    // Outputs go after a second, the report stays with the row.
    eventually("the outputs' removal", || {
        !dir(needed).join("stdout").exists()
    });
    assert!(dir(needed).join("report.md").exists());
    // After three seconds the plain job goes whole: row, events, directory.
    eventually("the old job's removal", || {
        b.run(&["status", &plain.to_string()]).code == 2
    });
    assert!(!dir(plain).exists());
    assert_eq!(b.run(&["events", &plain.to_string()]).code, 2);
    // ... while the one the running job depends on stays, and says so.
    b.job(needed);
    let dry = b.run(&["gc", "--dry-run", "--json"]).expect(0).json();
    assert_eq!(
        (dry["dry_run"].as_bool(), dry["jobs"].as_u64()),
        (Some(true), Some(0)),
        "{dry:#}"
    );
    assert_eq!(dry["kept_back"], 1, "{dry:#}");
    let text = b.run(&["gc", "--dry-run"]).expect(0).stdout;
    assert!(text.contains("kept back: 1 ended jobs"), "{text}");
    b.touch("go");
    b.wait_ok(&[dependent]);
    // `--older-than` applies a shorter window now: a dry run counts and removes nothing...
    let dry = b
        .run(&["gc", "--dry-run", "--older-than", "0s", "--json"])
        .expect(0)
        .json();
    assert!(dry["jobs"].as_u64().unwrap() >= 1, "{dry:#}");
    assert!(dry["events"].as_u64().unwrap() >= 3, "{dry:#}");
    assert!(dry["files"].as_u64().unwrap() >= 1, "{dry:#}");
    b.job(dependent);
    // ... and `gc` removes it.
    let done = b
        .run(&["gc", "--older-than", "0s", "--json"])
        .expect(0)
        .json();
    assert_eq!(done["dry_run"], false, "{done:#}");
    assert!(done["jobs"].as_u64().unwrap() >= 1, "{done:#}");
    assert_eq!(b.run(&["status", &dependent.to_string()]).code, 2);
    assert!(!dir(dependent).exists());
    eventually("the dependency's removal", || {
        b.run(&["status", &needed.to_string()]).code == 2
    });
    let text = b.run(&["gc"]).expect(0).stdout;
    assert!(text.contains("removed: 0 ended jobs"), "{text}");
}
