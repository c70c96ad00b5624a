//! The daemon's side of the Claude Code hook (`baton agent wait-hook`). Claude Code closes its
//! inbox socket the same way whether it started a turn, held the message for a person or
//! refused it, so the socket cannot say; the hook can (its stdin has the session's permission
//! mode, the settings files say `crossSessionInbound`). Where the inbox will not start a turn,
//! the hook claims the job: the job's `claude` channel is marked held or refused, and a
//! `claude-hook` link takes its place in the wake chain, so that a later link (tmux) stands by
//! for the hook instead of waking the session a second time. The hook then waits for the job,
//! prints its report (which starts the turn) and says so here.

use std::sync::Arc;

use baton_core::JobId;

use super::{ApiError, Daemon, Peer, now_ms};
use crate::api::{HookClaim, HookClaimRequest};
use crate::notify::{Channel, Inbound};
use crate::store::{Delivery, DeliveryState};

/// A job's channels once the hook has claimed it: the `claude` channel (if any) marked with
/// what the hook learnt, and the hook right after it, or first in the chain without one. Pure.
pub fn claimed_channels(
    channels: &[Channel],
    hook: &Channel,
    inbound: Option<&Inbound>,
) -> Vec<Channel> {
    let mut out: Vec<Channel> = channels
        .iter()
        .filter(|c| !matches!(c, Channel::ClaudeHook { .. }))
        .cloned()
        .collect();
    let at = match out.iter().position(|c| matches!(c, Channel::Claude { .. })) {
        Some(i) => {
            if let (Channel::Claude { inbound: known, .. }, Some(learnt)) = (&mut out[i], inbound) {
                *known = Some(learnt.clone());
            }
            i + 1
        }
        None => out
            .iter()
            .position(Channel::is_session)
            .unwrap_or(out.len()),
    };
    out.insert(at, hook.clone());
    out
}

/// Whether the inbox channel among `channels` would start a turn itself.
fn inbox_wakes(channels: &[Channel], learnt: Option<&Inbound>) -> bool {
    learnt.is_none()
        && channels
            .iter()
            .any(|c| matches!(c, Channel::Claude { inbound: None, .. }))
}

impl Daemon {
    /// Claims the wake-up of each job for the calling hook, where the hook is needed.
    pub(crate) fn claim_for_hook(
        self: &Arc<Self>,
        peer: &Peer,
        req: &HookClaimRequest,
    ) -> Result<Vec<HookClaim>, ApiError> {
        let Some(pid) = peer.pid else {
            return Err(ApiError::BadRequest(
                "the kernel did not say which process is calling; only the hook can claim".into(),
            ));
        };
        let Some(started) = crate::procinfo::start_time(pid) else {
            return Err(ApiError::BadRequest(format!(
                "process {pid} (the caller) cannot be seen in /proc"
            )));
        };
        let hook = Channel::ClaudeHook {
            session: req.session.clone(),
            pid,
            started,
        };
        let session = format!("claude:{}", req.session);
        let mut claims = Vec::new();
        for &id in &req.ids {
            let job = self.readable_job(peer, JobId(id), "wake-ups")?;
            let claim = |claimed: bool, why: String| HookClaim { id, claimed, why };
            if job.session.as_deref() != Some(session.as_str()) {
                claims.push(claim(
                    false,
                    format!("job {id} was not submitted from this session"),
                ));
                continue;
            }
            if inbox_wakes(&job.notify, req.inbound.as_ref()) {
                claims.push(claim(false, "the session's inbox wakes it".into()));
                continue;
            }
            let channels = claimed_channels(&job.notify, &hook, req.inbound.as_ref());
            let now = now_ms();
            let mut inner = self.lock();
            inner.store.set_notify(
                job.id,
                &channels,
                now,
                &format!("the Claude Code hook (pid {pid}) wakes the session"),
            )?;
            if let Some(active) = inner.active.get_mut(&job.id) {
                active.notify = channels;
                claims.push(claim(true, "the hook wakes the session".into()));
                continue;
            }
            // Ended already (a quick job): its deliveries exist, and one may have gone out.
            let rows: Vec<Delivery> = inner
                .store
                .deliveries(job.id)?
                .into_iter()
                .filter(|d| d.workflow.is_none())
                .collect();
            claims.push(
                match claim_ended(&mut inner.store, &rows, &hook, req, now)? {
                    Ok(()) => claim(true, "the hook wakes the session".into()),
                    Err(why) => claim(false, why),
                },
            );
        }
        self.outbox_wake.notify_one();
        Ok(claims)
    }

