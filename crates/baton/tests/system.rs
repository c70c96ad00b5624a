//! `baton serve --system`: one daemon for all local users. Needs root (to create two users and to
//! run the daemon); skipped with a message otherwise.

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Baton, Out, run_cmd, wait_for_file, wait_path};

/// A local account created for the test and removed (with its home) when dropped.
struct TestUser {
    name: String,
    uid: u32,
}

impl TestUser {
    fn create(tag: &str) -> TestUser {
        let name = format!("baton-{tag}-{}", std::process::id());
        let out = run_cmd({
            let mut c = Command::new("useradd");
            c.args(["--create-home", "--shell", "/bin/sh", &name]);
            c
        });
        assert_eq!(out.code, 0, "useradd {name}: {out:?}");
        let mut user = TestUser { uid: 0, name };
        let id = run_cmd({
            let mut c = Command::new("id");
            c.args(["-u", &user.name]);
            c
        })
        .expect(0);
        user.uid = id.stdout.trim().parse().unwrap();
        user
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel")
            .args(["--remove", &self.name])
            .output();
    }
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// `baton ARGS` as `user`, talking to the system socket.
fn as_user(b: &Baton, user: &TestUser, args: &[&str]) -> Out {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", &user.name, "--"])
        .arg(&b.bin)
        .args(args)
        .env("BATON_SOCKET", b.socket.as_ref().unwrap())
        // Lets the harness find (and clean up) these users' jobs too.
        .env("BATON_HOME", &b.home)
        .env("HOME", &b.work)
        // Each user's own data directory, where `auto` delivers their reports.
        .env("XDG_DATA_HOME", data_home(b, user))
        .current_dir(&b.work);
    run_cmd(cmd)
}

fn data_home(b: &Baton, user: &TestUser) -> PathBuf {
    b.work.join(format!("data-{}", user.name))
}

fn submit_as(b: &Baton, user: &TestUser, script: &str) -> u64 {
    submit_as_with(b, user, &[], script)
}

/// [`submit_as`], with `opts` before the command.
fn submit_as_with(b: &Baton, user: &TestUser, opts: &[&str], script: &str) -> u64 {
    let work = b.work.to_string_lossy().into_owned();
    let mut args = vec!["submit", "--cwd", &work];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let out = as_user(b, user, &args).expect(0);
    out.stdout.trim().parse().unwrap()
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A system daemon on 2 simulated GPUs with `config` as its config.toml, and two users. Fields
/// drop in order: the daemon and its jobs first, then the users.
struct Shared {
    b: Baton,
    alice: TestUser,
    bob: TestUser,
}

/// `None` (with a message) where the test cannot run: it needs root, useradd and runuser. Other
/// users must reach the binary, the socket and the work directory: /tmp, not a possibly private
/// TMPDIR, and a world-readable copy of the binary.
fn shared_daemon(tag: &str, config: &str) -> Option<Shared> {
    if !is_root() || !have("useradd") || !have("runuser") {
        eprintln!("SKIPPED system-mode test: needs root, useradd and runuser");
        return None;
    }
    let alice = TestUser::create(&format!("{tag}a"));
    let bob = TestUser::create(&format!("{tag}b"));
    let mut b = Baton::unstarted_in(Path::new("/tmp"));
    chmod(&b.root, 0o755);
    chmod(&b.work, 0o1777);
    let bin_dir = b.root.join("bin");
    std::fs::create_dir(&bin_dir).unwrap();
    chmod(&bin_dir, 0o755);
    let bin = bin_dir.join("baton");
    // The front end and the whole of baton beside it, as they are installed.
    for (from, to) in [
        (common::BIN, &bin),
        (common::BATOND, &bin_dir.join("batond")),
    ] {
        std::fs::copy(from, to).unwrap();
        chmod(to, 0o755);
        // Runnable once no child forked during the copy still holds it open for writing
        // (ETXTBSY); `runuser` execs it later and could not retry.
        let mut version = Command::new(to);
        version.arg("--version").stdout(std::process::Stdio::null());
        let _ = common::spawn_retrying(&mut version).wait();
    }
    b.bin = bin;
    let socket: PathBuf = b.root.join("sock").join("baton.sock");
    b.socket = Some(socket.clone());
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        config
            .replace("ALICE", &alice.name)
            .replace("BOB", &bob.name),
    )
    .unwrap();
    let sock_arg = socket.to_string_lossy().into_owned();
    b.serve_with(&[
        "serve",
        "--system",
        "--socket",
        &sock_arg,
        "--sim-gpus",
        "2",
        "--grace",
        "1s",
    ]);
    Some(Shared { b, alice, bob })
}

#[test]
fn system_mode_runs_jobs_as_their_submitters_and_guards_cancel() {
    // The users are created before the daemon, so they are removed after it and their jobs are
    // gone; other users reach the binary, the socket and the work directory (under /tmp, a
    // world-readable copy of the binary).
    let Some(Shared { b, alice, bob }) = shared_daemon("t", "") else {
        return;
    };
    let socket = b.socket.clone().unwrap();
    let meta = std::fs::metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o666,
        "system socket mode"
    );

    // Each job records the uid it runs as, then waits to be released.
    let job_script = |name: &str| format!("id -u > uid.$BATON_JOB_ID; {}", wait_for_file(name));
    let a = submit_as(&b, &alice, &job_script("go.a"));
    let bb = submit_as(&b, &bob, &job_script("go.b"));
    wait_path(&b.path(&format!("uid.{a}")));
    wait_path(&b.path(&format!("uid.{bb}")));
    // The file appears before `id` has written into it.
    let read_uid = |id: u64| {
        let until = std::time::Instant::now() + common::DEADLINE;
        loop {
            let text = b.read(&format!("uid.{id}"));
            if text.ends_with('\n') {
                return text.trim().parse::<u32>().unwrap();
            }
            assert!(std::time::Instant::now() < until, "uid.{id}: {text:?}");
            std::thread::sleep(common::POLL);
        }
    };
    assert_eq!(read_uid(a), alice.uid, "alice's job ran as another user");
    assert_eq!(read_uid(bb), bob.uid, "bob's job ran as another user");
    assert_eq!(b.job(a)["owner"], alice.name.as_str());
    assert_eq!(b.job(bb)["owner"], bob.name.as_str());

