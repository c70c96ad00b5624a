//! `baton resubmit ID [--name S --gpus N --gpu-mem S --cpus N --mem S --priority N
//! --time-limit D --notify SPEC]`: a new job with job ID's spec (command, working directory,
//! environment, tags, report channels, resources, time limit, retries; not its dependencies),
//! with these overrides. Prints the new job's id (or the job with --json), as `submit` does.

use super::print_json;
use crate::api::ResubmitRequest;
use crate::edge::connect::client;
use crate::edge::{present, request};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job whose spec the new job takes (any state, any age): its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
    #[command(flatten)]
    spec: super::overrides::SpecOverrides,
    /// Where the new job's report goes (repeatable), resolved in this session as for `submit`;
    /// default: where the original's went.
    #[arg(long, value_name = "SPEC")]
    notify: Vec<String>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    let req = ResubmitRequest {
        name: args.spec.name,
        gpus: args.spec.gpus,
        gpu_mem: args.spec.gpu_mem,
        cpus: args.spec.cpus,
        mem: args.spec.mem,
        priority: args.spec.priority,
        time_limit_ms: args.spec.time_limit,
        notify: args.notify,
        context: request::agent_context(),
    };
    let job = client().resubmit(id, &req)?;
    if json {
        print_json(&job);
    } else {
        println!("{}", job.id);
    }
    eprintln!(
        "baton: job {} is a copy of job {} (its dependencies are not copied).\nbaton: {}\nbaton: {}",
        job.id,
        id,
        present::job_queued(&job, &present::standing(&job)),
        present::delivery_note(&job, true),
    );
    Ok(ExitCode::SUCCESS)
}
