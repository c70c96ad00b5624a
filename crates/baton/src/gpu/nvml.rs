//! Real NVIDIA GPUs through NVML. The library is loaded at run time, so baton builds and runs on
//! machines without CUDA; `init` fails cleanly there and the daemon runs with zero GPUs.

use nvml_wrapper::Nvml;

use nvml_wrapper::enum_wrappers::device::TemperatureSensor;

use super::{GpuInfo, GpuProbe, GpuSample, ProcessSample};

pub struct NvmlProbe {
    nvml: Nvml,
}

impl NvmlProbe {
    pub fn init() -> Result<Self, nvml_wrapper::error::NvmlError> {
        Ok(NvmlProbe {
            nvml: Nvml::init()?,
        })
    }

    fn count(&self) -> u32 {
        self.nvml.device_count().unwrap_or(0)
    }
}

impl GpuProbe for NvmlProbe {
    fn backend(&self) -> &'static str {
        "nvml"
    }

    fn gpus(&self) -> Vec<GpuInfo> {
        (0..self.count())
            .filter_map(|index| {
                let dev = self.nvml.device_by_index(index).ok()?;
                Some(GpuInfo {
                    index,
                    model: dev.name().unwrap_or_else(|_| "unknown NVIDIA GPU".into()),
                    memory_total: dev.memory_info().map(|m| m.total).unwrap_or(0),
                    uuid: dev.uuid().unwrap_or_default(),
                })
            })
            .collect()
    }

    fn sample(&self) -> Vec<GpuSample> {
        (0..self.count())
            .filter_map(|index| {
                let dev = self.nvml.device_by_index(index).ok()?;
                let processes = dev
                    .running_compute_processes()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|p| {
                        let used = match p.used_gpu_memory {
                            nvml_wrapper::enums::device::UsedGpuMemory::Used(b) => b,
                            nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => 0,
                        };
                        ProcessSample {
                            pid: p.pid,
                            memory: used,
                        }
                    })
                    .collect();
                Some(GpuSample {
                    index,
                    memory_used: dev.memory_info().map(|m| m.used).unwrap_or(0),
                    utilization: dev.utilization_rates().ok().map(|u| u.gpu),
                    // NVML reports milliwatts.
                    power_watts: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                    temperature_c: dev.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                    processes,
                })
            })
            .collect()
    }
}
