//! `baton requeue ID...`: jobs that failed, were cancelled or timed out run again, each as a new
//! attempt of the same id (like `scontrol requeue`). Refused (exit 2, nothing changed) if any of
//! them is queued, running, succeeded, another user's, or a workflow's task.

use std::process::ExitCode;

use super::print_json;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to run again.
    #[arg(required = true)]
    #[arg(value_name = "ID|NAME")]
    ids: Vec<String>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let ids =
        crate::edge::resolve::job_ids(&client(), &args.ids, crate::edge::resolve::Takes::Many)?;
    let resp = client().requeue(&ids)?;
    if json {
        print_json(&resp.jobs);
        return Ok(ExitCode::SUCCESS);
    }
    for job in &resp.jobs {
        println!(
            "job {}: requeued; it runs again as attempt {} (`baton wait {}` blocks until it ends)",
            job.id,
            job.attempt + 1,
            job.id
        );
    }
    Ok(ExitCode::SUCCESS)
}
