//! `baton hold ID...` and `baton release ID...`: keep queued jobs from starting, and let them
//! start again. All or nothing: one job that cannot be held (not queued, not yours) changes none.

use std::process::ExitCode;

use super::print_json;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The jobs.
    #[arg(required = true)]
    #[arg(value_name = "ID|NAME")]
    ids: Vec<String>,
}

/// Holds the jobs (`hold`), or releases them.
pub fn run(args: Args, hold: bool, json: bool) -> anyhow::Result<ExitCode> {
    let ids =
        crate::edge::resolve::job_ids(&client(), &args.ids, crate::edge::resolve::Takes::Active)?;
    let client = client();
    let resp = if hold {
        client.hold(&ids)?
    } else {
        client.release(&ids)?
    };
    if json {
        print_json(&resp.jobs);
        return Ok(ExitCode::SUCCESS);
    }
    for job in &resp.jobs {
        if hold {
            println!(
                "job {}: held; `baton release {}` lets it start",
                job.id, job.id
            );
        } else {
            println!("job {}: released; it starts when its turn comes", job.id);
        }
    }
    Ok(ExitCode::SUCCESS)
}
