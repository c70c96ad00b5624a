//! The scheduling pass over this machine's GPUs: what the pure scheduler (`baton_core::plan`)
//! decides for the queued jobs, committed through the job table (admissions, dependency
//! failures, starts) before anything acts on it. The local backend launches what it started.

use baton_core::lifecycle::{Ending, Runner, Transition};
use baton_core::{JobId, Millis};

use super::{Daemon, LEASE_MS, now_ms, scheduling_input};
use crate::store::JobRecord;

impl Daemon {
    /// One scheduling pass over this machine's GPUs: decide with the pure core, commit the
    /// decisions (admissions, dependency failures, starts), and return the jobs started, for
    /// the local backend to launch, and when a queued job's retry backoff ends, if one waits
    /// for that.
    pub(crate) fn place(
        &self,
        contain: &mut dyn FnMut(&JobRecord) -> String,
    ) -> (Vec<JobRecord>, Option<Millis>) {
        // A pass that begins now covers every `wake` before it (see `pass_due`).
        self.pass_due
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let (launches, next_wakeup) = self.plan_and_start(contain);
        let changed = {
            let mut next = self.next_pass.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *next, next_wakeup) != next_wakeup
        };
        if changed {
            // The scheduler loop's timer, should this pass have run elsewhere.
            self.wake.notify_one();
        }
        (launches, next_wakeup)
    }

    /// The pass itself: the pure scheduler's plan, its starts committed.
    fn plan_and_start(
        &self,
        contain: &mut dyn FnMut(&JobRecord) -> String,
    ) -> (Vec<JobRecord>, Option<Millis>) {
        let now = now_ms();
        let mut launches = Vec::new();
        let mut cascade = false;
        let next_wakeup;
        {
            let mut inner = self.lock();
            let (running, pending, states) = match scheduling_input(&inner, &self.gpus) {
                Ok(input) => input,
                Err(e) => {
                    tracing::error!("scheduling pass skipped: {e}");
                    return (Vec::new(), None);
                }
            };
            self.metrics
                .set_queue(pending.len() as i64, running.len() as i64);
            if pending.is_empty() {
                return (Vec::new(), None);
            }
            let limits = self.limits_for(&inner);
            let windows = self.windows(&inner, now);
            let plan = baton_core::scheduler::plan_with_reservations(
                &self.machine,
                &running,
                &pending,
                &states,
                now,
                Default::default(),
                &limits,
                &windows,
            );
            next_wakeup = plan.next_wakeup;

            // Atomic workflows first: every task's GPUs reserved in one transaction, or, if
            // that cannot be recorded, none of its tasks starts in this pass.
            let mut unrecorded: Vec<JobId> = Vec::new();
            for admission in &plan.admissions {
                let lease = now + LEASE_MS;
                match inner
                    .jobs
                    .admit(admission.gang, &admission.reserved, lease, now)
                {
                    Ok(_) => {
                        tracing::info!(workflow = admission.gang, "atomic workflow admitted");
                    }
                    Err(e) => {
                        tracing::error!(
                            workflow = admission.gang,
                            "cannot record the admission: {e}"
                        );
                        unrecorded.extend(admission.reserved.iter().map(|(id, _)| *id));
                    }
                }
            }

            for (id, reason) in &plan.dependency_failed {
                self.finish(&mut inner, *id, Ending::failed(reason.clone(), now));
                cascade = true;
            }
            for id in &plan.reservation_gone {
                let reason = self.reservation_gone_reason(&inner, *id);
                self.finish(&mut inner, *id, Ending::failed(reason, now));
                cascade = true;
            }
            let starts: Vec<(JobId, Vec<u32>)> = plan
                .starts
                .iter()
                .filter(|s| !unrecorded.contains(&s.job))
                .map(|s| (s.job, s.gpus.clone()))
                .collect();
            if !starts.is_empty() {
                // Whether each could start at once (no dependency, never waited for GPUs): its
                // submit-to-start latency is what the dispatch path costs.
                let prompt: Vec<Option<Millis>> = starts
                    .iter()
                    .map(|(id, _)| {
                        inner
                            .jobs
                            .get(*id)
                            .filter(|j| {
                                j.deps.is_empty() && j.attempt() == 0 && !inner.jobs.has_waited(*id)
                            })
                            .map(|j| j.submitted_at)
                    })
                    .collect();
                let changes = starts
                    .iter()
                    .map(|(id, gpus)| {
                        let start = Transition::Start {
                            gpus: gpus.clone(),
                            at: now,
                            on: Runner::Local,
                        };
                        (*id, start)
                    })
                    .collect();
                // How each is contained, recorded with its start.
                let contained: Vec<(JobId, String)> = starts
                    .iter()
                    .filter_map(|(id, _)| Some((*id, contain(inner.jobs.get(*id)?))))
                    .collect();
                let with_events = |tx: &rusqlite::Transaction<'_>| {
                    for (id, how) in &contained {
                        crate::store::log_event(tx, id.0, now, "contained", how)?;
                    }
                    Ok(())
                };
                let started = match inner.jobs.apply_all(changes, now, with_events) {
                    Ok(started) => started,
                    Err(e) => {
                        // Nothing started; the pass is tried again in a second.
                        tracing::error!("cannot record job starts; not starting them: {e}");
                        self.write_failed(&mut inner, &e);
                        let again = now + 1_000;
                        return (
                            Vec::new(),
                            Some(next_wakeup.map_or(again, |n| n.min(again))),
                        );
                    }
                };
                self.write_succeeded(&mut inner);
                self.metrics.set_queue(
                    (pending.len() - starts.len()) as i64,
                    (running.len() + starts.len()) as i64,
                );
                for ((job, _), submitted_at) in started.into_iter().zip(prompt) {
                    if let Some(at) = submitted_at {
                        self.metrics
                            .observe_schedule_latency((now - at).max(0) as f64 / 1000.0);
                    }
                    self.workflow_task_started(&mut inner, &job);
                    launches.push(job);
                }
            }
            inner.jobs.set_waiting(plan.waiting);
        }
        if cascade || !launches.is_empty() {
            self.notify_changed();
        }
        if cascade {
            // A job failed for its dependency may itself be a dependency.
            self.wake();
        }
        (launches, next_wakeup)
    }
}
