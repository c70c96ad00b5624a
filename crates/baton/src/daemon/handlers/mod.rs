//! The HTTP routes of the API, one file per route. Every handler speaks the protocol types of
//! `crate::api` and goes through the same `Daemon` methods.

mod audit;
mod cancel;
mod events;
mod gpus;
mod info;
mod list;
mod logs;
mod metrics;
mod report;
mod slurm;
mod stats;
mod submit;
mod wait;
mod workflow;

pub(crate) use workflow::view as workflow_view;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::{Daemon, auth};

pub fn router(daemon: Arc<Daemon>) -> Router {
    let v1 = Router::new()
        .route("/info", get(info::handle))
        .route("/jobs", post(submit::handle).get(list::handle))
        .route("/jobs/{id}/logs", get(logs::handle))
        .route("/jobs/{id}/events", get(events::handle))
        .route("/jobs/{id}/report", get(report::handle))
        .route("/wait", post(wait::handle))
        .route("/cancel", post(cancel::handle))
        .route("/gpus", get(gpus::handle))
        .route("/audit", get(audit::handle))
        .route("/stats", get(stats::handle))
        .route("/slurm/poke", post(slurm::poke))
        .route("/workflows", post(workflow::submit))
        .route("/workflows/{id}", get(workflow::status))
        .route("/workflows/{id}/cancel", post(workflow::cancel));
    Router::new()
        .nest(crate::api::PREFIX, v1)
        .route("/metrics", get(metrics::handle))
        .layer(axum::middleware::from_fn_with_state(
            daemon.clone(),
            auth::admit,
        ))
        .with_state(daemon)
}
