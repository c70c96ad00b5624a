//! `baton mcp` driven by a real MCP client: the official Python SDK (`pip install mcp`), which
//! `.ci/run` installs into `target/mcp-venv`. It initialises, lists the tools, submits a job on
//! simulated GPUs, waits for it, reads its report, status, logs and the GPUs, cancels another job,
//! and sends malformed arguments, which must come back as tool errors.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{Baton, run_cmd};
use serde_json::Value;

/// The Python with the MCP SDK: `BATON_TEST_PYTHON`, else the venv `.ci/run` makes.
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BATON_TEST_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv/bin/python");
    let ok = Command::new(&venv)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(venv)
}

#[test]
fn an_mcp_client_submits_waits_reads_the_report_and_gets_clear_errors() {
    let Some(python) = python() else {
        assert!(
            std::env::var_os("BATON_REQUIRE_AGENT_CLIS").is_none(),
            "the MCP SDK is required (BATON_REQUIRE_AGENT_CLIS is set) but target/mcp-venv has none"
        );
        eprintln!("skipping: no Python with the MCP SDK (run .ci/run, or set BATON_TEST_PYTHON)");
        return;
    };
    let b = Baton::start(2);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .arg(&b.bin)
        .arg(&b.work)
        .env("BATON_HOME", &b.home)
        .env_remove("BATON_SOCKET")
        // The MCP server's own agent context: as Claude Code passes it to the servers it starts.
        .env("CLAUDE_CODE_SESSION_ID", "mcp-session")
        .env_remove("CLAUDE_CODE_MESSAGING_SOCKET")
        .env_remove("TMUX")
        .env_remove("TMUX_PANE")
        .env_remove("CODEX_THREAD_ID");
    let out = run_cmd(cmd);
    assert_eq!(
        out.code,
        0,
        "the MCP client failed: {out:?}\ndaemon log:\n{}",
        b.daemon_log()
    );
    let seen: Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));

    assert_eq!(seen["server"], "baton");
    assert!(
        seen["instructions"]
            .as_str()
            .unwrap()
            .contains("Do not poll")
    );
    let tools = seen["tools"].as_object().unwrap();
    for name in [
        "submit_job",
        "job_status",
        "list_jobs",
        "job_report",
        "job_logs",
        "cancel_job",
        "requeue_job",
        "signal_job",
        "wait_for_jobs",
        "gpu_status",
        "usage",
        "reservations",
        "submit_sweep",
        "sweep_status",
    ] {
        assert!(
            tools.contains_key(name),
            "tool {name} missing: {:?}",
            tools.keys()
        );
    }
    let submit = &tools["submit_job"];
    assert!(
        submit["description"].as_str().unwrap().contains("STOP"),
        "{submit}"
    );
    let props = submit["schema"]["properties"].as_object().unwrap();
    for p in [
        "command",
        "gpus",
        "gpu_mem",
        "name",
        "priority",
        "after",
        "time_limit",
        "retries",
        "tags",
        "notify",
        "cwd",
        "env",
        "request_id",
        "array",
    ] {
        assert!(props.contains_key(p), "submit_job has no {p}: {props:?}");
    }
    let sweep_props = tools["submit_sweep"]["schema"]["properties"]
        .as_object()
        .unwrap();
    for p in [
        "command",
        "sweep",
        "runs",
        "max_parallel",
        "rank_by",
        "on_failure",
    ] {
        assert!(sweep_props.contains_key(p), "submit_sweep has no {p}");
    }

    // A sweep through MCP: 4 runs queued as one unit, one comparison ranked by val_acc.
    let sweep = &seen["sweep"];
    assert_eq!(sweep["is_error"], false, "{sweep}");
    assert_eq!(sweep["json"]["runs"], 4, "{sweep}");
    assert_eq!(sweep["json"]["max_parallel"], 2, "{sweep}");
    assert!(
        sweep["text"]
            .as_str()
            .unwrap()
            .contains("one comparison report"),
        "{sweep}"
    );
    assert_eq!(
        seen["sweep_wait"]["json"]["done"], true,
        "{}",
        seen["sweep_wait"]
    );
    let status = &seen["sweep_status"];
    let rows = status["json"]["comparison"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{status}");
    assert_eq!(
        rows[0]["params"],
        serde_json::json!([["lr", "2"], ["bs", "4"]]),
        "{status}"
    );
    assert!(
        status["text"]
            .as_str()
            .unwrap()
            .contains("best val_acc 0.24"),
        "{status}"
    );
    let array = &seen["array"];
    assert_eq!(array["is_error"], false, "{array}");
    assert_eq!(array["json"]["kind"], "array", "{array}");
    assert_eq!(array["json"]["runs"], 4, "{array}");
    let bad_sweep = seen["bad_sweep"].as_object().unwrap();
    for (case, result) in bad_sweep {
        assert_eq!(result["is_error"], true, "{case}: {result}");
    }
    assert!(
        bad_sweep["placeholder"]["text"]
            .as_str()
            .unwrap()
            .contains("{typo}"),
        "{}",
        bad_sweep["placeholder"]
    );

    let submitted = &seen["submit"];
    assert_eq!(submitted["is_error"], false, "{submitted}");
    let job = &submitted["json"];
    assert_eq!(job["name"], "mcp-job");
    assert_eq!(
        job["session"], "claude:mcp-session",
        "the job carries the server's session"
    );
    assert_eq!(
        job["cwd"],
        b.work.canonicalize().unwrap().display().to_string()
    );
    // This session has no channel that wakes it (no inbox socket): the answer says so, and
    // what to do instead.
    assert_eq!(job["wakes_caller"], false, "{job}");
    let text = submitted["text"].as_str().unwrap();
    assert!(text.contains("Nothing there wakes an agent"), "{text}");
    assert!(
        text.contains(&format!("baton wait {}", job["id"])),
        "{text}"
    );
    assert!(!text.contains("no need to poll"), "{text}");
    assert!(
        seen["instructions"]
            .as_str()
            .unwrap()
            .contains("will not come to you by itself"),
        "{}",
        seen["instructions"]
    );
    // In a Claude Code session with an inbox it does.
    let in_claude = &seen["submit_in_claude"];
    assert_eq!(in_claude["json"]["wakes_caller"], true, "{in_claude}");
    assert!(
        in_claude["text"]
            .as_str()
            .unwrap()
            .contains("you will be woken"),
        "{in_claude}"
    );
    assert!(
        seen["instructions_in_claude"]
            .as_str()
            .unwrap()
            .contains("wakes you when they end"),
        "{}",
        seen["instructions_in_claude"]
    );

    let wait = &seen["wait"];
    assert_eq!(wait["json"]["done"], true, "{wait}");
    assert!(
        wait["text"].as_str().unwrap().contains("succeeded"),
        "{wait}"
    );
    let report = &seen["report"];
    assert_eq!(report["json"]["report"]["state"], "succeeded", "{report}");
    assert!(
        report["text"].as_str().unwrap().contains("loss=0.25"),
        "{report}"
    );
    assert!(
        report["text"].as_str().unwrap().contains("out.txt"),
        "files written: {report}"
    );
    assert_eq!(seen["status"]["json"]["state"], "succeeded");
    let logs = seen["logs"]["text"].as_str().unwrap();
    assert!(
        logs.contains("untrusted") && logs.contains("step=10 loss=0.25"),
        "{logs}"
    );
    let mine: Vec<u64> = seen["list_mine"]["json"]["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert!(mine.contains(&job["id"].as_u64().unwrap()), "{mine:?}");
    assert_eq!(seen["gpus"]["json"]["gpus"].as_array().unwrap().len(), 2);
    let wf = &seen["workflow"];
    assert_eq!(wf["is_error"], false, "{wf}");
    assert_eq!(wf["json"]["critical_path"], serde_json::json!(["a", "b"]));
    assert_eq!(
        seen["workflow_wait"]["json"]["done"], true,
        "{}",
        seen["workflow_wait"]
    );

    assert_eq!(seen["cancel"]["is_error"], false, "{}", seen["cancel"]);
    assert_eq!(
        seen["wait_cancelled"]["json"]["jobs"][0]["state"],
        "cancelled"
    );
    let short = &seen["short_wait"];
    assert_eq!(short["json"]["done"], false, "{short}");
    let text = short["text"].as_str().unwrap();
    assert!(text.contains("still running"), "{short}");
    assert!(text.contains("nothing will wake you"), "{short}");
    // A wait of 4 s told the client it was alive, with a progress token it sent.
    let progress = seen["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "progress notifications: {progress:?}");
    assert_eq!(progress[0]["total"], 4.0, "{progress:?}");
    assert_eq!(seen["progress_wait"]["json"]["done"], false);

    let bad = seen["bad"].as_object().unwrap();
    let expect = [
        ("missing_command", "missing field `command`"),
        ("wrong_type", "invalid arguments for job_status"),
        ("unknown_field", "unknown field `verbose`"),
        ("too_many_gpus", "asked for 99 GPUs; this machine has 2"),
        ("bad_duration", "time_limit"),
        ("no_such_job", "job 9999 does not exist"),
        ("bad_state", "unknown state \"sleeping\""),
        ("bad_workflow", "line 3, column 3"),
        ("workflow_both", "exactly one of `path` and `yaml`"),
    ];
    for (case, words) in expect {
        let r = &bad[case];
        assert_eq!(r["is_error"], true, "{case}: {r}");
        assert!(r["text"].as_str().unwrap().contains(words), "{case}: {r}");
    }
    assert_eq!(
        seen["alive_after"]["is_error"], false,
        "the server died after bad input"
    );
    // Logs went to stderr only: the protocol on stdout stayed clean (the client parsed it all).
    assert!(!out.stdout.contains("INFO"), "{}", out.stdout);
}
