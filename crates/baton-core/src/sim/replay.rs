//! Replaying a trace through the daemon's scheduling pass with a simulated clock.
//!
//! Events are arrivals (at a job's arrival time) and completions (at its start plus its run time).
//! The clock jumps from one instant with events to the next; at each, every event of that instant
//! is applied (completions first, then arrivals), then one pass of
//! [`crate::scheduler::plan_with`] runs over the running and queued jobs, exactly as the daemon
//! runs it after an event, and the jobs it starts are started: they hold their GPUs until their
//! completion. The running and queued lists are updated in place, not rebuilt per pass.
//!
//! Every job declares a time limit of its true run time times `time_limit_factor` (default 1.5:
//! real users over-estimate); backfill trusts it, and a job never runs past it (with a factor
//! under 1, a job is stopped at its limit and counts as done then). A job that could never fit
//! on the simulated cluster (more GPUs than a node has) is left out and counted in `impossible`.
//!
//! With [`super::rules::Rules`], the pass also applies a GPU-hour budget per user and a
//! reservation, as the daemon does ([`crate::scheduler::plan_with_reservations`]); the clock
//! then also stops where the pass asks to be run again (a window begins or ends, a budget
//! period resets), and the metrics say what the rules did ([`super::rules::Effect`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use serde::{Deserialize, Serialize};

use crate::model::{JobId, Millis, PendingJob, RunningJob};
use crate::placement::Occupancy;
use crate::scheduler::{Start, WaitReason, plan_with, plan_with_reservations};

use super::metrics::{mean, percentile, round, secs};
use super::rules::{Applied, Effect, Rules};
use super::slots::{RequestKey, Slots, key};
use super::trace::TraceJob;
use super::{Cluster, DEFAULT_TIME_LIMIT_FACTOR, Policy, SimError, check_factor, time_limit};

/// How to replay.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplayOptions {
    pub cluster: Cluster,
    /// A job's declared time limit is its run time times this.
    pub time_limit_factor: f64,
    /// Budgets and a reservation (none by default).
    #[serde(default)]
    pub rules: Rules,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            cluster: Cluster::default(),
            time_limit_factor: DEFAULT_TIME_LIMIT_FACTOR,
            rules: Rules::default(),
        }
    }
}

/// What a policy achieved on a trace. Times in seconds; a job's completion time (JCT) is its end
/// minus its arrival, its wait is its start minus its arrival.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub policy: Policy,
    /// Jobs that ran to the end (the statistics are over these).
    pub jobs: usize,
    pub avg_jct_s: f64,
    /// Nearest-rank percentiles ([`crate::sim::percentile`]).
    pub p50_jct_s: f64,
    pub p99_jct_s: f64,
    pub avg_wait_s: f64,
    pub p99_wait_s: f64,
    /// From the first arrival to the last completion.
    pub makespan_s: f64,
    /// Allocated GPU-time / (GPUs × makespan). A shared job counts the fraction of each GPU's
    /// memory it holds (0.46 for `gpu_milli = 460`).
    pub gpu_alloc_rate: f64,
    /// How fragmented the free GPU capacity is while jobs wait for GPUs: the mean, over the
    /// passes after which at least one job waits for a GPU and some GPU capacity is free, of the
    /// share of the free capacity that a job drawn from the trace's own request mix could not
    /// use where it lies (the measure of Weng et al., ATC '23, with the trace as the workload).
    ///
    /// Exactly, after each such pass: with `C` the free GPU capacity (an idle GPU counts 1, a
    /// GPU held only by shared jobs the free share of its memory, a GPU held whole 0), `n_r` the
    /// number of the trace's jobs asking for request `r` (GPUs, and memory per GPU if shared;
    /// jobs without a GPU left out), `N = Σ n_r`, and `S_r` the part of `C` that `r` cannot use
    /// (all of a node's free capacity where `r` does not fit on that node; where it fits, that
    /// of the GPUs that cannot take it): `Σ_r n_r · S_r / (N · C)`. 0 when no pass qualifies.
    pub fragmentation: f64,
    /// The passes `fragmentation` averages over.
    pub fragmentation_passes: u64,
    /// Scheduling passes run.
    pub passes: u64,
    /// Jobs started ahead of a job holding a reservation.
    pub backfilled: usize,
    /// The most jobs queued after any pass.
    pub max_queued: usize,
    /// Jobs left out because the cluster could never run them.
    pub impossible: usize,
    /// Jobs still queued when the events ran out (none unless something is wrong).
    pub unfinished: usize,
    /// What the rules did, when the replay had any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<Effect>,
}

