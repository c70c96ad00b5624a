//! The scheduling pass: given the queue, what runs, the machine's GPUs and the time, decide which
//! queued jobs start now and on which GPUs, which fail because a dependency failed, and why each
//! of the others waits.
//!
//! Order is priority (higher first), then the owner's recent GPU use (less first: fair share),
//! then submission time, then (for a workflow's tasks, which share their workflow's submission
//! time) the longest predicted path to the workflow's end first. The first job in that order that
//! cannot start gets a reservation at the earliest time the running jobs' limits guarantee it can
//! (EASY backfill); a later job may jump ahead only if, by its own time limit, it cannot delay that
//! reservation. Jobs without a time limit are assumed to run forever.
//!
//! An atomic workflow (its jobs share a `gang`) is admitted whole or not at all: when its turn
//! comes, every one of its jobs must fit at once, and then each gets GPUs reserved that nothing
//! else may take; a job with a reservation starts on exactly those GPUs once its dependencies
//! allow. A gang that does not fit holds the reservation like a blocked job, so a stream of small
//! jobs cannot starve it, and two gangs never deadlock: neither ever holds part of what it needs.
//!
//! Reservations' windows ([`crate::windows`]) keep their GPUs: a job outside them takes those
//! GPUs only if it ends, by its time limit, before the window begins; a job in one runs on its
//! GPUs only, within its window, and does not take the backfill reservation (it waits on its
//! window, not on the machine). An atomic workflow never takes a reservation's GPUs.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::{Account, BudgetUse, Held, LimitHit, Limits};
use crate::model::{Gpu, JobId, JobState, Millis, PendingJob, ResourceRequest, RunningJob};
use crate::placement::{Free, Occupancy};
use crate::units::format_duration;
use crate::windows::{Window, kept_from};

/// A decision to start a job on these GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub job: JobId,
    pub gpus: Vec<u32>,
    /// Started ahead of a higher-priority job that holds a reservation.
    pub backfilled: bool,
    /// It runs in a reservation and must end by the end of its window: its time limit for this
    /// attempt is at most `until` less the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Millis>,
}

/// Why a queued job is not starting in this pass.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitReason {
    /// A dependency has not ended (or not succeeded) yet.
    Dependency { on: JobId },
    /// Not enough free GPUs: what it needs and what was free.
    Resources {
        needs: ResourceRequest,
        free: Free,
        /// When the job is the reservation holder: the latest time it is guaranteed to start.
        reserved_at: Option<Millis>,
        /// `reserved_at` relative to `now`, for people.
        reserved_in: Option<Millis>,
    },
    /// It would fit, but starting it could delay the reservation of a higher-priority job.
    Priority { behind: JobId },
    /// The machine cannot ever satisfy the request (e.g. its GPUs went away).
    Impossible { needs: ResourceRequest, free: Free },
    /// Submitted to begin later (`--begin`).
    Begin {
        /// When it may start.
        at: Millis,
        /// `at` relative to `now`, for people.
        in_ms: Millis,
    },
    /// Its sweep runs as many runs at once as it may (`--array ...%K`, `--max-parallel`).
    Throttled { sweep: u64, max: u32 },
    /// Starting it would take its owner or its agent session past a cap (`[limits]`).
    Limit(LimitHit),
    /// Its owner's GPU-hour budget for the period is used up (`[limits] gpu_hours_per_user`).
    Budget(BudgetUse),
    /// It runs in a reservation (`--reservation NAME`) whose window has not begun.
    ReservationAhead {
        name: String,
        at: Millis,
        /// `at` relative to `now`, for people.
        in_ms: Millis,
    },
    /// Its reservation's window is on, but not enough of its GPUs are free.
    ReservationFull {
        name: String,
        needs: ResourceRequest,
        /// What the reservation's GPUs have free (`gpus`: how many it has).
        free: Free,
    },
    /// It would fit but for GPUs kept for a reservation: a job outside it may take them only if
    /// it ends, by its time limit, before the window begins.
    KeptForReservation {
        needs: ResourceRequest,
        /// What is free, the kept GPUs counted.
        free: Free,
        /// The reservations whose GPUs it may not take, by start.
        names: Vec<String>,
        /// How long until the first begins (0: it is on) and ends.
        begins_in: Millis,
        ends_in: Millis,
        /// When the job is the backfill reservation's holder: the latest time it is guaranteed
        /// to start, and that relative to `now`.
        reserved_at: Option<Millis>,
        reserved_in: Option<Millis>,
    },
    /// A retry waiting out its backoff after a failed attempt.
    Backoff {
        /// When it may start.
        until: Millis,
        /// `until` relative to `now`, for people.
        in_ms: Millis,
    },
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Dependency { on } => write!(f, "dependency: waiting for job {on}"),
            WaitReason::Resources {
                needs,
                free,
                reserved_in,
                ..
            } => {
                write!(f, "resources: {}", free.describe(needs))?;
                if let Some(dt) = reserved_in {
                    write!(f, "; reserved to start within {}", format_duration(*dt))?;
                }
                Ok(())
            }
            WaitReason::Priority { behind } => write!(
                f,
                "priority: would delay job {behind}, which holds the next reservation"
            ),
            WaitReason::Impossible { needs, free } if free.host_short(needs, true) => {
                write!(f, "impossible: {}", free.describe_capacity(needs))
            }
            WaitReason::Impossible { needs, free } => write!(
                f,
                "impossible: {}; this machine has {} GPU{}",
                free.describe(needs),
                free.gpus,
                if free.gpus == 1 { "" } else { "s" }
            ),
            WaitReason::Begin { in_ms, .. } => write!(
                f,
                "begin: it may start in {} (--begin)",
                format_duration(*in_ms)
            ),
            WaitReason::Throttled { sweep, max } => write!(
                f,
                "throttled: sweep {sweep} runs {max} at once, its most (--max-parallel)"
            ),
            WaitReason::Limit(hit) => write!(f, "limit: {hit}"),
            WaitReason::Budget(spent) => write!(f, "budget: {spent}"),
            WaitReason::ReservationAhead { name, in_ms, .. } => write!(
                f,
                "reservation: {name} begins in {}",
                format_duration(*in_ms)
            ),
            WaitReason::ReservationFull { name, needs, free } => {
                write!(f, "reservation: {name}'s GPUs: {}", free.describe(needs))
            }
            WaitReason::KeptForReservation {
                needs,
                free,
                names,
                begins_in,
                ends_in,
                reserved_in,
                ..
            } => {
                write!(
                    f,
                    "reservation: {}, but GPUs it could use are kept for reservation{} {}",
                    free.describe(needs),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", ")
                )?;
                if *begins_in > 0 {
                    write!(
                        f,
                        " from {} from now; with a time limit that ends before then it may use them",
                        format_duration(*begins_in)
                    )?;
                } else {
                    write!(f, " for {} more", format_duration(*ends_in))?;
                }
                if let Some(dt) = reserved_in {
                    write!(f, "; reserved to start within {}", format_duration(*dt))?;
                }
                Ok(())
            }
            WaitReason::Backoff { in_ms, .. } => write!(
                f,
                "retry backoff: the next attempt may start in {}",
                format_duration(*in_ms)
            ),
        }
    }
}

/// An atomic workflow admitted whole: GPUs reserved for each of its jobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    pub gang: u64,
    pub reserved: Vec<(JobId, Vec<u32>)>,
}

/// How a pass decides. The daemon uses the defaults; the simulator compares policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanOptions {
    /// EASY backfill. Without it the queue is strictly in order: nothing starts past the first
    /// job that cannot.
    pub backfill: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions { backfill: true }
    }
}

/// The outcome of one pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Atomic workflows admitted in this pass (before `starts`, which may include their jobs).
    pub admissions: Vec<Admission>,
    pub starts: Vec<Start>,
    /// Jobs that can never start because a dependency they need to succeed did not.
    pub dependency_failed: Vec<(JobId, String)>,
    /// Jobs submitted into a reservation that is no longer among the windows (it ended, or was
    /// deleted, before they could start): they can never start.
    pub reservation_gone: Vec<JobId>,
    pub waiting: Vec<(JobId, WaitReason)>,
    /// The earliest moment a job waiting out a retry backoff or its `--begin` may start: the
    /// caller plans again then (nothing else would wake it).
    pub next_wakeup: Option<Millis>,
}

/// The earliest guaranteed start of the highest-priority blocked job (or gang), and what will
/// still be held at that moment (jobs that may outlast it).
struct Reservation {
    job: JobId,
    /// What must fit at `at`: one request for a job, all of a gang's for a gang.
    requests: Vec<ResourceRequest>,
    /// `None`: only when jobs without a time limit end, i.e. at an unknown time.
    at: Option<Millis>,
    held_then: Occupancy,
}