    // Alice may not cancel Bob's job, and is told whose it is.
    let out = as_user(&b, &alice, &["cancel", &bb.to_string()]);
    assert_eq!(out.code, 2, "alice cancelling bob's job: {out:?}");
    assert!(
        out.stderr.contains(&bob.name),
        "the refusal should name the owner: {out:?}"
    );
    assert_eq!(
        b.state(bb),
        "running",
        "bob's job was touched by alice's cancel"
    );
    // Nor mix her own job with his: all or nothing.
    let out = as_user(&b, &alice, &["cancel", &a.to_string(), &bb.to_string()]);
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(b.state(a), "running");
    // Her own job she may cancel.
    as_user(&b, &alice, &["cancel", &a.to_string()]).expect(0);
    assert_eq!(b.wait(&[a], "15s").code, 1);
    assert_eq!(b.state(a), "cancelled");
    // Root may cancel anyone's.
    b.run(&["cancel", &bb.to_string()]).expect(0);
    assert_eq!(b.wait(&[bb], "15s").code, 1);
    let job = b.job(bb);
    assert_eq!(job["state"], "cancelled", "{job:#}");
    // Both ended by their cancel, not by the release file.
    assert!(!b.path("go.a").exists() && !b.path("go.b").exists());

    // Each report reached its owner's own inbox, written as that owner (not as root), 0600.
    use std::os::unix::fs::MetadataExt;
    for (user, id) in [(&alice, a), (&bob, bb)] {
        let inbox = data_home(&b, user).join("baton/inbox.md");
        common::wait_contains(&inbox, &format!("[end of baton report for job {id}]"));
        let meta = std::fs::metadata(&inbox).unwrap();
        assert_eq!(
            meta.uid(),
            user.uid,
            "{} written by uid {}",
            inbox.display(),
            meta.uid()
        );
        assert_eq!(meta.mode() & 0o777, 0o600);
    }
    // The report lists the files a job wrote with its owner's permissions, not root's: a job
    // that swaps its working directory for a link to a root-only directory learns nothing.
    let secret = b.root.join("secret");
    std::fs::create_dir(&secret).unwrap();
    chmod(&secret, 0o700);
    std::fs::write(secret.join("salaries.xlsx"), "x").unwrap();
    let swap_dir = b.work.join("swap");
    std::fs::create_dir(&swap_dir).unwrap();
    chmod(&swap_dir, 0o777);
    let swap_arg = swap_dir.to_string_lossy().into_owned();
    let script = format!(
        "touch mine.txt; cd /; rm -rf '{swap_arg}'; ln -s '{}' '{swap_arg}'",
        secret.display()
    );
    let out = as_user(
        &b,
        &alice,
        &["submit", "--cwd", &swap_arg, "--", "sh", "-c", &script],
    )
    .expect(0);
    let swapped: u64 = out.stdout.trim().parse().unwrap();
    assert_eq!(b.wait(&[swapped], "15s").code, 0, "{}", b.daemon_log());
    let report = as_user(&b, &alice, &["report", &swapped.to_string()]).expect(0);
    assert!(
        !report.stdout.contains("salaries"),
        "root's files leaked:\n{}",
        report.stdout
    );
    // Bob cannot read Alice's report through the daemon either.
    let out = as_user(&b, &bob, &["report", &a.to_string()]);
    assert_eq!(out.code, 2, "{out:?}");

    // A job enters its working directory as its submitter, not as root: once only root may
    // pass through its parent, alice's job cannot get in.
    let private = b.work.join("private");
    let inside = private.join("open");
    std::fs::create_dir_all(&inside).unwrap();
    chmod(&private, 0o755);
    chmod(&inside, 0o777);
    let gate = b.submit_sh(&[], &wait_for_file("go.gate"));
    let inside_arg = inside.to_string_lossy().into_owned();
    let after = gate.to_string();
    let out = as_user(
        &b,
        &alice,
        &[
            "submit",
            "--after",
            &after,
            "--cwd",
            &inside_arg,
            "--",
            "sh",
            "-c",
            "echo leaked > x",
        ],
    )
    .expect(0);
    let sneaky: u64 = out.stdout.trim().parse().unwrap();
    chmod(&private, 0o700);
    b.touch("go.gate");
    assert_eq!(b.wait(&[sneaky], "15s").code, 1);
    let job = b.job(sneaky);
    assert_eq!(job["state"], "failed", "{job:#}");
    assert!(
        !inside.join("x").exists(),
        "alice's job wrote inside a directory she cannot reach"
    );
}

