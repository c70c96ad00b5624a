//! The harness for baton's integration tests: a real daemon (the built `baton` binary) on
//! simulated GPUs in a temporary BATON_HOME, driven through the real CLI as subprocesses.
//!
//! Every test gets its own daemon and its own temporary directory, so tests run in parallel
//! without seeing each other. Synchronisation is by events: `baton wait` (held server-side),
//! files the jobs write, and, where no event exists (a job reaching `running`), bounded polling
//! with a deadline.
//!
//! Dropping a [`Baton`] kills its daemon and every process that still carries its BATON_HOME in
//! its environment (supervisors and jobs inherit it), so a failed test leaves nothing behind.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The binary under test: `baton`, the front end, which hands every command but `submit` to
/// `batond` beside it.
pub const BIN: &str = env!("CARGO_BIN_EXE_baton");
/// The whole of baton, beside `BIN`.
pub const BATOND: &str = env!("CARGO_BIN_EXE_batond");

/// How long any single bounded poll may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(15);
/// Between two looks in a bounded poll.
pub const POLL: Duration = Duration::from_millis(25);

/// A job script fragment that blocks until the file `name` exists (the test creates it to release
/// the job). Polling happens inside the job, never in the test.
pub fn wait_for_file(name: &str) -> String {
    format!("while [ ! -e '{name}' ]; do sleep 0.02; done")
}

/// What a finished CLI command did.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub what: String,
}

impl Out {
    fn from(what: String, out: std::process::Output) -> Out {
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            what,
        }
    }

    /// Asserts the exit code, showing everything the command printed when it is wrong.
    #[track_caller]
    pub fn expect(self, code: i32) -> Out {
        assert_eq!(
            self.code, code,
            "`{}` exited {} (expected {code})\nstdout:\n{}\nstderr:\n{}",
            self.what, self.code, self.stdout, self.stderr
        );
        self
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("`{}` printed no JSON ({e}):\n{}", self.what, self.stdout))
    }
}

/// One daemon in its own temporary directory:
/// `<root>/home` is BATON_HOME, `<root>/work` is where jobs run and write their files.
pub struct Baton {
    pub root: PathBuf,
    pub home: PathBuf,
    pub work: PathBuf,
    /// `Some` when the daemon listens somewhere other than `$BATON_HOME/baton.sock`.
    pub socket: Option<PathBuf>,
    /// The baton binary the daemon runs (a copy, for system mode).
    pub bin: PathBuf,
    serve_args: Vec<String>,
    /// The daemon counts this machine's cores instead of the tests' 64 (`BATON_MACHINE_CPUS`).
    detect_resources: bool,
    daemon: Option<Child>,
    /// The cgroup directory the daemon keeps its jobs' cgroups in, removed with the test.
    cgroup_root: Option<PathBuf>,
    // Last: removed after Drop has killed everything that could still write into it.
    _tmp: tempfile::TempDir,
}

impl Baton {
    /// A daemon with `gpus` simulated GPUs and a 1 s cancel grace, ready to answer.
    pub fn start(gpus: u32) -> Baton {
        let mut b = Baton::unstarted();
        b.serve_args = vec![
            "serve".into(),
            "--sim-gpus".into(),
            gpus.to_string(),
            "--grace".into(),
            "1s".into(),
        ];
        b.serve();
        b
    }

    /// A daemon on `gpus` simulated GPUs and a 1 s cancel grace, with `config` as its
    /// config.toml.
    pub fn with_config(gpus: u32, config: &str) -> Baton {
        let mut b = Baton::unstarted();
        std::fs::create_dir_all(&b.home).unwrap();
        std::fs::write(b.home.join("config.toml"), config).unwrap();
        b.serve_with(&["serve", "--sim-gpus", &gpus.to_string(), "--grace", "1s"]);
        b
    }

    /// The directories, but no daemon yet.
    pub fn unstarted() -> Baton {
        Baton::unstarted_in(&std::env::temp_dir())
    }

    pub fn unstarted_in(parent: &Path) -> Baton {
        let tmp = tempfile::Builder::new()
            .prefix("baton-it-")
            .tempdir_in(parent)
            .expect("create a temporary directory");
        let root = tmp.path().to_path_buf();
        let home = root.join("home");
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        Baton {
            root,
            home,
            work,
            socket: None,
            bin: PathBuf::from(BIN),
            serve_args: Vec::new(),
            detect_resources: false,
            daemon: None,
            cgroup_root: None,
            _tmp: tmp,
        }
    }