/// When one job of the trace started and ended, if it did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub start: Option<Millis>,
    pub end: Option<Millis>,
}

/// The result of a replay: the metrics and, per job of the trace (same order), its outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    pub metrics: Metrics,
    pub outcomes: Vec<Outcome>,
}

const NONE: usize = usize::MAX;

/// Under `fifo`, the queue is handed to the pass this many jobs at a time (see [`replay`]).
const FIFO_WINDOW: usize = 64;

/// Replays `jobs` (in arrival order, as [`super::parse_openb`] returns them) under `policy`.
///
/// Under `fifo` a pass starts exactly the longest prefix of the queue that fits one job after
/// the other (in arrival order, which is how the pass orders these jobs: one priority, no owner
/// usage, no critical path), and what comes after the first job that does not fit changes
/// nothing. So the replay hands the pass the first 64 queued jobs, again with the
/// next ones while a whole window started, and runs no pass at all when the first queued job
/// does not fit on the free GPUs. The result is the same as one pass over the whole queue
/// (a test checks it), without costing every pass the length of a queue that FIFO lets grow
/// to thousands.
pub fn replay(
    jobs: &[TraceJob],
    policy: Policy,
    options: &ReplayOptions,
) -> Result<Replay, SimError> {
    replay_with(jobs, policy, options, true)
}

