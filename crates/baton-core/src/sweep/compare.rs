//! The comparison report of a sweep (issue 16): when its last run ends, one report instead of
//! one per run. It ranks the runs by a metric they printed, groups the failures by cause and by
//! the parameter values they share (which often name the culprit: every run with `bs=64` ran
//! out of GPU memory), adds up the GPU time, and says what to run next. Like the end-of-run
//! report it is a plain struct for machines (`report.json`) and markdown for agents
//! ([`ComparisonReport::to_markdown`]), never more than [`MAX_REPORT_BYTES`] whatever the
//! number of runs.
//!
//! Pure: the daemon turns each run's end-of-run [`Report`] into a slim [`RunSummary`] and hands
//! them over with the sweep's [`SweepFacts`]; here is what they come to.
//!
//! Parameters (whatever the submitter wrote), metrics and causes (what the jobs printed) are
//! hostile text. They are sanitized when the report is built, and again as they are printed: in
//! the markdown they are table cells that can neither end their cell nor open a code span, link
//! or HTML tag, plain text made inert, or inline code spans they cannot close.
//!
//! Ranking: only runs that succeeded get a rank, by the last value they printed of the metric.
//! A failed or timed-out run's last value comes from a run that did not finish (a loss that
//! looks fine just before a CUDA OOM), so it is shown but not ranked; NaN and infinite values
//! never rank. Unranked runs follow the ranked ones in sweep order.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use super::{Params, SweepError};
use crate::model::{JobState, Millis};
use crate::report::{
    Cause, MAX_REPORT_BYTES, Metric, Report, clean, clip, cut_at_line, exception_text, inert,
    inline_code, rfc3339, sanitize_line,
};
use crate::units::{format_duration, format_size};

/// Whether a higher or a lower value of the ranking metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    Max,
    Min,
}

impl Goal {
    pub fn as_str(self) -> &'static str {
        match self {
            Goal::Max => "max",
            Goal::Min => "min",
        }
    }

    fn order_words(self) -> &'static str {
        match self {
            Goal::Max => "highest first",
            Goal::Min => "lowest first",
        }
    }
}

/// The metric a sweep's runs are ranked by (`--rank-by`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankBy {
    pub metric: String,
    pub goal: Goal,
}

/// Longest metric key (as the output scanner keeps them).
const MAX_METRIC_KEY: usize = 40;

/// Words in a metric's name that mean lower is better.
const LOWER_IS_BETTER: &[&str] = &[
    "loss",
    "err",
    "error",
    "errors",
    "ppl",
    "perplexity",
    "wer",
    "cer",
    "mse",
    "mae",
    "rmse",
    "nll",
    "bpc",
    "bpb",
    "fid",
    "regret",
    "latency",
];

/// `val_acc`, `val_acc:max`, `loss:min`; without `:GOAL` the goal follows the name (loss, err,
/// error, ppl, perplexity, wer, cer, mse, mae, rmse … → min; else max).
pub fn parse_rank_by(text: &str) -> Result<RankBy, SweepError> {
    let err = || SweepError::RankBy(text.to_string());
    let text = text.trim();
    let (metric, goal) = match text.split_once(':') {
        Some((metric, goal)) => (metric.trim(), Some(parse_goal(goal).ok_or_else(err)?)),
        None => (text, None),
    };
    let key_ok = !metric.is_empty()
        && metric.len() <= MAX_METRIC_KEY
        && metric
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'/' | b'-'));
    if !key_ok {
        return Err(err());
    }
    Ok(RankBy {
        metric: metric.to_string(),
        goal: goal.unwrap_or_else(|| default_goal(metric)),
    })
}

fn parse_goal(text: &str) -> Option<Goal> {
    match text.trim().to_ascii_lowercase().as_str() {
        "max" => Some(Goal::Max),
        "min" => Some(Goal::Min),
        _ => None,
    }
}

/// What a metric's name says about it: `val_loss`, `top1_err`, `eval/ppl` are better lower;
/// accuracies, scores and rewards higher.
fn default_goal(metric: &str) -> Goal {
    let lower = metric.to_ascii_lowercase();
    let lower_is_better = lower.ends_with("loss")
        || lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| LOWER_IS_BETTER.contains(&word));
    if lower_is_better {
        Goal::Min
    } else {
        Goal::Max
    }
}

/// Characters of job-derived text a cause keeps: enough to tell two exceptions apart, short
/// enough to group by.
const CAUSE_MESSAGE_CHARS: usize = 80;

/// Short words for why a run failed, for grouping: "CUDA out of memory", "NCCL error",
/// "NaN/inf loss", "time limit", "cancelled", "dependency failed", "exit code 1", "killed by
/// SIGKILL", "ValueError: <first 80 chars of message>", "exceeded its 64 MiB memory request", …
/// Runs that failed the same way get the same words: a cancellation's author, an OOM's line and
/// the rest of an exception's message are left out.
pub fn cause_text(cause: &Cause) -> String {
    match cause {
        Cause::TimeLimit { .. } => "time limit".to_string(),
        Cause::Cancelled { .. } => "cancelled".to_string(),
        Cause::DependencyFailed => "dependency failed".to_string(),
        Cause::LaunchFailed { message } => {
            format!("could not start: {}", clean(message, CAUSE_MESSAGE_CHARS))
        }
        Cause::KernelOom => "host out of memory (kernel OOM killer)".to_string(),
        Cause::MemoryLimit { limit } => {
            format!("exceeded its {} memory request", format_size(*limit))
        }
        Cause::CudaOom { .. } => "CUDA out of memory".to_string(),
        Cause::Nccl { .. } => "NCCL error".to_string(),
        Cause::NonFiniteLoss { .. } => "NaN/inf loss".to_string(),
        Cause::PythonException(e) => {
            let kind = clean(&e.kind, CAUSE_MESSAGE_CHARS);
            let message = clean(&e.message, CAUSE_MESSAGE_CHARS);
            let short = crate::report::PythonException {
                kind,
                message,
                frame: None,
            };
            exception_text(&short)
        }
        Cause::Signal { name, .. } => format!("killed by {}", clean(name, 40)),
        Cause::ExitCode { code } => format!("exit code {code}"),
        Cause::SchedulerOom => "out of memory (scheduler limit)".to_string(),
        Cause::NodeFailure { .. } => "node failure".to_string(),
        Cause::Preempted => "preempted".to_string(),
    }
}

/// One run as the comparison needs it (slim: a 2,000-run sweep keeps 2,000 of these).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub job: u64,
    /// 0-based place in the sweep.
    pub position: usize,
    pub params: Params,
    pub state: JobState,
    /// [`cause_text`] of the run's cause, or the daemon's reason when no cause was found.
    pub cause: Option<String>,
    /// The last value of each metric it printed.
    pub metrics: Vec<Metric>,
    pub run_ms: Option<i64>,
    /// GPUs it held.
    pub gpus: u32,
    pub mean_util_pct: Option<f64>,
}

impl RunSummary {
    pub fn from_report(report: &Report, position: usize, params: Params) -> Self {
        let reason = || {
            let reason = report.reason.as_deref()?;
            (report.state != JobState::Succeeded)
                .then(|| cause_from_reason(report.state, Some(reason)))
                .flatten()
        };
        let held = if report.gpu_indices.is_empty() {
            report.gpus.len()
        } else {
            report.gpu_indices.len()
        };
        RunSummary {
            job: report.id,
            position,
            params,
            state: report.state,
            cause: report.cause.as_ref().map(cause_text).or_else(reason),
            metrics: report.metrics.clone(),
            run_ms: report.run_ms,
            gpus: u32::try_from(held).unwrap_or(u32::MAX),
            mean_util_pct: report.efficiency.as_ref().and_then(|e| e.mean_util_pct),
        }
    }

    /// A run that ended with no report (e.g. never started: cancelled in the queue, or its
    /// dependency failed).
    pub fn without_report(
        job: u64,
        position: usize,
        params: Params,
        state: JobState,
        reason: Option<String>,
    ) -> Self {
        RunSummary {
            job,
            position,
            params,
            state,
            cause: cause_from_reason(state, reason.as_deref()),
            metrics: Vec::new(),
            run_ms: None,
            gpus: 0,
            mean_util_pct: None,
        }
    }
}

/// The daemon's reason in the words [`cause_text`] would use for it, so that a run with a
/// report and one without group together.
fn cause_from_reason(state: JobState, reason: Option<&str>) -> Option<String> {
    let reason = reason.map(|r| clean(r, CAUSE_MESSAGE_CHARS));
    let said = |prefix: &str| {
        reason.as_deref().is_some_and(|r| {
            r.len() >= prefix.len()
                && r.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
        })
    };
    match state {
        JobState::Cancelled => Some("cancelled".to_string()),
        JobState::Timeout => Some("time limit".to_string()),
        _ if said("dependency failed") => Some("dependency failed".to_string()),
        _ => reason.filter(|r| !r.is_empty()),
    }
}

