//! The flags that change what a job asks for, shared by `baton update` (of a queued job) and
//! `baton resubmit` (a new job like an old one): one set of names, units and help.

use baton_core::units::{parse_duration, parse_size};

#[derive(Debug, Default, clap::Args)]
pub struct SpecOverrides {
    /// A name for the job.
    #[arg(long)]
    pub name: Option<String>,
    /// Higher runs first.
    #[arg(long, allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// Wall-clock limit, e.g. 90m, 2h.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub time_limit: Option<i64>,
    /// Whole GPUs (or GPUs to share, with --gpu-mem).
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// Memory needed on each GPU (e.g. 20GiB).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub gpu_mem: Option<u64>,
    /// Cores to reserve.
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,
    /// The machine's memory to reserve (e.g. 8GiB).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub mem: Option<u64>,
}