fn replay_with(
    jobs: &[TraceJob],
    policy: Policy,
    options: &ReplayOptions,
    fifo_shortcut: bool,
) -> Result<Replay, SimError> {
    let cluster = options.cluster;
    cluster.check()?;
    check_factor(options.time_limit_factor)?;
    if jobs.windows(2).any(|w| w[0].arrival > w[1].arrival) {
        return Err(SimError::Options(
            "the trace's jobs must be in arrival order".into(),
        ));
    }
    let gpus = cluster.gpus();
    let empty = Occupancy::new(&gpus);
    let plan_options = policy.plan_options();
    let ruled = options.rules.any();
    let mut rules = Applied::new(options.rules, jobs, &empty)?;
    // The shortcut knows nothing of budgets and reservations.
    let fifo_shortcut = fifo_shortcut && policy == Policy::Fifo && !ruled;
    // Per job: it ran in the reservation; it waited for its owner's budget.
    let mut in_window = vec![false; jobs.len()];
    let mut held_by_budget = vec![false; jobs.len()];
    let mut missed = 0;
    // When the pass asked to be run again (a window's edge, a budget's reset).
    let mut wakeup: Option<Millis> = None;
    // No job depends on another in a trace.
    let states = HashMap::new();

    let n = jobs.len();
    let mut queue = Queue {
        in_order: fifo_shortcut,
        jobs: Vec::new(),
        front: 0,
        at: vec![NONE; n],
    };
    let mut run = Run {
        jobs,
        outcomes: vec![Outcome::default(); n],
        running: Vec::new(),
        running_at: vec![NONE; n],
        completions: BinaryHeap::new(),
        slots: Slots::new(&cluster),
        free: Occupancy::new(&gpus),
        waiting_for_gpus: 0,
        backfilled: 0,
        allocated_gpu_ms: 0.0,
        cut_short: 0,
    };
    // The trace's request mix, the workload fragmentation is measured against.
    let mut workload: BTreeMap<RequestKey, usize> = BTreeMap::new();
    for job in jobs {
        let request = job.request(cluster.gpu_memory);
        if request.count > 0 && empty.could_ever_fit(&request) {
            *workload.entry(key(&request)).or_default() += 1;
        }
    }

    let mut next = 0;
    let mut passes = 0u64;
    let mut max_queued = 0;
    let mut impossible = 0;
    let (mut frag_sum, mut frag_passes) = (0.0, 0u64);

    loop {
        let events = [
            jobs.get(next).map(|j| j.arrival),
            run.completions.peek().map(|Reverse((t, _))| *t),
            wakeup.filter(|_| !queue.is_empty()),
        ];
        let Some(now) = events.into_iter().flatten().min() else {
            break;
        };
        wakeup = wakeup.filter(|&w| w > now);
        rules.roll(now);
        while let Some(&Reverse((t, i))) = run.completions.peek()
            && t == now
        {
            run.completions.pop();
            let (gpus, start) = run.finish(i, now);
            rules.ended(i, gpus, start, now);
        }
        while let Some(job) = jobs.get(next)
            && job.arrival == now
        {
            let i = next;
            next += 1;
            let request = job.request(cluster.gpu_memory);
            if !empty.could_ever_fit(&request) {
                impossible += 1;
                continue;
            }
            let limit = time_limit(job.run_time, options.time_limit_factor);
            let priority = policy.priority(0, job.arrival, limit);
            let window = rules.window_for(i, now, limit);
            in_window[i] = window.is_some();
            queue.push(
                i,
                PendingJob {
                    window,
                    ..PendingJob::new(
                        id(i),
                        priority,
                        job.arrival,
                        request,
                        Some(limit),
                        Vec::new(),
                    )
                },
            );
            run.waiting_for_gpus += usize::from(request.count > 0);
        }
        if queue.is_empty() {
            continue;
        }

        passes += 1;
        if fifo_shortcut {
            loop {
                let queued = queue.all();
                let window = &queued[..queued.len().min(FIFO_WINDOW)];
                if window.is_empty() || run.free.choose(&window[0].request).is_none() {
                    break;
                }
                let plan = plan_with(&gpus, &run.running, window, &states, now, plan_options);
                let whole_window = plan.starts.len() == window.len();
                for start in plan.starts {
                    let job = queue.take(index(start.job));
                    run.start(job, start, now);
                }
                if !whole_window {
                    break;
                }
            }
        } else if ruled {
            let running = run.running.iter().map(|r| {
                let i = index(r.id);
                (i, r.request.count, run.outcomes[i].start.unwrap_or(now))
            });
            let (limits, resets) = rules.limits(now, running, queue.all(), index);
            let plan = plan_with_reservations(
                &empty,
                &run.running,
                queue.all(),
                &states,
                now,
                plan_options,
                &limits,
                &rules.windows,
            );
            for start in plan.starts {
                let job = queue.take(index(start.job));
                run.start(job, start, now);
            }
            for gone in plan.reservation_gone {
                let job = queue.take(index(gone));
                run.waiting_for_gpus -= usize::from(job.request.count > 0);
                missed += 1;
            }
            for (job, why) in &plan.waiting {
                if matches!(why, WaitReason::Budget(_)) {
                    held_by_budget[index(*job)] = true;
                }
            }
            wakeup = [wakeup, plan.next_wakeup, resets]
                .into_iter()
                .flatten()
                .filter(|&t| t > now)
                .min();
        } else {
            let plan = plan_with(&gpus, &run.running, queue.all(), &states, now, plan_options);
            for start in plan.starts {
                let job = queue.take(index(start.job));
                run.start(job, start, now);
            }
        }
        max_queued = max_queued.max(queue.len());
        if run.waiting_for_gpus > 0
            && let Some(f) = run.slots.fragmentation(&workload)
        {
            frag_sum += f;
            frag_passes += 1;
        }
    }
    let Run {
        outcomes,
        backfilled,
        allocated_gpu_ms,
        cut_short,
        ..
    } = run;

    let mut jct = Vec::with_capacity(n);
    let mut wait = Vec::with_capacity(n);
    let mut last_end = Millis::MIN;
    for (job, outcome) in jobs.iter().zip(&outcomes) {
        if let (Some(start), Some(end)) = (outcome.start, outcome.end) {
            jct.push(secs(end - job.arrival));
            wait.push(secs(start - job.arrival));
            last_end = last_end.max(end);
        }
    }
    let effect = ruled.then(|| {
        let waits = |inside: bool| {
            let w: Vec<f64> = jobs
                .iter()
                .zip(&outcomes)
                .enumerate()
                .filter(|(i, _)| in_window[*i] == inside)
                .filter_map(|(_, (job, o))| o.start.map(|s| secs(s - job.arrival)))
                .collect();
            (w.len(), round(mean(&w), 3))
        };
        let (reserved_ran, reserved_avg_wait_s) = waits(true);
        Effect {
            held_by_budget: held_by_budget.iter().filter(|&&h| h).count(),
            reserved: in_window.iter().filter(|&&w| w).count(),
            reserved_ran,
            reserved_missed: missed,
            reserved_cut: cut_short,
            reserved_avg_wait_s,
            outside_avg_wait_s: waits(false).1,
        }
    });
    let first_arrival = jobs.first().map_or(0, |j| j.arrival);
    let makespan = if jct.is_empty() {
        0
    } else {
        last_end - first_arrival
    };
    jct.sort_by(f64::total_cmp);
    wait.sort_by(f64::total_cmp);
    let capacity = f64::from(cluster.total_gpus()) * makespan as f64;
    let metrics = Metrics {
        policy,
        jobs: jct.len(),
        avg_jct_s: round(mean(&jct), 3),
        p50_jct_s: round(percentile(&jct, 50.0), 3),
        p99_jct_s: round(percentile(&jct, 99.0), 3),
        avg_wait_s: round(mean(&wait), 3),
        p99_wait_s: round(percentile(&wait, 99.0), 3),
        makespan_s: round(secs(makespan), 3),
        gpu_alloc_rate: if capacity > 0.0 {
            round(allocated_gpu_ms / capacity, 4)
        } else {
            0.0
        },
        fragmentation: if frag_passes > 0 {
            round(frag_sum / frag_passes as f64, 4)
        } else {
            0.0
        },
        fragmentation_passes: frag_passes,
        passes,
        backfilled,
        max_queued,
        impossible,
        unfinished: queue.len(),
        rules: effect,
    };
    Ok(Replay { metrics, outcomes })
}