/// One scheduling pass with the default options. `states` maps every job a pending job depends
/// on to its current state; a dependency missing from it counts as failed.
pub fn plan(
    gpus: &[Gpu],
    running: &[RunningJob],
    pending: &[PendingJob],
    states: &HashMap<JobId, JobState>,
    now: Millis,
) -> Plan {
    plan_with(gpus, running, pending, states, now, PlanOptions::default())
}

/// One scheduling pass on GPUs alone (cores and memory unlimited).
pub fn plan_with(
    gpus: &[Gpu],
    running: &[RunningJob],
    pending: &[PendingJob],
    states: &HashMap<JobId, JobState>,
    now: Millis,
    options: PlanOptions,
) -> Plan {
    plan_on(
        &Occupancy::new(gpus),
        running,
        pending,
        states,
        now,
        options,
    )
}

/// One scheduling pass on `cluster`, the empty occupancy of the machine or cluster (its GPUs,
/// and its nodes' cores and memory: [`Occupancy::with_hosts`]).
pub fn plan_on(
    cluster: &Occupancy,
    running: &[RunningJob],
    pending: &[PendingJob],
    states: &HashMap<JobId, JobState>,
    now: Millis,
    options: PlanOptions,
) -> Plan {
    plan_limited(
        cluster,
        running,
        pending,
        states,
        now,
        options,
        &Limits::default(),
    )
}

/// [`plan_on`], with `limits` on what each user and agent session holds at once: a job that
/// would take one past its cap waits (`WaitReason::Limit`) and takes no reservation; an atomic
/// workflow is admitted only if all of it fits within them, and what it reserved counts as
/// held.
pub fn plan_limited(
    cluster: &Occupancy,
    running: &[RunningJob],
    pending: &[PendingJob],
    states: &HashMap<JobId, JobState>,
    now: Millis,
    options: PlanOptions,
    limits: &Limits,
) -> Plan {
    plan_with_reservations(cluster, running, pending, states, now, options, limits, &[])
}

/// [`plan_limited`], with reservations' `windows` keeping their GPUs (see the module's
/// comment). Windows already over are ignored.
#[allow(clippy::too_many_arguments)]
pub fn plan_with_reservations(
    cluster: &Occupancy,
    running: &[RunningJob],
    pending: &[PendingJob],
    states: &HashMap<JobId, JobState>,
    now: Millis,
    options: PlanOptions,
    limits: &Limits,
    windows: &[Window],
) -> Plan {
    let mut views = Views::new(windows, now);
    let mut occupancy = cluster.clone();
    let mut holders: Vec<RunningJob> = Vec::with_capacity(running.len() + pending.len());
    for job in running {
        // A running job's GPUs come from the store; if the machine changed under it, the
        // occupancy ignores GPUs that are gone rather than refusing to schedule at all, and
        // counts its cores and memory even past a capacity lowered since it started.
        occupancy.occupy(&job.gpus, &job.request);
        holders.push(job.clone());
    }
    // Reserved GPUs are taken as if their jobs ran, until an unknown time.
    for job in pending {
        if let Some(gpus) = &job.reserved
            && occupancy.hold(gpus, &job.request).is_ok()
        {
            holders.push(RunningJob {
                id: job.id,
                gpus: gpus.clone(),
                request: job.request,
                ends_by: None,
            });
        }
    }

    let mut order: Vec<&PendingJob> = pending.iter().collect();
    order.sort_by_key(|j| queue_key(j));
    let mut held = limits.held(&holders);

    let mut out = Plan::default();
    let mut reservation: Option<Reservation> = None;
    // Gangs already decided in this pass (admitted, or waiting whole).
    let mut gangs_seen: Vec<u64> = Vec::new();
    // Throttled groups: how many of each hold resources, counting the starts of this pass.
    let mut group_running: HashMap<u64, u32> = HashMap::new();

    for job in order {
        // A job in a reservation that no longer stands can never start, whatever else it
        // waits for.
        if let Some(window) = job.window
            && views.window(window).is_none()
        {
            out.reservation_gone.push(job.id);
            continue;
        }
        // Nor does a job that is to begin later.
        if let Some(at) = job.begin.filter(|&t| t > now) {
            out.waiting.push((
                job.id,
                WaitReason::Begin {
                    at,
                    in_ms: at - now,
                },
            ));
            out.next_wakeup = Some(out.next_wakeup.map_or(at, |w| w.min(at)));
            continue;
        }
        // A retry in its backoff takes nothing, not even the reservation: it is not ready.
        if let Some(until) = job.not_before.filter(|&t| t > now) {
            out.waiting.push((
                job.id,
                WaitReason::Backoff {
                    until,
                    in_ms: until - now,
                },
            ));
            out.next_wakeup = Some(out.next_wakeup.map_or(until, |w| w.min(until)));
            continue;
        }
        if let Some(t) = job.throttle
            && job.reserved.is_none()
        {
            let running = group_running.entry(t.group).or_insert(t.running);
            if *running >= t.max {
                out.waiting.push((
                    job.id,
                    WaitReason::Throttled {
                        sweep: t.group,
                        max: t.max,
                    },
                ));
                continue;
            }
        }
        if let Some(gpus) = &job.reserved {
            match dependencies(job, states) {
                Deps::Ready => out.starts.push(Start {
                    job: job.id,
                    gpus: gpus.clone(),
                    backfilled: false,
                    until: None,
                }),
                Deps::Waiting(on) => out.waiting.push((job.id, WaitReason::Dependency { on })),
                Deps::Failed(reason) => out.dependency_failed.push((job.id, reason)),
            }
            continue;
        }
        if let Some(gang) = job.gang {
            if gangs_seen.contains(&gang) {
                continue;
            }
            gangs_seen.push(gang);
            let members: Vec<&PendingJob> = pending
                .iter()
                .filter(|j| j.gang == Some(gang) && j.reserved.is_none())
                .collect();
            admit_gang(
                gang,
                &members,
                cluster,
                states,
                now,
                options,
                (limits, &mut held),
                (&mut occupancy, &views.kept_from_all()),
                (&mut holders, &views.windows),
                &mut reservation,
                &mut out,
            );
            views.clear();
            continue;
        }
        match dependencies(job, states) {
            Deps::Ready => {}
            Deps::Waiting(on) => {
                out.waiting.push((job.id, WaitReason::Dependency { on }));
                continue;
            }
            Deps::Failed(reason) => {
                out.dependency_failed.push((job.id, reason));
                continue;
            }
        }
        if !occupancy.could_ever_fit(&job.request) {
            let (needs, free) = (job.request, occupancy.free());
            out.waiting
                .push((job.id, WaitReason::Impossible { needs, free }));
            continue;
        }
        if let Some(window) = job.window {
            let started = start_in_window(
                job,
                window,
                now,
                (limits, &mut held),
                &mut views,
                &mut occupancy,
                &mut holders,
                &mut out,
            );
            if started && let Some(t) = job.throttle {
                *group_running.entry(t.group).or_insert(t.running) += 1;
            }
            continue;
        }
        // A GPU-hour budget holds back only what would hold GPUs.
        if job.request.count > 0
            && let Some(spent) = limits.budget_spent(job.id)
        {
            out.waiting
                .push((job.id, WaitReason::Budget(spent.clone())));
            continue;
        }
        if let Err(hit) = limits.check(job.id, &job.request, &held) {
            out.waiting.push((job.id, WaitReason::Limit(hit)));
            continue;
        }
        let ends_by = job.time_limit.map(|limit| now.saturating_add(limit));
        // The reservations it would be in the way of, if any: their GPUs are not its to take.
        let in_the_way = if job.request.count == 0 {
            0
        } else {
            views.in_the_way(ends_by)
        };
        let partner = if job.colocate.is_empty() {
            None
        } else {
            out.starts
                .iter()
                .filter(|s| job.colocate.contains(&s.job))
                .find_map(|s| s.gpus.first().and_then(|&g| occupancy.node_of(g)))
        };
        // Strict order: nothing passes a blocked job.
        let strictly_behind = reservation.is_some() && !options.backfill;
        let chosen = if strictly_behind {
            None
        } else {
            views
                .outside(&occupancy, in_the_way)
                .choose_near(&job.request, partner.or(job.prefer_node))
        };
        let Some(chosen) = chosen else {
            let (needs, free) = (job.request, occupancy.free());
            // Kept out by a reservation, not by what runs: say so, and how to get in.
            let kept_by =
                (!strictly_behind && in_the_way > 0 && occupancy.choose(&job.request).is_some())
                    .then(|| views.in_the_way_of(in_the_way));
            if reservation.is_none() {
                let r = reserve(
                    job.id,
                    &[job.request],
                    cluster,
                    &holders,
                    (&views.windows, job.time_limit),
                );
                let (reserved_at, reserved_in) = (r.at, r.at.map(|at| at - now));
                out.waiting.push((
                    job.id,
                    match kept_by {
                        Some(w) => kept_for(w, now, needs, free, reserved_at),
                        None => WaitReason::Resources {
                            needs,
                            free,
                            reserved_at,
                            reserved_in,
                        },
                    },
                ));
                reservation = Some(r);
            } else if let Some(w) = kept_by {
                out.waiting
                    .push((job.id, kept_for(w, now, needs, free, None)));
            } else {
                let behind = reservation.as_ref().map(|r| r.job);
                let reason = match behind {
                    Some(behind)
                        if !options.backfill && occupancy.choose(&job.request).is_some() =>
                    {
                        WaitReason::Priority { behind }
                    }
                    _ => WaitReason::Resources {
                        needs,
                        free,
                        reserved_at: None,
                        reserved_in: None,
                    },
                };
                out.waiting.push((job.id, reason));
            }
            continue;
        };
        let backfilled = match &mut reservation {
            None => false,
            Some(r) => {
                if !fits_beside_reservation(r, &chosen, &job.request, ends_by) {
                    out.waiting
                        .push((job.id, WaitReason::Priority { behind: r.job }));
                    continue;
                }
                if outlasts(ends_by, r.at) {
                    // `occupy`: a reservation's GPUs are held then already, if it is on.
                    r.held_then.occupy(&chosen, &job.request);
                }
                true
            }
        };
        occupancy
            .hold(&chosen, &job.request)
            .expect("chosen from free GPUs");
        views.clear();
        if let Some(t) = job.throttle {
            *group_running.entry(t.group).or_insert(t.running) += 1;
        }
        limits.take(job.id, &job.request, &mut held);
        holders.push(RunningJob {
            id: job.id,
            gpus: chosen.clone(),
            request: job.request,
            ends_by,
        });
        out.starts.push(Start {
            job: job.id,
            gpus: chosen,
            backfilled,
            until: None,
        });
    }
    // Where a window begins or ends, what may start changes: plan again then.
    if !out.waiting.is_empty()
        && let Some(at) = views.next_change()
    {
        out.next_wakeup = Some(out.next_wakeup.map_or(at, |t| t.min(at)));
    }
    out
}

