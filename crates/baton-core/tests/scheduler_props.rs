//! Property tests for the scheduling pass: over random machines, running sets and queues,
//! no GPU is ever over-allocated, no job starts before its dependencies allow, and backfill
//! never pushes back the reservation of the highest-priority blocked job.

use std::collections::HashMap;

use baton_core::placement::Occupancy;
use baton_core::{
    DepKind, Dependency, Gpu, JobId, JobState, Millis, PendingJob, ResourceRequest, RunningJob,
    earliest_start, plan,
};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;
const MIN: Millis = 60_000;
const NOW: Millis = 1_000 * MIN;

fn request() -> impl Strategy<Value = ResourceRequest> {
    prop_oneof![
        (0u32..=4).prop_map(ResourceRequest::whole),
        (1u32..=3, 5u64..=80).prop_map(|(n, g)| ResourceRequest::shared(n, g * GIB)),
    ]
}

fn limit() -> impl Strategy<Value = Option<Millis>> {
    prop_oneof![Just(None), (1i64..=180).prop_map(|m| Some(m * MIN))]
}

#[derive(Debug, Clone)]
struct World {
    gpus: Vec<Gpu>,
    running: Vec<RunningJob>,
    pending: Vec<PendingJob>,
    states: HashMap<JobId, JobState>,
}