/// Every route that returns a job's output, report, history or details checks who asks: bob may
/// see that alice's job exists and wait for it to end, but reads nothing of hers.
#[test]
fn another_users_job_can_be_waited_for_but_not_read() {
    let Some(Shared { b, alice, bob }) = shared_daemon("r", "") else {
        return;
    };
    let a = submit_as(
        &b,
        &alice,
        &format!("echo s3cr3t-output; {}", wait_for_file("go.r")),
    );
    b.wait_running(a);
    let id = a.to_string();
    let leaked = |out: &Out| out.stdout.contains("s3cr3t") || out.stderr.contains("s3cr3t");

    // Waiting with the report is refused before it blocks, and says what to do instead.
    let out = as_user(&b, &bob, &["wait", &id, "--timeout", "30s"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains(&alice.name), "{out:?}");
    assert!(out.stderr.contains("--brief"), "{out:?}");
    for args in [
        vec!["events", id.as_str()],
        vec!["logs", id.as_str()],
        vec!["logs", id.as_str(), "--stderr"],
        vec!["report", id.as_str()],
    ] {
        let out = as_user(&b, &bob, &args);
        assert_eq!(out.code, 2, "bob: baton {args:?}: {out:?}");
        assert!(!leaked(&out), "{out:?}");
    }
    // The queue shows her job, without what is hers alone.
    for args in [
        vec!["status", id.as_str(), "--json"],
        vec!["status", "--json"],
    ] {
        let out = as_user(&b, &bob, &args).expect(0);
        let jobs = out.json();
        let job = jobs
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == a)
            .unwrap_or_else(|| panic!("{jobs:#}"))
            .clone();
        assert_eq!(job["private"], true, "{job:#}");
        assert_eq!(job["command"], serde_json::json!([]), "{job:#}");
        assert_eq!(job["cwd"], "", "{job:#}");
        assert_eq!(job["owner"], alice.name.as_str());
    }
    // Alice sees all of it.
    let out = as_user(&b, &alice, &["status", &id, "--json"]).expect(0);
    assert!(out.json()[0]["command"].as_array().unwrap().len() == 3);
    assert!(out.json()[0].get("private").is_none());

    // A brief wait works and ends with the job, and still shows nothing of it.
    let waiter = {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", &bob.name, "--"])
            .arg(&b.bin)
            .args(["wait", "--brief", &id, "--timeout", "30s"])
            .env("BATON_SOCKET", b.socket.as_ref().unwrap())
            .env("HOME", &b.work)
            .current_dir(&b.work)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd.spawn().unwrap()
    };
    b.touch("go.r");
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("succeeded") && !text.contains("s3cr3t"),
        "{text}"
    );

    // A workflow of hers: its tasks, as her jobs, show nothing of hers either.
    let wf = b.work.join("wf.yaml");
    std::fs::write(&wf, "name: hers\ntasks:\n  t: {command: [\"true\"]}\n").unwrap();
    chmod(&wf, 0o644);
    let out = as_user(
        &b,
        &alice,
        &["workflow", "submit", &wf.to_string_lossy(), "--json"],
    )
    .expect(0);
    let w = out.json()["id"].as_u64().unwrap().to_string();
    let out = as_user(&b, &bob, &["workflow", "status", &w, "--json"]).expect(0);
    let view = out.json();
    assert_eq!(view["source"], "", "{view:#}");
    assert_eq!(view["tasks"][0]["job"]["private"], true, "{view:#}");
    let out = as_user(&b, &alice, &["workflow", "status", &w, "--json"]).expect(0);
    assert_ne!(out.json()["source"], "");
}

