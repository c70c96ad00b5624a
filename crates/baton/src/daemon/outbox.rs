//! What happens after a job ends: its report is built and stored, then delivered through each of
//! its channels from the outbox. Each (job, channel) delivery is a row committed with the job's
//! end, so it survives any crash; a row is marked delivered right after its channel accepted the
//! message, retried with backoff when the channel failed, and skipped when its target is gone (an
//! agent session that ended), in which case the report also goes to the inbox file. The loop
//! sleeps until a job ends or a retry falls due: there is no polling.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use baton_core::{JobId, Millis};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::UnboundedReceiver;

use super::{Daemon, Inner, now_ms};
use crate::notify::{self, Channel, Message, Outcome};
use crate::report::{self, Built};
use crate::store::{Delivery, DeliveryState, JobRecord};
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

impl Daemon {
    /// Builds reports for jobs as they end, each on a blocking thread (output files are read).
    pub(super) async fn report_loop(self: Arc<Self>, mut ended: UnboundedReceiver<JobId>) {
        while let Some(id) = ended.recv().await {
            let me = self.clone();
            tokio::task::spawn_blocking(move || me.build_report(id));
        }
    }

    /// Builds and stores the report of an ended job, then lets waiters and the outbox know.
    pub(super) fn build_report(self: &Arc<Self>, id: JobId) -> Option<Built> {
        // Whatever happens below, even a panic, the job stops counting as "being reported on",
        // or `wait` would hang and its deliveries never go out.
        struct Done<'a>(&'a Daemon, JobId);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.lock().reports_pending.remove(&self.1);
                self.0.notify_changed();
                self.0.outbox_wake.notify_one();
            }
        }
        let _done = Done(self, id);
        match self.job(id) {
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
                let usage = match self.lock().jobs.store().job_usage(id, job.attempt()) {
                    Ok(usage) => usage,
                    Err(e) => {
                        tracing::warn!(job = id.0, "no GPU usage for the report: {e}");
                        Vec::new()
                    }
                };
                // The local monitor samples only this machine's GPUs, and only if it has any.
                let sample_interval = (!self.slurm_backend() && !self.gpu_info.is_empty())
                    .then_some(self.config.waste.sample_interval);
                let built = report::build(
                    &job,
                    &files,
                    &self.gpu_info,
                    &usage,
                    sample_interval,
                    &self.config.home,
                    look,
                );
                tracing::info!(
                    job = id.0,
                    build_ms = started.elapsed().as_secs_f64() * 1000.0,
                    bytes = built.markdown.len(),
                    "report built"
                );
                if let Err(e) = report::store(&files, &built) {
                    tracing::error!(job = id.0, "cannot store the report: {e}");
                }
                Some(built)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::error!(job = id.0, "cannot read the job to report on it: {e}");
                None
            }
        }
    }

    /// The stored report of an ended job, built now if it is missing (a job that ended before
    /// this version of baton, or whose report could not be written). Blocking.
    pub(crate) fn report_of(self: &Arc<Self>, id: JobId) -> Option<Built> {
        if let Some(built) = report::load(&self.files(id)) {
            return Some(built);
        }
        // Being built right now by the job's end (a matter of milliseconds): wait for that
        // build rather than race it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.lock().reports_pending.contains(&id) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        report::load(&self.files(id)).or_else(|| self.build_report(id))
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
                tokio::spawn(self.clone().deliver_job(id, deliveries));
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
        let me = self.clone();
        let built = tokio::task::spawn_blocking(move || me.report_of(id))
            .await
            .ok()
            .flatten();
        let job = self.job(id).ok().flatten();
        match (built, job) {
            (Some(built), Some(job)) => {
                let path = self.files(id).report_md().display().to_string();
                let msg = Message::new(&built.report, &built.markdown, &path, job.env.clone());
                let sends = deliveries.iter().map(|d| {
                    let (me, job, msg) = (&self, &job, &msg);
                    async move {
                        // A workflow's summary rides on its last task's deliveries.
                        let summary = d.workflow.map(|w| me.workflow_message(w, job));
                        let outcome = match summary {
                            Some(Some(summary)) => {
                                me.deliver_as_owner(job, &d.channel, &summary).await
                            }
                            Some(None) => {
                                Outcome::Failed("the workflow's summary is missing".into())
                            }
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
        self.lock().delivering.remove(&id);
        self.outbox_wake.notify_one();
        self.deliveries_done.notify_waiters();
    }

    /// Waits (at most `bound`) until the deliveries in flight have finished and are recorded: a
    /// stopping daemon that dropped one would send it again after its restart.
    pub(super) async fn drain_deliveries(&self, bound: Duration) {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let finished = self.deliveries_done.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            let left = self.lock().delivering.len();
            if left == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, finished).await.is_err() {
                tracing::warn!(
                    "{left} job(s) still delivering after {bound:?}; they are sent again after \
                     the restart"
                );
                return;
            }
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
        // A link with a later one standing by gives up sooner: the next link is waiting.
        let has_next = self
            .lock()
            .jobs
            .store()
            .has_standby_after(d.id)
            .unwrap_or(false);
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
                workflow: d.workflow,
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
