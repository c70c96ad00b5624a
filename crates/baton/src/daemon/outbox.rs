//! What happens after a job ends: its report is built and stored, then delivered through each of
//! its channels from the outbox. The built report reaches the outbox (and `wait`, and `report`)
//! in memory ([`Recent`]); the stored files are the durable copy, read after a restart or once
//! the report has left memory. Each (job, channel) delivery is a row committed with the job's
//! end, so it survives any crash; a row is marked delivered right after its channel accepted the
//! message, retried with backoff when the channel failed, and skipped when its target is gone (an
//! agent session that ended), in which case the report also goes to the inbox file. The loop
//! sleeps until a job ends or a retry falls due: there is no polling.

use std::collections::{BTreeMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::{JobId, JobState, Millis};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::UnboundedReceiver;

use super::{Daemon, Inner, now_ms};
use crate::notify::{self, Channel, Message, Outcome};
use crate::report::{self, Built};
use crate::store::{Delivery, DeliveryState, JobRecord, Subject};
use crate::users;

/// Deliveries picked up per turn of the loop.
const BATCH: usize = 256;
/// A delivery that failed this many times is given up (after about an hour of backoff).
const MAX_ATTEMPTS: u32 = 15;
/// A link of a wake chain with another standing by is given up sooner (after about 7 s), so
/// that the next link is not kept waiting an hour.
const CHAIN_ATTEMPTS: u32 = 3;
/// How often the outbox checks that a Claude Code hook that claimed a job still runs, until it
/// says it delivered.
const HOOK_RECHECK: Millis = 1000;
/// How many built reports stay in memory (the latest ones; older ones are read from disk).
const RECENT_REPORTS: usize = 64;
/// Backoff between attempts: doubling from one second, at most five minutes.
fn backoff(attempts: u32) -> Millis {
    (1000i64 << attempts.min(9)).min(300_000)
}

/// What the hidden `baton deliver` command reads on stdin: one delivery, done as the job's owner.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct DeliverRequest {
    pub channel: Channel,
    pub message: Message,
}

/// The reports built lately, as they were stored, each with its job as it ended: what the
/// outbox delivers and `wait` and `report` print right after a job's end, without reading back
/// the files just written or the job's row. Bounded: the latest [`RECENT_REPORTS`]; an older
/// one is read from its files, as after a restart.
#[derive(Default)]
pub(super) struct Recent(Mutex<VecDeque<Reported>>);

/// A report kept in memory, and its job as it ended (when the builder was handed it).
struct Reported {
    id: JobId,
    built: Arc<Built>,
    job: Option<Arc<JobRecord>>,
}

impl Recent {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Reported>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put(&self, id: JobId, built: Arc<Built>, job: Option<Arc<JobRecord>>) {
        let mut recent = self.lock();
        recent.retain(|r| r.id != id);
        recent.push_back(Reported { id, built, job });
        while recent.len() > RECENT_REPORTS {
            recent.pop_front();
        }
    }

    fn forget(&self, id: JobId) {
        self.lock().retain(|r| r.id != id);
    }

    fn get(&self, id: JobId) -> Option<Arc<Built>> {
        self.lock()
            .iter()
            .rev()
            .find(|r| r.id == id)
            .map(|r| r.built.clone())
    }

    /// The job of a report kept here, as it ended.
    fn job(&self, id: JobId) -> Option<Arc<JobRecord>> {
        self.lock()
            .iter()
            .rev()
            .find(|r| r.id == id)
            .and_then(|r| r.job.clone())
    }
}

impl Daemon {
    /// Builds reports for jobs as they end, each on a blocking thread (output files are read).
    pub(super) async fn report_loop(self: Arc<Self>, mut ended: UnboundedReceiver<JobRecord>) {
        while let Some(job) = ended.recv().await {
            let me = self.clone();
            self.tasks
                .spawn_blocking(move || me.build_report(job.id, Some(job)));
        }
    }

