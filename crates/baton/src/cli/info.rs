//! `baton info`: which daemon this user talks to (its pid, state directory, socket and version),
//! its GPUs, how it contains jobs, and its own health.

use std::process::ExitCode;

use super::print_json;
use crate::edge::connect::client;

pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let info = client().info()?;
    if json {
        print_json(&info);
        return Ok(ExitCode::SUCCESS);
    }
    println!("baton daemon {} (pid {})", info.version, info.pid);
    println!("  state directory: {}", info.home);
    println!(
        "  socket:          {}",
        crate::paths::client_socket().display()
    );
    println!(
        "  mode:            {}",
        if info.system {
            "system (serves every local user)"
        } else {
            "user"
        }
    );
    println!(
        "  GPUs:            {} ({})",
        info.gpu_count, info.gpu_backend
    );
    println!(
        "  CPUs, memory:    {} CPUs, {} for jobs; a job takes {} CPU{}{} unless it asks",
        info.cpus,
        baton_core::units::format_size(info.memory),
        info.default_cpus,
        if info.default_cpus == 1 { "" } else { "s" },
        if info.default_memory > 0 {
            format!(
                " and {}",
                baton_core::units::format_size(info.default_memory)
            )
        } else {
            String::new()
        }
    );
    println!("  containment:     {}", info.containment);
    match &info.health {
        Some(health) => println!("  health:          {}", health.problem),
        None => println!("  health:          ok"),
    }
    Ok(ExitCode::SUCCESS)
}
