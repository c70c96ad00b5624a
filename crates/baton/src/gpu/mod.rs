//! The GPUs of this machine behind one small trait, with two implementations: NVML for real
//! NVIDIA GPUs and a simulated set for tests, demos and machines without GPUs.

mod nvml;
mod sim;

pub use nvml::NvmlProbe;
pub use sim::SimProbe;

/// Static facts about one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: u32,
    pub model: String,
    pub memory_total: u64,
}

/// A reading of one GPU at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuSample {
    pub index: u32,
    pub memory_used: u64,
    pub utilization: Option<u32>,
    /// (pid, bytes of GPU memory) for each compute process.
    pub processes: Vec<(u32, u64)>,
}

pub trait GpuProbe: Send + Sync {
    /// `nvml`, `simulated` or `none`.
    fn backend(&self) -> &'static str;
    fn gpus(&self) -> Vec<GpuInfo>;
    fn sample(&self) -> Vec<GpuSample>;
}

/// Simulated GPUs when asked for, else NVML, else none (said once in the log).
pub fn detect(sim_gpus: Option<u32>) -> Box<dyn GpuProbe> {
    if let Some(n) = sim_gpus {
        tracing::info!(count = n, "using {n} simulated GPUs of 80 GiB");
        return Box::new(SimProbe::new(n, sim::DEFAULT_MEMORY));
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
