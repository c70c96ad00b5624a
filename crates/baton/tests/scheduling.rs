//! Scheduling on simulated GPUs, observed from inside the jobs: exclusive whole-GPU allocation,
//! memory packing, priorities, dependencies and EASY backfill.

mod common;

use common::{Baton, millis, wait_for_file};

/// One job's run as the job itself recorded it.
#[derive(Debug, Clone)]
struct Span {
    id: u64,
    gpus: String,
    start: i64,
    end: i64,
}

/// A script that records `start <ns> <gpus>` / `end <ns>` in `rec.<job id>` around `body`.
fn recorded(body: &str) -> String {
    format!(
        "f=rec.$BATON_JOB_ID; echo \"start $(date +%s%N) $CUDA_VISIBLE_DEVICES\" > $f; {body}; \
         echo \"end $(date +%s%N)\" >> $f"
    )
}

fn span(b: &Baton, id: u64) -> Span {
    let text = b.read(&format!("rec.{id}"));
    let mut start = None;
    let mut end = None;
    let mut gpus = String::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["start", t, rest @ ..] => {
                start = Some(t.parse::<i64>().unwrap());
                gpus = rest.join(" ");
            }
            ["end", t] => end = Some(t.parse::<i64>().unwrap()),
            _ => panic!("job {id} wrote an unexpected line {line:?}"),
        }
    }
    Span {
        id,
        gpus,
        start: start.unwrap_or_else(|| panic!("job {id} recorded no start: {text:?}")),
        end: end.unwrap_or_else(|| panic!("job {id} recorded no end: {text:?}")),
    }
}

fn overlap(a: &Span, b: &Span) -> bool {
    a.start < b.end && b.start < a.end
}

/// The most spans running at one instant.
fn max_concurrency(spans: &[Span]) -> usize {
    let mut events: Vec<(i64, i32)> = Vec::new();
    for s in spans {
        events.push((s.start, 1));
        events.push((s.end, -1));
    }
    // At equal times an end comes before a start.
    events.sort();
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        max = max.max(now);
    }
    max as usize
}

#[test]
fn cpu_only_jobs_run_as_many_at_once_as_there_are_cores() {
    let mut b = Baton::unstarted();
    b.serve_with(&["serve", "--sim-gpus", "0", "--cpus", "3", "--grace", "1s"]);
    // All eight wait on one gate job (which takes one of the cores), so they become eligible
    // in the same pass: without a limit they would all start in the same millisecond.
    let gate = b.submit_sh(&["--name", "gate"], &wait_for_file("go"));
    let gate_arg = gate.to_string();
    let ids: Vec<u64> = (0..8)
        .map(|i| {
            let cpus = if i == 0 { "2" } else { "1" };
            b.submit_sh(
                &["--cpus", cpus, "--after", &gate_arg],
                &recorded("sleep 0.3"),
            )
        })
        .collect();
    b.wait_running(gate);
    let reason = b.wait_reason(ids[0]);
    assert!(reason.starts_with("dependency"), "{reason}");
    b.touch("go");
    // The first holds two cores, so one other runs beside it, and the rest wait for cores.
    let job = b.wait_running(ids[0]);
    assert_eq!(job["cpus"], 2, "{job:#}");
    let reason = b.wait_reason(ids[7]);
    assert!(
        reason.starts_with("resources: needs 1 CPU, 0 of 3 free"),
        "{reason}"
    );
    b.wait_ok(&ids);
    let spans: Vec<Span> = ids.iter().map(|&id| span(&b, id)).collect();
    let most = max_concurrency(&spans);
    assert!(most <= 3, "{most} jobs ran at once on 3 cores: {spans:#?}");
    assert!(most >= 2, "the cores were not used: {spans:#?}");
    let first = &spans[0];
    let beside = spans[1..].iter().filter(|s| overlap(first, s)).count();
    assert!(
        beside <= 1,
        "{beside} one-core jobs ran beside the two-core one"
    );
}

