//! Reservations' windows in the scheduling pass (issue 19): examples, then properties over
//! random machines, running sets, queues and windows: a window's GPUs go to a job outside it
//! only if that job ends, by its time limit, before the window begins; a job in a window starts
//! only within it, only on its GPUs, and with the window's end as its end; nothing is ever
//! over-allocated and every queued job is accounted for once.

use std::collections::HashMap;

use baton_core::limits::Limits;
use baton_core::placement::Occupancy;
use baton_core::scheduler::{Plan, PlanOptions, plan_with_reservations, predicted_starts};
use baton_core::windows::Window;
use baton_core::{Gpu, JobId, JobState, Millis, PendingJob, ResourceRequest, RunningJob};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;
const MIN: Millis = 60_000;
const H: Millis = 60 * MIN;
const NOW: Millis = 1_000 * H;

fn gpus(n: u32) -> Vec<Gpu> {
    (0..n)
        .map(|index| Gpu {
            index,
            memory_total: 80 * GIB,
            node: 0,
        })
        .collect()
}

fn job(id: u64, count: u32, limit: Option<Millis>) -> PendingJob {
    PendingJob::new(
        JobId(id),
        0,
        id as Millis,
        ResourceRequest::whole(count),
        limit,
        vec![],
    )
}

fn in_window(id: u64, count: u32, limit: Option<Millis>, window: u64) -> PendingJob {
    PendingJob {
        window: Some(window),
        ..job(id, count, limit)
    }
}

fn window(id: u64, gpus: &[u32], start: Millis, end: Millis) -> Window {
    Window {
        id,
        name: format!("w{id}"),
        gpus: gpus.to_vec(),
        start,
        end,
    }
}

fn pass(
    n: u32,
    running: &[RunningJob],
    pending: &[PendingJob],
    windows: &[Window],
    now: Millis,
) -> Plan {
    let states: HashMap<JobId, JobState> = HashMap::new();
    plan_with_reservations(
        &Occupancy::new(&gpus(n)),
        running,
        pending,
        &states,
        now,
        PlanOptions::default(),
        &Limits::default(),
        windows,
    )
}

fn reason(p: &Plan, id: u64) -> String {
    p.waiting
        .iter()
        .find(|(j, _)| *j == JobId(id))
        .map(|(_, r)| r.to_string())
        .unwrap_or_else(|| panic!("job {id} is not waiting: {p:?}"))
}

#[test]
fn only_jobs_that_end_before_a_window_backfill_into_it() {
    // GPUs 2-3 are kept from an hour from now for two hours.
    let w = [window(1, &[2, 3], NOW + H, NOW + 3 * H)];
    let queue = [
        job(1, 2, None),
        job(2, 2, None),
        job(3, 1, Some(30 * MIN)),
        job(4, 1, Some(2 * H)),
    ];
    let p = pass(4, &[], &queue, &w, NOW);
    let started: Vec<(u64, Vec<u32>)> =
        p.starts.iter().map(|s| (s.job.0, s.gpus.clone())).collect();
    // Job 1 takes GPUs 0-1; job 2 has no limit, so not the kept GPUs; job 3 ends in time.
    assert_eq!(started, vec![(1, vec![0, 1]), (3, vec![2])]);
    let why = reason(&p, 2);
    assert!(
        why.starts_with("reservation: needs 2 whole GPUs")
            && why.contains("reservation w1 from 1h"),
        "{why}"
    );
    assert!(
        why.contains("with a time limit that ends before then"),
        "{why}"
    );
    // Job 4 would run into the window.
    assert!(
        reason(&p, 4).starts_with("reservation: needs"),
        "{}",
        reason(&p, 4)
    );
}

