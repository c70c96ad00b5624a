//! `baton status [ID...]`: the queue, or the named jobs.

use std::process::ExitCode;

use super::{client, output, print_json};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to show (default: queued, running and recently ended jobs).
    ids: Vec<u64>,
    /// Every job the daemon remembers, however long ago it ended.
    #[arg(long)]
    all: bool,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let jobs = client().list(&args.ids, args.all)?;
    if json {
        print_json(&jobs);
    } else if jobs.is_empty() {
        println!(
            "no jobs (queued, running, or ended in the last hour); `baton status --all` shows older ones"
        );
    } else {
        print!("{}", output::job_table(&jobs));
    }
    Ok(ExitCode::SUCCESS)
}