    /// Starts the daemon with `args` (the whole command line after the binary) and waits until it
    /// answers `baton status`.
    pub fn serve_with(&mut self, args: &[&str]) {
        self.serve_args = args.iter().map(|s| s.to_string()).collect();
        self.serve();
    }

    /// Starts the daemon with `args`, counting this machine's cores as a user's daemon does.
    pub fn serve_detecting_resources(&mut self, args: &[&str]) {
        self.detect_resources = true;
        self.serve_with(args);
    }

    /// (Re)starts the daemon with the arguments it was first started with.
    pub fn serve(&mut self) {
        assert!(self.daemon.is_none(), "a daemon is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("daemon.log"))
            .unwrap();
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.serve_args)
            .env("BATON_HOME", &self.home)
            .env_remove("BATON_SOCKET")
            .env_remove("BATON_SIM_GPUS")
            // As in `cmd`; `--cpus` among the arguments wins.
            .env("BATON_MACHINE_CPUS", "64")
            .env_remove("BATON_MACHINE_MEMORY")
            .env("BATON_LOG", "info")
            .current_dir(&self.work)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        if self.detect_resources {
            cmd.env_remove("BATON_MACHINE_CPUS");
        }
        let mut child = spawn_retrying(&mut cmd);
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "baton serve exited early ({status}); its log:\n{}",
                    self.daemon_log()
                );
            }
            let out = self.run(&["status"]);
            if out.code == 0 {
                break;
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the daemon did not answer within {DEADLINE:?}: {out:?}\nlog:\n{}",
                    self.daemon_log()
                );
            }
            std::thread::sleep(POLL);
        }
        self.daemon = Some(child);
        let info = self.run(&["info", "--json"]);
        if info.code == 0 {
            self.cgroup_root = info.json()["cgroup_root"].as_str().map(PathBuf::from);
        }
    }

    /// SIGKILLs the daemon (not its jobs) and reaps it.
    pub fn kill_daemon(&mut self) {
        let mut child = self.daemon.take().expect("no daemon to kill");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Stops the daemon with SIGTERM, as a service manager would, and waits for it to exit.
    pub fn stop_daemon(&mut self) -> std::process::ExitStatus {
        let mut child = self.daemon.take().expect("no daemon to stop");
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the daemon ignored SIGTERM for {DEADLINE:?}:\n{}",
                    self.daemon_log()
                );
            }
            std::thread::sleep(POLL);
        }
    }

    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.root.join("daemon.log")).unwrap_or_default()
    }

    /// A `baton` command for this daemon: BATON_HOME set, BATON_SOCKET only if the daemon uses
    /// another socket, run in the work directory.
    pub fn cmd<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env("BATON_HOME", &self.home)
            .env_remove("BATON_SIM_GPUS")
            // Cores to spare, as on the GPU servers baton is for: the tests run many jobs at
            // once on small CI machines. (A daemon started by a command inherits it; tests of
            // the cores as a limit start theirs with `--cpus`.)
            .env("BATON_MACHINE_CPUS", "64")
            .env_remove("BATON_MACHINE_MEMORY")
            // The agent session the tests run in (a developer's tmux, Claude Code, Codex) must
            // never receive the tests' reports: each test sets the context it means to test.
            .env_remove("CLAUDE_CODE_SESSION_ID")
            .env_remove("CLAUDE_CODE_MESSAGING_SOCKET")
            .env_remove("CLAUDE_CODE_MESSAGING_TOKEN")
            .env_remove("CODEX_THREAD_ID")
            .env_remove("TMUX")
            .env_remove("TMUX_PANE")
            .current_dir(&self.work)
            .stdin(Stdio::null());
        match &self.socket {
            Some(sock) => cmd.env("BATON_SOCKET", sock),
            None => cmd.env_remove("BATON_SOCKET"),
        };
        cmd
    }

    /// Runs a `baton` command to completion.
    pub fn run(&self, args: &[&str]) -> Out {
        run_cmd(self.cmd(args))
    }

    /// `baton submit ARGS` (ARGS includes `--` and the command); returns the job id.
    #[track_caller]
    pub fn submit(&self, args: &[&str]) -> u64 {
        let mut full = vec!["submit"];
        full.extend_from_slice(args);
        let out = self.run(&full).expect(0);
        out.stdout
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("submit printed {:?}, not a job id", out.stdout))
    }

    /// Submits `sh -c SCRIPT` with the given options.
    #[track_caller]
    pub fn submit_sh(&self, opts: &[&str], script: &str) -> u64 {
        let mut args = opts.to_vec();
        args.extend_from_slice(&["--", "sh", "-c", script]);
        self.submit(&args)
    }

    /// The job object of `id` (`baton status ID --json`).
    #[track_caller]
    pub fn job(&self, id: u64) -> Value {
        let out = self.run(&["status", &id.to_string(), "--json"]).expect(0);
        let jobs = out.json();
        let job = jobs
            .as_array()
            .and_then(|a| a.first())
            .unwrap_or_else(|| panic!("status {id} returned {jobs}"));
        assert_eq!(job["id"], id, "status {id} returned another job: {job}");
        job.clone()
    }

    pub fn state(&self, id: u64) -> String {
        self.job(id)["state"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// `baton wait IDS --timeout T`; the caller checks the exit code.
    pub fn wait(&self, ids: &[u64], timeout: &str) -> Out {
        let mut args = vec!["wait".to_string()];
        args.extend(ids.iter().map(u64::to_string));
        args.extend(["--timeout".to_string(), timeout.to_string()]);
        run_cmd(self.cmd(&args))
    }

    /// Waits (server-side) for the jobs to end and asserts that all succeeded.
    #[track_caller]
    pub fn wait_ok(&self, ids: &[u64]) {
        let out = self.wait(ids, "30s");
        if out.code != 0 {
            let states: Vec<Value> = ids.iter().map(|&id| self.job(id)).collect();
            panic!(
                "jobs {ids:?} did not all succeed: {out:?}\njobs: {states:#?}\ndaemon log:\n{}",
                self.daemon_log()
            );
        }
    }

    /// Polls the job until `pred` holds (no event exists for "started" or "reason set").
    #[track_caller]
    pub fn poll_job(&self, id: u64, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + DEADLINE;
        loop {
            let job = self.job(id);
            if pred(&job) {
                return job;
            }
            if Instant::now() > until {
                panic!("job {id} never became {what} within {DEADLINE:?}; it is {job:#}");
            }
            std::thread::sleep(POLL);
        }
    }

    #[track_caller]
    pub fn wait_running(&self, id: u64) -> Value {
        self.poll_job(id, "running", |j| j["state"] == "running")
    }

    /// Waits until the job's supervisor has started its process. `running` is committed before
    /// the supervisor is forked, so a test that kills the daemon and expects the job to run on
    /// without it must wait for this instead (a daemon killed in between starts it again once it
    /// is back, as recovery should).
    #[track_caller]
    pub fn wait_spawned(&self, id: u64) {
        self.wait_running(id);
        let record = self.home.join(format!("jobs/{id}/supervisor"));
        let until = Instant::now() + DEADLINE;
        while !std::fs::read_to_string(&record)
            .unwrap_or_default()
            .contains("\"event\":\"spawned\"")
        {
            assert!(
                Instant::now() < until,
                "job {id}'s supervisor never started it within {DEADLINE:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// Waits until a scheduling pass has looked at the queued job and said why it waits.
    #[track_caller]
    pub fn wait_reason(&self, id: u64) -> String {
        let job = self.poll_job(id, "queued with a reason", |j| {
            j["state"] != "queued" || j["reason"].is_string()
        });
        assert_eq!(
            job["state"], "queued",
            "job {id} should still be queued: {job:#}"
        );
        job["reason"].as_str().unwrap().to_string()
    }

    /// A path in the work directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// Creates a file in the work directory (releasing jobs that wait for it).
    pub fn touch(&self, name: &str) {
        std::fs::File::create(self.path(name)).unwrap();
    }

    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    /// Waits until a job has written the file (bounded).
    #[track_caller]
    pub fn wait_file(&self, name: &str) {
        wait_path(&self.path(name));
    }
}

impl Drop for Baton {
    fn drop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        kill_processes_of(&self.home);
        if let Some(root) = &self.cgroup_root {
            remove_cgroups(root);
        }
        if std::thread::panicking() {
            eprintln!(
                "--- daemon log ({}) ---\n{}",
                self.root.display(),
                self.daemon_log()
            );
        }
    }
}

/// Removes a daemon's cgroup directory and its jobs' cgroups, once their (killed) processes are
/// gone (bounded).
fn remove_cgroups(root: &Path) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let children: Vec<PathBuf> = std::fs::read_dir(root)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        for dir in &children {
            let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            let _ = std::fs::remove_dir(dir);
        }
        if std::fs::remove_dir(root).is_ok() || !root.exists() || Instant::now() > until {
            return;
        }
        std::thread::sleep(POLL);
    }
}

/// Runs a command to completion, capturing its output.
pub fn run_cmd(mut cmd: Command) -> Out {
    let what = format!("{cmd:?}");
    let out = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    Out::from(what, out)
}

#[track_caller]
pub fn wait_path(path: &Path) {
    let until = Instant::now() + DEADLINE;
    while !path.exists() {
        assert!(
            Instant::now() < until,
            "{} did not appear within {DEADLINE:?}",
            path.display()
        );
        std::thread::sleep(POLL);
    }
}

/// Waits (bounded) until the file at `path` contains `needle`.
pub fn wait_contains(path: &Path, needle: &str) {
    let until = Instant::now() + DEADLINE;
    while !std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
        assert!(
            Instant::now() < until,
            "{} did not come to contain {needle:?} within {DEADLINE:?}",
            path.display()
        );
        std::thread::sleep(POLL);
    }
}