/// What runs, and what the replay has measured so far.
struct Run<'a> {
    jobs: &'a [TraceJob],
    outcomes: Vec<Outcome>,
    running: Vec<RunningJob>,
    /// Job index → position in `running`.
    running_at: Vec<usize>,
    completions: BinaryHeap<Reverse<(Millis, usize)>>,
    slots: Slots,
    /// The same holdings as the scheduler's occupancy, for the fifo shortcut.
    free: Occupancy,
    /// Queued jobs that need a GPU.
    waiting_for_gpus: usize,
    backfilled: usize,
    allocated_gpu_ms: f64,
    /// Jobs stopped at their reservation's end before their run time was up.
    cut_short: usize,
}

impl Run<'_> {
    fn start(&mut self, job: PendingJob, start: Start, now: Millis) {
        let i = index(start.job);
        let request = job.request;
        self.waiting_for_gpus -= usize::from(request.count > 0);
        // A job in a reservation is stopped at the window's end.
        let limit = match (job.time_limit, start.until) {
            (limit, Some(until)) => limit.unwrap_or(Millis::MAX).min(until - now),
            (limit, None) => limit.unwrap_or(Millis::MAX),
        };
        let duration = self.jobs[i].run_time.min(limit);
        self.cut_short += usize::from(
            start.until.is_some()
                && duration
                    < self.jobs[i]
                        .run_time
                        .min(job.time_limit.unwrap_or(Millis::MAX)),
        );
        self.slots.hold(&start.gpus, &request);
        self.free
            .hold(&start.gpus, &request)
            .expect("the pass starts jobs on free GPUs");
        self.allocated_gpu_ms += self.jobs[i].gpu_amount() * duration as f64;
        self.backfilled += usize::from(start.backfilled);
        self.outcomes[i].start = Some(now);
        self.completions.push(Reverse((now + duration, i)));
        self.running_at[i] = self.running.len();
        self.running.push(RunningJob {
            id: start.job,
            gpus: start.gpus,
            request,
            ends_by: Some(now.saturating_add(limit)),
        });
    }

    /// Ends job `i`: the GPUs it held and when it started.
    fn finish(&mut self, i: usize, now: Millis) -> (u32, Millis) {
        let pos = std::mem::replace(&mut self.running_at[i], NONE);
        let job = self.running.swap_remove(pos);
        if let Some(moved) = self.running.get(pos) {
            self.running_at[index(moved.id)] = pos;
        }
        self.slots.release(&job.gpus, &job.request);
        self.free.release(&job.gpus, &job.request);
        self.outcomes[i].end = Some(now);
        (job.request.count, self.outcomes[i].start.unwrap_or(now))
    }
}

/// The queued jobs: in any order with O(1) removal anywhere, or (`in_order`, for the fifo
/// shortcut) in arrival order, taken from the front.
struct Queue {
    in_order: bool,
    jobs: Vec<PendingJob>,
    /// With `in_order`: where the queue starts in `jobs`.
    front: usize,
    /// Job index → position in `jobs`.
    at: Vec<usize>,
}

impl Queue {
    fn all(&self) -> &[PendingJob] {
        &self.jobs[self.front..]
    }

