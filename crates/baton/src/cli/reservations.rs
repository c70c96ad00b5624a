//! `baton reservations`: the reservations that stand (`--all`: the last week's ended and
//! cancelled ones too), each with its GPUs, window, users and jobs.

use std::process::ExitCode;

use baton_core::windows::GpuList;

use super::print_json;
use crate::api::ReservationView;
use crate::clock::local_minute;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Ended and cancelled reservations of the last week too.
    #[arg(long)]
    all: bool,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let rows = client().reservations(args.all)?;
    if json {
        print_json(&rows);
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        println!(
            "no reservations (`baton reserve --gpus N --start TIME --duration DUR` makes one)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", table(&rows));
    Ok(ExitCode::SUCCESS)
}

fn table(rows: &[ReservationView]) -> String {
    let line = |cells: [&str; 8]| {
        format!(
            "{:<16} {:<9} {:<8} {:<20} {:<20} {:<16} {:>6} {:>7}\n",
            cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7]
        )
    };
    let mut out = line([
        "NAME", "STATE", "GPUS", "START", "END", "USERS", "QUEUED", "RUNNING",
    ]);
    for r in rows {
        out.push_str(&line([
            &r.name,
            &r.state,
            &GpuList(&r.gpus).to_string(),
            &local_minute(r.start_ms),
            &local_minute(r.end_ms),
            &r.users.join(","),
            &r.queued.to_string(),
            &r.running.to_string(),
        ]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_reservation_under_its_header() {
        let row = ReservationView {
            id: 1,
            name: "deadline".into(),
            gpus: vec![2, 3],
            start: String::new(),
            end: String::new(),
            start_ms: 0,
            end_ms: 3_600_000,
            users: vec!["alice".into(), "bob".into()],
            created_by: "root".into(),
            state: "upcoming".into(),
            queued: 2,
            running: 0,
        };
        let text = table(&[row]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME "), "{text}");
        assert!(
            lines[1].starts_with("deadline ") && lines[1].contains(" 2-3 "),
            "{text}"
        );
        assert!(lines[1].contains("alice,bob"), "{text}");
    }
}
