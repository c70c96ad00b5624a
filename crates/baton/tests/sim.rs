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
