//! A shared server's rules in a trace replay (issue 19): a GPU-hour budget per user and period,
//! and a reservation, so that an admin can see what they would do to waiting times before
//! setting them. The replay ([`super::replay`]) applies them through the same scheduling pass
//! as the daemon ([`crate::scheduler::plan_with_reservations`]).
//!
//! A trace has no users, so each job is given one of `users` synthetic owners, by a hash of its
//! name (the same job has the same owner in every replay). The budget is counted as the daemon
//! counts it: every GPU a job held, for as long as it held it within the period; periods are
//! fixed lengths from the first arrival. The reservation is for one of the synthetic users: that
//! user's jobs arriving while it stands, whose time limits fit in what is left of the window,
//! run in it.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::limits::{Account, BudgetUse, Limits, Period};
use crate::model::{JobId, Millis, PendingJob};
use crate::placement::Occupancy;
use crate::windows::{Window, choose_gpus};

use super::SimError;
use super::trace::TraceJob;

/// The rules a replay applies; the default is none.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rules {
    /// How many synthetic users the trace's jobs are spread over.
    pub users: u32,
    pub budget: Option<Budget>,
    pub reservation: Option<Reservation>,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            users: DEFAULT_USERS,
            budget: None,
            reservation: None,
        }
    }
}

impl Rules {
    pub fn any(&self) -> bool {
        self.budget.is_some() || self.reservation.is_some()
    }

    /// Refuses rules that could not be applied on `cluster` (a reservation of more GPUs than a
    /// node has, for a user there is not), before any replay runs.
    pub fn check(&self, cluster: &super::Cluster) -> Result<(), SimError> {
        Applied::new(*self, &[], &Occupancy::new(&cluster.gpus())).map(|_| ())
    }
}

/// Synthetic users when none are given.
pub const DEFAULT_USERS: u32 = 10;

/// GPU-hours each user may hold per period.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub gpu_hours: f64,
    pub period: Period,
}

impl Budget {
    /// The period's length in the simulation (a month is 30 days).
    pub fn period_ms(&self) -> Millis {
        const DAY: Millis = 86_400_000;
        match self.period {
            Period::Day => DAY,
            Period::Week => 7 * DAY,
            Period::Month => 30 * DAY,
        }
    }

    fn budget_ms(&self) -> i64 {
        (self.gpu_hours * 3_600_000.0).round() as i64
    }
}

/// `gpus` GPUs kept for synthetic user `user` from `start` (after the first arrival) for
/// `duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub gpus: u32,
    pub start: Millis,
    pub duration: Millis,
    pub user: u32,
}

/// What the rules did in one replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    /// Jobs that waited at least one pass because their owner's budget was used up.
    pub held_by_budget: usize,
    /// Jobs submitted into the reservation; of them, those that ran in it and those its window
    /// ended before they could start (they never ran).
    pub reserved: usize,
    pub reserved_ran: usize,
    pub reserved_missed: usize,
    /// Of those that ran, the ones stopped at the window's end before their run time was up
    /// (the daemon ends them `timeout`); they count as done at that moment.
    pub reserved_cut: usize,
    /// The mean wait of the jobs that ran in the reservation, and of all the others (jobs that
    /// never ran are in neither: see `reserved_missed`).
    pub reserved_avg_wait_s: f64,
    pub outside_avg_wait_s: f64,
}

/// The synthetic owner of a job: FNV-1a of its name, modulo `users`.
pub fn owner_of(job: &TraceJob, users: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in job.name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(users.max(1))) as u32
}

/// The rules' state during a replay.
pub(super) struct Applied {
    rules: Rules,
    /// Each job's owner (by its index in the trace).
    owners: Vec<u32>,
    /// The reservation's window, once chosen.
    pub(super) windows: Vec<Window>,
    /// When the current budget period began, and the GPU-ms each user's ended jobs held in it.
    period_start: Millis,
    used: Vec<i64>,
}

impl Applied {
    pub(super) fn new(
        rules: Rules,
        jobs: &[TraceJob],
        cluster: &Occupancy,
    ) -> Result<Applied, SimError> {
        if rules.users == 0 {
            return Err(SimError::Options("there must be at least one user".into()));
        }
        if let Some(b) = rules.budget
            && !(b.gpu_hours.is_finite() && b.gpu_hours > 0.0)
        {
            return Err(SimError::Options(
                "a budget is a positive number of GPU-hours".into(),
            ));
        }
        let t0 = jobs.first().map_or(0, |j| j.arrival);
        let mut windows = Vec::new();
        if let Some(r) = rules.reservation {
            if r.user >= rules.users {
                return Err(SimError::Options(format!(
                    "the reservation's user is one of 0 to {} (there are {} users)",
                    rules.users - 1,
                    rules.users
                )));
            }
            let (start, end) = (t0 + r.start, t0 + r.start.saturating_add(r.duration));
            let chosen = choose_gpus(cluster, &[], &[], r.gpus, start, end)
                .map_err(|e| SimError::Options(format!("the reservation: {e}")))?;
            windows.push(Window {
                id: 1,
                name: format!("user{}", r.user),
                gpus: chosen.gpus,
                start,
                end,
            });
        }
        Ok(Applied {
            owners: jobs.iter().map(|j| owner_of(j, rules.users)).collect(),
            rules,
            windows,
            period_start: t0,
            used: vec![0; rules.users as usize],
        })
    }