#[test]
fn a_job_in_a_window_waits_for_it_then_runs_on_its_gpus_until_its_end() {
    let w = [window(7, &[1, 2], NOW + H, NOW + 3 * H)];
    let queue = [in_window(1, 2, None, 7), job(2, 1, None)];
    let before = pass(4, &[], &queue, &w, NOW);
    assert_eq!(reason(&before, 1), "reservation: w7 begins in 1h00m");
    assert_eq!(before.next_wakeup, Some(NOW + H));
    // The other job stays off the window's GPUs.
    assert_eq!(before.starts.len(), 1);
    assert_eq!(before.starts[0].gpus, vec![0]);

    let during = pass(4, &[], &queue[..1], &w, NOW + H);
    assert_eq!(during.starts.len(), 1);
    let s = &during.starts[0];
    assert_eq!((s.gpus.clone(), s.until), (vec![1, 2], Some(NOW + 3 * H)));

    // Full: a second job in the window waits, saying what the window has.
    let running = [RunningJob {
        id: JobId(1),
        gpus: vec![1, 2],
        request: ResourceRequest::whole(2),
        ends_by: Some(NOW + 3 * H),
    }];
    let full = pass(4, &running, &[in_window(3, 1, None, 7)], &w, NOW + H);
    assert_eq!(
        reason(&full, 3),
        "reservation: w7's GPUs: needs 1 whole GPU, 0 of 2 free"
    );
    // Over (or deleted): its jobs can never start.
    let over = pass(4, &[], &[in_window(3, 1, None, 7)], &w, NOW + 3 * H);
    assert_eq!(over.reservation_gone, vec![JobId(3)]);
}

#[test]
fn a_window_keeps_a_sweeps_throttle_and_fails_its_jobs_once_gone() {
    let w = [window(1, &[0, 1], NOW, NOW + H)];
    let throttle = Some(baton_core::Throttle {
        group: 5,
        max: 1,
        running: 0,
    });
    let runs = [
        PendingJob {
            throttle,
            ..in_window(1, 1, None, 1)
        },
        PendingJob {
            throttle,
            ..in_window(2, 1, None, 1)
        },
    ];
    let p = pass(4, &[], &runs, &w, NOW);
    assert_eq!(p.starts.len(), 1, "{p:?}");
    assert!(reason(&p, 2).starts_with("throttled:"), "{}", reason(&p, 2));
    // A job of a reservation that is gone fails even while it waits for its --begin.
    let later = PendingJob {
        begin: Some(NOW + 2 * H),
        ..in_window(3, 1, None, 1)
    };
    let p = pass(4, &[], &[later], &w, NOW + H);
    assert_eq!(p.reservation_gone, vec![JobId(3)]);
}

#[test]
fn a_window_in_the_way_makes_the_head_reserve_past_it() {
    // All four GPUs kept from now for an hour: an unlimited 4-GPU job is reserved for its end.
    let w = [window(1, &[0, 1, 2, 3], NOW, NOW + H)];
    let p = pass(4, &[], &[job(1, 4, None)], &w, NOW);
    assert_eq!(
        reason(&p, 1),
        "reservation: needs 4 whole GPUs, 4 of 4 free, but GPUs it could use are kept for \
         reservation w1 for 1h00m more; reserved to start within 1h00m"
    );
}

#[test]
fn predictions_put_window_jobs_in_their_window_and_others_past_it() {
    let w = [window(1, &[0, 1], NOW + H, NOW + 2 * H)];
    let queue = [in_window(1, 2, None, 1), job(2, 2, Some(3 * H))];
    let p = predicted_starts(&Occupancy::new(&gpus(2)), &[], &queue, NOW, 10, &w);
    assert_eq!(p[&JobId(1)], Some(NOW + H));
    assert_eq!(p[&JobId(2)], Some(NOW + 2 * H));
}

fn request() -> impl Strategy<Value = ResourceRequest> {
    prop_oneof![
        (0u32..=3).prop_map(ResourceRequest::whole),
        (1u32..=2, 5u64..=80).prop_map(|(n, g)| ResourceRequest::shared(n, g * GIB)),
    ]
}

fn limit() -> impl Strategy<Value = Option<Millis>> {
    prop_oneof![Just(None), (1i64..=240).prop_map(|m| Some(m * MIN))]
}

#[derive(Debug, Clone)]
struct World {
    n: u32,
    running: Vec<RunningJob>,
    pending: Vec<PendingJob>,
    windows: Vec<Window>,
}

