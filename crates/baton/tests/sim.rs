//! `baton sim` on the shipped trace (`../shared/traces/`), through the real binary: every policy
//! replays every schedulable pod, and the policies rank as the scheduler's design says they
//! should; and the synthetic workflow comparison: atomic admission never deadlocks.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::run_cmd;
use serde_json::Value;

fn sim(args: &[&str]) -> Value {
    let mut cmd = Command::new(common::BIN);
    cmd.arg("sim").args(args).arg("--json");
    let out = run_cmd(cmd).expect(0);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

#[test]
fn the_shipped_trace_replays_under_every_policy() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/alibaba-gpu-v2023-openb_pod_list_default.csv");
    assert!(
        trace.exists(),
        "the shipped trace is missing: {}",
        trace.display()
    );
    let report = sim(&["--trace", &trace.display().to_string()]);
    assert_eq!(report["trace"]["rows"], 8152, "{report:#}");
    let jobs = report["trace"]["jobs"].as_u64().unwrap();
    let policies = report["policies"].as_array().unwrap();
    let by = |name: &str| {
        policies
            .iter()
            .find(|p| p["policy"] == name)
            .unwrap_or_else(|| panic!("{name}"))
    };
    for name in ["fifo", "backfill", "baton"] {
        let p = by(name);
        assert_eq!(p["jobs"].as_u64(), Some(jobs), "{name} lost jobs: {p:#}");
        for key in [
            "avg_jct_s",
            "p50_jct_s",
            "p99_jct_s",
            "avg_wait_s",
            "makespan_s",
            "gpu_alloc_rate",
            "fragmentation",
        ] {
            assert!(p[key].is_number(), "{name}: no {key}: {p:#}");
        }
    }
    let avg = |name: &str| by(name)["avg_jct_s"].as_f64().unwrap();
    assert!(
        avg("backfill") < avg("fifo"),
        "backfill should beat fifo: {report:#}"
    );
    assert!(
        avg("baton") < avg("backfill"),
        "baton's policy should beat backfill: {report:#}"
    );
}

#[test]
fn atomic_workflows_never_deadlock_where_greedy_ones_do() {
    let report = sim(&["--workflows", "100", "--seed", "1"]);
    let modes = report["modes"].as_array().unwrap();
    let by = |name: &str| modes.iter().find(|m| m["mode"] == name).unwrap();
    assert_eq!(by("atomic")["deadlocks"], 0, "{report:#}");
    assert_eq!(by("atomic")["completed"], 100);
    assert!(
        by("greedy")["deadlocks"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    assert!(
        by("greedy")["idle_held_gpu_h"].as_f64().unwrap()
            > by("atomic")["idle_held_gpu_h"].as_f64().unwrap(),
        "{report:#}"
    );
    // Locality: chained tasks that prefer their predecessors' node keep more edges local.
    assert_eq!(by("chained")["completed"], 100);
    assert!(
        by("chained")["local_edges"].as_f64().unwrap()
            > by("chained-no-locality")["local_edges"].as_f64().unwrap(),
        "{report:#}"
    );
}

/// Issue 19: the shipped trace replayed with a GPU-hour budget and a reservation, each policy
/// beside itself without them: the budget holds jobs back, the reservation runs its user's jobs
/// in its window, and what the rules did is reported.
#[test]
fn the_shipped_trace_replays_with_a_budget_and_a_reservation() {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/alibaba-gpu-v2023-openb_pod_list_default.csv")
        .display()
        .to_string();
    let rules = [
        "--trace",
        &trace,
        "--policy",
        "baton",
        "--budget",
        "300",
        "--reserve-gpus",
        "8",
        "--reserve-start",
        "130d",
        "--reserve-duration",
        "3d",
    ];
    let report = sim(&rules);
    assert_eq!(report["rules"]["budget"]["gpu_hours"], 300.0, "{report:#}");
    assert_eq!(report["rules"]["users"], 10, "{report:#}");
    let runs = report["policies"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "without and with the rules: {report:#}");
    let (plain, ruled) = (&runs[0], &runs[1]);
    assert!(plain.get("rules").is_none(), "{plain:#}");
    let effect = &ruled["rules"];
    let n = |v: &Value| v.as_u64().unwrap();
    assert!(n(&effect["held_by_budget"]) > 0, "{effect:#}");
    assert!(n(&effect["reserved"]) > 0, "{effect:#}");
    assert_eq!(
        n(&effect["reserved_ran"]) + n(&effect["reserved_missed"]),
        n(&effect["reserved"]),
        "{effect:#}"
    );
    // Every job ran but those the window ended before they could start.
    assert_eq!(
        n(&ruled["jobs"]) + n(&effect["reserved_missed"]),
        n(&plain["jobs"]),
        "{report:#}"
    );
    // A budget of 300 GPU-hours a week per user keeps GPU jobs waiting.
    assert!(
        ruled["avg_wait_s"].as_f64() > plain["avg_wait_s"].as_f64(),
        "{report:#}"
    );
    // The table says it in words.
    let mut cmd = Command::new(common::BIN);
    cmd.arg("sim").args(rules);
    let text = run_cmd(cmd).expect(0).stdout;
    assert!(text.contains("baton + rules"), "{text}");
    assert!(
        text.contains(
            "rules (10 synthetic users): a budget of 300 GPU-hours per user per week; \
             a reservation of 8 GPUs for user0"
        ) && text.contains("jobs waited for their owner's budget"),
        "{text}"
    );
    // Rules that cannot be: refused with what is wrong.
    for (bad, why) in [
        (&["--budget", "0"][..], "--budget must be a positive number"),
        (
            &["--reserve-gpus", "9", "--reserve-duration", "1d"][..],
            "only 8 are free",
        ),
        (&["--users", "3"][..], "use it with one"),
        (
            &[
                "--users",
                "2",
                "--reserve-gpus",
                "1",
                "--reserve-duration",
                "1d",
                "--reserve-user",
                "2",
            ][..],
            "one of 0 to 1",
        ),
    ] {
        let mut cmd = Command::new(common::BIN);
        cmd.arg("sim").args(["--trace", &trace]).args(bad);
        let out = run_cmd(cmd).expect(2);
        assert!(out.stderr.contains(why), "{bad:?}: {out:?}");
    }
}