/// `requeue`, `resubmit` and `signal` are the owner's (and root's) alone, as cancel is: bob is
/// refused each on alice's jobs (403, exit 2) and nothing of hers changes or is copied; `workflow
/// list` shows him her workflow as `status` shows her jobs, marked private.
#[test]
fn another_user_cannot_requeue_resubmit_or_signal_a_job() {
    let Some(Shared { b, alice, bob }) = shared_daemon("v", "") else {
        return;
    };
    let failed = submit_as(&b, &alice, "exit 4");
    as_user(
        &b,
        &alice,
        &["wait", &failed.to_string(), "--timeout", "30s"],
    )
    .expect(1);
    let running = submit_as(
        &b,
        &alice,
        &format!(
            "trap 'echo hup >> hup.v' HUP; touch ready.v; {}",
            wait_for_file("go.v")
        ),
    );
    wait_path(&b.work.join("ready.v"));
    let (f, r) = (failed.to_string(), running.to_string());
    for args in [
        vec!["requeue", f.as_str()],
        vec!["resubmit", f.as_str()],
        vec!["signal", r.as_str(), "HUP"],
        vec!["signal", r.as_str(), "KILL"],
    ] {
        let out = as_user(&b, &bob, &args);
        assert_eq!(out.code, 2, "bob: baton {args:?}: {out:?}");
        assert!(out.stderr.contains(&alice.name), "{out:?}");
    }
    let status = |id: &str| {
        as_user(&b, &alice, &["status", id, "--json"])
            .expect(0)
            .json()[0]["state"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(status(&f), "failed");
    assert_eq!(status(&r), "running");
    assert!(
        !b.work.join("hup.v").exists(),
        "bob's signal reached her job"
    );
    let all = as_user(&b, &alice, &["status", "--all", "--json"])
        .expect(0)
        .json();
    assert_eq!(
        all.as_array().unwrap().len(),
        2,
        "bob's resubmit queued a copy: {all:#}"
    );

    // She may do all of it; her requeued job runs as her again, her copy as her too.
    let out = as_user(&b, &alice, &["signal", &r, "HUP"]).expect(0);
    assert!(out.stdout.contains("SIGHUP"), "{out:?}");
    common::wait_contains(&b.work.join("hup.v"), "hup");
    b.touch("go.v");
    as_user(&b, &alice, &["requeue", &f]).expect(0);
    let copy = as_user(&b, &alice, &["resubmit", &f]).expect(0);
    let copy = copy.stdout.trim().to_string();
    as_user(&b, &alice, &["wait", &f, &copy, &r, "--timeout", "30s"]);
    for id in [&f, &copy] {
        let job = as_user(&b, &alice, &["status", id, "--json"])
            .expect(0)
            .json();
        assert_eq!(job[0]["owner"], alice.name.as_str(), "{job:#}");
        assert_eq!(job[0]["state"], "failed", "{job:#}");
    }

    // Her workflow is in bob's list, as private.
    let wf = b.work.join("wf.v.yaml");
    std::fs::write(&wf, "name: hers\ntasks:\n  t: {command: [\"true\"]}\n").unwrap();
    chmod(&wf, 0o644);
    as_user(&b, &alice, &["workflow", "submit", &wf.to_string_lossy()]).expect(0);
    let rows = as_user(&b, &bob, &["workflow", "list", "--json"])
        .expect(0)
        .json();
    let row = &rows.as_array().unwrap()[0];
    assert_eq!(
        (row["name"].as_str(), row["private"].as_bool()),
        (Some("hers"), Some(true))
    );
    assert_eq!(row["owner"], alice.name.as_str());
    let rows = as_user(&b, &alice, &["workflow", "list", "--json"])
        .expect(0)
        .json();
    assert!(rows[0].get("private").is_none(), "{rows:#}");
}

/// On a shared daemon a user's priority stays within `[limits]` (default -100..100); root and the
/// configured admins may go beyond it.
#[test]
fn priority_is_bounded_for_the_users_of_a_shared_daemon() {
    let Some(Shared { b, alice, bob }) =
        shared_daemon("p", "[limits]\nmax_priority = 50\nadmins = [\"ALICE\"]\n")
    else {
        return;
    };
    let work = b.work.to_string_lossy().into_owned();
    let submit = |user: &TestUser, priority: &str| {
        as_user(
            &b,
            user,
            &[
                "submit",
                "--cwd",
                &work,
                "--priority",
                priority,
                "--",
                "true",
            ],
        )
    };
    let out = submit(&bob, "9223372036854775807");
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("-100 to 50"), "{out:?}");
    let out = submit(&bob, "-101");
    assert_eq!(out.code, 2, "{out:?}");
    submit(&bob, "50").expect(0);
    submit(&bob, "-100").expect(0);
    submit(&alice, "1000").expect(0);
    b.run(&["submit", "--priority", "1000000", "--", "true"])
        .expect(0);
    // A workflow's priorities too.
    let wf = b.work.join("prio.yaml");
    std::fs::write(
        &wf,
        "name: prio\npriority: 51\ntasks:\n  t: {command: [\"true\"]}\n",
    )
    .unwrap();
    chmod(&wf, 0o644);
    let out = as_user(&b, &bob, &["workflow", "submit", &wf.to_string_lossy()]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("-100 to 50"), "{out:?}");
}

/// What one user's 200 idle connections do to a shared daemon limited to 16 per user and a 1 s
/// request timeout (a Python script run as that user opens them, then reports): the first 16
/// are held until the timeout closes them, the rest are refused at once with a JSON 503, and
/// meanwhile other users are served as usual.
const HOLD_CONNECTIONS: &str = r#"
import json, socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
conns = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    conns.append(s)
print("ready", flush=True)
sys.stdin.readline()
refused = closed = still_open = 0
deadline = time.time() + 10
for s in conns:
    s.settimeout(max(0.1, deadline - time.time()))
    try:
        data = s.recv(4096)
    except socket.timeout:
        still_open += 1
        continue
    if b" 503 " in data and b"too many connections" in data:
        refused += 1
    elif data == b"":
        closed += 1
    else:
        still_open += 1
print(json.dumps({"refused": refused, "closed": closed, "open": still_open}), flush=True)
"#;

#[test]
fn one_user_cannot_freeze_a_shared_daemon() {
    let Some(Shared { b, alice, bob }) = shared_daemon(
        "c",
        "[limits]\nconnections_per_user = 16\nrequest_timeout = \"1s\"\n",
    ) else {
        return;
    };
    if !have("python3") {
        eprintln!("SKIPPED: needs python3 to hold connections as another user");
        return;
    }
    use std::io::{BufRead, BufReader, Read, Write};
    let socket = b.socket.clone().unwrap();
    let mut holder = Command::new("runuser")
        .args(["-u", &bob.name, "--", "python3", "-c", HOLD_CONNECTIONS])
        .arg(&socket)
        .arg("200")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(holder.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");

    // Alice is served meanwhile, promptly.
    let started = std::time::Instant::now();
    as_user(&b, &alice, &["status"]).expect(0);
    let work = b.work.to_string_lossy().into_owned();
    let id = as_user(&b, &alice, &["submit", "--cwd", &work, "--", "true"]).expect(0);
    let id = id.stdout.trim().to_string();
    as_user(&b, &alice, &["wait", &id, "--timeout", "20s"]).expect(0);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "alice waited {:?} behind bob's connections",
        started.elapsed()
    );

    holder.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let report: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(
        report,
        serde_json::json!({"refused": 184, "closed": 16, "open": 0}),
        "what became of bob's 200 connections"
    );
    let _ = holder.wait();

    // Slow headers are cut off; a body that does not arrive gets a JSON 408.
    let mut slow = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    slow.write_all(b"GET /v1/info HTTP/1.0\r\nHost: baton\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = slow.read_to_end(&mut got);
    assert!(
        !String::from_utf8_lossy(&got).contains("200 OK"),
        "half a request was answered: {got:?}"
    );
    let mut slow = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    slow.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    slow.write_all(
        b"POST /v1/wait HTTP/1.0\r\nHost: baton\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"ids\":",
    )
    .unwrap();
    let mut got = String::new();
    let _ = slow.read_to_string(&mut got);
    assert!(got.starts_with("HTTP/1.0 408"), "{got}");
    assert!(got.contains("\"error\""), "{got}");
}

/// Hold, release and update act only on one's own jobs; a file the submitter cannot read is
/// not given to their job as stdin, though the daemon that opens it is root.
#[test]
fn the_queues_verbs_touch_only_ones_own_jobs() {
    let Some(Shared { b, alice, bob }) = shared_daemon("u", "") else {
        return;
    };
    let gate = submit_as(&b, &alice, &wait_for_file("go.v"));
    b.wait_running(gate);
    let work = b.work.to_string_lossy().into_owned();
    let out = as_user(
        &b,
        &alice,
        &[
            "submit",
            "--cwd",
            &work,
            "--after",
            &gate.to_string(),
            "--",
            "true",
        ],
    )
    .expect(0);
    let queued: u64 = out.stdout.trim().parse().unwrap();
    let id = queued.to_string();
    for args in [
        vec!["hold", id.as_str()],
        vec!["update", id.as_str(), "--priority", "5"],
    ] {
        let out = as_user(&b, &bob, &args);
        assert_eq!(out.code, 2, "bob: baton {args:?}: {out:?}");
        assert!(out.stderr.contains(&alice.name), "{out:?}");
    }
    as_user(&b, &alice, &["hold", &id]).expect(0);
    let out = as_user(&b, &bob, &["release", &id]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        b.job(queued)["held_by"].is_string(),
        "bob released alice's job"
    );
    assert_eq!(b.job(queued)["priority"], 0);

    // A root-only file: alice's submission is refused before it reaches the daemon.
    let secret = b.work.join("secret.txt");
    std::fs::write(&secret, "root only\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = as_user(
        &b,
        &alice,
        &[
            "submit",
            "--cwd",
            &work,
            "--stdin",
            secret.to_str().unwrap(),
            "--",
            "cat",
        ],
    );
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--stdin"), "{out:?}");
    // Past the client, straight to the API: the job opens the file as alice, and cannot.
    if have("curl") {
        let body = serde_json::json!({
            "command": ["cat"], "cwd": work, "stdin": secret.to_str().unwrap(),
        });
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", &alice.name, "--", "curl", "-sS", "--unix-socket"])
            .arg(b.socket.as_ref().unwrap())
            .args([
                "-H",
                "Content-Type: application/json",
                "-d",
                &body.to_string(),
            ])
            .arg("http://baton/v1/jobs");
        let out = run_cmd(cmd).expect(0);
        let job: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let id = job["id"].as_u64().unwrap_or_else(|| panic!("{out:?}"));
        let ended = b.wait(&[id], "30s");
        assert_eq!(ended.code, 1, "{ended:?}");
        let reason = b.job(id)["reason"].as_str().unwrap().to_string();
        assert!(reason.contains("ermission denied"), "{reason}");
        assert!(
            !b.read(&format!("../home/jobs/{id}/stdout"))
                .contains("root only")
        );
    }
    std::fs::write(b.work.join("go.v"), "").unwrap();
}

/// Filtered listings and `baton history` show another user's jobs as `status` does: without
/// what is theirs alone (command, directory) and without their GPU use; `--mine` is one
/// user's; and only root or an admin may run retention early.
#[test]
fn history_and_filtered_listings_keep_other_users_jobs_private() {
    let Some(Shared { b, alice, bob }) = shared_daemon("h", "") else {
        return;
    };
    let a = submit_as(&b, &alice, "echo s3cr3t-output");
    as_user(&b, &alice, &["wait", &a.to_string(), "--timeout", "30s"]).expect(0);
    let own = submit_as(&b, &bob, "true");
    as_user(&b, &bob, &["wait", &own.to_string(), "--timeout", "30s"]).expect(0);
    for args in [
        &["status", "--all", "--json"][..],
        &["status", "--owner", &alice.name, "--json"],
        &["status", "--state", "succeeded", "--since", "1h", "--json"],
    ] {
        let jobs = as_user(&b, &bob, args).expect(0).json();
        let job = jobs
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == a)
            .unwrap_or_else(|| panic!("{args:?}: {jobs:#}"));
        assert_eq!(job["private"], true, "{job:#}");
        assert_eq!(job["command"], serde_json::json!([]), "{job:#}");
        assert_eq!(job["cwd"], "", "{job:#}");
    }
    let rows = as_user(&b, &bob, &["history", "--json"]).expect(0).json();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == a)
        .unwrap();
    assert_eq!(
        (row["private"].as_bool(), row["gpu_util_pct"].is_null()),
        (Some(true), true)
    );
    let csv = as_user(&b, &bob, &["history", "--csv"]).expect(0).stdout;
    assert!(!csv.contains("s3cr3t"), "{csv}");
    // `--mine` outside any agent session: bob's own jobs only.
    let mine = as_user(&b, &bob, &["status", "--mine", "--all", "--json"])
        .expect(0)
        .json();
    let ids: Vec<u64> = mine
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, [own], "{mine:#}");
    as_user(&b, &bob, &["gc", "--dry-run"]).expect(0);
    let out = as_user(&b, &bob, &["gc"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("admins"), "{out:?}");
    b.run(&["gc"]).expect(0);
}

