//! The command line's contract: exit codes and messages for bad input, no daemon, the private
//! socket, and the job environment.

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use common::{Baton, run_cmd};

#[test]
fn socket_is_private_to_its_user() {
    let b = Baton::start(1);
    let socket = b.home.join("baton.sock");
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(
        meta.file_type().is_socket(),
        "{} is not a socket",
        socket.display()
    );
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "socket mode");
    let home = std::fs::metadata(&b.home).unwrap();
    assert_eq!(home.permissions().mode() & 0o777, 0o700, "BATON_HOME mode");
}

#[test]
fn bad_input_is_refused_with_exit_2_and_says_why() {
    let b = Baton::start(4);
    let refused = |args: &[&str]| {
        let out = b.run(args).expect(2);
        assert!(!out.stderr.trim().is_empty(), "no message for {args:?}");
        out.stderr
    };
    // Unknown flags, also where a mistyped option precedes the command.
    let err = refused(&["submit", "--bogus-flag", "--", "true"]);
    assert!(err.contains("--bogus-flag"), "{err}");
    refused(&["submit", "--gpu", "2", "--", "true"]);
    refused(&["status", "--bogus-flag"]);
    refused(&["frobnicate"]);

    let err = refused(&["submit", "--gpus", "99", "--", "true"]);
    assert!(err.contains("this machine has 4"), "{err}");
    let err = refused(&["submit", "--gpu-mem", "100GiB", "--", "true"]);
    assert!(err.contains("80 GiB"), "{err}");
    let err = refused(&["submit", "--time-limit", "10", "--", "true"]);
    assert!(err.contains("10"), "{err}");
    let err = refused(&["submit", "--after", "999", "--", "true"]);
    assert!(err.contains("999"), "{err}");
    refused(&["submit"]);
    refused(&["submit", "--gpus", "1", "--"]);
    refused(&["submit", "--gpu-mem", "lots", "--", "true"]);

    // None of that queued anything.
    let all = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(
        all,
        serde_json::json!([]),
        "a refused submission queued a job"
    );

    let id = b.submit(&["--", "true"]);
    assert_eq!(id, 1);
    b.wait_ok(&[id]);
    let err = refused(&["status", "999"]);
    assert!(err.contains("999") && err.contains("1 to 1"), "{err}");
    let err = refused(&["cancel", "999"]);
    assert!(err.contains("999"), "{err}");
    let err = refused(&["wait", "999", "--timeout", "5s"]);
    assert!(err.contains("999"), "{err}");
    refused(&["logs", "999"]);
}

#[test]
fn no_daemon_is_exit_3() {
    let b = Baton::unstarted();
    let socket = b.root.join("nowhere").join("baton.sock");
    for args in [&["status"][..], &["gpus"], &["wait", "1"], &["cancel", "1"]] {
        let mut cmd = b.cmd(args);
        cmd.env("BATON_SOCKET", &socket);
        let out = run_cmd(cmd).expect(3);
        assert!(
            out.stderr.contains(&*socket.to_string_lossy()),
            "the message should name the socket: {out:?}"
        );
    }
    // An explicit BATON_SOCKET is never auto-started, even by submit.
    let mut cmd = b.cmd(["submit", "--", "true"]);
    cmd.env("BATON_SOCKET", &socket);
    run_cmd(cmd).expect(3);
    assert!(
        !b.home.exists(),
        "submit started a daemon for an explicit BATON_SOCKET"
    );
}

#[test]
fn jobs_see_their_gpus_id_and_name() {
    let b = Baton::start(2);
    let id = b.submit_sh(
        &[
            "--gpus",
            "2",
            "--name",
            "envcheck",
            "--tag",
            "k=v",
            "--priority",
            "-3",
        ],
        "echo \"$CUDA_VISIBLE_DEVICES|$BATON_GPUS|$BATON_JOB_ID|$BATON_JOB_NAME|$PWD\" > env.out",
    );
    b.wait_ok(&[id]);
    let work = b.work.canonicalize().unwrap();
    assert_eq!(
        b.read("env.out"),
        format!("0,1|0,1|{id}|envcheck|{}\n", work.display())
    );
    let job = b.job(id);
    assert_eq!(job["name"], "envcheck");
    assert_eq!(job["priority"], -3);
    assert_eq!(job["tags"]["k"], "v");
    assert_eq!(job["gpus_requested"], 2);
    assert_eq!(job["cwd"], work.to_string_lossy().as_ref());
    assert_eq!(job["command"][0], "sh");
}