    /// Builds and stores the report of an ended job, keeps it in memory, then lets waiters and
    /// the outbox know. `ended` is the job as it ended, when the caller has it; else it is read.
    pub(super) fn build_report(
        self: &Arc<Self>,
        id: JobId,
        ended: Option<JobRecord>,
    ) -> Option<Arc<Built>> {
        // Whatever happens below, even a panic, the job stops counting as "being reported on",
        // or `wait` would hang and its deliveries never go out.
        struct Done<'a>(&'a Daemon, JobId);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                let waited_for = {
                    let mut inner = self.0.lock();
                    inner.reports_pending.remove(&self.1);
                    has_queued_partner(&inner, self.1)
                };
                self.0.notify_changed();
                self.0.outbox_wake.notify_one();
                // Its dependents may start now (`scheduling_input`). Only they: another pass
                // after every report would double the passes of a long array for nothing.
                if waited_for {
                    self.0.wake();
                }
            }
        }
        let _done = Done(self, id);
        let handed = ended.is_some();
        let job = match ended {
            Some(job) => Ok(Some(job)),
            None => self.job(id),
        };
        match job {
            Ok(Some(job)) => {
                let files = self.files(id);
                let started = std::time::Instant::now();
                let account = (self.config.system && job.owner_uid != self.uid)
                    .then(|| users::by_uid(job.owner_uid))
                    .flatten()
                    .map(|a| crate::executor::RunAs {
                        uid: a.uid,
                        gid: a.gid,
                        groups: users::groups_of(&a),
                    });
                let look = match &account {
                    Some(run_as) => report::Look::As {
                        exe: &self.exe,
                        run_as,
                    },
                    None => report::Look::Here,
                };
                // No GPU, or no sample taken since it started (a short job): nothing to read.
                let sampled_at = self
                    .gpus_sampled_at
                    .load(std::sync::atomic::Ordering::Relaxed);
                let usage = if job.gpus().is_empty()
                    || job.started_at().is_some_and(|start| sampled_at < start)
                {
                    Ok(Vec::new())
                } else {
                    self.lock().jobs.store().job_usage(id, job.attempt())
                };
                let usage = match usage {
                    Ok(usage) => usage,
                    Err(e) => {
                        tracing::warn!(job = id.0, "no GPU usage for the report: {e}");
                        Vec::new()
                    }
                };
                // The local monitor samples only this machine's GPUs, and only if it has any.
                let sample_interval = (self.places_here() && !self.gpu_info.is_empty())
                    .then_some(self.config.waste.sample_interval);
                // Only a job that ran long enough to be followed can have raised any.
                let alerts = if job.ran_at_least(super::midrun::FOLLOW_AFTER_MS) {
                    self.lock().jobs.store().alerts(id).unwrap_or_else(|e| {
                        tracing::warn!(job = id.0, "no mid-run alerts for the report: {e}");
                        Vec::new()
                    })
                } else {
                    Vec::new()
                };
                let built = report::build(
                    &job,
                    &files,
                    &self.gpu_info,
                    report::Watched {
                        usage: &usage,
                        sample_interval,
                        alerts: &alerts,
                    },
                    &self.config.home,
                    look,
                );
                tracing::info!(
                    job = id.0,
                    build_ms = started.elapsed().as_secs_f64() * 1000.0,
                    "report built"
                );
                let built = Arc::new(built);
                // A sweep's run keeps report.json alone (its markdown is made from it when asked):
                // one file fewer for each of thousands of runs.
                match report::store(&files, &built, job.sweep.is_none()) {
                    // In memory before the job stops counting as being reported on (`_done`),
                    // so whoever waited for it finds it there.
                    Ok(()) => {
                        let ended = handed.then(|| Arc::new(job.clone()));
                        self.reports.put(id, built.clone(), ended)
                    }
                    // Not kept: the next reader builds it again and retries the store.
                    Err(e) => tracing::error!(job = id.0, "cannot store the report: {e}"),
                }
                self.sweep_run_reported(&job, &built.report);
                Some(built)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::error!(job = id.0, "cannot read the job to report on it: {e}");
                None
            }
        }
    }

    /// Forgets the report of a job about to be requeued, in memory and on disk, so that nothing
    /// can hand it out as the report of the job's next end. Removed before the requeue is
    /// committed: should the commit fail, the job is still ended and its report is simply built
    /// again when next asked for (as for a report that could not be stored).
    pub(super) fn forget_report(&self, id: JobId) {
        self.reports.forget(id);
        let files = self.files(id);
        for path in [files.report_json(), files.report_md()] {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(job = id.0, "cannot remove {}: {e}", path.display()),
            }
        }
    }

    /// The report of an ended job: the one just built, from memory; else the stored one, or
    /// built now if it is missing (a job that ended before this version of baton, or whose
    /// report could not be written).
    pub(crate) async fn report_of(self: &Arc<Self>, id: JobId) -> Option<Arc<Built>> {
        // Being built right now by the job's end (a matter of milliseconds): wait for that
        // build rather than race it. The builder bumps `changed` once it is done.
        let mut changed = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            changed.borrow_and_update();
            if !self.lock().reports_pending.contains(&id) {
                break;
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => break,
            }
        }
        if let Some(built) = self.reports.get(id) {
            return Some(built);
        }
        let me = self.clone();
        self.tasks
            .spawn_blocking(move || {
                report::load(&me.files(id))
                    .map(Arc::new)
                    .or_else(|| me.build_report(id, None))
            })
            .await
            .ok()
            .flatten()
    }

    pub(super) async fn outbox_loop(self: Arc<Self>) {
        loop {
            let now = now_ms();
            // One lock from the read of the due rows to the claim of their jobs: a delivery that
            // finishes in between would otherwise leave a stale "pending" row to send again.
            let (by_job, fetched, next) = {
                let mut inner = self.lock();
                let due = inner.jobs.store().due_deliveries(now, BATCH);
                let next = inner.jobs.store().next_delivery_at();
                match (due, next) {
                    (Ok(due), Ok(next)) => {
                        let fetched = due.len();
                        let mut by_job: BTreeMap<JobId, Vec<Delivery>> = BTreeMap::new();
                        for d in due {
                            // Its outcome waits to be recorded: sent already, not again.
                            if !inner.unrecorded.deliveries.contains(&d.id) {
                                by_job.entry(d.job).or_default().push(d);
                            }
                        }
                        // A job still being reported on, or already being delivered, is
                        // picked up again when that finishes (both wake this loop).
                        let Inner {
                            reports_pending,
                            delivering,
                            ..
                        } = &mut *inner;
                        by_job.retain(|id, _| {
                            !reports_pending.contains(id) && delivering.insert(*id)
                        });
                        (by_job, fetched, next)
                    }
                    (Err(e), _) | (_, Err(e)) => {
                        tracing::error!("cannot read the outbox: {e}; retrying in 5 s");
                        (BTreeMap::new(), 0, Some(now + 5000))
                    }
                }
            };
            let spawned = !by_job.is_empty();
            for (id, deliveries) in by_job {
                self.tasks
                    .spawn_delivery(self.clone().deliver_job(id, deliveries));
            }
            // A full batch may hide more due rows behind it: look again at once, unless nothing
            // in it could be started (all held back), which would only spin.
            if fetched == BATCH && spawned {
                continue;
            }
            let sleep = async {
                match next {
                    Some(at) if at > now => {
                        tokio::time::sleep(Duration::from_millis((at - now) as u64)).await
                    }
                    // Due now but held back by work in flight, or nothing pending: wait for a wake.
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.outbox_wake.notified() => {}
                _ = sleep => {}
            }
        }
    }

    /// Delivers one job's report through each of the given channels at once.
    async fn deliver_job(self: Arc<Self>, id: JobId, deliveries: Vec<Delivery>) {
        // Mid-run alerts need no report (the job may still run); the rest ride on it.
        let (midrun, deliveries): (Vec<Delivery>, Vec<Delivery>) =
            deliveries.into_iter().partition(|d| d.subject.is_midrun());
        if !midrun.is_empty() {
            self.deliver_alerts(id, &midrun).await;
        }
        if !deliveries.is_empty() {
            self.deliver_after_end(id, deliveries).await;
        }
        self.lock().delivering.remove(&id);
        self.outbox_wake.notify_one();
    }

    /// Delivers a job's mid-run alerts, each as it was stored.
    async fn deliver_alerts(&self, id: JobId, deliveries: &[Delivery]) {
        let Ok(Some(job)) = self.job(id) else {
            return; // removed meanwhile: nothing left to record on
        };
        let sends = deliveries.iter().map(|d| {
            let job = &job;
            async move {
                let Subject::JobAlert(alert) = d.subject else {
                    return;
                };
                let stored = self.lock().jobs.store().alert(alert).ok().flatten();
                let outcome = match stored {
                    Some(a) => {
                        let path = super::midrun::alert_path(
                            &self.files(id),
                            a.attempt,
                            a.detector,
                            a.seq,
                        );
                        let msg = Message::alert(
                            id.0,
                            a.detector.as_str(),
                            &a.message,
                            &path.display().to_string(),
                            &job.cwd,
                            job.env.clone(),
                        );
                        self.deliver_as_owner(job, &d.channel, &msg).await
                    }
                    None => Outcome::Failed("the alert is missing".into()),
                };
                self.record(job, d, outcome);
            }
        });
        futures_util::future::join_all(sends).await;
    }

    /// Delivers what a job's end brought: its report, or its workflow's or sweep's message.
    async fn deliver_after_end(self: &Arc<Self>, id: JobId, deliveries: Vec<Delivery>) {
        let built = self.report_of(id).await;
        // As it ended, from memory beside its report; else read back.
        let job = match self.reports.job(id) {
            Some(job) => Some(Arc::unwrap_or_clone(job)),
            None => self.job(id).ok().flatten(),
        };
        match (built, job) {
            (Some(built), Some(job)) => {
                let path = report::markdown_file(&self.files(id), &built)
                    .display()
                    .to_string();
                let for_webhook = deliveries.iter().any(|d| {
                    matches!(
                        d.channel,
                        Channel::Webhook {
                            format: crate::notify::WebhookFormat::Json,
                            ..
                        }
                    )
                });
                let msg = Message::new(
                    &built.report,
                    built.markdown(),
                    &path,
                    job.env.clone(),
                    for_webhook,
                );
                let sends = deliveries.iter().map(|d| {
                    let (me, job, msg) = (&self, &job, &msg);
                    async move {
                        // A workflow's summary and a sweep's comparison or alert ride on the
                        // deliveries of the job whose end brought them.
                        let other = match d.subject {
                            Subject::Job => None,
                            Subject::Workflow(w) => Some(
                                me.workflow_message(w, job)
                                    .ok_or("the workflow's summary is missing"),
                            ),
                            Subject::Sweep(s) => Some(
                                me.sweep_message(s, job, false)
                                    .await
                                    .ok_or("the sweep's comparison report could not be built"),
                            ),
                            Subject::SweepAlert(s) => Some(
                                me.sweep_message(s, job, true)
                                    .await
                                    .ok_or("the sweep's alert is missing"),
                            ),
                            // Sent by `deliver_alerts`, never with these.
                            Subject::JobAlert(_) => Some(Err("a mid-run alert goes on its own")),
                        };
                        let outcome = match other {
                            Some(Ok(other)) => me.deliver_as_owner(job, &d.channel, &other).await,
                            Some(Err(why)) => Outcome::Failed(why.into()),
                            None => me.deliver_as_owner(job, &d.channel, msg).await,
                        };
                        me.record(job, d, outcome);
                    }
                });
                futures_util::future::join_all(sends).await;
            }
            _ => {
                for d in &deliveries {
                    let outcome = Outcome::Failed("the job's report could not be built".into());
                    if let Ok(Some(job)) = self.job(id) {
                        self.record(&job, d, outcome);
                    }
                }
            }
        }
    }

    /// Waits (at most `bound`) until the deliveries in flight have finished and are recorded: a
    /// stopping daemon that dropped one would send it again after its restart.
    pub(super) async fn drain_deliveries(&self, bound: Duration) {
        let left = self.tasks.drain_deliveries(bound).await;
        if left > 0 {
            tracing::warn!(
                "{left} job(s) still delivering after {bound:?}; they are sent again after the \
                 restart"
            );
        }
    }

    /// The message for a workflow's summary, read from where the daemon stored it.
    fn workflow_message(&self, workflow: u64, anchor: &JobRecord) -> Option<Message> {
        let path = crate::paths::workflow_report(&self.config.home, workflow);
        let summary = std::fs::read_to_string(&path).ok()?;
        let wf = self.lock().jobs.store().workflow(workflow).ok().flatten()?;
        Some(Message::workflow(
            workflow,
            &wf.name,
            wf.state.as_str(),
            anchor.id.0,
            &summary,
            &path.display().to_string(),
            &anchor.cwd,
            anchor.env.clone(),
        ))
    }

    /// Records how one delivery went. A session channel that did not reach the agent passes the
    /// report on to the next link of the chain (the store does that in the same commit), and
    /// to the inbox file.
    pub(super) fn record(&self, job: &JobRecord, d: &Delivery, outcome: Outcome) {
        let now = now_ms();
        let spec = d.channel.public_spec();
        if let Outcome::Waiting(why) = &outcome {
            // The hook delivers; look again soon, for as long as it runs (Claude Code ends a
            // hook that runs past its timeout, and then it reads as gone).
            let rescheduled = self
                .lock()
                .jobs
                .store_mut()
                .recheck_delivery(d.id, now + HOOK_RECHECK);
            match rescheduled {
                Ok(()) => {
                    tracing::debug!(job = job.id.0, channel = %spec, "{why}");
                    return;
                }
                // Recorded as a failed attempt instead, with its backoff: no tight loop.
                Err(e) => tracing::warn!(job = job.id.0, "cannot reschedule {spec}: {e}"),
            }
        }
        // A link with a later one standing by gives up sooner: the next link is waiting. Asked
        // only where it matters (a failure, or a session that was not reached), not of a
        // delivery that went through.
        let has_next = || {
            self.lock()
                .jobs
                .store()
                .has_standby_after(d.id)
                .unwrap_or(false)
        };
        let has_next = match &outcome {
            Outcome::Delivered => false,
            _ => has_next(),
        };
        let max_attempts = if has_next {
            CHAIN_ATTEMPTS
        } else {
            MAX_ATTEMPTS
        };
        let (state, next, error) = match &outcome {
            Outcome::Delivered => (DeliveryState::Delivered, now, None),
            Outcome::Noted(why) => (DeliveryState::Noted, now, Some(why.as_str())),
            Outcome::Held(why) => (DeliveryState::Held, now, Some(why.as_str())),
            Outcome::Refused(why) => (DeliveryState::Refused, now, Some(why.as_str())),
            Outcome::Gone(why) => (DeliveryState::Skipped, now, Some(why.as_str())),
            Outcome::Waiting(why) => (
                DeliveryState::Pending,
                now + backoff(d.attempts),
                Some(why.as_str()),
            ),
            Outcome::Failed(why) if d.attempts + 1 >= max_attempts => {
                (DeliveryState::Failed, now, Some(why.as_str()))
            }
            Outcome::Failed(why) => (
                DeliveryState::Pending,
                now + backoff(d.attempts),
                Some(why.as_str()),
            ),
        };
        match &outcome {
            Outcome::Delivered => {
                if let Some(ended) = job.ended_at() {
                    self.metrics.observe_wakeup_latency(
                        d.channel.kind(),
                        (now - ended).max(0) as f64 / 1000.0,
                    );
                }
                tracing::info!(job = job.id.0, channel = %spec, latency_ms = now - job.ended_at().unwrap_or(now), "report delivered")
            }
            Outcome::Failed(why) if state == DeliveryState::Pending => {
                tracing::warn!(job = job.id.0, channel = %spec, attempt = d.attempts + 1, "delivery failed: {why}")
            }
            other => {
                tracing::info!(job = job.id.0, channel = %spec, state = state.as_str(), "not delivered: {}", other.detail().unwrap_or_default())
            }
        }
        // The last link that did not reach the session leaves the report to the inbox file.
        let fallback =
            (state.passes_on() && d.channel.is_session() && !has_next).then(|| Channel::File {
                path: self.inbox_for(job.owner_uid, &job.env),
            });
        // Recorded, or kept until it can be: a delivery whose outcome is not recorded yet is
        // never sent again meanwhile.
        let mut inner = self.lock();
        self.record_change(
            &mut inner,
            super::durable::Change::Delivery {
                id: d.id,
                job: job.id,
                subject: d.subject,
                state,
                next,
                error: error.map(str::to_string),
                at: now,
                fallback,
            },
        );
    }

    /// Delivers as the job's owner. In system mode everything that touches the owner's files,
    /// sessions or commands runs in a child process with the owner's identity, so a user cannot
    /// make the root daemon write where they could not.
    pub(super) async fn deliver_as_owner(
        &self,
        job: &JobRecord,
        channel: &Channel,
        msg: &Message,
    ) -> Outcome {
        let as_other = self.config.system && job.owner_uid != self.uid;
        if !as_other || matches!(channel, Channel::Webhook { .. }) {
            return notify::deliver(channel, msg).await;
        }
        let Some(account) = users::by_uid(job.owner_uid) else {
            return Outcome::Gone(format!("user {} no longer exists", job.owner_uid));
        };
        let request = DeliverRequest {
            channel: channel.clone(),
            message: msg.clone(),
        };
        let body = serde_json::to_vec(&request).expect("plain data");
        let mut cmd = std::process::Command::new(&self.exe);
        cmd.arg("deliver")
            .env_clear()
            .envs(&msg.env)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let run_as = crate::executor::RunAs {
            uid: account.uid,
            gid: account.gid,
            groups: users::groups_of(&account),
        };
        crate::executor::run_as_user(&mut cmd, &run_as);
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                return Outcome::Failed(format!(
                    "cannot start a delivery as {}: {e}",
                    account.name
                ));
            }
        };
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&body).await;
        }
        match tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await {
            Ok(Ok(out)) => serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
                Outcome::Failed(format!(
                    "the delivery as {} failed ({})",
                    account.name, out.status
                ))
            }),
            Ok(Err(e)) => Outcome::Failed(e.to_string()),
            Err(_) => Outcome::Failed("the delivery took longer than 120 s".into()),
        }
    }

    /// The inbox file a job's owner reads: `$BATON_HOME/inbox.md` for a user daemon; for the
    /// system daemon, the owner's own baton directory (as their environment names it).
    pub(crate) fn inbox_for(&self, owner_uid: u32, env: &BTreeMap<String, String>) -> String {
        if !self.config.system || owner_uid == self.uid {
            return self.config.home.join("inbox.md").display().to_string();
        }
        let var = |k: &str| env.get(k).filter(|v| !v.is_empty());
        let base = if let Some(data) = var("XDG_DATA_HOME") {
            format!("{data}/baton")
        } else {
            let home = var("HOME")
                .cloned()
                .or_else(|| users::by_uid(owner_uid).map(|a| a.home))
                .unwrap_or_else(|| "/tmp".into());
            format!("{home}/.local/share/baton")
        };
        format!("{base}/inbox.md")
    }
}

