//! `baton cancel ID...`: cancel queued or running jobs.

use baton_core::JobState;
use std::process::ExitCode;

use super::print_json;
use crate::edge::connect::client;
use crate::edge::request;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to cancel.
    #[arg(required = true)]
    ids: Vec<u64>,
    /// Cancel even a job that another agent session of yours submitted.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let resp = client().cancel(&request::cancel_request(
        args.ids,
        args.force,
        &request::agent_context(),
    ))?;
    if json {
        print_json(&resp.jobs);
        return Ok(ExitCode::SUCCESS);
    }
    for job in &resp.jobs {
        match job.state {
            JobState::Running => println!(
                "job {}: stopping (SIGTERM to its processes, SIGKILL after the grace period)",
                job.id
            ),
            JobState::Cancelled => println!("job {}: cancelled", job.id),
            other => println!("job {}: already ended ({other})", job.id),
        }
    }
    Ok(ExitCode::SUCCESS)
}
