//! The GPU monitor: every `sample_interval` it reads each GPU, finds the baton job of each GPU
//! process, keeps the recent series in memory and each job's use of its GPUs in the store, and
//! hands an observation to the waste engine (`baton_core::waste`), whose decisions it records in
//! the audit log before carrying out those that are not dry runs.
//!
//! This is the one timer in the daemon besides lease renewal, and it is not on the dispatch
//! path: sampling is what a monitor is. A sample runs on the blocking pool (NVML calls and /proc
//! reads block) and never holds the daemon's lock while it reads the machine.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_core::waste::{Action, Decision, GpuObs, JobObs, ProcObs, ProcOwner, Snapshot};
use baton_core::{JobId, JobState, Millis};
use rustix::process::Signal;

use super::{Daemon, now_ms};
use crate::gpu::GpuSample;
use crate::monitor::attribution::{self, ProcessFacts};
use crate::monitor::series::{Point, Ring};
use crate::notify::Channel;
use crate::notify::{self, Message};
use crate::store::{AuditEntry, GpuMinuteSample, JobGpuSample, JobRecord};
use crate::users;

/// How much of each series stays in memory.
const SERIES_SPAN_MS: Millis = 60 * 60_000;
/// About how many points a chart of the store's per-minute rows gets.
const CHART_POINTS: Millis = 240;
/// Per-minute GPU sums are kept this long.
const MINUTES_KEPT_MS: Millis = 30 * 86_400_000;
/// Audit entries are kept this long.
const AUDIT_KEPT_MS: Millis = 180 * 86_400_000;
/// How much a deprioritised job's priority drops.
const DEPRIORITIZE_BY: i64 = 10;

/// What the monitor keeps between samples.
pub(super) struct MonitorState {
    engine: baton_core::waste::WasteEngine,
    gpus: BTreeMap<u32, Ring>,
    jobs: HashMap<JobId, Ring>,
    /// Each GPU process's identity when first seen: a signal goes only to the same process.
    seen: HashMap<u32, Option<u64>>,
    /// Jobs a waste rule already deprioritised: once per job, however often its ladder runs.
    deprioritized: std::collections::HashSet<JobId>,
    /// What /proc said of each GPU process last time. A process's environment is fixed at exec,
    /// so while the pid names the same process (same start time) the answer stands, and a
    /// sample costs one small read per process instead of three.
    facts: HashMap<u32, ProcessFacts>,
    /// Running jobs whose `finished-but-alive` alert stands (they said they were done, then sat
    /// quiet and idle, and have printed nothing since), since when: the follower sets and
    /// clears it, the waste rules treat what they hold as held after finish.
    said_finished: HashMap<JobId, Millis>,
    last_prune: Millis,
}

impl MonitorState {
    /// Since when running job `id`'s GPUs have been at or under `idle_at` percent (their mean)
    /// at each sample, without a break (`None`: busy at the last sample, its utilisation unknown, or
    /// not sampled yet): what the stall and finished-but-alive detectors ask (`midrun`).
    pub(super) fn idle_since(&self, id: JobId, idle_at: f64) -> Option<Millis> {
        let mut since = None;
        for point in self.jobs.get(&id)?.newest_first() {
            match point.util {
                Some(util) if f64::from(util) <= idle_at => since = Some(point.at),
                _ => break,
            }
        }
        since
    }

    /// Running job `id`'s GPU memory (its processes' over its GPUs) at each sample of the last
    /// hour, oldest first: what a memory `slow` is judged on (`midrun`).
    pub(super) fn memory_series(&self, id: JobId) -> Vec<(Millis, u64)> {
        let Some(ring) = self.jobs.get(&id) else {
            return Vec::new();
        };
        let mut series: Vec<(Millis, u64)> = ring.newest_first().map(|p| (p.at, p.mem)).collect();
        series.reverse();
        series
    }

    /// Records whether running job `id`'s `finished-but-alive` alert stands, and since when.
    pub(super) fn set_said_finished(&mut self, id: JobId, since: Option<Millis>) {
        match since {
            Some(at) => self.said_finished.insert(id, at),
            None => self.said_finished.remove(&id),
        };
    }

