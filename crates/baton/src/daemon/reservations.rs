//! Reservations on this machine (`baton reserve`, issue 19): the recent ones, kept under the
//! daemon's lock beside the jobs, whose standing ones are the scheduling pass's windows; who
//! may make and cancel one; and the reservation a submission names, checked before its job is
//! queued.

use baton_core::windows::{GpuList, Window};
use baton_core::{JobId, JobState, Millis, ResourceRequest};

use super::{ApiError, Daemon, Inner, Peer};
use crate::api::ReservationView;
use crate::daemon::views::rfc3339;
use crate::store::{InReservation, ReservationRecord};

/// How long an ended or cancelled reservation stays listed (`baton reservations --all`) and
/// named in the reasons of its jobs.
pub(crate) const KEPT_MS: Millis = 7 * 86_400_000;

impl Daemon {
    /// The windows of the reservations standing at `now`.
    pub(crate) fn windows(&self, inner: &Inner, now: Millis) -> Vec<Window> {
        inner
            .reservations
            .iter()
            .filter(|r| r.stands(now))
            .map(ReservationRecord::window)
            .collect()
    }

    /// Whether `peer` may make reservations for anyone and cancel any: root, the admins, and
    /// on a personal daemon its user.
    pub(crate) fn manages_reservations(&self, peer: &Peer) -> bool {
        !self.config.system || peer.is_root() || self.admin_uids.contains(&peer.uid)
    }

    /// The reservation a submission names (`--reservation NAME`), if its job may run there: it
    /// stands, it is for the job's owner (root and the admins may use any), and it has the
    /// GPUs the job asks for.
    pub(crate) fn job_reservation(
        &self,
        peer: &Peer,
        name: &str,
        request: &ResourceRequest,
    ) -> Result<InReservation, ApiError> {
        if !self.places_here() {
            return Err(ApiError::BadRequest(
                "--reservation: this daemon sends its jobs to Slurm, whose own reservations \
                 apply there"
                    .into(),
            )
            .with_hint("ask the cluster's admins for a Slurm reservation (sbatch --reservation)"));
        }
        let now = crate::clock::now_ms();
        let inner = self.lock();
        // The one standing by that name, else the last made.
        let named = || inner.reservations.iter().filter(|r| r.made.name == name);
        let Some(r) = named()
            .find(|r| r.stands(now))
            .or_else(|| named().max_by_key(|r| r.id))
        else {
            let standing: Vec<&str> = inner
                .reservations
                .iter()
                .filter(|r| r.stands(now))
                .map(|r| r.made.name.as_str())
                .collect();
            return Err(ApiError::BadRequest(format!(
                "--reservation {name:?}: no such reservation ({})",
                if standing.is_empty() {
                    "there are none now; see `baton reserve`".to_string()
                } else {
                    format!("there are: {}", standing.join(", "))
                }
            )));
        };
        if let Some((at, by)) = &r.cancelled {
            return Err(ApiError::BadRequest(format!(
                "--reservation {name}: it was cancelled by {by} at {}",
                crate::clock::local_minute(*at)
            )));
        }
        if r.made.end <= now {
            return Err(ApiError::BadRequest(format!(
                "--reservation {name}: it ended at {}",
                crate::clock::local_minute(r.made.end)
            )));
        }
        let owner = crate::users::name_of(peer.uid);
        if !r.made.users.contains(&owner) && !self.manages_reservations(peer) {
            return Err(ApiError::Forbidden(format!(
                "--reservation {name} is for {}, not for {owner}",
                r.made.users.join(", ")
            )));
        }
        let kept = r.made.gpus.len() as u32;
        if request.count == 0 || request.count > kept {
            return Err(ApiError::BadRequest(format!(
                "--reservation {name} keeps {kept} GPU{} (GPU {}); a job in it runs on them, so \
                 it asks for 1 to {kept} with --gpus, not {}",
                if kept == 1 { "" } else { "s" },
                GpuList(&r.made.gpus),
                request.count
            )));
        }
        Ok(InReservation {
            id: r.id,
            name: r.made.name.clone(),
            end: r.made.end,
        })
    }

    /// Why a job in a reservation can never start: the reservation was cancelled or ended.
    pub(crate) fn reservation_gone_reason(&self, inner: &Inner, job: JobId) -> String {
        let Some(record) = inner.jobs.get(job) else {
            return "its reservation no longer stands".into();
        };
        let Some(r) = record.reservation.clone() else {
            return "its reservation no longer stands".into();
        };
        let what = if record.attempt() > 0 {
            "its next attempt"
        } else {
            "it"
        };
        let reservation = inner.reservations.iter().find(|x| x.id == r.id);
        match reservation.and_then(|x| x.cancelled.clone()) {
            Some((_, by)) => format!(
                "its reservation {} was cancelled by {by} before {what} could start",
                r.name
            ),
            None => format!(
                "its reservation {} ended at {} before {what} could start",
                r.name,
                crate::clock::local_minute(r.end)
            ),
        }
    }
}

/// A reservation as the API shows it, with its jobs queued and running now.
pub(crate) fn reservation_view(
    inner: &Inner,
    r: &ReservationRecord,
    now: Millis,
) -> ReservationView {
    let (mut queued, mut running) = (0, 0);
    for job in inner.jobs.active() {
        if job.reservation.as_ref().is_some_and(|x| x.id == r.id) {
            match job.state() {
                JobState::Running => running += 1,
                JobState::Queued => queued += 1,
                _ => {}
            }
        }
    }
    let state = if r.cancelled.is_some() {
        "cancelled"
    } else if now >= r.made.end {
        "ended"
    } else if now >= r.made.start {
        "active"
    } else {
        "upcoming"
    };
    ReservationView {
        id: r.id,
        name: r.made.name.clone(),
        gpus: r.made.gpus.clone(),
        start: rfc3339(r.made.start),
        end: rfc3339(r.made.end),
        start_ms: r.made.start,
        end_ms: r.made.end,
        users: r.made.users.clone(),
        created_by: r.made.created_by.clone(),
        state: state.into(),
        queued,
        running,
    }
}
