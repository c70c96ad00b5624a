//! `baton cancel ID|NAME...` and `baton cancel --name GLOB / --state S / --mine / --all`:
//! cancel queued or running jobs, named or chosen by filter among your own. A cancel by filter
//! says how many it is about to cancel and, at a terminal, asks first.

use baton_core::JobState;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use super::{UsageError, print_json};
use crate::api::SelectRequest;
use crate::edge::connect::client;
use crate::edge::request;
use crate::edge::resolve::{self, Takes};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to cancel: ids, names (your newest job of that name) or globs (`'sweep-*'`: all of
    /// yours that match and have not ended).
    #[arg(value_name = "ID|NAME")]
    ids: Vec<String>,
    /// Your queued and running jobs whose name matches GLOB.
    #[arg(long, value_name = "GLOB")]
    name: Option<String>,
    /// Only jobs in this state: queued or running.
    #[arg(long, value_name = "STATE")]
    state: Option<JobState>,
    /// Only the jobs this agent session submitted (as `status --mine`).
    #[arg(long)]
    mine: bool,
    /// Every queued and running job of yours.
    #[arg(long)]
    all: bool,
    /// Do not ask before cancelling by filter at a terminal.
    #[arg(long, short)]
    yes: bool,
    /// Cancel even a job that another agent session of yours submitted.
    #[arg(long)]
    force: bool,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let client = client();
    let context = request::agent_context();
    let filtered = args.name.is_some() || args.state.is_some() || args.mine || args.all;
    let ids = match (args.ids.is_empty(), filtered) {
        (true, false) => {
            return Err(UsageError(
                "name the jobs to cancel (ids or names), or choose them with --name GLOB, \
                 --state, --mine or --all"
                    .into(),
            )
            .into());
        }
        (false, true) => {
            return Err(UsageError(
                "give either jobs or filters (--name, --state, --mine, --all), not both".into(),
            )
            .into());
        }
        (false, false) => resolve::job_ids(&client, &args.ids, Takes::Active)?,
        (true, true) => {
            let chosen = client.select(&SelectRequest {
                name: args.name.clone(),
                state: args.state,
                session: args.mine.then(|| request::mine(&context)),
            })?;
            let ids: Vec<u64> = chosen.jobs.iter().map(|j| j.id).collect();
            if ids.is_empty() {
                eprintln!("baton: no queued or running job of yours matches; nothing cancelled");
                if json {
                    print_json(&chosen.jobs);
                }
                return Ok(ExitCode::SUCCESS);
            }
            let running = chosen
                .jobs
                .iter()
                .filter(|j| j.state == JobState::Running)
                .count();
            let what = format!(
                "{} job{} ({running} running, {} queued)",
                ids.len(),
                if ids.len() == 1 { "" } else { "s" },
                ids.len() - running
            );
            if !args.yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                eprint!("baton: cancel {what}? [y/N] ");
                let _ = std::io::stderr().flush();
                let mut answer = String::new();
                std::io::stdin().lock().read_line(&mut answer)?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    eprintln!("baton: nothing cancelled");
                    return Ok(ExitCode::SUCCESS);
                }
            } else {
                eprintln!("baton: cancelling {what}");
            }
            ids
        }
    };
    let resp = client.cancel(&request::cancel_request(ids, args.force, &context))?;
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
