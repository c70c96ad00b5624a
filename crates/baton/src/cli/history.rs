//! `baton history`: one row per job, sacct-like: ID, NAME, STATE, EXIT, WAIT, RAN, GPUS, GPU
//! EFF (the mean utilisation of its GPUs over its last attempt), oldest first; `--json` (the
//! `GET /v1/history` rows) or `--csv`. The filters of `baton status`; without them, every job
//! the daemon keeps, fetched page by page.

use std::process::ExitCode;

use super::print_json;
use super::status::FilterArgs;
use crate::edge::connect::client;
use crate::edge::present;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    filters: FilterArgs,
    /// Print comma-separated values (a header line, then one line per job).
    #[arg(long)]
    csv: bool,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let mut query = args.filters.query()?;
    query.all = true;
    let limit = args.filters.limit.map(|l| l as usize);
    let mut rows = client().history(&query, limit)?.items;
    rows.sort_by_key(|r| r.id);
    if json {
        print_json(&rows);
    } else if args.csv {
        print!("{}", present::history_csv(&rows));
    } else if rows.is_empty() {
        println!(
            "{}",
            if args.filters.any() {
                "no jobs match"
            } else {
                "no jobs: none has been submitted, or none is remembered any more"
            }
        );
    } else {
        print!("{}", present::history_table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}