/// A sweep is its owner's: another user can neither see it (status, list) nor cancel it.
#[test]
fn another_users_sweep_can_be_neither_seen_nor_cancelled() {
    let Some(Shared { b, alice, bob }) = shared_daemon("w", "") else {
        return;
    };
    let work = b.work.to_string_lossy().into_owned();
    let script = wait_for_file("go.w");
    let out = as_user(
        &b,
        &alice,
        &[
            "submit",
            "--cwd",
            &work,
            "--array",
            "0-2",
            "--max-parallel",
            "1",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .expect(0);
    let sweep = out.stdout.trim().to_string();
    let view = as_user(&b, &alice, &["sweep", "status", &sweep, "--json"])
        .expect(0)
        .json();
    let first = view["jobs"][0].as_u64().unwrap();
    b.wait_running(first);
    for args in [
        vec!["sweep", "status", sweep.as_str()],
        vec!["sweep", "cancel", sweep.as_str()],
        vec!["sweep", "cancel", sweep.as_str(), "--force"],
        vec!["sweep", "wait", sweep.as_str(), "--timeout", "1s"],
    ] {
        let out = as_user(&b, &bob, &args);
        assert_eq!(out.code, 2, "bob: baton {args:?}: {out:?}");
        assert!(out.stderr.contains(&alice.name), "{out:?}");
    }
    let listed = as_user(&b, &bob, &["sweep", "list", "--json"])
        .expect(0)
        .json();
    assert_eq!(listed, serde_json::json!([]), "bob sees alice's sweep");
    // Nothing of it was cancelled: its first run still runs, the others wait.
    assert_eq!(b.state(first), "running");
    let view = as_user(&b, &alice, &["sweep", "status", &sweep, "--json"])
        .expect(0)
        .json();
    assert_eq!(view["counts"]["running"], 1, "{view:#}");
    assert_eq!(view["counts"]["queued"], 2, "{view:#}");
    // Its owner can.
    as_user(&b, &alice, &["sweep", "cancel", &sweep]).expect(0);
    let out = as_user(&b, &alice, &["sweep", "wait", &sweep, "--timeout", "30s"]);
    assert_eq!(out.code, 1, "{out:?}");
    let view = as_user(&b, &alice, &["sweep", "status", &sweep, "--json"])
        .expect(0)
        .json();
    assert_eq!(view["counts"]["cancelled"], 3, "{view:#}");
}

#[test]
fn another_users_mid_run_alerts_are_not_shown() {
    let Some(Shared { b, alice, bob }) = shared_daemon("m", "") else {
        return;
    };
    let a = submit_as(
        &b,
        &alice,
        &format!(
            "echo 'step 3/10 loss=nan s3cr3t'; {}",
            wait_for_file("go.m")
        ),
    );
    let id = a.to_string();
    let until = std::time::Instant::now() + common::DEADLINE;
    let alerts = loop {
        let job = as_user(&b, &alice, &["status", &id, "--json"])
            .expect(0)
            .json();
        if let Some(alerts) = job[0]["alerts"].as_array().filter(|a| !a.is_empty()) {
            break alerts.clone();
        }
        assert!(
            std::time::Instant::now() < until,
            "no alert: {job:#}\n{}",
            b.daemon_log()
        );
        std::thread::sleep(common::POLL);
    };
    assert_eq!(
        alerts[0]["evidence"], "step 3/10 loss=nan s3cr3t",
        "{alerts:#?}"
    );
    // Its progress is read from its output too: its owner sees it, nobody else.
    let own = as_user(&b, &alice, &["status", &id, "--json"])
        .expect(0)
        .json();
    assert_eq!(own[0]["progress"]["counters"], "step 3/10", "{own:#}");
    let seen = as_user(&b, &bob, &["status", &id, "--json"]).expect(0);
    assert!(!seen.stdout.contains("s3cr3t"), "{seen:?}");
    assert!(seen.json()[0].get("alerts").is_none(), "{seen:?}");
    assert!(seen.json()[0].get("progress").is_none(), "{seen:?}");
    let listed = as_user(&b, &bob, &["status", "--all", "--json"])
        .expect(0)
        .json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j.get("progress").is_none()),
        "{listed:#}"
    );
    let seen = as_user(&b, &bob, &["status", &id]).expect(0);
    assert!(!seen.stdout.contains("s3cr3t"), "{seen:?}");
    b.touch("go.m");
    b.wait_ok(&[a]);
}

