//! `baton demo`: a self-contained tour. Starts a daemon on simulated GPUs in a temporary state
//! directory, queues a handful of jobs (priorities, a dependency chain, GPU sharing, a failure and
//! a dependency that fails because of it), shows the queue draining, shows what `baton wait`
//! hands back to an agent, and cleans up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::output;
use crate::api::client::Client;
use crate::api::{JobView, LogsQuery, SubmitRequest, WaitRequest};

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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let home = std::env::temp_dir().join(format!("baton-demo-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(home.join("work"))?;
    println!(
        "baton demo: a daemon on {} simulated GPUs, state in {}",
        args.gpus,
        home.display()
    );
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(home.join("daemon.log"))?;
    let mut daemon = std::process::Command::new(exe)
        .args([
            "serve",
            "--sim-gpus",
            &args.gpus.to_string(),
            "--grace",
            "2s",
        ])
        .env("BATON_HOME", &home)
        .env_remove("BATON_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start the demo daemon")?;
    let result = tour(&home, args.gpus);
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

fn tour(home: &Path, gpu_count: u32) -> anyhow::Result<()> {
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
    let mut env: BTreeMap<String, String> = std::env::vars().collect();
    env.insert(
        "PATH".into(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
    );
    let mut ids: Vec<u64> = Vec::new();
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
            ..SubmitRequest::default()
        };
        let view = client.submit(&req)?;
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
            print!("{}", output::job_table(&jobs));
            last = shape;
        }
        if jobs
            .iter()
            .all(|j| !matches!(j.state.as_str(), "queued" | "running"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "\n$ baton wait {}   (what an agent gets back when its jobs end)",
        ids.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")
    );
    let done = client.wait(&WaitRequest {
        ids: ids.clone(),
        timeout_ms: Some(1_000),
    })?;
    for job in &done.jobs {
        println!("{}", output::summary(job));
    }
    if let Some(failed) = done.jobs.iter().find(|j: &&JobView| j.name == "broken-run") {
        println!("\n$ baton logs {} --stderr", failed.id);
        let mut body = client.logs(
            failed.id,
            &LogsQuery {
                stderr: true,
                tail: Some(5),
                follow: false,
            },
        )?;
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut body, &mut text)?;
        print!("{}", String::from_utf8_lossy(&text));
    }
    println!(
        "\ndone in {:.1}s. Try it for real: `baton submit --gpus 1 -- python train.py`, then `baton wait ID`.",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
