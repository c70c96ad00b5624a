//! The `[limits]` caps as the scheduling pass and submissions see them (issue 19): each user's
//! caps resolved from config.toml (their own `[limits.users.NAME]`, their groups', then
//! `[limits]`), cached per uid for the daemon's life (a change of groups or of config.toml takes
//! a restart, as the config does), and every active job's accounts (its owner, its agent
//! session). The caps themselves are checked by the pure core (`baton_core::limits`).

use std::collections::HashMap;
use std::sync::Arc;

use baton_core::JobState;
use baton_core::limits::{Account, AccountCap, LimitHit, Limits};
use baton_core::model::ResourceRequest;

use super::{ApiError, Daemon, Inner};
use crate::config::ResolvedCaps;
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
            limits.accounts_of.insert(job.id, accounts);
        }
        limits
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
