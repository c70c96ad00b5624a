//! The trace-replay simulator: the daemon's scheduling pass ([`crate::scheduler::plan_with`])
//! driven by a simulated clock over a recorded or synthetic workload, to compare policies.
//!
//! Everything is deterministic and pure: the caller reads the trace file and keeps the wall clock.
//!
//! - [`trace`]: reading Alibaba's GPU pod list (`cluster-trace-gpu-v2023`).
//! - [`mod@replay`]: the event-driven replay of a trace under a [`Policy`], and its
//!   [`replay::Metrics`].
//! - [`workflows`]: a seeded generator of multi-task workflows and the comparison of atomic
//!   admission (gangs) against per-task greedy scheduling.
//!
//! Time in the simulator is [`Millis`] from the start of the workload; it never reads a clock.

pub mod replay;
pub mod rules;
pub mod trace;
pub mod workflows;

mod metrics;
mod rng;
mod slots;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::model::{Gpu, Millis};
use crate::scheduler::PlanOptions;

pub use metrics::percentile;
pub use replay::{Metrics, ReplayOptions, replay};
pub use rules::{Budget, Effect, Reservation, Rules};
pub use trace::{Trace, TraceError, TraceJob, parse_openb};
pub use workflows::{
    GeneratorOptions, Mode, SyntheticWorkflow, WorkflowMetrics, generate, run_workflows,
};

const GIB: u64 = 1 << 30;

/// Nodes in the default simulated cluster. See [`Cluster::default`].
pub const DEFAULT_NODES: u32 = 5;
/// GPUs per node in the default simulated cluster: 8, as in the trace's largest pods (8 GPUs).
pub const DEFAULT_GPUS_PER_NODE: u32 = 8;
/// Memory of every simulated GPU.
pub const DEFAULT_GPU_MEMORY: u64 = 80 * GIB;
/// A job's time limit is its true run time times this (users over-estimate).
pub const DEFAULT_TIME_LIMIT_FACTOR: f64 = 1.5;

/// A simulated cluster: `nodes` nodes of `gpus_per_node` GPUs of `gpu_memory` bytes each.
/// GPU indices run across the cluster (node `n` has `n·gpus_per_node ..`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cluster {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub gpu_memory: u64,
}

impl Default for Cluster {
    /// 5 nodes × 8 GPUs of 80 GiB (40 GPUs). The shipped trace (`openb_pod_list_default`, 7,255
    /// pods that ran) never held more than 66 GPUs' worth of pods at once in the original
    /// cluster, and 14 on average over its 149 days, most of it in the last five weeks. On 40
    /// GPUs queues form under every policy in those weeks (FIFO's grows to thousands, backfill's
    /// to hundreds) while the quiet months run without waiting; from 64 GPUs hardly anyone
    /// waits. See `docs/benchmarks.md`, "Trace replay", for the sizes tried.
    fn default() -> Self {
        Cluster {
            nodes: DEFAULT_NODES,
            gpus_per_node: DEFAULT_GPUS_PER_NODE,
            gpu_memory: DEFAULT_GPU_MEMORY,
        }
    }
}

impl Cluster {
    pub fn new(nodes: u32, gpus_per_node: u32) -> Cluster {
        Cluster {
            nodes,
            gpus_per_node,
            ..Cluster::default()
        }
    }

    pub fn total_gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }

    /// The GPUs as the scheduler sees them.
    pub fn gpus(&self) -> Vec<Gpu> {
        (0..self.total_gpus())
            .map(|index| Gpu {
                index,
                memory_total: self.gpu_memory,
                node: index / self.gpus_per_node,
            })
            .collect()
    }

    fn check(&self) -> Result<(), SimError> {
        if self.nodes == 0 || self.gpus_per_node == 0 || self.gpu_memory == 0 {
            return Err(SimError::Options(
                "the cluster needs at least one node with at least one GPU".into(),
            ));
        }
        if self
            .nodes
            .checked_mul(self.gpus_per_node)
            .is_none_or(|n| n > 1 << 20)
        {
            return Err(SimError::Options(format!(
                "{} nodes × {} GPUs is more GPUs than the simulator models (2^20)",
                self.nodes, self.gpus_per_node
            )));
        }
        Ok(())
    }
}

