//! Cores and memory as resources: what the machine gives jobs (detected, configured, less what
//! is kept), what a job is told it has, impossible requests refused at submit, a job killed at
//! its own memory reservation reported as such, and workflow tasks asking for cores.
//! (How many CPU-only jobs run at once is in `scheduling.rs`.)

mod common;

use common::Baton;

/// A daemon whose cores and memory are `cpus` and `mem` (as `serve --cpus/--memory`).
fn start_with(cpus: &str, mem: &str) -> Baton {
    let mut b = Baton::unstarted();
    b.serve_with(&[
        "serve",
        "--sim-gpus",
        "1",
        "--cpus",
        cpus,
        "--memory",
        mem,
        "--grace",
        "1s",
    ]);
    b
}

#[test]
fn the_machine_gives_jobs_its_cores_and_memory_less_what_is_kept() {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(
        b.home.join("config.toml"),
        "[resources]\nmemory = \"10GiB\"\nreserve_cpus = 2\nreserve_memory = \"2GiB\"\n\
         default_cpus = 2\ndefault_memory = \"1GiB\"\n",
    )
    .unwrap();
    b.serve_with(&["serve", "--sim-gpus", "1", "--cpus", "8"]);
    let info = b.run(&["info", "--json"]).expect(0).json();
    assert_eq!(info["cpus"], 6, "8 less the 2 kept: {info:#}");
    assert_eq!(info["memory"], 8u64 << 30, "{info:#}");
    assert_eq!(
        (info["default_cpus"].clone(), info["default_memory"].clone()),
        (2.into(), (1u64 << 30).into())
    );
    let text = b.run(&["info"]).expect(0).stdout;
    assert!(
        text.contains("6 CPUs, 8 GiB for jobs; a job takes 2 CPUs and 1 GiB unless it asks"),
        "{text}"
    );
    // A job that does not say gets the defaults, and is told what it has.
    let id = b.submit_sh(&[], "echo \"cpus=$BATON_CPUS mem=$BATON_MEM\" > told");
    b.wait_ok(&[id]);
    assert_eq!(b.read("told").trim(), format!("cpus=2 mem={}", 1u64 << 30));
    let job = b.job(id);
    assert_eq!(
        (job["cpus"].clone(), job["mem"].clone()),
        (2.into(), (1u64 << 30).into())
    );
}

#[test]
fn without_a_setting_the_daemon_counts_this_machines_cores() {
    let mut b = Baton::unstarted();
    b.serve_detecting_resources(&["serve", "--sim-gpus", "1"]);
    let info = b.run(&["info", "--json"]).expect(0).json();
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(info["cpus"], cores, "{info:#}");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert_eq!(info["memory"], kib * 1024, "{info:#}");
}

#[test]
fn requests_no_machine_here_can_meet_are_refused_with_what_exists() {
    let b = start_with("4", "8GiB");
    let out = b.run(&["submit", "--cpus", "5", "--", "true"]).expect(2);
    assert!(
        out.stderr.contains("asked for 5 CPUs; jobs may use 4 here"),
        "{out:?}"
    );
    let out = b.run(&["submit", "--mem", "9GiB", "--", "true"]).expect(2);
    assert!(
        out.stderr
            .contains("asked for 9 GiB of memory; jobs may use 8 GiB here"),
        "{out:?}"
    );
    let out = b.run(&["submit", "--cpus", "0", "--", "true"]).expect(2);
    assert!(out.stderr.contains("--cpus must be at least 1"), "{out:?}");
    let out = b.run(&["submit", "--mem", "lots", "--", "true"]).expect(2);
    assert!(out.stderr.contains("lots"), "{out:?}");
    let status = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(
        status.as_array().unwrap().len(),
        0,
        "nothing was queued: {status:#}"
    );
}

#[test]
fn a_job_past_its_memory_reservation_is_killed_and_says_so() {
    let b = start_with("4", "8GiB");
    // 300 MiB written (so resident), held, with 64 MiB reserved.
    let id = b.submit(&[
        "--mem",
        "64MiB",
        "--name",
        "greedy",
        "--",
        "python3",
        "-c",
        "import time; b = b'x' * (300 << 20); print('allocated', flush=True); time.sleep(120)",
    ]);
    let out = b.wait(&[id], "60s");
    assert_eq!(out.code, 1, "{out:?}");
    let job = b.job(id);
    assert_eq!(job["state"], "failed", "{job:#}");
    assert_eq!(
        job["reason"], "exceeded its 64 MiB memory request (killed)",
        "{job:#}"
    );
    let report = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(
        report.contains("failed after") && report.contains("exceeded its 64 MiB memory request"),
        "{report}"
    );
    assert!(report.contains("ask for more with `--mem`"), "{report}");
    // A job within its reservation is left alone.
    let ok = b.submit(&[
        "--mem",
        "512MiB",
        "--",
        "python3",
        "-c",
        "import time; b = b'x' * (64 << 20); time.sleep(1.5)",
    ]);
    b.wait_ok(&[ok]);
}

#[test]
fn workflow_tasks_ask_for_cores_and_memory() {
    let b = start_with("4", "8GiB");
    let file = b.path("cores.yaml");
    std::fs::write(
        &file,
        "name: cores\ntasks:\n  a: {command: \"until [ -e go ]; do sleep 0.05; done\", cpus: 3, priority: 5}\n  \
         b: {command: \"echo $BATON_CPUS $BATON_MEM > b.txt\", cpus: 2, mem: 1GiB}\n",
    )
    .unwrap();
    let out = b
        .run(&["workflow", "submit", file.to_str().unwrap()])
        .expect(0);
    let wf = out.stdout.trim().to_string();
    let wf = b
        .run(&["workflow", "status", &wf, "--json"])
        .expect(0)
        .json();
    let job_of = |task: &str| {
        wf["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["task"] == task)
            .and_then(|t| t["job"]["id"].as_u64())
            .unwrap()
    };
    let (a, bj) = (job_of("a"), job_of("b"));
    b.wait_running(a);
    let reason = b.wait_reason(bj);
    assert!(reason.contains("needs 2 CPUs, 1 of 4 free"), "{reason}");
    b.touch("go");
    b.wait_ok(&[a, bj]);
    assert_eq!(b.read("b.txt").trim(), format!("2 {}", 1u64 << 30));

    // Atomic: the tasks must hold their cores at once, which 4 cannot.
    let atomic = b.path("atomic.yaml");
    std::fs::write(
        &atomic,
        "name: big\natomic: true\ntasks:\n  a: {command: \"true\", cpus: 3}\n  b: {command: \"true\", cpus: 2}\n",
    )
    .unwrap();
    let out = b
        .run(&["workflow", "submit", atomic.to_str().unwrap()])
        .expect(2);
    assert!(
        out.stderr
            .contains("must hold their cores and memory at once (5 CPUs"),
        "{out:?}"
    );
    let file = b.path("bad.yaml");
    std::fs::write(
        &file,
        "name: bad\ntasks:\n  a: {command: \"true\", mem: lots}\n",
    )
    .unwrap();
    let out = b
        .run(&["workflow", "submit", file.to_str().unwrap()])
        .expect(2);
    assert!(
        out.stderr.contains("line 3, column 3: task a: mem:"),
        "{out:?}"
    );
}
