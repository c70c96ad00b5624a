//! How well a job used the GPUs it asked for, from the monitor's per-GPU summaries, and, for a
//! job that used far less than it asked for, the request to make next time: fewer GPUs when it
//! left some unused, none (`--gpus 0`) when it used none of them, less memory when it held
//! little. The figures go in every report: an agent that reads "GPU 1 never used; mean 3 % on
//! GPU 0" fixes its launch command, which no amount of log reading would tell it.

use serde::{Deserialize, Serialize};

use super::GpuUsage;
use crate::model::ResourceRequest;
use crate::units::format_size;

/// A GPU that peaked at or below this utilisation and held less than [`UNUSED_MEM`] was not
/// used at all.
const UNUSED_UTIL_PCT: f64 = 1.0;
const UNUSED_MEM: u64 = 512 << 20;
/// Below this share of a GPU's memory at peak, a whole GPU was too much: ask for memory.
const MEM_SHARE_WORTH_SHARING: f64 = 0.5;
/// Headroom over the observed peak in a suggested `--gpu-mem`.
const MEM_HEADROOM: f64 = 1.25;
/// Fewer samples than this per GPU say too little to suggest anything.
const MIN_SAMPLES: u32 = 3;
/// Below this mean utilisation the report says the GPUs mostly waited.
const LOW_UTIL_PCT: f64 = 10.0;

/// The job's use of its GPUs over its run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Efficiency {
    /// Mean over its GPUs of each GPU's mean utilisation.
    pub mean_util_pct: Option<f64>,
    pub peak_util_pct: Option<f64>,
    /// The most memory it held on any one GPU.
    pub peak_mem_bytes: Option<u64>,
    /// GPUs it held but never used.
    pub unused_gpus: Vec<u32>,
    /// The request to make next time, as `baton submit` options, when it used far less than it
    /// asked for.
    pub suggested_request: Option<String>,
    /// Why, in a few words.
    pub note: Option<String>,
}

/// The efficiency of a job that held `request` and was sampled as `gpus`; `None` when the
/// monitor has no samples of it.
pub fn efficiency(gpus: &[GpuUsage], request: &ResourceRequest) -> Option<Efficiency> {
    let sampled: Vec<&GpuUsage> = gpus.iter().filter(|g| g.samples > 0).collect();
    if sampled.is_empty() {
        return None;
    }
    let means: Vec<f64> = sampled.iter().filter_map(|g| g.mean_util_pct).collect();
    let mean_util_pct = (!means.is_empty()).then(|| means.iter().sum::<f64>() / means.len() as f64);
    let peak_util_pct = sampled
        .iter()
        .filter_map(|g| g.peak_util_pct)
        .max_by(f64::total_cmp);
    let peak_mem_bytes = sampled.iter().filter_map(|g| g.peak_mem_bytes).max();
    let enough = sampled.iter().all(|g| g.samples >= MIN_SAMPLES);
    let unused_gpus: Vec<u32> = sampled
        .iter()
        .filter(|g| {
            g.peak_util_pct.is_some_and(|u| u <= UNUSED_UTIL_PCT)
                && g.peak_mem_bytes.is_some_and(|m| m < UNUSED_MEM)
        })
        .map(|g| g.index)
        .collect();

    let mut options: Vec<String> = Vec::new();
    let mut why: Vec<String> = Vec::new();
    let count = request.count.max(1) as usize;
    // A GPU the monitor never sampled may have been busy: only advise on a count when every
    // GPU the job held was watched.
    let all_sampled = sampled.len() == gpus.len();
    if enough && all_sampled && !unused_gpus.is_empty() {
        if unused_gpus.len() < count {
            let used = count - unused_gpus.len();
            options.push(format!("--gpus {used}"));
            why.push(format!("it used {used} of its {count} GPUs"));
        } else {
            options.push("--gpus 0".to_string());
            why.push(match count {
                1 => "it never used its GPU: it can run CPU-only".to_string(),
                n => format!("it used none of its {n} GPUs: it can run CPU-only"),
            });
        }
    }
    if enough && let Some(peak) = peak_mem_bytes.filter(|&p| p >= UNUSED_MEM) {
        let total = sampled.iter().map(|g| g.total_mem_bytes).max().unwrap_or(0);
        let asked = request.mem_per_gpu.unwrap_or(total);
        if asked > 0 && (peak as f64) < MEM_SHARE_WORTH_SHARING * asked as f64 {
            let want = round_up_gib((peak as f64 * MEM_HEADROOM) as u64);
            if want < asked {
                options.push(format!("--gpu-mem {}GiB", want >> 30));
                why.push(format!(
                    "its memory peaked at {} of {}",
                    format_size(peak),
                    format_size(asked)
                ));
            }
        }
    }
    let note = match mean_util_pct {
        Some(m) if enough && m < LOW_UTIL_PCT && unused_gpus.len() < sampled.len() => {
            Some(format!(
                "its GPUs averaged {m:.0} % utilisation: the job mostly waited (input \
                 pipeline, CPU work, or a sleep)"
            ))
        }
        _ => None,
    };
    let note = match (why.is_empty(), note) {
        (true, note) => note,
        (false, None) => Some(why.join("; ")),
        (false, Some(n)) => Some(format!("{}; {n}", why.join("; "))),
    };
    Some(Efficiency {
        mean_util_pct: mean_util_pct.map(round1),
        peak_util_pct: peak_util_pct.map(round1),
        peak_mem_bytes,
        unused_gpus,
        suggested_request: (!options.is_empty()).then(|| options.join(" ")),
        note,
    })
}

