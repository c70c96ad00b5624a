//! baton: a GPU job queue and scheduler for AI coding agents and the people who run them. Two
//! binaries share this library: `batond`, the whole of baton (the daemon, the supervisor, every
//! command; `run_full`), and `baton`, the small front end people and agents type, which runs
//! `baton submit` itself and hands every other command to `batond` (`front`).

mod api;
mod cli;
mod clock;
mod config;
mod daemon;
mod edge;
mod executor;
mod gpu;
mod history;
mod jobs;
mod mcp;
mod metrics;
mod monitor;
mod notify;
mod paths;
mod procinfo;
mod report;
mod stacks;
mod store;
mod tasks;
mod users;
mod web;

mod front;

use std::process::ExitCode;

use clap::Parser;

/// `batond`'s `main`: parses the command line, runs the command and turns errors into the exit
/// codes of DESIGN §3.
pub fn run_full() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => exit_with(&err),
    }
}

/// `baton`'s `main` (see `front`): its exit status.
pub fn run_front() -> u8 {
    match front::run() {
        Ok(()) => 0,
        Err(err) => fail(&err),
    }
}

/// How a command that failed ends: its message on stderr, its exit code.
fn exit_with(err: &anyhow::Error) -> ExitCode {
    ExitCode::from(fail(err))
}

/// Says why a command failed; its exit code.
fn fail(err: &anyhow::Error) -> u8 {
    eprintln!("baton: {}", edge::present::describe(err.as_ref()));
    cli::exit_code_for(err)
}
