//! `baton gpus`: each GPU with its memory, utilisation and the jobs baton placed on it.

use std::process::ExitCode;

use baton_core::units::format_size;

use super::print_json;
use crate::edge::connect::client;

pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let resp = client().gpus()?;
    if json {
        print_json(&resp);
        return Ok(ExitCode::SUCCESS);
    }
    if resp.gpus.is_empty() {
        println!(
            "no GPUs (backend: {}); `baton serve --sim-gpus N` simulates N GPUs",
            resp.backend
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<4} {:<26} {:>21} {:>5} {:>6} {:>6} {:>5}  {:<12} PROCESSES",
        "GPU", "MODEL", "MEMORY USED/TOTAL", "UTIL", "5MIN", "POWER", "TEMP", "JOBS"
    );
    for g in &resp.gpus {
        let util = g
            .utilization
            .map(|u| format!("{u}%"))
            .unwrap_or_else(|| "-".into());
        let jobs = if g.jobs.is_empty() {
            "-".to_string()
        } else {
            let ids = g
                .jobs
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",");
            if g.exclusive {
                ids
            } else {
                format!("{ids} (shared)")
            }
        };
        let procs = if g.processes.is_empty() {
            "-".to_string()
        } else {
            g.processes
                .iter()
                .map(|p| format!("{} ({})", p.pid, format_size(p.memory_used)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let memory = format!(
            "{} / {}",
            format_size(g.memory_used),
            format_size(g.memory_total)
        );
        let util_5m = g
            .util_5m
            .map(|u| format!("{u:.0}%"))
            .unwrap_or_else(|| "-".into());
        let power = g
            .power_watts
            .map(|w| format!("{w:.0}W"))
            .unwrap_or_else(|| "-".into());
        let temp = g
            .temperature_c
            .map(|t| format!("{t:.0}C"))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<4} {:<26} {:>21} {:>5} {:>6} {:>6} {:>5}  {:<12} {}",
            g.index, g.model, memory, util, util_5m, power, temp, jobs, procs
        );
    }
    println!("backend: {}", resp.backend);
    Ok(ExitCode::SUCCESS)
}
