//! Wake-ups of the REAL agent TUIs, end to end: Claude Code and Codex run in tmux panes against
//! a fake model server (`tests/agent/fake_model.py`), each in a fresh HOME, and the "model" makes
//! the agent's shell tool run `baton submit`. When the test releases the job, baton delivers the
//! report, and the fake server's request log shows how many new model turns carried it: a
//! session must be woken exactly once (or, once it has quit, not at all).
//!
//! The top of the file holds the scenario-independent parts (finding the CLIs, the fake model,
//! a private tmux server, seeding the agents' homes, one `Session` that puts them together);
//! the scenarios follow, one `#[test]` each. See `shared/agents/README.md` for what the CLIs need.
//!
//! Every test skips (with a printed reason) when `claude`, `codex` or `tmux` is missing, unless
//! `BATON_REQUIRE_AGENT_CLIS=1` is set. Run with `--nocapture` to see the wake counts and delays.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{BIN, Baton, millis, run_cmd};
use serde_json::{Value, json};

/// How long an agent may take to start or to answer a prompt.
const SLOW: Duration = Duration::from_secs(90);
/// How long a report may take to wake the agent after the job ended (Codex took up to ~10 s).
const WAKE: Duration = Duration::from_secs(45);
/// After the first report-carrying request: long enough for a second delivery to show up if one
/// were coming (tmux types ~600 ms after a delivery; Codex picks queued input up within ~4 s).
const QUIET: Duration = Duration::from_secs(8);
/// The same for Codex: run without its daemon, the TUI took input queued by `codex queue` up to
/// ~10 s late (9.5 s seen), so a second copy could come that much after the first.
const CODEX_QUIET: Duration = Duration::from_secs(12);
const POLL: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// Which CLIs are installed
// ---------------------------------------------------------------------------------------------

/// Whether `program` can be started at all (`-V`: every one of them answers it quickly).
fn have(program: &str) -> bool {
    Command::new(program)
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// True when all `programs` are installed. Otherwise the test is skipped with a printed reason,
/// or fails when BATON_REQUIRE_AGENT_CLIS is set (CI installs them).
fn require(programs: &[&str]) -> bool {
    for program in programs {
        if !have(program) {
            assert!(
                std::env::var_os("BATON_REQUIRE_AGENT_CLIS").is_none(),
                "{program} is required (BATON_REQUIRE_AGENT_CLIS is set) but not installed"
            );
            eprintln!("skipping: {program} is not installed");
            return false;
        }
    }
    eprintln!("{}", versions());
    true
}

/// The installed versions, asked once per test binary.
fn versions() -> &'static str {
    static VERSIONS: OnceLock<String> = OnceLock::new();
    VERSIONS.get_or_init(|| {
        let version = |program: &str, arg: &str| {
            Command::new(program)
                .arg(arg)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|e| format!("({e})"))
        };
        format!(
            "versions: claude {:?}, codex {:?}, {:?}",
            version("claude", "--version"),
            version("codex", "--version"),
            version("tmux", "-V")
        )
    })
}

