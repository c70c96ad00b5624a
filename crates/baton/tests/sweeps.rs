//! Sweeps and arrays end to end (issue 16): a daemon on simulated GPUs, real processes printing
//! real-shaped metrics, `baton submit --array/--sweep/--sweep-file`, `baton sweep wait` (a held
//! request: no polling), the one comparison report in the inbox, the early alert, refusals that
//! queue nothing, idempotent resubmission, and workflow matrices with `BATON_DEPS_JSON`.

mod common;

use common::Baton;
use serde_json::Value;

/// Submits a sweep (`baton submit ARGS`) and returns its id.
#[track_caller]
fn sweep(b: &Baton, args: &[&str]) -> u64 {
    let mut full = vec!["submit"];
    full.extend_from_slice(args);
    let out = b.run(&full).expect(0);
    out.stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("submit printed {:?}, not a sweep id", out.stdout))
}

fn status(b: &Baton, id: u64) -> Value {
    b.run(&["sweep", "status", &id.to_string(), "--json"])
        .expect(0)
        .json()
}

fn count(text: &str, needle: &str) -> usize {
    text.matches(needle).count()
}

#[test]
fn an_array_gives_each_run_its_index_and_runs_at_most_k_at_once() {
    let b = Baton::start(4);
    let id = sweep(
        &b,
        &[
            "--array",
            "0-7:2%2",
            "--",
            "sh",
            "-c",
            "echo \"$BATON_ARRAY_ID $BATON_ARRAY_INDEX $SLURM_ARRAY_TASK_ID {index}\" > idx.{index}; \
             s=$(date +%s%N); sleep 0.3; e=$(date +%s%N); echo \"$s $e\" > span.{index}",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("all 4 succeeded"), "{out:?}");
    let mut spans: Vec<(i64, i64)> = Vec::new();
    for index in [0, 2, 4, 6] {
        assert_eq!(
            b.read(&format!("idx.{index}")).trim(),
            format!("{id} {index} {index} {index}")
        );
        let span = b.read(&format!("span.{index}"));
        let mut parts = span.split_whitespace().map(|p| p.parse::<i64>().unwrap());
        spans.push((parts.next().unwrap(), parts.next().unwrap()));
    }
    assert!(!b.path("idx.1").exists(), "index 1 is not in 0-7:2");
    // At no run's start were more than two running.
    for (start, _) in &spans {
        let at_once = spans
            .iter()
            .filter(|(s, e)| s <= start && start < e)
            .count();
        assert!(at_once <= 2, "{at_once} runs at once: {spans:?}");
    }
    let view = status(&b, id);
    assert_eq!(view["kind"], "array");
    assert_eq!(view["max_parallel"], 2);
    assert_eq!(view["counts"]["succeeded"], 4);
    // `baton status` shows the sweep as one line; --expand shows its runs.
    let shown = b.run(&["status"]).expect(0).stdout;
    assert!(shown.contains(&format!("sweep {id} ")), "{shown}");
    assert!(!shown.contains("sh[0]"), "{shown}");
    let expanded = b.run(&["status", "--expand"]).expect(0).stdout;
    assert!(expanded.contains("sh[6]"), "{expanded}");
}

#[test]
fn a_sweep_wakes_once_with_one_comparison_of_all_its_runs() {
    let b = Baton::start(4);
    let inbox = b.path("sweep-inbox.md");
    let notify = format!("file:{}", inbox.display());
    let id = sweep(
        &b,
        &[
            "--sweep",
            "lr=1e-4,3e-4,1e-3",
            "--sweep",
            "bs=32,64",
            "--rank-by",
            "val_acc",
            "--notify",
            &notify,
            "--",
            "sh",
            "-c",
            "echo \"lr=$BATON_PARAM_LR\" > params.{index}; \
             if [ {bs} = 64 ]; then echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1; fi; \
             echo 'epoch 3/3 loss=0.41 val_acc=0.8{index}'",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string()]);
    assert_eq!(out.code, 1, "some runs failed: {out:?}");
    // The product, the last parameter fastest: run 4 is lr=1e-3, bs=32.
    assert_eq!(b.read("params.4").trim(), "lr=1e-3");
    let view = status(&b, id);
    let rows = view["comparison"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    assert_eq!(
        rows[0]["params"],
        serde_json::json!([["lr", "1e-3"], ["bs", "32"]]),
        "{view:#}"
    );
    assert_eq!(rows[0]["rank"], 1);
    // One comparison in the inbox, and no run's own report.
    common::wait_contains(&inbox, &format!("[end of baton report for sweep {id}]"));
    let text = std::fs::read_to_string(&inbox).unwrap();
    assert_eq!(
        count(
            &text,
            &format!("[baton] sweep {id} (lr x bs) ended: failed")
        ),
        1,
        "{text}"
    );
    assert_eq!(count(&text, "[baton] job "), 0, "{text}");
    assert!(count(&text, "(lr x bs) looks broken") <= 1, "{text}");
    assert!(
        text.contains("best val_acc 0.84 at lr=1e-3 bs=32"),
        "{text}"
    );
    assert!(text.contains("all 3 runs with bs=64"), "{text}");
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(b.home.join(format!("sweeps/{id}/report.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(stored["rows"].as_array().unwrap().len(), 6);
}

#[test]
fn a_broken_sweep_wakes_at_once_and_on_failure_stop_cancels_the_rest() {
    let b = Baton::start(2);
    let inbox = b.path("broken-inbox.md");
    let notify = format!("file:{}", inbox.display());
    let id = sweep(
        &b,
        &[
            "--array",
            "0-7",
            "--max-parallel",
            "1",
            "--on-failure",
            "stop",
            "--notify",
            &notify,
            "--",
            "sh",
            "-c",
            "echo 'starting'; exit 3",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string()]);
    assert_eq!(out.code, 1, "{out:?}");
    let view = status(&b, id);
    let failed = view["counts"]["failed"].as_u64().unwrap_or(0);
    let cancelled = view["counts"]["cancelled"].as_u64().unwrap_or(0);
    assert!(failed >= 3 && cancelled >= 1, "{view:#}");
    assert_eq!(failed + cancelled, 8, "{view:#}");
    assert!(view["alerted_at"].is_string(), "{view:#}");
    common::wait_contains(&inbox, &format!("[end of baton report for sweep {id}]"));
    let text = std::fs::read_to_string(&inbox).unwrap();
    assert_eq!(
        count(&text, &format!("[baton] sweep {id} (sh) looks broken")),
        1,
        "{text}"
    );
    assert!(text.contains("exit code 3"), "{text}");
}

#[test]
fn bad_sweeps_are_refused_and_queue_nothing() {
    let b = Baton::start(1);
    let out = b.run(&[
        "submit", "--sweep", "lr=1,2", "--", "echo", "{lr}", "{typo}",
    ]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("{typo}"), "{out:?}");
    std::fs::write(b.path("runs.jsonl"), "{\"lr\": 1}\n{\"lr\": }\n").unwrap();
    let out = b.run(&["submit", "--sweep-file", "runs.jsonl", "--", "echo", "{lr}"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("runs.jsonl:2:"), "{out:?}");
    let out = b.run(&["submit", "--array", "0-10000", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("more than the 10000 allowed"),
        "{out:?}"
    );
    let out = b.run(&["submit", "--array", "9-1", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    let out = b.run(&["submit", "--max-parallel", "2", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    let listed = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(listed, serde_json::json!([]), "nothing queued");
}

#[test]
fn a_resent_sweep_is_not_queued_twice() {
    let b = Baton::start(1);
    let args = [
        "--request-id",
        "sweep-key-1",
        "--array",
        "0-2",
        "--",
        "true",
    ];
    let first = sweep(&b, &args);
    let again = sweep(&b, &args);
    assert_eq!(first, again);
    assert_eq!(b.run(&["sweep", "wait", &first.to_string()]).code, 0);
    let listed = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed:#}");
}

#[test]
fn matrix_tasks_get_their_parameters_and_the_aggregate_step_reads_them() {
    let b = Baton::start(2);
    std::fs::write(
        b.path("seeds.yaml"),
        "name: seeds\n\
         tasks:\n  \
           train:\n    \
             command: sh -c 'echo \"val_acc=0.9{seed} lr=$BATON_PARAM_LR\"'\n    \
             matrix:\n      seed: [1, 2, 3]\n      lr: [1e-4]\n  \
           aggregate:\n    \
             command: python3 -c \"import json,os; d=json.load(open(os.environ['BATON_DEPS_JSON'])); print(sorted((p['task'], p['params']['seed'], p['state'], os.path.exists(p['report_json'])) for p in d['deps']))\"\n    \
             after: [train]\n",
    )
    .unwrap();
    b.run(&["workflow", "submit", "seeds.yaml"]).expect(0);
    b.wait_ok(&[1, 2, 3, 4]);
    let stdout = std::fs::read_to_string(b.home.join("jobs/4/stdout")).unwrap();
    assert_eq!(
        stdout.trim(),
        "[('train.0', '1', 'succeeded', True), ('train.1', '2', 'succeeded', True), \
         ('train.2', '3', 'succeeded', True)]"
    );
    let first = std::fs::read_to_string(b.home.join("jobs/1/stdout")).unwrap();
    assert_eq!(first.trim(), "val_acc=0.91 lr=1e-4");
}