fn world() -> impl Strategy<Value = World> {
    let windows = prop::collection::vec(
        (
            prop::collection::vec(any::<bool>(), 8),
            -60i64..=180,
            1i64..=240,
        ),
        0..3,
    );
    let running = prop::collection::vec((request(), limit()), 0..6);
    let pending = prop::collection::vec((request(), limit(), -1i64..=1, 0usize..5), 0..12);
    (1u32..=8, windows, running, pending).prop_map(|(n, raw, running, pending)| {
        // Windows on GPUs no earlier window holds for any of the same time, as baton
        // reserve chooses them.
        let mut windows: Vec<Window> = Vec::new();
        for (i, (pick, start, len)) in raw.into_iter().enumerate() {
            let (start, end) = (NOW + start * MIN, NOW + (start + len) * MIN);
            let gpus: Vec<u32> = (0..n)
                .filter(|&g| pick[g as usize])
                .filter(|g| {
                    !windows
                        .iter()
                        .any(|w| w.overlaps(start, end) && w.gpus.contains(g))
                })
                .collect();
            if !gpus.is_empty() {
                windows.push(window(i as u64 + 1, &gpus, start, end));
            }
        }
        let mut occ = Occupancy::new(&gpus(n));
        let mut run = Vec::new();
        for (i, (req, lim)) in running.into_iter().enumerate() {
            if let Some(chosen) = occ.choose(&req) {
                occ.hold(&chosen, &req).unwrap();
                run.push(RunningJob {
                    id: JobId(100 + i as u64),
                    gpus: chosen,
                    request: req,
                    ends_by: lim.map(|l| NOW + l),
                });
            }
        }
        let queue = pending
            .into_iter()
            .enumerate()
            .map(|(i, (req, lim, prio, w))| PendingJob {
                priority: prio,
                // 1 in 5 in no window; the others in one, when there is one (or in a window
                // that does not exist: gone).
                window: (w > 0).then(|| windows.get(w - 1).map_or(99, |w| w.id)),
                ..PendingJob::new(JobId(i as u64 + 1), prio, i as Millis, req, lim, vec![])
            })
            .collect();
        World {
            n,
            running: run,
            pending: queue,
            windows,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn windows_keep_their_gpus(w in world()) {
        let p = pass(w.n, &w.running, &w.pending, &w.windows, NOW);
        let mut occ = Occupancy::new(&gpus(w.n));
        for r in &w.running {
            occ.hold(&r.gpus, &r.request).unwrap();
        }
        for s in &p.starts {
            let job = w.pending.iter().find(|j| j.id == s.job).unwrap();
            prop_assert_eq!(s.gpus.len(), job.request.count as usize);
            prop_assert!(occ.hold(&s.gpus, &job.request).is_ok(),
                "job {} placed on taken GPUs {:?}", s.job, s.gpus);
            match job.window {
                Some(id) => {
                    let win = w.windows.iter().find(|x| x.id == id).unwrap();
                    prop_assert!(win.has_begun(NOW) && !win.is_over(NOW));
                    prop_assert!(s.gpus.iter().all(|g| win.gpus.contains(g)),
                        "job {} in {} on {:?}", s.job, win.name, s.gpus);
                    prop_assert_eq!(s.until, Some(win.end));
                }
                None => {
                    prop_assert_eq!(s.until, None);
                    let ends_by = job.time_limit.map(|l| NOW + l);
                    for win in &w.windows {
                        if win.is_in_the_way(NOW, ends_by) {
                            prop_assert!(!s.gpus.iter().any(|g| win.gpus.contains(g)),
                                "job {} ending {:?} on {:?}, kept by {:?}",
                                s.job, ends_by, s.gpus, win);
                        }
                    }
                }
            }
        }
        for id in &p.reservation_gone {
            let job = w.pending.iter().find(|j| j.id == *id).unwrap();
            let id = job.window.unwrap();
            prop_assert!(w.windows.iter().all(|x| x.id != id || x.is_over(NOW)));
        }
        let total = p.starts.len() + p.dependency_failed.len() + p.waiting.len()
            + p.reservation_gone.len();
        prop_assert_eq!(total, w.pending.len());
    }
}