fn world() -> impl Strategy<Value = World> {
    let gpu_count = 1u32..=8;
    let running = prop::collection::vec((request(), limit()), 0..8);
    let finished = prop::collection::vec(
        prop_oneof![
            Just(JobState::Succeeded),
            Just(JobState::Failed),
            Just(JobState::Cancelled),
            Just(JobState::Timeout),
        ],
        0..4,
    );
    let pending = prop::collection::vec(
        (
            request(),
            limit(),
            -2i64..=2,
            prop::collection::vec((0usize..20, any::<bool>()), 0..3),
        ),
        0..14,
    );
    (gpu_count, running, finished, pending).prop_map(|(n, running, finished, pending)| {
        let gpus: Vec<Gpu> = (0..n)
            .map(|index| Gpu {
                index,
                memory_total: 80 * GIB,
                node: 0,
            })
            .collect();
        let mut occ = Occupancy::new(&gpus);
        let mut states = HashMap::new();
        let mut next_id = 1u64;
        let mut run = Vec::new();
        for (req, lim) in running {
            if let Some(chosen) = occ.choose(&req) {
                occ.hold(&chosen, &req).unwrap();
                let id = JobId(next_id);
                next_id += 1;
                states.insert(id, JobState::Running);
                run.push(RunningJob {
                    id,
                    gpus: chosen,
                    request: req,
                    // Started some time ago; its limit ends in the future.
                    ends_by: lim.map(|l| NOW + l),
                });
            }
        }
        for st in finished {
            states.insert(JobId(next_id), st);
            next_id += 1;
        }
        let known: Vec<JobId> = states.keys().copied().collect();
        let first_pending = next_id;
        let mut queue = Vec::new();
        for (i, (req, lim, prio, deps)) in pending.into_iter().enumerate() {
            let id = JobId(first_pending + i as u64);
            let mut candidates = known.clone();
            candidates.extend((first_pending..id.0).map(JobId));
            let deps = if candidates.is_empty() {
                vec![]
            } else {
                deps.into_iter()
                    .map(|(k, any)| Dependency {
                        job: candidates[k % candidates.len()],
                        kind: match (any, k % 2) {
                            (false, _) => DepKind::Success,
                            (true, 0) => DepKind::Any,
                            (true, _) => DepKind::Failure,
                        },
                    })
                    .collect()
            };
            states.insert(id, JobState::Queued);
            queue.push(PendingJob::new(id, prio, id.0 as Millis, req, lim, deps));
        }
        World {
            gpus,
            running: run,
            pending: queue,
            states,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_over_allocates(w in world()) {
        let p = plan(&w.gpus, &w.running, &w.pending, &w.states, NOW);
        let mut occ = Occupancy::new(&w.gpus);
        for r in &w.running {
            occ.hold(&r.gpus, &r.request).unwrap();
        }
        for s in &p.starts {
            let job = w.pending.iter().find(|j| j.id == s.job).unwrap();
            prop_assert_eq!(s.gpus.len(), job.request.count as usize);
            prop_assert!(occ.hold(&s.gpus, &job.request).is_ok(),
                "job {} placed on taken GPUs {:?}", s.job, s.gpus);
        }
    }

    #[test]
    fn never_starts_before_dependencies(w in world()) {
        let p = plan(&w.gpus, &w.running, &w.pending, &w.states, NOW);
        for s in &p.starts {
            let job = w.pending.iter().find(|j| j.id == s.job).unwrap();
            for d in &job.deps {
                let st = w.states[&d.job];
                match d.kind {
                    DepKind::Success => prop_assert_eq!(st, JobState::Succeeded),
                    DepKind::Any => prop_assert!(st.is_terminal()),
                    DepKind::Failure => {
                        prop_assert!(st.is_terminal() && st != JobState::Succeeded)
                    }
                }
            }
        }
        for (id, _) in &p.dependency_failed {
            let job = w.pending.iter().find(|j| j.id == *id).unwrap();
            let failed = |d: &Dependency| {
                let st = w.states[&d.job];
                match d.kind {
                    DepKind::Success => st.is_terminal() && st != JobState::Succeeded,
                    DepKind::Failure => st == JobState::Succeeded,
                    DepKind::Any => false,
                }
            };
            prop_assert!(job.deps.iter().any(failed));
        }
        // Every queued job is accounted for exactly once.
        let total = p.starts.len() + p.dependency_failed.len() + p.waiting.len();
        prop_assert_eq!(total, w.pending.len());
    }

    #[test]
    fn backfill_never_delays_the_head_job(w in world()) {
        let p = plan(&w.gpus, &w.running, &w.pending, &w.states, NOW);
        // The head: the first waiting job that holds a reservation.
        let Some((head_id, _)) = p.waiting.iter().find(|(_, r)| matches!(r,
            baton_core::WaitReason::Resources { .. })) else { return Ok(()); };
        let mut order: Vec<&PendingJob> = w.pending.iter().collect();
        order.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.submitted_at, j.id));
        let head_pos = order.iter().position(|j| j.id == *head_id).unwrap();
        let head = order[head_pos];
        let as_running = |job: &PendingJob, gpus: &Vec<u32>| RunningJob {
            id: job.id, gpus: gpus.clone(), request: job.request,
            ends_by: job.time_limit.map(|l| NOW + l),
        };
        // Holders before backfill: the running jobs and the starts ahead of the head in order.
        let mut before = w.running.clone();
        let mut after = w.running.clone();
        for s in &p.starts {
            let job = w.pending.iter().find(|j| j.id == s.job).unwrap();
            let pos = order.iter().position(|j| j.id == s.job).unwrap();
            if pos < head_pos {
                prop_assert!(!s.backfilled);
                before.push(as_running(job, &s.gpus));
            } else {
                prop_assert!(s.backfilled);
            }
            after.push(as_running(job, &s.gpus));
        }
        let t0 = earliest_start(&Occupancy::new(&w.gpus), &before, &head.request);
        let t1 = earliest_start(&Occupancy::new(&w.gpus), &after, &head.request);
        match t0 {
            Some(t0) => prop_assert!(matches!(t1, Some(t1) if t1 <= t0),
                "head job {} reserved at {} but after backfill {:?}", head.id, t0, t1),
            None => {
                // Reserved for when the unlimited jobs end: the backfilled jobs alone must
                // still leave room for the head.
                let backfilled: Vec<RunningJob> = after[before.len()..].to_vec();
                let mut occ = Occupancy::new(&w.gpus);
                for b in &backfilled { occ.hold(&b.gpus, &b.request).unwrap(); }
                prop_assert!(occ.choose(&head.request).is_some());
            }
        }
    }
}
