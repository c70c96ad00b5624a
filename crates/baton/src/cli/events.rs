//! `baton events ID`: the job's history, oldest first.

use std::process::ExitCode;

use super::print_json;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    id: u64,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let events = client().events(args.id)?;
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
