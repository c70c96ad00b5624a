//! `baton gc [--dry-run]`: applies retention (`[retention]` in config.toml) now, or with
//! `--dry-run` says what it would remove: job rows (with their events, deliveries and GPU
//! usage), output files and their bytes, and what is kept back because active jobs need it.
//! The daemon applies the same retention by itself when things fall due.

use std::process::ExitCode;

use baton_core::units::format_size;

use super::print_json;
use crate::edge::connect::client;
use crate::edge::present::thousands;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only say what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// This once, treat jobs that ended this long ago as due (`7d`; `0s`: every ended job
    /// nothing active needs), rows and output files alike.
    #[arg(long, value_name = "DUR", value_parser = check_duration)]
    older_than: Option<String>,
}

fn check_duration(text: &str) -> Result<String, String> {
    crate::history::retention::parse_window(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let r = client().gc(args.dry_run, args.older_than.as_deref())?;
    if json {
        print_json(&r);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if r.dry_run { "would remove" } else { "removed" };
    println!(
        "retention: job records kept {}, output files {} after a job ends{}",
        r.keep_jobs,
        r.keep_outputs,
        if args.older_than.is_some() {
            " (this once)"
        } else {
            ""
        }
    );
    println!(
        "{verb}: {} ended jobs ({} events, {} deliveries, {} GPU usage rows), {} workflows",
        thousands(r.jobs),
        thousands(r.events),
        thousands(r.deliveries),
        thousands(r.gpu_usage_rows),
        thousands(r.workflows)
    );
    println!(
        "{verb}: {} files, {}",
        thousands(r.files),
        format_size(r.bytes)
    );
    if r.kept_back > 0 {
        println!(
            "kept back: {} ended jobs that active jobs still need (dependencies, workflows)",
            thousands(r.kept_back)
        );
    }
    println!("next due: {}", r.next_due);
    Ok(ExitCode::SUCCESS)
}