/// Codex's native binary. npm's `codex` is a node launcher (`bin/codex.js`) that starts it as a
/// child; tests that are not about the launcher run the native binary directly.
fn native_codex() -> PathBuf {
    let out = Command::new("sh")
        .args(["-c", "command -v codex"])
        .output()
        .unwrap();
    let found = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let real = std::fs::canonicalize(&found).unwrap_or(found);
    if real.extension().is_none_or(|e| e != "js") {
        return real;
    }
    // <prefix>/@openai/codex/bin/codex.js -> <prefix>/@openai/codex/node_modules/@openai/
    // codex-<platform>/vendor/<target>/bin/codex
    let package = real.parent().and_then(Path::parent).unwrap();
    let platforms = package.join("node_modules/@openai");
    for platform in std::fs::read_dir(&platforms)
        .into_iter()
        .flatten()
        .flatten()
    {
        for target in std::fs::read_dir(platform.path().join("vendor"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let bin = target.path().join("bin/codex");
            if bin.is_file() {
                return bin;
            }
        }
    }
    panic!("no native codex binary under {}", platforms.display());
}

// ---------------------------------------------------------------------------------------------
// The fake model server
// ---------------------------------------------------------------------------------------------

/// One request the fake model got (a line of its log).
#[derive(Clone, Debug)]
struct Request {
    /// Unix time in milliseconds.
    time: f64,
    path: String,
    /// Whether it offered tools: the agent's main loop does; side requests (Codex naming the
    /// thread) do not.
    tools: bool,
    /// The latest user turn: the new user text and tool results, not the history.
    latest: String,
    /// The scripted step it answered, if any.
    step: Option<u64>,
}

/// `tests/agent/fake_model.py`, scripted with `steps`, on a free port of 127.0.0.1.
struct FakeModel {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl FakeModel {
    fn start(dir: &Path, steps: &Value) -> FakeModel {
        let script = dir.join("model-script.json");
        std::fs::write(&script, json!({ "steps": steps }).to_string()).unwrap();
        let port_file = dir.join("model.port");
        let log = dir.join("model-requests.jsonl");
        let child = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agent/fake_model.py"))
            .args([&script, &port_file, &log])
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.join("model.stderr")).unwrap())
            .spawn()
            .expect("start python3");
        let mut model = FakeModel {
            child,
            port: 0,
            log,
        };
        let until = Instant::now() + common::DEADLINE;
        while !port_file.exists() {
            assert!(
                Instant::now() < until,
                "the fake model never wrote its port"
            );
            std::thread::sleep(common::POLL);
        }
        model.port = std::fs::read_to_string(&port_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        model
    }

    fn requests(&self) -> Vec<Request> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|v| Request {
                time: v["time"].as_f64().unwrap_or_default(),
                path: v["path"].as_str().unwrap_or_default().to_string(),
                tools: v["tools"].as_bool().unwrap_or_default(),
                latest: v["latest"].as_str().unwrap_or_default().to_string(),
                step: v["step"].as_u64(),
            })
            .collect()
    }

    /// Waits (up to `SLOW`) for a request that satisfies `pred`.
    fn wait_for(&self, what: &str, pred: impl Fn(&Request) -> bool) -> Request {
        let until = Instant::now() + SLOW;
        loop {
            if let Some(r) = self.requests().into_iter().find(&pred) {
                return r;
            }
            assert!(
                Instant::now() < until,
                "no model request {what} within {SLOW:?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// One line per request, for failure output.
    fn summary(&self) -> String {
        self.requests()
            .iter()
            .map(|r| {
                let text: String = r.latest.chars().rev().take(160).collect();
                let text: String = text.chars().rev().collect();
                format!(
                    "{:.0} {} tools={} step={:?} ...{:?}\n",
                    r.time, r.path, r.tools, r.step, text
                )
            })
            .collect()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// A private tmux server
// ---------------------------------------------------------------------------------------------

/// A tmux server of the test's own (`tmux -S <tmp>/tmux.sock`), started with exactly the
/// environment the agents get: its panes inherit it, plus `TMUX` and `TMUX_PANE`. A session
/// running `sleep` keeps the server up when an agent's pane closes. Killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(socket: PathBuf, env: &[(String, String)]) -> Tmux {
        let out = Command::new("tmux")
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("-S")
            .arg(&socket)
            .args(["-f", "/dev/null", "new-session", "-d", "-s", "keep"])
            .args(["-x", "200", "-y", "50", "sleep", "86400"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmux { socket }
    }

    fn try_tmux(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn tmux(&self, args: &[&str]) -> String {
        self.try_tmux(args)
            .unwrap_or_else(|| panic!("tmux {args:?} failed"))
    }

    /// Runs `command` (exec'd directly, no shell) in a new 200x50 window; returns its pane id.
    fn open(&self, cwd: &Path, command: &[&str]) -> String {
        let cwd = cwd.display().to_string();
        let mut args = vec!["new-window", "-d", "-P", "-F", "#{pane_id}", "-c", &cwd];
        args.extend_from_slice(command);
        self.tmux(&args).trim().to_string()
    }

    fn screen(&self, pane: &str) -> String {
        self.try_tmux(&["capture-pane", "-p", "-t", pane])
            .unwrap_or_default()
    }

    /// The pane's foreground program, as tmux (and baton) name it.
    fn program(&self, pane: &str) -> String {
        self.try_tmux(&[
            "display-message",
            "-p",
            "-t",
            pane,
            "#{pane_current_command}",
        ])
        .unwrap_or_default()
        .trim()
        .to_string()
    }

    fn has_pane(&self, pane: &str) -> bool {
        self.try_tmux(&["list-panes", "-a", "-F", "#{pane_id}"])
            .is_some_and(|panes| panes.lines().any(|p| p == pane))
    }

    /// Types `text` as keys, waits until it shows in the pane, then sends Enter as a separate key
    /// (a TUI takes an Enter that comes with the text as part of it).
    fn type_line(&self, pane: &str, text: &str) {
        self.tmux(&["send-keys", "-t", pane, "-l", text]);
        wait_until(&format!("{text:?} to show in the pane"), || {
            self.screen(pane).contains(text)
        });
        self.tmux(&["send-keys", "-t", pane, "Enter"]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.try_tmux(&["kill-server"]);
    }
}

/// Polls `cond` until it holds, for at most `SLOW`.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + SLOW;
    while !cond() {
        assert!(Instant::now() < until, "waited {SLOW:?} for {what}");
        std::thread::sleep(POLL);
    }
}

// ---------------------------------------------------------------------------------------------
// The agents' homes
// ---------------------------------------------------------------------------------------------

/// The API key Claude Code is given; the fake server takes any.
const CLAUDE_KEY: &str = "sk-ant-test-0123456789abcdefghijklmnop";

/// First-run state for Claude Code in `home`: onboarding done, the key approved, the project
/// trusted, Bash allowed in the plain "default" permission mode (the default "auto" mode asks a
/// server), and bypass mode accepted.
fn seed_claude(home: &Path, project: &Path, refuse_inbound: bool) {
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    let approved = &CLAUDE_KEY[CLAUDE_KEY.len() - 20..];
    let state = json!({
        "hasCompletedOnboarding": true,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [approved], "rejected": []},
        "projects": {project.display().to_string(): {"hasTrustDialogAccepted": true}},
        "hasSeenAutoDefaultNudge": true,
        "bypassPermissionsModeAccepted": true,
    });
    std::fs::write(home.join(".claude.json"), state.to_string()).unwrap();
    let mut settings = json!({"permissions": {"allow": ["Bash"], "defaultMode": "default"}});
    if refuse_inbound {
        settings["crossSessionInbound"] = json!("refuse");
    }
    std::fs::write(home.join(".claude/settings.json"), settings.to_string()).unwrap();
}

/// Codex's config in `codex_home`: the fake server as a Responses provider, no approvals, no
/// sandbox, the project trusted.
fn seed_codex(codex_home: &Path, project: &Path, port: u16) {
    std::fs::create_dir_all(codex_home).unwrap();
    let config = format!(
        r#"model = "gpt-5.1-codex"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.fake]
name = "fake"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "FAKE_MODEL_KEY"
requires_openai_auth = false

[projects."{}"]
trust_level = "trusted"
"#,
        project.display()
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
}

/// Kills what Codex's managed daemon left behind (`app-server-daemon/*.pid`).
fn kill_codex_daemons(codex_home: &Path) {
    let dir = codex_home.join("app-server-daemon");
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "pid")
            && let Ok(pid) = std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .trim()
                .parse::<i32>()
        {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One agent session under test
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Agent {
    /// `claude`; `bypass` adds `--dangerously-skip-permissions`.
    Claude { bypass: bool },
    /// Codex's native binary.
    Codex,
    /// npm's `codex` launcher: node runs the native binary as its child.
    CodexViaNode,
}

/// What a scenario sets up besides the agent.
#[derive(Clone, Copy, Debug, Default)]
struct Options {
    /// Run `baton agent setup claude` into the test HOME first (the wake-up hook).
    hook: bool,
    /// Hide tmux from the agent (`TMUX`, `TMUX_PANE` unset), so no tmux channel exists.
    outside_tmux: bool,
    /// `crossSessionInbound = "refuse"` in Claude Code's user settings.
    refuse_inbound: bool,
    /// Start Claude Code in the default mode, allowed to enter bypass mode, and switch to it
    /// (Shift+Tab) before the job is submitted: its command line then does not say so.
    switch_to_bypass: bool,
    /// Let Codex start its managed app-server daemon (the default; the first start copies its
    /// binary into `$CODEX_HOME/packages/`, about 12 s).
    codex_daemon: bool,
}

/// A real agent TUI in a tmux pane, its fake model, and a baton daemon. Dropping it kills the
/// tmux server (and the agent with it), the model, any Codex daemon, the baton daemon, and every
/// process still carrying its BATON_HOME.
struct Session {
    agent: Agent,
    pane: String,
    codex_home: PathBuf,
    // Dropped in this order: the panes first, then the model, then baton (whose drop kills
    // whatever still has its BATON_HOME in its environment, agents and hooks included).
    tmux: Tmux,
    model: FakeModel,
    b: Baton,
}

impl Session {
    /// Starts `agent` in a tmux pane in the daemon's work directory, with the model scripted by
    /// `steps` (built from the daemon, for its paths), and waits until its prompt takes input.
    fn start(agent: Agent, opts: Options, steps: impl FnOnce(&Baton) -> Value) -> Session {
        let b = Baton::start(1);
        let steps = steps(&b);
        let work = std::fs::canonicalize(&b.work).unwrap();
        let home = b.root.join("agent-home");
        let runtime = b.root.join("runtime");
        let codex_home = b.root.join("codex-home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&runtime).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let model = FakeModel::start(&b.root, &steps);
        seed_claude(&home, &work, opts.refuse_inbound);
        seed_codex(&codex_home, &work, model.port);
        if opts.hook {
            let mut setup = b.cmd(["agent", "setup", "claude"]);
            setup.env("HOME", &home);
            run_cmd(setup).expect(0);
        }

        let s = |v: &str| v.to_string();
        let path = |p: &Path| p.display().to_string();
        let env: Vec<(String, String)> = vec![
            (s("PATH"), std::env::var("PATH").unwrap_or_default()),
            (s("HOME"), path(&home)),
            (s("XDG_RUNTIME_DIR"), path(&runtime)),
            (s("TERM"), s("xterm-256color")),
            (s("LANG"), s("C.UTF-8")),
            (s("SHELL"), s("/bin/sh")),
            // Reaches the agent, its tools (so `baton submit` finds the daemon) and its hooks.
            (s("BATON_HOME"), path(&b.home)),
            (
                s("ANTHROPIC_BASE_URL"),
                format!("http://127.0.0.1:{}", model.port),
            ),
            (s("ANTHROPIC_API_KEY"), s(CLAUDE_KEY)),
            (s("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), s("1")),
            (s("DISABLE_TELEMETRY"), s("1")),
            (s("DISABLE_AUTOUPDATER"), s("1")),
            (s("DISABLE_ERROR_REPORTING"), s("1")),
            // As root, --dangerously-skip-permissions needs it.
            (s("IS_SANDBOX"), s("1")),
            (s("CODEX_HOME"), path(&codex_home)),
            (s("FAKE_MODEL_KEY"), s("fake")),
        ];
        let tmux = Tmux::start(b.root.join("tmux.sock"), &env);

        let native = native_codex().display().to_string();
        // Always through `env`, which execs the agent: tmux runs a one-word command through a
        // shell, which would then be the pane's program.
        let mut command: Vec<&str> = vec!["env"];
        if opts.outside_tmux {
            command.extend(["-u", "TMUX", "-u", "TMUX_PANE"]);
        }
        let program = match agent {
            Agent::Claude { bypass } => {
                command.push("claude");
                if bypass {
                    command.push("--dangerously-skip-permissions");
                }
                if opts.switch_to_bypass {
                    command.push("--allow-dangerously-skip-permissions");
                }
                "claude"
            }
            Agent::Codex => {
                command.push(native.as_str());
                if !opts.codex_daemon {
                    command.extend(["--disable", "daemon_auto_start"]);
                }
                "codex"
            }
            Agent::CodexViaNode => {
                command.extend(["codex", "--disable", "daemon_auto_start"]);
                "node"
            }
        };
        let pane = tmux.open(&work, &command);
        let switch_to_bypass = opts.switch_to_bypass;
        let session = Session {
            agent,
            pane,
            codex_home,
            tmux,
            model,
            b,
        };
        // Ready once the footer under the input box is drawn.
        wait_until(&format!("{agent:?} to be ready"), || {
            let screen = session.tmux.screen(&session.pane);
            session.tmux.program(&session.pane) == program
                && ["? for shortcuts", "bypass permissions on"]
                    .iter()
                    .any(|footer| screen.contains(footer))
        });
        if switch_to_bypass {
            // Shift+Tab cycles the modes; bypass is one of them when allowed.
            for _ in 0..6 {
                if session
                    .tmux
                    .screen(&session.pane)
                    .contains("bypass permissions on")
                {
                    break;
                }
                session
                    .tmux
                    .tmux(&["send-keys", "-t", &session.pane, "BTab"]);
                std::thread::sleep(Duration::from_millis(400));
            }
            wait_until("bypass mode", || {
                session
                    .tmux
                    .screen(&session.pane)
                    .contains("bypass permissions on")
            });
        }
        session
    }

    /// Types a prompt into the agent.
    fn prompt(&self, text: &str) {
        self.tmux.type_line(&self.pane, text);
    }

    /// Types a prompt whose scripted step runs in the background, and waits until that turn has
    /// ended (the tool's answer is that the command runs in the background).
    fn prompt_background(&self, text: &str) {
        self.prompt(text);
        self.wait_turn_done("background");
    }

    /// Waits for the tool result of the scripted `baton submit` and returns the job's id.
    fn submitted_job(&self) -> u64 {
        let r = self.model.wait_for("carrying baton submit's output", |r| {
            r.latest.contains("baton: queued job ")
        });
        let rest = &r.latest[r.latest.find("baton: queued job ").unwrap() + 18..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    }

    /// Waits for the agent's turn to end: the model answered a request that ran no step, after
    /// the request that carried `needle`.
    fn wait_turn_done(&self, needle: &str) {
        let at = self
            .model
            .wait_for(&format!("carrying {needle:?}"), |r| {
                r.latest.contains(needle)
            })
            .time;
        self.model.wait_for("ending the turn", |r| {
            r.time >= at && r.tools && r.step.is_none()
        });
    }

    /// Releases the job (creates the file it waits for), waits for it to end, and returns its
    /// `ended_at` in unix milliseconds.
    fn release(&self, id: u64) -> i64 {
        self.b.touch(RELEASE);
        self.b.wait_ok(&[id]);
        millis(&self.b.job(id)["ended_at"])
    }

    /// The model requests since `since` (unix ms) whose latest user turn carries job `id`'s
    /// report.
    fn wakes(&self, id: u64, since: i64) -> Vec<Request> {
        let doorbell = format!("[baton] job {id} ended");
        self.model
            .requests()
            .into_iter()
            .filter(|r| r.time >= since as f64 && r.latest.contains(&doorbell))
            .collect()
    }

    /// Waits for the first request carrying the report, then a quiet time more for a second
    /// one; returns them all.
    fn wait_wakes(&self, id: u64, ended: i64) -> Vec<Request> {
        let until = Instant::now() + WAKE;
        while self.wakes(id, ended).is_empty() && Instant::now() < until {
            std::thread::sleep(POLL);
        }
        if !self.wakes(id, ended).is_empty() {
            std::thread::sleep(match self.agent {
                Agent::Claude { .. } => QUIET,
                Agent::Codex | Agent::CodexViaNode => CODEX_QUIET,
            });
        }
        self.wakes(id, ended)
    }

    /// `baton report ID --json`'s deliveries once none is `pending` or `standby` (bounded).
    fn settled_deliveries(&self, id: u64) -> Vec<Value> {
        let until = Instant::now() + SLOW;
        loop {
            let report = self
                .b
                .run(&["report", &id.to_string(), "--json"])
                .expect(0)
                .json();
            let deliveries = report["deliveries"].as_array().cloned().unwrap_or_default();
            if !deliveries.is_empty()
                && deliveries
                    .iter()
                    .all(|d| d["state"] != "pending" && d["state"] != "standby")
            {
                return deliveries;
            }
            assert!(
                Instant::now() < until,
                "deliveries of job {id} still unsettled: {deliveries:#?}"
            );
            std::thread::sleep(POLL);
        }
    }

    /// The delivery whose channel starts with `kind` (`claude:`, `tmux:`, `file:` ...).
    fn delivery<'a>(deliveries: &'a [Value], kind: &str) -> &'a Value {
        deliveries
            .iter()
            .find(|d| d["channel"].as_str().unwrap_or("").starts_with(kind))
            .unwrap_or_else(|| panic!("no {kind} delivery in {deliveries:#?}"))
    }

    /// Quits the agent with its slash command and waits for its pane to close.
    fn quit(&self) {
        let command = match self.agent {
            Agent::Claude { .. } => "/exit",
            Agent::Codex | Agent::CodexViaNode => "/quit",
        };
        self.prompt(command);
        wait_until("the agent to exit", || !self.tmux.has_pane(&self.pane));
    }

    /// Logs what a scenario saw, for the test output.
    fn log(&self, scenario: &str, id: u64, ended: i64, wakes: &[Request], deliveries: &[Value]) {
        let delays: Vec<i64> = wakes.iter().map(|r| r.time as i64 - ended).collect();
        let states: Vec<String> = deliveries
            .iter()
            .map(|d| format!("{}={}", d["channel"].as_str().unwrap_or("?"), d["state"]))
            .collect();
        eprintln!(
            "[{scenario}] job {id}: {} report-carrying request(s), delays from ended_at {delays:?} ms; deliveries: {}",
            wakes.len(),
            states.join(", ")
        );
        for w in wakes {
            // How the report came in: the start of the turn's text.
            let at = w.latest.find("[baton] job").unwrap_or(0);
            let from = (0..=at.saturating_sub(60))
                .rev()
                .find(|&i| w.latest.is_char_boundary(i))
                .unwrap_or(0);
            let head: String = w.latest[from..].chars().take(100).collect();
            eprintln!("[{scenario}]   +{} ms: {head:?}", w.time as i64 - ended);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- pane {} ---\n{}\n--- model requests ---\n{}",
                self.pane,
                self.tmux.screen(&self.pane),
                self.model.summary()
            );
        }
        let _ = self.tmux.try_tmux(&["kill-server"]);
        kill_codex_daemons(&self.codex_home);
    }
}

/// The file the job waits for, in the daemon's work directory.
const RELEASE: &str = "release-the-job";

/// The shell command the model has the agent run: `baton submit NOTIFY -- sh -c JOB`, where the
/// job blocks until the test releases it, then prints a metric the report carries.
fn submit_command(b: &Baton, notify: &[&str]) -> String {
    let work = std::fs::canonicalize(&b.work).unwrap();
    let release = work.join(RELEASE);
    let mut cmd = format!("{BIN} submit");
    for spec in notify {
        cmd.push_str(&format!(" --notify {spec}"));
    }
    cmd.push_str(&format!(
        " -- sh -c 'while [ ! -e {} ]; do sleep 0.05; done; echo val_loss=0.25'",
        release.display()
    ));
    cmd
}

/// Starts the agent, has it submit the job (`baton submit` with `notify`, typed as the prompt
/// "please SUBMIT the job"), waits for that turn to end, and returns the session and job id.
/// `extra` are more scripted steps for the scenario (`{"when", "command"}`); a `{work}` in a
/// command stands for the daemon's work directory.
fn session_with_job(
    agent: Agent,
    notify: &[&str],
    opts: Options,
    extra: &[(&str, &str)],
) -> (Session, u64) {
    let session = Session::start(agent, opts, |b| {
        let work = std::fs::canonicalize(&b.work).unwrap();
        let mut steps = vec![json!({ "when": "SUBMIT", "command": submit_command(b, notify) })];
        for (when, command) in extra {
            let command = command.replace("{work}", &work.display().to_string());
            // A step whose marker is WAIT runs in the background (`run_in_background`).
            steps.push(json!({ "when": when, "command": command, "background": *when == "WAIT" }));
        }
        Value::Array(steps)
    });
    session.prompt("please SUBMIT the job");
    let id = session.submitted_job();
    session.wait_turn_done("baton: queued job ");
    (session, id)
}

/// Releases the job and collects what came of it: the report-carrying requests (after `QUIET`)
/// and the settled deliveries, logged under `scenario`.
fn release_and_watch(s: &Session, scenario: &str, id: u64) -> (i64, Vec<Request>, Vec<Value>) {
    let ended = s.release(id);
    let wakes = s.wait_wakes(id, ended);
    let deliveries = s.settled_deliveries(id);
    s.log(scenario, id, ended, &wakes, &deliveries);
    (ended, wakes, deliveries)
}

/// The whole of most scenarios: the agent submits the job with `notify`, the job ends, exactly one
/// new model turn carries its report, and its deliveries settle in `states` (channel prefix,
/// state). Returns the session and the deliveries, for more checks.
#[track_caller]
fn woken_once(
    agent: Agent,
    notify: &[&str],
    opts: Options,
    scenario: &str,
    states: &[(&str, &str)],
) -> (Session, Vec<Request>, Vec<Value>) {
    let (s, id) = session_with_job(agent, notify, opts, &[]);
    let (_, wakes, deliveries) = release_and_watch(&s, scenario, id);
    assert_woken_once(id, &wakes, &deliveries);
    for (kind, state) in states {
        assert_state(&deliveries, kind, state);
    }
    (s, wakes, deliveries)
}

/// Exactly one request carried the report, and it carried the report's content.
#[track_caller]
fn assert_woken_once(id: u64, wakes: &[Request], deliveries: &[Value]) {
    assert_eq!(
        wakes.len(),
        1,
        "expected exactly one report-carrying model request; got {wakes:#?}\ndeliveries: {deliveries:#?}"
    );
    let text = &wakes[0].latest;
    assert!(
        text.contains(&format!("job {id} \"sh\" succeeded")) && text.contains("val_loss=0.25"),
        "the request lacks the report's content: {text}"
    );
}

#[track_caller]
fn assert_state(deliveries: &[Value], kind: &str, state: &str) {
    let d = Session::delivery(deliveries, kind);
    assert_eq!(d["state"], state, "{kind} delivery: {deliveries:#?}");
}

// ---------------------------------------------------------------------------------------------
// Claude Code
// ---------------------------------------------------------------------------------------------

#[test]
fn claude_code_is_woken_once_through_its_inbox_socket() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    let opts = Options {
        outside_tmux: true,
        ..Options::default()
    };
    let (_s, wakes, deliveries) = woken_once(
        Agent::Claude { bypass: false },
        &["claude"],
        opts,
        "claude inbox",
        &[],
    );
    assert!(
        wakes[0]
            .latest
            .contains("Another Claude session sent a message"),
        "{}",
        wakes[0].latest
    );
    assert_state(&deliveries, "claude:", "delivered");
}

#[test]
fn claude_code_is_woken_once_by_the_hook_when_its_inbox_is_not_asked_for() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    let opts = Options {
        hook: true,
        outside_tmux: true,
        ..Options::default()
    };
    let notify = ["file:hook-inbox.md"];
    woken_once(
        Agent::Claude { bypass: false },
        &notify,
        opts,
        "claude hook",
        &[("file:", "delivered")],
    );
}

#[test]
fn claude_code_in_tmux_is_woken_once_with_notify_auto() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    woken_once(
        Agent::Claude { bypass: false },
        &[],
        Options::default(),
        "claude in tmux, auto",
        &[
            ("claude:", "delivered"),
            ("tmux:", "unneeded"),
            ("file:", "delivered"),
        ],
    );
}

#[test]
fn claude_code_in_bypass_mode_is_woken_once_by_the_hook() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    // Bypass mode holds an inbox message from a process that is not its child for a person to
    // approve; the hook must deliver instead.
    let opts = Options {
        hook: true,
        outside_tmux: true,
        ..Options::default()
    };
    woken_once(
        Agent::Claude { bypass: true },
        &[],
        opts,
        "claude bypass, hook",
        &[("claude:", "held"), ("claude-hook:", "delivered")],
    );
}

#[test]
fn claude_code_in_bypass_mode_without_the_hook_is_woken_once_through_tmux() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    // Known at submit (the session's command line): the inbox would only hold the message, so
    // nothing is sent there and the pane is typed into instead.
    woken_once(
        Agent::Claude { bypass: true },
        &[],
        Options::default(),
        "claude bypass in tmux, no hook",
        &[("claude:", "held"), ("tmux:", "delivered")],
    );
}

#[test]
fn claude_code_switched_to_bypass_mode_holds_the_inbox_message_and_tmux_wakes_it_once() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    // Nothing at submit says the session bypasses permissions (its command line only allows
    // it): the inbox is tried, Claude Code's receipt says it held the message, and the next
    // link (the pane) wakes the session.
    let opts = Options {
        switch_to_bypass: true,
        ..Options::default()
    };
    woken_once(
        Agent::Claude { bypass: false },
        &[],
        opts,
        "claude switched to bypass, tmux",
        &[("claude:", "held"), ("tmux:", "delivered")],
    );
}

#[test]
fn claude_code_that_refuses_inbound_messages_is_woken_once_by_the_hook() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    let opts = Options {
        hook: true,
        outside_tmux: true,
        refuse_inbound: true,
        ..Options::default()
    };
    woken_once(
        Agent::Claude { bypass: false },
        &[],
        opts,
        "claude refuses inbound, hook",
        &[("claude:", "refused"), ("claude-hook:", "delivered")],
    );
}