fn round_up_gib(bytes: u64) -> u64 {
    bytes.div_ceil(1 << 30).max(1) << 30
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn gpu(index: u32, mean: f64, peak: f64, mem: u64) -> GpuUsage {
        GpuUsage {
            index,
            samples: 100,
            mean_util_pct: Some(mean),
            peak_util_pct: Some(peak),
            peak_mem_bytes: Some(mem),
            total_mem_bytes: 80 * GIB,
        }
    }

    #[test]
    fn no_samples_no_efficiency() {
        let mut g = gpu(0, 50.0, 90.0, GIB);
        g.samples = 0;
        assert_eq!(efficiency(&[g], &ResourceRequest::whole(1)), None);
    }

    #[test]
    fn a_busy_job_gets_figures_and_no_suggestion() {
        let e = efficiency(
            &[gpu(0, 85.0, 99.0, 70 * GIB), gpu(1, 80.0, 98.0, 71 * GIB)],
            &ResourceRequest::whole(2),
        )
        .unwrap();
        assert_eq!(e.mean_util_pct, Some(82.5));
        assert_eq!(e.peak_util_pct, Some(99.0));
        assert_eq!(e.peak_mem_bytes, Some(71 * GIB));
        assert_eq!((e.suggested_request, e.note), (None, None));
    }

    #[test]
    fn an_unused_gpu_and_small_memory_suggest_a_smaller_request() {
        let e = efficiency(
            &[gpu(0, 60.0, 95.0, 9 * GIB), gpu(1, 0.0, 0.0, 0)],
            &ResourceRequest::whole(2),
        )
        .unwrap();
        assert_eq!(e.unused_gpus, [1]);
        // 9 GiB × 1.25 = 11.25, rounded up to 12 GiB.
        assert_eq!(
            e.suggested_request.as_deref(),
            Some("--gpus 1 --gpu-mem 12GiB")
        );
        let note = e.note.unwrap();
        assert!(note.contains("1 of its 2 GPUs"), "{note}");
        assert!(
            note.contains("9.0 GiB of 80.0 GiB") || note.contains("9 GiB"),
            "{note}"
        );
    }

    #[test]
    fn a_job_that_mostly_waited_is_told_so() {
        let e = efficiency(&[gpu(0, 3.0, 40.0, 60 * GIB)], &ResourceRequest::whole(1)).unwrap();
        assert_eq!(e.suggested_request, None);
        assert!(e.note.unwrap().contains("averaged 3 %"));
    }

    #[test]
    fn a_memory_sized_request_is_compared_with_what_it_asked() {
        let req = ResourceRequest::shared(1, 40 * GIB);
        let e = efficiency(&[gpu(0, 70.0, 90.0, 10 * GIB)], &req).unwrap();
        assert_eq!(e.suggested_request.as_deref(), Some("--gpu-mem 13GiB"));
        // Close to what it asked: nothing to say.
        let e = efficiency(&[gpu(0, 70.0, 90.0, 30 * GIB)], &req).unwrap();
        assert_eq!(e.suggested_request, None);
    }

    #[test]
    fn a_job_that_used_none_of_its_gpus_is_told_to_run_without() {
        for count in [1, 2] {
            let gpus: Vec<GpuUsage> = (0..count).map(|i| gpu(i, 0.0, 0.0, 0)).collect();
            let e = efficiency(&gpus, &ResourceRequest::whole(count)).unwrap();
            assert_eq!(e.unused_gpus.len(), count as usize);
            assert_eq!(e.suggested_request.as_deref(), Some("--gpus 0"));
            let note = e.note.unwrap();
            assert!(note.contains("CPU-only"), "{note}");
        }
        // A few hundred MiB of context on each, and idle: still unused.
        let e = efficiency(
            &[gpu(0, 0.2, 1.0, 300 << 20), gpu(1, 0.0, 0.0, 300 << 20)],
            &ResourceRequest::whole(2),
        )
        .unwrap();
        assert_eq!(e.suggested_request.as_deref(), Some("--gpus 0"));
        // 3 of 4 used: one fewer.
        let e = efficiency(
            &[
                gpu(0, 70.0, 99.0, 70 * GIB),
                gpu(1, 70.0, 99.0, 70 * GIB),
                gpu(2, 0.0, 0.0, 0),
                gpu(3, 70.0, 99.0, 70 * GIB),
            ],
            &ResourceRequest::whole(4),
        )
        .unwrap();
        assert_eq!(e.suggested_request.as_deref(), Some("--gpus 3"));
        // One GPU not sampled: it may have been the busy one, so no advice on the count.
        let mut unsampled = gpu(1, 0.0, 0.0, 0);
        unsampled.samples = 0;
        let e = efficiency(
            &[gpu(0, 0.0, 0.0, 0), unsampled],
            &ResourceRequest::whole(2),
        )
        .unwrap();
        assert_eq!(e.suggested_request, None);
    }

    #[test]
    fn too_few_samples_suggest_nothing() {
        let mut g = gpu(0, 0.0, 0.0, 0);
        g.samples = 2;
        let mut h = gpu(1, 50.0, 90.0, 2 * GIB);
        h.samples = 2;
        let e = efficiency(&[g, h], &ResourceRequest::whole(2)).unwrap();
        assert_eq!((e.suggested_request, e.note), (None, None));
    }
}
