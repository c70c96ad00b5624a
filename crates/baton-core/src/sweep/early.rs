//! The early-wake verdict of a sweep (issue 16): is a sweep that is still running clearly
//! broken? An agent that queued 200 runs should not wait for the last one to learn that every
//! run dies of the same CUDA OOM in its first minute. The daemon asks [`broken`] each time a
//! run ends; the first verdict wakes the agent (once per sweep: the daemon remembers that it
//! did) with [`Broken::to_markdown`], and, where the sweep asked for it, the daemon cancels the
//! runs that have not ended. Once every run has ended the comparison report says it all, so
//! there is no verdict then.
//!
//! Cancelled runs do not count as failures here: someone chose to stop them, which says nothing
//! about the sweep's command.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::Params;
use super::compare::{RunSummary, clean_value, clip_middle, failure_cause, param};
use crate::model::JobState;
use crate::report::{clean, clip, cut_at_line, inert, inline_code, sanitize_line};

/// When a running sweep counts as broken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EarlyWake {
    /// The first this many runs to end all failed the same way; and no share of failures counts
    /// before this many runs have ended (one failure of one is no pattern).
    pub first_failures: usize,
    /// At least this share of the runs that ended failed.
    pub failure_share: f64,
}

impl Default for EarlyWake {
    fn default() -> Self {
        EarlyWake {
            first_failures: 3,
            failure_share: 0.5,
        }
    }
}

/// Why a running sweep looks broken.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Broken {
    /// `the first 3 runs to end all failed the same way`, `5 of the 8 runs that ended failed
    /// (62 %)`.
    pub reason: String,
    /// The most common cause among the failed runs (for the first-runs rule, theirs).
    pub cause: Option<String>,
    pub failed: usize,
    pub ended: usize,
    pub total: usize,
    /// A few of the failed runs, in the order they ended, those that failed of `cause` first.
    pub jobs: Vec<u64>,
    /// The parameter values every run that failed of `cause` has and no other run that ended
    /// has (so far: later runs may have them too). Empty with fewer than two such runs.
    #[serde(default)]
    pub shared: Params,
}

/// Failed runs a [`Broken`] lists.
const JOBS_KEPT: usize = 5;

/// `ended` in the order the runs ended; `total` runs in the sweep. Some when the first
/// `first_failures` runs to end all failed with the same cause (and the sweep has more runs
/// than that), or when at least `first_failures` runs ended and failed/ended >=
/// `failure_share` (and runs remain). None once every run has ended.
pub fn broken(ended: &[RunSummary], total: usize, policy: &EarlyWake) -> Option<Broken> {
    let first = policy.first_failures.max(1);
    if ended.len() >= total || ended.len() < first {
        return None;
    }
    let failures: Vec<&RunSummary> = ended.iter().filter(|r| counts_as_failure(r)).collect();
    let share = failures.len() as f64 / ended.len() as f64;
    let (reason, cause) = if let Some(cause) = same_failure(&ended[..first]) {
        (
            format!("the first {first} runs to end all failed the same way"),
            cause,
        )
    } else if !failures.is_empty() && share >= policy.failure_share {
        (
            format!(
                "{} of the {} runs that ended failed ({:.0} %)",
                failures.len(),
                ended.len(),
                share * 100.0
            ),
            most_common_cause(&failures),
        )
    } else {
        return None;
    };
    let (with_cause, others): (Vec<&RunSummary>, Vec<&RunSummary>) =
        failures.iter().partition(|r| failure_cause(r) == cause);
    Some(Broken {
        reason,
        failed: failures.len(),
        ended: ended.len(),
        total,
        jobs: with_cause
            .iter()
            .chain(&others)
            .take(JOBS_KEPT)
            .map(|r| r.job)
            .collect(),
        // Job-derived text, sanitized as in every report.
        shared: shared(&with_cause, ended, &cause)
            .into_iter()
            .map(|(k, v)| (clean(&k, 40), clean_value(&v, 300)))
            .collect(),
        cause: Some(clean(&cause, 160)),
    })
}

/// Failed or timed out: the command did not do its work.
fn counts_as_failure(run: &RunSummary) -> bool {
    matches!(run.state, JobState::Failed | JobState::Timeout)
}

