//! The command line: one file per command. Each command parses its own arguments, talks to the
//! daemon through the client edge (`crate::edge`: its connection, requests and wording, which
//! the MCP server shares), and prints human text or `--json`. Nothing outside this module but
//! `main` uses it.

mod agent;
mod audit;
mod cancel;
mod completions;
mod dashboard;
mod demo;
mod events;
mod gc;
mod gpus;
mod history;
mod hold;
mod info;
mod logs;
mod overrides;
mod report;
mod requeue;
mod reservations;
mod reserve;
mod resubmit;
mod serve;
mod shutdown;
mod signal;
mod sim;
mod slurm_mail;
mod stats;
mod status;
mod submit;
mod sweep;
mod update;
mod usage;
mod wait;
mod workflow;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::api::client::ClientError;

/// A GPU job queue for AI coding agents and the people who run them.
#[derive(Debug, Parser)]
#[command(name = "baton", version, about, long_about = None)]
pub struct Cli {
    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The front end's command line (`baton`, `crate::front`): the global options and `submit`,
/// as `Cli` has them (a test checks that their help is the same).
#[derive(Debug, Parser)]
#[command(name = "baton", version, about, long_about = None)]
pub struct FrontCli {
    /// Print machine-readable JSON on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: FrontCommand,
}

#[derive(Debug, Subcommand)]
pub enum FrontCommand {
    /// Queue a job: `baton submit --gpus 2 -- python train.py`. Prints the job id.
    Submit(Box<submit::Args>),
}

/// Runs what the front end takes itself (its only success is exit 0).
pub fn run_front(cli: FrontCli) -> anyhow::Result<()> {
    match cli.command {
        FrontCommand::Submit(args) => submit::run(*args, cli.json),
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon in the foreground until SIGTERM or Ctrl-C (running jobs keep running).
    Serve(serve::Args),
    /// Queue a job: `baton submit --gpus 2 -- python train.py`. Prints the job id.
    Submit(Box<submit::Args>),
    /// Show the queue (queued, running and the last few ended jobs), the named jobs, or the
    /// jobs the filters select (`--state failed --since 1d`).
    Status(status::Args),
    /// One row per job: state, exit, wait, run time, GPUs, GPU efficiency (`--json`, `--csv`).
    History(history::Args),
    /// Apply retention now (`[retention]` in config.toml), or say what it would remove.
    Gc(gc::Args),
    /// Block until the named jobs end, then print how each ended.
    Wait(wait::Args),
    /// Cancel queued or running jobs (SIGTERM to the job's process group, SIGKILL after a grace).
    Cancel(cancel::Args),
    /// Keep queued jobs from starting until `baton release` (like `scontrol hold`).
    Hold(hold::Args),
    /// Let held jobs start again.
    Release(hold::Args),
    /// Change a queued job's name, priority, time limit, GPUs, cores or memory.
    Update(update::Args),
    /// Run jobs that failed, were cancelled or timed out again, as new attempts of the same ids.
    Requeue(requeue::Args),
    /// Queue a new job with an earlier job's spec (not its dependencies), with overrides.
    Resubmit(resubmit::Args),
    /// Send a signal (TERM, SIGUSR1, 10, ...) to every process of a running job.
    Signal(signal::Args),
    /// Print a job's output.
    Logs(logs::Args),
    /// Print an ended job's report: how it ended, why, its metrics, files and last output.
    Report(report::Args),
    /// A job's history: submitted, started, retries, cancel requests, its end.
    Events(events::Args),
    /// Show each GPU: model, memory, utilisation, and the jobs on it.
    Gpus,
    /// Where each user stands against the daemon's `[limits]`: GPUs, CPUs and memory held now,
    /// jobs running and queued, each beside its cap.
    Usage,
    /// Keep GPUs for some users for a window of time: `baton reserve --gpus 4 --start 'tomorrow
    /// 09:00' --duration 6h --user alice --name deadline`; jobs submitted with `--reservation
    /// deadline` run in it. `--cancel NAME` gives it back.
    Reserve(reserve::Args),
    /// List the reservations: their GPUs, window, users and jobs (`--all`: the last week's too).
    Reservations(reservations::Args),
    /// Which daemon answers (its pid, state directory, socket), its GPUs and how it contains jobs.
    Info,
    /// Stop the daemon (as SIGTERM would); running jobs keep running.
    Shutdown,
    /// Print a one-time login link to the web dashboard (`baton serve --web-addr`), and open it
    /// where a desktop can.
    Dashboard(dashboard::Args),
    /// What the GPU waste rules decided and did (`--since 1h`).
    Audit(audit::Args),
    /// GPU utilisation, GPU-hours by owner, idle share and waste actions (`--since 7d`).
    Stats(stats::Args),
    /// A self-contained tour on simulated GPUs in a temporary state directory.
    Demo(demo::Args),
    /// Serve baton's tools to an agent over MCP (stdio): submit_job, wait_for_jobs, job_report...
    Mcp,
    /// Replay a GPU cluster trace through the scheduler under fifo, backfill and baton's policy,
    /// or compare ways of scheduling workflows (`--workflows N`: atomic, chained with and without
    /// locality, greedy). Simulated clock.
    Sim(sim::Args),
    /// Print a shell completion script: `baton completions bash > /etc/bash_completion.d/baton`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Internal: a supervisor of the one attempt launched in DIR, run when the daemon cannot
    /// reach its supervisor.
    #[command(hide = true)]
    Supervise {
        dir: std::path::PathBuf,
        #[arg(long, default_value_t = 1)]
        attempt: u32,
    },
    /// DAG workflows: `baton workflow submit FILE`, `status ID`, `cancel ID`, `list`.
    #[command(subcommand)]
    Workflow(workflow::Command),
    /// Sweeps and arrays (queued by `baton submit --array/--sweep/--sweep-file`, or `sweep
    /// submit FILE`): `submit FILE`, `status ID`, `list`, `cancel ID`, `wait ID`.
    #[command(subcommand)]
    Sweep(sweep::Command),
    /// Set an agent up for reliable wake-ups, and the hook that waits for its jobs.
    #[command(subcommand)]
    Agent(agent::Command),
    /// Internal: the supervisor of a daemon's jobs, listening on SOCKET; it outlives the daemon.
    #[command(hide = true)]
    Supervisor { socket: std::path::PathBuf },
    /// A Slurm MailProg that tells baton daemons their jobs ended (and hands other mail on).
    #[command(hide = true)]
    SlurmMail(slurm_mail::Args),
    /// Internal: one report delivery run as the job's owner by the system daemon.
    #[command(hide = true)]
    Deliver,
    /// Internal: the files a job wrote, listed as its owner for the system daemon's report.
    #[command(hide = true)]
    WrittenFiles { args: Vec<String> },
}

/// The exit code a command asks for without that being an error (DESIGN §3).
pub const EXIT_JOB_FAILED: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_NO_DAEMON: u8 = 3;
pub const EXIT_TIMEOUT: u8 = 124;

/// A mistake in what the user asked for (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match cli.command {
        Command::Supervise { dir, attempt } => {
            Ok(crate::executor::supervisor::run_one(&dir, attempt))
        }
        Command::Supervisor { socket } => Ok(crate::executor::supervisor::run_host(&socket)),
        Command::Deliver => Ok(ExitCode::from(crate::daemon::deliver_from_stdin() as u8)),
        Command::WrittenFiles { args } => Ok(ExitCode::from(crate::report::written_files_command(
            &args,
        ) as u8)),
        Command::Agent(cmd) => agent::run(cmd, json),
        Command::Workflow(cmd) => workflow::run(cmd, json),
        Command::Sweep(cmd) => sweep::run(cmd, json),
        Command::Report(args) => report::run(args, json),
        Command::Mcp => crate::mcp::run(),
        Command::Sim(args) => sim::run(args, json),
        Command::Serve(args) => serve::run(args),
        Command::Completions { shell } => {
            completions::run(shell);
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo(args) => demo::run(args),
        Command::Submit(args) => submit::run(*args, json).map(|()| ExitCode::SUCCESS),
        Command::Status(args) => status::run(args, json),
        Command::History(args) => history::run(args, json),
        Command::Gc(args) => gc::run(args, json),
        Command::Wait(args) => wait::run(args, json),
        Command::Cancel(args) => cancel::run(args, json),
        Command::Hold(args) => hold::run(args, true, json),
        Command::Release(args) => hold::run(args, false, json),
        Command::Update(args) => update::run(args, json),
        Command::Requeue(args) => requeue::run(args, json),
        Command::Resubmit(args) => resubmit::run(args, json),
        Command::Signal(args) => signal::run(args, json),
        Command::Logs(args) => logs::run(args, json),
        Command::Events(args) => events::run(args, json),
        Command::Gpus => gpus::run(json),
        Command::Usage => usage::run(json),
        Command::Reserve(args) => reserve::run(args, json),
        Command::Reservations(args) => reservations::run(args, json),
        Command::Info => info::run(json),
        Command::Shutdown => shutdown::run(json),
        Command::Dashboard(args) => dashboard::run(args, json),
        Command::Audit(args) => audit::run(args, json),
        Command::SlurmMail(args) => slurm_mail::run(args),
        Command::Stats(args) => stats::run(args, json),
    }
}

pub fn exit_code_for(err: &anyhow::Error) -> u8 {
    if err.downcast_ref::<UsageError>().is_some() {
        return EXIT_USAGE;
    }
    match err.downcast_ref::<ClientError>() {
        Some(e) if e.is_unreachable() => EXIT_NO_DAEMON,
        // Over the daemon's connection limits, or shutting down: it cannot serve us now.
        Some(ClientError::Api { status: 503, .. }) => EXIT_NO_DAEMON,
        Some(e) if e.is_usage() => EXIT_USAGE,
        _ => 1,
    }
}

pub fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("API types always serialise")
    );
}