    fn len(&self) -> usize {
        self.jobs.len() - self.front
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push(&mut self, i: usize, job: PendingJob) {
        self.at[i] = self.jobs.len();
        self.jobs.push(job);
    }

    fn take(&mut self, i: usize) -> PendingJob {
        let pos = std::mem::replace(&mut self.at[i], NONE);
        if self.in_order {
            assert_eq!(pos, self.front, "fifo starts the front of its queue");
            let job = self.jobs[pos].clone();
            self.front += 1;
            if self.front >= 1024 && 2 * self.front >= self.jobs.len() {
                self.jobs.drain(..self.front);
                self.front = 0;
                for (pos, job) in self.jobs.iter().enumerate() {
                    self.at[index(job.id)] = pos;
                }
            }
            job
        } else {
            let job = self.jobs.swap_remove(pos);
            if let Some(moved) = self.jobs.get(pos) {
                self.at[index(moved.id)] = pos;
            }
            job
        }
    }
}

fn id(i: usize) -> JobId {
    JobId(i as u64 + 1)
}

fn index(id: JobId) -> usize {
    id.0 as usize - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, arrival_s: i64, run_s: i64, gpus: u32) -> TraceJob {
        TraceJob {
            name: name.into(),
            line: 0,
            arrival: arrival_s * 1000,
            run_time: run_s * 1000,
            gpus,
            gpu_milli: 1000,
        }
    }

    fn one_node(gpus: u32) -> ReplayOptions {
        ReplayOptions {
            cluster: Cluster::new(1, gpus),
            time_limit_factor: 1.0,
            rules: Rules::default(),
        }
    }

    fn starts(r: &Replay) -> Vec<Option<i64>> {
        r.outcomes
            .iter()
            .map(|o| o.start.map(|s| s / 1000))
            .collect()
    }

    #[test]
    fn a_spent_budget_holds_its_users_jobs_until_the_next_period() {
        let trace = vec![job("a", 0, 3_600, 1), job("b", 10, 60, 1)];
        let plain = replay(&trace, Policy::Backfill, &one_node(1)).unwrap();
        assert_eq!(starts(&plain), vec![Some(0), Some(3_600)]);
        assert_eq!(plain.metrics.rules, None);
        // One GPU-hour a day: job a uses it up, so b waits for the next day.
        let rules = Rules {
            users: 1,
            budget: Some(super::super::Budget {
                gpu_hours: 1.0,
                period: crate::limits::Period::Day,
            }),
            reservation: None,
        };
        let ruled = replay(
            &trace,
            Policy::Backfill,
            &ReplayOptions {
                rules,
                ..one_node(1)
            },
        )
        .unwrap();
        assert_eq!(starts(&ruled), vec![Some(0), Some(86_400)]);
        let effect = ruled.metrics.rules.unwrap();
        assert_eq!(effect.held_by_budget, 1);
        assert_eq!(ruled.metrics.unfinished, 0);
    }

    /// On 2 GPUs, one reserved for user 0 (the only user) from 100 s to 200 s:
    /// - a (0 s, 500 s) would run into it: it takes the other GPU;
    /// - b (0 s, 50 s) ends before it begins: it backfills onto the reserved GPU;
    /// - c (0 s, 200 s) would run into it and the other GPU is a's: it waits for its end;
    /// - d (120 s, 50 s) arrives in it and fits: it runs in it at once;
    /// - e (150 s, 80 s) would outlast it, so it is outside it, behind c: at c's end.
    #[test]
    fn a_reservation_keeps_its_gpu_for_its_users_jobs() {
        let trace = vec![
            job("a", 0, 500, 1),
            job("b", 0, 50, 1),
            job("c", 0, 200, 1),
            job("d", 120, 50, 1),
            job("e", 150, 80, 1),
        ];
        let rules = Rules {
            users: 1,
            budget: None,
            reservation: Some(super::super::Reservation {
                gpus: 1,
                start: 100_000,
                duration: 100_000,
                user: 0,
            }),
        };
        let ruled = replay(
            &trace,
            Policy::Backfill,
            &ReplayOptions {
                rules,
                ..one_node(2)
            },
        )
        .unwrap();
        assert_eq!(
            starts(&ruled),
            vec![Some(0), Some(0), Some(200), Some(120), Some(400)]
        );
        let effect = ruled.metrics.rules.unwrap();
        assert_eq!(
            (effect.reserved, effect.reserved_ran, effect.reserved_missed),
            (1, 1, 0)
        );
        assert_eq!(effect.reserved_avg_wait_s, 0.0);
        // Without it, c runs after b and e after d.
        let plain = replay(&trace, Policy::Backfill, &one_node(2)).unwrap();
        assert_eq!(
            starts(&plain),
            vec![Some(0), Some(0), Some(50), Some(250), Some(300)]
        );
    }