    /// The hook printed the reports of `ids` and is about to exit 2: its deliveries are done.
    pub(crate) fn hook_delivered(
        self: &Arc<Self>,
        peer: &Peer,
        ids: &[u64],
    ) -> Result<(), ApiError> {
        for &id in ids {
            let job = self.readable_job(peer, JobId(id), "wake-ups")?;
            let rows = self.lock().store.deliveries(job.id)?;
            for d in rows {
                let mine =
                    matches!(d.channel, Channel::ClaudeHook { pid, .. } if Some(pid) == peer.pid);
                if mine && matches!(d.state, DeliveryState::Pending | DeliveryState::Standby) {
                    self.record(&job, &d, crate::notify::Outcome::Delivered);
                }
            }
        }
        Ok(())
    }
}

/// Puts the hook into the wake chain of a job that has ended, unless another link has woken
/// the session already (the error says which).
fn claim_ended(
    store: &mut crate::store::Store,
    rows: &[Delivery],
    hook: &Channel,
    req: &HookClaimRequest,
    now: baton_core::Millis,
) -> Result<Result<(), String>, ApiError> {
    let is_inbox = |d: &&Delivery| matches!(d.channel, Channel::Claude { .. });
    if let Some(woke) = rows
        .iter()
        .find(|d| d.channel.is_session() && !is_inbox(d) && d.state == DeliveryState::Delivered)
    {
        return Ok(Err(format!(
            "{} reached the session already",
            woke.channel.public_spec()
        )));
    }
    if rows.iter().any(|d| {
        matches!(d.channel, Channel::ClaudeHook { .. }) && d.state == DeliveryState::Pending
    }) {
        return Ok(Ok(()));
    }
    let inbox = rows.iter().find(is_inbox);
    let before = match inbox {
        Some(d) => {
            // Sent, or about to be: the session holds or refuses it, whatever the socket said.
            let (state, why) = match &req.inbound {
                Some(Inbound::Refused { why }) => (DeliveryState::Refused, why.clone()),
                Some(Inbound::Held { why }) => (DeliveryState::Held, why.clone()),
                None => match &d.channel {
                    Channel::Claude {
                        inbound: Some(Inbound::Refused { why }),
                        ..
                    } => (DeliveryState::Refused, why.clone()),
                    Channel::Claude {
                        inbound: Some(Inbound::Held { why }),
                        ..
                    } => (DeliveryState::Held, why.clone()),
                    _ => (d.state, String::new()),
                },
            };
            if matches!(d.state, DeliveryState::Pending | DeliveryState::Delivered) {
                store.correct_delivery(d.id, state, &why)?;
            }
            Some(d.id)
        }
        None => {
            // No inbox: the hook leads the chain, unless a link is still under way.
            if rows.iter().any(|d| {
                d.channel.is_session()
                    && matches!(d.state, DeliveryState::Pending | DeliveryState::Standby)
            }) {
                return Ok(Err(
                    "another channel of the job is delivering to the session".into(),
                ));
            }
            None
        }
    };
    let Some(job) = rows.first().map(|d| d.job) else {
        return Ok(Err("the job has no deliveries".into()));
    };
    store.insert_chain_link(job, None, before, hook, now)?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude(inbound: Option<Inbound>) -> Channel {
        Channel::Claude {
            socket: "/s".into(),
            token: "t".into(),
            session: Some("s".into()),
            inbound,
        }
    }

    #[test]
    fn the_hook_takes_the_inbox_place_in_the_chain() {
        let hook = Channel::ClaudeHook {
            session: "s".into(),
            pid: 9,
            started: 1,
        };
        let tmux = Channel::Tmux {
            pane: "%1".into(),
            server: None,
        };
        let file = Channel::File { path: "/i".into() };
        let held = Inbound::Held {
            why: "bypass".into(),
        };
        let got = claimed_channels(
            &[claude(None), tmux.clone(), file.clone()],
            &hook,
            Some(&held),
        );
        assert_eq!(
            got,
            [
                claude(Some(held.clone())),
                hook.clone(),
                tmux.clone(),
                file.clone()
            ]
        );
        // Without an inbox the hook leads the chain; claimed twice, it is there once.
        let got = claimed_channels(&[file.clone(), tmux.clone()], &hook, None);
        let again = claimed_channels(&got, &hook, None);
        assert_eq!(again, [file.clone(), hook.clone(), tmux]);
        assert!(inbox_wakes(&[claude(None)], None));
        assert!(!inbox_wakes(&[claude(None)], Some(&held)));
        assert!(!inbox_wakes(&[claude(Some(held))], None));
        assert!(!inbox_wakes(&[file], None));
    }
}
