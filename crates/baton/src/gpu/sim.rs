//! Simulated GPUs: a fixed number of 80 GiB devices. They let the whole scheduler, the monitor
//! and every test run on machines without GPUs.
//!
//! What runs on them is read from files a test or demo writes (issue 6):
//! `<dir>/gpu<N>/<pid>` containing `<memory_bytes> <utilisation_percent>` puts process `pid` on
//! GPU N for as long as that process lives. A GPU's memory in use is the sum of its processes',
//! its utilisation their sum (at most 100). Power and temperature follow utilisation on a fixed
//! line (60-700 W, 30-80 °C), so dashboards have something plausible to show.

use std::fs;
use std::path::{Path, PathBuf};

use super::{GpuInfo, GpuProbe, GpuSample, ProcessSample};

pub const DEFAULT_MEMORY: u64 = 80 << 30;

pub struct SimProbe {
    count: u32,
    memory: u64,
    /// Where the per-process usage files are (`None`: no processes ever).
    dir: Option<PathBuf>,
}

impl SimProbe {
    pub fn new(count: u32, memory: u64, dir: Option<PathBuf>) -> Self {
        SimProbe { count, memory, dir }
    }

    /// The stand-in for a machine where neither simulation nor NVML is available.
    pub fn none() -> Self {
        SimProbe::new(0, DEFAULT_MEMORY, None)
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
                uuid: format!("SIM-GPU-{index}"),
            })
            .collect()
    }

    fn sample(&self) -> Vec<GpuSample> {
        (0..self.count)
            .map(|index| {
                let procs = match &self.dir {
                    Some(dir) => processes(&dir.join(format!("gpu{index}"))),
                    None => Vec::new(),
                };
                let util: u32 = procs.iter().map(|(_, u)| *u).sum::<u32>().min(100);
                let memory_used = procs
                    .iter()
                    .map(|(p, _)| p.memory)
                    .sum::<u64>()
                    .min(self.memory);
                GpuSample {
                    index,
                    memory_used,
                    utilization: Some(util),
                    power_watts: Some(60.0 + 6.4 * f64::from(util)),
                    temperature_c: Some(30.0 + 0.5 * f64::from(util)),
                    processes: procs.into_iter().map(|(p, _)| p).collect(),
                }
            })
            .collect()
    }
}

/// The live processes listed in one GPU's directory, with their utilisation. Unreadable,
/// malformed and dead entries are skipped: a file is a claim, the process is the fact.
fn processes(dir: &Path) -> Vec<(ProcessSample, u32)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(ProcessSample, u32)> = entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            if pid == 0 || !alive(pid) {
                return None;
            }
            let text = fs::read_to_string(entry.path()).ok()?;
            let mut fields = text.split_whitespace();
            let memory: u64 = fields.next()?.parse().ok()?;
            let util: u32 = fields.next().map_or(Some(0), |u| u.parse().ok())?;
            Some((ProcessSample { pid, memory }, util.min(100)))
        })
        .collect();
    out.sort_by_key(|(p, _)| p.pid);
    out
}

/// A live process: in /proc and not a zombie (exited, waiting for its parent to reap it, and
/// holding no GPU memory any more).
fn alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|at| stat[at + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_come_from_files_of_live_pids() {
        let dir = tempfile::tempdir().unwrap();
        let gpu1 = dir.path().join("gpu1");
        fs::create_dir_all(&gpu1).unwrap();
        let me = std::process::id();
        fs::write(gpu1.join(me.to_string()), "2147483648 40\n").unwrap();
        // A pid that cannot be alive, a malformed file and a stray name are ignored.
        fs::write(gpu1.join("999999999"), "1073741824 10").unwrap();
        fs::write(gpu1.join("notes.txt"), "hello").unwrap();
        let probe = SimProbe::new(2, DEFAULT_MEMORY, Some(dir.path().to_path_buf()));
        let samples = probe.sample();
        assert_eq!(samples.len(), 2);
        assert!(samples[0].processes.is_empty());
        assert_eq!(samples[0].utilization, Some(0));
        assert_eq!(
            samples[1].processes,
            vec![ProcessSample {
                pid: me,
                memory: 2 << 30
            }]
        );
        assert_eq!(samples[1].memory_used, 2 << 30);
        assert_eq!(samples[1].utilization, Some(40));
        assert_eq!(probe.gpus()[1].uuid, "SIM-GPU-1");
    }

    #[test]
    fn an_exited_unreaped_process_is_not_on_the_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let gpu0 = dir.path().join("gpu0");
        fs::create_dir_all(&gpu0).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        fs::write(gpu0.join(pid.to_string()), "1073741824 0").unwrap();
        // It exits and, unreaped, stays in /proc as a zombie.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while alive(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "still a zombie"
        );
        let probe = SimProbe::new(1, DEFAULT_MEMORY, Some(dir.path().to_path_buf()));
        assert!(probe.sample()[0].processes.is_empty());
        child.wait().unwrap();
    }
}