/// A scheduling policy, all on the same scheduling pass ([`crate::scheduler::plan_with`]), all
/// with the core's placement (a job's GPUs on one node, best-fit node, shared jobs packed onto
/// already-shared GPUs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// Strict arrival order: nothing starts past the first job that cannot (`backfill: false`).
    Fifo,
    /// Arrival order with EASY backfill (the daemon's default): the first blocked job holds a
    /// reservation at the earliest time the running jobs' limits guarantee, and a later job may
    /// start now only if, by its time limit, it cannot delay that reservation.
    Backfill,
    /// EASY backfill over a queue ordered by predicted finish: a job's priority is
    /// `−(arrival + predicted run time)`, in seconds, so among jobs of equal priority the shorter
    /// prediction goes first, and it may pass a longer job that arrived up to the difference of
    /// their predictions before it (a shortest-predicted-first order in which every job ages, so
    /// none starves). The prediction is the job's time limit, the figure backfill also trusts.
    Baton,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::Fifo, Policy::Backfill, Policy::Baton];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Backfill => "backfill",
            Policy::Baton => "baton",
        }
    }

    /// The scheduling pass options it runs with.
    pub fn plan_options(self) -> PlanOptions {
        PlanOptions {
            backfill: !matches!(self, Policy::Fifo),
        }
    }

    /// The priority a job gets under this policy, from its own priority, arrival and predicted
    /// run time. `fifo` and `backfill` keep the job's priority; `baton` orders equal priorities
    /// by `arrival + predicted` (earliest predicted finish first), in whole seconds.
    pub fn priority(self, base: i64, arrival: Millis, predicted: Millis) -> i64 {
        match self {
            Policy::Fifo | Policy::Backfill => base,
            Policy::Baton => {
                // 2^40 s is 35,000 years: the key never reaches into the base priority.
                const SPAN: i64 = 1 << 40;
                let key = (arrival.max(0) / 1000)
                    .saturating_add(predicted.max(0).saturating_add(999) / 1000)
                    .min(SPAN - 1);
                base.clamp(-(1 << 22), 1 << 22) * SPAN - key
            }
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown policy {s:?} (expected fifo, backfill or baton)"))
    }
}

/// Options the simulator refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Options(String),
}

/// `⌈run_time · factor⌉`, at least 1 ms: the time limit a job declares.
fn time_limit(run_time: Millis, factor: f64) -> Millis {
    ((run_time as f64) * factor).ceil().clamp(1.0, 9.0e15) as Millis
}

fn check_factor(factor: f64) -> Result<(), SimError> {
    if factor.is_finite() && factor > 0.0 && factor <= 1e6 {
        Ok(())
    } else {
        Err(SimError::Options(format!(
            "the time-limit factor must be a positive number (got {factor})"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_order_as_documented() {
        for p in Policy::ALL {
            assert_eq!(p.as_str().parse::<Policy>(), Ok(p));
        }
        assert!(
            "sjf"
                .parse::<Policy>()
                .unwrap_err()
                .contains("fifo, backfill or baton")
        );
        assert!(!Policy::Fifo.plan_options().backfill);
        assert!(Policy::Backfill.plan_options().backfill);
        assert!(Policy::Baton.plan_options().backfill);
        assert_eq!(Policy::Backfill.priority(3, 10_000, 60_000), 3);
        // baton: earlier predicted finish first; a short job passes a long one that came a bit
        // earlier, not one that came much earlier.
        let p =
            |arrival_s: i64, run_s: i64| Policy::Baton.priority(0, arrival_s * 1000, run_s * 1000);
        assert!(p(100, 10) > p(0, 1000));
        assert!(p(2000, 10) < p(0, 1000));
        assert_eq!(p(0, 60), -60);
        // The job's own priority still comes first.
        assert!(Policy::Baton.priority(1, 0, 1 << 50) > Policy::Baton.priority(0, 0, 0));
    }

    #[test]
    fn clusters_number_gpus_across_nodes() {
        let gpus = Cluster::new(2, 3).gpus();
        let nodes: Vec<u32> = gpus.iter().map(|g| g.node).collect();
        assert_eq!(nodes, [0, 0, 0, 1, 1, 1]);
        assert!(Cluster::new(0, 8).check().is_err());
        assert!(Cluster::default().check().is_ok());
        assert_eq!(time_limit(1000, 1.5), 1500);
        assert_eq!(time_limit(1, 0.1), 1);
        assert!(check_factor(0.0).is_err() && check_factor(f64::NAN).is_err());
    }
}
