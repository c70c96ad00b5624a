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
            let claim = |claimed: bool, why: String| HookClaim { id, claimed, why };
            // One id the hook misread (a stray number in the output) spoils no other claim.
            let job = match self.own_job(peer, JobId(id), "wake-ups") {
                Ok(job) => job,
                Err(e) => {
                    claims.push(claim(false, e.to_string()));
                    continue;
                }
            };
            // A sweep's run wakes nobody by itself: its sweep's one comparison report does.
            if let Some(run) = job.sweep
                && !self
                    .lock()
                    .jobs
                    .store()
                    .sweep(run.id)
                    .ok()
                    .flatten()
                    .is_some_and(|s| s.notify_each)
            {
                claims.push(claim(
                    false,
                    format!(
                        "job {id} is a run of sweep {}, whose runs' reports are not delivered \
                         one by one; the sweep's comparison report is (`baton sweep wait {}`)",
                        run.id, run.id
                    ),
                ));
                continue;
            }
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
            if let Some(other) = other_live_hook(&job.notify, pid) {
                claims.push(claim(
                    false,
                    format!("the hook of pid {other} delivers it already"),
                ));
                continue;
            }
            let channels = claimed_channels(&job.notify, &hook, req.inbound.as_ref());
            let now = now_ms();
            let why = format!("the Claude Code hook (pid {pid}) wakes the session");
            let mut inner = self.lock();
            let result = if inner.jobs.is_active(job.id) && !inner.unrecorded.jobs.contains(&job.id)
            {
                // Still running: its deliveries are made from these channels when it ends.
                inner
                    .jobs
                    .set_notify(job.id, &channels, now, &why)
                    .map_err(|e| e.to_string())
            } else {
                // Ended already (a quick job): its deliveries exist, and one may have gone out.
                let rows: Vec<Delivery> = match inner.jobs.store().deliveries(job.id) {
                    Ok(rows) => rows
                        .into_iter()
                        .filter(|d| d.subject == crate::store::Subject::Job)
                        .collect(),
                    Err(e) => {
                        claims.push(claim(false, e.to_string()));
                        continue;
                    }
                };
                plan_ended_claim(&rows, req.inbound.as_ref()).and_then(|plan| {
                    inner
                        .jobs
                        .store_mut()
                        .claim_ended(
                            job.id,
                            &channels,
                            plan.before,
                            plan.correct,
                            &hook,
                            now,
                            &why,
                        )
                        .map(drop)
                        .map_err(|e| e.to_string())
                })
            };
            claims.push(match result {
                Ok(()) => claim(true, "the hook wakes the session".into()),
                Err(why) => claim(false, why),
            });
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
            let job = self.own_job(peer, JobId(id), "wake-ups")?;
            let rows = self.lock().jobs.store().deliveries(job.id)?;
            // The job's own report: the hook prints no workflow summary.
            for d in rows
                .into_iter()
                .filter(|d| d.subject == crate::store::Subject::Job)
            {
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

/// A hook other than `pid` that claimed the job and still runs.
fn other_live_hook(channels: &[Channel], pid: u32) -> Option<u32> {
    channels.iter().find_map(|c| match c {
        Channel::ClaudeHook {
            pid: other,
            started,
            ..
        } if *other != pid && crate::procinfo::is_alive(*other, *started) => Some(*other),
        _ => None,
    })
}

/// How the hook joins the wake chain of a job that has ended.
#[derive(Debug, PartialEq)]
pub struct EndedClaim {
    /// The link the hook comes right after (the inbox), or none: the hook leads the chain.
    pub before: Option<i64>,
    /// The inbox's state as the hook learnt it (it was sent, or about to be, and the session
    /// only holds or refuses it).
    pub correct: Option<(i64, DeliveryState, String)>,
}

/// Whether, and how, the hook may take over the wake-up of an ended job from its deliveries;
/// the error says what reached, or is reaching, the session instead. Pure.
pub fn plan_ended_claim(rows: &[Delivery], learnt: Option<&Inbound>) -> Result<EndedClaim, String> {
    let is_inbox = |d: &Delivery| matches!(d.channel, Channel::Claude { .. });
    for d in rows
        .iter()
        .filter(|d| d.channel.is_session() && !is_inbox(d))
    {
        match d.state {
            DeliveryState::Delivered => {
                return Err(format!(
                    "{} reached the session already",
                    d.channel.public_spec()
                ));
            }
            // Being sent now (the inbox passed the wake on before the hook asked).
            DeliveryState::Pending => {
                return Err(format!(
                    "{} is delivering to the session",
                    d.channel.public_spec()
                ));
            }
            _ => {}
        }
    }
    let Some(inbox) = rows.iter().find(|d| is_inbox(d)) else {
        return Ok(EndedClaim {
            before: None,
            correct: None,
        });
    };
    let known = match &inbox.channel {
        Channel::Claude { inbound, .. } => inbound.as_ref(),
        _ => None,
    };
    let correct = match learnt.or(known) {
        Some(inbound)
            if matches!(
                inbox.state,
                DeliveryState::Pending | DeliveryState::Delivered
            ) =>
        {
            let (state, why) = match inbound {
                Inbound::Held { why } => (DeliveryState::Held, why.clone()),
                Inbound::Refused { why } => (DeliveryState::Refused, why.clone()),
            };
            Some((inbox.id, state, why))
        }
        _ => None,
    };
    Ok(EndedClaim {
        before: Some(inbox.id),
        correct,
    })
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

    fn row(id: i64, channel: Channel, state: DeliveryState) -> Delivery {
        Delivery {
            id,
            job: JobId(1),
            subject: crate::store::Subject::Job,
            channel,
            state,
            attempts: 0,
            next_at: 0,
            error: None,
            delivered_at: None,
            after: None,
        }
    }

    #[test]
    fn an_ended_job_is_claimed_only_if_nothing_else_reached_or_is_reaching_the_session() {
        let held = Inbound::Held {
            why: "bypass".into(),
        };
        let tmux = Channel::Tmux {
            pane: "%1".into(),
            server: None,
        };
        let file = Channel::File { path: "/i".into() };
        // The inbox "delivered" (its socket took it), the pane stood by: the hook takes over,
        // and the inbox's delivery is corrected to what the session did with it.
        let rows = [
            row(1, claude(None), DeliveryState::Delivered),
            row(2, tmux.clone(), DeliveryState::Unneeded),
            row(3, file.clone(), DeliveryState::Delivered),
        ];
        let plan = plan_ended_claim(&rows, Some(&held)).unwrap();
        assert_eq!(
            plan,
            EndedClaim {
                before: Some(1),
                correct: Some((1, DeliveryState::Held, "bypass".into()))
            }
        );
        // Known held at submit: nothing was sent, and the pane took over at once: it wakes the
        // session, the hook must not.
        let rows = [
            row(1, claude(Some(held.clone())), DeliveryState::Held),
            row(2, tmux.clone(), DeliveryState::Pending),
        ];
        let e = plan_ended_claim(&rows, None).unwrap_err();
        assert!(e.contains("tmux:%1 is delivering"), "{e}");
        let rows = [
            row(1, claude(Some(held.clone())), DeliveryState::Held),
            row(2, tmux.clone(), DeliveryState::Delivered),
        ];
        assert!(
            plan_ended_claim(&rows, None)
                .unwrap_err()
                .contains("reached")
        );
        // A pane that was gone leaves the wake to the hook; without an inbox the hook leads.
        let rows = [
            row(1, claude(Some(held)), DeliveryState::Held),
            row(2, tmux, DeliveryState::Skipped),
        ];
        assert_eq!(plan_ended_claim(&rows, None).unwrap().before, Some(1));
        let rows = [row(3, file, DeliveryState::Delivered)];
        assert_eq!(plan_ended_claim(&rows, None).unwrap().before, None);
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