/// The dashboard on a shared daemon: each user logs in as themselves (the link comes over the
/// socket, whose credentials say who asks); one user's session cannot read another's job
/// output (403), nor act on their job.
#[test]
fn a_dashboard_session_reads_only_its_users_job_output() {
    let Some(Shared { b, alice, bob }) =
        shared_daemon("d", "[daemon]\nweb_addr = \"127.0.0.1:0\"\n")
    else {
        return;
    };
    let session = |user: &TestUser| {
        let login = as_user(&b, user, &["dashboard", "--no-open", "--json"])
            .expect(0)
            .json();
        let (base, url) = (
            login["base"].as_str().unwrap().to_string(),
            login["url"].as_str().unwrap().to_string(),
        );
        let (status, headers, _) = common::http(&base, url.trim_start_matches(&base), None);
        assert_eq!(status, 303, "{headers:?}");
        let cookie = common::header(&headers, "set-cookie").unwrap();
        (base, cookie.split(';').next().unwrap().to_string())
    };
    let (base, alices) = session(&alice);
    let (_, bobs) = session(&bob);
    let a = submit_as(&b, &alice, "echo 'alice-secret-output'; sleep 60");
    b.wait_running(a);
    wait_path(&b.home.join(format!("jobs/{a}/stdout")));
    let page = format!("/jobs/{a}");
    let until = std::time::Instant::now() + common::DEADLINE;
    loop {
        let (status, _, body) = common::http(&base, &page, Some(&alices));
        assert_eq!(status, 200, "{body}");
        if body.contains("alice-secret-output") {
            break;
        }
        assert!(std::time::Instant::now() < until, "{body}");
        std::thread::sleep(common::POLL);
    }
    let (status, _, body) = common::http(&base, &page, Some(&bobs));
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("alice-secret-output"), "{body}");
    // Bob sees the job in the queue, as `baton status` shows it, not its output.
    let (status, _, overview) = common::http(&base, "/", Some(&bobs));
    assert_eq!(status, 200);
    assert!(overview.contains(&alice.name), "{overview}");
    // Nor can he cancel it, token or not.
    let (_, _, confirm) = common::http(&base, &format!("/jobs/{a}/confirm/cancel"), Some(&bobs));
    let csrf = confirm
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    let (status, _, _) = common::http_post(
        &base,
        &format!("/jobs/{a}/cancel"),
        Some(&bobs),
        &format!("csrf={csrf}"),
    );
    assert_eq!(status, 403);
    assert_eq!(b.state(a), "running");
    as_user(&b, &alice, &["cancel", &a.to_string()]).expect(0);
}

