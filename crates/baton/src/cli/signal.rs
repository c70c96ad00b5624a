//! `baton signal ID SIG`: sends a signal (`TERM`, `SIGUSR1`, `10`; KILL and STOP too) to every
//! process of a running job, wherever it runs: its cgroup or its marked processes here,
//! `scancel --signal --full` under Slurm. Refused (exit 2) for a job that is not running, for
//! another user's, and for a name that is no signal.

use std::process::ExitCode;

use super::{UsageError, print_json};
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The running job: its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
    /// The signal: a name with or without SIG (TERM, SIGUSR1, HUP, INT, KILL, STOP, CONT,
    /// RTMIN+1) or a number from 1 to 64.
    #[arg(allow_hyphen_values = true)]
    signal: String,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    // Refused here, before any daemon is asked, with the daemon's own wording.
    baton_core::signal::parse(&args.signal)
        .map_err(|e| UsageError(format!("{}: {e}", args.signal.trim())))?;
    let resp = client().signal(id, &args.signal)?;
    if json {
        print_json(&resp);
        return Ok(ExitCode::SUCCESS);
    }
    println!("job {}: {} sent to {}", id, resp.name, resp.detail);
    Ok(ExitCode::SUCCESS)
}