/// A job in reservation `window`'s turn: it waits for the window, then starts on the window's
/// GPUs if they have room, with the window's end as its end. The caps on what its owner holds
/// at once do not hold it back (the reservation is what it was given), but what it takes
/// counts as held, and a spent GPU-hour budget keeps it waiting as any GPU job. Whether it
/// started.
#[allow(clippy::too_many_arguments)]
fn start_in_window(
    job: &PendingJob,
    window: u64,
    now: Millis,
    (limits, held): (&Limits, &mut HashMap<Account, Held>),
    views: &mut Views<'_>,
    occupancy: &mut Occupancy,
    holders: &mut Vec<RunningJob>,
    out: &mut Plan,
) -> bool {
    let Some((at, w)) = views.window(window) else {
        out.reservation_gone.push(job.id);
        return false;
    };
    if !w.has_begun(now) {
        out.waiting.push((
            job.id,
            WaitReason::ReservationAhead {
                name: w.name.clone(),
                at: w.start,
                in_ms: w.start - now,
            },
        ));
        out.next_wakeup = Some(out.next_wakeup.map_or(w.start, |t| t.min(w.start)));
        return false;
    }
    if job.request.count > 0
        && let Some(spent) = limits.budget_spent(job.id)
    {
        out.waiting
            .push((job.id, WaitReason::Budget(spent.clone())));
        return false;
    }
    let (name, end, size) = (w.name.clone(), w.end, w.gpus.len());
    let inside = views.inside(occupancy, at);
    let Some(chosen) = inside.choose_near(&job.request, job.prefer_node) else {
        let free = Free {
            gpus: size,
            ..inside.free()
        };
        out.waiting.push((
            job.id,
            WaitReason::ReservationFull {
                name,
                needs: job.request,
                free,
            },
        ));
        return false;
    };
    occupancy
        .hold(&chosen, &job.request)
        .expect("chosen from free GPUs");
    views.clear();
    limits.take(job.id, &job.request, held);
    let ends_by = job
        .time_limit
        .map_or(end, |limit| now.saturating_add(limit).min(end));
    holders.push(RunningJob {
        id: job.id,
        gpus: chosen.clone(),
        request: job.request,
        ends_by: Some(ends_by),
    });
    out.starts.push(Start {
        job: job.id,
        gpus: chosen,
        backfilled: false,
        until: Some(end),
    });
    true
}

/// Why a job waits that reservations `ws` (the first `k` by start, `k` > 0) keep out.
fn kept_for(
    ws: &[&Window],
    now: Millis,
    needs: ResourceRequest,
    free: Free,
    reserved_at: Option<Millis>,
) -> WaitReason {
    let first = ws[0];
    WaitReason::KeptForReservation {
        needs,
        free,
        names: ws.iter().map(|w| w.name.clone()).collect(),
        begins_in: (first.start - now).max(0),
        ends_in: first.end - now,
        reserved_at,
        reserved_in: reserved_at.map(|at| at - now),
    }
}

/// What a job may choose its GPUs from, beside reservations' windows: the occupancy itself, or
/// a copy with GPUs withheld. A job outside every reservation that would hold its GPUs until a
/// time is kept from the windows that begin before then: with the windows in order of start,
/// the first `k`, so one copy serves every job with the same `k`. A job in a window sees only
/// its window's GPUs. Copies are made when first asked for and dropped whenever the occupancy
/// changes.
struct Views<'w> {
    /// The windows not over yet, by start.
    windows: Vec<&'w Window>,
    now: Millis,
    outside: HashMap<usize, Occupancy>,
    inside: HashMap<usize, Occupancy>,
}

impl<'w> Views<'w> {
    fn new(windows: &'w [Window], now: Millis) -> Self {
        let mut windows: Vec<&Window> = windows.iter().filter(|w| !w.is_over(now)).collect();
        windows.sort_by_key(|w| (w.start, w.id));
        Views {
            windows,
            now,
            outside: HashMap::new(),
            inside: HashMap::new(),
        }
    }

    /// How many windows (the first, by start) a job holding GPUs until `ends_by` is in the way
    /// of.
    fn in_the_way(&self, ends_by: Option<Millis>) -> usize {
        self.windows
            .iter()
            .take_while(|w| w.is_in_the_way(self.now, ends_by))
            .count()
    }

    /// The first `k` windows by start: those a job holding GPUs past the `k`th's start would
    /// run into.
    fn in_the_way_of(&self, k: usize) -> &[&'w Window] {
        &self.windows[..k]
    }

    /// Every window's GPUs: what a job without a known end may not take.
    fn kept_from_all(&self) -> Vec<u32> {
        kept_from(self.windows.iter().copied(), self.now, None)
    }

    /// Window `id`, with its place among the windows.
    fn window(&self, id: u64) -> Option<(usize, &'w Window)> {
        self.windows
            .iter()
            .position(|w| w.id == id)
            .map(|at| (at, self.windows[at]))
    }

    fn outside<'a>(&'a mut self, occupancy: &'a Occupancy, k: usize) -> &'a Occupancy {
        if k == 0 {
            return occupancy;
        }
        let windows = &self.windows;
        self.outside.entry(k).or_insert_with(|| {
            let mut view = occupancy.clone();
            for w in &windows[..k] {
                view.withhold(&w.gpus);
            }
            view
        })
    }

    fn inside<'a>(&'a mut self, occupancy: &'a Occupancy, at: usize) -> &'a Occupancy {
        let w = self.windows[at];
        self.inside.entry(at).or_insert_with(|| {
            let mut view = occupancy.clone();
            view.withhold(&w.gpus_outside(occupancy));
            view
        })
    }

    /// The next moment after now a window begins or ends.
    fn next_change(&self) -> Option<Millis> {
        self.windows
            .iter()
            .flat_map(|w| [w.start, w.end])
            .filter(|&t| t > self.now)
            .min()
    }

    /// The occupancy changed: every copy is stale.
    fn clear(&mut self) {
        self.outside.clear();
        self.inside.clear();
    }
}