/// A shared daemon's `[limits] admins` read every job, from the CLI and the dashboard alike
/// (its command, its output), and act only on their own.
#[test]
fn an_admin_reads_every_job_and_acts_only_on_their_own() {
    let Some(Shared { b, alice, bob }) = shared_daemon(
        "k",
        "[limits]\nadmins = [\"BOB\"]\n\n[daemon]\nweb_addr = \"127.0.0.1:0\"\n",
    ) else {
        return;
    };
    let a = submit_as(&b, &alice, "echo 'alice-output'; sleep 60");
    b.wait_running(a);
    wait_path(&b.home.join(format!("jobs/{a}/stdout")));
    let id = a.to_string();
    let until = std::time::Instant::now() + common::DEADLINE;
    loop {
        let out = as_user(&b, &bob, &["logs", &id]).expect(0);
        if out.stdout.contains("alice-output") {
            break;
        }
        assert!(std::time::Instant::now() < until, "{out:?}");
        std::thread::sleep(common::POLL);
    }
    let seen = as_user(&b, &bob, &["status", &id, "--json"])
        .expect(0)
        .json();
    let job = &seen.as_array().unwrap()[0];
    assert!(
        job["command"].as_array().is_some_and(|c| !c.is_empty()),
        "{job}"
    );
    assert!(job["private"].as_bool() != Some(true), "{job}");
    let out = as_user(&b, &bob, &["cancel", &id]);
    assert_ne!(out.code, 0, "an admin acts only on their own jobs: {out:?}");
    assert!(out.stderr.contains("belongs to"), "{out:?}");
    assert_eq!(b.state(a), "running");

    let login = as_user(&b, &bob, &["dashboard", "--no-open", "--json"])
        .expect(0)
        .json();
    let base = login["base"].as_str().unwrap().to_string();
    let url = login["url"].as_str().unwrap();
    let (_, headers, _) = common::http(&base, url.trim_start_matches(&base), None);
    let cookie = common::header(&headers, "set-cookie").unwrap();
    let cookie = cookie.split(';').next().unwrap();
    let (status, _, page) = common::http(&base, &format!("/jobs/{a}"), Some(cookie));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("alice-output"), "{page}");
    assert!(
        !page.contains("/confirm/cancel"),
        "no button that would be refused: {page}"
    );
    as_user(&b, &alice, &["cancel", &id]).expect(0);
}