    pub(super) fn new(config: baton_core::waste::WasteConfig) -> MonitorState {
        MonitorState {
            engine: baton_core::waste::WasteEngine::new(config),
            gpus: BTreeMap::new(),
            jobs: HashMap::new(),
            seen: HashMap::new(),
            facts: HashMap::new(),
            deprioritized: std::collections::HashSet::new(),
            said_finished: HashMap::new(),
            last_prune: 0,
        }
    }
}

/// One GPU's samples over a span, oldest first: what the dashboard charts.
pub(crate) struct GpuSeries {
    pub gpu: u32,
    pub points: Vec<Point>,
}

/// A decision recorded in the audit log, waiting to be carried out.
struct ToDo {
    audit: i64,
    decision: Decision,
}

impl Daemon {
    pub(super) async fn monitor_loop(self: Arc<Self>) {
        if self.gpu_info.is_empty() {
            return; // nothing to watch
        }
        let interval = Duration::from_millis(self.config.waste.sample_interval.max(100) as u64);
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            ticker.tick().await;
            let me = self.clone();
            let todo = match self.tasks.spawn_blocking(move || me.sample_once()).await {
                Ok(todo) => todo,
                Err(e) => {
                    tracing::error!("a GPU sample failed: {e}");
                    Vec::new()
                }
            };
            self.notify_sampled();
            // Notices can take seconds (a webhook, an agent CLI): off the sampling loop.
            for item in todo {
                let me = self.clone();
                self.tasks.spawn(super::tasks::Until::Drained, async move {
                    me.carry_out(item).await
                });
            }
        }
    }

    /// One sample: read, attribute, record, decide. Returns the decisions to carry out.
    fn sample_once(&self) -> Vec<ToDo> {
        let started = Instant::now();
        let now = now_ms();
        let samples = self.probe.sample();
        let known = std::mem::take(&mut self.lock().monitor.facts);
        let mut facts: HashMap<u32, ProcessFacts> = HashMap::new();
        for s in &samples {
            for p in &s.processes {
                if facts.contains_key(&p.pid) {
                    continue;
                }
                let start = crate::executor::process_start_time(p.pid as i32);
                let f = match known.get(&p.pid) {
                    Some(f) if start.is_some() && f.start_time == start => f.clone(),
                    _ => attribution::facts(p.pid),
                };
                facts.insert(p.pid, f);
            }
        }
        let interval = self.config.waste.sample_interval;
        let idle_at = self.config.waste.idle_job.max_util;
        let mut inner = self.lock();
        let running: Vec<JobRecord> = inner
            .jobs
            .active()
            .filter(|j| j.state() == JobState::Running)
            .cloned()
            .collect();
        // Processes of jobs that are not running: their leftovers, by job.
        let mut ended: BTreeMap<JobId, Option<JobRecord>> = BTreeMap::new();
        for f in facts.values() {
            if let Some(job) = f.job
                && !running.iter().any(|r| r.id == job)
            {
                ended.entry(job).or_insert(None);
            }
        }
        for (id, slot) in ended.iter_mut() {
            *slot = inner.jobs.store().get(*id).ok().flatten();
        }
        // Whose each process is. A process's `BATON_JOB_ID` is only its claim: anyone can set
        // it. It counts when the process's user owns that job; else the process is a stranger.
        let owners: HashMap<u32, ProcOwner> = facts
            .values()
            .map(|f| (f.pid, owner_of(f, &running, &ended)))
            .collect();
        ended.retain(|id, _| owners.values().any(|o| *o == ProcOwner::Ended(*id)));
        // A user's daemon judges only that user's processes: others' are not its business
        // (and not its to signal).
        let only_uid = (!self.config.system).then_some(self.uid);
        inner
            .monitor
            .said_finished
            .retain(|id, _| running.iter().any(|j| j.id == *id));
        let snapshot = Snapshot {
            at: now,
            gpus: gpu_observations(&samples, &facts, &owners, only_uid),
            jobs: job_observations(now, &running, &ended, &inner.monitor.said_finished),
        };

        // Series and usage.
        let mut gpu_rows = Vec::with_capacity(samples.len());
        let mut job_rows = Vec::new();
        let monitor = &mut inner.monitor;
        for s in &samples {
            let util = s.utilization.map(f64::from);
            monitor
                .gpus
                .entry(s.index)
                .or_insert_with(|| Ring::spanning(SERIES_SPAN_MS, interval))
                .push(Point {
                    at: now,
                    util: util.map(|u| u as f32),
                    mem: s.memory_used,
                });
            gpu_rows.push(GpuMinuteSample {
                gpu: s.index,
                util,
                mem: s.memory_used,
            });
        }
        for job in &running {
            let on: Vec<&GpuSample> = samples
                .iter()
                .filter(|s| job.gpus().contains(&s.index))
                .collect();
            if on.is_empty() {
                continue;
            }
            let mut utils = Vec::new();
            let mut mem_total = 0;
            for s in &on {
                // The job's memory on a GPU: its processes' (a shared GPU holds others' too).
                let mem: u64 = s
                    .processes
                    .iter()
                    .filter(|p| owners.get(&p.pid) == Some(&ProcOwner::Job(job.id)))
                    .map(|p| p.memory)
                    .sum();
                let util = s.utilization.map(f64::from);
                utils.extend(util);
                mem_total += mem;
                job_rows.push(JobGpuSample {
                    job: job.id,
                    attempt: job.attempt(),
                    gpu: s.index,
                    util,
                    mem,
                    idle: util.is_some_and(|u| u <= idle_at),
                    interval_ms: interval,
                });
            }
            let mean = (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64);
            monitor
                .jobs
                .entry(job.id)
                .or_insert_with(|| Ring::spanning(SERIES_SPAN_MS, interval))
                .push(Point {
                    at: now,
                    util: mean.map(|u| u as f32),
                    mem: mem_total,
                });
        }
        monitor
            .jobs
            .retain(|id, _| running.iter().any(|r| r.id == *id));
        // The identity each pid has now (a pid reused since is a new process).
        for f in facts.values() {
            monitor.seen.insert(f.pid, f.start_time);
        }
        monitor.seen.retain(|pid, _| facts.contains_key(pid));
        monitor.facts = facts.clone();
        let decisions = monitor.engine.observe(&snapshot);
        let prune = now - monitor.last_prune > 3_600_000;
        if prune {
            monitor.last_prune = now;
        }

        match inner
            .jobs
            .store_mut()
            .record_samples(now, &gpu_rows, &job_rows)
        {
            Ok(()) => self
                .gpus_sampled_at
                .store(now, std::sync::atomic::Ordering::Relaxed),
            Err(e) => tracing::error!("cannot record GPU samples: {e}"),
        }
        if prune
            && let Err(e) = inner
                .jobs
                .store_mut()
                .prune_samples(now - MINUTES_KEPT_MS, now - AUDIT_KEPT_MS)
        {
            tracing::warn!("cannot prune old GPU samples: {e}");
        }
        // Durable before acted on: every decision is in the audit log first.
        let mut todo = Vec::new();
        for d in decisions {
            let outcome = if d.action == Action::Skip {
                "skipped"
            } else if d.dry_run {
                "dry-run"
            } else {
                "pending"
            };
            let entry = AuditEntry {
                id: 0,
                at: d.at,
                rule: d.rule.as_str().into(),
                job: d.job,
                pid: d.pid,
                gpu: d.gpu,
                action: d.action.as_str().into(),
                outcome: outcome.into(),
                dry_run: d.dry_run,
                message: d.message.clone(),
                evidence: serde_json::to_value(&d.evidence).unwrap_or_default(),
            };
            self.metrics
                .waste_action(d.rule.as_str(), d.action.as_str(), d.dry_run);
            tracing::info!(
                rule = d.rule.as_str(),
                action = d.action.as_str(),
                dry_run = d.dry_run,
                "waste: {}",
                d.message
            );
            match inner.jobs.store_mut().add_audit(&entry) {
                Ok(audit) if outcome == "pending" => todo.push(ToDo { audit, decision: d }),
                Ok(_) => {}
                Err(e) => tracing::error!("cannot record a waste decision, not acting on it: {e}"),
            }
        }
        drop(inner);
        self.publish_gpu_metrics(&samples, &running);
        self.metrics
            .observe_sample_duration(started.elapsed().as_secs_f64());
        todo
    }

    /// Each GPU's mean utilisation over the monitor's samples of the last `span`.
    pub(super) fn recent_utilisation(&self, span: Millis) -> HashMap<u32, Option<f64>> {
        let since = now_ms() - span;
        let inner = self.lock();
        inner
            .monitor
            .gpus
            .iter()
            .map(|(&gpu, ring)| {
                let known: Vec<f64> = ring
                    .since(since)
                    .filter_map(|p| p.util.map(f64::from))
                    .collect();
                let mean = (!known.is_empty()).then(|| {
                    (known.iter().sum::<f64>() / known.len() as f64 * 10.0).round() / 10.0
                });
                (gpu, mean)
            })
            .collect()
    }

    /// GPUs `gpus` (every GPU: `None`) from `from` to `to`: the monitor's own samples for what
    /// its in-memory rings hold (the last hour, since the daemon started), and before that the
    /// store's per-minute means (their memory the minute's peak), so a chart of last month costs
    /// what one of the last hour does and a restart leaves no hole. The store's rows are read on
    /// a read-only connection off the async workers, summed into about [`CHART_POINTS`] spans.
    pub(crate) async fn gpu_series(
        self: &Arc<Self>,
        gpus: Option<&[u32]>,
        from: Millis,
        to: Millis,
    ) -> Result<Vec<GpuSeries>, super::ApiError> {
        let wanted = |gpu: u32| gpus.is_none_or(|g| g.contains(&gpu));
        // Each GPU's samples in memory, and the time the first of them stands for.
        let mut out: Vec<(GpuSeries, Millis)> = {
            let inner = self.lock();
            inner
                .monitor
                .gpus
                .iter()
                .filter(|(gpu, _)| wanted(**gpu))
                .map(|(&gpu, ring)| {
                    let start = ring.oldest().map_or(Millis::MAX, |p| p.at);
                    let points = ring.since(from).filter(|p| p.at <= to).copied().collect();
                    (GpuSeries { gpu, points }, start)
                })
                .collect()
        };
        // What the rings do not reach back to (a minute's slack: the ring's hour is exact).
        let rings_from = out
            .iter()
            .map(|(_, start)| *start)
            .min()
            .unwrap_or(Millis::MAX);
        if from >= rings_from.saturating_sub(60_000) && !out.is_empty() {
            return Ok(out.into_iter().map(|(series, _)| series).collect());
        }
        let until = to.min(rings_from);
        let bucket = ((until - from) / CHART_POINTS).max(60_000);
        let minutes = self
            .read(move |store| store.gpu_minutes_between(from, until, bucket))
            .await?;
        let mut older: BTreeMap<u32, Vec<Point>> = BTreeMap::new();
        for m in minutes.into_iter().filter(|m| wanted(m.gpu)) {
            older.entry(m.gpu).or_default().push(Point {
                at: m.minute,
                util: m.mean_util.map(|u| u as f32),
                mem: m.mem_peak,
            });
        }
        for (gpu, points) in &mut older {
            match out.iter_mut().find(|(s, _)| s.gpu == *gpu) {
                Some((series, start)) => {
                    let mut merged: Vec<Point> =
                        points.iter().filter(|p| p.at < *start).copied().collect();
                    merged.append(&mut series.points);
                    series.points = merged;
                }
                None => out.push((
                    GpuSeries {
                        gpu: *gpu,
                        points: std::mem::take(points),
                    },
                    Millis::MAX,
                )),
            }
        }
        out.sort_by_key(|(s, _)| s.gpu);
        Ok(out.into_iter().map(|(series, _)| series).collect())
    }

    /// Carries out one decision and records the outcome.
    async fn carry_out(&self, item: ToDo) {
        let d = &item.decision;
        let outcome = match (d.action, d.job, d.pid) {
            (Action::Notify, Some(job), _) => self.notify_owner(job, d).await,
            (Action::Notify, None, _) => Ok("logged (no job owner to tell)".into()),
            (Action::Deprioritize, Some(job), _) => self.deprioritize(job),
            (Action::Sigterm | Action::Sigkill, _, Some(pid)) => self.signal_pid(pid, d.action),
            (Action::Sigterm, Some(job), None) => self.stop_job(job, d),
            (Action::Sigkill, Some(job), None) => self.kill_job(job),
            (action, job, pid) => Err(format!(
                "nothing to {} (job {job:?}, pid {pid:?})",
                action.as_str()
            )),
        };
        let text = match &outcome {
            Ok(done) => done.clone(),
            Err(why) => format!("failed: {why}"),
        };
        if let Err(e) = self
            .lock()
            .jobs
            .store_mut()
            .set_audit_outcome(item.audit, &text)
        {
            tracing::error!("cannot record a waste action's outcome: {e}");
        }
    }

    /// Tells the job's owner through the job's own channels (best effort, once; the audit log
    /// keeps the decision either way).
    async fn notify_owner(&self, job: JobId, d: &Decision) -> Result<String, String> {
        let record = self
            .job(job)
            .map_err(|e| e.to_string())?
            .ok_or("the job is gone")?;
        let about = crate::notify::Noticed {
            id: record.id.0,
            name: &record.name,
            state: record.state(),
            cwd: &record.cwd,
        };
        let msg = Message::notice(&about, &d.message, &record.env);
        let mut sent = Vec::new();
        let mut failed = Vec::new();
        // One wake per notice: the session channels are tried in order until one reaches the
        // agent (a hook waits on the job's end, not on notices, so it is passed over).
        let mut woken = false;
        for channel in &record.notify {
            if channel.is_session() && (woken || matches!(channel, Channel::ClaudeHook { .. })) {
                continue;
            }
            match self.deliver_as_owner(&record, channel, &msg).await {
                notify::Outcome::Delivered => {
                    woken |= channel.is_session();
                    sent.push(channel.public_spec())
                }
                other => failed.push(format!(
                    "{}: {}",
                    channel.public_spec(),
                    other.detail().unwrap_or_default()
                )),
            }
        }
        match (sent.is_empty(), failed.is_empty()) {
            (true, true) => Ok("logged (the job has no channels)".into()),
            (false, true) => Ok(format!("sent to {}", sent.join(", "))),
            (false, false) => Ok(format!(
                "sent to {}; not to {}",
                sent.join(", "),
                failed.join("; ")
            )),
            (true, false) => Err(failed.join("; ")),
        }
    }

    /// Lowers a running job's priority (what it keeps if it is retried) and makes its
    /// processes yield the CPU (nice 19), which feeds other jobs' input pipelines.
    fn deprioritize(&self, job: JobId) -> Result<String, String> {
        let mut inner = self.lock();
        let Some(record) = inner.jobs.get(job).cloned() else {
            return Ok("the job has ended".into());
        };
        if !inner.monitor.deprioritized.insert(job) {
            return Ok(format!(
                "already deprioritised (priority {})",
                record.priority
            ));
        }
        let priority = record.priority - DEPRIORITIZE_BY;
        inner
            .jobs
            .set_priority(job, priority, now_ms())
            .map_err(|e| e.to_string())?;
        drop(inner);
        let reniced = self
            .job_group(job)
            .map(|pgid| {
                rustix::process::setpriority_pgrp(rustix::process::Pid::from_raw(pgid), 19).is_ok()
            })
            .unwrap_or(false);
        self.notify_changed();
        Ok(format!(
            "priority {} -> {priority}{}",
            record.priority,
            if reniced {
                ", processes at nice 19"
            } else {
                ""
            }
        ))
    }

    /// Stops a running job as a cancel does (SIGTERM to its group, SIGKILL after the grace
    /// period); it ends `cancelled`, by the waste rule.
    fn stop_job(&self, job: JobId, d: &Decision) -> Result<String, String> {
        let by = format!("baton ({} rule)", d.rule.as_str());
        let mut jobs = super::host::Locked(self.lock());
        let Some(record) = jobs.get(job).cloned() else {
            return Ok("the job had already ended".into());
        };
        if record.state() != JobState::Running {
            return Ok("the job is not running".into());
        }
        let request = baton_core::lifecycle::Transition::RequestCancel {
            by,
            reason: format!("stopping: {}", d.message),
        };
        let signalled = self
            .cancel(&mut jobs, &record, request)
            .map_err(|e| e.to_string())?;
        drop(jobs);
        self.notify_changed();
        if signalled {
            Ok("SIGTERM sent to the job's processes".into())
        } else {
            Err("the job's supervisor could not be reached".into())
        }
    }

    /// Kills what is left of a job's process group.
    fn kill_job(&self, job: JobId) -> Result<String, String> {
        let running = self
            .lock()
            .jobs
            .get(job)
            .is_some_and(|j| j.state() == JobState::Running);
        if !running {
            return Ok("the job had already ended".into());
        }
        match self.job_group(job) {
            Some(pgid) if crate::executor::kill_group(pgid, Signal::KILL) => {
                Ok("SIGKILL sent to the job's processes".into())
            }
            Some(_) => Ok("the job's processes had already exited".into()),
            None => Ok("the job's process group has exited".into()),
        }
    }

    /// Signals one process, only if it is still the process the monitor saw.
    fn signal_pid(&self, pid: u32, action: Action) -> Result<String, String> {
        let seen = self.lock().monitor.seen.get(&pid).copied().flatten();
        let now = crate::executor::process_start_time(pid as i32);
        if now.is_none() {
            return Ok(format!("pid {pid} had already exited"));
        }
        if seen.is_none() {
            return Err(format!(
                "pid {pid}: its start time cannot be read, so it is left alone"
            ));
        }
        if seen != now {
            return Ok(format!("pid {pid} is now another process: left alone"));
        }
        let signal = if action == Action::Sigkill {
            Signal::KILL
        } else {
            Signal::TERM
        };
        let target = rustix::process::Pid::from_raw(pid as i32).ok_or("pid 0")?;
        rustix::process::kill_process(target, signal)
            .map(|()| format!("{} sent to pid {pid}", action.as_str().to_uppercase()))
            .map_err(|e| format!("cannot signal pid {pid}: {e}"))
    }

    /// The process group of a running job's current attempt, as its supervisor recorded it, if
    /// its leader is still that process (same start time): a reused group id is never hit.
    fn job_group(&self, job: JobId) -> Option<i32> {
        let attempt = self.lock().jobs.get(job)?.attempt();
        let rec = self.files(job).supervisor_of(attempt)?;
        let (pgid, started) = (rec.pgid?, rec.started?);
        (pgid > 0 && crate::executor::process_start_time(pgid) == Some(started)).then_some(pgid)
    }

    fn publish_gpu_metrics(&self, samples: &[GpuSample], running: &[JobRecord]) {
        for s in samples {
            let Some(info) = self.gpu_info.iter().find(|g| g.index == s.index) else {
                continue;
            };
            let jobs: Vec<String> = running
                .iter()
                .filter(|j| j.gpus().contains(&s.index))
                .map(|j| j.id.0.to_string())
                .collect();
            let labels = crate::metrics::GpuLabels {
                gpu: s.index.to_string(),
                uuid: info.uuid.clone(),
                model: info.model.clone(),
                job: jobs.join(","),
            };
            self.metrics.set_gpu(
                &labels,
                s.utilization.map(f64::from),
                s.memory_used,
                info.memory_total,
                s.power_watts,
                s.temperature_c,
            );
        }
    }
}