/// How many client connections the Unix socket at `path` has accepted and still holds open (from
/// /proc/net/unix: the server's ends of accepted connections carry the socket's path).
pub fn connections_to(path: &Path) -> usize {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let path = path.to_string_lossy();
    text.lines()
        .skip(1)
        .filter(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // Num RefCount Protocol Flags Type St Inode Path; St 03 = connected.
            cols.len() == 8 && cols[5] == "03" && cols[7] == path
        })
        .count()
}

/// Whether a process exists and is not a zombie (a zombie is dead; only its parent has not
/// collected it yet, and `kill -0` still succeeds on it).
pub fn alive(pid: i32) -> bool {
    if unsafe { libc::kill(pid, 0) } != 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !(state.starts_with('Z') || state.starts_with('X'))
        }
        Err(_) => false,
    }
}

/// The pids of processes whose environment has `BATON_HOME=<home>`: a daemon serving that home,
/// its supervisors, and the jobs (which inherit the submitter's environment).
pub fn processes_of(home: &Path) -> Vec<i32> {
    let mut needle = b"BATON_HOME=".to_vec();
    needle.extend_from_slice(home.as_os_str().as_encoded_bytes());
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|&b| b == 0).any(|var| var == needle.as_slice()))
                .unwrap_or(false)
        })
        .collect()
}

