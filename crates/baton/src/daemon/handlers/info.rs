//! `GET /v1/info`: the daemon's identity, used by clients to check that one is running.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use crate::api::InfoResponse;
use crate::daemon::Daemon;

pub async fn handle(State(daemon): State<Arc<Daemon>>) -> Json<InfoResponse> {
    Json(InfoResponse {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        home: daemon.config.home.display().to_string(),
        system: daemon.config.system,
        gpu_backend: daemon.probe.backend().into(),
        gpu_count: daemon.gpus.len(),
        cpus: daemon.config.host.capacity.cpus,
        memory: daemon.config.host.capacity.mem,
        default_cpus: daemon.config.host.default_cpus,
        default_memory: daemon.config.host.default_mem,
        containment: daemon.config.containment.describe(),
        cgroup_root: match &daemon.config.containment {
            crate::executor::contain::Method::Cgroup { root } => Some(root.display().to_string()),
            crate::executor::contain::Method::Subreaper { .. } => None,
        },
        health: daemon.health(),
    })
}
