//! `baton update ID [--name S] [--priority N] [--time-limit D] [--gpus N] [--gpu-mem S]
//! [--cpus N] [--mem S]`: change a queued job, like `scontrol update`. Each change is an event
//! (`baton events ID`); a running job may change only its name.

use std::process::ExitCode;

use baton_core::units::{parse_duration, parse_size};

use super::{UsageError, print_json};
use crate::api::UpdateRequest;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job.
    /// The job: its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
    #[arg(long)]
    name: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    time_limit: Option<i64>,
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    gpu_mem: Option<u64>,
    #[arg(long, value_name = "N")]
    cpus: Option<u32>,
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    mem: Option<u64>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    let req = UpdateRequest {
        name: args.name,
        priority: args.priority,
        time_limit_ms: args.time_limit,
        gpus: args.gpus,
        gpu_mem: args.gpu_mem,
        cpus: args.cpus,
        mem: args.mem,
    };
    if req == UpdateRequest::default() {
        return Err(UsageError(
            "nothing to change: give --name, --priority, --time-limit, --gpus, --gpu-mem, --cpus \
             or --mem"
                .into(),
        )
        .into());
    }
    let job = client().update(id, &req)?;
    if json {
        print_json(&job);
    } else {
        println!(
            "job {}: updated (`baton events {}` lists the changes)",
            job.id, job.id
        );
    }
    Ok(ExitCode::SUCCESS)
}
