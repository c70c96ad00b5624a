//! A workflow's summary report, built when its last task ends: one headline, counts, the
//! critical path, and one row per task pointing at that task's own report. Pure: plain data in,
//! markdown out. Task names come from the workflow file (the submitter's own text); nothing of
//! any task's output appears here, so no fence is needed.

use std::fmt::Write;

use crate::model::{JobState, Millis};
use crate::units::format_duration;

/// One task as the summary shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskLine {
    pub task: String,
    pub job: u64,
    pub state: JobState,
    pub started_at: Option<Millis>,
    pub ended_at: Option<Millis>,
    pub reason: Option<String>,
}

/// `workflow 3 "caption-pipeline" failed after 12m00s: task train failed (exit code 1)` and the
/// rest of the summary.
pub fn summary(
    id: u64,
    name: &str,
    state: &str,
    submitted_at: Millis,
    ended_at: Millis,
    critical_path: &[String],
    tasks: &[TaskLine],
) -> String {
    let count = |s: JobState| tasks.iter().filter(|t| t.state == s).count();
    let took = format_duration((ended_at - submitted_at).max(0));
    let first_failure = tasks
        .iter()
        .filter(|t| matches!(t.state, JobState::Failed | JobState::Timeout))
        .filter(|t| t.started_at.is_some())
        .min_by_key(|t| t.ended_at);
    let mut md = format!("workflow {id} \"{}\" {state} after {took}", clean(name));
    if let Some(t) = first_failure {
        let _ = write!(
            md,
            ": task {} {}{}",
            clean(&t.task),
            t.state,
            t.reason
                .as_deref()
                .map(|r| format!(" ({})", clean(r)))
                .unwrap_or_default()
        );
    }
    md.push_str("\n\n");
    let _ = writeln!(
        md,
        "- tasks: {} succeeded, {} failed, {} timed out, {} cancelled (of {})",
        count(JobState::Succeeded),
        count(JobState::Failed),
        count(JobState::Timeout),
        count(JobState::Cancelled),
        tasks.len()
    );
    if !critical_path.is_empty() {
        let path: Vec<String> = critical_path.iter().map(|t| clean(t)).collect();
        let _ = writeln!(md, "- critical path: {}", path.join(" -> "));
    }
    let _ = writeln!(md, "- each task's own report: `baton report JOB`\n");
    md.push_str("| task | job | state | ran | reason |\n| --- | ---: | --- | ---: | --- |\n");
    for t in tasks.iter().take(200) {
        let ran = match (t.started_at, t.ended_at) {
            (Some(s), Some(e)) => format_duration((e - s).max(0)),
            _ => "-".into(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {ran} | {} |",
            clean(&t.task),
            t.job,
            t.state,
            t.reason.as_deref().map(clean).unwrap_or_default()
        );
    }
    if tasks.len() > 200 {
        let _ = writeln!(
            md,
            "\n({} more tasks: `baton workflow status {id}`)",
            tasks.len() - 200
        );
    }
    md
}

/// One line of plain text: no control characters, no table-breaking pipes, bounded.
fn clean(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .map(|c| if c == '|' { '/' } else { c })
        .take(160)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(
        task: &str,
        job: u64,
        state: JobState,
        ran: Option<(Millis, Millis)>,
        reason: Option<&str>,
    ) -> TaskLine {
        TaskLine {
            task: task.into(),
            job,
            state,
            started_at: ran.map(|r| r.0),
            ended_at: ran.map(|r| r.1).or(Some(9_000)),
            reason: reason.map(str::to_string),
        }
    }

    #[test]
    fn the_headline_names_the_first_task_that_failed_and_rows_follow() {
        let tasks = [
            line("prep", 1, JobState::Succeeded, Some((0, 60_000)), None),
            line(
                "train",
                2,
                JobState::Failed,
                Some((60_000, 120_000)),
                Some("exit code 1"),
            ),
            line(
                "eval",
                3,
                JobState::Failed,
                None,
                Some("dependency failed: job 2 ended failed"),
            ),
        ];
        let md = summary(
            4,
            "pipe",
            "failed",
            0,
            130_000,
            &["prep".into(), "train".into(), "eval".into()],
            &tasks,
        );
        assert!(
            md.starts_with(
                "workflow 4 \"pipe\" failed after 2m10s: task train failed (exit code 1)\n"
            ),
            "{md}"
        );
        assert!(
            md.contains("- tasks: 1 succeeded, 2 failed, 0 timed out, 0 cancelled (of 3)"),
            "{md}"
        );
        assert!(
            md.contains("- critical path: prep -> train -> eval"),
            "{md}"
        );
        assert!(
            md.contains("| train | 2 | failed | 1m00s | exit code 1 |"),
            "{md}"
        );
        assert!(
            md.contains("| eval | 3 | failed | - | dependency failed: job 2 ended failed |"),
            "{md}"
        );
    }

    #[test]
    fn names_cannot_break_the_table_or_the_terminal() {
        let tasks = [line(
            "a|b\u{1b}[31m",
            1,
            JobState::Succeeded,
            Some((0, 1)),
            None,
        )];
        let md = summary(1, "x\ny", "succeeded", 0, 1, &[], &tasks);
        assert!(md.starts_with("workflow 1 \"xy\" succeeded"), "{md}");
        assert!(
            md.contains("| a/b[31m | 1 |") && !md.contains('\u{1b}'),
            "{md}"
        );
    }
}
