//! `baton stats [--since DUR]`: the efficiency figures an admin reports: GPU utilisation,
//! GPU-hours by owner, the share of allocated GPU time that sat idle, and the waste actions.

use std::process::ExitCode;

use baton_core::units::parse_duration;

use super::print_json;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The period: from this long ago until now (`24h`, `7d`); default: everything kept.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    since: Option<i64>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let s = client().stats(args.since)?;
    if json {
        print_json(&s);
        return Ok(ExitCode::SUCCESS);
    }
    let pct = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1} %"));
    match args.since {
        Some(_) => println!("period: {} to {}", s.since, s.until),
        // No start was asked for: everything the daemon keeps, not "since 1970".
        None => println!("period: everything kept, until {}", s.until),
    }
    println!("cluster GPU utilisation: {}", pct(s.cluster_util_pct));
    for g in &s.gpus {
        println!(
            "  GPU {:<3} {:>8}  ({} samples)",
            g.gpu,
            pct(g.util_pct),
            g.samples
        );
    }
    println!("allocated GPU-hours: {:.2}", s.allocated_gpu_hours);
    println!(
        "idle share of allocated GPU time: {} ({:.2} GPU-hours at or below the idle threshold)",
        pct(s.idle_share.map(|v| v * 100.0)),
        s.idle_gpu_hours
    );
    if s.owners.is_empty() {
        println!("GPU-hours by owner: none");
    } else {
        println!("GPU-hours by owner:");
        for o in &s.owners {
            println!("  {:<16} {:>10.2}  ({} jobs)", o.owner, o.gpu_hours, o.jobs);
        }
    }
    if s.waste_actions.is_empty() {
        println!("waste actions: none");
    } else {
        println!("waste actions:");
        for w in &s.waste_actions {
            println!(
                "  {:<16} {:<12} {:>6}{}",
                w.rule,
                w.action,
                w.count,
                if w.dry_run { "  (dry run)" } else { "" }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
