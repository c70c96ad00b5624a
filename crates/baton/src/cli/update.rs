//! `baton update ID [--name S] [--priority N] [--time-limit D] [--gpus N] [--gpu-mem S]
//! [--cpus N] [--mem S]`: change a queued job, like `scontrol update`. Each change is an event
//! (`baton events ID`); a running job may change only its name.

use std::process::ExitCode;

use super::{UsageError, print_json};
use crate::api::UpdateRequest;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job: its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
    #[command(flatten)]
    spec: super::overrides::SpecOverrides,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    let req = UpdateRequest {
        name: args.spec.name,
        priority: args.spec.priority,
        time_limit_ms: args.spec.time_limit,
        gpus: args.spec.gpus,
        gpu_mem: args.spec.gpu_mem,
        cpus: args.spec.cpus,
        mem: args.spec.mem,
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
