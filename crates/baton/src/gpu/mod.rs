//! The GPUs of this machine behind one small trait, with two implementations: NVML for real
//! NVIDIA GPUs and a simulated set for tests, demos and machines without GPUs.

mod nvml;
mod sim;

use std::path::PathBuf;

pub use nvml::NvmlProbe;
pub use sim::SimProbe;

/// Static facts about one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: u32,
    pub model: String,
    pub memory_total: u64,
    /// NVML's `GPU-…` identifier (`SIM-GPU-<n>` for simulated ones).
    pub uuid: String,
}

/// A reading of one GPU at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSample {
    pub index: u32,
    pub memory_used: u64,
    /// Percent of the last sample period a kernel ran, when known.
    pub utilization: Option<u32>,
    pub power_watts: Option<f64>,
    pub temperature_c: Option<f64>,
    /// Each compute process with its GPU memory.
    pub processes: Vec<ProcessSample>,
}

/// A process using a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessSample {
    pub pid: u32,
    pub memory: u64,
}

pub trait GpuProbe: Send + Sync {
    /// `nvml`, `simulated` or `none`.
    fn backend(&self) -> &'static str;
    fn gpus(&self) -> Vec<GpuInfo>;
    fn sample(&self) -> Vec<GpuSample>;
}

/// Simulated GPUs when asked for (their processes read from `sim_dir`, see [`SimProbe`]), else
/// NVML, else none (said once in the log).
pub fn detect(sim_gpus: Option<u32>, sim_dir: PathBuf) -> Box<dyn GpuProbe> {
    if let Some(n) = sim_gpus {
        tracing::info!(count = n, "using {n} simulated GPUs of 80 GiB");
        return Box::new(SimProbe::new(n, sim::DEFAULT_MEMORY, Some(sim_dir)));
    }
    match NvmlProbe::init() {
        Ok(probe) => {
            tracing::info!(count = probe.gpus().len(), "using NVML");
            Box::new(probe)
        }
        Err(e) => {
            tracing::warn!(
                "no NVIDIA driver available ({e}); running with 0 GPUs (use --sim-gpus N to simulate some)"
            );
            Box::new(SimProbe::none())
        }
    }
}