    fn ends(r: &Replay) -> Vec<i64> {
        r.outcomes.iter().map(|o| o.end.unwrap() / 1000).collect()
    }

    /// On 4 GPUs: A (2 GPUs, 0-100 s), B (4 GPUs, arrives at 10 s), C (1 GPU, 50 s, at 20 s),
    /// D (2 GPUs, 200 s, at 30 s).
    /// - fifo: B waits for A (100-150), C and D wait behind B: C 150-200, D 150-350.
    /// - backfill: B is reserved at 100; C ends at 70 ≤ 100, so it backfills at 20 (20-70); D
    ///   would hold 2 GPUs past 100, so it waits: B 100-150, D 150-350.
    fn hand_trace() -> Vec<TraceJob> {
        vec![
            job("A", 0, 100, 2),
            job("B", 10, 50, 4),
            job("C", 20, 50, 1),
            job("D", 30, 200, 2),
        ]
    }

    #[test]
    fn fifo_and_backfill_on_a_hand_computed_trace() {
        let trace = hand_trace();
        let fifo = replay(&trace, Policy::Fifo, &one_node(4)).unwrap();
        assert_eq!(ends(&fifo), [100, 150, 200, 350]);
        let m = &fifo.metrics;
        // JCTs 100, 140, 180, 320; waits 0, 90, 130, 120.
        assert_eq!(m.jobs, 4);
        assert_eq!(m.avg_jct_s, 185.0);
        assert_eq!(m.p50_jct_s, 140.0);
        assert_eq!(m.p99_jct_s, 320.0);
        assert_eq!(m.avg_wait_s, 85.0);
        assert_eq!(m.makespan_s, 350.0);
        // GPU-seconds: 2·100 + 4·50 + 1·50 + 2·200 = 850, over 4 GPUs × 350 s.
        assert_eq!(m.gpu_alloc_rate, round(850.0 / 1400.0, 4));
        assert_eq!(m.backfilled, 0);

        let easy = replay(&trace, Policy::Backfill, &one_node(4)).unwrap();
        assert_eq!(ends(&easy), [100, 150, 70, 350]);
        let m = &easy.metrics;
        // JCTs 100, 140, 50, 320; waits 0, 90, 0, 120.
        assert_eq!(m.avg_jct_s, 152.5);
        assert_eq!(m.p50_jct_s, 100.0);
        assert_eq!(m.avg_wait_s, 52.5);
        assert_eq!(m.makespan_s, 350.0);
        assert_eq!(m.backfilled, 1);
        assert_eq!(m.unfinished + m.impossible, 0);
    }

    #[test]
    fn baton_runs_the_shorter_prediction_first() {
        // 1 GPU busy until 100 s; at 100 s a long job (arrived 10 s, 500 s) and a short one
        // (arrived 80 s, 30 s: too long to backfill before 100 s) wait. fifo/backfill run the
        // long one first; baton the short one (predicted finish 110 s against 510 s).
        let trace = vec![
            job("busy", 0, 100, 1),
            job("long", 10, 500, 1),
            job("short", 80, 30, 1),
        ];
        let easy = replay(&trace, Policy::Backfill, &one_node(1)).unwrap();
        assert_eq!(ends(&easy), [100, 600, 630]);
        let baton = replay(&trace, Policy::Baton, &one_node(1)).unwrap();
        assert_eq!(ends(&baton), [100, 630, 130]);
        assert!(baton.metrics.avg_jct_s < easy.metrics.avg_jct_s);
    }

    #[test]
    fn limits_stop_jobs_and_impossible_jobs_are_left_out() {
        let trace = vec![job("big", 0, 10, 8), job("a", 0, 100, 1)];
        let r = replay(
            &trace,
            Policy::Backfill,
            &ReplayOptions {
                cluster: Cluster::new(2, 4),
                time_limit_factor: 0.5,
                rules: Rules::default(),
            },
        )
        .unwrap();
        assert_eq!(r.metrics.impossible, 1);
        assert_eq!(r.outcomes[0], Outcome::default());
        assert_eq!(r.outcomes[1].end, Some(50_000), "stopped at its limit");
        assert!(
            replay(
                &trace,
                Policy::Fifo,
                &ReplayOptions {
                    time_limit_factor: -1.0,
                    ..ReplayOptions::default()
                }
            )
            .is_err()
        );
    }