/// An atomic workflow's turn: admitted whole if all its jobs fit now (and, behind a
/// reservation, only if the whole gang cannot delay it), else it waits whole, taking the
/// reservation if none is held yet.
#[allow(clippy::too_many_arguments)]
fn admit_gang(
    gang: u64,
    members: &[&PendingJob],
    cluster: &Occupancy,
    states: &HashMap<JobId, JobState>,
    now: Millis,
    options: PlanOptions,
    (limits, held): (&Limits, &mut HashMap<Account, Held>),
    (occupancy, kept): (&mut Occupancy, &[u32]),
    (holders, windows): (&mut Vec<RunningJob>, &[&Window]),
    reservation: &mut Option<Reservation>,
    out: &mut Plan,
) {
    let Some(head) = members.first() else {
        return;
    };
    // All of it at once within its owner's (and session's) caps, or it waits whole, taking no
    // reservation: it is not ready, as a single job at a cap is not.
    if let Some(spent) = members
        .iter()
        .filter(|m| m.request.count > 0)
        .find_map(|m| limits.budget_spent(m.id))
    {
        for m in members {
            out.waiting.push((m.id, WaitReason::Budget(spent.clone())));
        }
        return;
    }
    let mut after = held.clone();
    for m in members {
        if let Err(hit) = limits.check(m.id, &m.request, &after) {
            for m in members {
                out.waiting.push((m.id, WaitReason::Limit(hit.clone())));
            }
            return;
        }
        limits.take(m.id, &m.request, &mut after);
    }
    let requests: Vec<ResourceRequest> = members.iter().map(|m| m.request).collect();
    if cluster.choose_all(&requests).is_none() {
        let free = occupancy.free();
        for m in members {
            out.waiting.push((
                m.id,
                WaitReason::Impossible {
                    needs: m.request,
                    free,
                },
            ));
        }
        return;
    }
    let placed = if reservation.is_some() && !options.backfill {
        None
    } else if kept.is_empty() {
        occupancy.choose_all(&requests)
    } else {
        // Its jobs have no known end: no reservation's GPUs are theirs to take.
        let mut view = occupancy.clone();
        view.withhold(kept);
        view.choose_all(&requests)
    };
    // Behind a reservation a gang may go only if it cannot delay it: its jobs have no known end,
    // so everything it takes must be spare at the reservation's time too.
    let placed = placed.filter(|placed| match reservation.as_ref() {
        None => true,
        Some(r) => {
            let mut then = r.held_then.clone();
            members
                .iter()
                .zip(placed)
                .all(|(m, g)| then.hold(g, &m.request).is_ok())
                && then.choose_all(&r.requests).is_some()
        }
    });
    let Some(placed) = placed else {
        let free = occupancy.free();
        let (reserved_at, reserved_in) = if reservation.is_none() {
            // Its jobs have no known end: the reservation must be clear of every window.
            let r = reserve(head.id, &requests, cluster, holders, (windows, None));
            let at = r.at;
            *reservation = Some(r);
            (at, at.map(|at| at - now))
        } else {
            (None, None)
        };
        for m in members {
            out.waiting.push((
                m.id,
                WaitReason::Resources {
                    needs: m.request,
                    free,
                    reserved_at,
                    reserved_in,
                },
            ));
        }
        return;
    };
    if let Some(r) = reservation.as_mut() {
        for (m, g) in members.iter().zip(&placed) {
            let _ = r.held_then.hold(g, &m.request);
        }
    }
    *held = after;
    let mut admission = Admission {
        gang,
        reserved: Vec::with_capacity(members.len()),
    };
    for (m, g) in members.iter().zip(placed) {
        occupancy.hold(&g, &m.request).expect("placed on free GPUs");
        holders.push(RunningJob {
            id: m.id,
            gpus: g.clone(),
            request: m.request,
            ends_by: None,
        });
        admission.reserved.push((m.id, g.clone()));
        // Members whose dependencies are met start now; the others keep their reservation.
        match dependencies(m, states) {
            Deps::Ready => out.starts.push(Start {
                job: m.id,
                gpus: g,
                backfilled: false,
                until: None,
            }),
            Deps::Waiting(on) => out.waiting.push((m.id, WaitReason::Dependency { on })),
            Deps::Failed(reason) => out.dependency_failed.push((m.id, reason)),
        }
    }
    out.admissions.push(admission);
}

/// The queue's order: priority (higher first), the owner's recent use (less first), submission,
/// the longest critical path first, then id.
pub fn queue_key(j: &PendingJob) -> impl Ord + use<> {
    use std::cmp::Reverse;
    (
        Reverse(j.priority),
        j.owner_usage,
        j.submitted_at,
        Reverse(j.critical_path),
        j.id,
    )
}

enum Deps {
    Ready,
    Waiting(JobId),
    Failed(String),
}

fn dependencies(job: &PendingJob, states: &HashMap<JobId, JobState>) -> Deps {
    let mut waiting = None;
    for dep in &job.deps {
        let state = states.get(&dep.job).copied();
        if let Some(why) = crate::lifecycle::decide::dependency_failure(dep, state) {
            return Deps::Failed(why);
        }
        if state.is_some_and(|s| !s.is_terminal()) {
            waiting.get_or_insert(dep.job);
        }
    }
    match waiting {
        Some(on) => Deps::Waiting(on),
        None => Deps::Ready,
    }
}

/// Whether a job ending at `ends_by` is still running at `at` (unknown = forever).
fn outlasts(ends_by: Option<Millis>, at: Option<Millis>) -> bool {
    match (ends_by, at) {
        (Some(end), Some(at)) => end > at,
        // The reservation waits on jobs without limits, so it could come at any time:
        // anything started now may still be running then.
        (_, None) => true,
        (None, Some(_)) => true,
    }
}

/// The earliest time at which `request` is guaranteed to fit if every job in `holders` runs until
/// its limit: `Some(now)`-like values when it fits at once are not special-cased; `None` means
/// only when jobs without a time limit end.
pub fn earliest_start(
    cluster: &Occupancy,
    holders: &[RunningJob],
    request: &ResourceRequest,
) -> Option<Millis> {
    reserve(JobId(0), &[*request], cluster, holders, (&[], None)).at
}

/// [`earliest_start`] for a job outside every reservation that runs for `limit` (`None`: no
/// known end): off the GPUs of the `windows` it would run into.
pub fn earliest_start_beside(
    cluster: &Occupancy,
    holders: &[RunningJob],
    request: &ResourceRequest,
    (windows, now): (&[Window], Millis),
    limit: Option<Millis>,
) -> Option<Millis> {
    let standing = Views::new(windows, now).windows;
    let windows: &[&Window] = if request.count == 0 { &[] } else { &standing };
    reserve(JobId(0), &[*request], cluster, holders, (windows, limit)).at
}

