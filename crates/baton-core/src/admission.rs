//! Admission: whether a request can ever be met on this machine, with errors that say what exists.
//! Checked at submit time so an impossible job is refused instead of waiting forever.

use crate::model::{Gpu, NodeCapacity, ResourceRequest};
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
    #[error("asked for {asked} CPU{}; jobs may use {have} here", if *.asked == 1 { "" } else { "s" })]
    TooManyCpus { asked: u32, have: u32 },
    #[error(
        "asked for {} of memory; jobs may use {} here", format_size(*.asked), format_size(*.have)
    )]
    TooMuchHostMemory { asked: u64, have: u64 },
}

/// Checks `req` against the machine's GPUs and, where it has a capacity, its cores and memory
/// for jobs, empty.
pub fn check(
    req: &ResourceRequest,
    gpus: &[Gpu],
    host: Option<&NodeCapacity>,
) -> Result<(), AdmissionError> {
    if let Some(host) = host {
        if req.cpus > host.cpus {
            return Err(AdmissionError::TooManyCpus {
                asked: req.cpus,
                have: host.cpus,
            });
        }
        if req.mem > host.mem {
            return Err(AdmissionError::TooMuchHostMemory {
                asked: req.mem,
                have: host.mem,
            });
        }
    }
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
            check(&ResourceRequest::whole(99), &gpus, None)
                .unwrap_err()
                .to_string(),
            "asked for 99 GPUs; this machine has 4"
        );
        assert_eq!(
            check(&ResourceRequest::shared(1, 100 << 30), &gpus, None)
                .unwrap_err()
                .to_string(),
            "asked for 100 GiB per GPU on 1 GPU; the largest GPU here has 80 GiB"
        );
        assert!(check(&ResourceRequest::whole(4), &gpus, None).is_ok());
        assert!(check(&ResourceRequest::whole(1), &[], None).is_err());
        assert!(check(&ResourceRequest::whole(0), &[], None).is_ok());
        let host = NodeCapacity {
            node: 0,
            cpus: 16,
            mem: 64 << 30,
        };
        let cpus = ResourceRequest::whole(0).with_host(17, 0);
        assert_eq!(
            check(&cpus, &gpus, Some(&host)).unwrap_err().to_string(),
            "asked for 17 CPUs; jobs may use 16 here"
        );
        let mem = ResourceRequest::whole(0).with_host(1, 65 << 30);
        assert_eq!(
            check(&mem, &gpus, Some(&host)).unwrap_err().to_string(),
            "asked for 65 GiB of memory; jobs may use 64 GiB here"
        );
        assert!(check(&mem.with_host(16, 64 << 30), &gpus, Some(&host)).is_ok());
    }
}