/// A submitter's environment holding what a job could not be started with (a value that is not
/// UTF-8) still submits: such a variable is left out, not a panic or a refusal.
#[test]
fn an_environment_that_is_not_all_text_still_submits() {
    use std::os::unix::ffi::OsStrExt;
    let b = Baton::start(1);
    let mut cmd = b.cmd(["submit", "--", "sh", "-c", "echo ${PLAIN}"]);
    cmd.env(
        std::ffi::OsStr::from_bytes(b"NOT_TEXT"),
        std::ffi::OsStr::from_bytes(b"\xff\xfe"),
    )
    .env("PLAIN", "kept");
    let out = run_cmd(cmd).expect(0);
    let id: u64 = out.stdout.trim().parse().unwrap();
    b.wait_ok(&[id]);
    assert_eq!(b.run(&["logs", &id.to_string()]).expect(0).stdout, "kept\n");
}

/// At a terminal, `wait` shows how long it has waited and each state as it changes (the daemon
/// answers at each change, so the line is redrawn without polling).
#[test]
fn waits_spinner_shows_the_state_and_the_time_waited() {
    let b = Baton::start(1);
    let gate = b.submit_sh(&[], &common::wait_for_file("go"));
    let id = b.submit_sh(&["--gpus", "1", "--after", &gate.to_string()], "sleep 1.5");
    let wait = format!("{} wait {id}", common::BIN);
    // `script` gives the command a terminal; what it drew is in its output.
    // The environment the tests give every baton command.
    let cmd = b.cmd(["--version"]);
    let mut script = std::process::Command::new("script");
    script.args(["-qec", &wait, "/dev/null"]);
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => script.env(k, v),
            None => script.env_remove(k),
        };
    }
    script
        .current_dir(&b.work)
        .stdin(std::process::Stdio::null());
    let mut child = script
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run script");
    // What it draws is read as it comes: the gate opens only once the spinner has shown the
    // job queued (on a loaded machine `wait`'s first answer can come late).
    let mut stdout = child.stdout.take().unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let queued = format!("for job {id} (queued)");
    let until = std::time::Instant::now() + common::DEADLINE;
    while !String::from_utf8_lossy(&seen.lock().unwrap()).contains(&queued) {
        assert!(
            std::time::Instant::now() < until,
            "{}",
            String::from_utf8_lossy(&seen.lock().unwrap())
        );
        std::thread::sleep(common::POLL);
    }
    b.touch("go");
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let drawn = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    assert!(status.success(), "{drawn}");
    assert!(drawn.contains(&format!("for job {id} (queued)")), "{drawn}");
    assert!(
        drawn.contains(&format!("for job {id} (running)")),
        "{drawn}"
    );
    assert!(drawn.contains("waiting 00:00:0"), "{drawn}");
}

/// What a new user reads cannot be misread: an empty `status --all` does not suggest `--all`,
/// `stats` over everything does not start in 1970, and `logs` of a job still queued says it has
/// not started instead of printing nothing.
#[test]
fn empty_and_not_yet_outputs_say_what_they_mean() {
    let b = Baton::start(1);
    let all = b.run(&["status", "--all"]).expect(0);
    assert!(
        all.stdout.starts_with("no jobs") && !all.stdout.contains("--all"),
        "{}",
        all.stdout
    );
    let recent = b.run(&["status"]).expect(0);
    assert!(recent.stdout.contains("--all"), "{}", recent.stdout);
    let stats = b.run(&["stats"]).expect(0);
    assert!(
        stats.stdout.starts_with("period: everything kept, until ")
            && !stats.stdout.contains("1970"),
        "{}",
        stats.stdout
    );
    let running = b.submit(&["--gpus", "1", "--", "sleep", "30"]);
    let queued = b.submit(&["--gpus", "1", "--", "true"]);
    b.wait_running(running);
    // What a job asked for and the GPUs it has are separate columns; TIME says what it measures.
    let table = b.run(&["status"]).expect(0).stdout;
    let row = |id: u64| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
            .unwrap_or_else(|| panic!("no row for job {id}:\n{table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[3..5], ["GPUS", "ON"], "{table}");
    assert_eq!(
        (row(running)[3], row(running)[4], row(running)[7]),
        ("1", "0", "running"),
        "{table}"
    );
    assert_eq!(
        (row(queued)[3], row(queued)[4], row(queued)[7]),
        ("1", "-", "waited"),
        "{table}"
    );
    let logs = b.run(&["logs", &queued.to_string()]).expect(0);
    assert!(
        logs.stderr
            .contains(&format!("job {queued} has not started yet"))
            && logs
                .stderr
                .contains(&format!("baton logs {queued} --follow")),
        "{}",
        logs.stderr
    );
    b.run(&["cancel", &running.to_string(), &queued.to_string()])
        .expect(0);
}
