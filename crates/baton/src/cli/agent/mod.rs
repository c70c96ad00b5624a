//! `baton agent ...`: what makes waking reliable inside a particular agent. `setup` writes the
//! agent's configuration; `wait-hook` is the command Claude Code's hook runs.

pub mod setup;
mod wait_hook;

use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Add baton's wake-up hook and MCP server to an agent's settings: `baton agent setup claude`
    /// or `baton agent setup codex` (`--print` shows the change without writing it).
    Setup(setup::Args),
    /// For Claude Code's PostToolUse hook: after a `baton submit`, block until the jobs end and
    /// exit 2 with their reports on stderr, which wakes the session.
    WaitHook(wait_hook::Args),
}

pub fn run(command: Command, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        Command::Setup(args) => setup::run(args, json),
        Command::WaitHook(args) => Ok(wait_hook::run(args)),
    }
}