/// SIGKILLs everything `processes_of(home)` finds, a few rounds (a supervisor may be starting a
/// job while we look).
pub fn kill_processes_of(home: &Path) {
    for _ in 0..3 {
        let pids = processes_of(home);
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Parses an RFC 3339 timestamp from a job object into milliseconds since the epoch.
pub fn millis(v: &Value) -> i64 {
    let text = v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}"));
    let t = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Spawns `cmd`, again while the kernel says its binary is busy (ETXTBSY): a test that just
/// copied the binary (system mode runs a copy) may still have a writable descriptor of it in a
/// child another test forked meanwhile, until that child execs.
pub fn spawn_retrying(cmd: &mut Command) -> Child {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match cmd.spawn() {
            Ok(child) => return child,
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy && Instant::now() < until =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("start {:?}: {e}", cmd.get_program()),
        }
    }
}

/// One HTTP/1.1 request to `base` (`http://HOST:PORT`), its whole answer: status, headers
/// (lower-cased names) and body. `body` makes it a form POST.
pub fn http_request(
    base: &str,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    use std::io::{Read, Write};
    let host = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
    let form = if method == "POST" {
        format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        )
    } else {
        String::new()
    };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{cookie}{form}Connection: close\r\n\r\n{body}"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    (status, headers, body.to_string())
}

/// A daemon on `gpus` simulated GPUs with `config` as its config.toml, serving the dashboard on
/// a loopback port of its choosing; and the dashboard's address (`http://127.0.0.1:PORT`).
pub fn with_dashboard(gpus: u32, config: &str) -> (Baton, String) {
    let mut b = Baton::unstarted();
    std::fs::create_dir_all(&b.home).unwrap();
    std::fs::write(b.home.join("config.toml"), config).unwrap();
    let gpus = gpus.to_string();
    b.serve_with(&[
        "serve",
        "--sim-gpus",
        &gpus,
        "--grace",
        "1s",
        "--web-addr",
        "127.0.0.1:0",
    ]);
    let login = b
        .run(&["dashboard", "--no-open", "--json"])
        .expect(0)
        .json();
    let base = login["base"].as_str().unwrap().to_string();
    (b, base)
}

/// `GET path`, as [`http_request`].
pub fn http(base: &str, path: &str, cookie: Option<&str>) -> (u16, Vec<(String, String)>, String) {
    http_request(base, "GET", path, cookie, "")
}

/// A form `POST path`, as [`http_request`].
pub fn http_post(
    base: &str,
    path: &str,
    cookie: Option<&str>,
    form: &str,
) -> (u16, Vec<(String, String)>, String) {
    http_request(base, "POST", path, cookie, form)
}

/// The first header called `name` (lower case).
pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}
