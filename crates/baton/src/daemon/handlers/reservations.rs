//! `POST /v1/reservations` (`baton reserve`), `GET /v1/reservations` (`baton reservations`) and
//! `POST /v1/reservations/{name}/cancel` (`baton reserve --cancel`): GPUs kept for some users
//! for a window of time (issue 19). Root and the admins reserve for anyone; other users of a
//! shared daemon reserve for themselves only, and only within `[limits]
//! max_reserved_gpu_hours_per_user`. What is reserved is public, as the queue is.

use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path as UrlPath, Query, State};
use baton_core::windows::{GpuList, choose_gpus};
use baton_core::{Millis, RunningJob};

use crate::api::{ReservationView, ReservationsQuery, ReserveRequest, ReserveResponse};
use crate::daemon::reservations::{KEPT_MS, reservation_view};
use crate::daemon::{ApiError, Daemon, Peer, now_ms, scheduling_input};
use crate::store::NewReservation;

/// The longest window one reservation may have.
const MAX_WINDOW_MS: Millis = 366 * 86_400_000;

pub async fn create(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<ReserveRequest>,
) -> Result<Json<ReserveResponse>, ApiError> {
    let bad = |m: String| Err(ApiError::BadRequest(m));
    if !daemon.places_here() {
        return Err(ApiError::BadRequest(
            "this daemon sends its jobs to Slurm: reservations there are Slurm's".into(),
        )
        .with_hint("a Slurm admin makes one with `scontrol create reservation`"));
    }
    let now = now_ms();
    if let Some(name) = &req.name
        && let Err(why) = check_name(name)
    {
        return bad(format!("--name {name:?}: {why}"));
    }
    if req.gpus == 0 {
        return bad("--gpus: a reservation keeps at least one GPU".into());
    }
    // A start a moment ago (`now`, read on the client) is now.
    if req.start_ms < now - 60_000 {
        return bad(format!(
            "--start {} is in the past; give now or a later time",
            crate::clock::local_minute(req.start_ms)
        ));
    }
    let start = req.start_ms.max(now);
    if req.end_ms <= start {
        return bad("--duration must be positive".into());
    }
    if req.end_ms - start > MAX_WINDOW_MS {
        return bad("--duration: a reservation lasts at most 366 days".into());
    }
    let caller = crate::users::name_of(peer.uid);
    let mut users: Vec<String> = Vec::new();
    for user in &req.users {
        let user = user.trim();
        if user.is_empty() {
            return bad("--user: a user name may not be empty".into());
        }
        if daemon.config.system && crate::users::by_name(user).is_none() {
            return bad(format!("--user {user}: no such user on this machine"));
        }
        if !users.iter().any(|u| u == user) {
            users.push(user.to_string());
        }
    }
    if users.is_empty() {
        users.push(caller.clone());
    }
    // What a user's reservation costs their allowance: its GPUs from now to its end, since jobs
    // without a time limit keep off them from the moment it is made.
    let gpu_ms = i64::from(req.gpus) * (req.end_ms - now);
    let manages = daemon.manages_reservations(&peer);
    if !manages && users != [caller.clone()] {
        return Err(ApiError::Forbidden(format!(
            "{caller} may reserve GPUs for themselves only; root and `[limits] admins` reserve \
             for others"
        )));
    }

    let mut inner = daemon.lock();
    if !manages {
        let Some(cap) = daemon.config.limits.max_reserved_gpu_hours_per_user else {
            return Err(ApiError::Forbidden(
                "on this shared daemon only root and `[limits] admins` may reserve GPUs".into(),
            )
            .with_hint(
                "an admin can let users reserve their own with `[limits] \
                 max_reserved_gpu_hours_per_user` in config.toml",
            ));
        };
        let held: i64 = inner
            .reservations
            .iter()
            .filter(|r| r.stands(now) && r.made.created_by == caller)
            .map(|r| r.made.gpus.len() as i64 * (r.made.end - now))
            .sum();
        if held + gpu_ms > cap.0 {
            let hours = baton_core::limits::gpu_hours;
            return Err(ApiError::Forbidden(format!(
                "this reservation keeps {} GPU-hours from now to its end (jobs without a time \
                 limit keep off its GPUs from now on) and {caller}'s standing ones {}: more than \
                 the {} a user may keep (`[limits] max_reserved_gpu_hours_per_user`)",
                hours(gpu_ms),
                hours(held),
                hours(cap.0)
            )));
        }
    }
    if let Some(name) = &req.name
        && let Some(other) = inner
            .reservations
            .iter()
            .find(|r| r.stands(now) && &r.made.name == name)
    {
        return Err(ApiError::Conflict(format!(
            "a reservation named {name} stands until {}; choose another name",
            crate::clock::local_minute(other.made.end)
        )));
    }
    let (running, pending, _) = scheduling_input(&inner, &daemon.gpus)?;
    // GPUs an atomic workflow reserved are held until its tasks end, which no limit bounds.
    let mut holders: Vec<RunningJob> = running;
    holders.extend(pending.iter().filter_map(|p| {
        Some(RunningJob {
            id: p.id,
            gpus: p.reserved.clone()?,
            request: p.request,
            ends_by: None,
        })
    }));
    let windows = daemon.windows(&inner, now);
    let chosen = choose_gpus(
        &daemon.machine,
        &windows,
        &holders,
        req.gpus,
        start,
        req.end_ms,
    )
    .map_err(|e| {
        ApiError::BadRequest(format!(
            "cannot reserve {} GPU{} from {} to {}: {e}",
            req.gpus,
            if req.gpus == 1 { "" } else { "s" },
            crate::clock::local_minute(start),
            crate::clock::local_minute(req.end_ms)
        ))
        .with_hint("`baton reservations` lists what is reserved when")
    })?;
    let name = match &req.name {
        Some(name) => name.clone(),
        None => {
            // Its id, unless a standing reservation was given that name.
            let mut n = inner.jobs.store().max_reservation_id()? + 1;
            while inner
                .reservations
                .iter()
                .any(|r| r.stands(now) && r.made.name == format!("resv-{n}"))
            {
                n += 1;
            }
            format!("resv-{n}")
        }
    };
    let new = NewReservation {
        name,
        gpus: chosen.gpus.clone(),
        start,
        end: req.end_ms,
        users,
        created_by: caller,
        created_at: now,
    };
    let record = inner.jobs.store_mut().insert_reservation(&new)?;
    tracing::info!(
        reservation = %record.made.name,
        gpus = %GpuList(&record.made.gpus),
        "reservation made"
    );
    let warnings = chosen
        .in_the_way
        .iter()
        .map(|(job, gpu)| {
            let until = match holders
                .iter()
                .find(|h| h.id == *job)
                .and_then(|h| h.ends_by)
            {
                Some(end) => format!(
                    "may run until {} by its time limit",
                    crate::clock::local_minute(end)
                ),
                None => "has no time limit".to_string(),
            };
            format!(
                "job {job} holds GPU {gpu} and {until}: the reservation gets that GPU only when \
                 the job ends"
            )
        })
        .collect();
    let view = reservation_view(&inner, &record, now);
    inner.reservations.push(record);
    drop(inner);
    // Jobs outside it must keep off its GPUs from this pass on.
    daemon.wake();
    Ok(Json(ReserveResponse {
        reservation: view,
        warnings,
    }))
}

