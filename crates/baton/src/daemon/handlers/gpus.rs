//! `GET /v1/gpus`: each GPU as the probe reads it, with the jobs baton placed on it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use crate::api::{GpuProcess, GpuView, GpusResponse};
use crate::daemon::Daemon;

pub async fn handle(State(daemon): State<Arc<Daemon>>) -> Json<GpusResponse> {
    Json(daemon.gpu_views())
}

impl Daemon {
    /// Each GPU as the probe reads it now, with the jobs placed on it (also the dashboard's).
    pub(crate) fn gpu_views(&self) -> GpusResponse {
        gpu_views(self)
    }
}

fn gpu_views(daemon: &Daemon) -> GpusResponse {
    let samples = daemon.probe.sample();
    let running = daemon.running();
    let util_5m = daemon.recent_utilisation(5 * 60_000);
    let gpus = daemon
        .gpu_info
        .iter()
        .map(|info| {
            let sample = samples.iter().find(|s| s.index == info.index);
            let holders: Vec<_> = running
                .iter()
                .filter(|j| j.gpus().contains(&info.index))
                .collect();
            GpuView {
                index: info.index,
                model: info.model.clone(),
                memory_total: info.memory_total,
                memory_used: sample.map(|s| s.memory_used).unwrap_or(0),
                utilization: sample.and_then(|s| s.utilization),
                jobs: holders.iter().map(|j| j.id.0).collect(),
                memory_allocated: holders
                    .iter()
                    .map(|j| j.request.mem_per_gpu.unwrap_or(info.memory_total))
                    .sum(),
                exclusive: holders.iter().any(|j| j.request.mem_per_gpu.is_none()),
                processes: sample
                    .map(|s| {
                        s.processes
                            .iter()
                            .map(|p| GpuProcess {
                                pid: p.pid,
                                memory_used: p.memory,
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                util_5m: util_5m.get(&info.index).copied().flatten(),
                power_watts: sample.and_then(|s| s.power_watts),
                temperature_c: sample.and_then(|s| s.temperature_c),
            }
        })
        .collect();
    GpusResponse {
        backend: daemon.probe.backend().into(),
        gpus,
    }
}
