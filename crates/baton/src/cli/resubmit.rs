//! `baton resubmit ID [--name S --gpus N --gpu-mem S --cpus N --mem S --priority N
//! --time-limit D --notify SPEC]`: a new job with job ID's spec (command, working directory,
//! environment, tags, report channels, resources, time limit, retries; not its dependencies),
//! with these overrides. Prints the new job's id (or the job with --json), as `submit` does.

use std::process::ExitCode;

use baton_core::units::{parse_duration, parse_size};

use super::print_json;
use crate::api::ResubmitRequest;
use crate::edge::connect::client;
use crate::edge::{present, request};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job whose spec the new job takes (any state, any age).
    /// The job: its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
    /// A name for the new job (default: the original's).
    #[arg(long)]
    name: Option<String>,
    /// Whole GPUs (or GPUs to share, with --gpu-mem); `--gpus 0` drops the GPUs altogether.
    #[arg(long, value_name = "N")]
    gpus: Option<u32>,
    /// Memory needed on each GPU (e.g. 20GiB).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    gpu_mem: Option<u64>,
    /// Cores to reserve.
    #[arg(long, value_name = "N")]
    cpus: Option<u32>,
    /// The machine's memory to reserve (e.g. 8GiB).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    mem: Option<u64>,
    /// Higher runs first.
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// Wall-clock limit, e.g. 90m, 2h.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    time_limit: Option<i64>,
    /// Where the new job's report goes (repeatable), resolved in this session as for `submit`;
    /// default: where the original's went.
    #[arg(long, value_name = "SPEC")]
    notify: Vec<String>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    let req = ResubmitRequest {
        name: args.name,
        gpus: args.gpus,
        gpu_mem: args.gpu_mem,
        cpus: args.cpus,
        mem: args.mem,
        priority: args.priority,
        time_limit_ms: args.time_limit,
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
