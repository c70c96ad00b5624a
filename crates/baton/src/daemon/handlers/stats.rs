//! `GET /v1/stats`: the figures an admin reports for a period: GPU utilisation (from the
//! monitor's per-minute sums), GPU-hours by owner (from the jobs' start and end times), the
//! share of allocated GPU time that sat idle, and the waste decisions taken. Read on a reader
//! connection, ended jobs streamed from the few columns needed (never whole records, never
//! under the daemon's lock); only the running jobs come from the job table.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use baton_core::{JobId, JobState};

use crate::api::{GpuStats, OwnerStats, SinceQuery, StatsResponse, WasteCount};
use crate::daemon::views::rfc3339;
use crate::daemon::{ApiError, Daemon, now_ms};
use crate::store::HeldRow;

const HOUR_MS: f64 = 3_600_000.0;

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    Query(q): Query<SinceQuery>,
) -> Result<Json<StatsResponse>, ApiError> {
    let now = now_ms();
    let since = q.since_ms.map_or(0, |ms| now - ms.max(0));
    // The running jobs hold GPUs up to now.
    let running: Vec<HeldRow> = daemon
        .lock()
        .jobs
        .active()
        .filter(|j| j.state() == JobState::Running)
        .filter_map(|j| {
            Some(HeldRow {
                id: j.id,
                owner_uid: j.owner_uid,
                owner: j.owner.clone(),
                gpus_requested: j.request.count,
                gpu_mem: j.request.mem_per_gpu,
                gpus: j.gpus().to_vec(),
                started_at: j.started_at()?,
                ended_at: now,
            })
        })
        .collect();
    let memory: HashMap<u32, u64> = daemon
        .gpu_info
        .iter()
        .map(|g| (g.index, g.memory_total))
        .collect();
    let stats = daemon
        .read(move |store| {
            let gpus: Vec<GpuStats> = store
                .gpu_utilisation_since(since)?
                .into_iter()
                .map(|g| GpuStats {
                    gpu: g.gpu,
                    util_pct: g.mean_util.map(round1),
                    samples: g.samples,
                })
                .collect();
            let known: Vec<f64> = gpus.iter().filter_map(|g| g.util_pct).collect();
            let cluster_util_pct =
                (!known.is_empty()).then(|| round1(known.iter().sum::<f64>() / known.len() as f64));

            // Jobs that held GPUs at some point in the period: ended in it, or still running.
            let mut owners: BTreeMap<String, (f64, u64)> = BTreeMap::new();
            let mut allocated_ms = 0.0;
            let mut runs: HashMap<JobId, (i64, i64)> = HashMap::new();
            let mut count = |job: HeldRow| {
                runs.insert(job.id, (job.started_at, job.ended_at));
                let held = held_gpus(&memory, job.gpu_mem, &job.gpus);
                if held == 0.0 {
                    return;
                }
                let overlap = (job.ended_at.min(now) - job.started_at.max(since)).max(0) as f64;
                let ms = held * overlap;
                allocated_ms += ms;
                let entry = owners.entry(job.owner).or_default();
                entry.0 += ms;
                entry.1 += 1;
            };
            store.each_held_since(since, &mut count)?;
            running.into_iter().for_each(&mut count);
            let mut owners: Vec<OwnerStats> = owners
                .into_iter()
                .map(|(owner, (ms, jobs))| OwnerStats {
                    owner,
                    gpu_hours: round4(ms / HOUR_MS),
                    jobs,
                })
                .collect();
            owners.sort_by(|a, b| b.gpu_hours.total_cmp(&a.gpu_hours));

            // Each attempt's sampled and idle time, counted for the part of its run inside the
            // period (spread evenly over the run: the store keeps an attempt's sums, not their
            // times).
            let (mut sampled, mut idle) = (0.0_f64, 0.0_f64);
            for u in store.usage_since(since)? {
                let share = match runs.get(&u.job) {
                    Some(&(start, end)) if end > start => {
                        ((end.min(now) - start.max(since)).max(0) as f64 / (end - start) as f64)
                            .min(1.0)
                    }
                    _ => 1.0,
                };
                sampled += u.sampled_ms as f64 * share;
                idle += u.idle_ms as f64 * share;
            }
            let idle_share = (sampled > 0.0).then(|| round3(idle / sampled));

            let mut counts: HashMap<(String, String, bool), u64> = HashMap::new();
            for e in store.audit_since(since)? {
                *counts.entry((e.rule, e.action, e.dry_run)).or_default() += 1;
            }
            let mut waste_actions: Vec<WasteCount> = counts
                .into_iter()
                .map(|((rule, action, dry_run), count)| WasteCount {
                    rule,
                    action,
                    dry_run,
                    count,
                })
                .collect();
            waste_actions.sort_by(|a, b| {
                (&a.rule, &a.action, a.dry_run).cmp(&(&b.rule, &b.action, b.dry_run))
            });
            Ok(StatsResponse {
                since: rfc3339(since),
                until: rfc3339(now),
                cluster_util_pct,
                gpus,
                owners,
                allocated_gpu_hours: round4(allocated_ms / HOUR_MS),
                idle_share,
                idle_gpu_hours: round4(idle / HOUR_MS),
                waste_actions,
            })
        })
        .await?;
    Ok(Json(stats))
}

/// GPUs a job held: whole GPUs count one each; a memory-sized job its share of each GPU.
fn held_gpus(memory: &HashMap<u32, u64>, mem_per_gpu: Option<u64>, gpus: &[u32]) -> f64 {
    match mem_per_gpu {
        None => gpus.len() as f64,
        Some(mem) => gpus
            .iter()
            .map(|g| {
                let total = memory.get(g).copied().unwrap_or(0);
                if total == 0 {
                    0.0
                } else {
                    (mem as f64 / total as f64).min(1.0)
                }
            })
            .sum(),
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// GPU-hours to a third of a second of one GPU: short test and demo jobs still show.
fn round4(v: f64) -> f64 {
    (v * 10_000.0).round() / 10_000.0
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}