    #[test]
    fn shared_jobs_pack_onto_one_gpu() {
        let mut a = job("a", 0, 100, 1);
        a.gpu_milli = 500;
        let mut b = job("b", 0, 100, 1);
        b.gpu_milli = 500;
        let whole = job("w", 0, 100, 1);
        // 2 GPUs: the two halves share one, the whole job takes the other; all start at 0.
        let r = replay(&[a, b, whole], Policy::Fifo, &one_node(2)).unwrap();
        assert_eq!(ends(&r), [100, 100, 100]);
        // Allocated: 0.5·100 + 0.5·100 + 1·100 = 200 GPU-s of 2 × 100.
        assert_eq!(r.metrics.gpu_alloc_rate, 1.0);
        assert_eq!(r.metrics.fragmentation_passes, 0);
    }

    /// A busy random trace: bursts of arrivals, 0-4 GPUs (some 8, never fitting 4-GPU nodes),
    /// half the 1-GPU jobs shared.
    fn random_trace(seed: u64, jobs: usize) -> Vec<TraceJob> {
        let mut trace = Vec::new();
        let mut rng = super::super::rng::Rng::new(seed);
        let mut t = 0;
        for i in 0..jobs {
            t += rng.range(0, 20) as i64 * rng.range(0, 1) as i64;
            let gpus = match rng.range(0, 20) {
                0 => 8,
                g => (g % 5) as u32,
            };
            let mut j = job(&format!("j{i}"), t, rng.range(1, 400) as i64, gpus);
            if j.gpus == 1 && rng.range(0, 1) == 0 {
                j.gpu_milli = rng.range(100, 900) as u32;
            }
            trace.push(j);
        }
        trace
    }

    #[test]
    fn the_fifo_shortcut_gives_what_full_passes_give() {
        for seed in 0..4 {
            let trace = random_trace(seed, 400);
            for cluster in [Cluster::new(2, 4), Cluster::new(3, 8), Cluster::new(40, 8)] {
                let opts = ReplayOptions {
                    cluster,
                    time_limit_factor: 1.5,
                    rules: Rules::default(),
                };
                let fast = replay_with(&trace, Policy::Fifo, &opts, true).unwrap();
                let full = replay_with(&trace, Policy::Fifo, &opts, false).unwrap();
                assert_eq!(fast, full, "seed {seed}, {cluster:?}");
                if cluster.nodes == 2 {
                    assert!(fast.metrics.max_queued > 50, "{:?}", fast.metrics);
                }
            }
        }
        // More than a window's worth of jobs starting in one pass.
        let burst: Vec<TraceJob> = (0..200)
            .map(|i| job("b", 0, 10 + i % 7, (i % 2) as u32))
            .collect();
        let opts = one_node(128);
        let fast = replay_with(&burst, Policy::Fifo, &opts, true).unwrap();
        assert_eq!(
            fast,
            replay_with(&burst, Policy::Fifo, &opts, false).unwrap()
        );
        assert!(fast.outcomes.iter().all(|o| o.start == Some(0)));
    }

    #[test]
    fn the_same_trace_gives_the_same_result() {
        let trace = random_trace(3, 300);
        let opts = ReplayOptions {
            cluster: Cluster::new(2, 4),
            time_limit_factor: 1.5,
            rules: Rules::default(),
        };
        for policy in Policy::ALL {
            let a = replay(&trace, policy, &opts).unwrap();
            let b = replay(&trace, policy, &opts).unwrap();
            assert_eq!(a, b);
            assert_eq!(a.metrics.jobs + a.metrics.impossible, 300);
            assert!(a.metrics.impossible > 0, "8-GPU jobs never fit 4-GPU nodes");
            assert!(
                a.metrics.max_queued > 10,
                "the queue must form: {:?}",
                a.metrics
            );
            assert!(a.metrics.gpu_alloc_rate > 0.0 && a.metrics.gpu_alloc_rate <= 1.0);
            assert!((0.0..=1.0).contains(&a.metrics.fragmentation));
        }
    }
}
