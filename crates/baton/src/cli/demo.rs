//! `baton demo`: a self-contained tour. Starts a daemon on simulated GPUs in a temporary state
//! directory, queues a handful of jobs (priorities, a dependency chain, GPU sharing, a failure and
//! a dependency that fails because of it), shows the queue draining, shows an agent being woken
//! with the failed job's report, and cleans up. The "agent" is the demo itself: it listens on an
//! inbox socket that speaks Claude Code's inbox protocol, and blocks until the report arrives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::api::client::{Client, ClientError};
use crate::api::{AgentContext, SubmitRequest, WaitRequest};
use crate::edge::{present, request};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Simulated GPUs for the demo daemon.
    #[arg(long, default_value_t = 4)]
    gpus: u32,
    /// Keep the temporary state directory instead of deleting it.
    #[arg(long)]
    keep: bool,
}

struct DemoJob {
    name: &'static str,
    gpus: u32,
    gpu_mem: Option<u64>,
    priority: i64,
    after: Vec<usize>,
    time_limit_ms: Option<i64>,
    script: &'static str,
}

fn jobs() -> Vec<DemoJob> {
    let job = |name, gpus, script| DemoJob {
        name,
        gpus,
        gpu_mem: None,
        priority: 0,
        after: vec![],
        time_limit_ms: Some(60_000),
        script,
    };
    vec![
        job(
            "prepare-data",
            0,
            "echo 'tokenizing shards'; sleep 1; echo 'wrote data/train.bin'",
        ),
        job(
            "train-lr1e-3",
            2,
            "for s in 100 200 300; do echo \"step=$s loss=0.$((900 - s))\"; sleep 1; done",
        ),
        job(
            "train-lr3e-4",
            2,
            "for s in 100 200 300; do echo \"step=$s loss=0.$((950 - s))\"; sleep 1; done",
        ),
        job(
            "train-big",
            4,
            "echo 'all four GPUs:' $CUDA_VISIBLE_DEVICES; sleep 2; echo 'step=1000 loss=0.310'",
        ),
        DemoJob {
            priority: 10,
            ..job("urgent-eval", 1, "sleep 1; echo 'accuracy=0.912'")
        },
        DemoJob {
            after: vec![0, 1],
            ..job(
                "evaluate",
                1,
                "echo 'evaluating checkpoint on GPU' $CUDA_VISIBLE_DEVICES; sleep 1; echo 'accuracy=0.874'",
            )
        },
        job(
            "broken-run",
            1,
            "echo 'Traceback (most recent call last):' >&2; echo '  File \"train.py\", line 3' >&2; \
             echo 'RuntimeError: CUDA out of memory (simulated)' >&2; exit 1",
        ),
        DemoJob {
            after: vec![6],
            ..job("publish", 0, "echo 'publishing results'")
        },
        DemoJob {
            gpu_mem: Some(20 << 30),
            time_limit_ms: Some(5_000),
            ..job("sweep-a", 1, "sleep 2; echo 'val_loss=0.52'")
        },
        DemoJob {
            gpu_mem: Some(20 << 30),
            time_limit_ms: Some(5_000),
            ..job("sweep-b", 1, "sleep 2; echo 'val_loss=0.49'")
        },
    ]
}