/// What the daemon knows about the sweep itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepFacts {
    pub id: u64,
    pub name: String,
    /// The parameters in the order the sweep gave them.
    pub param_names: Vec<String>,
    pub submitted_at: Millis,
    pub ended_at: Millis,
    /// As asked (`--rank-by`); `None`: baton chooses.
    pub rank_by: Option<RankBy>,
}

/// The comparison of a sweep's runs. Every string in it that came from a job or its submitter
/// is sanitized; the markdown is bounded, this struct holds every run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComparisonReport {
    pub id: u64,
    pub name: String,
    /// `sweep 4 "lr x bs": 11 of 12 succeeded; best val_acc 0.913 at lr=3e-4 bs=32`.
    pub headline: String,
    /// How many runs ended in each state (states with none left out).
    pub counts: Vec<(JobState, usize)>,
    /// What the runs are ranked by: as asked, or chosen; `None` when there was nothing to rank
    /// by.
    pub rank_by: Option<RankBy>,
    /// Baton chose `rank_by` (none was asked for).
    pub rank_by_chosen: bool,
    /// The parameters whose values differ between runs, in the sweep's order (the others say
    /// nothing about why one run did better than another).
    #[serde(default)]
    pub param_columns: Vec<String>,
    /// The ranking metric first, then a few other metrics most runs printed.
    pub metric_columns: Vec<String>,
    /// Every run: the ranked ones best first, then the unranked in sweep order.
    pub rows: Vec<Row>,
    /// Runs that did not succeed, grouped by cause, largest group first.
    pub failures: Vec<FailureGroup>,
    pub efficiency: SweepEfficiency,
    /// What to do next: markdown list items, exact commands in code spans.
    pub next: Vec<String>,
    pub submitted_at: Millis,
    pub ended_at: Millis,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// 1 for the best; `None` for a run that is not ranked.
    pub rank: Option<usize>,
    pub job: u64,
    pub position: usize,
    pub params: Params,
    pub state: JobState,
    /// The ranking metric's last value, when it is a finite number.
    pub value: Option<f64>,
    /// The last printed value of each of [`ComparisonReport::metric_columns`].
    pub metrics: Vec<Option<String>>,
    pub cause: Option<String>,
}

/// Runs that did not succeed for the same reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailureGroup {
    pub cause: String,
    /// In sweep order.
    pub jobs: Vec<u64>,
    pub count: usize,
    /// The swept parameter values every run of the group has (parameters that vary in the
    /// sweep only: the fixed ones explain nothing).
    pub shared: Params,
    /// Every run of the sweep with the `shared` values failed this way (and there are at least
    /// two): they are then the likely culprit.
    #[serde(default)]
    pub culprit: bool,
    /// `CUDA out of memory: all 4 runs with bs=64` or `exit code 1: 3 runs (job 12, 15, 19)`.
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepEfficiency {
    /// Run time × GPUs held, over every run.
    pub gpu_hours: f64,
    /// The runs' mean GPU utilisation, weighted by their GPU time.
    pub mean_util_pct: Option<f64>,
    /// Runs whose GPUs averaged under [`LOW_UTIL_PCT`].
    pub low_util_runs: usize,
}

/// Under this mean utilisation a run's GPUs mostly waited.
pub const LOW_UTIL_PCT: f64 = 10.0;

/// Characters of a parameter value or metric kept in the report (the markdown shows fewer).
const VALUE_CHARS: usize = 300;
/// Metrics shown beside the ranking metric.
const EXTRA_METRIC_COLUMNS: usize = 3;
/// Failure groups and edge hints that get a line under "Next".
const NEXT_FAILURES: usize = 3;
const NEXT_EDGE_HINTS: usize = 2;
/// Parameters named in a headline or a failure group's text.
const WORDED_PARAMS: usize = 4;
/// Characters of one value in a headline or a failure group's text.
const WORDED_VALUE_CHARS: usize = 24;
/// Jobs listed in a failure group's text.
const WORDED_JOBS: usize = 5;

/// Compares the runs of a sweep that has ended.
pub fn compare(facts: &SweepFacts, runs: &[RunSummary]) -> ComparisonReport {
    let runs: Vec<RunSummary> = runs.iter().map(clean_run).collect();
    let names = param_names(facts, &runs);
    let param_columns = varying(&names, &runs);
    let asked = facts.rank_by.as_ref().map(|r| RankBy {
        metric: clean(&r.metric, MAX_METRIC_KEY),
        goal: r.goal,
    });
    let rank_by_chosen = asked.is_none();
    let rank_by = asked.or_else(|| choose_rank_by(&runs));
    let metric_columns = metric_columns(rank_by.as_ref(), &runs, &names);
    let rows = rank(&runs, rank_by.as_ref(), &metric_columns);
    let failures = failures(&runs, &param_columns);
    let name = clean(&facts.name, 80);
    let best = rows.first().filter(|r| r.rank.is_some());
    let headline = headline(
        facts.id,
        &name,
        &runs,
        rank_by.as_ref(),
        best,
        &failures,
        &param_columns,
    );
    let next = next_steps(
        facts.id,
        rank_by.as_ref(),
        best,
        &failures,
        &runs,
        &param_columns,
    );
    ComparisonReport {
        id: facts.id,
        name,
        headline,
        counts: counts(&runs),
        rank_by_chosen: rank_by_chosen && rank_by.is_some(),
        rank_by,
        param_columns,
        metric_columns,
        rows,
        failures,
        efficiency: efficiency(&runs),
        next,
        submitted_at: facts.submitted_at,
        ended_at: facts.ended_at,
    }
}

/// The run with every string sanitized and cut.
fn clean_run(run: &RunSummary) -> RunSummary {
    RunSummary {
        params: run
            .params
            .iter()
            .map(|(k, v)| (clean(k, MAX_METRIC_KEY), clean_value(v, VALUE_CHARS)))
            .collect(),
        cause: run
            .cause
            .as_deref()
            .map(|c| clean(c, 2 * CAUSE_MESSAGE_CHARS))
            .filter(|c| !c.is_empty()),
        metrics: run
            .metrics
            .iter()
            .map(|m| Metric {
                key: clean(&m.key, MAX_METRIC_KEY),
                value: clean(&m.value, 32),
            })
            .collect(),
        mean_util_pct: run.mean_util_pct.filter(|u| u.is_finite()),
        ..run.clone()
    }
}

/// A parameter value sanitized, trimmed and cut in the middle.
pub(super) fn clean_value(text: &str, max_chars: usize) -> String {
    clip_middle(sanitize_line(text.as_bytes()).trim(), max_chars)
}

/// `text` cut to at most `max_chars` characters by leaving out its middle: parameter values
/// that share a long start (paths, config names) differ at their end.
pub(super) fn clip_middle(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars {
        return text.to_string();
    }
    if max_chars < 3 {
        return clip(text, max_chars);
    }
    let tail = (max_chars - 1) / 2;
    let head = max_chars - 1 - tail;
    let mut out: String = text.chars().take(head).collect();
    out.push('…');
    out.extend(text.chars().skip(count - tail));
    out
}

/// The sweep's parameter names, or, when the daemon gave none, those of its runs.
fn param_names(facts: &SweepFacts, runs: &[RunSummary]) -> Vec<String> {
    let mut names: Vec<String> = facts
        .param_names
        .iter()
        .map(|n| clean(n, MAX_METRIC_KEY))
        .collect();
    for run in runs {
        for (name, _) in &run.params {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names
}

pub(super) fn param<'a>(params: &'a Params, name: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The names whose value is not the same in every run.
fn varying(names: &[String], runs: &[RunSummary]) -> Vec<String> {
    names
        .iter()
        .filter(|name| {
            let mut values = runs.iter().map(|r| param(&r.params, name));
            let first = values.next().flatten();
            values.any(|v| v != first)
        })
        .cloned()
        .collect()
}

/// A printed metric as a number: `0.23`, `3e-4`, `91%`, `nan`, `-inf`.
fn parse_value(text: &str) -> Option<f64> {
    let text = text.trim();
    text.strip_suffix('%').unwrap_or(text).trim().parse().ok()
}

/// The run's last value of `key` (the exact key, or else one that differs only in case).
fn metric_text<'a>(run: &'a RunSummary, key: &str) -> Option<&'a str> {
    run.metrics
        .iter()
        .find(|m| m.key == key)
        .or_else(|| run.metrics.iter().find(|m| m.key.eq_ignore_ascii_case(key)))
        .map(|m| m.value.as_str())
}

fn finite_value(run: &RunSummary, key: &str) -> Option<f64> {
    metric_text(run, key)
        .and_then(parse_value)
        .filter(|v| v.is_finite())
}

