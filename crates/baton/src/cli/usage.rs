//! `baton usage`: where each user stands against the daemon's `[limits]`: the GPUs, CPUs and
//! memory their jobs hold now and how many they have queued, each beside its cap.

use std::process::ExitCode;

use baton_core::limits::gpu_hours;
use baton_core::units::format_size;

use super::print_json;
use crate::api::UsageRow;
use crate::edge::connect::client;

pub fn run(json: bool) -> anyhow::Result<ExitCode> {
    let rows = client().usage()?;
    if json {
        print_json(&rows);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", table(&rows));
    // A group's pooled budget once, however many of its members are shown.
    let mut groups: Vec<&baton_core::limits::BudgetUse> = Vec::new();
    for g in rows.iter().flat_map(|r| &r.group_budgets) {
        if !groups.iter().any(|x| x.who == g.who) {
            groups.push(g);
        }
    }
    for budget in rows.iter().filter_map(|r| r.budget.as_ref()).chain(groups) {
        let state = if budget.spent() {
            "used up, GPU jobs wait"
        } else {
            "budget"
        };
        println!("{state}: {budget}");
    }
    if rows.iter().all(|r| {
        r.max_gpus.is_none()
            && r.max_cpus.is_none()
            && r.max_mem.is_none()
            && r.max_queued.is_none()
            && r.max_gpus_per_job.is_none()
            && r.budget.is_none()
            && r.group_budgets.is_empty()
    }) {
        println!("no limits: `[limits] max_gpus_per_user` and the rest in config.toml set them");
    }
    Ok(ExitCode::SUCCESS)
}

/// `held` against `max`: `2/4`, or `2` with no cap.
fn against(held: String, max: Option<String>) -> String {
    match max {
        Some(max) => format!("{held}/{max}"),
        None => held,
    }
}

/// The rows as the command prints them.
fn table(rows: &[UsageRow]) -> String {
    let mut out = format!(
        "{:<16} {:>7} {:>7} {:>19} {:>7} {:>9} {:>8} {:>16}\n",
        "USER", "GPUS", "CPUS", "MEMORY", "RUNNING", "QUEUED", "PER JOB", "GPU-HOURS"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<16} {:>7} {:>7} {:>19} {:>7} {:>9} {:>8} {:>16}\n",
            r.user,
            against(r.gpus.to_string(), r.max_gpus.map(|m| m.to_string())),
            against(r.cpus.to_string(), r.max_cpus.map(|m| m.to_string())),
            against(format_size(r.mem), r.max_mem.map(format_size)),
            r.running,
            against(r.queued.to_string(), r.max_queued.map(|m| m.to_string())),
            r.max_gpus_per_job
                .map_or_else(|| "-".to_string(), |m| format!("{m} GPUs")),
            r.budget.as_ref().map_or_else(
                || "-".to_string(),
                |b| format!(
                    "{}/{} a {}",
                    gpu_hours(b.used_ms),
                    gpu_hours(b.budget_ms),
                    b.period.noun()
                )
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_figure_stands_beside_its_cap() {
        let row = UsageRow {
            user: "alice".into(),
            uid: 1000,
            gpus: 2,
            cpus: 8,
            mem: 16 << 30,
            running: 2,
            queued: 3,
            max_gpus: Some(4),
            max_cpus: None,
            max_mem: Some(64 << 30),
            max_queued: Some(500),
            max_gpus_per_job: Some(2),
            budget: Some(baton_core::limits::BudgetUse {
                who: "alice".into(),
                used_ms: 45_000_000,
                budget_ms: 40 * 3_600_000,
                period: baton_core::limits::Period::Week,
                since: 0,
                resets_at: 1,
                resets: "Monday 2026-12-14 00:00".into(),
                setting: "[limits] gpu_hours_per_user = 40".into(),
            }),
            group_budgets: Vec::new(),
        };
        let text = table(&[row]);
        let line = text.lines().nth(1).unwrap();
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "alice", "2/4", "8", "16", "GiB/64", "GiB", "2", "3/500", "2", "GPUs", "12.5/40",
                "a", "week"
            ]
        );
    }
}