/// The demo's machine has as many cores for jobs as a GPU server would, whatever this one has:
/// its jobs are short shell scripts, and the tour shows GPUs, not a CPU queue.
const DEMO_CPUS: u32 = 16;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let home = std::env::temp_dir().join(format!("baton-demo-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(home.join("work"))?;
    println!(
        "baton demo: a daemon on {} simulated GPUs and {DEMO_CPUS} CPUs for jobs, state in {}",
        args.gpus,
        home.display()
    );
    // Waste control on, with thresholds for a demo: a process of no job that holds GPU memory
    // for 2 s is stopped.
    std::fs::write(
        home.join("config.toml"),
        "[waste]\nmode = \"enforce\"\nsample_interval = \"1s\"\ngrace = \"2s\"\n\n\
         [waste.zombie]\nmin_mem = \"1GiB\"\nafter = \"2s\"\n",
    )?;
    // A stray process on the last GPU holding 2 GiB for no job, as a crashed notebook leaves.
    let mut stray = std::process::Command::new("sleep")
        .arg("120")
        .env_remove("BATON_JOB_ID")
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start the demo's stray process")?;
    let gpu_dir = home
        .join("sim")
        .join(format!("gpu{}", args.gpus.saturating_sub(1)));
    std::fs::create_dir_all(&gpu_dir)?;
    std::fs::write(gpu_dir.join(stray.id().to_string()), "2147483648 0\n")?;
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(home.join("daemon.log"))?;
    let mut daemon = std::process::Command::new(exe)
        .args([
            "serve",
            "--sim-gpus",
            &args.gpus.to_string(),
            "--grace",
            "2s",
            "--cpus",
            &DEMO_CPUS.to_string(),
        ])
        .env("BATON_HOME", &home)
        .env_remove("BATON_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start the demo daemon")?;
    let result = tour(&home, args.gpus, &mut stray);
    let _ = stray.kill();
    let _ = stray.wait();
    // Stop the daemon and tidy up whatever happened.
    if let Some(pid) = rustix::process::Pid::from_raw(daemon.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let _ = daemon.wait();
    if args.keep {
        println!("\nkept {}", home.display());
    } else {
        let _ = std::fs::remove_dir_all(&home);
    }
    result.map(|_| ExitCode::SUCCESS)
}

fn tour(home: &Path, gpu_count: u32, stray: &mut std::process::Child) -> anyhow::Result<()> {
    let client = Client::new(home.join("baton.sock"));
    let started = Instant::now();
    while client.info().is_err() {
        if started.elapsed() > Duration::from_secs(10) {
            bail!(
                "the demo daemon did not start; see {}",
                home.join("daemon.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let work: PathBuf = home.join("work");
    let mut env: BTreeMap<String, String> = request::captured_env();
    env.insert(
        "PATH".into(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    );
    let mut ids: Vec<u64> = Vec::new();
    let inbox = AgentInbox::open(&home.join("agent.sock"))?;
    println!(
        "\n$ baton submit ...   (10 jobs: priorities, --after chains, --gpu-mem sharing, one failure)"
    );
    for job in jobs() {
        if job.gpus > gpu_count {
            continue;
        }
        let req = SubmitRequest {
            command: vec!["sh".into(), "-c".into(), job.script.into()],
            name: Some(job.name.into()),
            gpus: job.gpus,
            gpu_mem: job.gpu_mem,
            priority: job.priority,
            after: job
                .after
                .iter()
                .filter_map(|&i| ids.get(i).copied())
                .collect(),
            time_limit_ms: job.time_limit_ms,
            cwd: work.display().to_string(),
            env: env.clone(),
            // The failing run is submitted "from an agent session": its report wakes the agent.
            context: if job.name == "broken-run" {
                inbox.context()
            } else {
                AgentContext::default()
            },
            ..SubmitRequest::default()
        };
        let view = client.submit(&req, &|| {
            Err(ClientError::Transport("the demo's daemon is gone".into()))
        })?;
        ids.push(view.id);
    }
    // Show the queue whenever something changes, until everything has ended.
    let mut last = String::new();
    loop {
        let jobs = client.list(&ids, false)?;
        let shape: String = jobs
            .iter()
            .map(|j| {
                format!(
                    "{}{}{:?};",
                    j.state,
                    j.reason.as_deref().unwrap_or(""),
                    j.gpus
                )
            })
            .collect();
        if shape != last {
            println!(
                "\n$ baton status            (t = {:.1}s)",
                started.elapsed().as_secs_f64()
            );
            print!("{}", present::job_table(&jobs));
            last = shape;
        }
        if jobs.iter().all(|j| j.state.is_terminal()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "\n$ baton wait --brief {}",
        ids.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
    );
    let done = client.wait(&WaitRequest {
        ids: ids.clone(),
        timeout_ms: Some(5_000),
        reports: false,
        unless_changed_from: Vec::new(),
    })?;
    for job in &done.jobs {
        println!("{}", present::summary(job));
    }
    if let Some(failed) = done.jobs.iter().find(|j| j.name == "broken-run") {
        let woken = inbox.received(Duration::from_secs(5));
        let ended = failed
            .ended_at
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        match woken {
            Some((at, text)) => {
                let latency = ended
                    .and_then(|e| at.duration_since(e).ok())
                    .map(|d| format!("{} ms", d.as_millis()))
                    .unwrap_or_else(|| "moments".into());
                println!(
                    "\nThe agent that submitted job {} (\"broken-run\") was asleep on its inbox socket. \
                     {latency} after the job ended, baton woke it with this message:\n",
                    failed.id
                );
                println!("{}", indent(&present::terminal_safe(&text)));
            }
            None => println!("\n(the demo agent's inbox got nothing; see the daemon log)"),
        }
    }
    show_waste_control(&client, stray)?;
    println!(
        "\ndone in {:.1}s. Try it for real: `baton submit --gpus 1 -- python train.py`, then `baton wait ID`.",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The GPU monitor's part of the tour: the stray process the demo put on the last GPU is found to
/// belong to no job, and stopped; `baton audit` shows each step.
fn show_waste_control(client: &Client, stray: &mut std::process::Child) -> anyhow::Result<()> {
    let pid = stray.id();
    let until = Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let entries = client.audit(None)?;
        let done = entries
            .iter()
            .any(|e| e.pid == Some(pid) && e.action == "sigterm" && e.outcome != "pending");
        if done || Instant::now() > until {
            break entries;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    println!(
        "\nMeanwhile the GPU monitor found process {pid} holding 2 GiB on a GPU for no job (the demo \
         started it, as a crashed notebook would leave one). With `mode = \"enforce\"` in \
         config.toml it was stopped:\n\n$ baton audit"
    );
    for e in entries.iter().filter(|e| e.pid == Some(pid)) {
        println!("  {} {} {}: {}", e.time, e.rule, e.action, e.message);
        println!("      -> {}", e.outcome);
    }
    let stopped = (0..50).any(|_| {
        let gone = matches!(stray.try_wait(), Ok(Some(_)));
        if !gone {
            std::thread::sleep(Duration::from_millis(100));
        }
        gone
    });
    println!(
        "  process {pid}: {}",
        if stopped { "gone" } else { "still running" }
    );
    Ok(())
}

/// The demo's stand-in for an agent session: a Unix socket speaking Claude Code's inbox protocol
/// (an auth line with a token, then a user message), accepted on a thread that blocks until the
/// report arrives. No polling: the agent sleeps until baton connects.
struct AgentInbox {
    path: PathBuf,
    token: String,
    got: std::sync::mpsc::Receiver<(std::time::SystemTime, String)>,
}

impl AgentInbox {
    fn open(path: &Path) -> anyhow::Result<AgentInbox> {
        let listener = std::os::unix::net::UnixListener::bind(path)
            .with_context(|| format!("cannot listen on {}", path.display()))?;
        let token = format!(
            "{:032x}",
            std::process::id() as u128 * 0x9e37_79b9_7f4a_7c15
        );
        let (tx, got) = std::sync::mpsc::channel();
        let expected = token.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let mut lines = std::io::BufRead::lines(std::io::BufReader::new(conn));
                let auth: Option<serde_json::Value> = lines
                    .next()
                    .and_then(|l| l.ok())
                    .and_then(|l| serde_json::from_str(&l).ok());
                if auth.as_ref().and_then(|a| a["token"].as_str()) != Some(expected.as_str()) {
                    continue;
                }
                let message: Option<serde_json::Value> = lines
                    .next()
                    .and_then(|l| l.ok())
                    .and_then(|l| serde_json::from_str(&l).ok());
                if let Some(text) = message
                    .as_ref()
                    .and_then(|m| m["message"]["content"].as_str())
                {
                    let _ = tx.send((std::time::SystemTime::now(), text.to_string()));
                }
            }
        });
        Ok(AgentInbox {
            path: path.to_path_buf(),
            token,
            got,
        })
    }

    fn context(&self) -> AgentContext {
        AgentContext {
            claude_session: Some("demo-agent".into()),
            claude_socket: Some(self.path.display().to_string()),
            claude_token: Some(self.token.clone()),
            ..AgentContext::default()
        }
    }

    fn received(&self, within: Duration) -> Option<(std::time::SystemTime, String)> {
        self.got.recv_timeout(within).ok()
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
