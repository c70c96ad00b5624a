//! Admission: whether a request can ever be met on this machine, with errors that say what exists.
//! Checked at submit time so an impossible job is refused instead of waiting forever.

use crate::model::{Gpu, GpuRequest};
use crate::units::format_size;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    #[error("asked for {asked} GPU{}; this machine has {have}", if *.asked == 1 { "" } else { "s" })]
    TooManyGpus { asked: u32, have: usize },
    #[error(
        "asked for {} per GPU on {count} GPU{}; the largest GPU here has {}",
        format_size(*.asked), if *.count == 1 { "" } else { "s" }, format_size(*.largest)
    )]
    TooMuchMemory {
        asked: u64,
        count: u32,
        largest: u64,
    },
    #[error(
        "asked for {count} GPUs with {} each; only {fitting} GPU{} here have that much memory",
        format_size(*.asked), if *.fitting == 1 { "" } else { "s" }
    )]
    TooFewLargeGpus {
        asked: u64,
        count: u32,
        fitting: usize,
    },
}

/// Checks `req` against the machine's GPUs, empty.
pub fn check(req: &GpuRequest, gpus: &[Gpu]) -> Result<(), AdmissionError> {
    if req.count as usize > gpus.len() {
        return Err(AdmissionError::TooManyGpus {
            asked: req.count,
            have: gpus.len(),
        });
    }
    if let Some(mem) = req.mem_per_gpu {
        let largest = gpus.iter().map(|g| g.memory_total).max().unwrap_or(0);
        if mem > largest {
            return Err(AdmissionError::TooMuchMemory {
                asked: mem,
                count: req.count,
                largest,
            });
        }
        let fitting = gpus.iter().filter(|g| g.memory_total >= mem).count();
        if fitting < req.count as usize {
            return Err(AdmissionError::TooFewLargeGpus {
                asked: mem,
                count: req.count,
                fitting,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_what_exists() {
        let gpus: Vec<Gpu> = (0..4)
            .map(|index| Gpu {
                index,
                memory_total: 80 << 30,
                node: 0,
            })
            .collect();
        assert_eq!(
            check(&GpuRequest::whole(99), &gpus)
                .unwrap_err()
                .to_string(),
            "asked for 99 GPUs; this machine has 4"
        );
        assert_eq!(
            check(&GpuRequest::shared(1, 100 << 30), &gpus)
                .unwrap_err()
                .to_string(),
            "asked for 100 GiB per GPU on 1 GPU; the largest GPU here has 80 GiB"
        );
        assert!(check(&GpuRequest::whole(4), &gpus).is_ok());
        assert!(check(&GpuRequest::whole(1), &[]).is_err());
        assert!(check(&GpuRequest::whole(0), &[]).is_ok());
    }
}