#[test]
fn claude_code_busy_in_a_long_tool_call_gets_the_report_once() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    let opts = Options {
        outside_tmux: true,
        ..Options::default()
    };
    let busy = "touch {work}/busy.started; \
                while [ ! -e {work}/busy.release ]; do sleep 0.05; done; echo busy-done";
    let (s, id) = session_with_job(
        Agent::Claude { bypass: false },
        &["claude"],
        opts,
        &[("BUSY", busy)],
    );
    s.prompt("now get BUSY");
    common::wait_path(&s.b.path("busy.started"));
    // The job ends while the tool call runs; the call ends once the report was handed over.
    let ended = s.release(id);
    let deliveries = s.settled_deliveries(id);
    s.b.touch("busy.release");
    let wakes = s.wait_wakes(id, ended);
    s.log("claude busy", id, ended, &wakes, &deliveries);
    eprintln!(
        "[claude busy] the report came with the tool call's result: {}",
        wakes.iter().any(|w| w.latest.contains("busy-done"))
    );
    assert_woken_once(id, &wakes, &deliveries);
    assert_state(&deliveries, "claude:", "delivered");
}

#[test]
fn a_background_baton_wait_wakes_claude_code_once_with_an_exit_status_that_reads_right() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    // Nothing else reaches the session (a file channel, no hook, no tmux): the agent waits for
    // the job with a background Bash command, as baton's note tells it to.
    let opts = Options {
        outside_tmux: true,
        ..Options::default()
    };
    let wait = format!("{BIN} wait 1 --exit-zero");
    let (s, id) = session_with_job(
        Agent::Claude { bypass: false },
        &["file:bg-inbox.md"],
        opts,
        &[("WAIT", &wait)],
    );
    assert_eq!(id, 1, "the scripted wait names job 1");
    s.prompt_background("now WAIT for it");
    let ended = s.release(id);
    let notices = |since: i64| -> Vec<Request> {
        s.model
            .requests()
            .into_iter()
            .filter(|r| r.time >= since as f64 && r.latest.contains("<task-notification>"))
            .collect()
    };
    wait_until("the background wait's notice", || {
        !notices(ended).is_empty()
    });
    std::thread::sleep(QUIET);
    let got = notices(ended);
    let delays: Vec<i64> = got.iter().map(|r| r.time as i64 - ended).collect();
    eprintln!(
        "[claude background wait] job {id}: {} notice(s), delays from ended_at {delays:?} ms",
        got.len()
    );
    assert_eq!(got.len(), 1, "{got:#?}");
    let notice = &got[0].latest;
    assert!(
        notice.contains("completed (exit code 0)"),
        "the notice reads as a failure: {notice}"
    );
    // The notice names only the output file; its last line says what happened to the job.
    let file = notice
        .split("<output-file>")
        .nth(1)
        .and_then(|rest| rest.split("</output-file>").next())
        .expect("no output file in the notice");
    let output = std::fs::read_to_string(file).unwrap();
    // (Claude Code appends its own "[exited with code N]".)
    let last = output
        .lines()
        .rfind(|l| !l.trim().is_empty() && !l.starts_with("[exited with code"))
        .unwrap_or("");
    assert!(
        last.starts_with(&format!("baton: job {id} \"sh\" succeeded")) && last.contains("val_loss"),
        "last line: {last:?}"
    );
}

