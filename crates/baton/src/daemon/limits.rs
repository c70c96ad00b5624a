//! The `[limits]` caps as the scheduling pass and submissions see them (issue 19): each user's
//! caps resolved from config.toml (their own `[limits.users.NAME]`, their groups', then
//! `[limits]`), cached per uid for the daemon's life (a change of groups or of config.toml takes
//! a restart, as the config does), and every active job's accounts (its owner, its agent
//! session). The caps themselves are checked by the pure core (`baton_core::limits`).

use std::collections::HashMap;
use std::sync::Arc;

use baton_core::JobState;
use baton_core::Millis;
use baton_core::limits::{Account, AccountCap, BudgetUse, LimitHit, Limits, gpu_hours};
use baton_core::model::ResourceRequest;

use super::{ApiError, Daemon, Inner};
use crate::config::{BudgetMode, GpuHours, ResolvedCaps};
use crate::users;

/// Each user's resolved caps, as first asked for.
#[derive(Default)]
pub(super) struct CapsCache(std::sync::Mutex<HashMap<u32, Arc<ResolvedCaps>>>);

impl Daemon {
    /// The caps of user `uid`.
    pub(crate) fn user_caps(&self, uid: u32) -> Arc<ResolvedCaps> {
        let mut cache = self.caps.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(caps) = cache.get(&uid) {
            return Arc::clone(caps);
        }
        let (name, groups) = match users::by_uid(uid) {
            Some(account) => {
                let groups = users::groups_of(&account)
                    .into_iter()
                    .filter_map(users::group_name)
                    .collect();
                (account.name, groups)
            }
            None => (uid.to_string(), Vec::new()),
        };
        let caps = Arc::new(self.config.limits.caps_for(&name, &groups));
        cache.insert(uid, Arc::clone(&caps));
        caps
    }

    /// Every active job's accounts and the caps of those that have one: what the scheduling
    /// pass checks (empty when `[limits]` caps nothing).
    pub(super) fn limits_for(&self, inner: &Inner) -> Limits {
        let mut limits = Limits::default();
        if !self.config.limits.caps_anything() {
            return limits;
        }
        let session_cap = self.config.limits.session_cap();
        for job in inner.jobs.active() {
            let user = Account::User(job.owner_uid);
            if !limits.caps.contains_key(&user)
                && let Some(cap) = &self.user_caps(job.owner_uid).held
            {
                limits.caps.insert(user.clone(), cap.clone());
            }
            let mut accounts = vec![user];
            if let (Some(session), Some(cap)) = (&job.session, session_cap) {
                let account = Account::Session(session.clone());
                limits.caps.entry(account.clone()).or_insert_with(|| {
                    AccountCap::new(format!("agent session {session}"), "[limits]", cap)
                });
                accounts.push(account);
            }
            for (group, _) in &self.user_caps(job.owner_uid).group_budgets {
                accounts.push(Account::Group(group.clone()));
            }
            limits.accounts_of.insert(job.id, accounts);
        }
        let now = crate::clock::now_ms();
        let owners: std::collections::BTreeSet<u32> =
            inner.jobs.active().map(|j| j.owner_uid).collect();
        let mut groups: std::collections::BTreeSet<String> = Default::default();
        for uid in owners {
            if let Some(budget) = self.budget_use(inner, uid, now) {
                limits.budgets.insert(Account::User(uid), budget);
            }
            groups.extend(
                self.user_caps(uid)
                    .group_budgets
                    .iter()
                    .map(|g| g.0.clone()),
            );
        }
        for group in groups {
            if let Some(budget) = self.group_budget_use(inner, &group, now) {
                limits.budgets.insert(Account::Group(group), budget);
            }
        }
        limits
    }

    /// What group `group`'s members have used together of its pooled GPU-hour budget this
    /// period (`[limits.groups.NAME] gpu_hours_per_group`): every member's ended attempts'
    /// holds from the store, and their running jobs' until `now`.
    pub(crate) fn group_budget_use(
        &self,
        inner: &Inner,
        group: &str,
        now: Millis,
    ) -> Option<BudgetUse> {
        let GpuHours(budget_ms) = self.config.limits.groups.get(group)?.gpu_hours_per_group?;
        let member = |uid: u32| {
            self.user_caps(uid)
                .group_budgets
                .iter()
                .any(|(g, _)| g == group)
        };
        let ended = |since| {
            inner
                .jobs
                .store()
                .gpu_ms_held_since_by_owner(since)
                .unwrap_or_else(|e| {
                    tracing::warn!(group, "cannot read GPU-hours held: {e}");
                    Vec::new()
                })
                .into_iter()
                .filter(|(uid, _)| member(*uid))
                .map(|(_, ms)| ms)
                .sum()
        };
        Some(self.period_use(
            inner,
            now,
            (format!("group {group}"), budget_ms),
            format!(
                "[limits.groups.{group}] gpu_hours_per_group = {}",
                gpu_hours(budget_ms)
            ),
            (ended, &member),
        ))
    }

    /// What the owners `whose` picks used this period of a budget of `budget_ms` that `who`
    /// has: `ended(since)` GPU-ms from the store, and their running jobs' until `now`.
    fn period_use(
        &self,
        inner: &Inner,
        now: Millis,
        (who, budget_ms): (String, i64),
        setting: String,
        (ended, whose): (impl FnOnce(Millis) -> i64, &dyn Fn(u32) -> bool),
    ) -> BudgetUse {
        let period = self.config.limits.budget_period;
        let (since, resets_at, resets) = crate::clock::period_bounds(now, period);
        let running: i64 = inner
            .jobs
            .active()
            .filter(|j| j.state() == JobState::Running && whose(j.owner_uid))
            .filter_map(|j| Some(j.gpus_held() * (now - j.started_at()?.max(since)).max(0)))
            .sum();
        BudgetUse {
            who,
            used_ms: ended(since) + running,
            budget_ms,
            period,
            since,
            resets_at,
            resets,
            setting,
        }
    }