#[test]
fn whole_gpu_jobs_never_share_a_gpu() {
    let b = Baton::start(4);
    // All twelve wait on one gate job, so they become eligible in the same scheduling pass.
    let gate = b.submit_sh(&["--name", "gate"], &wait_for_file("go"));
    let gate_arg = gate.to_string();
    let ids: Vec<u64> = (0..12)
        .map(|_| {
            b.submit_sh(
                &["--gpus", "1", "--after", &gate_arg],
                &recorded("sleep 0.4"),
            )
        })
        .collect();
    b.wait_running(gate);
    b.touch("go");
    b.wait_ok(&ids);

    let spans: Vec<Span> = ids.iter().map(|&id| span(&b, id)).collect();
    for s in &spans {
        let job = b.job(s.id);
        let gpus: Vec<String> = job["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.to_string())
            .collect();
        assert_eq!(gpus.len(), 1, "job {} holds {gpus:?}", s.id);
        assert_eq!(
            s.gpus, gpus[0],
            "job {}: CUDA_VISIBLE_DEVICES differs from the allocation",
            s.id
        );
        assert!(
            ["0", "1", "2", "3"].contains(&s.gpus.as_str()),
            "job {} saw CUDA_VISIBLE_DEVICES={:?}",
            s.id,
            s.gpus
        );
    }
    for (i, a) in spans.iter().enumerate() {
        for c in &spans[i + 1..] {
            assert!(
                !(overlap(a, c) && a.gpus == c.gpus),
                "jobs {} and {} ran at the same time on GPU {}: {a:?} {c:?}",
                a.id,
                c.id,
                a.gpus
            );
        }
    }
    let max = max_concurrency(&spans);
    assert_eq!(max, 4, "expected 4 jobs at once on 4 GPUs: {spans:#?}");
}

#[test]
fn memory_jobs_pack_onto_one_gpu_up_to_its_memory() {
    let b = Baton::start(1);
    // Three 20 GiB jobs: each waits (at most 10 s) until all three have started, so they can
    // only all succeed if they ran at the same time on the one GPU.
    let barrier = "echo \"$CUDA_VISIBLE_DEVICES\" > started.$BATON_JOB_ID; n=0; \
                   while [ $(ls started.* | wc -l) -lt 3 ]; do \
                   n=$((n+1)); [ $n -gt 500 ] && exit 1; sleep 0.02; done";
    let small: Vec<u64> = (0..3)
        .map(|_| b.submit_sh(&["--gpu-mem", "20GiB"], barrier))
        .collect();
    b.wait_ok(&small);
    for &id in &small {
        assert_eq!(b.read(&format!("started.{id}")).trim(), "0");
        let job = b.job(id);
        assert_eq!(job["gpus"], serde_json::json!([0]), "{job:#}");
        assert_eq!(job["gpu_mem"], 20u64 << 30);
    }

    // 50 GiB + 40 GiB > 80 GiB: the second waits for the first.
    let big = b.submit_sh(&["--gpu-mem", "50GiB"], &recorded(&wait_for_file("go")));
    b.wait_running(big);
    let other = b.submit_sh(&["--gpu-mem", "40GiB"], &recorded("sleep 0.1"));
    let reason = b.wait_reason(other);
    assert!(
        reason.starts_with("resources"),
        "the 40 GiB job waits for memory, not {reason:?}"
    );
    assert_eq!(b.state(big), "running");
    b.touch("go");
    b.wait_ok(&[big, other]);
    let (s50, s40) = (span(&b, big), span(&b, other));
    assert!(
        !overlap(&s50, &s40),
        "50 GiB and 40 GiB jobs overlapped on an 80 GiB GPU: {s50:?} {s40:?}"
    );
    assert!(millis(&b.job(other)["started_at"]) >= millis(&b.job(big)["ended_at"]));
}

#[test]
fn higher_priority_starts_first_then_submission_order() {
    let b = Baton::start(1);
    let blocker = b.submit_sh(&["--gpus", "1"], &wait_for_file("go"));
    b.wait_running(blocker);
    let queue = [("low", "1"), ("high", "10"), ("mid", "5"), ("mid2", "5")];
    let ids: Vec<u64> = queue
        .iter()
        .map(|(name, prio)| {
            b.submit_sh(
                &["--gpus", "1", "--name", name, "--priority", prio],
                "echo $BATON_JOB_NAME >> order",
            )
        })
        .collect();
    for &id in &ids {
        assert_eq!(b.state(id), "queued");
    }
    b.touch("go");
    b.wait_ok(&ids);
    b.wait_ok(&[blocker]);
    let order: Vec<String> = b.read("order").lines().map(str::to_string).collect();
    assert_eq!(order, ["high", "mid", "mid2", "low"]);
    let started: Vec<i64> = ids
        .iter()
        .map(|&id| millis(&b.job(id)["started_at"]))
        .collect();
    assert!(started[1] <= started[2] && started[2] <= started[3] && started[3] <= started[0]);
}

#[test]
fn dependencies_order_fail_and_cascade() {
    let b = Baton::start(2);
    // --after on success: runs after, and only after.
    let first = b.submit_sh(
        &[],
        &format!("{}; echo first >> order", wait_for_file("go")),
    );
    let then = b.submit_sh(&["--after", &first.to_string()], "echo then >> order");
    b.wait_running(first);
    let reason = b.wait_reason(then);
    assert!(reason.starts_with("dependency"), "{reason:?}");
    b.touch("go");
    b.wait_ok(&[then]);
    assert_eq!(b.read("order"), "first\nthen\n");
    assert!(millis(&b.job(then)["started_at"]) >= millis(&b.job(first)["ended_at"]));

    // --after on a failure: never runs, ends failed with the reason; its own dependents too.
    let bad = b.submit_sh(&[], "exit 3");
    let never = b.submit_sh(&["--after", &bad.to_string()], "touch never-ran");
    let never2 = b.submit_sh(&["--after", &never.to_string()], "touch never2-ran");
    // --after-any runs whatever the result.
    let anyway = b.submit_sh(&["--after-any", &bad.to_string()], "touch anyway-ran");
    let out = b.wait(&[bad, never, never2], "30s");
    assert_eq!(out.code, 1, "{out:?}");
    b.wait_ok(&[anyway]);

    let job = b.job(bad);
    assert_eq!(
        (job["state"].as_str(), job["exit_code"].as_i64()),
        (Some("failed"), Some(3))
    );
    for id in [never, never2] {
        let job = b.job(id);
        assert_eq!(job["state"], "failed", "{job:#}");
        let reason = job["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("dependency failed"), "job {id}: {reason:?}");
        assert!(
            job["started_at"].is_null() && job["exit_code"].is_null(),
            "{job:#}"
        );
    }
    assert!(!b.path("never-ran").exists() && !b.path("never2-ran").exists());
    assert!(b.path("anyway-ran").exists());
    assert!(millis(&b.job(anyway)["started_at"]) >= millis(&b.job(bad)["ended_at"]));
}

#[test]
fn short_jobs_backfill_but_unlimited_ones_do_not() {
    let b = Baton::start(2);
    // Holds one GPU, guaranteed to end within 60 s.
    let holder = b.submit_sh(
        &["--gpus", "1", "--time-limit", "60s"],
        &wait_for_file("release"),
    );
    b.wait_running(holder);
    // The head of the queue needs both GPUs: it gets the reservation for when the holder ends.
    let head = b.submit_sh(&["--gpus", "2", "--name", "head"], "echo head >> order");
    let reason = b.wait_reason(head);
    assert!(reason.starts_with("resources"), "head job: {reason:?}");
    // Fits on the free GPU but has no time limit, so it could delay the head: it must wait.
    let unlimited = b.submit_sh(
        &["--gpus", "1", "--name", "unlimited"],
        "echo unlimited >> order",
    );
    let reason = b.wait_reason(unlimited);
    assert!(reason.starts_with("priority"), "unlimited job: {reason:?}");
    // Ends (by its limit) long before the head's reservation: it may start now.
    let short = b.submit_sh(
        &["--gpus", "1", "--time-limit", "5s", "--name", "short"],
        "echo short >> order",
    );
    let out = b.wait(&[short], "10s");
    assert_eq!(
        out.code,
        0,
        "the short job was not backfilled: {:#}",
        b.job(short)
    );
    assert_eq!(b.state(holder), "running");
    assert_eq!(b.state(head), "queued");
    let job = b.job(unlimited);
    assert_eq!(job["state"], "queued", "{job:#}");
    let reason = job["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("priority"),
        "unlimited job after the backfill: {reason:?}"
    );

    // Once the holder ends the head runs, and only then the unlimited job.
    b.touch("release");
    b.wait_ok(&[holder, head, unlimited]);
    assert_eq!(b.read("order"), "short\nhead\nunlimited\n");
}

#[test]
fn status_predicts_when_queued_jobs_start_from_time_limits() {
    let b = Baton::start(1);
    let a = b.submit(&["--gpus", "1", "--time-limit", "10m", "--", "sleep", "300"]);
    let started = common::millis(&b.wait_running(a)["started_at"]);
    let second = b.submit(&["--gpus", "1", "--time-limit", "5m", "--", "true"]);
    let unbounded = b.submit(&["--gpus", "1", "--", "true"]);
    let last = b.submit(&["--gpus", "1", "--time-limit", "1m", "--", "true"]);
    let jobs = b.run(&["status", "--json"]).expect(0).json();
    let predicted = |id: u64| {
        jobs.as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .map(|j| j["predicted_start"].clone())
            .unwrap()
    };
    let at = |v: serde_json::Value| common::millis(&v);
    // Within a second of "job a's start plus its limit", and so on down the queue.
    assert!(
        (at(predicted(second)) - (started + 600_000)).abs() < 1_000,
        "{jobs:#}"
    );
    assert!(
        (at(predicted(unbounded)) - (started + 900_000)).abs() < 1_000,
        "{jobs:#}"
    );
    assert!(
        predicted(last).is_null(),
        "no bound behind a job without a limit: {jobs:#}"
    );
    let table = b.run(&["status"]).expect(0).stdout;
    assert!(table.contains("starts within 14m"), "{table}");
}
