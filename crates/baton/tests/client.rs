//! The CLI's edge with the daemon: a first run that must not strand a newcomer, `baton
//! shutdown`, a daemon that does not answer, and submissions that are never queued twice however
//! their answer is lost.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Baton, run_cmd};

/// A fresh BATON_HOME with no daemon: a newcomer on a machine without GPUs asks for one, is
/// told how to get simulated ones, sets them in config.toml, and the daemon `submit` starts
/// next (and after a crash) has them.
#[test]
fn a_first_run_without_gpus_says_how_to_get_simulated_ones() {
    let b = Baton::unstarted();
    let info_of = |b: &Baton| b.run(&["info", "--json"]).expect(0).json();

    let out = b.run(&["submit", "--gpus", "1", "--", "true"]).expect(2);
    if out.stderr.contains("simulated") {
        // This machine has no GPU driver (CI, laptops): the error says what to do.
        assert!(out.stderr.contains("sim_gpus = 4"), "{}", out.stderr);
        assert!(out.stderr.contains("baton shutdown"), "{}", out.stderr);
    } else {
        eprintln!("this machine has GPUs: {}", out.stderr);
    }
    let info = info_of(&b);
    let pid = info["pid"].as_u64().unwrap();

    // A second daemon is refused, naming the first and how to stop it.
    let out = b.run(&["serve", "--sim-gpus", "4"]).expect(2);
    assert!(out.stderr.contains(&format!("pid {pid}")), "{}", out.stderr);
    assert!(out.stderr.contains("baton shutdown"), "{}", out.stderr);

    std::fs::write(b.home.join("config.toml"), "[daemon]\nsim_gpus = 2\n").unwrap();
    let out = b.run(&["shutdown"]).expect(0);
    assert!(out.stdout.contains(&format!("pid {pid}")), "{}", out.stdout);
    assert!(!common::alive(pid as i32), "the daemon is still there");
    assert_eq!(b.run(&["status"]).code, 3, "no daemon answers any more");

    // The next submit starts a daemon as config.toml says.
    let id = b.submit(&["--gpus", "1", "--", "true"]);
    b.wait_ok(&[id]);
    let info = info_of(&b);
    assert_eq!(info["gpu_count"], 2, "{info:#}");
    assert_eq!(info["gpu_backend"], "simulated", "{info:#}");
    // And so does the one after a crash.
    let pid = info["pid"].as_u64().unwrap() as i32;
    unsafe { libc::kill(pid, libc::SIGKILL) };
    while common::alive(pid) {
        std::thread::sleep(common::POLL);
    }
    let id = b.submit(&["--gpus", "2", "--", "true"]);
    b.wait_ok(&[id]);
    assert_eq!(info_of(&b)["gpu_count"], 2);
    b.run(&["shutdown"]).expect(0);
}

/// Every call but `wait` and `logs --follow` gives up on a daemon that does not answer (here
/// stopped with SIGSTOP) and says so, with exit 3.
#[test]
fn a_daemon_that_does_not_answer_is_reported_not_waited_for() {
    let b = Baton::start(1);
    let pid = b.run(&["info", "--json"]).expect(0).json()["pid"]
        .as_u64()
        .unwrap() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let mut cmd = b.cmd(["status"]);
    cmd.env("BATON_CLIENT_TIMEOUT", "1s");
    let out = run_cmd(cmd);
    let took = started.elapsed();
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("did not answer within 1s"), "{out:?}");
    assert!(out.stderr.contains(&format!("pid {pid}")), "{out:?}");
    assert!(took < Duration::from_secs(10), "it took {took:?}");
    // Once the daemon runs again, all is well.
    b.run(&["status"]).expect(0);
}

/// Stands between the CLI and the daemon and loses the answers to the first `drop` requests
/// that reach the daemon (it reads them whole, passes them on, reads the daemon's answer, then
/// closes the client's connection without it): what a daemon killed right after committing a
/// submission looks like from the client.
fn lossy_proxy(daemon: PathBuf, at: &Path, drop: usize) -> Arc<AtomicUsize> {
    let listener = UnixListener::bind(at).unwrap();
    let lost = Arc::new(AtomicUsize::new(0));
    let counter = lost.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let request = read_request(&mut client);
            let mut upstream = UnixStream::connect(&daemon).unwrap();
            upstream.write_all(&request).unwrap();
            let mut answer = Vec::new();
            upstream.read_to_end(&mut answer).unwrap();
            if counter.load(Ordering::SeqCst) < drop {
                counter.fetch_add(1, Ordering::SeqCst);
                continue; // the client's connection closes unanswered
            }
            let _ = client.write_all(&answer);
        }
    });
    lost
}

/// One HTTP/1.0 request: its head and the body its Content-Length announces.
fn read_request(stream: &mut UnixStream) -> Vec<u8> {
    let mut reader = BufReader::new(stream);
    let mut head = Vec::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
        head.extend_from_slice(line.as_bytes());
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    head.extend(body);
    head
}