    /// The pooled budgets of user `uid`'s groups, this period.
    pub(crate) fn group_budgets_of(&self, inner: &Inner, uid: u32, now: Millis) -> Vec<BudgetUse> {
        self.user_caps(uid)
            .group_budgets
            .iter()
            .filter_map(|(group, _)| self.group_budget_use(inner, group, now))
            .collect()
    }

    /// What user `uid` has used of its GPU-hour budget this period, if it has one: its ended
    /// attempts' holds from the store, and its running jobs' until `now`.
    pub(crate) fn budget_use(&self, inner: &Inner, uid: u32, now: Millis) -> Option<BudgetUse> {
        let (GpuHours(budget_ms), source) = self.user_caps(uid).budget.clone()?;
        let ended = |since| {
            inner
                .jobs
                .store()
                .gpu_ms_held_since(uid, since)
                .unwrap_or_else(|e| {
                    tracing::warn!(uid, "cannot read GPU-hours held: {e}");
                    0
                })
        };
        Some(self.period_use(
            inner,
            now,
            (users::name_of(uid), budget_ms),
            format!("{source} gpu_hours_per_user = {}", gpu_hours(budget_ms)),
            (ended, &|owner| owner == uid),
        ))
    }

    /// Refuses a request that user `uid` (or its agent `session`) could never run under its
    /// caps, or one over `max_gpus_per_job`.
    pub(super) fn check_caps(
        &self,
        uid: u32,
        session: Option<&str>,
        request: &ResourceRequest,
    ) -> Result<(), ApiError> {
        if !self.config.limits.caps_anything() {
            return Ok(());
        }
        if let Some((max, source)) = &self.user_caps(uid).max_gpus_per_job
            && request.count > *max
        {
            return Err(ApiError::BadRequest(format!(
                "this job asks for {} GPUs; a job may ask for at most {max} here ({source} \
                 max_gpus_per_job = {max})",
                request.count
            )));
        }
        self.check_held_caps(uid, session, request)
    }

    /// Refuses what user `uid` (or its agent `session`) could never hold at once under its
    /// caps: one job's request, or all of an atomic workflow's together.
    pub(super) fn check_held_caps(
        &self,
        uid: u32,
        session: Option<&str>,
        request: &ResourceRequest,
    ) -> Result<(), ApiError> {
        if !self.config.limits.caps_anything() {
            return Ok(());
        }
        let caps = self.user_caps(uid);
        let never = |hit: LimitHit| {
            ApiError::BadRequest(format!(
                "this job can never start: alone it is over a limit ({})",
                hit.setting
            ))
            .with_hint(format!(
                "it asks for more than {} may hold at once; ask for less, or ask an admin",
                hit.who
            ))
        };
        if let Some(cap) = &caps.held
            && let Some(hit) = Limits::never_fits(&Account::User(uid), cap, request)
        {
            return Err(never(hit));
        }
        if let (Some(session), Some(cap)) = (session, self.config.limits.session_cap()) {
            let account = Account::Session(session.to_string());
            let cap = AccountCap::new(format!("agent session {session}"), "[limits]", cap);
            if let Some(hit) = Limits::never_fits(&account, &cap, request) {
                return Err(never(hit));
            }
        }
        Ok(())
    }

    /// Refuses a submission of user `uid` that asks for GPUs (`asks_gpus`) while its GPU-hour
    /// budget is used up and `budget_mode = "refuse"`.
    pub(super) fn check_budget(
        &self,
        inner: &Inner,
        uid: u32,
        asks_gpus: bool,
    ) -> Result<(), ApiError> {
        let now = crate::clock::now_ms();
        if asks_gpus
            && self.config.limits.caps_anything()
            && self.config.limits.budget_mode == BudgetMode::Refuse
            && let Some(budget) = self
                .budget_use(inner, uid, now)
                .into_iter()
                .chain(self.group_budgets_of(inner, uid, now))
                .find(BudgetUse::spent)
        {
            return Err(ApiError::BadRequest(format!(
                "GPU-hour budget used up: {budget}; GPU jobs are refused until then \
                 ([limits] budget_mode = \"refuse\")"
            ))
            .with_hint("see `baton usage`; ask an admin for more, or wait for the reset"));
        }
        Ok(())
    }

    /// Refuses `adding` more queued jobs of user `uid` past its `max_queued_per_user`.
    pub(super) fn check_queue_room(
        &self,
        inner: &Inner,
        uid: u32,
        adding: usize,
    ) -> Result<(), ApiError> {
        if !self.config.limits.caps_anything() {
            return Ok(());
        }
        let Some((max, source)) = self.user_caps(uid).max_queued.clone() else {
            return Ok(());
        };
        let queued = inner
            .jobs
            .active()
            .filter(|j| j.owner_uid == uid && j.state() == JobState::Queued)
            .count();
        if queued + adding > max as usize {
            return Err(ApiError::BadRequest(format!(
                "{} has {queued} jobs queued; with {adding} more that is over the most one user \
                 may queue ({source} max_queued_per_user = {max})",
                users::name_of(uid)
            ))
            .with_hint("wait for some to start or end, or cancel some"));
        }
        Ok(())
    }
}