/// Whose process `f` is: the job it claims, if that job exists and the process's user owns
/// it; a process of an earlier attempt of a running job is a leftover (`Ended`).
fn owner_of(
    f: &ProcessFacts,
    running: &[JobRecord],
    ended: &BTreeMap<JobId, Option<JobRecord>>,
) -> ProcOwner {
    let Some(job) = f.job else {
        return ProcOwner::Stranger;
    };
    let record = running
        .iter()
        .find(|r| r.id == job)
        .or_else(|| ended.get(&job).and_then(|r| r.as_ref()));
    let Some(record) = record else {
        return ProcOwner::Stranger;
    };
    if f.uid != Some(record.owner_uid) {
        return ProcOwner::Stranger;
    }
    let current =
        record.state() == JobState::Running && f.attempt.is_none_or(|a| a >= record.attempt());
    if current {
        ProcOwner::Job(job)
    } else {
        ProcOwner::Ended(job)
    }
}

/// The waste engine's view of the GPUs in one sample, with the processes it may judge.
fn gpu_observations(
    samples: &[GpuSample],
    facts: &HashMap<u32, ProcessFacts>,
    owners: &HashMap<u32, ProcOwner>,
    only_uid: Option<u32>,
) -> Vec<GpuObs> {
    samples
        .iter()
        .map(|s| GpuObs {
            index: s.index,
            util: s.utilization.map(f64::from),
            mem_used: s.memory_used,
            processes: s
                .processes
                .iter()
                .filter(|p| {
                    only_uid.is_none_or(|uid| facts.get(&p.pid).and_then(|f| f.uid) == Some(uid))
                })
                .map(|p| {
                    let f = facts.get(&p.pid);
                    let owner = owners.get(&p.pid).copied().unwrap_or(ProcOwner::Stranger);
                    ProcObs {
                        pid: p.pid,
                        mem: p.memory,
                        user: f.and_then(|f| f.uid).map(users::name_of),
                        owner,
                    }
                })
                .collect(),
        })
        .collect()
}

