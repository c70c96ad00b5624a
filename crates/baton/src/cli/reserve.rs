//! `baton reserve`: keep GPUs for some users for a window of time (issue 19), as Slurm's
//! `scontrol create reservation` and gflow's time windows do; `--cancel NAME` gives one back.
//! Prints the reservation's name on stdout (the reservation with --json); what it keeps, and
//! any running job that may still hold its GPUs when it starts, go to stderr.

use std::process::ExitCode;

use baton_core::units::parse_duration;
use baton_core::windows::GpuList;

use super::{UsageError, print_json};
use crate::api::ReserveRequest;
use crate::clock::local_minute;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many GPUs to keep.
    #[arg(long, value_name = "N", required_unless_present = "cancel")]
    gpus: Option<u32>,
    /// When the window begins: now (the default), now+2h, 14:00, 'tomorrow 09:00', 2026-12-09,
    /// 2026-12-09T09:00 (local time) or RFC 3339.
    #[arg(long, value_name = "TIME", default_value = "now")]
    start: String,
    /// How long it lasts, e.g. 6h, 90m, 2d.
    #[arg(long, value_parser = parse_duration, value_name = "DUR", required_unless_present = "cancel")]
    duration: Option<i64>,
    /// Whose jobs may run in it (repeatable, or comma-separated; default: yours). Root and
    /// `[limits] admins` reserve for anyone; other users for themselves, within `[limits]
    /// max_reserved_gpu_hours_per_user`.
    #[arg(long = "user", value_delimiter = ',', value_name = "USER")]
    users: Vec<String>,
    /// Its name, for `submit --reservation NAME` (default: resv-ID).
    #[arg(long)]
    name: Option<String>,
    /// Cancel reservation NAME instead: its GPUs are no longer kept, its queued jobs end as
    /// failed, and its running ones run on until its window's end.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["gpus", "duration", "users", "name"])]
    cancel: Option<String>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    if let Some(name) = &args.cancel {
        let view = client().cancel_reservation(name)?;
        if json {
            print_json(&view);
        } else {
            println!("{}", view.name);
            let mut note = format!(
                "cancelled reservation {}: GPU {} no longer kept",
                view.name,
                GpuList(&view.gpus)
            );
            if view.queued > 0 {
                note.push_str(&format!(
                    "; its {} queued job(s) end as failed (a held one once released)",
                    view.queued
                ));
            }
            if view.running > 0 {
                note.push_str(&format!(
                    "; its {} running job(s) run on until {} and keep their GPUs until then",
                    view.running,
                    local_minute(view.end_ms)
                ));
            }
            eprintln!("{note}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let now = crate::clock::now_ms();
    let start = baton_core::begin::parse_begin(&args.start, now, crate::clock::local_offset)
        .map_err(|e| UsageError(e.for_flag("--start").to_string()))?;
    let (Some(gpus), Some(duration)) = (args.gpus, args.duration) else {
        return Err(UsageError("--gpus and --duration say what to reserve".into()).into());
    };
    if duration <= 0 {
        return Err(UsageError("--duration must be positive".into()).into());
    }
    let answer = client().reserve(&ReserveRequest {
        name: args.name,
        gpus,
        start_ms: start,
        end_ms: start.max(now).saturating_add(duration),
        users: args.users,
    })?;
    if json {
        print_json(&answer);
        return Ok(ExitCode::SUCCESS);
    }
    let r = &answer.reservation;
    println!("{}", r.name);
    eprintln!(
        "reserved GPU {} for {} from {} to {}; submit with --reservation {} to run in it",
        GpuList(&r.gpus),
        r.users.join(", "),
        local_minute(r.start_ms),
        local_minute(r.end_ms),
        r.name
    );
    for warning in &answer.warnings {
        eprintln!("note: {warning}");
    }
    Ok(ExitCode::SUCCESS)
}
