//! The HTTP routes of the API, one file per route. Every handler speaks the protocol types of
//! `crate::api` and goes through the same `Daemon` methods.

pub(crate) mod audit;
pub(crate) mod cancel;
pub(crate) mod events;
mod gc;
mod gpus;
pub(crate) mod history;
pub(crate) mod hold;
mod hook;
mod info;
pub(crate) mod list;
mod logs;
mod metrics;
mod names;
pub(crate) mod report;
pub(crate) mod requeue;
mod reservations;
mod resubmit;
mod shutdown;
mod signal;
mod slurm;
pub(crate) mod stats;
mod submit;
pub(crate) mod sweep;
mod update;
mod usage;
mod wait;
mod web;
pub(crate) mod workflow;
pub(crate) mod workflow_list;

pub(crate) use workflow::view as workflow_view;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use super::{Daemon, auth, error};

pub fn router(daemon: Arc<Daemon>) -> Router {
    let v1 = Router::new()
        .route("/info", get(info::handle))
        .route("/jobs", post(submit::handle).get(list::handle))
        .route("/history", get(history::handle))
        .route("/gc", get(gc::dry_run).post(gc::now))
        .route("/jobs/{id}/logs", get(logs::handle))
        .route("/jobs/{id}/events", get(events::handle))
        .route("/jobs/{id}/report", get(report::handle))
        .route("/jobs/{id}/resubmit", post(resubmit::handle))
        .route("/jobs/{id}/signal", post(signal::handle))
        .route("/requeue", post(requeue::handle))
        .route("/wait", post(wait::handle))
        .route("/cancel", post(cancel::handle))
        .route("/resolve", post(names::resolve))
        .route("/select", post(names::select))
        .route("/hold", post(hold::hold))
        .route("/release", post(hold::release))
        .route("/jobs/{id}/update", post(update::handle))
        .route("/hook/claim", post(hook::claim))
        .route("/hook/delivered", post(hook::delivered))
        .route("/gpus", get(gpus::handle))
        .route("/usage", get(usage::handle))
        .route(
            "/reservations",
            post(reservations::create).get(reservations::list),
        )
        .route("/reservations/{name}/cancel", post(reservations::cancel))
        .route("/audit", get(audit::handle))
        .route("/stats", get(stats::handle))
        .route("/slurm/poke", post(slurm::poke))
        .route("/shutdown", post(shutdown::handle))
        .route("/web/login", post(web::login))
        .route(
            "/workflows",
            post(workflow::submit).get(workflow_list::handle),
        )
        .route("/workflows/{id}", get(workflow::status))
        .route("/workflows/{id}/cancel", post(workflow::cancel))
        .route("/sweeps", post(sweep::submit).get(sweep::list))
        .route("/sweeps/{id}", get(sweep::status))
        .route("/sweeps/{id}/cancel", post(sweep::cancel))
        .route("/sweeps/{id}/wait", post(sweep::wait));
    let app = Router::new()
        .nest(crate::api::PREFIX, v1)
        .route("/metrics", get(metrics::handle))
        .fallback(error::no_route)
        // Explicit rather than axum's default (2 MB), and agreed with what clients check.
        .layer(DefaultBodyLimit::max(crate::api::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            daemon.clone(),
            super::server::whole_body_within,
        ))
        .layer(axum::middleware::from_fn_with_state(
            daemon.clone(),
            auth::admit,
        ))
        .with_state(daemon);
    // Around the whole router, not as its layer: a layer wraps each route's handlers, inside
    // the method routing that adds a 405's `Allow` header, which the rewritten body names.
    Router::new()
        .fallback_service(app)
        .layer(axum::middleware::from_fn(error::json_errors))
}