/// The waste engine's view of the running jobs, and of the ended ones whose processes linger.
fn job_observations(
    now: Millis,
    running: &[JobRecord],
    ended: &BTreeMap<JobId, Option<JobRecord>>,
    said_finished: &HashMap<JobId, Millis>,
) -> Vec<JobObs> {
    let obs = |j: &JobRecord, running: bool| JobObs {
        id: j.id,
        owner: j.owner.clone(),
        name: j.name.clone(),
        tags: j.tags.clone(),
        gpus: j.gpus().to_vec(),
        started_at: j.started_at().unwrap_or(now),
        running,
        said_finished_at: running.then(|| said_finished.get(&j.id).copied()).flatten(),
    };
    let mut jobs: Vec<JobObs> = running.iter().map(|j| obs(j, true)).collect();
    jobs.extend(ended.values().flatten().map(|j| obs(j, false)));
    jobs
}

#[cfg(test)]
mod tests {
    use std::process::{Child, Command, Stdio};

    use super::*;
    use crate::gpu::SimProbe;
    use crate::store::{NewJob, Store};

    /// CPU time this thread has used, in nanoseconds.
    fn thread_cpu_ns() -> u64 {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn file_size(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).map_or(0, |m| m.len())
    }

    /// The monitor's cost (issue 6's benchmark): 8 simulated GPUs, one running job on each,
    /// 64 GPU processes (7 per job, 8 strangers). Prints the CPU time of one sample (read,
    /// attribute through /proc, record in the store, run the waste rules) and what a week of
    /// series costs: the in-memory rings (bounded at an hour) and a week of per-minute rows.
    ///
    /// `cargo test --release -p baton-gpu --bin baton monitor_overhead -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn monitor_overhead() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let mut store = Store::open(&home.join("baton.db")).unwrap();
        let mut jobs = Vec::new();
        for g in 0..8u32 {
            let job = store
                .insert(&NewJob {
                    name: Some(format!("train{g}")),
                    owner_uid: rustix::process::getuid().as_raw(),
                    ..NewJob::plain(&["python", "train.py"], 1)
                })
                .unwrap();
            let start = baton_core::lifecycle::Transition::Start {
                gpus: vec![g],
                at: now_ms(),
                on: baton_core::lifecycle::Runner::Local,
            };
            store.apply(&job, &start, now_ms()).unwrap();
            jobs.push(job.id);
        }
        // 64 live processes: 7 per job (carrying its BATON_JOB_ID), one stranger per GPU.
        let mut children: Vec<Child> = Vec::new();
        for g in 0..8u32 {
            let gpu_dir = home.join("sim").join(format!("gpu{g}"));
            std::fs::create_dir_all(&gpu_dir).unwrap();
            for p in 0..8 {
                let mut cmd = Command::new("sleep");
                cmd.arg("600").stdin(Stdio::null());
                if p < 7 {
                    cmd.env("BATON_JOB_ID", jobs[g as usize].0.to_string());
                } else {
                    cmd.env_remove("BATON_JOB_ID");
                }
                let child = cmd.spawn().unwrap();
                std::fs::write(gpu_dir.join(child.id().to_string()), "4294967296 60").unwrap();
                children.push(child);
            }
        }
        let config = super::super::Config::for_test(home);
        let probe = SimProbe::new(8, 80 << 30, Some(home.join("sim")));
        let daemon = Daemon::new(
            config,
            store,
            Box::new(probe),
            std::env::current_exe().unwrap(),
        )
        .unwrap();
        assert_eq!(
            daemon
                .probe
                .sample()
                .iter()
                .map(|s| s.processes.len())
                .sum::<usize>(),
            64
        );
        for _ in 0..20 {
            daemon.sample_once(); // warm caches and prepared statements
        }
        let samples = 500;
        let (cpu0, wall0) = (thread_cpu_ns(), Instant::now());
        for _ in 0..samples {
            daemon.sample_once();
        }
        let cpu_us = (thread_cpu_ns() - cpu0) as f64 / samples as f64 / 1000.0;
        let wall_us = wall0.elapsed().as_secs_f64() * 1e6 / samples as f64;
        let interval = daemon.config.waste.sample_interval;
        let rings = {
            let inner = daemon.lock();
            let m = &inner.monitor;
            assert_eq!((m.gpus.len(), m.jobs.len()), (8, 8));
            m.gpus
                .values()
                .chain(m.jobs.values())
                .map(Ring::bytes_when_full)
                .sum::<usize>()
        };
        // A week of per-minute rows for 8 GPUs, as the store keeps them.
        let week_minutes = 7 * 24 * 60;
        let db = dir.path().join("week.db");
        let mut week = Store::open(&db).unwrap();
        let gpus: Vec<GpuMinuteSample> = (0..8)
            .map(|gpu| GpuMinuteSample {
                gpu,
                util: Some(50.0),
                mem: 1 << 30,
            })
            .collect();
        let empty = file_size(&db) + file_size(&db.with_extension("db-wal"));
        for m in 0..week_minutes {
            week.record_samples(m * 60_000, &gpus, &[]).unwrap();
        }
        drop(week);
        let full = file_size(&db) + file_size(&db.with_extension("db-wal"));
        println!(
            "monitor sample, 8 GPUs, 64 processes: {cpu_us:.0} µs CPU, {wall_us:.0} µs wall per \
             sample ({:.3} % of one core at the {} s interval)",
            cpu_us / (interval as f64 * 10.0),
            interval / 1000
        );
        println!(
            "in-memory series (8 GPU + 8 job rings of 1 h at {} s): {:.1} KiB when full",
            interval / 1000,
            rings as f64 / 1024.0
        );
        println!(
            "a week of per-GPU minute rows (8 GPUs × {week_minutes} minutes): {:.1} MiB on disk",
            (full - empty) as f64 / (1 << 20) as f64
        );
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