/// A validation metric the runs that succeeded printed (a key starting with val, valid, eval
/// or test), accuracy-like before loss-like, the most widely printed first; else `loss`; else
/// nothing.
fn choose_rank_by(runs: &[RunSummary]) -> Option<RankBy> {
    let mut seen: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut order = 0;
    for run in runs.iter().filter(|r| r.state == JobState::Succeeded) {
        for m in &run.metrics {
            if parse_value(&m.value).is_some_and(f64::is_finite) {
                let entry = seen.entry(m.key.as_str()).or_insert((0, order));
                entry.0 += 1;
                order += 1;
            }
        }
    }
    let is_validation = |key: &str| {
        let k = key.to_ascii_lowercase();
        ["val", "valid", "eval", "test"]
            .iter()
            .any(|p| k.starts_with(p))
    };
    let validation = seen
        .iter()
        .filter(|(key, _)| is_validation(key))
        .min_by_key(|(key, (count, first))| {
            (
                default_goal(key) == Goal::Min,
                std::cmp::Reverse(*count),
                *first,
            )
        })
        .map(|(key, _)| *key);
    let loss = || {
        let last_is_loss = |k: &str| k.rsplit(['/', '.']).next() == Some("loss");
        seen.keys()
            .find(|k| k.eq_ignore_ascii_case("loss"))
            .or_else(|| seen.keys().find(|k| last_is_loss(k) || **k == "train_loss"))
            .copied()
    };
    validation.or_else(loss).map(|metric| RankBy {
        metric: metric.to_string(),
        goal: default_goal(metric),
    })
}

/// The ranking metric, then up to [`EXTRA_METRIC_COLUMNS`] others that at least half of the
/// runs with metrics printed, the most widely printed first. A metric named like a parameter
/// (`lr`) only repeats it.
fn metric_columns(rank_by: Option<&RankBy>, runs: &[RunSummary], names: &[String]) -> Vec<String> {
    let mut columns: Vec<String> = rank_by.map(|r| r.metric.clone()).into_iter().collect();
    let mut seen: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut order = 0;
    for run in runs {
        for m in &run.metrics {
            let entry = seen.entry(m.key.as_str()).or_insert((0, order));
            entry.0 += 1;
            order += 1;
        }
    }
    let with_metrics = runs.iter().filter(|r| !r.metrics.is_empty()).count();
    let mut shared: Vec<(&str, usize, usize)> = seen
        .into_iter()
        .filter(|(key, (count, _))| {
            2 * count >= with_metrics
                && !columns.iter().any(|c| c.eq_ignore_ascii_case(key))
                && !names.iter().any(|n| n.eq_ignore_ascii_case(key))
        })
        .map(|(key, (count, first))| (key, count, first))
        .collect();
    shared.sort_by_key(|&(_, count, first)| (std::cmp::Reverse(count), first));
    columns.extend(
        shared
            .into_iter()
            .take(EXTRA_METRIC_COLUMNS)
            .map(|(key, _, _)| key.to_string()),
    );
    columns
}

/// Every run as a row: the succeeded runs with a finite value best first (ties in sweep
/// order), then the rest in sweep order.
fn rank(runs: &[RunSummary], rank_by: Option<&RankBy>, columns: &[String]) -> Vec<Row> {
    let value = |run: &RunSummary| rank_by.and_then(|r| finite_value(run, &r.metric));
    let mut ranked: Vec<(f64, &RunSummary)> = runs
        .iter()
        .filter(|r| r.state == JobState::Succeeded)
        .filter_map(|r| value(r).map(|v| (v, r)))
        .collect();
    let goal = rank_by.map_or(Goal::Max, |r| r.goal);
    ranked.sort_by(|(a, ra), (b, rb)| {
        let better = match goal {
            Goal::Max => b.total_cmp(a),
            Goal::Min => a.total_cmp(b),
        };
        better.then(ra.position.cmp(&rb.position))
    });
    let is_ranked = |run: &RunSummary| run.state == JobState::Succeeded && value(run).is_some();
    let mut unranked: Vec<&RunSummary> = runs.iter().filter(|r| !is_ranked(r)).collect();
    unranked.sort_by_key(|r| r.position);

    let row = |rank: Option<usize>, run: &RunSummary| Row {
        rank,
        job: run.job,
        position: run.position,
        params: run.params.clone(),
        state: run.state,
        value: value(run),
        metrics: columns
            .iter()
            .map(|key| metric_text(run, key).map(str::to_string))
            .collect(),
        cause: run.cause.clone(),
    };
    let mut rows: Vec<Row> = ranked
        .iter()
        .enumerate()
        .map(|(i, (_, run))| row(Some(i + 1), run))
        .collect();
    rows.extend(unranked.into_iter().map(|run| row(None, run)));
    rows
}

/// An ended run that did not succeed.
fn is_failure(run: &RunSummary) -> bool {
    run.state.is_terminal() && run.state != JobState::Succeeded
}

/// The words a failure is grouped by.
pub(super) fn failure_cause(run: &RunSummary) -> String {
    match (&run.cause, run.state) {
        (Some(cause), _) => cause.clone(),
        (None, JobState::Timeout) => "time limit".to_string(),
        (None, JobState::Cancelled) => "cancelled".to_string(),
        (None, _) => "failed, cause unknown".to_string(),
    }
}

/// The failed runs grouped by cause, largest group first (then the group whose first run came
/// first in the sweep).
fn failures(runs: &[RunSummary], varying: &[String]) -> Vec<FailureGroup> {
    let mut by_cause: BTreeMap<String, Vec<&RunSummary>> = BTreeMap::new();
    for run in runs.iter().filter(|r| is_failure(r)) {
        by_cause.entry(failure_cause(run)).or_default().push(run);
    }
    let mut groups: Vec<FailureGroup> = by_cause
        .into_iter()
        .map(|(cause, mut members)| {
            members.sort_by_key(|r| r.position);
            group(cause, &members, runs, varying)
        })
        .collect();
    let first_position = |g: &FailureGroup| {
        runs.iter()
            .find(|r| Some(&r.job) == g.jobs.first())
            .map_or(usize::MAX, |r| r.position)
    };
    groups.sort_by_cached_key(|g| (std::cmp::Reverse(g.count), first_position(g)));
    groups
}

fn group(
    cause: String,
    members: &[&RunSummary],
    runs: &[RunSummary],
    varying: &[String],
) -> FailureGroup {
    let shared: Params = varying
        .iter()
        .filter_map(|name| {
            let first = param(&members[0].params, name)?;
            members
                .iter()
                .all(|r| param(&r.params, name) == Some(first))
                .then(|| (name.clone(), first.to_string()))
        })
        .collect();
    let with_shared = runs
        .iter()
        .filter(|r| shared.iter().all(|(k, v)| param(&r.params, k) == Some(v)))
        .count();
    let mut g = FailureGroup {
        cause,
        jobs: members.iter().map(|r| r.job).collect(),
        count: members.len(),
        shared,
        culprit: members.len() >= 2 && with_shared == members.len(),
        text: String::new(),
    };
    g.text = format!(
        "{}: {}",
        g.cause,
        group_words(&g, runs.len(), WORDED_JOBS, &|v| clip_middle(
            v,
            WORDED_VALUE_CHARS
        ))
    );
    g
}

/// `all 4 runs with bs=64`, `all 12 runs`, or `3 runs (job 12, 15, 19)`; `value` quotes one
/// parameter value.
fn group_words(
    g: &FailureGroup,
    total: usize,
    jobs_shown: usize,
    value: &dyn Fn(&str) -> String,
) -> String {
    if g.culprit && g.shared.is_empty() && g.count == total {
        return format!("all {} runs", g.count);
    }
    if g.culprit {
        return format!(
            "all {} runs with {}",
            g.count,
            params_words(&g.shared, value)
        );
    }
    let noun = if g.count == 1 { "run" } else { "runs" };
    format!("{} {noun} ({})", g.count, jobs_words(&g.jobs, jobs_shown))
}

/// `lr=3e-4 bs=32`, at most [`WORDED_PARAMS`] of them.
fn params_words(params: &Params, value: &dyn Fn(&str) -> String) -> String {
    let mut words: Vec<String> = params
        .iter()
        .take(WORDED_PARAMS)
        .map(|(k, v)| format!("{}={}", value(k), value(v)))
        .collect();
    if params.len() > WORDED_PARAMS {
        words.push("…".to_string());
    }
    words.join(" ")
}

/// `job 12, 15, 19` or `job 12, 15 and 7 more`.
fn jobs_words(jobs: &[u64], shown: usize) -> String {
    let mut text = jobs
        .iter()
        .take(shown.max(1))
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if jobs.len() > shown.max(1) {
        let _ = write!(text, " and {} more", jobs.len() - shown.max(1));
    }
    format!("job {text}")
}

