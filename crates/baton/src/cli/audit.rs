//! `baton audit [--since DUR]`: what the waste rules decided and did, oldest first.

use std::process::ExitCode;

use baton_core::units::parse_duration;

use super::print_json;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only decisions from this long ago until now (`1h`, `7d`); default: all that are kept.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    since: Option<i64>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let entries = client().audit(args.since)?;
    if json {
        print_json(&entries);
        return Ok(ExitCode::SUCCESS);
    }
    if entries.is_empty() {
        println!("no waste decisions");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<24} {:<16} {:>6} {:>8} {:>4}  {:<12} {:<8} OUTCOME",
        "TIME", "RULE", "JOB", "PID", "GPU", "ACTION", "MODE"
    );
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for e in &entries {
        println!(
            "{:<24} {:<16} {:>6} {:>8} {:>4}  {:<12} {:<8} {}",
            e.time,
            e.rule,
            or_dash(e.job_id.map(|j| j.to_string())),
            or_dash(e.pid.map(|p| p.to_string())),
            or_dash(e.gpu.map(|g| g.to_string())),
            e.action,
            if e.dry_run { "dry-run" } else { "enforce" },
            e.outcome
        );
        println!("    {}", e.message);
    }
    Ok(ExitCode::SUCCESS)
}