#[test]
fn claude_code_that_has_quit_gets_no_report_and_the_inbox_file_has_it() {
    if !require(&["tmux", "claude", "python3"]) {
        return;
    }
    let (s, id) = session_with_job(
        Agent::Claude { bypass: false },
        &[],
        Options::default(),
        &[],
    );
    s.quit();
    assert_ended_session_gets_nothing(&s, "claude quit", id);
}

/// After the agent quit: no model request carries the report, the session channels settle as
/// `skipped` (target gone), and the inbox file has it. The agent's pane has closed while its tmux
/// server lives on (as a person's server does, with other sessions).
fn assert_ended_session_gets_nothing(s: &Session, scenario: &str, id: u64) {
    let ended = s.release(id);
    let deliveries = s.settled_deliveries(id);
    // The agent's process is gone, so nothing more can come; a short look all the same.
    std::thread::sleep(Duration::from_secs(2));
    let wakes = s.wakes(id, ended);
    s.log(scenario, id, ended, &wakes, &deliveries);
    assert!(wakes.is_empty(), "a request carried the report: {wakes:#?}");
    for d in &deliveries {
        let channel = d["channel"].as_str().unwrap_or("");
        if channel.starts_with("file:") {
            assert_eq!(d["state"], "delivered", "{deliveries:#?}");
        } else {
            assert_eq!(d["state"], "skipped", "{channel}: {deliveries:#?}");
        }
    }
    common::wait_contains(
        &s.b.home.join("inbox.md"),
        &format!("[end of baton report for job {id}]"),
    );
}