/// `baton deliver`: one delivery, described on stdin, run by the system daemon as the job's
/// owner; prints the outcome as JSON.
pub fn deliver_from_stdin() -> i32 {
    let mut input = Vec::new();
    if std::io::Read::read_to_end(&mut std::io::stdin(), &mut input).is_err() {
        return 1;
    }
    let Ok(request) = serde_json::from_slice::<DeliverRequest>(&input) else {
        eprintln!("baton deliver: unreadable request");
        return 1;
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 1;
    };
    let outcome = runtime.block_on(notify::deliver(&request.channel, &request.message));
    println!("{}", serde_json::to_string(&outcome).expect("plain data"));
    0
}

/// Whether a queued job waits for `id` (it comes `--after` it or is to be placed with it): what
/// the end of `id`'s report may let start.
fn has_queued_partner(inner: &Inner, id: JobId) -> bool {
    inner.jobs.active().any(|j| {
        j.state() == JobState::Queued
            && (j.deps.iter().any(|d| d.job == id) || j.colocate.contains(&id))
    })
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::gpu::SimProbe;
    use crate::store::{NewJob, Store};
    use baton_core::lifecycle::{Ending, Runner, Transition};

    fn config(home: &Path) -> super::super::Config {
        super::super::Config::for_test(home)
    }

    fn daemon(home: &Path) -> Arc<Daemon> {
        let store = Store::open(&home.join("baton.db")).unwrap();
        let probe = SimProbe::new(1, 80 << 30, Some(home.join("sim")));
        let exe = std::env::current_exe().unwrap();
        Daemon::new(config(home), store, Box::new(probe), exe).unwrap()
    }

    /// A job that ran and ended, with one pending delivery to the file `inbox.md`; its report
    /// is not built yet.
    fn ended_job(home: &Path) -> (JobId, PathBuf) {
        let work = home.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let mut store = Store::open(&home.join("baton.db")).unwrap();
        let job = store
            .insert(&NewJob {
                cwd: work.display().to_string(),
                owner_uid: rustix::process::getuid().as_raw(),
                ..NewJob::plain(&["true"], 1)
            })
            .unwrap();
        let start = Transition::Start {
            gpus: vec![0],
            at: now_ms(),
            on: Runner::Local,
        };
        let (job, _) = store.apply(&job, &start, now_ms()).unwrap();
        let inbox = home.join("inbox.md");
        let ending = Ending::succeeded(now_ms());
        let channel = Channel::File {
            path: inbox.display().to_string(),
        };
        store
            .apply_all(&[(&job, Transition::End(ending))], now_ms(), |tx| {
                crate::store::insert_deliveries(
                    tx,
                    job.id,
                    crate::store::Subject::Job,
                    &[channel],
                    now_ms(),
                )
            })
            .unwrap();
        (job.id, inbox)
    }

    fn remove_stored_report(daemon: &Daemon, id: JobId) {
        let files = daemon.files(id);
        std::fs::remove_file(files.report_json()).unwrap();
        std::fs::remove_file(files.report_md()).unwrap();
    }

    /// The outbox delivers the report the builder handed it, without reading back (or, when the
    /// files are gone, building again) what was just stored.
    #[tokio::test]
    async fn the_outbox_delivers_the_built_report_from_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (id, inbox) = ended_job(dir.path());
        let daemon = daemon(dir.path());
        let built = daemon.build_report(id, None).expect("a report");
        remove_stored_report(&daemon, id);

        let due = daemon
            .lock()
            .jobs
            .store()
            .due_deliveries(now_ms(), BATCH)
            .unwrap();
        assert_eq!(due.len(), 1);
        daemon.clone().deliver_job(id, due).await;

        let got = std::fs::read_to_string(&inbox).unwrap();
        assert!(got.contains(built.markdown().trim_end()), "{got}");
        let rows = daemon.lock().jobs.store().deliveries(id).unwrap();
        assert_eq!(rows[0].state, DeliveryState::Delivered);
        assert!(
            !daemon.files(id).report_json().exists(),
            "the report was built and stored again: the outbox did not get it in memory"
        );
    }

    /// `wait` and `report` ask for a report while it is being built: they are woken when it is
    /// done (no sleep loop) and get it from memory.
    #[tokio::test]
    async fn a_reader_waiting_for_a_build_gets_the_built_report_from_memory() {
        let dir = tempfile::tempdir().unwrap();
        let (id, _) = ended_job(dir.path());
        let daemon = daemon(dir.path());
        daemon.lock().reports_pending.insert(id); // as `Daemon::ended` does
        let reader = {
            let daemon = daemon.clone();
            tokio::spawn(async move { daemon.report_of(id).await })
        };
        tokio::task::yield_now().await; // the reader starts waiting
        assert!(
            !reader.is_finished(),
            "the reader did not wait for the build"
        );

        let built = daemon.build_report(id, None).expect("a report");
        remove_stored_report(&daemon, id);
        let read = reader.await.unwrap().expect("a report");
        assert!(Arc::ptr_eq(&read, &built), "not the report just built");
        assert!(!daemon.files(id).report_json().exists());
    }

    /// After a restart (or once a report has left memory) the stored files are read.
    #[tokio::test]
    async fn a_report_not_in_memory_is_read_from_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let (id, _) = ended_job(dir.path());
        let first = daemon(dir.path());
        first.build_report(id, None).expect("a report");
        let md = first.files(id).report_md();
        let stored = std::fs::read_to_string(&md).unwrap();
        std::fs::write(&md, format!("{stored}\nread from disk\n")).unwrap();

        let restarted = daemon(dir.path());
        let read = restarted.report_of(id).await.expect("a report");
        assert!(
            read.markdown().ends_with("read from disk\n"),
            "{}",
            read.markdown()
        );
    }

    #[test]
    fn memory_keeps_only_the_latest_reports() {
        let dir = tempfile::tempdir().unwrap();
        let (id, _) = ended_job(dir.path());
        let built = daemon(dir.path()).build_report(id, None).expect("a report");
        let recent = Recent::default();
        for id in 1..=(RECENT_REPORTS as u64 + 1) {
            recent.put(JobId(id), built.clone(), None);
        }
        recent.put(JobId(2), built.clone(), None); // again: still one entry
        assert!(recent.get(JobId(1)).is_none(), "the oldest was kept");
        assert!(recent.get(JobId(2)).is_some());
        assert!(recent.get(JobId(RECENT_REPORTS as u64 + 1)).is_some());
        assert_eq!(recent.lock().len(), RECENT_REPORTS);
    }
}
