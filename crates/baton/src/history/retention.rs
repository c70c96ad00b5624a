//! Retention (`[retention]` in config.toml): which ended jobs' rows (with their events,
//! deliveries and GPU usage) and which jobs' output files are due to go, which are kept back
//! and why, and when the next ones fall due. Pure: the daemon's retention loop and `baton gc`
//! feed it what the store and the job table say, with the time.

use std::collections::HashSet;

use baton_core::{JobId, Millis};
use serde::Deserialize;

const DAY_MS: Millis = 86_400_000;

/// How long what an ended job leaves behind is kept, counted from its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Retention {
    /// The job's row, its events and deliveries, its GPU usage, its report and its directory.
    #[serde(with = "baton_core::units::serde_duration")]
    pub jobs: Millis,
    /// Its output files (`jobs/<id>/stdout` and `stderr`); the report stays with the row.
    #[serde(with = "baton_core::units::serde_duration")]
    pub outputs: Millis,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            jobs: 90 * DAY_MS,
            outputs: 30 * DAY_MS,
        }
    }
}

/// What is wrong with a `[retention]` section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    #[error("[retention] {key} must be at least 1s")]
    TooShort { key: &'static str },
    #[error(
        "[retention] outputs ({outputs}) is longer than jobs ({jobs}): a job's files go with \
         its row"
    )]
    OutputsOutliveJobs { outputs: String, jobs: String },
}

impl Retention {
    pub fn validate(&self) -> Result<(), RetentionError> {
        if self.jobs < 1_000 {
            return Err(RetentionError::TooShort { key: "jobs" });
        }
        if self.outputs < 1_000 {
            return Err(RetentionError::TooShort { key: "outputs" });
        }
        if self.outputs > self.jobs {
            return Err(RetentionError::OutputsOutliveJobs {
                outputs: baton_core::units::duration_text(self.outputs),
                jobs: baton_core::units::duration_text(self.jobs),
            });
        }
        Ok(())
    }

    /// Jobs that ended before this go (their rows and everything of theirs).
    pub fn rows_before(&self, now: Millis) -> Millis {
        now.saturating_sub(self.jobs)
    }

    /// Jobs that ended before this lose their output files.
    pub fn outputs_before(&self, now: Millis) -> Millis {
        now.saturating_sub(self.outputs)
    }

    /// When the next thing falls due, given the end of the earliest job still kept whole
    /// (`next_row`: the first that ended at or after `rows_before(now)`) and of the earliest
    /// still holding its outputs (`next_outputs`). With none, a job that ends from now on is
    /// the first: due a whole window from now. Never sooner than a minute from now (or, for
    /// windows shorter than that, one output window): with jobs ending all the time, passes
    /// still come at most once a minute.
    pub fn next_due(
        &self,
        now: Millis,
        next_row: Option<Millis>,
        next_outputs: Option<Millis>,
    ) -> Millis {
        let rows = next_row.map_or(now + self.jobs, |end| end + self.jobs);
        let outputs = next_outputs.map_or(now + self.outputs, |end| end + self.outputs);
        rows.min(outputs).max(now + self.outputs.min(60_000))
    }
}

/// A window as `baton gc --older-than` takes it: a duration (`7d`, `12h`), or `0` / `0s` for
/// every ended job.
pub fn parse_window(text: &str) -> Result<Millis, baton_core::units::UnitError> {
    match text.trim() {
        "0" | "0s" | "0m" | "0h" | "0d" => Ok(0),
        other => baton_core::units::parse_duration(other),
    }
}

/// An ended job old enough to go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: JobId,
    pub ended_at: Millis,
    pub workflow: Option<u64>,
}

/// What active jobs still need: the jobs they depend on or asked to share a node with, and
/// their workflows (a workflow's summary reads all its tasks).
#[derive(Clone, Debug, Default)]
pub struct InUse {
    pub jobs: HashSet<JobId>,
    pub workflows: HashSet<u64>,
}

/// The rows to delete among `candidates`, and those kept back because an active job still
/// needs them.
pub fn rows_to_remove(candidates: &[Candidate], in_use: &InUse) -> (Vec<JobId>, Vec<JobId>) {
    candidates
        .iter()
        .fold((Vec::new(), Vec::new()), |(mut go, mut kept), c| {
            let needed = in_use.jobs.contains(&c.id)
                || c.workflow.is_some_and(|w| in_use.workflows.contains(&w));
            if needed {
                kept.push(c.id)
            } else {
                go.push(c.id)
            }
            (go, kept)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_000 * DAY_MS;

    #[test]
    fn defaults_keep_rows_90_days_and_outputs_30() {
        let r = Retention::default();
        assert_eq!((r.jobs, r.outputs), (90 * DAY_MS, 30 * DAY_MS));
        assert_eq!(r.rows_before(NOW), NOW - 90 * DAY_MS);
        assert_eq!(r.outputs_before(NOW), NOW - 30 * DAY_MS);
        assert!(r.validate().is_ok());
        let bad = Retention {
            jobs: DAY_MS,
            outputs: 2 * DAY_MS,
        };
        assert!(matches!(
            bad.validate(),
            Err(RetentionError::OutputsOutliveJobs { .. })
        ));
        let bad = Retention {
            jobs: 0,
            outputs: 0,
        };
        assert_eq!(
            bad.validate(),
            Err(RetentionError::TooShort { key: "jobs" })
        );
    }

    #[test]
    fn the_next_run_is_when_the_earliest_kept_thing_falls_due() {
        let r = Retention {
            jobs: 10 * DAY_MS,
            outputs: 2 * DAY_MS,
        };
        // Outputs of a job that ended a day ago go in a day; its row in nine.
        assert_eq!(
            r.next_due(NOW, Some(NOW - DAY_MS), Some(NOW - DAY_MS)),
            NOW + DAY_MS
        );
        assert_eq!(
            r.next_due(NOW, Some(NOW - 5 * DAY_MS), None),
            NOW + 2 * DAY_MS,
            "with no outputs left, a job ending from now on is the first to fall due"
        );
        assert_eq!(
            r.next_due(NOW, Some(NOW - 10 * DAY_MS - 1), None),
            NOW + 60_000
        );
        assert_eq!(r.next_due(NOW, None, None), NOW + 2 * DAY_MS);
    }

    #[test]
    fn a_window_may_be_zero() {
        assert_eq!(parse_window("0s"), Ok(0));
        assert_eq!(parse_window("7d"), Ok(7 * DAY_MS));
        assert!(parse_window("soon").is_err());
    }

    #[test]
    fn what_active_jobs_need_is_kept_back() {
        let c = |id, workflow| Candidate {
            id: JobId(id),
            ended_at: 0,
            workflow,
        };
        let in_use = InUse {
            jobs: HashSet::from([JobId(2)]),
            workflows: HashSet::from([7]),
        };
        let (go, kept) = rows_to_remove(
            &[c(1, None), c(2, None), c(3, Some(7)), c(4, Some(8))],
            &in_use,
        );
        assert_eq!(go, [JobId(1), JobId(4)]);
        assert_eq!(kept, [JobId(2), JobId(3)]);
    }
}