// ---------------------------------------------------------------------------------------------
// Codex
// ---------------------------------------------------------------------------------------------

#[test]
fn codex_is_woken_once_through_codex_queue() {
    if !require(&["tmux", "codex", "python3"]) {
        return;
    }
    let opts = Options {
        outside_tmux: true,
        ..Options::default()
    };
    woken_once(
        Agent::Codex,
        &["codex"],
        opts,
        "codex queue",
        &[("codex:", "delivered")],
    );
}

#[test]
fn codex_in_tmux_is_woken_once_with_notify_auto() {
    if !require(&["tmux", "codex", "python3"]) {
        return;
    }
    woken_once(
        Agent::Codex,
        &[],
        Options::default(),
        "codex in tmux, auto",
        &[
            ("codex:", "delivered"),
            ("tmux:", "unneeded"),
            ("file:", "delivered"),
        ],
    );
}

#[test]
fn codex_behind_the_npm_launcher_gets_the_report_typed_in_once() {
    if !require(&["tmux", "codex", "python3"]) {
        return;
    }
    woken_once(
        Agent::CodexViaNode,
        &["tmux"],
        Options::default(),
        "codex via node, tmux",
        &[("tmux:", "delivered")],
    );
}

#[test]
fn codex_with_its_app_server_daemon_is_woken_once_while_its_tui_runs() {
    if !require(&["tmux", "codex", "python3"]) {
        return;
    }
    // By default the TUI's turns run in the managed daemon, which holds the thread's file.
    let opts = Options {
        codex_daemon: true,
        ..Options::default()
    };
    let (_s, _, deliveries) = woken_once(
        Agent::Codex,
        &[],
        opts,
        "codex with daemon, auto",
        &[("codex:", "delivered")],
    );
    // The job's command ran under the daemon, whose TMUX_PANE is that of whichever TUI started
    // it (possibly another session's pane): baton takes no tmux channel from it.
    assert!(
        !deliveries
            .iter()
            .any(|d| d["channel"].as_str().unwrap_or("").starts_with("tmux:")),
        "{deliveries:#?}"
    );
}