/// When each queued job can be expected to start, at the latest, if every job runs until its
/// time limit: the queue is played forward in order (priority, fair share, submission), each
/// job starting at the earliest moment it fits beside everything started or predicted before it
/// and after its dependencies' predicted ends. `None` where a job (or what it waits for) has no
/// time limit in the way, so no bound exists. Backfill can only make starts earlier. Only the
/// first `limit` jobs in order are predicted (the cost grows with the square of the queue).
/// Reservations' `windows` count as held until they end for jobs outside them; a job in one
/// starts within it, on its GPUs, and ends by its end.
pub fn predicted_starts(
    cluster: &Occupancy,
    running: &[RunningJob],
    pending: &[PendingJob],
    now: Millis,
    limit: usize,
    windows: &[Window],
) -> HashMap<JobId, Option<Millis>> {
    let standing = Views::new(windows, now).windows;
    let mut holders: Vec<RunningJob> = running.to_vec();
    for job in pending {
        if let Some(g) = &job.reserved {
            holders.push(RunningJob {
                id: job.id,
                gpus: g.clone(),
                request: job.request,
                ends_by: None,
            });
        }
    }
    let mut ends: HashMap<JobId, Option<Millis>> =
        running.iter().map(|r| (r.id, r.ends_by)).collect();
    let mut order: Vec<&PendingJob> = pending.iter().collect();
    order.sort_by_key(|j| queue_key(j));
    let mut out = HashMap::new();
    for job in order.into_iter().take(limit) {
        // Not before its dependencies end (a dependency that is neither running nor queued has
        // ended already), nor before its retry backoff is over.
        let mut after = Some(
            job.not_before
                .into_iter()
                .chain(job.begin)
                .fold(now, Millis::max),
        );
        for dep in &job.deps {
            if let Some(end) = ends.get(&dep.job) {
                after = match (after, end) {
                    (Some(a), Some(e)) => Some(a.max(*e)),
                    _ => None,
                };
            }
        }
        // A job in a reservation: within its window, on its GPUs; outside: off the GPUs of the
        // windows it would run into.
        let window = job.window.map(|id| standing.iter().find(|w| w.id == id));
        let (after, until) = match window {
            None => (after, None),
            Some(None) => (None, None),
            Some(Some(w)) => (after.map(|a| a.max(w.start)), Some(*w)),
        };
        let start = after.and_then(|after| {
            // The moment it fits, among the moments holders end or windows end (or `after`
            // itself).
            let mut moments: Vec<Millis> = holders
                .iter()
                .filter_map(|h| h.ends_by)
                .chain(standing.iter().map(|w| w.end))
                .filter(|&e| e > after)
                .collect();
            moments.push(after);
            moments.sort_unstable();
            moments.dedup();
            moments
                .into_iter()
                .take_while(|&at| until.is_none_or(|w| at < w.end))
                .find_map(|at| {
                    let mut held = occupancy_of(
                        cluster,
                        holders.iter().filter(|h| outlasts(h.ends_by, Some(at))),
                    );
                    match until {
                        Some(w) => held.withhold(&w.gpus_outside(cluster)),
                        None if job.request.count > 0 => {
                            let ends_by = job.time_limit.map(|l| at.saturating_add(l));
                            held.withhold(&kept_from(standing.iter().copied(), at, ends_by));
                        }
                        None => {}
                    }
                    held.choose(&job.request).map(|g| (at, g))
                })
        });
        let (start, end) = match start {
            Some((at, chosen)) => {
                let end = match (job.time_limit.map(|l| at.saturating_add(l)), until) {
                    (end, None) => end,
                    (end, Some(w)) => Some(end.map_or(w.end, |e| e.min(w.end))),
                };
                holders.push(RunningJob {
                    id: job.id,
                    gpus: chosen,
                    request: job.request,
                    ends_by: end,
                });
                (Some(at), end)
            }
            None => (None, None),
        };
        ends.insert(job.id, end);
        out.insert(job.id, start);
    }
    out
}

/// Finds the earliest moment at which all `requests` are guaranteed to fit together, assuming
/// every holder runs until its limit, and what remains held then. Jobs that start then and run
/// for `limit` (`None`: no known end) may not take the GPUs of the `windows` they would run
/// into.
fn reserve(
    job: JobId,
    requests: &[ResourceRequest],
    cluster: &Occupancy,
    holders: &[RunningJob],
    (windows, limit): (&[&Window], Option<Millis>),
) -> Reservation {
    let mut ends: Vec<Millis> = holders.iter().filter_map(|h| h.ends_by).collect();
    // Where a window ends, its GPUs come free.
    ends.extend(windows.iter().map(|w| w.end));
    ends.sort_unstable();
    ends.dedup();
    for at in ends {
        let mut held = occupancy_of(
            cluster,
            holders.iter().filter(|h| outlasts(h.ends_by, Some(at))),
        );
        let until = limit.map(|l| at.saturating_add(l));
        held.withhold(&kept_from(windows.iter().copied(), at, until));
        if held.choose_all(requests).is_some() {
            return Reservation {
                job,
                requests: requests.to_vec(),
                at: Some(at),
                held_then: held,
            };
        }
    }
    // Only jobs without limits stand in the way: when they end is unknown, so the reservation
    // protects the GPUs as if they were all free then.
    Reservation {
        job,
        requests: requests.to_vec(),
        at: None,
        held_then: cluster.clone(),
    }
}

fn occupancy_of<'a>(cluster: &Occupancy, jobs: impl Iterator<Item = &'a RunningJob>) -> Occupancy {
    let mut occ = cluster.clone();
    for job in jobs {
        occ.occupy(&job.gpus, &job.request);
    }
    occ
}

