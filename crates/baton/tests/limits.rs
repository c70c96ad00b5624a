//! `[limits]` (issue 19) on a daemon of one user: what one user and one agent session hold at
//! once, how many jobs one user queues, how many GPUs one job asks for. A job over a cap waits
//! with a reason that names the cap and holds nobody else up; a request no cap could ever let
//! start is refused at submission. (Two users, and per-user overrides: tests/system.rs.)

mod common;

use common::{Baton, run_cmd};

/// A daemon on `gpus` simulated GPUs with `limits` as its `[limits]` table.
fn start(gpus: u32, limits: &str) -> Baton {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(b.home.join("config.toml"), format!("[limits]\n{limits}")).unwrap();
    let gpus = gpus.to_string();
    b.serve_with(&["serve", "--sim-gpus", &gpus, "--grace", "1s"]);
    b
}

/// Submits `args` from Claude Code session `session`; the job id.
fn submit_in(b: &Baton, session: &str, args: &[&str]) -> u64 {
    let mut full = vec!["submit"];
    full.extend_from_slice(args);
    let mut cmd = b.cmd(full);
    cmd.env("CLAUDE_CODE_SESSION_ID", session);
    run_cmd(cmd).expect(0).stdout.trim().parse().unwrap()
}

#[test]
fn a_user_at_their_gpu_cap_waits_saying_so_and_holds_nobody_else_up() {
    let b = start(4, "max_gpus_per_user = 2\nmax_gpus_per_job = 2\n");
    let first = b.submit(&["--gpus", "2", "--", "sleep", "60"]);
    b.wait_running(first);
    let second = b.submit(&["--gpus", "1", "--", "true"]);
    let reason = b.wait_reason(second);
    assert_eq!(
        reason,
        "limit: root already holds 2 of at most 2 GPUs, and this job asks for 1 GPU \
         ([limits] max_gpus_per_user = 2)"
    );
    // A CPU job is under no GPU cap: it runs while the GPU job waits.
    let cpu = b.submit(&["--", "true"]);
    b.wait_ok(&[cpu]);
    assert_eq!(b.state(second), "queued");
    // Refused at once: over the per-job cap, or over the user's cap on its own.
    let out = b.run(&["submit", "--gpus", "3", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("at most 2 here") && out.stderr.contains("max_gpus_per_job = 2"),
        "{out:?}"
    );
    // `baton usage` says where the user stands.
    let usage = b.run(&["usage", "--json"]).expect(0).json();
    let me = &usage.as_array().unwrap()[0];
    assert_eq!(
        (&me["gpus"], &me["max_gpus"], &me["running"], &me["queued"]),
        (&2.into(), &2.into(), &1.into(), &1.into()),
        "{usage}"
    );
    assert_eq!(me["max_gpus_per_job"], 2, "{usage}");
    let table = b.run(&["usage"]).expect(0).stdout;
    assert!(table.contains("USER") && table.contains(" 2/2 "), "{table}");
    // Once the first ends, the second starts.
    b.run(&["cancel", &first.to_string()]).expect(0);
    b.wait_ok(&[second]);
}

#[test]
fn a_request_over_the_users_cap_on_its_own_is_refused_and_the_queue_is_bounded() {
    let b = start(
        4,
        "max_gpus_per_user = 2\nmax_mem_per_user = \"4G\"\nmax_queued_per_user = 2\n",
    );
    let out = b.run(&["submit", "--gpus", "3", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("can never start")
            && out.stderr.contains("[limits] max_gpus_per_user = 2"),
        "{out:?}"
    );
    let out = b.run(&["submit", "--mem", "8G", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("max_mem_per_user"), "{out:?}");
    let out = b.run(&["submit", "--array", "1-3", "--hold", "--", "true"]);
    assert_eq!(out.code, 2, "three more is over two queued: {out:?}");
    assert!(
        out.stderr.contains("max_queued_per_user = 2") && out.stderr.contains("0 jobs queued"),
        "{out:?}"
    );
    let held: Vec<u64> = (0..2)
        .map(|_| b.submit(&["--hold", "--", "true"]))
        .collect();
    let out = b.run(&["submit", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("2 jobs queued"), "{out:?}");
    let ids: Vec<String> = held.iter().map(u64::to_string).collect();
    let mut args = vec!["cancel"];
    args.extend(ids.iter().map(String::as_str));
    b.run(&args).expect(0);
    b.submit(&["--", "true"]);
}

#[test]
fn an_agent_session_cannot_take_its_users_whole_share() {
    let b = start(4, "max_gpus_per_session = 1\n");
    let first = submit_in(&b, "s1", &["--gpus", "1", "--", "sleep", "60"]);
    b.wait_running(first);
    let second = submit_in(&b, "s1", &["--gpus", "1", "--", "true"]);
    let reason = b.wait_reason(second);
    assert!(
        reason.starts_with("limit: agent session claude:s1 already holds 1 of at most 1 GPU")
            && reason.ends_with("([limits] max_gpus_per_session = 1)"),
        "{reason}"
    );
    // Another session of the same user has a share of its own.
    let other = submit_in(&b, "s2", &["--gpus", "1", "--", "true"]);
    b.wait_ok(&[other]);
    let out = {
        let mut cmd = b.cmd(["submit", "--gpus", "2", "--", "true"]);
        cmd.env("CLAUDE_CODE_SESSION_ID", "s1");
        run_cmd(cmd)
    };
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("max_gpus_per_session = 1"), "{out:?}");
    b.run(&["cancel", &first.to_string()]).expect(0);
    b.wait_ok(&[second]);
}

#[test]
fn an_atomic_workflow_over_the_cap_as_a_whole_is_refused_and_one_within_runs() {
    let b = start(4, "max_gpus_per_user = 2\n");
    let file = b.path("gang.yaml");
    std::fs::write(
        &file,
        "name: gang\natomic: true\ntasks:\n  a: {command: \"true\", gpus: 1}\n  \
         b: {command: \"true\", gpus: 1}\n  c: {command: \"true\", gpus: 1}\n",
    )
    .unwrap();
    let out = b.run(&["workflow", "submit", &file.display().to_string()]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("atomic: all its tasks at once")
            && out.stderr.contains("max_gpus_per_user = 2"),
        "{out:?}"
    );
    std::fs::write(
        &file,
        "name: gang\natomic: true\ntasks:\n  a: {command: \"true\", gpus: 1}\n  \
         b: {command: \"true\", gpus: 1, after: [a]}\n",
    )
    .unwrap();
    let out = b
        .run(&["workflow", "submit", &file.display().to_string()])
        .expect(0);
    let wf = out.stdout.trim().to_string();
    let status = b
        .run(&["workflow", "status", &wf, "--json"])
        .expect(0)
        .json();
    let ids: Vec<u64> = status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["job"]["id"].as_u64().unwrap())
        .collect();
    b.wait_ok(&ids);
}

#[test]
fn a_user_whose_gpu_hour_budget_is_used_up_waits_for_the_next_period_saying_when() {
    // 0.0005 GPU-hours: 1.8 GPU-seconds, used up by one GPU held for two seconds.
    let b = start(2, "gpu_hours_per_user = 0.0005\nbudget_period = \"day\"\n");
    let first = b.submit(&["--gpus", "1", "--", "sleep", "2"]);
    b.wait_ok(&[first]);
    let second = b.submit(&["--gpus", "1", "--", "true"]);
    let reason = b.wait_reason(second);
    assert!(
        reason.starts_with("budget: root has used 0.000")
            && reason.contains(" of 0.0005 GPU-hours this day; it resets ")
            && reason.ends_with(" 00:00 ([limits] gpu_hours_per_user = 0.0005)"),
        "{reason}"
    );
    // A job that holds no GPU is not held back by a GPU-hour budget.
    let cpu = b.submit(&["--", "true"]);
    b.wait_ok(&[cpu]);
    let usage = b.run(&["usage", "--json"]).expect(0).json();
    let budget = &usage.as_array().unwrap()[0]["budget"];
    assert!(
        budget["used_ms"].as_i64().unwrap() >= 1_800 && budget["budget_ms"] == 1_800,
        "{usage}"
    );
    let table = b.run(&["usage"]).expect(0).stdout;
    assert!(
        table.contains("GPU-HOURS") && table.contains("used up, GPU jobs wait: root has used"),
        "{table}"
    );
    assert_eq!(b.state(second), "queued");
}

#[test]
fn a_used_up_budget_in_refuse_mode_refuses_submissions_and_says_until_when() {
    let b = start(2, "gpu_hours_per_user = 0.0002\nbudget_mode = \"refuse\"\n");
    // Under budget: accepted.
    let first = b.submit(&["--gpus", "1", "--", "sleep", "1"]);
    b.wait_ok(&[first]);
    // A job that asks for no GPU is still taken.
    let cpu = b.submit(&["--", "true"]);
    b.wait_ok(&[cpu]);
    let out = b.run(&["submit", "--gpus", "1", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("GPU-hour budget used up")
            && out.stderr.contains("this week; it resets Monday ")
            && out.stderr.contains("budget_mode = \"refuse\""),
        "{out:?}"
    );
}

#[test]
fn a_budget_that_is_not_a_positive_number_is_refused_with_its_line() {
    let b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        "[limits]\ngpu_hours_per_user = -3\n",
    )
    .unwrap();
    let out = b.run(&["serve", "--sim-gpus", "1"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("positive number of GPU-hours")
            && out.stderr.contains("config.toml:2:22:"),
        "{out:?}"
    );
}

/// The current user's primary group, as `id -gn` names it.
fn primary_group() -> String {
    let out = std::process::Command::new("id")
        .arg("-gn")
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_groups_pooled_budget_counts_every_members_jobs_together() {
    // 0.0003 GPU-hours, 1.08 GPU-seconds, for the whole group: one GPU held 1.5 s spends it.
    let group = primary_group();
    let b = start(
        2,
        &format!(
            "budget_period = \"day\"\n\n[limits.groups.{group}]\ngpu_hours_per_group = 0.0003\n"
        ),
    );
    let first = b.submit(&["--gpus", "1", "--", "sleep", "1.5"]);
    b.wait_ok(&[first]);
    let second = b.submit(&["--gpus", "1", "--", "true"]);
    let reason = b.wait_reason(second);
    assert!(
        reason.starts_with(&format!("budget: group {group} has used 0.000"))
            && reason.ends_with(&format!(
                "([limits.groups.{group}] gpu_hours_per_group = 0.0003)"
            )),
        "{reason}"
    );
    let cpu = b.submit(&["--", "true"]);
    b.wait_ok(&[cpu]);
    let usage = b.run(&["usage", "--json"]).expect(0).json();
    let pooled = &usage[0]["group_budgets"][0];
    assert!(
        pooled["who"] == format!("group {group}") && pooled["used_ms"].as_i64().unwrap() >= 1_080,
        "{usage}"
    );
    let table = b.run(&["usage"]).expect(0).stdout;
    assert!(
        table.contains(&format!("used up, GPU jobs wait: group {group} has used")),
        "{table}"
    );
}

#[test]
fn a_pooled_budget_outside_a_group_is_refused() {
    let b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        "[limits.users.alice]\ngpu_hours_per_group = 3\n",
    )
    .unwrap();
    let out = b.run(&["serve", "--sim-gpus", "1"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("belongs under [limits.groups.NAME]"),
        "{out:?}"
    );
}
