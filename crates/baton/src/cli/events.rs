//! `baton events ID`: the job's history, oldest first.

use std::process::ExitCode;

use super::print_json;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job: its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    let events = client().events(id)?;
    if json {
        print_json(&events);
        return Ok(ExitCode::SUCCESS);
    }
    for e in &events {
        if e.detail.is_empty() {
            println!("{}  {}", e.at, e.kind);
        } else {
            println!("{}  {:<16} {}", e.at, e.kind, e.detail);
        }
    }
    Ok(ExitCode::SUCCESS)
}