/// Whether starting a job on `chosen` until `ends_by` leaves the reservation intact.
fn fits_beside_reservation(
    r: &Reservation,
    chosen: &[u32],
    request: &ResourceRequest,
    ends_by: Option<Millis>,
) -> bool {
    if !outlasts(ends_by, r.at) {
        return true;
    }
    let mut then = r.held_then.clone();
    // `occupy`: a GPU of a reservation that is on then is held already (and not the job's to
    // take after it).
    then.occupy(chosen, request);
    then.choose_all(&r.requests).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DepKind, Dependency};

    const GIB: u64 = 1 << 30;
    const MIN: Millis = 60_000;

    fn gpus(n: u32) -> Vec<Gpu> {
        (0..n)
            .map(|index| Gpu {
                index,
                memory_total: 80 * GIB,
                node: 0,
            })
            .collect()
    }

    fn job(id: u64, count: u32) -> PendingJob {
        PendingJob::new(
            JobId(id),
            0,
            id as Millis,
            ResourceRequest::whole(count),
            None,
            vec![],
        )
    }

    fn running(id: u64, gpus: &[u32], ends_by: Option<Millis>) -> RunningJob {
        RunningJob {
            id: JobId(id),
            gpus: gpus.to_vec(),
            request: ResourceRequest::whole(gpus.len() as u32),
            ends_by,
        }
    }

    fn started(p: &Plan) -> Vec<u64> {
        p.starts.iter().map(|s| s.job.0).collect()
    }

    #[test]
    fn a_user_whose_budget_is_spent_waits_for_the_period_and_others_start() {
        use crate::limits::{Account, BudgetUse, Period};
        let (alice, bob) = (Account::User(1000), Account::User(1001));
        let budget = |used_ms: i64| BudgetUse {
            who: "alice".into(),
            used_ms,
            budget_ms: 40 * 3_600_000,
            period: Period::Week,
            since: 0,
            resets_at: 7 * 86_400_000,
            resets: "Monday 2026-12-14 00:00".into(),
            setting: "[limits] gpu_hours_per_user = 40".into(),
        };
        let limits = |used_ms: i64| Limits {
            accounts_of: [
                (JobId(1), vec![alice.clone()]),
                (JobId(2), vec![alice.clone()]),
                (JobId(3), vec![bob.clone()]),
            ]
            .into_iter()
            .collect(),
            caps: HashMap::new(),
            budgets: [(alice.clone(), budget(used_ms))].into_iter().collect(),
        };
        let g = gpus(4);
        let pass = |used_ms: i64| {
            plan_limited(
                &Occupancy::new(&g),
                &[],
                &[job(1, 1), job(2, 1), job(3, 1)],
                &HashMap::new(),
                0,
                PlanOptions::default(),
                &limits(used_ms),
            )
        };
        let spent = pass(40 * 3_600_000);
        assert_eq!(started(&spent), [3], "{spent:?}");
        // A job of hers that holds no GPU is not held back by a GPU-hour budget.
        let cpu_only = plan_limited(
            &Occupancy::new(&g),
            &[],
            &[job(1, 0)],
            &HashMap::new(),
            0,
            PlanOptions::default(),
            &limits(40 * 3_600_000),
        );
        assert_eq!(started(&cpu_only), [1]);
        assert_eq!(spent.waiting.len(), 2);
        assert_eq!(
            spent.waiting[0].1.to_string(),
            "budget: alice has used 40 of 40 GPU-hours this week; it resets Monday 2026-12-14 \
             00:00 ([limits] gpu_hours_per_user = 40)"
        );
        // A budget not yet used up does not hold anything back.
        assert_eq!(started(&pass(39 * 3_600_000)), [1, 2, 3]);
        // An atomic workflow of hers waits whole.
        let gang = |id: u64| PendingJob {
            gang: Some(9),
            ..job(id, 1)
        };
        let whole = plan_limited(
            &Occupancy::new(&g),
            &[],
            &[gang(1), gang(2)],
            &HashMap::new(),
            0,
            PlanOptions::default(),
            &limits(41 * 3_600_000),
        );
        assert!(whole.admissions.is_empty() && whole.starts.is_empty());
        assert!(
            whole
                .waiting
                .iter()
                .all(|(_, r)| matches!(r, WaitReason::Budget(_)))
        );
    }

    #[test]
    fn a_user_at_their_cap_waits_and_takes_no_reservation_from_another() {
        use crate::limits::{Account, AccountCap, Cap};
        let (alice, bob) = (Account::User(1000), Account::User(1001));
        let limits = Limits {
            accounts_of: [
                (JobId(1), vec![alice.clone()]),
                (JobId(2), vec![alice.clone()]),
                (JobId(3), vec![alice.clone()]),
                (JobId(4), vec![bob]),
            ]
            .into_iter()
            .collect(),
            caps: [(
                alice,
                AccountCap::new(
                    "alice",
                    "[limits]",
                    Cap {
                        gpus: Some(3),
                        ..Cap::default()
                    },
                ),
            )]
            .into_iter()
            .collect(),
            budgets: HashMap::new(),
        };
        // Alice runs job 1 on one GPU; her jobs 2 and 3 (2 GPUs each) come before bob's 4.
        let g = gpus(4);
        let limited = plan_limited(
            &Occupancy::new(&g),
            &[running(1, &[0], None)],
            &[job(2, 2), job(3, 2), job(4, 1)],
            &HashMap::new(),
            0,
            PlanOptions::default(),
            &limits,
        );
        assert_eq!(started(&limited), [2, 4], "{limited:?}");
        let (_, reason) = &limited.waiting[0];
        assert_eq!(
            reason.to_string(),
            "limit: alice already holds 3 of at most 3 GPUs, and this job asks for 2 GPUs \
             ([limits] max_gpus_per_user = 3)"
        );
        // Without the limits, job 3 would have held the reservation and bob's job waited.
        let unlimited = plan(
            &g,
            &[running(1, &[0], None)],
            &[job(2, 2), job(3, 2), job(4, 1)],
            &HashMap::new(),
            0,
        );
        assert_eq!(
            started(&unlimited),
            [2, 4],
            "job 4 backfills: no limit, no time limit"
        );
    }

    #[test]
    fn an_atomic_workflow_is_admitted_only_if_all_of_it_fits_its_owners_cap() {
        use crate::limits::{Account, AccountCap, Cap};
        let alice = Account::User(1000);
        let limits = |max: u32| Limits {
            accounts_of: (1..=3).map(|i| (JobId(i), vec![alice.clone()])).collect(),
            caps: [(
                alice.clone(),
                AccountCap::new(
                    "alice",
                    "[limits]",
                    Cap {
                        gpus: Some(max),
                        ..Cap::default()
                    },
                ),
            )]
            .into_iter()
            .collect(),
            budgets: HashMap::new(),
        };
        let gang = |id: u64| PendingJob {
            gang: Some(7),
            ..job(id, 1)
        };
        let g = gpus(4);
        let pass = |max: u32| {
            plan_limited(
                &Occupancy::new(&g),
                &[],
                &[gang(1), gang(2), gang(3)],
                &HashMap::new(),
                0,
                PlanOptions::default(),
                &limits(max),
            )
        };
        let over = pass(2);
        assert!(
            over.admissions.is_empty() && over.starts.is_empty(),
            "{over:?}"
        );
        assert!(
            over.waiting
                .iter()
                .all(|(_, r)| matches!(r, WaitReason::Limit(_))),
            "{over:?}"
        );
        let within = pass(3);
        assert_eq!(within.admissions.len(), 1, "{within:?}");
        assert_eq!(started(&within), [1, 2, 3]);
    }

    #[test]
    fn a_retry_waits_out_its_backoff_without_holding_anything_up() {
        let g = gpus(1);
        let states = HashMap::new();
        // Job 1 failed and waits to retry until t=5000; job 2 came later but is ready.
        let retry = PendingJob {
            not_before: Some(5_000),
            ..job(1, 1)
        };
        let p = plan(&g, &[], &[retry.clone(), job(2, 1)], &states, 1_000);
        assert_eq!(started(&p), [2], "the later job runs meanwhile");
        assert_eq!(
            p.waiting,
            [(
                JobId(1),
                WaitReason::Backoff {
                    until: 5_000,
                    in_ms: 4_000
                }
            )]
        );
        assert_eq!(
            p.next_wakeup,
            Some(5_000),
            "the caller must plan again then"
        );
        assert_eq!(
            p.waiting[0].1.to_string(),
            "retry backoff: the next attempt may start in 4s"
        );
        let p = plan(&g, &[], &[retry], &states, 5_000);
        assert_eq!(started(&p), [1], "due at its time");
        assert_eq!(p.next_wakeup, None);
    }

    #[test]
    fn a_throttled_sweep_runs_at_most_its_cap_and_lets_others_pass() {
        // Sweep 7 may run 2 at once and has 1 running: one more starts; job 9 (no sweep) is
        // not held up by the throttled runs.
        let throttle = Some(crate::model::Throttle {
            group: 7,
            max: 2,
            running: 1,
        });
        let mut pending: Vec<PendingJob> = (2..6)
            .map(|id| PendingJob {
                throttle,
                ..job(id, 1)
            })
            .collect();
        pending.push(job(9, 1));
        let running = [running(1, &[0], None)];
        let p = plan(&gpus(8), &running, &pending, &HashMap::new(), 0);
        assert_eq!(started(&p), [2, 9]);
        let throttled: Vec<u64> = p
            .waiting
            .iter()
            .filter(|(_, r)| matches!(r, WaitReason::Throttled { sweep: 7, max: 2 }))
            .map(|(id, _)| id.0)
            .collect();
        assert_eq!(throttled, [3, 4, 5]);
        assert!(
            p.waiting[0]
                .1
                .to_string()
                .starts_with("throttled: sweep 7 runs 2 at once"),
            "{}",
            p.waiting[0].1
        );
    }

    #[test]
    fn retry_delays_double_from_the_first_up_to_the_cap() {
        let delays: Vec<Millis> = (1..=11)
            .map(|n| crate::model::retry_delay(n, 1_000, 300_000))
            .collect();
        assert_eq!(
            delays,
            [
                1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000,
                300_000
            ]
        );
        // No overflow however many attempts failed.
        assert_eq!(crate::model::retry_delay(u32::MAX, 1_000, 300_000), 300_000);
        assert_eq!(crate::model::retry_delay(1, 0, 300_000), 0);
    }

    #[test]
    fn fills_gpus_in_priority_then_submission_order() {
        let mut low = job(1, 1);
        low.priority = -1;
        let mut high = job(3, 1);
        high.priority = 5;
        let p = plan(&gpus(2), &[], &[low, job(2, 1), high], &HashMap::new(), 0);
        assert_eq!(started(&p), vec![3, 2]);
        assert_eq!(p.starts[0].gpus, vec![0]);
        assert_eq!(p.starts[1].gpus, vec![1]);
        assert!(matches!(p.waiting[0].1, WaitReason::Resources { .. }));
    }

    #[test]
    fn dependencies_wait_succeed_or_fail() {
        let mut after_ok = job(10, 0);
        after_ok.deps = vec![Dependency {
            job: JobId(1),
            kind: DepKind::Success,
        }];
        let mut after_fail = job(11, 0);
        after_fail.deps = vec![Dependency {
            job: JobId(2),
            kind: DepKind::Success,
        }];
        let mut after_any = job(12, 0);
        after_any.deps = vec![Dependency {
            job: JobId(2),
            kind: DepKind::Any,
        }];
        let mut after_running = job(13, 0);
        after_running.deps = vec![Dependency {
            job: JobId(3),
            kind: DepKind::Any,
        }];
        let states = HashMap::from([
            (JobId(1), JobState::Succeeded),
            (JobId(2), JobState::Failed),
            (JobId(3), JobState::Running),
        ]);
        let p = plan(
            &gpus(1),
            &[],
            &[after_ok, after_fail, after_any, after_running],
            &states,
            0,
        );
        assert_eq!(started(&p), vec![10, 12]);
        assert_eq!(p.dependency_failed.len(), 1);
        assert_eq!(p.dependency_failed[0].0, JobId(11));
        assert!(p.dependency_failed[0].1.starts_with("dependency failed"));
        assert_eq!(
            p.waiting,
            vec![(JobId(13), WaitReason::Dependency { on: JobId(3) })]
        );
    }

    #[test]
    fn backfill_starts_short_jobs_that_end_before_the_reservation() {
        // 4 GPUs; job 1 holds 3 until t=60m. Job 2 wants all 4: reserved at 60m.
        let now = 0;
        let run = [running(1, &[0, 1, 2], Some(60 * MIN))];
        // Submitted last: it still jumps ahead of 4 and 5, which would delay job 2.
        let mut short = job(6, 1);
        short.time_limit = Some(30 * MIN);
        let mut long = job(4, 1);
        long.time_limit = Some(90 * MIN);
        let unlimited = job(5, 1);
        let p = plan(
            &gpus(4),
            &run,
            &[job(2, 4), long, unlimited, short],
            &HashMap::new(),
            now,
        );
        assert_eq!(started(&p), vec![6]);
        assert!(p.starts[0].backfilled);
        let reasons: HashMap<JobId, WaitReason> = p.waiting.into_iter().collect();
        assert!(matches!(
            reasons[&JobId(2)],
            WaitReason::Resources {
                reserved_at: Some(t),
                ..
            } if t == 60 * MIN
        ));
        assert_eq!(
            reasons[&JobId(4)],
            WaitReason::Priority { behind: JobId(2) }
        );
        assert_eq!(
            reasons[&JobId(5)],
            WaitReason::Priority { behind: JobId(2) }
        );
    }

    #[test]
    fn backfill_may_use_gpus_the_reservation_does_not_need() {
        // 4 GPUs, job 1 holds 2 until 60m; head wants 3 (reserved at 60m, needing 3 of 4).
        // One GPU is spare even then, so an unlimited 1-GPU job may take it; a second may not.
        let run = [running(1, &[0, 1], Some(60 * MIN))];
        let p = plan(
            &gpus(4),
            &run,
            &[job(2, 3), job(3, 1), job(4, 1)],
            &HashMap::new(),
            0,
        );
        assert_eq!(started(&p), vec![3]);
        let reasons: HashMap<JobId, WaitReason> = p.waiting.into_iter().collect();
        assert_eq!(
            reasons[&JobId(4)],
            WaitReason::Priority { behind: JobId(2) }
        );
    }

    #[test]
    fn impossible_requests_do_not_block_the_queue() {
        let p = plan(&gpus(2), &[], &[job(1, 3), job(2, 1)], &HashMap::new(), 0);
        assert_eq!(started(&p), vec![2]);
        assert!(matches!(p.waiting[0].1, WaitReason::Impossible { .. }));
        assert!(
            p.waiting[0]
                .1
                .to_string()
                .contains("this machine has 2 GPUs")
        );
    }

    /// A machine with `n` GPUs, `cpus` cores and `mem_gib` GiB for jobs.
    fn machine(n: u32, cpus: u32, mem_gib: u64) -> Occupancy {
        Occupancy::with_hosts(
            &gpus(n),
            &[crate::model::NodeCapacity {
                node: 0,
                cpus,
                mem: mem_gib * GIB,
            }],
        )
    }

    fn cpu_job(id: u64, cpus: u32, mem_gib: u64) -> PendingJob {
        PendingJob {
            request: ResourceRequest::whole(0).with_host(cpus, mem_gib * GIB),
            ..job(id, 0)
        }
    }

    fn plan_here(cluster: &Occupancy, running: &[RunningJob], pending: &[PendingJob]) -> Plan {
        plan_on(
            cluster,
            running,
            pending,
            &HashMap::new(),
            0,
            PlanOptions::default(),
        )
    }

    #[test]
    fn cpu_only_jobs_queue_once_the_cores_are_taken() {
        let cluster = machine(0, 16, 64);
        let pending: Vec<PendingJob> = (1..=20).map(|id| cpu_job(id, 1, 0)).collect();
        let p = plan_here(&cluster, &[], &pending);
        assert_eq!(started(&p), (1..=16).collect::<Vec<_>>(), "one per core");
        assert_eq!(p.waiting.len(), 4);
        assert_eq!(
            p.waiting[0].1.to_string(),
            "resources: needs 1 CPU, 0 of 16 free"
        );
    }

    #[test]
    fn cores_and_memory_of_running_jobs_are_counted() {
        let cluster = machine(2, 16, 64);
        let busy = RunningJob {
            request: ResourceRequest::whole(1).with_host(12, 40 * GIB),
            ..running(1, &[0], None)
        };
        // GPU 1 is free, but only 4 cores are.
        let p = plan_here(
            &cluster,
            std::slice::from_ref(&busy),
            &[PendingJob {
                request: ResourceRequest::whole(1).with_host(8, 0),
                ..job(2, 1)
            }],
        );
        assert!(p.starts.is_empty());
        assert_eq!(
            p.waiting[0].1.to_string(),
            "resources: needs 8 CPUs, 4 of 16 free"
        );
        // Memory: 24 GiB are left.
        let p = plan_here(&cluster, std::slice::from_ref(&busy), &[cpu_job(3, 1, 30)]);
        assert!(p.starts.is_empty());
        assert_eq!(
            p.waiting[0].1.to_string(),
            "resources: needs 30 GiB of memory, 24 GiB of 64 GiB free"
        );
        let p = plan_here(&cluster, &[busy], &[cpu_job(4, 4, 24)]);
        assert_eq!(started(&p), [4], "what is left fits exactly");
    }

    #[test]
    fn a_capacity_lowered_under_running_jobs_starts_nothing_more() {
        // 8 cores for jobs now, but 12 are in use from before.
        let cluster = machine(0, 8, 64);
        let busy = RunningJob {
            request: ResourceRequest::whole(0).with_host(12, 0),
            ..running(1, &[], None)
        };
        let p = plan_here(&cluster, &[busy], &[cpu_job(2, 1, 0)]);
        assert!(p.starts.is_empty());
        assert_eq!(
            p.waiting[0].1.to_string(),
            "resources: needs 1 CPU, 0 of 8 free"
        );
    }

    #[test]
    fn more_cores_or_memory_than_the_machine_gives_is_impossible() {
        let cluster = machine(1, 16, 64);
        let p = plan_here(&cluster, &[], &[cpu_job(1, 32, 0), cpu_job(2, 1, 100)]);
        assert!(p.starts.is_empty());
        let reasons: Vec<String> = p.waiting.iter().map(|(_, w)| w.to_string()).collect();
        assert_eq!(
            reasons,
            [
                "impossible: needs 32 CPUs; jobs may use 16 CPUs here",
                "impossible: needs 100 GiB of memory; jobs may use 64 GiB here",
            ]
        );
    }

    #[test]
    fn backfill_keeps_the_cores_a_blocked_job_is_reserved() {
        let cluster = machine(0, 16, 64);
        // 12 cores busy for 10 minutes; job 2 needs 14 and gets the reservation at t=10m.
        let busy = RunningJob {
            request: ResourceRequest::whole(0).with_host(12, 0),
            ..running(1, &[], Some(10 * MIN))
        };
        let long = PendingJob {
            time_limit: Some(60 * MIN),
            ..cpu_job(3, 4, 0)
        };
        let short = PendingJob {
            time_limit: Some(5 * MIN),
            ..cpu_job(4, 4, 0)
        };
        let p = plan_here(&cluster, &[busy], &[cpu_job(2, 14, 0), long, short]);
        // Four cores are free: the job that ends before t=10m may use them, the one that would
        // still hold them then may not.
        assert_eq!(started(&p), [4]);
        assert!(p.starts[0].backfilled);
        let reasons: Vec<(u64, String)> = p
            .waiting
            .iter()
            .map(|(id, w)| (id.0, w.to_string()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    2,
                    "resources: needs 14 CPUs, 4 of 16 free; reserved to start within 10m00s"
                        .to_string()
                ),
                (
                    3,
                    "priority: would delay job 2, which holds the next reservation".to_string()
                ),
            ]
        );
    }

    #[test]
    fn reasons_read_well() {
        let r = WaitReason::Resources {
            needs: ResourceRequest::whole(2),
            free: Free {
                whole: 1,
                gpus: 4,
                most_shared: 0,
                cpus_free: u64::MAX,
                cpus: u64::MAX,
                mem_free: u64::MAX,
                mem: u64::MAX,
            },
            reserved_at: Some(600_000),
            reserved_in: Some(600_000),
        };
        assert_eq!(
            r.to_string(),
            "resources: needs 2 whole GPUs, 1 of 4 free; reserved to start within 10m00s"
        );
    }

    fn member(id: u64, gang: u64, count: u32, after: &[u64]) -> PendingJob {
        PendingJob {
            gang: Some(gang),
            deps: after
                .iter()
                .map(|&d| Dependency {
                    job: JobId(d),
                    kind: DepKind::Success,
                })
                .collect(),
            ..job(id, count)
        }
    }

    fn queued(ids: &[u64]) -> HashMap<JobId, JobState> {
        ids.iter().map(|&i| (JobId(i), JobState::Queued)).collect()
    }

    #[test]
    fn an_atomic_workflow_is_admitted_whole_and_its_ready_jobs_start() {
        // prep (1 GPU) -> train (2 GPUs) -> eval (1 GPU): 4 GPUs at once, on 4 GPUs.
        let gang = [
            member(1, 7, 1, &[]),
            member(2, 7, 2, &[1]),
            member(3, 7, 1, &[2]),
        ];
        let p = plan(&gpus(4), &[], &gang, &queued(&[1, 2, 3]), 0);
        assert_eq!(p.admissions.len(), 1);
        let reserved: Vec<usize> = p.admissions[0]
            .reserved
            .iter()
            .map(|(_, g)| g.len())
            .collect();
        assert_eq!(reserved, [1, 2, 1]);
        assert_eq!(started(&p), [1], "only the job with no dependency starts");
        assert!(
            p.waiting
                .iter()
                .all(|(_, w)| matches!(w, WaitReason::Dependency { .. }))
        );

        // With one GPU taken, the gang does not fit: nothing of it is admitted or started.
        let busy = [running(9, &[0], Some(10 * MIN))];
        let p = plan(&gpus(4), &busy, &gang, &queued(&[1, 2, 3]), 0);
        assert!(p.admissions.is_empty() && p.starts.is_empty(), "{p:?}");
        match &p.waiting[0].1 {
            WaitReason::Resources { reserved_at, .. } => assert_eq!(*reserved_at, Some(10 * MIN)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reserved_jobs_start_on_their_own_gpus_and_nobody_takes_them() {
        let mut train = member(2, 7, 2, &[1]);
        train.reserved = Some(vec![2, 3]);
        let mut states = queued(&[2, 5]);
        states.insert(JobId(1), JobState::Running);
        let other = job(5, 1);
        let p = plan(
            &gpus(4),
            &[running(1, &[0], None)],
            &[train.clone(), other],
            &states,
            0,
        );
        assert_eq!(
            p.starts,
            vec![Start {
                job: JobId(5),
                gpus: vec![1],
                backfilled: false,
                until: None,
            }]
        );
        states.insert(JobId(1), JobState::Succeeded);
        let p = plan(&gpus(4), &[], &[train], &states, 0);
        assert_eq!(
            p.starts,
            vec![Start {
                job: JobId(2),
                gpus: vec![2, 3],
                backfilled: false,
                until: None,
            }]
        );
    }

    #[test]
    fn two_gangs_never_split_the_gpus_between_them() {
        // Two 3-GPU gangs on 4 GPUs: one is admitted whole, the other waits whole.
        let a = [member(1, 1, 2, &[]), member(2, 1, 1, &[])];
        let b = [member(3, 2, 2, &[]), member(4, 2, 1, &[])];
        let all: Vec<PendingJob> = a.iter().chain(&b).cloned().collect();
        let p = plan(&gpus(4), &[], &all, &queued(&[1, 2, 3, 4]), 0);
        assert_eq!(p.admissions.len(), 1);
        assert_eq!(p.admissions[0].gang, 1);
        assert_eq!(started(&p), [1, 2]);
    }

    #[test]
    fn a_waiting_gang_is_not_starved_by_small_jobs() {
        // 4 GPUs, 2 busy until t=10m. A 4-GPU gang waits for them; a 1-GPU job with no time
        // limit would hold a GPU past 10m and delay it, so it must not start.
        let gang = [member(1, 1, 2, &[]), member(2, 1, 2, &[])];
        let mut small = job(3, 1);
        small.submitted_at = 100;
        let busy = [running(9, &[0, 1], Some(10 * MIN))];
        let mut queue = gang.to_vec();
        queue.push(small.clone());
        let p = plan(&gpus(4), &busy, &queue, &queued(&[1, 2, 3]), 0);
        assert!(started(&p).is_empty(), "{p:?}");
        // A short one that ends before the gang's reservation may backfill.
        small.time_limit = Some(5 * MIN);
        let mut queue = gang.to_vec();
        queue.push(small);
        let p = plan(&gpus(4), &busy, &queue, &queued(&[1, 2, 3]), 0);
        assert_eq!(started(&p), [3]);
    }

    #[test]
    fn a_gang_bigger_than_the_cluster_is_impossible_not_waiting() {
        let gang = [member(1, 1, 3, &[]), member(2, 1, 2, &[])];
        let p = plan(&gpus(4), &[], &gang, &queued(&[1, 2]), 0);
        assert!(
            p.waiting
                .iter()
                .all(|(_, w)| matches!(w, WaitReason::Impossible { .. }))
        );
    }

    #[test]
    fn without_backfill_nothing_passes_a_blocked_job() {
        let busy = [running(9, &[0, 1, 2], Some(10 * MIN))];
        let mut short = job(2, 1);
        short.time_limit = Some(MIN);
        let queue = [job(1, 2), short];
        let fifo = plan_with(
            &gpus(4),
            &busy,
            &queue,
            &queued(&[1, 2]),
            0,
            PlanOptions { backfill: false },
        );
        assert!(fifo.starts.is_empty());
        let easy = plan(&gpus(4), &busy, &queue, &queued(&[1, 2]), 0);
        assert_eq!(started(&easy), [2]);
    }

    #[test]
    fn among_tasks_submitted_together_the_longest_path_goes_first() {
        let mut short = job(1, 1);
        let mut long = job(2, 1);
        short.submitted_at = 0;
        long.submitted_at = 0;
        short.critical_path = 5 * MIN;
        long.critical_path = 50 * MIN;
        let p = plan(&gpus(1), &[], &[short, long], &queued(&[1, 2]), 0);
        assert_eq!(started(&p), [2]);
    }

    #[test]
    fn the_owner_who_used_less_goes_first_at_equal_priority() {
        // A heavy user's sweep job queued first, a colleague's job queued later: one GPU.
        let mut sweep = job(1, 1);
        sweep.owner_usage = 50_000;
        let colleague = job(2, 1);
        let p = plan(
            &gpus(1),
            &[],
            &[sweep.clone(), colleague],
            &queued(&[1, 2]),
            0,
        );
        assert_eq!(started(&p), [2]);
        // Priority still comes first.
        sweep.priority = 1;
        let p = plan(&gpus(1), &[], &[sweep, job(2, 1)], &queued(&[1, 2]), 0);
        assert_eq!(started(&p), [1]);
    }

    #[test]
    fn predicted_starts_play_the_queue_forward_by_time_limits() {
        let busy = [running(9, &[0], Some(10 * MIN))];
        let mut first = job(1, 1);
        first.time_limit = Some(5 * MIN);
        let mut second = job(2, 1);
        second.time_limit = Some(MIN);
        let mut after_first = job(3, 1);
        after_first.deps = vec![Dependency {
            job: JobId(1),
            kind: DepKind::Success,
        }];
        let unbounded = job(4, 1); // no limit: holds its GPU forever
        let mut last = job(5, 1);
        last.time_limit = Some(MIN);
        let p = predicted_starts(
            &Occupancy::new(&gpus(2)),
            &busy,
            &[first, second, after_first, unbounded, last],
            0,
            100,
            &[],
        );
        assert_eq!(p[&JobId(1)], Some(0), "fits now on GPU 1");
        assert_eq!(p[&JobId(2)], Some(5 * MIN), "after job 1 frees GPU 1");
        assert_eq!(
            p[&JobId(3)],
            Some(6 * MIN),
            "after its dependency, when a GPU is free"
        );
        // Job 4 takes the GPU job 9 frees at 10 min and never lets go; job 5 can only say when
        // job 3 ends (at 6 min plus no limit: never).
        assert_eq!(p[&JobId(4)], Some(10 * MIN));
        assert_eq!(p[&JobId(5)], None);
    }

    /// Two nodes of two GPUs: GPUs 0-1 on node 0, 2-3 on node 1.
    fn two_nodes() -> Vec<Gpu> {
        (0..4)
            .map(|index| Gpu {
                index,
                memory_total: 80 * GIB,
                node: index / 2,
            })
            .collect()
    }

    #[test]
    fn a_job_goes_to_its_preferred_node_when_it_fits_there() {
        // Best fit alone would pick node 0 (the fuller one) for a 1-GPU job.
        let busy = [running(9, &[0], None)];
        let mut near = job(1, 1);
        near.prefer_node = Some(1);
        let p = plan(&two_nodes(), &busy, &[near.clone()], &HashMap::new(), 0);
        assert_eq!(p.starts[0].gpus, vec![2]);
        // It does not fit there: it runs elsewhere rather than wait.
        let busy = [running(9, &[2, 3], None)];
        let p = plan(&two_nodes(), &busy, &[near], &HashMap::new(), 0);
        assert_eq!(p.starts[0].gpus, vec![0]);
    }

    #[test]
    fn a_colocated_partner_started_in_the_same_pass_decides_the_node() {
        // Job 1 lands on node 0 (best fit: both empty, lowest id). Job 2 prefers node 1 from
        // its predecessors, but asked to be with job 1, which outranks that.
        let first = job(1, 1);
        let mut second = job(2, 1);
        second.prefer_node = Some(1);
        second.colocate = vec![JobId(1)];
        let p = plan(&two_nodes(), &[], &[first, second], &HashMap::new(), 0);
        assert_eq!(p.starts[0].gpus, vec![0]);
        assert_eq!(p.starts[1].gpus, vec![1], "same node as job 1");
    }
}
