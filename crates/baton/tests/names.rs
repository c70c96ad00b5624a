//! Job names wherever an id goes (`wait train-lr3`, `cancel 'sweep-*'`, `--after prep`), and
//! cancel by filter (`--name`, `--state`, `--mine`, `--all`).

mod common;

use common::{Baton, wait_for_file};

#[test]
fn a_name_is_the_newest_job_of_yours_that_has_it() {
    let b = Baton::start(1);
    let old = b.submit_sh(&["--name", "train-lr3"], "echo old");
    b.wait_ok(&[old]);
    let new = b.submit_sh(&["--name", "train-lr3"], "echo new");
    let out = b.run(&["wait", "train-lr3", "--brief"]).expect(0);
    assert!(out.stdout.contains(&format!("job {new}")), "{out:?}");
    let logs = b.run(&["logs", "train-lr3"]).expect(0).stdout;
    assert_eq!(logs.trim(), "new");
    let report = b.run(&["report", "train-lr3"]).expect(0).stdout;
    assert!(report.contains(&format!("job {new}")), "{report}");
    b.run(&["events", "train-lr3"]).expect(0);
    // An id still is one, and a name that is nobody's says so.
    assert_eq!(
        b.run(&["logs", &old.to_string()]).expect(0).stdout.trim(),
        "old"
    );
    let out = b.run(&["logs", "train-lr9"]).expect(2);
    assert!(
        out.stderr
            .contains("no job of yours is named \"train-lr9\""),
        "{out:?}"
    );
    assert!(out.stderr.contains("baton status --all"), "{out:?}");
    // --after by name.
    let after = b.submit_sh(&["--after", "train-lr3"], "echo after");
    assert_eq!(b.job(after)["after"], serde_json::json!([new]));
    b.wait_ok(&[after]);
}

#[test]
fn a_glob_names_all_its_matches_where_a_command_takes_several_and_one_where_it_takes_one() {
    let b = Baton::start(4);
    let ids: Vec<u64> = (1..=3)
        .map(|i| b.submit_sh(&["--name", &format!("sweep-{i}")], &wait_for_file("never")))
        .collect();
    let keep = b.submit_sh(&["--name", "keep-me"], &wait_for_file("never"));
    for &id in &ids {
        b.wait_running(id);
    }
    // One job wanted, three match: the error lists them.
    let out = b.run(&["logs", "sweep-*"]).expect(2);
    assert!(
        out.stderr.contains("\"sweep-*\" names 3 of your jobs"),
        "{out:?}"
    );
    for id in &ids {
        assert!(out.stderr.contains(&format!("{id} sweep-")), "{out:?}");
    }
    assert!(out.stderr.contains("give one id"), "{out:?}");
    b.run(&["cancel", "sweep-*"]).expect(0);
    let out = b.wait(&ids, "30s");
    assert_eq!(out.code, 1, "{out:?}");
    for &id in &ids {
        assert_eq!(b.state(id), "cancelled");
    }
    assert_eq!(
        b.state(keep),
        "running",
        "a job the glob does not match is left alone"
    );
    // Nothing active matches any more.
    let out = b.run(&["cancel", "sweep-*"]).expect(2);
    assert!(
        out.stderr.contains("no queued or running job of yours"),
        "{out:?}"
    );
    b.run(&["cancel", "keep-me"]).expect(0);
}

#[test]
fn cancel_by_filter_says_how_many_and_takes_only_what_matches() {
    let b = Baton::start(1);
    // One GPU: the first holds it, the others queue.
    let running = b.submit_sh(&["--gpus", "1", "--name", "exp-a"], &wait_for_file("never"));
    b.wait_running(running);
    let queued_a = b.submit_sh(&["--gpus", "1", "--name", "exp-b"], "true");
    let queued_other = b.submit_sh(&["--gpus", "1", "--name", "other"], &wait_for_file("never"));
    b.wait_reason(queued_a);
    // Filters and names do not mix; no filter and no name is an error.
    let out = b.run(&["cancel"]).expect(2);
    assert!(out.stderr.contains("--name GLOB"), "{out:?}");
    let out = b.run(&["cancel", "exp-a", "--all"]).expect(2);
    assert!(out.stderr.contains("not both"), "{out:?}");
    let out = b.run(&["cancel", "--state", "failed"]).expect(2);
    assert!(out.stderr.contains("only queued and running"), "{out:?}");

    let out = b
        .run(&["cancel", "--name", "exp-*", "--state", "queued"])
        .expect(0);
    assert!(
        out.stderr
            .contains("cancelling 1 job (0 running, 1 queued)"),
        "{out:?}"
    );
    assert_eq!(b.state(queued_a), "cancelled");
    assert_eq!(b.state(running), "running");
    assert_eq!(b.state(queued_other), "queued");
    // No matches: said, and nothing happens.
    let out = b.run(&["cancel", "--name", "nothing-*"]).expect(0);
    assert!(out.stderr.contains("nothing cancelled"), "{out:?}");
    // --mine: this agent session's jobs (here: those outside any session).
    let mine = b.run(&["cancel", "--mine", "--state", "running"]).expect(0);
    assert!(
        mine.stderr
            .contains("cancelling 1 job (1 running, 0 queued)"),
        "{mine:?}"
    );
    b.wait(&[running], "30s");
    assert_eq!(b.state(running), "cancelled");
    // The last one (queued, or started meanwhile on the freed GPU).
    let out = b.run(&["cancel", "--all"]).expect(0);
    assert!(out.stderr.contains("cancelling 1 job"), "{out:?}");
    b.wait(&[queued_other], "30s");
    assert_eq!(b.state(queued_other), "cancelled");
}

#[test]
fn a_filtered_cancel_at_a_terminal_asks_first() {
    let b = Baton::start(1);
    let id = b.submit_sh(&["--name", "ask-me"], &wait_for_file("never"));
    b.wait_running(id);
    // `script` gives it a terminal; "n" declines.
    let run = |answer: &str| {
        let cmd = b.cmd(["--version"]);
        let line = format!(
            "printf '{answer}\\n' | script -qec '{} cancel --name ask-me' /dev/null",
            common::BIN
        );
        let mut sh = std::process::Command::new("sh");
        sh.args(["-c", &line]);
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        sh.current_dir(&b.work);
        common::run_cmd(sh)
    };
    let out = run("n");
    assert!(
        out.stdout
            .contains("cancel 1 job (1 running, 0 queued)? [y/N]"),
        "{out:?}"
    );
    assert!(out.stdout.contains("nothing cancelled"), "{out:?}");
    assert_eq!(b.state(id), "running");
    let out = run("y");
    assert!(out.stdout.contains("stopping"), "{out:?}");
    b.wait(&[id], "30s");
    assert_eq!(b.state(id), "cancelled");
}
