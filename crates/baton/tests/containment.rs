//! No job escapes its GPUs: whatever a job starts, however it detaches itself (`setsid`, a double
//! fork, a process that ignores SIGTERM), and however its supervisor ends (`kill -9`, with the
//! daemon up or down), every process of the job is gone before its GPU goes to the next job.
//!
//! Each test runs twice over: with the daemon's default containment (a cgroup per job where one
//! can be made, as here when the tests run as root) and with the supervisor as child subreaper
//! alone (`[daemon] containment = "subreaper"`). The next job on the same GPU checks whether
//! anything of the previous one still runs.

mod common;

use common::{Baton, alive, wait_for_file};

/// A daemon with one simulated GPU and a 1 s grace, containing jobs the way `containment` says.
fn start(containment: &str) -> Baton {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        format!("[daemon]\ncontainment = \"{containment}\"\n"),
    )
    .unwrap();
    b.serve_with(&["serve", "--sim-gpus", "1", "--grace", "1s"]);
    b
}

/// How the job's processes were held, as its events say.
fn contained(b: &Baton, id: u64) -> String {
    let events = b
        .run(&["events", &id.to_string(), "--json"])
        .expect(0)
        .json();
    events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "contained")
        .unwrap_or_else(|| panic!("job {id} has no `contained` event: {events:#}"))["detail"]
        .as_str()
        .unwrap()
        .to_string()
}

/// What the job (in the daemon's work directory) left running, as the pids it wrote.
fn pid_in(b: &Baton, file: &str) -> i32 {
    b.read(file)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{file} holds no pid: {:?}", b.read(file)))
}

/// The job that runs next on the GPU: records which of the previous job's processes it found
/// still alive (one line each in `overlap`), then exits. A zombie is dead (it holds nothing;
/// only its new parent has not collected it yet): its state in /proc/PID/stat is `Z`.
fn next_on_the_gpu(b: &Baton, pid_files: &[&str]) -> u64 {
    let checks: String = pid_files
        .iter()
        .map(|f| {
            format!(
                "s=$(cut -d' ' -f3 /proc/$(cat {f})/stat 2>/dev/null); \
                 if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo {f} >> overlap; fi; "
            )
        })
        .collect();
    b.submit_sh(&["--gpus", "1", "--name", "next"], &checks)
}

/// The supervisor's pid, from the first line of its record.
fn supervisor_pid(b: &Baton, id: u64) -> i32 {
    let record = std::fs::read_to_string(b.home.join(format!("jobs/{id}/supervisor"))).unwrap();
    let first: serde_json::Value = serde_json::from_str(record.lines().next().unwrap()).unwrap();
    first["pid"].as_i64().unwrap() as i32
}

/// A job that leaves behind, besides its own shell: a background child in its process group, and
/// a daemonised grandchild (a new session, its parent gone) that ignores SIGTERM.
const LEAVES_PROCESSES: &str = "sleep 1000 & echo $! > child.pid; \
    setsid sh -c 'trap \"\" TERM; sleep 1000 & echo $! > daemonised.pid'; \
    touch started";

/// A job that has left its processes behind and runs on (until stopped), and the job queued
/// next on its GPU.
fn running_and_next(b: &Baton) -> (u64, u64) {
    let id = b.submit_sh(
        &["--gpus", "1"],
        &format!("{LEAVES_PROCESSES}; {}", wait_for_file("never")),
    );
    b.wait_file("started");
    (id, next_on_the_gpu(b, &["child.pid", "daemonised.pid"]))
}

/// The next job found none of the first one's processes, and none of them is alive now.
#[track_caller]
fn nothing_was_left(b: &Baton) {
    assert_eq!(b.read("overlap"), "", "the next job ran beside the first");
    for f in ["child.pid", "daemonised.pid"] {
        assert!(!alive(pid_in(b, f)), "{f} outlived its job");
    }
}

fn check_the_method(b: &Baton, id: u64, containment: &str) {
    let how = contained(b, id);
    match containment {
        "subreaper" => assert!(how.contains("subreaper"), "{how}"),
        _ if how.contains("cgroup") => assert!(how.starts_with("in cgroup"), "{how}"),
        _ => eprintln!("no cgroup could be made here, so this ran with the subreaper: {how}"),
    }
}

fn a_job_that_exits_takes_everything_it_started_with_it(containment: &str) {
    let b = start(containment);
    let id = b.submit_sh(&["--gpus", "1"], &format!("{LEAVES_PROCESSES}; exit 0"));
    let next = next_on_the_gpu(&b, &["child.pid", "daemonised.pid"]);
    b.wait_ok(&[id, next]);
    nothing_was_left(&b);
    check_the_method(&b, id, containment);
}

#[test]
fn a_job_that_exits_takes_everything_it_started_with_it_cgroup() {
    a_job_that_exits_takes_everything_it_started_with_it("auto");
}

#[test]
fn a_job_that_exits_takes_everything_it_started_with_it_subreaper() {
    a_job_that_exits_takes_everything_it_started_with_it("subreaper");
}

fn a_killed_supervisor_leaves_nothing_running(containment: &str) {
    let b = start(containment);
    let (id, next) = running_and_next(&b);
    assert_eq!(b.state(next), "queued");
    unsafe { libc::kill(supervisor_pid(&b, id), libc::SIGKILL) };
    let out = b.wait(&[id, next], "30s");
    assert_eq!(b.state(next), "succeeded", "{out:?}");
    let job = b.job(id);
    assert_eq!(job["state"], "failed", "{job:#}");
    assert!(
        job["reason"].as_str().unwrap().contains("supervisor died"),
        "{job:#}"
    );
    nothing_was_left(&b);
    check_the_method(&b, id, containment);
}

#[test]
fn a_killed_supervisor_leaves_nothing_running_cgroup() {
    a_killed_supervisor_leaves_nothing_running("auto");
}

#[test]
fn a_killed_supervisor_leaves_nothing_running_subreaper() {
    a_killed_supervisor_leaves_nothing_running("subreaper");
}

/// The daemon and the supervisor both die: the restarted daemon finds the attempt lost and ends
/// what it left before the GPU is free.
fn a_supervisor_killed_while_the_daemon_is_down_leaves_nothing_running(containment: &str) {
    let mut b = start(containment);
    let (id, next) = running_and_next(&b);
    b.kill_daemon();
    unsafe { libc::kill(supervisor_pid(&b, id), libc::SIGKILL) };
    b.serve();
    let out = b.wait(&[id, next], "30s");
    assert_eq!(b.state(next), "succeeded", "{out:?}");
    assert_eq!(b.state(id), "failed");
    nothing_was_left(&b);
}

#[test]
fn a_supervisor_killed_while_the_daemon_is_down_leaves_nothing_running_cgroup() {
    a_supervisor_killed_while_the_daemon_is_down_leaves_nothing_running("auto");
}

#[test]
fn a_supervisor_killed_while_the_daemon_is_down_leaves_nothing_running_subreaper() {
    a_supervisor_killed_while_the_daemon_is_down_leaves_nothing_running("subreaper");
}

/// A cancel reaches every process of the job, not only its process group.
#[test]
fn a_cancel_ends_what_the_job_detached() {
    for containment in ["auto", "subreaper"] {
        let b = start(containment);
        let (id, next) = running_and_next(&b);
        b.run(&["cancel", &id.to_string()]).expect(0);
        b.wait(&[id, next], "30s");
        assert_eq!(b.state(id), "cancelled");
        assert_eq!(b.state(next), "succeeded");
        assert_eq!(
            b.read("overlap"),
            "",
            "{containment}: the next job ran beside the first"
        );
    }
}