    /// The reservation a job arriving `now` with time limit `limit` runs in: its owner's, if it
    /// is on and the job's limit fits in what is left of it.
    pub(super) fn window_for(&self, i: usize, now: Millis, limit: Millis) -> Option<u64> {
        let r = self.rules.reservation?;
        let w = self.windows.first()?;
        (self.owners[i] == r.user && w.has_begun(now) && now.saturating_add(limit) <= w.end)
            .then_some(w.id)
    }

    /// Starts the budget period `now` is in, if a new one began.
    pub(super) fn roll(&mut self, now: Millis) {
        let Some(b) = self.rules.budget else {
            return;
        };
        let length = b.period_ms();
        if now >= self.period_start + length {
            self.period_start += (now - self.period_start) / length * length;
            self.used.iter_mut().for_each(|u| *u = 0);
        }
    }

    /// A job of the trace's `i` held `gpus` GPUs from `start` until `end`.
    pub(super) fn ended(&mut self, i: usize, gpus: u32, start: Millis, end: Millis) {
        if self.rules.budget.is_some() {
            let held = end - start.max(self.period_start);
            self.used[self.owners[i] as usize] += i64::from(gpus) * held.max(0);
        }
    }

    /// The limits of this pass: the budgets of the users whose budget is used up, counting
    /// their running jobs (`(index, GPUs, start)`) to `now`, and when the period ends.
    pub(super) fn limits(
        &self,
        now: Millis,
        running: impl Iterator<Item = (usize, u32, Millis)>,
        queued: &[PendingJob],
        index: impl Fn(JobId) -> usize,
    ) -> (Limits, Option<Millis>) {
        let Some(b) = self.rules.budget else {
            return (Limits::default(), None);
        };
        let mut used = self.used.clone();
        for (i, gpus, start) in running {
            used[self.owners[i] as usize] += i64::from(gpus) * (now - start.max(self.period_start));
        }
        let budget_ms = b.budget_ms();
        let resets_at = self.period_start + b.period_ms();
        let mut limits = Limits::default();
        let mut budgets: HashMap<u32, Account> = HashMap::new();
        for (user, &u) in used.iter().enumerate() {
            if u >= budget_ms {
                let account = Account::User(user as u32);
                limits.budgets.insert(
                    account.clone(),
                    BudgetUse {
                        who: format!("user{user}"),
                        used_ms: u,
                        budget_ms,
                        period: b.period,
                        since: self.period_start,
                        resets_at,
                        resets: format!("at {} s", resets_at / 1000),
                        setting: format!("--budget {}", b.gpu_hours),
                    },
                );
                budgets.insert(user as u32, account);
            }
        }
        if budgets.is_empty() {
            return (limits, None);
        }
        for job in queued {
            if let Some(account) = budgets.get(&self.owners[index(job.id)]) {
                limits.accounts_of.insert(job.id, vec![account.clone()]);
            }
        }
        (limits, Some(resets_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, arrival: Millis) -> TraceJob {
        TraceJob {
            name: name.into(),
            line: 0,
            arrival,
            run_time: 1_000,
            gpus: 1,
            gpu_milli: 1000,
        }
    }

    #[test]
    fn owners_are_spread_by_name_and_stable() {
        let jobs: Vec<TraceJob> = (0..200).map(|i| job(&format!("pod-{i}"), 0)).collect();
        let owners: Vec<u32> = jobs.iter().map(|j| owner_of(j, 4)).collect();
        for user in 0..4 {
            let n = owners.iter().filter(|&&o| o == user).count();
            assert!((25..=75).contains(&n), "user {user} owns {n} of 200");
        }
        assert_eq!(owner_of(&jobs[7], 4), owners[7]);
    }

    #[test]
    fn a_budget_counts_what_was_held_in_the_period_and_resets_with_it() {
        let jobs = vec![job("a", 0)];
        let rules = Rules {
            users: 1,
            budget: Some(Budget {
                gpu_hours: 1.0,
                period: Period::Day,
            }),
            reservation: None,
        };
        let cluster = Occupancy::new(&[]);
        let mut applied = Applied::new(rules, &jobs, &cluster).unwrap();
        let queued = [PendingJob::new(
            JobId(1),
            0,
            0,
            crate::ResourceRequest::whole(1),
            None,
            vec![],
        )];
        // Two GPUs for half an hour: used up.
        applied.ended(0, 2, 0, 1_800_000);
        let (limits, resets) = applied.limits(1_800_000, std::iter::empty(), &queued, |_| 0);
        assert!(limits.budget_spent(JobId(1)).is_some());
        assert_eq!(resets, Some(86_400_000));
        // A running job counts to now too; a new day starts from nothing.
        applied.roll(86_400_000);
        let running = [(0, 1, 0)];
        let (limits, _) = applied.limits(
            86_400_000 + 1_800_000,
            running.iter().copied(),
            &queued,
            |_| 0,
        );
        assert!(limits.budget_spent(JobId(1)).is_none());
        let (limits, _) = applied.limits(
            86_400_000 + 3_600_000,
            running.iter().copied(),
            &queued,
            |_| 0,
        );
        assert!(limits.budget_spent(JobId(1)).is_some());
    }
}
