//! The cost of one scheduling pass, the thing the daemon runs after every event.
//! `cargo bench -p baton-core --bench scheduler`; results in docs/benchmarks.md.

use std::collections::HashMap;

use baton_core::{
    DepKind, Dependency, Gpu, JobId, JobState, PendingJob, ResourceRequest, RunningJob, plan,
};
use criterion::{Criterion, criterion_group, criterion_main};

const GIB: u64 = 1 << 30;
const MIN: i64 = 60_000;

/// A deterministic mix: mostly 1-8 whole GPUs, some shared, some with dependencies and limits.
fn world(
    gpus: u32,
    running: usize,
    queued: usize,
) -> (
    Vec<Gpu>,
    Vec<RunningJob>,
    Vec<PendingJob>,
    HashMap<JobId, JobState>,
) {
    let gpu_list: Vec<Gpu> = (0..gpus)
        .map(|index| Gpu {
            index,
            memory_total: 80 * GIB,
            node: index / 8,
        })
        .collect();
    let mut occ = baton_core::placement::Occupancy::new(&gpu_list);
    let mut states = HashMap::new();
    let mut run = Vec::new();
    let mut seed: u64 = 42;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    for i in 0..running {
        let req = if next() % 4 == 0 {
            ResourceRequest::shared(1, (10 + next() % 40) * GIB)
        } else {
            ResourceRequest::whole(1 + (next() % 4) as u32)
        };
        if let Some(chosen) = occ.choose(&req) {
            occ.hold(&chosen, &req).unwrap();
            let id = JobId(i as u64 + 1);
            states.insert(id, JobState::Running);
            run.push(RunningJob {
                id,
                gpus: chosen,
                request: req,
                ends_by: Some(((next() % 600) as i64 + 1) * MIN),
            });
        }
    }
    let base = running as u64 + 1;
    let pending = (0..queued)
        .map(|i| {
            let id = JobId(base + i as u64);
            states.insert(id, JobState::Queued);
            let request = match next() % 10 {
                0..=5 => ResourceRequest::whole(1 + (next() % 8) as u32),
                6..=8 => ResourceRequest::shared(1, (5 + next() % 60) * GIB),
                _ => ResourceRequest::whole(0),
            };
            let deps = if i > 0 && next() % 10 == 0 {
                vec![Dependency {
                    job: JobId(base + next() % i as u64),
                    kind: DepKind::Success,
                }]
            } else {
                vec![]
            };
            let priority = (next() % 3) as i64;
            let time_limit = if next() % 3 == 0 {
                None
            } else {
                Some(((next() % 240) as i64 + 1) * MIN)
            };
            PendingJob::new(id, priority, i as i64, request, time_limit, deps)
        })
        .collect();
    (gpu_list, run, pending, states)
}

/// A 1,000-task atomic workflow (a few parallel chains, 1 GPU or a GPU share each), queued on an
/// empty cluster of 128 nodes x 8 GPUs: the pass that admits it whole.
fn workflow_world(tasks: usize) -> (Vec<Gpu>, Vec<PendingJob>, HashMap<JobId, JobState>) {
    let gpus: Vec<Gpu> = (0..1024)
        .map(|index| Gpu {
            index,
            memory_total: 80 * GIB,
            node: index / 8,
        })
        .collect();
    let mut states = HashMap::new();
    let pending = (0..tasks)
        .map(|i| {
            let id = JobId(i as u64 + 1);
            states.insert(id, JobState::Queued);
            // Ten chains: each task after the previous one of its chain.
            let deps = if i >= 10 {
                vec![Dependency {
                    job: JobId(i as u64 + 1 - 10),
                    kind: DepKind::Success,
                }]
            } else {
                vec![]
            };
            let request = if i % 3 == 0 {
                ResourceRequest::shared(1, 20 * GIB)
            } else {
                ResourceRequest::whole(1)
            };
            let mut job = PendingJob::new(id, 0, 0, request, Some(10 * MIN), deps);
            job.gang = Some(1);
            job.critical_path = ((tasks - i) / 10) as i64 * 10 * MIN;
            job
        })
        .collect();
    (gpus, pending, states)
}

fn bench(c: &mut Criterion) {
    let (gpus, pending, states) = workflow_world(1000);
    let admitted = plan(&gpus, &[], &pending, &states, 0);
    assert_eq!(admitted.admissions.len(), 1, "the workflow must fit");
    c.bench_function(
        "admission: a 1,000-task atomic workflow on 1,024 GPUs",
        |b| b.iter(|| plan(&gpus, &[], &pending, &states, 0)),
    );
    let (gpus, running, pending, states) = world(4, 4, 300);
    c.bench_function("pass: 300 queued on 4 GPUs", |b| {
        b.iter(|| plan(&gpus, &running, &pending, &states, 0))
    });
    let (gpus, running, pending, states) = world(1024, 700, 10_000);
    c.bench_function("pass: 10,000 queued on 1,024 GPUs (128 nodes)", |b| {
        b.iter(|| plan(&gpus, &running, &pending, &states, 0))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
