//! Simulated GPUs: a fixed number of 80 GiB devices with no processes on them. They let the whole
//! scheduler and every test run on machines without GPUs.

use super::{GpuInfo, GpuProbe, GpuSample};

pub const DEFAULT_MEMORY: u64 = 80 << 30;

pub struct SimProbe {
    count: u32,
    memory: u64,
}

impl SimProbe {
    pub fn new(count: u32, memory: u64) -> Self {
        SimProbe { count, memory }
    }

    /// The stand-in for a machine where neither simulation nor NVML is available.
    pub fn none() -> Self {
        SimProbe {
            count: 0,
            memory: DEFAULT_MEMORY,
        }
    }
}

impl GpuProbe for SimProbe {
    fn backend(&self) -> &'static str {
        if self.count == 0 { "none" } else { "simulated" }
    }

    fn gpus(&self) -> Vec<GpuInfo> {
        (0..self.count)
            .map(|index| GpuInfo {
                index,
                model: "Simulated GPU (80 GiB)".into(),
                memory_total: self.memory,
            })
            .collect()
    }

    fn sample(&self) -> Vec<GpuSample> {
        (0..self.count)
            .map(|index| GpuSample {
                index,
                utilization: Some(0),
                ..GpuSample::default()
            })
            .collect()
    }
}