#[test]
fn codex_whose_tui_quit_while_its_daemon_lives_on_gets_no_turn() {
    if !require(&["tmux", "codex", "python3"]) {
        return;
    }
    let opts = Options {
        codex_daemon: true,
        ..Options::default()
    };
    let (s, id) = session_with_job(Agent::Codex, &[], opts, &[]);
    s.quit();
    // The daemon still has the thread loaded (for about a minute): a queued message would run
    // there, seen by nobody. baton counts the session as over.
    assert_ended_session_gets_nothing(&s, "codex quit, daemon alive", id);
    let deliveries = s.settled_deliveries(id);
    let d = Session::delivery(&deliveries, "codex:");
    assert!(
        d["error"].as_str().unwrap_or("").contains("app-server"),
        "{d:#?}"
    );
}

#[test]
fn codex_that_quits_with_the_report_still_queued_is_told_truly() {
    if !require(&["tmux", "codex", "python3"]) {
        return;
    }
    // Without its daemon the TUI looks at its queue every 10 s: quit right after the report is
    // queued, and it has (almost always) not been taken. Whatever happened, the state says it.
    let (s, id) = session_with_job(Agent::Codex, &[], Options::default(), &[]);
    let ended = s.release(id);
    let queue = s.codex_home.join("queue_1.sqlite");
    let queued = || {
        rusqlite::Connection::open(&queue)
            .and_then(|c| {
                c.query_row("SELECT COUNT(*) FROM queued_items", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .unwrap_or(0)
    };
    wait_until("the report to be queued", || {
        queued() > 0 || !s.wakes(id, ended).is_empty()
    });
    s.quit();
    let deliveries = s.settled_deliveries(id);
    std::thread::sleep(Duration::from_secs(2));
    let wakes = s.wakes(id, ended);
    s.log(
        "codex quit with the report queued",
        id,
        ended,
        &wakes,
        &deliveries,
    );
    if wakes.is_empty() {
        assert_state(&deliveries, "codex:", "skipped");
        let d = Session::delivery(&deliveries, "codex:");
        assert!(
            d["error"]
                .as_str()
                .unwrap_or("")
                .contains("ended before it took the message"),
            "{d:#?}"
        );
        assert_eq!(queued(), 0, "the unseen message was left in the queue");
    } else {
        assert_woken_once(id, &wakes, &deliveries);
        assert_state(&deliveries, "codex:", "delivered");
    }
    common::wait_contains(
        &s.b.home.join("inbox.md"),
        &format!("[end of baton report for job {id}]"),
    );
}

#[test]
fn codex_that_has_quit_gets_no_report_and_the_inbox_file_has_it() {
    if !require(&["tmux", "codex", "python3"]) {
        return;
    }
    let (s, id) = session_with_job(Agent::Codex, &[], Options::default(), &[]);
    s.quit();
    assert_ended_session_gets_nothing(&s, "codex quit", id);
}