fn counts(runs: &[RunSummary]) -> Vec<(JobState, usize)> {
    JobState::ALL
        .iter()
        .map(|&state| (state, runs.iter().filter(|r| r.state == state).count()))
        .filter(|&(_, n)| n > 0)
        .collect()
}

fn efficiency(runs: &[RunSummary]) -> SweepEfficiency {
    let gpu_ms = |r: &RunSummary| r.run_ms.unwrap_or(0).max(0) as f64 * f64::from(r.gpus);
    let total_ms: f64 = runs.iter().map(gpu_ms).sum();
    let sampled: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|r| r.mean_util_pct.map(|u| (u, gpu_ms(r))))
        .collect();
    let weight: f64 = sampled.iter().map(|(_, w)| w).sum();
    let mean_util_pct = match sampled.len() {
        0 => None,
        n if weight <= 0.0 => Some(sampled.iter().map(|(u, _)| u).sum::<f64>() / n as f64),
        _ => Some(sampled.iter().map(|(u, w)| u * w).sum::<f64>() / weight),
    };
    SweepEfficiency {
        gpu_hours: (total_ms / 3_600_000.0 * 100.0).round() / 100.0,
        mean_util_pct: mean_util_pct.map(|m| (m * 10.0).round() / 10.0),
        low_util_runs: sampled.iter().filter(|(u, _)| *u < LOW_UTIL_PCT).count(),
    }
}

/// `sweep 4 "lr x bs": 11 of 12 succeeded; best val_acc 0.913 at lr=3e-4 bs=32`, or for a
/// sweep where nothing succeeded `sweep 4 "lr x bs": all 12 failed; CUDA out of memory (12)`.
/// Plain text: everything job-derived in it is made inert.
fn headline(
    id: u64,
    name: &str,
    runs: &[RunSummary],
    rank_by: Option<&RankBy>,
    best: Option<&Row>,
    failures: &[FailureGroup],
    varying: &[String],
) -> String {
    let total = runs.len();
    let succeeded = runs
        .iter()
        .filter(|r| r.state == JobState::Succeeded)
        .count();
    let mut line = format!("sweep {id} \"{}\": ", inert(name));
    if total == 0 {
        line.push_str("no runs");
        return line;
    }
    if succeeded == 0 {
        let all_failed = runs
            .iter()
            .all(|r| matches!(r.state, JobState::Failed | JobState::Timeout));
        if all_failed {
            let _ = write!(line, "all {total} failed");
        } else {
            let _ = write!(line, "none of {total} succeeded");
        }
        let causes: Vec<String> = failures
            .iter()
            .take(2)
            .map(|g| format!("{} ({})", inert(&clip(&g.cause, 60)), g.count))
            .collect();
        if !causes.is_empty() {
            let _ = write!(line, "; {}", causes.join(", "));
        }
        return line;
    }
    if succeeded == total {
        let _ = write!(line, "all {total} succeeded");
    } else {
        let _ = write!(line, "{succeeded} of {total} succeeded");
    }
    let value = |v: &str| inert(&clip_middle(v, WORDED_VALUE_CHARS));
    match (rank_by, best) {
        (Some(rank_by), Some(best)) => {
            let _ = write!(
                line,
                "; best {} {}",
                value(&rank_by.metric),
                value(
                    best.metrics
                        .first()
                        .cloned()
                        .flatten()
                        .as_deref()
                        .unwrap_or("?")
                )
            );
            let params = varying_params(&best.params, varying);
            if params.is_empty() {
                let _ = write!(line, " (job {})", best.job);
            } else {
                let _ = write!(line, " at {}", params_words(&params, &value));
            }
        }
        (Some(rank_by), None) => {
            let _ = write!(line, "; no run printed {}", value(&rank_by.metric));
        }
        (None, _) => line.push_str("; no metric to rank by"),
    }
    line
}

/// The values of `params` for the parameters that vary in the sweep.
fn varying_params(params: &Params, varying: &[String]) -> Params {
    varying
        .iter()
        .filter_map(|name| param(params, name).map(|v| (name.clone(), v.to_string())))
        .collect()
}

/// "Next:" lines, exact commands in code spans: the best run's report, one failed run's report
/// per large failure group, the sweep's status, and a hint for each numeric parameter whose best
/// value is the edge of the grid.
fn next_steps(
    id: u64,
    rank_by: Option<&RankBy>,
    best: Option<&Row>,
    failures: &[FailureGroup],
    runs: &[RunSummary],
    varying: &[String],
) -> Vec<String> {
    let code = |text: &str| inline_code(&clip(text, 2 * WORDED_VALUE_CHARS));
    let mut next = Vec::new();
    if let (Some(best), Some(rank_by)) = (best, rank_by) {
        let value = best.metrics.first().cloned().flatten().unwrap_or_default();
        next.push(format!(
            "`baton report {}`: the best run ({})",
            best.job,
            code(&format!("{}={value}", rank_by.metric))
        ));
    }
    for g in failures.iter().take(NEXT_FAILURES) {
        if let Some(job) = g.jobs.first() {
            next.push(format!(
                "`baton report {job}`: a run that failed with {}",
                inline_code(&clip(&g.cause, CAUSE_MESSAGE_CHARS))
            ));
        }
    }
    next.push(format!(
        "`baton sweep status {id}`: every run with its state and parameters"
    ));
    if let Some(best) = best {
        next.extend(
            edge_hints(best, runs, varying)
                .into_iter()
                .take(NEXT_EDGE_HINTS),
        );
    }
    next
}

/// For each numeric parameter with at least three values tried, a line when the best run's
/// value is the largest or the smallest: the best may lie beyond the grid.
fn edge_hints(best: &Row, runs: &[RunSummary], varying: &[String]) -> Vec<String> {
    let number = |v: &str| v.trim().parse::<f64>().ok().filter(|x| x.is_finite());
    let mut hints = Vec::new();
    for name in varying {
        let Some(mine) = param(&best.params, name).and_then(number) else {
            continue;
        };
        let values: Option<Vec<f64>> = runs
            .iter()
            .map(|r| param(&r.params, name).and_then(number))
            .collect();
        let Some(mut values) = values else {
            continue;
        };
        values.sort_by(f64::total_cmp);
        values.dedup();
        if values.len() < 3 {
            continue;
        }
        let edge = if mine == values[values.len() - 1] {
            "largest"
        } else if mine == values[0] {
            "smallest"
        } else {
            continue;
        };
        let shown = inline_code(&format!(
            "{}={}",
            clip_middle(name, WORDED_VALUE_CHARS),
            clip_middle(param(&best.params, name).unwrap_or(""), WORDED_VALUE_CHARS)
        ));
        hints.push(format!(
            "best {shown} is the {edge} value tried: the best may lie beyond it"
        ));
    }
    hints
}

/// How much of the report one rendering shows.
struct Budget {
    /// Best ranked rows, and worst ranked rows, in the table.
    top: usize,
    bottom: usize,
    params: usize,
    metrics: usize,
    /// Characters of one table cell.
    cell_chars: usize,
    failures: usize,
    jobs: usize,
}

/// From generous to bare; the first rendering that fits is used. Every one shows the best run.
const BUDGETS: &[Budget] = &[
    budget(10, 3, 8, 4, 24, 5, 5),
    budget(10, 3, 6, 4, 20, 4, 5),
    budget(8, 2, 5, 3, 16, 3, 4),
    budget(5, 2, 4, 3, 16, 3, 3),
    budget(3, 1, 3, 2, 12, 2, 3),
    budget(1, 0, 2, 1, 10, 1, 2),
];

const fn budget(
    top: usize,
    bottom: usize,
    params: usize,
    metrics: usize,
    cell_chars: usize,
    failures: usize,
    jobs: usize,
) -> Budget {
    Budget {
        top,
        bottom,
        params,
        metrics,
        cell_chars,
        failures,
        jobs,
    }
}

impl ComparisonReport {
    /// The comparison as markdown, at most [`MAX_REPORT_BYTES`] bytes for any number of runs.
    pub fn to_markdown(&self) -> String {
        let mut text = String::new();
        for budget in BUDGETS {
            text = render(self, budget);
            if text.len() <= MAX_REPORT_BYTES {
                return text;
            }
        }
        // Only absurd inputs get here. The rendering has no fences and every line stands on
        // its own, so cutting it at a line end is safe.
        cut_at_line(&text, MAX_REPORT_BYTES)
    }
}

