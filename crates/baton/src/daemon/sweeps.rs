//! Sweeps in the daemon: a sweep's runs are ordinary jobs; here is what makes them one unit.
//! A run's end may end the sweep (its state and its comparison report's deliveries, committed
//! together); a run's report may show the sweep is clearly broken (one early alert, and with
//! `--on-failure stop` the other runs cancelled); and the comparison report itself, built from
//! the runs' stored reports by `baton_core::sweep::compare` and stored in `sweeps/ID/`.
//!
//! What the comparison needs of each run (`RunSummary`, a few hundred bytes) is kept in memory
//! for the active sweeps as their runs' reports are built, in the order they were, so that the
//! early-wake rule sees the runs in the order they ended; after a restart it is read back from
//! the runs' stored reports.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_core::lifecycle::Transition;
use baton_core::lifecycle::decide::{self, WorkflowState};
use baton_core::report::Report;
use baton_core::sweep::compare::{self, ComparisonReport, RunSummary, SweepFacts};
use baton_core::sweep::early::{self, EarlyWake};
use baton_core::{JobId, JobState, Millis};

use super::{Daemon, Inner, durable, now_ms};
use crate::notify::Message;
use crate::store::{JobRecord, OnFailure, SweepRecord};

/// A sweep's comparison report as stored: the struct (`report.json`, the whole table) and its
/// markdown (`report.md`, at most 6 KB).
pub struct SweepBuilt {
    pub report: ComparisonReport,
    pub markdown: String,
}

/// The runs' summaries of the active sweeps, each sweep's in the order its runs' reports were
/// built (about the order they ended).
#[derive(Default)]
pub(super) struct SweepRuns(HashMap<u64, Vec<RunSummary>>);

impl SweepRuns {
    /// A run about to run again: its summary is no longer its latest.
    pub(super) fn forget(&mut self, job: JobId) {
        for runs in self.0.values_mut() {
            runs.retain(|r| r.job != job.0);
        }
    }
}

/// A sweep's directory: its comparison report and its early alert.
pub fn sweep_dir(home: &std::path::Path, id: u64) -> PathBuf {
    home.join("sweeps").join(id.to_string())
}

impl Daemon {
    fn sweep_files(&self, id: u64) -> (PathBuf, PathBuf, PathBuf) {
        let dir = sweep_dir(&self.config.home, id);
        (
            dir.join("report.json"),
            dir.join("report.md"),
            dir.join("alert.md"),
        )
    }

    /// A run started: its sweep, if it was still queued, is running.
    pub(crate) fn sweep_run_started(&self, inner: &mut Inner, job: &JobRecord) {
        if let Some(run) = &job.sweep
            && let Err(e) = inner.jobs.sweep_started(run.id)
        {
            tracing::error!(sweep = run.id, "cannot record the start: {e}");
        }
    }

    /// The channels a run's own end is delivered through: none, unless its sweep asked for
    /// each run's report (`--notify-each`); the sweep's comparison goes through them instead.
    pub(super) fn run_channels(
        &self,
        inner: &Inner,
        job: &JobRecord,
    ) -> Option<Vec<crate::notify::Channel>> {
        let run = job.sweep.as_ref()?;
        let notify_each = inner.jobs.sweep(run.id).is_some_and(|s| s.notify_each);
        (!notify_each).then(Vec::new)
    }

    /// A run ended: when it was the sweep's last, the sweep ends (succeeded if every run did,
    /// cancelled if any was cancelled and none failed, else failed) and its comparison report
    /// is queued through the sweep's channels on this run's deliveries.
    pub(super) fn sweep_run_ended(&self, inner: &mut Inner, sweep: u64, last: JobId, at: Millis) {
        if inner.jobs.active_runs(sweep).next().is_some() {
            return;
        }
        let Some(record) = inner.jobs.sweep(sweep).cloned() else {
            return; // ended already
        };
        let states = match inner.jobs.store().sweep_jobs_listed(sweep) {
            Ok(jobs) => jobs.iter().map(|j| j.state()).collect::<Vec<JobState>>(),
            Err(e) => {
                tracing::error!(sweep, "cannot read the sweep's runs: {e}");
                return;
            }
        };
        let state = decide::workflow_outcome(&states);
        tracing::info!(sweep, state = state.as_str(), "sweep ended");
        self.record_change(
            inner,
            durable::Change::SweepEnd {
                sweep,
                state,
                at,
                last,
                channels: record.notify,
            },
        );
    }