/// `[limits]` on a shared daemon: one user at their GPU cap waits, saying so, while another
/// user's job starts on the free GPU; a user's own entry lifts the cap for them alone.
#[test]
fn a_user_at_their_cap_waits_while_another_user_runs() {
    let Some(Shared { b, alice, bob }) = shared_daemon(
        "l",
        "[limits]\nmax_gpus_per_user = 1\n\n[limits.users.BOB]\nmax_gpus_per_user = 2\n",
    ) else {
        return;
    };
    let a1 = submit_as_with(&b, &alice, &["--gpus", "1"], "sleep 60");
    b.wait_running(a1);
    let a2 = submit_as_with(&b, &alice, &["--gpus", "1"], "true");
    let reason = b.wait_reason(a2);
    assert_eq!(
        reason,
        format!(
            "limit: {} already holds 1 of at most 1 GPU, and this job asks for 1 GPU \
             ([limits] max_gpus_per_user = 1)",
            alice.name
        )
    );
    // Bob's job, submitted after alice's second, takes the free GPU.
    let b1 = submit_as_with(&b, &bob, &["--gpus", "1"], "true");
    b.wait_ok(&[b1]);
    assert_eq!(b.state(a2), "queued");
    // Two GPUs in one job: over alice's cap on its own, within bob's.
    let out = as_user(&b, &alice, &["submit", "--gpus", "2", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("can never start"), "{out:?}");
    let b2 = submit_as_with(&b, &bob, &["--gpus", "2", "--hold"], "true");
    as_user(&b, &bob, &["cancel", &b2.to_string()]).expect(0);
    as_user(&b, &alice, &["cancel", &a1.to_string()]).expect(0);
    b.wait_ok(&[a2]);
}

/// Issue 19: a GPU-hour budget is its user's own. Alice's (1.08 GPU-seconds, her own entry) is
/// used up by one short GPU job and her next GPU job waits for the reset; bob, with none, runs
/// on, and `baton usage` shows each where they stand.
#[test]
fn a_users_spent_gpu_hour_budget_holds_back_only_their_gpu_jobs() {
    let Some(Shared { b, alice, bob }) = shared_daemon(
        "g",
        "[limits]\nbudget_period = \"day\"\n\n[limits.users.ALICE]\ngpu_hours_per_user = 0.0003\n",
    ) else {
        return;
    };
    let a1 = submit_as_with(&b, &alice, &["--gpus", "1"], "sleep 1.5");
    b.wait_ok(&[a1]);
    let a2 = submit_as_with(&b, &alice, &["--gpus", "1"], "true");
    let reason = b.wait_reason(a2);
    assert!(
        reason.starts_with(&format!("budget: {} has used ", alice.name))
            && reason.contains(&format!(
                "([limits.users.{}] gpu_hours_per_user = 0.0003)",
                alice.name
            )),
        "{reason}"
    );
    let b1 = submit_as_with(&b, &bob, &["--gpus", "1"], "true");
    b.wait_ok(&[b1]);
    let a3 = submit_as_with(&b, &alice, &[], "true");
    b.wait_ok(&[a3]);
    assert_eq!(b.state(a2), "queued");
    let usage = as_user(&b, &bob, &["usage", "--json"]).expect(0).json();
    let row = |name: &str| {
        usage
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["user"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row for {name}: {usage}"))
    };
    assert!(
        row(&alice.name)["budget"]["used_ms"].as_i64().unwrap() >= 1_080,
        "{usage}"
    );
    assert!(row(&bob.name).get("budget").is_none(), "{usage}");
    as_user(&b, &alice, &["cancel", &a2.to_string()]).expect(0);
}

/// Issue 19: a reservation root made for alice is hers: bob's jobs may not run in it, and his
/// job without a time limit may not take its GPU; alice's runs on it. Bob reserves for himself
/// only, within `[limits] max_reserved_gpu_hours_per_user`, and cancels only his own.
#[test]
fn a_reservation_is_for_its_users_and_users_reserve_only_within_their_allowance() {
    let Some(Shared { b, alice, bob }) =
        shared_daemon("x", "[limits]\nmax_reserved_gpu_hours_per_user = 1\n")
    else {
        return;
    };
    let made = b
        .run(&[
            "reserve",
            "--gpus",
            "1",
            "--duration",
            "1h",
            "--user",
            &alice.name,
            "--name",
            "al",
        ])
        .expect(0);
    assert_eq!(made.stdout.trim(), "al", "{made:?}");
    let rows = b.run(&["reservations", "--json"]).expect(0).json();
    let kept = rows[0]["gpus"][0].as_u64().unwrap();

    let work = b.work.to_string_lossy().into_owned();
    let out = as_user(
        &b,
        &bob,
        &[
            "submit",
            "--cwd",
            &work,
            "--gpus",
            "1",
            "--reservation",
            "al",
            "--",
            "true",
        ],
    );
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "--reservation al is for {}, not for {}",
            alice.name, bob.name
        )),
        "{out:?}"
    );
    // Bob's job without a time limit would run into alice's window: it waits.
    let both = submit_as_with(&b, &bob, &["--gpus", "2"], "true");
    let reason = b.wait_reason(both);
    assert!(
        reason.starts_with("reservation: needs") && reason.contains("kept for reservation al"),
        "{reason}"
    );
    let mine = submit_as_with(
        &b,
        &alice,
        &["--gpus", "1", "--reservation", "al"],
        "echo \"gpus=$CUDA_VISIBLE_DEVICES\"; sleep 60",
    );
    let job = b.wait_running(mine);
    assert_eq!(job["gpus"][0].as_u64(), Some(kept), "{job}");

    let refused = |user: &TestUser, args: &[&str], needle: &str| {
        let out = as_user(&b, user, args);
        assert_ne!(out.code, 0, "{args:?}: {out:?}");
        assert!(out.stderr.contains(needle), "{args:?}: {out:?}");
    };
    refused(
        &bob,
        &[
            "reserve",
            "--gpus",
            "1",
            "--duration",
            "1h",
            "--user",
            &alice.name,
        ],
        "may reserve GPUs for themselves only",
    );
    refused(
        &bob,
        &[
            "reserve",
            "--gpus",
            "1",
            "--start",
            "now+2h",
            "--duration",
            "30m",
        ],
        "max_reserved_gpu_hours_per_user",
    );
    let bobs = as_user(
        &b,
        &bob,
        &[
            "reserve",
            "--gpus",
            "1",
            "--start",
            "now+10m",
            "--duration",
            "30m",
        ],
    )
    .expect(0)
    .stdout
    .trim()
    .to_string();
    refused(
        &alice,
        &["reserve", "--cancel", &bobs],
        &format!("was made by {}", bob.name),
    );
    as_user(&b, &bob, &["reserve", "--cancel", &bobs]).expect(0);
    // Cancelling alice's reservation frees its GPU; her running job runs on.
    b.run(&["reserve", "--cancel", "al"]).expect(0);
    assert_eq!(b.state(mine), "running");
    as_user(&b, &bob, &["cancel", &both.to_string()]).expect(0);
    as_user(&b, &alice, &["cancel", &mine.to_string()]).expect(0);
}

/// A group made for one test, removed after it.
struct TestGroup(String);

impl Drop for TestGroup {
    fn drop(&mut self) {
        let _ = Command::new("groupdel").arg(&self.0).output();
    }
}

/// Issue 19: a group's pooled GPU-hour budget counts all its members' jobs together: alice's
/// job spends it, and bob's next GPU job waits for the reset, saying whose budget it is.
#[test]
fn a_groups_pooled_budget_is_spent_by_one_member_for_all() {
    if !is_root() || !have("groupadd") || !have("usermod") {
        eprintln!("SKIPPED: needs root, groupadd and usermod");
        return;
    }
    let group = TestGroup(format!("baton-pg-{}", std::process::id()));
    run_cmd({
        let mut c = Command::new("groupadd");
        c.arg(&group.0);
        c
    })
    .expect(0);
    let Some(Shared { b, alice, bob }) = shared_daemon(
        "y",
        &format!(
            "[limits]\nbudget_period = \"day\"\n\n[limits.groups.{}]\ngpu_hours_per_group = 0.0003\n",
            group.0
        ),
    ) else {
        return;
    };
    for user in [&alice, &bob] {
        run_cmd({
            let mut c = Command::new("usermod");
            c.args(["-aG", &group.0, &user.name]);
            c
        })
        .expect(0);
    }
    let spent = submit_as_with(&b, &alice, &["--gpus", "1"], "sleep 1.5");
    b.wait_ok(&[spent]);
    let waits = submit_as_with(&b, &bob, &["--gpus", "1"], "true");
    let reason = b.wait_reason(waits);
    assert!(
        reason.starts_with(&format!("budget: group {} has used ", group.0)),
        "{reason}"
    );
    let usage = as_user(&b, &bob, &["usage", "--json"]).expect(0).json();
    let bobs = usage
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user"] == bob.name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("no row for bob: {usage}"));
    assert!(
        bobs["group_budgets"][0]["used_ms"].as_i64().unwrap() >= 1_080,
        "{usage}"
    );
    as_user(&b, &bob, &["cancel", &waits.to_string()]).expect(0);
}