/// The cause, when every one of `runs` failed and all for the same cause.
fn same_failure(runs: &[RunSummary]) -> Option<String> {
    let cause = failure_cause(runs.first()?);
    runs.iter()
        .all(|r| counts_as_failure(r) && failure_cause(r) == cause)
        .then_some(cause)
}

/// The cause most of `failures` have; of equally common ones, the one seen first.
fn most_common_cause(failures: &[&RunSummary]) -> String {
    let causes: Vec<String> = failures.iter().map(|r| failure_cause(r)).collect();
    let count = |c: &String| causes.iter().filter(|x| *x == c).count();
    let mut best = &causes[0];
    for c in &causes {
        if count(c) > count(best) {
            best = c;
        }
    }
    best.clone()
}

/// The values every run in `group` has and no run that ended otherwise (succeeded, or failed
/// of something else) has.
fn shared(group: &[&RunSummary], ended: &[RunSummary], cause: &str) -> Params {
    let Some(first) = group.first() else {
        return Params::new();
    };
    if group.len() < 2 {
        return Params::new();
    }
    let elsewhere = |name: &str, value: &str| {
        ended.iter().any(|r| {
            !(counts_as_failure(r) && failure_cause(r) == cause)
                && param(&r.params, name) == Some(value)
        })
    };
    first
        .params
        .iter()
        .filter(|(name, value)| {
            group.iter().all(|r| param(&r.params, name) == Some(value)) && !elsewhere(name, value)
        })
        .cloned()
        .collect()
}

/// [`Broken::to_markdown`] never returns more than this many bytes.
pub const MAX_BROKEN_BYTES: usize = 1500;

/// Characters of the cause, parameters shown and characters of one parameter value, from
/// generous to bare.
const BUDGETS: &[(usize, usize, usize)] = &[(120, 4, 24), (80, 3, 16), (40, 2, 12), (24, 1, 8)];

impl Broken {
    /// At most [`MAX_BROKEN_BYTES`]: what was seen, the cause with the parameter values its
    /// runs share, the exact commands, and what happens now: if `stopping`, the runs that have
    /// not ended are being cancelled; else they go on and the comparison report comes when the
    /// last one ends.
    pub fn to_markdown(&self, sweep_id: u64, sweep_name: &str, stopping: bool) -> String {
        let mut text = String::new();
        for &(cause_chars, params, value_chars) in BUDGETS {
            text = self.render(
                sweep_id,
                sweep_name,
                stopping,
                cause_chars,
                params,
                value_chars,
            );
            if text.len() <= MAX_BROKEN_BYTES {
                return text;
            }
        }
        // No fences, every line stands alone: a cut at a line end is safe.
        cut_at_line(&text, MAX_BROKEN_BYTES)
    }