    /// A run's report was built: kept for the comparison, and checked against the early-wake
    /// rule while other runs remain. Called on the report builder's blocking thread.
    pub(super) fn sweep_run_reported(self: &Arc<Self>, job: &JobRecord, report: &Report) {
        let Some(run) = &job.sweep else {
            return;
        };
        let sweep = run.id;
        let summary = RunSummary::from_report(report, run.index as usize, job.params.clone());
        let seeded = {
            let mut inner = self.lock();
            if inner.jobs.sweep(sweep).is_none() {
                inner.sweep_runs.0.remove(&sweep);
                return; // the sweep has ended: its comparison reads the stored reports
            }
            inner.sweep_runs.0.contains_key(&sweep)
        };
        // After a restart: the runs reported before it, from their stored reports.
        let earlier = if seeded {
            Vec::new()
        } else {
            self.stored_summaries(sweep, job.id)
        };
        let mut inner = self.lock();
        let Some(record) = inner.jobs.sweep(sweep).cloned() else {
            inner.sweep_runs.0.remove(&sweep);
            return; // the sweep has ended: its comparison reads the stored reports
        };
        let runs = inner.sweep_runs.0.entry(sweep).or_insert(earlier);
        runs.retain(|r| r.job != job.id.0);
        runs.push(summary);
        if record.alerted_at.is_some() {
            return;
        }
        if inner.jobs.active_runs(sweep).next().is_none() {
            return; // the comparison says it all
        }
        let policy = EarlyWake {
            first_failures: self.config.sweeps.early_failures,
            failure_share: self.config.sweeps.early_failure_share,
        };
        let ended = inner
            .sweep_runs
            .0
            .get(&sweep)
            .map_or(&[][..], Vec::as_slice);
        let Some(broken) = early::broken(ended, record.runs as usize, &policy) else {
            return;
        };
        let stopping = record.on_failure == OnFailure::Stop;
        let markdown = broken.to_markdown(sweep, &record.name, stopping);
        let (_, _, alert) = self.sweep_files(sweep);
        if let Err(e) = alert
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| crate::report::write_whole(&alert, markdown.as_bytes()))
        {
            tracing::error!(sweep, "cannot store the sweep's alert: {e}");
            return;
        }
        let now = now_ms();
        match inner.jobs.alert_sweep(sweep, now, job.id, &record.notify) {
            Ok(true) => tracing::info!(sweep, reason = %broken.reason, "sweep looks broken"),
            Ok(false) => return,
            Err(e) => {
                tracing::error!(sweep, "cannot record the sweep's alert: {e}");
                return;
            }
        }
        if stopping {
            let remaining: Vec<JobRecord> = inner.jobs.active_runs(sweep).cloned().collect();
            // Who cancels is who the job's end names (`cancelled by baton (sweep 4 looks
            // broken; --on-failure stop)`): the why goes with the who, so that every end of a
            // cancel (before it started, its supervisor's, Slurm's) says it.
            let by = format!("baton (sweep {sweep} looks broken; --on-failure stop)");
            let reason = format!(
                "cancelling: sweep {sweep} looks broken ({}; --on-failure stop)",
                broken.reason
            );
            let mut jobs = super::host::Locked(inner);
            for job in &remaining {
                let request = Transition::RequestCancel {
                    by: by.clone(),
                    reason: reason.clone(),
                };
                if let Err(e) = self.cancel(&mut jobs, job, request) {
                    tracing::error!(job = job.id.0, "cannot cancel the broken sweep's run: {e}");
                }
            }
            drop(jobs);
            self.notify_changed();
            self.wake();
        }
        self.outbox_wake.notify_one();
    }

    /// The summaries of a sweep's ended runs other than `except` whose reports are stored, in
    /// the order they ended (after a restart, or at the first report, when memory has none).
    /// A run whose report is still being built is left out: its own report brings it, with its
    /// cause (without it, a run that hit CUDA OOM would count as a bare `exit code 1`, and an
    /// early alert could be raised on causes that are not the runs').
    fn stored_summaries(&self, sweep: u64, except: JobId) -> Vec<RunSummary> {
        let mut jobs = match self.lock().jobs.store().sweep_jobs_listed(sweep) {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(sweep, "cannot read the sweep's runs: {e}");
                return Vec::new();
            }
        };
        jobs.retain(|j| j.id != except && j.state().is_terminal());
        jobs.sort_by_key(|j| (j.ended_at(), j.id));
        jobs.iter()
            .filter_map(|j| {
                let report = crate::report::load_report(&self.files(j.id))?;
                let (index, params) = j
                    .sweep
                    .as_ref()
                    .map(|r| (r.index as usize, j.params.clone()))
                    .unwrap_or_default();
                Some(RunSummary::from_report(&report, index, params))
            })
            .collect()
    }

    /// One ended run's summary, from its stored report (or without one, when it has none).
    fn stored_summary(&self, job: &JobRecord) -> RunSummary {
        let (index, params) = job
            .sweep
            .as_ref()
            .map(|r| (r.index as usize, job.params.clone()))
            .unwrap_or_default();
        match crate::report::load_report(&self.files(job.id)) {
            Some(report) => RunSummary::from_report(&report, index, params),
            None => RunSummary::without_report(
                job.id.0,
                index,
                params,
                job.state(),
                job.reason().map(str::to_string),
            ),
        }
    }

    /// The sweep's comparison report: the stored one once it has ended, else built now over the
    /// runs so far (not stored: it changes with every run's end).
    pub(crate) async fn sweep_report(self: &Arc<Self>, sweep: u64) -> Option<Arc<SweepBuilt>> {
        let stored = || {
            let record = self.lock().jobs.store().sweep(sweep).ok().flatten()?;
            let (json_path, md_path, _) = self.sweep_files(sweep);
            if record.ended_at.is_some()
                && let (Ok(json), Ok(markdown)) =
                    (std::fs::read(&json_path), std::fs::read_to_string(&md_path))
                && let Ok(report) = serde_json::from_slice::<ComparisonReport>(&json)
            {
                return Some(Ok(Arc::new(SweepBuilt { report, markdown })));
            }
            Some(Err(record))
        };
        if let Ok(built) = stored()? {
            return Some(built);
        }
        let _building = self.sweep_report_building.lock().await;
        // Whoever held the lock may have just built and stored it.
        let record = match stored()? {
            Ok(built) => return Some(built),
            Err(record) => record,
        };
        // Runs whose report is being built right now are waited for (milliseconds), so that
        // the comparison has every run's metrics.
        let mut changed = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            changed.borrow_and_update();
            let pending = {
                let inner = self.lock();
                inner.reports_pending.iter().any(|id| {
                    inner
                        .jobs
                        .get(*id)
                        .is_none_or(|j| j.sweep.as_ref().is_some_and(|r| r.id == sweep))
                })
            };
            if !pending {
                break;
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
        let me = self.clone();
        self.tasks
            .spawn_blocking(move || me.build_sweep_report(&record))
            .await
            .ok()
            .flatten()
    }

    /// Builds a sweep's comparison from its runs' stored reports; stores it once the sweep has
    /// ended. Blocking: it reads a report per run.
    fn build_sweep_report(self: &Arc<Self>, record: &SweepRecord) -> Option<Arc<SweepBuilt>> {
        let started = std::time::Instant::now();
        let jobs = match self.lock().jobs.store().sweep_jobs_listed(record.id) {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::error!(sweep = record.id, "cannot read the sweep's runs: {e}");
                return None;
            }
        };
        let (live, mut reported): (HashMap<JobId, JobRecord>, HashMap<u64, RunSummary>) = {
            let inner = self.lock();
            let live = jobs
                .iter()
                .filter_map(|j| inner.jobs.get(j.id).map(|l| (j.id, l.clone())))
                .collect();
            // The summaries kept as the runs' reports were built: no need to read them back.
            let reported = inner
                .sweep_runs
                .0
                .get(&record.id)
                .map(|runs| runs.iter().map(|r| (r.job, r.clone())).collect())
                .unwrap_or_default();
            (live, reported)
        };
        let runs: Vec<RunSummary> = jobs
            .iter()
            .map(|stored| {
                let job = live.get(&stored.id).unwrap_or(stored);
                if job.state().is_terminal() {
                    reported
                        .remove(&job.id.0)
                        .unwrap_or_else(|| self.stored_summary(job))
                } else {
                    let (index, params) = job
                        .sweep
                        .as_ref()
                        .map(|r| (r.index as usize, job.params.clone()))
                        .unwrap_or_default();
                    RunSummary::without_report(
                        job.id.0,
                        index,
                        params,
                        job.state(),
                        self.lock().jobs.reason_of(job).map(|r| r.into_owned()),
                    )
                }
            })
            .collect();
        let facts = SweepFacts {
            id: record.id,
            name: record.name.clone(),
            param_names: record.param_names.clone(),
            submitted_at: record.submitted_at,
            ended_at: record.ended_at.unwrap_or_else(now_ms),
            rank_by: record
                .rank_by
                .as_deref()
                .and_then(|r| compare::parse_rank_by(r).ok()),
        };
        let report = compare::compare(&facts, &runs);
        let markdown = report.to_markdown();
        tracing::info!(
            sweep = record.id,
            runs = runs.len(),
            build_ms = started.elapsed().as_secs_f64() * 1000.0,
            bytes = markdown.len(),
            "sweep report built"
        );
        if record.ended_at.is_some() {
            let (json_path, md_path, _) = self.sweep_files(record.id);
            let stored = serde_json::to_vec_pretty(&report)
                .map_err(std::io::Error::other)
                .and_then(|json| {
                    json_path.parent().map_or(Ok(()), std::fs::create_dir_all)?;
                    crate::report::write_whole(&json_path, &json)?;
                    crate::report::write_whole(&md_path, markdown.as_bytes())
                });
            if let Err(e) = stored {
                tracing::error!(sweep = record.id, "cannot store the sweep's report: {e}");
            }
            self.lock().sweep_runs.0.remove(&record.id);
        }
        Some(Arc::new(SweepBuilt { report, markdown }))
    }

    /// The message for a sweep's comparison report (or, `alert`, its early alert), anchored on
    /// the run whose deliveries carry it.
    pub(super) async fn sweep_message(
        self: &Arc<Self>,
        sweep: u64,
        anchor: &JobRecord,
        alert: bool,
    ) -> Option<Message> {
        let record = self.lock().jobs.store().sweep(sweep).ok().flatten()?;
        let (_, md_path, alert_path) = self.sweep_files(sweep);
        let (markdown, path, state) = if alert {
            let markdown = std::fs::read_to_string(&alert_path).ok()?;
            (markdown, alert_path, "running".to_string())
        } else {
            let built = self.sweep_report(sweep).await?;
            let state = match record.state {
                WorkflowState::Queued | WorkflowState::Running => "running",
                ended => ended.as_str(),
            };
            (built.markdown.clone(), md_path, state.to_string())
        };
        Some(Message::sweep(
            sweep,
            &record.name,
            &state,
            alert,
            anchor.id.0,
            &markdown,
            &path.display().to_string(),
            &anchor.cwd,
            anchor.env.clone(),
        ))
    }
}
