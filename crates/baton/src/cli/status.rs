//! `baton status [ID...]`: the queue, or the named jobs.

use std::process::ExitCode;

use super::{UsageError, print_json};
use crate::edge::connect::client;
use crate::edge::{present, request};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to show (default: queued, running and recently ended jobs).
    ids: Vec<u64>,
    /// Every job the daemon remembers, however long ago it ended.
    #[arg(long)]
    all: bool,
    /// Only the jobs this agent session submitted (Claude session, Codex thread or tmux pane;
    /// outside any, the jobs submitted outside any).
    #[arg(long)]
    mine: bool,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let jobs = if args.mine {
        if !args.ids.is_empty() {
            return Err(UsageError("--mine lists a session's jobs; drop the ids".into()).into());
        }
        let session = request::mine(&request::agent_context());
        client().list_session(&session, args.all)?
    } else {
        client().list(&args.ids, args.all)?
    };
    if json {
        print_json(&jobs);
    } else if jobs.is_empty() {
        println!("{}", present::no_jobs(args.all, args.mine));
    } else {
        print!("{}", present::job_table(&jobs));
    }
    // The daemon's own trouble (a full state directory), on stderr: a diagnostic, in every mode.
    if let Ok(info) = client().info()
        && let Some(health) = info.health
    {
        eprintln!("baton: {}", health.problem);
    }
    Ok(ExitCode::SUCCESS)
}