    fn render(
        &self,
        sweep_id: u64,
        sweep_name: &str,
        stopping: bool,
        cause_chars: usize,
        params: usize,
        value_chars: usize,
    ) -> String {
        let plain =
            |text: &str, max: usize| inert(&clip(sanitize_line(text.as_bytes()).trim(), max));
        let value = |text: &str, max: usize| {
            inert(&clip_middle(sanitize_line(text.as_bytes()).trim(), max))
        };
        let mut md = format!(
            "sweep {sweep_id} \"{}\" looks broken: {}\n\n",
            plain(sweep_name, 80),
            plain(&self.reason, 120)
        );
        let _ = writeln!(
            md,
            "- ended so far: {} of {} runs, {} failed",
            self.ended, self.total, self.failed
        );
        if let Some(cause) = &self.cause {
            let _ = write!(md, "- cause: {}", inline_code(&clip(cause, cause_chars)));
            if !self.shared.is_empty() {
                let mut values: Vec<String> = self
                    .shared
                    .iter()
                    .take(params)
                    .map(|(k, v)| format!("{}={}", value(k, value_chars), value(v, value_chars)))
                    .collect();
                if self.shared.len() > params {
                    values.push("…".to_string());
                }
                let _ = write!(
                    md,
                    "; every run that failed this way has {}, and no other run so far",
                    values.join(" ")
                );
            }
            md.push('\n');
        }
        if !self.jobs.is_empty() {
            let jobs: Vec<String> = self.jobs.iter().map(u64::to_string).collect();
            let more = self.failed.saturating_sub(self.jobs.len());
            let _ = write!(md, "- failed: job {}", jobs.join(", "));
            if more > 0 {
                let _ = write!(md, " and {more} more");
            }
            md.push('\n');
            let _ = writeln!(
                md,
                "- `baton report {}`: what happened to the first of them",
                self.jobs[0]
            );
        }
        let left = self.total.saturating_sub(self.ended);
        let noun = if left == 1 { "run" } else { "runs" };
        if stopping {
            let _ = writeln!(
                md,
                "- now: the other {left} {noun} are being cancelled; the comparison report \
                 comes when they have ended"
            );
        } else {
            let _ = writeln!(
                md,
                "- `baton sweep cancel {sweep_id}`: cancel the runs that have not ended"
            );
            let _ = writeln!(
                md,
                "- now: the other {left} {noun} go on; the comparison report comes when the \
                 last one ends"
            );
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OOM: &str = "CUDA out of memory";

    /// Job `job` with lr and bs, ended in `state` of `cause`.
    fn ended(job: u64, lr: &str, bs: &str, state: JobState, cause: Option<&str>) -> RunSummary {
        RunSummary {
            job,
            position: job as usize,
            params: vec![("lr".into(), lr.into()), ("bs".into(), bs.into())],
            state,
            cause: cause.map(str::to_string),
            metrics: Vec::new(),
            run_ms: Some(60_000),
            gpus: 1,
            mean_util_pct: None,
        }
    }

    fn failed(job: u64, lr: &str, bs: &str, cause: &str) -> RunSummary {
        ended(job, lr, bs, JobState::Failed, Some(cause))
    }

    fn ok(job: u64, lr: &str, bs: &str) -> RunSummary {
        ended(job, lr, bs, JobState::Succeeded, None)
    }

    fn assert_bounded(md: &str) {
        assert!(md.len() <= MAX_BROKEN_BYTES, "{} bytes:\n{md}", md.len());
        assert!(md.chars().all(|c| c == '\n' || !c.is_control()), "{md}");
        assert!(
            md.lines().all(|l| !l.trim_start().starts_with("```")),
            "{md}"
        );
    }

    #[test]
    fn the_first_runs_failing_the_same_way_make_a_sweep_broken() {
        let policy = EarlyWake::default();
        let runs = vec![
            failed(12, "1e-4", "64", OOM),
            failed(15, "3e-4", "64", OOM),
            failed(13, "1e-3", "64", OOM),
        ];
        // Two are not a pattern yet.
        assert_eq!(broken(&runs[..2], 12, &policy), None);
        let verdict = broken(&runs, 12, &policy).unwrap();
        assert_eq!(
            verdict,
            Broken {
                reason: "the first 3 runs to end all failed the same way".into(),
                cause: Some(OOM.into()),
                failed: 3,
                ended: 3,
                total: 12,
                jobs: vec![12, 15, 13],
                shared: vec![("bs".into(), "64".into())],
            }
        );
        // Later successes do not take it back: the first runs still failed alike.
        let mut more = runs.clone();
        more.extend((20..25).map(|j| ok(j, "1e-4", "32")));
        let later = broken(&more, 12, &policy).unwrap();
        assert_eq!((later.failed, later.ended), (3, 8));
        assert_eq!(later.reason, verdict.reason);

        let md = verdict.to_markdown(4, "lr x bs", false);
        assert_bounded(&md);
        assert!(
            md.starts_with("sweep 4 \"lr x bs\" looks broken: the first 3 runs"),
            "{md}"
        );
        assert!(
            md.contains("- cause: `CUDA out of memory`; every run that failed this way has bs=64"),
            "{md}"
        );
        assert!(md.contains("- `baton report 12`"), "{md}");
        assert!(md.contains("- `baton sweep cancel 4`"), "{md}");
        assert!(md.contains(
            "the other 9 runs go on; the comparison report comes when the last one ends"
        ));
        let md = verdict.to_markdown(4, "lr x bs", true);
        assert_bounded(&md);
        assert!(md.contains("the other 9 runs are being cancelled"), "{md}");
        assert!(!md.contains("baton sweep cancel"), "{md}");
    }

    #[test]
    fn mixed_causes_count_only_through_the_share_of_failures() {
        let policy = EarlyWake::default();
        let two_of_three = vec![
            failed(1, "1e-4", "32", "exit code 1"),
            failed(2, "1e-4", "64", OOM),
            ok(3, "3e-4", "32"),
        ];
        let verdict = broken(&two_of_three, 10, &policy).unwrap();
        assert_eq!(verdict.reason, "2 of the 3 runs that ended failed (67 %)");
        assert_eq!(verdict.cause.as_deref(), Some("exit code 1"));
        assert_eq!(verdict.jobs, [1, 2]);
        // One run per cause shares nothing worth naming.
        assert!(verdict.shared.is_empty());

        let mut diluted = two_of_three.clone();
        diluted.extend([ok(4, "3e-4", "64"), ok(5, "1e-3", "32")]);
        assert_eq!(broken(&diluted, 10, &policy), None);

        let all_differ = vec![
            failed(1, "1e-4", "32", "exit code 1"),
            failed(2, "1e-4", "64", OOM),
            failed(3, "3e-4", "32", "NCCL error"),
        ];
        let verdict = broken(&all_differ, 10, &policy).unwrap();
        assert_eq!(verdict.reason, "3 of the 3 runs that ended failed (100 %)");

        // The most common cause leads, and the values its runs share with no other run.
        let mostly_oom = vec![
            failed(1, "1e-4", "32", "exit code 1"),
            failed(2, "1e-4", "64", OOM),
            ok(3, "1e-4", "32"),
            failed(4, "3e-4", "64", OOM),
        ];
        let verdict = broken(&mostly_oom, 10, &policy).unwrap();
        assert_eq!(verdict.cause.as_deref(), Some(OOM));
        assert_eq!(verdict.jobs, [2, 4, 1]);
        assert_eq!(verdict.shared, [("bs".to_string(), "64".to_string())]);
    }

    #[test]
    fn no_verdict_once_every_run_has_ended_or_for_a_sweep_that_small() {
        let policy = EarlyWake::default();
        let runs: Vec<RunSummary> = (0..4).map(|j| failed(j, "1e-4", "64", OOM)).collect();
        assert_eq!(broken(&runs, 4, &policy), None);
        assert!(broken(&runs, 5, &policy).is_some());
        // A sweep of no more runs than the first failures: the comparison report says it.
        assert_eq!(broken(&runs[..2], 3, &policy), None);
        assert_eq!(broken(&runs[..3], 3, &policy), None);
        assert_eq!(broken(&runs[..2], 2, &policy), None);
        // A custom policy.
        let strict = EarlyWake {
            first_failures: 1,
            failure_share: 1.0,
        };
        assert!(broken(&runs[..1], 3, &strict).is_some());
        assert_eq!(broken(&[ok(9, "1e-4", "32")], 3, &strict), None);
    }

    #[test]
    fn cancelled_runs_are_no_failures() {
        let policy = EarlyWake::default();
        let runs: Vec<RunSummary> = (0..3)
            .map(|j| ended(j, "1e-4", "64", JobState::Cancelled, Some("cancelled")))
            .collect();
        assert_eq!(broken(&runs, 10, &policy), None);
        let mut runs = runs;
        runs.extend([
            ended(5, "1e-4", "64", JobState::Timeout, Some("time limit")),
            ended(6, "1e-4", "32", JobState::Timeout, Some("time limit")),
        ]);
        // 2 timeouts of 5 ended: under half.
        assert_eq!(broken(&runs, 10, &policy), None);
    }

    #[test]
    fn the_wake_up_stays_short_whatever_the_text() {
        let cause = format!("ValueError: ```\n# {}\x1b[31m", "é".repeat(500));
        let runs: Vec<RunSummary> = (0..3)
            .map(|j| {
                let mut r = failed(j, "1e-4", "64", &cause);
                r.params = (0..20)
                    .map(|i| (format!("p{i}"), format!("`{}|[x](y)", "ü".repeat(300))))
                    .collect();
                r
            })
            .collect();
        let verdict = broken(&runs, 2000, &EarlyWake::default()).unwrap();
        assert_eq!(verdict.shared.len(), 20);
        for stopping in [false, true] {
            let md = verdict.to_markdown(4, &"ñame`[x]\n".repeat(100), stopping);
            assert_bounded(&md);
            assert!(md.contains("- `baton report 0`"), "{md}");
            assert!(md.contains("1997 runs"), "{md}");
        }
    }
}