pub async fn list(
    State(daemon): State<Arc<Daemon>>,
    Query(q): Query<ReservationsQuery>,
) -> Json<Vec<ReservationView>> {
    let now = now_ms();
    let inner = daemon.lock();
    let views = inner
        .reservations
        .iter()
        .filter(|r| {
            if q.all {
                r.made.end > now - KEPT_MS
            } else {
                r.stands(now)
            }
        })
        .map(|r| reservation_view(&inner, r, now))
        .collect();
    Json(views)
}

pub async fn cancel(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(name): UrlPath<String>,
) -> Result<Json<ReservationView>, ApiError> {
    let now = now_ms();
    let caller = crate::users::name_of(peer.uid);
    let mut inner = daemon.lock();
    let Some(at) = inner
        .reservations
        .iter()
        .rposition(|r| r.made.name == name && r.stands(now))
    else {
        return Err(ApiError::NotFound(format!(
            "no standing reservation named {name} (`baton reservations` lists them)"
        )));
    };
    if !daemon.manages_reservations(&peer) && inner.reservations[at].made.created_by != caller {
        return Err(ApiError::Forbidden(format!(
            "reservation {name} was made by {}; only they, root and `[limits] admins` may \
             cancel it",
            inner.reservations[at].made.created_by
        )));
    }
    let id = inner.reservations[at].id;
    inner
        .jobs
        .store_mut()
        .cancel_reservation(id, &caller, now)?;
    // The view before the cancel shows which of its jobs the cancel touches.
    let mut view = reservation_view(&inner, &inner.reservations[at], now);
    view.state = "cancelled".into();
    inner.reservations[at].cancelled = Some((now, caller));
    drop(inner);
    tracing::info!(reservation = %name, "reservation cancelled");
    // Its queued jobs can never start now: the next pass ends them.
    daemon.wake();
    Ok(Json(view))
}

/// A reservation's name: what `--reservation NAME` is typed as.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.len() > 64 {
        return Err("a name is 1 to 64 characters");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        || name.starts_with(['-', '.'])
    {
        return Err("a name is letters, digits, '.', '_' and '-', not starting with '-' or '.'");
    }
    Ok(())
}