/// Stands between the CLI and the daemon, passes each answer on whole, and then keeps the
/// client's connection open for a minute instead of closing it.
fn holding_proxy(daemon: PathBuf, at: &Path) {
    let listener = UnixListener::bind(at).unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let daemon = daemon.clone();
            std::thread::spawn(move || {
                let request = read_request(&mut client);
                let mut upstream = UnixStream::connect(&daemon).unwrap();
                upstream.write_all(&request).unwrap();
                let mut answer = Vec::new();
                upstream.read_to_end(&mut answer).unwrap();
                let _ = client.write_all(&answer);
                std::thread::sleep(Duration::from_secs(60));
            });
        }
    });
}

/// An answer is complete at its `Content-Length`: the CLI does not wait for the connection to
/// close (which the daemon may get to only after the work a request set off).
#[test]
fn an_answer_is_taken_at_its_length_not_at_the_close() {
    let b = Baton::start(1);
    let proxy = b.root.join("proxy.sock");
    holding_proxy(b.home.join("baton.sock"), &proxy);
    for args in [
        &["submit", "--", "true"][..],
        &["status", "--all", "--json"],
    ] {
        let started = Instant::now();
        let mut cmd = b.cmd(args);
        cmd.env("BATON_SOCKET", &proxy)
            .env("BATON_CLIENT_TIMEOUT", "20s");
        let out = run_cmd(cmd).expect(0);
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "{args:?} took {took:?}: {out:?}"
        );
    }
    assert_eq!(all_jobs(&b).len(), 1);
}

fn all_jobs(b: &Baton) -> Vec<serde_json::Value> {
    b.run(&["status", "--all", "--json"])
        .expect(0)
        .json()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn a_submission_whose_answer_is_lost_is_queued_once() {
    let b = Baton::start(1);
    let proxy = b.root.join("proxy.sock");
    let lost = lossy_proxy(b.home.join("baton.sock"), &proxy, 1);
    let mut cmd = b.cmd(["submit", "--", "true"]);
    cmd.env("BATON_SOCKET", &proxy);
    let out = run_cmd(cmd).expect(0);
    assert_eq!(lost.load(Ordering::SeqCst), 1, "no answer was lost");
    let id: u64 = out.stdout.trim().parse().unwrap();
    let jobs = all_jobs(&b);
    assert_eq!(jobs.len(), 1, "queued twice: {jobs:#?}");
    assert_eq!(jobs[0]["id"], id);
}

#[test]
fn a_submission_that_cannot_be_confirmed_says_the_job_may_exist() {
    let b = Baton::start(1);
    let proxy = b.root.join("proxy.sock");
    let _lost = lossy_proxy(b.home.join("baton.sock"), &proxy, usize::MAX);
    let mut cmd = b.cmd(["submit", "--request-id", "exp-7", "--", "true"]);
    cmd.env("BATON_SOCKET", &proxy);
    let out = run_cmd(cmd);
    assert_eq!(out.code, 3, "{out:?}");
    assert!(out.stderr.contains("may or may not exist"), "{out:?}");
    assert!(out.stderr.contains("--request-id exp-7"), "{out:?}");
    // The retries with the same key queued one job, and asking again returns it.
    assert_eq!(all_jobs(&b).len(), 1);
    let again = b.submit(&["--request-id", "exp-7", "--", "true"]);
    assert_eq!(all_jobs(&b).len(), 1);
    assert_eq!(all_jobs(&b)[0]["id"], again);
}

/// The key also comes as an `Idempotency-Key` header, for HTTP clients other than baton's.
#[test]
fn the_idempotency_key_header_names_the_same_job() {
    let b = Baton::start(1);
    let body = serde_json::json!({
        "command": ["true"],
        "cwd": b.work.display().to_string(),
    })
    .to_string();
    let post = |headers: &str| {
        let mut s = UnixStream::connect(b.home.join("baton.sock")).unwrap();
        write!(
            s,
            "POST /v1/jobs HTTP/1.0\r\nHost: baton\r\nContent-Type: application/json\r\n\
             {headers}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let json = answer.split("\r\n\r\n").nth(1).unwrap().to_string();
        (
            answer,
            serde_json::from_str::<serde_json::Value>(&json).unwrap(),
        )
    };
    let (_, first) = post("Idempotency-Key: abc\r\n");
    let (_, second) = post("Idempotency-Key: abc\r\n");
    assert_eq!(first["id"], second["id"]);
    let (_, other) = post("Idempotency-Key: abd\r\n");
    assert_ne!(first["id"], other["id"]);
    let (answer, _) = post("Idempotency-Key: has space\r\n");
    assert!(answer.starts_with("HTTP/1.0 400"), "{answer}");
    assert_eq!(all_jobs(&b).len(), 2);
}
