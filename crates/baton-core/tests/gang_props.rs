//! Property tests for atomic workflows (gangs) on random clusters: no GPU is ever held twice, a
//! gang is never partially admitted, and, run to completion, every admissible gang is admitted
//! and every job ends (no deadlock between gangs, no starvation by plain jobs).

use std::collections::HashMap;

use baton_core::scheduler::{PlanOptions, plan_with};
use baton_core::{
    DepKind, Dependency, Gpu, JobId, JobState, Millis, PendingJob, ResourceRequest, RunningJob,
};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;

#[derive(Clone, Debug)]
struct World {
    gpus: Vec<Gpu>,
    /// Plain jobs and gang members, in submission order.
    jobs: Vec<PendingJob>,
}

fn world() -> impl Strategy<Value = World> {
    (
        1u32..=3,                                                          // nodes
        1u32..=4,                                                          // GPUs per node
        prop::collection::vec((1usize..=4, any::<bool>()), 0..=3),         // gangs: size, chained
        prop::collection::vec((0u32..=3, any::<bool>(), 0i64..=2), 0..=6), // plain jobs
        prop::collection::vec((0u32..=2, any::<bool>()), 16),              // member requests
    )
        .prop_map(|(nodes, per_node, gangs, plain, member_reqs)| {
            let gpus: Vec<Gpu> = (0..nodes * per_node)
                .map(|index| Gpu {
                    index,
                    memory_total: 80 * GIB,
                    node: index / per_node,
                })
                .collect();
            let mut jobs = Vec::new();
            let mut next = 1u64;
            let mut reqs = member_reqs.into_iter().cycle();
            for (g, (size, chained)) in gangs.into_iter().enumerate() {
                let first = next;
                for k in 0..size {
                    let (count, shared) = reqs.next().unwrap_or((1, false));
                    let request = if shared {
                        ResourceRequest::shared(count.max(1), 30 * GIB)
                    } else {
                        ResourceRequest::whole(count)
                    };
                    let deps = if chained && k > 0 {
                        vec![Dependency {
                            job: JobId(next - 1),
                            kind: DepKind::Any,
                        }]
                    } else {
                        vec![]
                    };
                    let mut job = PendingJob::new(
                        JobId(next),
                        0,
                        first as Millis,
                        request,
                        Some(60_000),
                        deps,
                    );
                    job.gang = Some(g as u64 + 100);
                    jobs.push(job);
                    next += 1;
                }
            }
            for (count, limited, priority) in plain {
                jobs.push(PendingJob::new(
                    JobId(next),
                    priority,
                    next as Millis,
                    ResourceRequest::whole(count),
                    limited.then_some(30_000),
                    vec![],
                ));
                next += 1;
            }
            World { gpus, jobs }
        })
}

/// What a pass's decisions hold, together with what already ran or was reserved.
fn check_no_double_holding(
    gpus: &[Gpu],
    running: &[RunningJob],
    pending: &[PendingJob],
    plan: &baton_core::Plan,
) -> Result<(), TestCaseError> {
    let mut occ = baton_core::placement::Occupancy::new(gpus);
    for r in running {
        prop_assert!(occ.hold(&r.gpus, &r.request).is_ok(), "running overlap");
    }
    let by_id: HashMap<JobId, &PendingJob> = pending.iter().map(|p| (p.id, p)).collect();
    for p in pending {
        if let Some(g) = &p.reserved {
            prop_assert!(occ.hold(g, &p.request).is_ok(), "reservation overlap");
        }
    }
    for a in &plan.admissions {
        for (id, g) in &a.reserved {
            prop_assert!(
                occ.hold(g, &by_id[id].request).is_ok(),
                "admission over-allocates"
            );
            let nodes: Vec<u32> = g
                .iter()
                .map(|i| gpus.iter().find(|x| x.index == *i).unwrap().node)
                .collect();
            prop_assert!(nodes.windows(2).all(|w| w[0] == w[1]), "a job spans nodes");
        }
    }
    for s in &plan.starts {
        let job = by_id[&s.job];
        let was_reserved = job.reserved.is_some()
            || plan
                .admissions
                .iter()
                .any(|a| a.reserved.iter().any(|(id, _)| *id == s.job));
        if !was_reserved {
            prop_assert!(
                occ.hold(&s.gpus, &job.request).is_ok(),
                "start over-allocates"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn gangs_are_all_or_nothing_and_every_job_eventually_ends(w in world()) {
        let empty = baton_core::placement::Occupancy::new(&w.gpus);
        let mut pending = w.jobs.clone();
        let mut running: Vec<RunningJob> = Vec::new();
        let mut states: HashMap<JobId, JobState> =
            pending.iter().map(|j| (j.id, JobState::Queued)).collect();
        let mut now: Millis = 0;
        for _step in 0..200 {
            if pending.iter().all(|p| {
                // Whatever can never fit is not expected to run.
                let gang: Vec<ResourceRequest> = match p.gang {
                    Some(g) => pending.iter().filter(|q| q.gang == Some(g)).map(|q| q.request).collect(),
                    None => vec![p.request],
                };
                p.reserved.is_none() && empty.choose_all(&gang).is_none()
            }) {
                break;
            }
            let plan = plan_with(&w.gpus, &running, &pending, &states, now, PlanOptions::default());
            check_no_double_holding(&w.gpus, &running, &pending, &plan)?;
            for a in &plan.admissions {
                let members: Vec<JobId> = pending
                    .iter()
                    .filter(|p| p.gang == Some(a.gang) && p.reserved.is_none())
                    .map(|p| p.id)
                    .collect();
                let mut admitted: Vec<JobId> = a.reserved.iter().map(|(id, _)| *id).collect();
                admitted.sort();
                prop_assert_eq!(admitted, members, "a gang admitted in part");
                for (id, g) in &a.reserved {
                    if let Some(p) = pending.iter_mut().find(|p| p.id == *id) {
                        p.reserved = Some(g.clone());
                        p.gang = None;
                    }
                }
            }
            for s in &plan.starts {
                let job = pending.iter().position(|p| p.id == s.job).unwrap();
                let job = pending.remove(job);
                states.insert(job.id, JobState::Running);
                running.push(RunningJob {
                    id: job.id,
                    gpus: s.gpus.clone(),
                    request: job.request,
                    ends_by: job.time_limit.map(|l| now + l),
                });
            }
            for (id, _) in &plan.dependency_failed {
                pending.retain(|p| p.id != *id);
                states.insert(*id, JobState::Failed);
            }
            // Time passes: every running job ends.
            now += 60_000;
            for r in running.drain(..) {
                states.insert(r.id, JobState::Succeeded);
            }
        }
        let stuck: Vec<&PendingJob> = pending
            .iter()
            .filter(|p| {
                let gang: Vec<ResourceRequest> = match p.gang {
                    Some(g) => pending.iter().filter(|q| q.gang == Some(g)).map(|q| q.request).collect(),
                    None => vec![p.request],
                };
                p.reserved.is_some() || empty.choose_all(&gang).is_some()
            })
            .collect();
        prop_assert!(stuck.is_empty(), "jobs never ran: {:?}", stuck);
    }
}