fn render(r: &ComparisonReport, b: &Budget) -> String {
    let mut md = String::with_capacity(MAX_REPORT_BYTES);
    // Sanitized again: the report may have been deserialized or assembled by hand.
    md.push_str(&clip(&sanitize_line(r.headline.as_bytes()), 300));
    md.push_str("\n\n");
    let _ = writeln!(md, "- runs: {}", counts_line(r));
    let _ = writeln!(md, "- {}", ranking_line(r));
    let _ = writeln!(
        md,
        "- time: submitted {}, ended {} ({})",
        rfc3339(r.submitted_at),
        rfc3339(r.ended_at),
        format_duration(r.ended_at - r.submitted_at)
    );
    let _ = writeln!(md, "- GPU use: {}", efficiency_line(&r.efficiency));
    if !r.rows.is_empty() {
        md.push('\n');
        push_table(&mut md, r, b);
    }
    push_failures(&mut md, r, b);
    if !r.next.is_empty() {
        md.push_str("\nNext:\n");
        for line in &r.next {
            let _ = writeln!(md, "- {}", clip(&sanitize_line(line.as_bytes()), 300));
        }
    }
    md
}

/// `11 succeeded, 1 failed (12 in all)`.
fn counts_line(r: &ComparisonReport) -> String {
    let parts: Vec<String> = r
        .counts
        .iter()
        .map(|(state, n)| format!("{} {}", thousands(*n), state.as_str()))
        .collect();
    format!("{} ({} in all)", parts.join(", "), thousands(r.rows.len()))
}

fn ranking_line(r: &ComparisonReport) -> String {
    const HOW: &str = "pass `--rank-by METRIC[:max|:min]` when you submit a sweep";
    let ranked = r.rows.iter().filter(|row| row.rank.is_some()).count();
    match &r.rank_by {
        Some(rank_by) if ranked > 0 => {
            let mut line = format!(
                "ranked by {}, {}",
                inline_code(&rank_by.metric),
                rank_by.goal.order_words()
            );
            if r.rank_by_chosen {
                let _ = write!(line, " (chosen by baton; {HOW} to choose)");
            }
            let unranked = r.rows.len() - ranked;
            if unranked > 0 {
                let _ = write!(
                    line,
                    "; {} not ranked: only runs that succeeded and printed a number for it are",
                    thousands(unranked)
                );
            }
            line
        }
        Some(rank_by) => format!(
            "not ranked: no run that succeeded printed a number for {}, so the runs are in sweep \
             order; {HOW} with a metric they print (`baton report JOB` lists them)",
            inline_code(&rank_by.metric)
        ),
        None => format!(
            "not ranked: no metric was found to rank by (no `val…`, `eval…`, `test…` or `loss` \
             in the runs that succeeded), so the runs are in sweep order; {HOW} to rank them"
        ),
    }
}

fn efficiency_line(e: &SweepEfficiency) -> String {
    let mut line = if e.gpu_hours >= 100.0 {
        format!("{} GPU-hours", thousands(e.gpu_hours.round() as usize))
    } else {
        format!("{:.1} GPU-hours", e.gpu_hours)
    };
    if let Some(mean) = e.mean_util_pct {
        let _ = write!(line, ", mean utilisation {mean:.0} %");
    }
    if e.low_util_runs > 0 {
        let noun = if e.low_util_runs == 1 { "run" } else { "runs" };
        let _ = write!(
            line,
            ", {} {noun} under {LOW_UTIL_PCT:.0} % (their GPUs mostly waited)",
            thousands(e.low_util_runs)
        );
    }
    line
}

/// Which rows the table shows: the best `top` and the worst `bottom` ranked rows (a gap row
/// between them), or, with no ranking, the first and last rows in sweep order. Everything
/// when it is hardly more.
fn shown_rows<'a>(r: &'a ComparisonReport, b: &Budget) -> (Vec<&'a Row>, Option<usize>) {
    let ranked = r.rows.iter().filter(|row| row.rank.is_some()).count();
    let pool = if ranked > 0 { ranked } else { r.rows.len() };
    if r.rows.len() <= b.top + b.bottom + 1 {
        return (r.rows.iter().collect(), None);
    }
    if pool <= b.top + b.bottom + 1 {
        return (r.rows[..pool].iter().collect(), None);
    }
    let mut rows: Vec<&Row> = r.rows[..b.top].iter().collect();
    rows.extend(&r.rows[pool - b.bottom..pool]);
    (rows, Some(b.top))
}

fn push_table(md: &mut String, r: &ComparisonReport, b: &Budget) {
    let cell = |text: &str| table_cell(text, b.cell_chars);
    let params: Vec<&String> = r.param_columns.iter().take(b.params).collect();
    let metrics: Vec<&String> = r.metric_columns.iter().take(b.metrics).collect();

    let mut header = vec!["rank".to_string(), "job".to_string()];
    header.extend(params.iter().map(|p| cell(p)));
    header.extend(metrics.iter().map(|m| cell(m)));
    header.push("state".to_string());
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let mut rule = vec!["---:", "---:"];
    rule.extend(std::iter::repeat_n("---", params.len() + metrics.len()));
    rule.push("---");
    let _ = writeln!(md, "|{}|", rule.join("|"));

    let (rows, gap) = shown_rows(r, b);
    for (i, row) in rows.iter().enumerate() {
        if gap == Some(i) {
            let blanks = vec![""; params.len() + metrics.len() + 2];
            let _ = writeln!(md, "| … | {} |", blanks.join(" | "));
        }
        let mut cells = vec![
            row.rank.map_or_else(|| "-".to_string(), |n| n.to_string()),
            row.job.to_string(),
        ];
        cells.extend(
            params
                .iter()
                .map(|p| cell(param(&row.params, p).unwrap_or("-"))),
        );
        cells.extend((0..metrics.len()).map(|i| {
            cell(
                row.metrics
                    .get(i)
                    .cloned()
                    .flatten()
                    .as_deref()
                    .unwrap_or("-"),
            )
        }));
        cells.push(row.state.as_str().to_string());
        let _ = writeln!(md, "| {} |", cells.join(" | "));
    }
    let more = r.rows.len() - rows.len();
    if more > 0 {
        let _ = writeln!(md, "\n… {} more runs in report.json", thousands(more));
    }
    if r.param_columns.len() > params.len() {
        let _ = writeln!(
            md,
            "\n{} of the {} swept parameters shown; all are in report.json",
            params.len(),
            r.param_columns.len()
        );
    }
}

/// Job-derived text as one table cell: sanitized, cut, and unable to end the cell (`|`), open
/// a code span (a backtick becomes `'`), or start a link, an image or raw HTML.
fn table_cell(text: &str, max_chars: usize) -> String {
    // Cut before escaping, so that a cut never separates a backslash from what it escapes.
    let text = clip_middle(sanitize_line(text.as_bytes()).trim(), max_chars);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '`' => out.push('\''),
            '|' | '\\' | '[' | ']' | '<' | '>' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    if out.is_empty() { "-".to_string() } else { out }
}

fn push_failures(md: &mut String, r: &ComparisonReport, b: &Budget) {
    if r.failures.is_empty() {
        return;
    }
    let failed: usize = r.failures.iter().map(|g| g.count).sum();
    let noun = if r.failures.len() == 1 {
        "cause"
    } else {
        "causes"
    };
    let _ = writeln!(
        md,
        "\nFailures ({} of {} runs, {} {noun}):",
        thousands(failed),
        thousands(r.rows.len()),
        r.failures.len()
    );
    let value = |v: &str| inert(&clip_middle(&sanitize_line(v.as_bytes()), b.cell_chars));
    for g in r.failures.iter().take(b.failures) {
        let _ = writeln!(
            md,
            "- {}: {}",
            inline_code(&clip(&g.cause, CAUSE_MESSAGE_CHARS)),
            group_words(g, r.rows.len(), b.jobs, &value)
        );
    }
    let rest = &r.failures[b.failures.min(r.failures.len())..];
    if !rest.is_empty() {
        let runs: usize = rest.iter().map(|g| g.count).sum();
        let _ = writeln!(
            md,
            "- and {} more causes ({} runs): in report.json",
            rest.len(),
            thousands(runs)
        );
    }
}

