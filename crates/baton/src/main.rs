//! `baton`: the daemon and its command-line client in one binary. This file only parses the
//! command line, runs the chosen command and turns errors into the exit codes of DESIGN §3.

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

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            let code = cli::exit_code_for(&err);
            eprintln!("baton: {}", edge::present::describe(err.as_ref()));
            ExitCode::from(code)
        }
    }
}
