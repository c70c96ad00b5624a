//! Sweeps and arrays end to end (issue 16): a daemon on simulated GPUs, real processes printing
//! real-shaped metrics, `baton submit --array/--sweep/--sweep-file`, `baton sweep wait` (a held
//! request: no polling), the one comparison report in the inbox, the early alert, refusals that
//! queue nothing, idempotent resubmission, and workflow matrices with `BATON_DEPS_JSON`.

mod common;

use common::Baton;
use serde_json::{Value, json};

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

#[track_caller]
fn nothing_queued(b: &Baton) {
    let listed = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(listed, serde_json::json!([]), "nothing queued");
}

#[test]
fn a_sweep_file_queues_the_product_and_ranks_by_its_rank_by() {
    let b = Baton::start(2);
    let inbox = b.path("file-inbox.md");
    // loss:min ranks lr=1 bs=3 first; val_acc (the default) would rank lr=2 bs=4 first.
    std::fs::write(
        b.path("sweep.yaml"),
        "# lr x bs, written down\n\
         sweep:\n  \
           name: grid\n  \
           command: >-\n    \
             echo \"$BATON_PARAM_LR $BATON_PARAM_BS {lr} {bs} {index}\" > seen.{index};\n    \
             echo 'epoch 1/1 loss=0.{lr}{bs} val_acc=0.{bs}{lr}'\n  \
           parameters:\n    \
             lr: [1, 2]\n    \
             bs: [3, 4]\n  \
           max_parallel: 2\n  \
           rank_by: loss:min\n  \
           env: {SWEEP_FILE_VAR: here}\n",
    )
    .unwrap();
    let notify = format!("file:{}", inbox.display());
    let args = [
        "sweep",
        "submit",
        "sweep.yaml",
        "--notify",
        &notify,
        "--request-id",
        "file-key-1",
    ];
    let out = b.run(&args).expect(0);
    let id: u64 = out
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{out:?}"));
    assert!(out.stderr.contains("4 runs"), "{out:?}");
    // The same request id: the same sweep, not a second one.
    let again: u64 = b.run(&args).expect(0).stdout.trim().parse().unwrap();
    assert_eq!(again, id);
    let out = b.run(&["sweep", "wait", &id.to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    // The product, the last parameter fastest; placeholders and BATON_PARAM_* alike.
    for (index, (lr, bs)) in [(1, 3), (1, 4), (2, 3), (2, 4)].into_iter().enumerate() {
        assert_eq!(
            b.read(&format!("seen.{index}")).trim(),
            format!("{lr} {bs} {lr} {bs} {index}")
        );
    }
    let view = status(&b, id);
    assert_eq!(view["name"], "grid");
    assert_eq!(view["runs"], 4);
    assert_eq!(view["max_parallel"], 2);
    assert_eq!(view["rank_by"], "loss:min");
    assert_eq!(view["params"], serde_json::json!(["lr", "bs"]));
    let rows = view["comparison"]["rows"].as_array().unwrap();
    let first = rows.iter().find(|r| r["rank"] == 1).unwrap();
    assert_eq!(
        first["params"],
        serde_json::json!([["lr", "1"], ["bs", "3"]]),
        "{view:#}"
    );
    let listed = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(listed.as_array().unwrap().len(), 4, "{listed:#}");
    let job = b.job(view["jobs"][0].as_u64().unwrap());
    assert_eq!(job["name"], "grid[0]");
    common::wait_contains(&inbox, &format!("[end of baton report for sweep {id}]"));
    let text = std::fs::read_to_string(&inbox).unwrap();
    assert_eq!(
        count(&text, &format!("[baton] sweep {id} (grid) ended")),
        1,
        "{text}"
    );
    assert!(text.contains("best loss 0.13 at lr=1 bs=3"), "{text}");
}

/// A sweep file's `stop_on` is each run's `--stop-on`: a run whose loss turns NaN is stopped.
#[test]
fn a_sweep_files_stop_on_stops_a_run_whose_loss_turns_nan() {
    let b = Baton::start(2);
    std::fs::write(
        b.path("nan.yaml"),
        "sweep:\n  \
           command: \"echo 'step 3 loss=nan'; sleep 60\"\n  \
           array: 0-1\n  \
           stop_on: [nan]\n",
    )
    .unwrap();
    let out = b.run(&["sweep", "submit", "nan.yaml"]).expect(0);
    let id: u64 = out
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{out:?}"));
    let out = b.run(&["sweep", "wait", &id.to_string()]);
    assert_eq!(out.code, 1, "the runs failed: {out:?}");
    for job in status(&b, id)["jobs"].as_array().unwrap() {
        let job = b.job(job.as_u64().unwrap());
        assert_eq!(job["state"], "failed", "{job:#}");
        assert_eq!(
            job["reason"], "stopped by baton: its loss became NaN or infinite (--stop-on nan)",
            "{job:#}"
        );
    }
}

/// A sweep file's milestones are each run's: `stop_when` stops a run that diverges, the other
/// runs on; `wake_when` is recorded on the run that met it (a sweep's runs wake their
/// submitter only through the sweep, unless `notify_each`).
#[test]
fn a_sweep_files_milestones_are_each_runs() {
    let b = Baton::start(2);
    std::fs::write(
        b.path("diverge.yaml"),
        "sweep:\n  \
           command: \"echo \\\"loss={loss} val_acc=0.95\\\"; sleep 3\"\n  \
           parameters:\n    loss: [0.3, 42]\n  \
           wake_when: [val_acc>=0.9]\n  \
           stop_when: ['loss>10']\n",
    )
    .unwrap();
    let out = b.run(&["sweep", "submit", "diverge.yaml"]).expect(0);
    let id: u64 = out
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{out:?}"));
    let out = b.run(&["sweep", "wait", &id.to_string()]);
    assert_eq!(out.code, 1, "one run failed: {out:?}");
    let jobs: Vec<Value> = status(&b, id)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| b.job(j.as_u64().unwrap()))
        .collect();
    assert_eq!(jobs[0]["state"], "succeeded", "{:#}", jobs[0]);
    assert_eq!(jobs[1]["state"], "failed", "{:#}", jobs[1]);
    assert_eq!(
        jobs[1]["reason"], "stopped by baton: it met --stop-when 'loss>10'",
        "{:#}",
        jobs[1]
    );
    for job in &jobs {
        let first = &job["alerts"][0];
        assert_eq!(
            (&first["detector"], &first["action"]),
            (&json!("milestone-1"), &json!("note")),
            "{job:#}"
        );
    }
}

#[test]
fn a_bad_sweep_file_is_refused_at_its_line_and_column_and_queues_nothing() {
    let b = Baton::start(1);
    std::fs::write(
        b.path("bad.yaml"),
        "sweep:\n  command: echo {lr}\n  parameters:\n    lr: [1, 2]\n  gpu: 1\n",
    )
    .unwrap();
    let out = b.run(&["sweep", "submit", "bad.yaml"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("bad.yaml:5:3: sweep: unknown field `gpu`, expected one of"),
        "{out:?}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
    std::fs::write(
        b.path("typo.yaml"),
        "sweep:\n  command: [echo, \"{lrr}\"]\n  parameters:\n    lr: [1, 2]\n",
    )
    .unwrap();
    let out = b.run(&["sweep", "submit", "typo.yaml"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("typo.yaml:2:3: command: {lrr}"),
        "{out:?}"
    );
    std::fs::write(
        b.path("both.yaml"),
        "sweep:\n  command: [true]\n  array: 0-3\n  runs:\n    - {a: 1}\n",
    )
    .unwrap();
    let out = b.run(&["sweep", "submit", "both.yaml"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("both.yaml:4:3: runs: give only one"),
        "{out:?}"
    );
    let out = b.run(&["sweep", "submit", "missing.yaml"]);
    assert_eq!(out.code, 2, "{out:?}");
    nothing_queued(&b);
}

#[test]
fn grid_and_file_runs_see_their_parameters() {
    let b = Baton::start(2);
    let id = sweep(
        &b,
        &[
            "--sweep",
            "opt=sgd,adam",
            "--sweep",
            "seed=1,2",
            "--",
            "sh",
            "-c",
            "echo \"{opt} {seed} $BATON_PARAM_OPT $BATON_PARAM_SEED $BATON_SWEEP_ID\" > grid.{index}",
        ],
    );
    assert_eq!(b.run(&["sweep", "wait", &id.to_string()]).code, 0);
    for (index, (opt, seed)) in [("sgd", 1), ("sgd", 2), ("adam", 1), ("adam", 2)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(
            b.read(&format!("grid.{index}")).trim(),
            format!("{opt} {seed} {opt} {seed} {id}")
        );
    }
    std::fs::write(
        b.path("runs.jsonl"),
        "{\"lr\": \"3e-4\", \"tag\": \"a b\"}\n\n{\"lr\": 0.001, \"tag\": \"c\"}\n",
    )
    .unwrap();
    let id = sweep(
        &b,
        &[
            "--sweep-file",
            "runs.jsonl",
            "--",
            "sh",
            "-c",
            "echo \"{lr}|$BATON_PARAM_LR|$BATON_PARAM_TAG\" > file.{index}",
            "{tag}",
        ],
    );
    assert_eq!(b.run(&["sweep", "wait", &id.to_string()]).code, 0);
    assert_eq!(b.read("file.0").trim(), "3e-4|3e-4|a b");
    assert_eq!(b.read("file.1").trim(), "0.001|0.001|c");
    let view = status(&b, id);
    assert_eq!(view["params"], serde_json::json!(["lr", "tag"]));
    // The filled placeholder in a word of its own.
    let job = b.job(view["jobs"][0].as_u64().unwrap());
    assert_eq!(job["command"][3], "a b", "{job:#}");
}

#[test]
fn refusals_queue_nothing() {
    let b = Baton::with_config(1, "[sweeps]\nmax_runs = 5\n");
    let refused = |args: &[&str], needle: &str| {
        let out = b.run(args);
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains(needle),
            "{args:?}: {needle:?} not in {out:?}"
        );
    };
    refused(
        &[
            "submit", "--sweep", "lr=1,2", "--", "echo", "{lr}", "{typo}",
        ],
        "word 3 of the command has the placeholder {typo}",
    );
    std::fs::write(b.path("empty.jsonl"), "\n  \n").unwrap();
    refused(
        &["submit", "--sweep-file", "empty.jsonl", "--", "true"],
        "the sweep has no runs",
    );
    refused(
        &["submit", "--sweep", "lr=", "--", "true"],
        "cannot read --sweep \"lr=\"",
    );
    refused(
        &["submit", "--array", "0-5", "--", "true"],
        "the sweep has 6 runs, more than the 5 allowed (`[sweeps] max_runs`)",
    );
    refused(
        &[
            "submit", "--sweep", "a=1,2,3", "--sweep", "b=1,2", "--", "true",
        ],
        "the sweep has 6 runs, more than the 5 allowed",
    );
    std::fs::write(
        b.path("big.yaml"),
        "sweep:\n  command: [true]\n  array: 0-9\n",
    )
    .unwrap();
    refused(&["sweep", "submit", "big.yaml"], "more than the 5 allowed");
    refused(
        &["submit", "--max-parallel", "2", "--", "true"],
        "--max-parallel is for sweeps: add --array, --sweep or --sweep-file",
    );
    std::fs::write(b.path("runs.jsonl"), "{\"lr\": 1}\n{\"lr\" 2}\n").unwrap();
    refused(
        &["submit", "--sweep-file", "runs.jsonl", "--", "echo", "{lr}"],
        "runs.jsonl:2:7: ",
    );
    nothing_queued(&b);
}

#[test]
fn rank_by_orders_the_comparison_and_notify_each_delivers_every_runs_report_too() {
    let b = Baton::start(2);
    let inbox = b.path("each-inbox.md");
    let notify = format!("file:{}", inbox.display());
    let id = sweep(
        &b,
        &[
            "--array",
            "1-3",
            "--rank-by",
            "err:min",
            "--notify-each",
            "--notify",
            &notify,
            "--",
            "sh",
            "-c",
            // err falls with the index, acc rises with it: err:min and acc:max agree.
            "echo \"step 10 err=0.{index}5 acc=0.9{index}\"",
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("best err 0.15"), "{out:?}");
    let view = status(&b, id);
    assert_eq!(view["notify_each"], true);
    let rows = view["comparison"]["rows"].as_array().unwrap();
    let ranked: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r["rank"].as_u64().unwrap(), r["job"].as_u64().unwrap()))
        .collect();
    let jobs: Vec<u64> = view["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_u64().unwrap())
        .collect();
    for (rank, job) in [(1, jobs[0]), (2, jobs[1]), (3, jobs[2])] {
        assert!(ranked.contains(&(rank, job)), "{ranked:?}");
    }
    common::wait_contains(&inbox, &format!("[end of baton report for sweep {id}]"));
    for job in &jobs {
        common::wait_contains(&inbox, &format!("[end of baton report for job {job}]"));
    }
    let text = std::fs::read_to_string(&inbox).unwrap();
    assert_eq!(count(&text, "[end of baton report for job "), 3, "{text}");
    assert_eq!(count(&text, "[end of baton report for sweep "), 1, "{text}");
}

#[test]
fn a_two_thousand_run_array_gives_a_short_comparison_with_every_row() {
    let b = Baton::start(1);
    let id = sweep(&b, &["--array", "0-1999", "--", "true"]);
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "120s"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("all 2000 succeeded"), "{}", out.stdout);
    let markdown = std::fs::read_to_string(b.home.join(format!("sweeps/{id}/report.md"))).unwrap();
    assert!(
        markdown.len() <= 6 * 1024,
        "{} bytes:\n{markdown}",
        markdown.len()
    );
    let stored: Value = serde_json::from_str(
        &std::fs::read_to_string(b.home.join(format!("sweeps/{id}/report.json"))).unwrap(),
    )
    .unwrap();
    let rows = stored["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2000);
    let mut jobs: Vec<u64> = rows.iter().map(|r| r["job"].as_u64().unwrap()).collect();
    jobs.sort();
    jobs.dedup();
    assert_eq!(jobs.len(), 2000, "one row per run");
}

#[test]
fn sweep_status_shows_a_row_per_run_and_cancel_stops_the_rest() {
    let b = Baton::start(1);
    let script = format!("{}; echo done", common::wait_for_file("release.status"));
    let id = sweep(
        &b,
        &[
            "--array",
            "0-3",
            "--max-parallel",
            "1",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let view = status(&b, id);
    let jobs: Vec<u64> = view["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j.as_u64().unwrap())
        .collect();
    assert_eq!(jobs.len(), 4);
    b.wait_running(jobs[0]);
    let shown = b
        .run(&["sweep", "status", &id.to_string()])
        .expect(0)
        .stdout;
    let lines: Vec<&str> = shown.lines().collect();
    assert!(lines[0].contains(&format!("sweep {id}")), "{shown}");
    assert!(
        lines[1].starts_with("JOB") && lines[1].contains("INDEX"),
        "{shown}"
    );
    assert!(lines[1].contains("STATE"), "{shown}");
    assert_eq!(lines.len(), 6, "a header and one row per run:\n{shown}");
    for (index, job) in jobs.iter().enumerate() {
        let row = lines[2..]
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&job.to_string()))
            .unwrap_or_else(|| panic!("no row for job {job}:\n{shown}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[1], index.to_string(), "{shown}");
        let state = if index == 0 { "running" } else { "queued" };
        assert_eq!(cells[2], state, "{shown}");
    }
    let out = b.run(&["sweep", "cancel", &id.to_string()]).expect(0);
    assert!(out.stdout.contains(&format!("sweep {id}")), "{out:?}");
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "30s"]);
    assert_eq!(out.code, 1, "{out:?}");
    let view = status(&b, id);
    assert_eq!(view["state"], "cancelled", "{view:#}");
    assert_eq!(view["counts"]["cancelled"], 4, "{view:#}");
    for job in &jobs[1..] {
        let reason = b.job(*job)["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(reason.contains("before it started"), "job {job}: {reason}");
    }
    assert!(!b.path("release.status").exists());
}

#[test]
fn the_early_alert_comes_while_the_other_runs_go_on() {
    let b = Baton::start(1);
    let inbox = b.path("early-inbox.md");
    let notify = format!("file:{}", inbox.display());
    let script = format!(
        "if [ {{index}} -lt 3 ]; then echo 'RuntimeError: CUDA out of memory. Tried to allocate \
         2.00 GiB' >&2; exit 1; fi; {}; echo 'loss=0.5'",
        common::wait_for_file("release.early")
    );
    let id = sweep(
        &b,
        &[
            "--array",
            "0-5",
            "--on-failure",
            "continue",
            "--notify",
            &notify,
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    // The alert arrives while runs 3 to 5 still wait to be released.
    common::wait_contains(&inbox, &format!("[baton] sweep {id} (sh) looks broken"));
    let view = status(&b, id);
    assert!(view["ended_at"].is_null(), "{view:#}");
    assert!(view["alerted_at"].is_string(), "{view:#}");
    assert_eq!(view["counts"]["failed"], 3, "{view:#}");
    assert!(view["counts"]["cancelled"].is_null(), "{view:#}");
    let text = std::fs::read_to_string(&inbox).unwrap();
    // What failed, with the runs' own cause (each run's report, never a bare exit code while a
    // report is still being built), and that the rest go on.
    assert!(
        text.contains("ended so far: 3 of 6 runs, 3 failed"),
        "{text}"
    );
    assert!(text.contains("CUDA out of memory"), "{text}");
    assert!(!text.contains("exit code 1"), "{text}");
    assert!(text.contains("the other 3 runs go on"), "{text}");
    assert!(
        !text.contains(&format!("[end of baton report for sweep {id}]")),
        "{text}"
    );
    b.touch("release.early");
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "30s"]);
    assert_eq!(out.code, 1, "{out:?}");
    let view = status(&b, id);
    assert_eq!(view["counts"]["succeeded"], 3, "{view:#}");
    assert_eq!(view["counts"]["failed"], 3, "{view:#}");
    common::wait_contains(&inbox, &format!("[end of baton report for sweep {id}]"));
    let text = std::fs::read_to_string(&inbox).unwrap();
    assert_eq!(
        count(&text, &format!("[baton] sweep {id} (sh) looks broken")),
        1,
        "one alert: {text}"
    );
}

#[test]
fn on_failure_stop_cancels_the_rest_after_exactly_the_early_failures_and_says_why() {
    let b = Baton::with_config(1, "[sweeps]\nearly_failures = 3\n");
    // Every run fails the same way; runs 3 and later only once released, which never comes.
    let script = format!(
        "if [ {{index}} -ge 3 ]; then {}; fi; echo 'RuntimeError: CUDA out of memory' >&2; exit 1",
        common::wait_for_file("never.stop")
    );
    let id = sweep(
        &b,
        &[
            "--array",
            "0-7",
            "--max-parallel",
            "4",
            "--on-failure",
            "stop",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let out = b.run(&["sweep", "wait", &id.to_string(), "--timeout", "30s"]);
    assert_eq!(out.code, 1, "{out:?}");
    let view = status(&b, id);
    assert_eq!(view["counts"]["failed"], 3, "{view:#}");
    assert_eq!(view["counts"]["cancelled"], 5, "{view:#}");
    assert_eq!(view["state"], "failed", "{view:#}");
    let why = format!("cancelled by baton (sweep {id} looks broken; --on-failure stop)");
    for job in view["jobs"].as_array().unwrap() {
        let job = b.job(job.as_u64().unwrap());
        if job["state"] == "cancelled" {
            let reason = job["reason"].as_str().unwrap_or_default();
            assert!(reason.starts_with(&why), "{job:#}");
        }
    }
}

#[test]
fn a_sweep_files_runs_work_in_its_directory_or_its_cwd_from_there() {
    let b = Baton::start(1);
    std::fs::create_dir_all(b.path("exp/out")).unwrap();
    std::fs::write(
        b.path("exp/here.yaml"),
        "sweep:\n  command: pwd > where.{index}\n  array: 0-1\n",
    )
    .unwrap();
    std::fs::write(
        b.path("exp/there.yaml"),
        "sweep:\n  command: [sh, -c, \"pwd > where.{index}\"]\n  runs:\n    - {}\n  cwd: out\n",
    )
    .unwrap();
    for file in ["exp/here.yaml", "exp/there.yaml"] {
        let id = b.run(&["sweep", "submit", file]).expect(0).stdout;
        let out = b.run(&["sweep", "wait", id.trim()]);
        assert_eq!(out.code, 0, "{file}: {out:?}");
    }
    let exp = b.path("exp").canonicalize().unwrap();
    assert_eq!(b.read("exp/where.1").trim(), exp.display().to_string());
    assert_eq!(
        b.read("exp/out/where.0").trim(),
        exp.join("out").display().to_string()
    );
}