/// `1,987`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::PythonException;

    const T0: Millis = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    const HOUR: i64 = 3_600_000;

    fn run(
        job: u64,
        position: usize,
        params: &[(&str, &str)],
        state: JobState,
        cause: Option<&str>,
        metrics: &[(&str, &str)],
    ) -> RunSummary {
        RunSummary {
            job,
            position,
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            state,
            cause: cause.map(str::to_string),
            metrics: metrics
                .iter()
                .map(|(k, v)| Metric {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            run_ms: Some(HOUR),
            gpus: 1,
            mean_util_pct: Some(80.0),
        }
    }

    fn facts(rank_by: Option<&str>) -> SweepFacts {
        SweepFacts {
            id: 4,
            name: "lr x bs".into(),
            param_names: vec!["lr".into(), "bs".into()],
            submitted_at: T0,
            ended_at: T0 + 3 * HOUR,
            rank_by: rank_by.map(|t| parse_rank_by(t).unwrap()),
        }
    }

    const LRS: [&str; 3] = ["1e-4", "3e-4", "1e-3"];
    const BSS: [&str; 4] = ["32", "64", "128", "256"];
    const OOM: &str = "CUDA out of memory";

    /// lr × bs, 12 runs, job 10 + position. val_acc peaks at lr=3e-4 bs=32 (0.913, job 14);
    /// then lr=1e-3, then lr=1e-4, smaller batches first. Runs at `oom` positions fail with a
    /// CUDA OOM, after printing a better val_acc than any run that succeeded.
    fn grid(oom: &[usize]) -> Vec<RunSummary> {
        let mut runs = Vec::new();
        for (i, lr) in LRS.iter().enumerate() {
            for (j, bs) in BSS.iter().enumerate() {
                let position = i * BSS.len() + j;
                let lr_penalty = [0.05, 0.0, 0.03][i];
                let acc: f64 = 0.913 - lr_penalty - 0.004 * j as f64;
                let (acc, loss) = (format!("{acc:.3}"), format!("{:.3}", 1.0 - acc));
                let failed = oom.contains(&position);
                let acc = if failed { "0.990".to_string() } else { acc };
                runs.push(run(
                    10 + position as u64,
                    position,
                    &[("lr", lr), ("bs", bs)],
                    if failed {
                        JobState::Failed
                    } else {
                        JobState::Succeeded
                    },
                    failed.then_some(OOM),
                    &[("loss", &loss), ("val_acc", &acc), ("val_loss", &loss)],
                ));
            }
        }
        runs
    }

    fn jobs(report: &ComparisonReport) -> Vec<u64> {
        report.rows.iter().map(|r| r.job).collect()
    }

    /// The cells of a table line, split where GitHub's reader splits them: at each `|` not
    /// escaped by a backslash (a backslash escapes the next character, itself included).
    fn cells(line: &str) -> usize {
        let (mut pipes, mut escaped) = (0, false);
        for c in line.chars() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '|' => pipes += 1,
                _ => {}
            }
        }
        pipes
    }

    /// Whether a line opens a fenced block, as CommonMark reads it: three or more tildes, or
    /// three or more backticks followed by text without a backtick (the line of a code span
    /// that starts with a long delimiter has its closing delimiter on it too).
    fn opens_fence(line: &str) -> bool {
        let t = line.trim_start_matches(' ');
        let ticks = t.len() - t.trim_start_matches('`').len();
        t.starts_with("~~~") || (ticks >= 3 && !t[ticks..].contains('`'))
    }

    /// Within the size limit, no control characters but newlines, every table line as wide as
    /// its header, no line that opens a fence or a heading, no link or tag in a cell.
    fn assert_safe(md: &str) {
        assert!(md.len() <= MAX_REPORT_BYTES, "{} bytes:\n{md}", md.len());
        assert!(
            md.chars().all(|c| c == '\n' || !c.is_control()),
            "control character in:\n{md}"
        );
        let mut width = None;
        for line in md.lines() {
            let item = line.strip_prefix("- ").unwrap_or(line).trim_start();
            assert!(!opens_fence(item) && !item.starts_with('#'), "{line}");
            if !line.starts_with('|') {
                width = None;
                continue;
            }
            let n = cells(line);
            assert_eq!(
                *width.get_or_insert(n),
                n,
                "a cell broke out of its row: {line}"
            );
            let bytes = line.as_bytes();
            for (i, b) in bytes.iter().enumerate() {
                if matches!(b, b'<' | b'[' | b'`') {
                    assert!(
                        i > 0 && bytes[i - 1] == b'\\',
                        "unescaped {} in {line}",
                        *b as char
                    );
                }
            }
        }
    }

    #[test]
    fn ranks_by_the_asked_metric_highest_or_lowest_first() {
        let runs = grid(&[11]);
        let report = compare(&facts(Some("val_acc")), &runs);
        assert_eq!(
            report.rank_by,
            Some(RankBy {
                metric: "val_acc".into(),
                goal: Goal::Max
            })
        );
        assert!(!report.rank_by_chosen);
        // The failed run printed the best value, and still comes last, unranked.
        assert_eq!(
            jobs(&report),
            [14, 15, 16, 17, 18, 19, 20, 10, 11, 12, 13, 21]
        );
        let ranks: Vec<Option<usize>> = report.rows.iter().map(|r| r.rank).collect();
        assert_eq!(ranks[0], Some(1));
        assert_eq!(ranks[10], Some(11));
        assert_eq!(ranks[11], None);
        assert_eq!(report.rows[0].value, Some(0.913));
        assert_eq!(report.rows[11].value, Some(0.99));
        assert_eq!(report.rows[0].params, runs[4].params);

        // A loss ranks lowest first by its name; `:min` turns an accuracy around.
        let by_loss = compare(&facts(Some("val_loss")), &runs);
        assert_eq!(by_loss.rank_by.as_ref().unwrap().goal, Goal::Min);
        assert_eq!(jobs(&by_loss), jobs(&report));
        let worst_first = compare(&facts(Some("val_acc:min")), &runs);
        assert_eq!(
            jobs(&worst_first),
            [13, 12, 11, 10, 20, 19, 18, 17, 16, 15, 14, 21]
        );
        let md = report.to_markdown();
        assert_safe(&md);
        assert!(md.contains("ranked by `val_acc`, highest first"), "{md}");
        assert!(md.contains("| 1 | 14 | 3e-4 | 32 | 0.913 |"), "{md}");
    }

    #[test]
    fn chooses_a_validation_accuracy_then_a_loss_then_nothing() {
        let report = compare(&facts(None), &grid(&[]));
        assert_eq!(
            report.rank_by,
            Some(RankBy {
                metric: "val_acc".into(),
                goal: Goal::Max
            })
        );
        assert!(report.rank_by_chosen);
        assert_eq!(report.metric_columns, ["val_acc", "loss", "val_loss"]);
        assert!(report.to_markdown().contains("chosen by baton"));

        let only = |metrics: &[(&str, &str)], state: JobState| {
            let runs: Vec<RunSummary> = (0..3)
                .map(|i| {
                    let lr = LRS[i];
                    run(i as u64, i, &[("lr", lr)], state, None, metrics)
                })
                .collect();
            compare(&facts(None), &runs).rank_by
        };
        let ok = JobState::Succeeded;
        let val_loss = only(&[("loss", "0.3"), ("val_loss", "0.4")], ok).unwrap();
        assert_eq!(
            (val_loss.metric.as_str(), val_loss.goal),
            ("val_loss", Goal::Min)
        );
        let eval_f1 = only(&[("eval/f1", "0.8"), ("eval/loss", "0.4")], ok).unwrap();
        assert_eq!(
            (eval_f1.metric.as_str(), eval_f1.goal),
            ("eval/f1", Goal::Max)
        );
        let loss = only(&[("acc", "0.8"), ("loss", "0.4")], ok).unwrap();
        assert_eq!((loss.metric.as_str(), loss.goal), ("loss", Goal::Min));
        // A validation metric only failed runs printed is no choice.
        assert_eq!(only(&[("val_acc", "0.8")], JobState::Failed), None);
        assert_eq!(only(&[("step", "100")], ok), None);

        let runs: Vec<RunSummary> = (0..3)
            .map(|i| run(i, i as usize, &[("lr", LRS[i as usize])], ok, None, &[]))
            .collect();
        let report = compare(&facts(None), &runs);
        assert_eq!(
            (report.rank_by.clone(), report.rank_by_chosen),
            (None, false)
        );
        assert_eq!(jobs(&report), [0, 1, 2]);
        assert!(report.rows.iter().all(|r| r.rank.is_none()));
        assert!(
            report
                .headline
                .ends_with("all 3 succeeded; no metric to rank by")
        );
        let md = report.to_markdown();
        assert_safe(&md);
        assert!(md.contains("no metric was found to rank by"), "{md}");
        assert!(md.contains("`--rank-by METRIC[:max|:min]`"), "{md}");

        // Asked for a metric no run printed: sweep order, and the markdown says why.
        let report = compare(&facts(Some("val_acc")), &runs);
        assert!(report.rows.iter().all(|r| r.rank.is_none()));
        assert!(
            report.headline.ends_with("no run printed val_acc"),
            "{}",
            report.headline
        );
        let md = report.to_markdown();
        assert!(
            md.contains("no run that succeeded printed a number for `val_acc`"),
            "{md}"
        );
    }

    #[test]
    fn nan_and_infinity_never_rank_and_percentages_do() {
        let ok = JobState::Succeeded;
        let p = |i: usize| [("lr", LRS[i % 3])];
        let runs = vec![
            run(1, 0, &p(0), ok, None, &[("val_acc", "nan")]),
            run(2, 1, &p(1), ok, None, &[("val_acc", "inf")]),
            run(3, 2, &p(2), ok, None, &[("val_acc", "0.5")]),
            run(4, 3, &p(0), ok, None, &[("val_acc", "91%")]),
            run(
                5,
                4,
                &p(1),
                JobState::Failed,
                Some("exit code 1"),
                &[("val_acc", "0.99")],
            ),
            run(6, 5, &p(2), ok, None, &[("loss", "0.1")]),
            run(7, 6, &p(0), ok, None, &[("val_acc", "-inf")]),
        ];
        let report = compare(&facts(Some("val_acc")), &runs);
        assert_eq!(jobs(&report), [4, 3, 1, 2, 5, 6, 7]);
        let ranked: Vec<u64> = report
            .rows
            .iter()
            .filter(|r| r.rank.is_some())
            .map(|r| r.job)
            .collect();
        assert_eq!(ranked, [4, 3]);
        assert_eq!(report.rows[0].value, Some(91.0));
        assert_eq!(report.rows[2].value, None);
        assert_eq!(report.rows[2].metrics[0].as_deref(), Some("nan"));
        // Lowest first: -inf does not win either.
        let report = compare(&facts(Some("val_acc:min")), &runs);
        assert_eq!(&jobs(&report)[..2], [3, 4]);
        let md = report.to_markdown();
        assert_safe(&md);
        assert!(md.contains("5 not ranked"), "{md}");
    }

    #[test]
    fn failures_group_by_cause_and_name_the_values_they_share() {
        // Every bs=64 run ran out of memory; two others exited with 1.
        let mut runs = grid(&[1, 5, 9]);
        for position in [0, 10] {
            runs[position].state = JobState::Failed;
            runs[position].cause = Some("exit code 1".into());
        }
        let report = compare(&facts(None), &runs);
        assert_eq!(report.failures.len(), 2);
        let oom = &report.failures[0];
        assert_eq!((oom.cause.as_str(), oom.count), (OOM, 3));
        assert_eq!(oom.jobs, [11, 15, 19]);
        assert_eq!(oom.shared, [("bs".to_string(), "64".to_string())]);
        assert!(oom.culprit);
        assert_eq!(oom.text, "CUDA out of memory: all 3 runs with bs=64");
        let exit = &report.failures[1];
        assert!(!exit.culprit);
        assert_eq!(exit.text, "exit code 1: 2 runs (job 10, 20)");
        let md = report.to_markdown();
        assert_safe(&md);
        assert!(
            md.contains("- `CUDA out of memory`: all 3 runs with bs=64\n"),
            "{md}"
        );
        assert!(
            md.contains("- `exit code 1`: 2 runs (job 10, 20)\n"),
            "{md}"
        );
        assert!(md.contains("Failures (5 of 12 runs, 2 causes):"), "{md}");
        assert!(md.contains("- `baton report 11`: a run that failed with `CUDA out of memory`"));
        assert!(md.contains("- `baton report 10`: a run that failed with `exit code 1`"));

        // One bs=64 run succeeded: bs=64 is no longer the whole story.
        let report = compare(&facts(None), &grid(&[1, 5]));
        let oom = &report.failures[0];
        assert_eq!(oom.shared, [("bs".to_string(), "64".to_string())]);
        assert!(!oom.culprit);
        assert_eq!(oom.text, "CUDA out of memory: 2 runs (job 11, 15)");

        // A single failure is never "all 1 runs".
        let report = compare(&facts(None), &grid(&[3]));
        assert_eq!(
            report.failures[0].text,
            "CUDA out of memory: 1 run (job 13)"
        );

        // Everything failed the same way.
        let report = compare(&facts(None), &grid(&(0..12).collect::<Vec<_>>()));
        assert_eq!(report.failures[0].text, "CUDA out of memory: all 12 runs");
        assert!(report.failures[0].culprit);
    }

    #[test]
    fn headlines_say_how_many_succeeded_and_the_best_or_the_causes() {
        let report = compare(&facts(None), &grid(&[11]));
        assert_eq!(
            report.headline,
            "sweep 4 \"lr x bs\": 11 of 12 succeeded; best val_acc 0.913 at lr=3e-4 bs=32"
        );
        assert!(report.to_markdown().starts_with(&report.headline));
        let report = compare(&facts(None), &grid(&[]));
        assert!(
            report
                .headline
                .contains(": all 12 succeeded; best val_acc 0.913")
        );

        let report = compare(&facts(None), &grid(&(0..12).collect::<Vec<_>>()));
        assert_eq!(
            report.headline,
            "sweep 4 \"lr x bs\": all 12 failed; CUDA out of memory (12)"
        );
        assert_eq!(report.counts, [(JobState::Failed, 12)]);
        assert!(report.rows.iter().all(|r| r.rank.is_none()));

        let mut runs = grid(&(0..12).collect::<Vec<_>>());
        for r in &mut runs[..4] {
            r.state = JobState::Cancelled;
            r.cause = Some("cancelled".into());
        }
        let mut hostile = facts(None);
        hostile.name = "a`b` [x](http://e)\x1b[31m".into();
        let report = compare(&hostile, &runs);
        assert_eq!(
            report.headline,
            "sweep 4 \"a'b' \\[x\\](http://e)\": none of 12 succeeded; CUDA out of memory (8), \
             cancelled (4)"
        );
        assert_eq!(
            report.counts,
            [(JobState::Failed, 8), (JobState::Cancelled, 4)]
        );
    }

    #[test]
    fn next_names_the_commands_and_a_best_value_at_the_edge_of_the_grid() {
        let report = compare(&facts(None), &grid(&[11]));
        assert_eq!(
            report.next,
            [
                "`baton report 14`: the best run (`val_acc=0.913`)",
                "`baton report 21`: a run that failed with `CUDA out of memory`",
                "`baton sweep status 4`: every run with its state and parameters",
                "best `bs=32` is the smallest value tried: the best may lie beyond it",
            ]
        );
        // The worst run, best when ranked the other way, sits at two edges.
        let report = compare(&facts(Some("val_acc:min")), &grid(&[]));
        assert_eq!(
            report.next[0],
            "`baton report 13`: the best run (`val_acc=0.851`)"
        );
        assert!(report.next.contains(
            &"best `lr=1e-4` is the smallest value tried: the best may lie beyond it".to_string()
        ));
        assert!(report.next.contains(
            &"best `bs=256` is the largest value tried: the best may lie beyond it".to_string()
        ));
        let md = report.to_markdown();
        assert!(md.contains("\nNext:\n- `baton report 13`"), "{md}");
    }

    #[test]
    fn efficiency_adds_up_gpu_time_and_weights_utilisation_by_it() {
        let ok = JobState::Succeeded;
        let mut runs = vec![
            run(1, 0, &[("lr", "1")], ok, None, &[]),
            run(2, 1, &[("lr", "2")], ok, None, &[]),
            RunSummary::without_report(
                3,
                2,
                vec![("lr".into(), "3".into())],
                JobState::Cancelled,
                None,
            ),
        ];
        runs[1].gpus = 2;
        runs[1].mean_util_pct = Some(5.0);
        let report = compare(&facts(None), &runs);
        assert_eq!(
            report.efficiency,
            SweepEfficiency {
                gpu_hours: 3.0,
                mean_util_pct: Some(30.0),
                low_util_runs: 1
            }
        );
        let md = report.to_markdown();
        assert!(
            md.contains("- GPU use: 3.0 GPU-hours, mean utilisation 30 %, 1 run under 10 %"),
            "{md}"
        );
    }

    #[test]
    fn two_thousand_runs_with_long_values_fit_and_show_the_best() {
        let names: Vec<String> = (0..20)
            .map(|i| format!("param_{i:02}_with_a_long_name"))
            .collect();
        let runs: Vec<RunSummary> = (0..2000)
            .map(|position| {
                let params: Vec<(String, String)> = names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| {
                        (
                            n.clone(),
                            format!("{}{}", "ünïcödé-value-".repeat(40), (position + i) % 7),
                        )
                    })
                    .collect();
                let failed = position % 7 == 3;
                let acc = if position == 1234 {
                    0.999
                } else {
                    (position % 100) as f64 / 200.0
                };
                RunSummary {
                    job: 100_000 + position as u64,
                    position,
                    params,
                    state: if failed {
                        JobState::Failed
                    } else {
                        JobState::Succeeded
                    },
                    cause: failed.then(|| {
                        format!(
                            "Error{}: {}",
                            position % 40,
                            "a very long message ".repeat(20)
                        )
                    }),
                    metrics: vec![
                        Metric {
                            key: "val_acc".into(),
                            value: format!("{acc}"),
                        },
                        Metric {
                            key: "loss".into(),
                            value: "0.25".into(),
                        },
                        Metric {
                            key: "epoch".into(),
                            value: "10".into(),
                        },
                    ],
                    run_ms: Some(HOUR),
                    gpus: 8,
                    mean_util_pct: Some(90.0),
                }
            })
            .collect();
        let mut f = facts(None);
        f.name = "big".repeat(100);
        f.param_names = names;
        let report = compare(&f, &runs);
        assert_eq!(report.rows.len(), 2000);
        assert_eq!(report.rows[0].job, 101_234);
        assert_eq!(report.failures.len(), 40);
        let md = report.to_markdown();
        assert_safe(&md);
        assert!(md.contains("| 1 | 101234 |"), "{md}");
        assert!(md.contains("more runs in report.json"), "{md}");
        assert!(md.contains("swept parameters shown"), "{md}");
        // The best run's values, cut in the middle so that their distinct ends show.
        let best = md
            .lines()
            .find(|l| l.starts_with("| 1 | 101234 | "))
            .unwrap();
        assert!(best.contains(&format!("…é-value-{} |", 1234 % 7)), "{best}");
        assert!(md.contains("`baton report 101234`"), "{md}");
        assert!(md.contains("`baton sweep status 4`"), "{md}");
    }

    #[test]
    fn hostile_values_cannot_break_the_table_or_open_a_span() {
        let ok = JobState::Succeeded;
        let evil = [
            "1e-3|x|y",
            "`rm -rf ~`",
            "a\x1b[31mred\x1b]52;c;Zm9v\x07\nnext line",
            "```",
            "<img src=x onerror=alert(1)>",
            "[click](http://evil.example)",
            "back\\slash\\",
            "~~~ tilde",
            "# heading",
        ];
        let runs: Vec<RunSummary> = evil
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let mut r = run(
                    i as u64,
                    i,
                    &[("lr", v), ("bs", &i.to_string()), ("x|y`z", v)],
                    if i % 2 == 0 { ok } else { JobState::Failed },
                    Some(&format!("ValueError: `{v}` | ``` \n# no")),
                    &[("val_acc", &format!("0.{i}")), ("note", v)],
                );
                r.metrics[1].key = "note|`".into();
                r
            })
            .collect();
        let mut f = facts(Some("val_acc"));
        f.name = "```\n# evil | name".into();
        let report = compare(&f, &runs);
        let md = report.to_markdown();
        assert_safe(&md);
        let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(table.len(), 2 + runs.len(), "{md}");
        assert!(md.contains("1e-3\\|x\\|y"), "{md}");
        assert!(md.contains("'rm -rf ~'"), "{md}");
        assert!(md.contains("\\<img"), "{md}");
        // Causes are code spans that the backticks inside cannot close.
        assert!(
            md.contains("- ````ValueError: ``rm -rf ~`` | ``` # no````: 1 run"),
            "{md}"
        );
        assert!(report.failures.iter().all(|g| !g.cause.contains('\n')));
    }

    #[test]
    fn rank_by_reads_a_metric_and_an_optional_goal() {
        let parsed = |t: &str| {
            let r = parse_rank_by(t).unwrap();
            (r.metric, r.goal)
        };
        assert_eq!(parsed("val_acc"), ("val_acc".into(), Goal::Max));
        assert_eq!(parsed("val_acc:max"), ("val_acc".into(), Goal::Max));
        assert_eq!(parsed("loss:min"), ("loss".into(), Goal::Min));
        assert_eq!(parsed(" loss:MAX "), ("loss".into(), Goal::Max));
        for min in [
            "loss",
            "val_loss",
            "eval/ppl",
            "top1_err",
            "wer",
            "test.rmse",
            "trainloss",
        ] {
            assert_eq!(parsed(min).1, Goal::Min, "{min}");
        }
        for max in [
            "accuracy",
            "val/acc",
            "bleu",
            "reward",
            "f1",
            "errand_count",
        ] {
            assert_eq!(parsed(max).1, Goal::Max, "{max}");
        }
        let too_long = "x".repeat(41);
        for bad in [
            "",
            ":max",
            "val acc",
            "loss:best",
            "a:b:c",
            "loss;rm",
            "lösß",
            &too_long,
        ] {
            assert_eq!(
                parse_rank_by(bad),
                Err(SweepError::RankBy(bad.to_string())),
                "{bad}"
            );
        }
        let e = parse_rank_by("loss:best").unwrap_err().to_string();
        assert!(e.starts_with("cannot read --rank-by \"loss:best\""), "{e}");
    }

    #[test]
    fn cause_texts_are_short_and_the_same_for_the_same_failure() {
        assert_eq!(
            cause_text(&Cause::CudaOom {
                line: "at 0x1".into()
            }),
            OOM
        );
        assert_eq!(cause_text(&Cause::Nccl { line: "x".into() }), "NCCL error");
        assert_eq!(
            cause_text(&Cause::NonFiniteLoss { line: "x".into() }),
            "NaN/inf loss"
        );
        assert_eq!(
            cause_text(&Cause::TimeLimit { limit_ms: Some(5) }),
            "time limit"
        );
        assert_eq!(
            cause_text(&Cause::Cancelled {
                by: Some("alice".into())
            }),
            "cancelled"
        );
        assert_eq!(cause_text(&Cause::DependencyFailed), "dependency failed");
        assert_eq!(cause_text(&Cause::ExitCode { code: 1 }), "exit code 1");
        assert_eq!(
            cause_text(&Cause::Signal {
                signal: 9,
                name: "SIGKILL".into()
            }),
            "killed by SIGKILL"
        );
        assert_eq!(
            cause_text(&Cause::MemoryLimit { limit: 64 << 20 }),
            "exceeded its 64 MiB memory request"
        );
        let long = "lr must be positive ".repeat(10);
        let e = cause_text(&Cause::PythonException(PythonException {
            kind: "ValueError".into(),
            message: format!("{long}\x1b[31m"),
            frame: None,
        }));
        assert!(e.starts_with("ValueError: lr must be positive lr"), "{e}");
        assert_eq!(e.chars().count(), "ValueError: ".len() + 80);
        assert!(e.ends_with('…'));
    }

    #[test]
    fn summaries_come_from_a_report_or_from_the_daemons_reason() {
        let facts = crate::report::JobFacts {
            id: 42,
            name: "r".into(),
            state: JobState::Failed,
            exit_code: Some(1),
            signal: None,
            reason: None,
            start_error: None,
            command: vec!["python".into()],
            cwd: "/w".into(),
            gpus: vec![0, 1],
            request: crate::model::ResourceRequest::whole(2),
            scheduler_state: None,
            nodes: None,
            attempts: 1,
            max_attempts: 1,
            submitted_at: T0,
            started_at: Some(T0),
            ended_at: T0 + HOUR,
            time_limit: None,
            oom_killed: false,
            checkpoint_signalled: None,
            memory_exceeded: false,
            gpu_sample_interval_ms: None,
            stdout_path: "o".into(),
            stderr_path: "e".into(),
            alerts: Vec::new(),
        };
        let output = crate::report::OutputSummary {
            cuda_oom: Some("torch.OutOfMemoryError: CUDA out of memory. Tried 2 GiB".into()),
            metrics: vec![Metric {
                key: "loss".into(),
                value: "0.5".into(),
            }],
            ..Default::default()
        };
        let report = crate::report::build(&facts, &output, &[], &[]);
        let params = vec![("bs".to_string(), "64".to_string())];
        let summary = RunSummary::from_report(&report, 3, params.clone());
        assert_eq!(
            (
                summary.job,
                summary.position,
                summary.state,
                summary.cause.as_deref()
            ),
            (42, 3, JobState::Failed, Some(OOM))
        );
        assert_eq!((summary.run_ms, summary.gpus), (Some(HOUR), 2));
        assert_eq!(summary.metrics, output.metrics);

        let without = |state, reason: &str| {
            RunSummary::without_report(7, 0, params.clone(), state, Some(reason.into())).cause
        };
        assert_eq!(
            without(JobState::Cancelled, "cancelled by alice").as_deref(),
            Some("cancelled")
        );
        assert_eq!(
            without(JobState::Failed, "Dependency failed: job 3").as_deref(),
            Some("dependency failed")
        );
        assert_eq!(
            without(JobState::Failed, "command not found: foo").as_deref(),
            Some("command not found: foo")
        );
    }

    #[test]
    fn long_values_lose_their_middle() {
        assert_eq!(clip_middle("abcdef", 6), "abcdef");
        assert_eq!(clip_middle("/data/configs/run_a.yaml", 12), "/data/….yaml");
        assert_eq!(clip_middle("ééééé", 4), "éé…é");
        assert_eq!(clip_middle("abcdef", 2), "a…");
    }

    #[test]
    fn big_numbers_get_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1987), "1,987");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
