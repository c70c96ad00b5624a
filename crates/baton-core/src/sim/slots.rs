//! The simulator's own per-GPU view of what is held, kept beside the scheduler's: it measures
//! allocation and fragmentation without touching the scheduling code.

use std::collections::BTreeMap;

use crate::model::ResourceRequest;

use super::Cluster;

/// A request as a map key: (GPUs, memory per GPU when shared).
pub(crate) type RequestKey = (u32, Option<u64>);

pub(crate) fn key(req: &ResourceRequest) -> RequestKey {
    (req.count, req.mem_per_gpu)
}

pub(crate) struct Slots {
    gpus_per_node: u32,
    memory: u64,
    exclusive: Vec<bool>,
    mem_used: Vec<u64>,
    holders: Vec<u32>,
}

impl Slots {
    pub(crate) fn new(cluster: &Cluster) -> Slots {
        let n = cluster.total_gpus() as usize;
        Slots {
            gpus_per_node: cluster.gpus_per_node,
            memory: cluster.gpu_memory,
            exclusive: vec![false; n],
            mem_used: vec![0; n],
            holders: vec![0; n],
        }
    }

    pub(crate) fn hold(&mut self, gpus: &[u32], req: &ResourceRequest) {
        for &g in gpus {
            let g = g as usize;
            self.holders[g] += 1;
            match req.mem_per_gpu {
                None => self.exclusive[g] = true,
                Some(mem) => self.mem_used[g] += mem,
            }
        }
    }

    pub(crate) fn release(&mut self, gpus: &[u32], req: &ResourceRequest) {
        for &g in gpus {
            let g = g as usize;
            self.holders[g] -= 1;
            match req.mem_per_gpu {
                None => self.exclusive[g] = false,
                Some(mem) => self.mem_used[g] -= mem,
            }
        }
    }

    /// The unused part of GPU `g`, in GPUs: 1 when nobody holds it, the free share of its memory
    /// when only shared jobs hold it, 0 when a job holds it whole.
    fn free(&self, g: usize) -> f64 {
        if self.exclusive[g] {
            0.0
        } else if self.holders[g] == 0 {
            1.0
        } else {
            (self.memory - self.mem_used[g]) as f64 / self.memory as f64
        }
    }

    fn admits(&self, g: usize, req: &ResourceRequest) -> bool {
        match req.mem_per_gpu {
            None => self.holders[g] == 0,
            Some(mem) => !self.exclusive[g] && self.memory - self.mem_used[g] >= mem,
        }
    }

    /// Fragmentation of the free capacity against a workload, after Weng et al. (ATC '23): the
    /// share of the free GPU capacity that a job drawn from `workload` (request → how many jobs
    /// ask for it) could not use where it lies.
    ///
    /// With `C` the free capacity (the sum of [`Slots::free`] over all GPUs) and, for a request
    /// `r`, `S_r` the free capacity `r` cannot use — all of a node's on a node where `r` does
    /// not fit, and on a node where it fits, that of the GPUs that cannot take it (a shared GPU
    /// for a whole-GPU request, a GPU with too little memory left for a shared one):
    ///
    /// `fragmentation = Σ_r n_r · S_r / (N · C)`, with `n_r` jobs asking for `r` and
    /// `N = Σ n_r`, requests for no GPU left out.
    ///
    /// 0 means every free GPU could serve any job of the workload; 1 means none could. `None`
    /// when nothing is free or the workload asks for no GPU.
    pub(crate) fn fragmentation(&self, workload: &BTreeMap<RequestKey, usize>) -> Option<f64> {
        let n = self.holders.len();
        let free: Vec<f64> = (0..n).map(|g| self.free(g)).collect();
        let capacity: f64 = free.iter().sum();
        let w: usize = workload
            .iter()
            .filter(|((count, _), _)| *count > 0)
            .map(|(_, &m)| m)
            .sum();
        if capacity <= 1e-9 || w == 0 {
            return None;
        }
        let per_node = self.gpus_per_node as usize;
        let mut stranded = 0.0;
        for (&(count, mem_per_gpu), &m) in workload {
            if count == 0 {
                continue;
            }
            let req = ResourceRequest {
                count,
                mem_per_gpu,
                ..Default::default()
            };
            let mut s = 0.0;
            for node in 0..n / per_node {
                let range = node * per_node..(node + 1) * per_node;
                let usable = range.clone().filter(|&g| self.admits(g, &req)).count();
                s += if usable >= count as usize {
                    range
                        .filter(|&g| !self.admits(g, &req))
                        .map(|g| free[g])
                        .sum::<f64>()
                } else {
                    range.map(|g| free[g]).sum::<f64>()
                };
            }
            stranded += m as f64 * s;
        }
        Some(stranded / (w as f64 * capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn fragmentation_counts_free_capacity_the_workload_cannot_use() {
        // 2 nodes × 2 GPUs of 80 GiB.
        let mut s = Slots::new(&Cluster {
            nodes: 2,
            gpus_per_node: 2,
            gpu_memory: 80 * GIB,
        });
        let whole = |n| key(&ResourceRequest::whole(n));
        // No workload: undefined.
        assert_eq!(s.fragmentation(&BTreeMap::new()), None);
        // One GPU of each node busy: 2 GPUs free, one per node.
        s.hold(&[0], &ResourceRequest::whole(1));
        s.hold(&[2], &ResourceRequest::whole(1));
        // A 2-GPU job fits on no node: all free capacity is stranded for it.
        assert_eq!(s.fragmentation(&BTreeMap::from([(whole(2), 1)])), Some(1.0));
        // A 1-GPU job can use both.
        assert_eq!(s.fragmentation(&BTreeMap::from([(whole(1), 3)])), Some(0.0));
        // Three 1-GPU jobs and one 2-GPU job: (3·0 + 1·2) / (4 · 2).
        assert_eq!(
            s.fragmentation(&BTreeMap::from([(whole(1), 3), (whole(2), 1)])),
            Some(0.25)
        );
        // Jobs that need no GPU are not counted.
        assert_eq!(
            s.fragmentation(&BTreeMap::from([(whole(0), 5), (whole(2), 1)])),
            Some(1.0)
        );
        // A shared job on GPU 1 using a quarter: free = 0.75 (GPU 1) + 1 (GPU 3) = 1.75.
        let quarter = ResourceRequest::shared(1, 20 * GIB);
        s.hold(&[1], &quarter);
        // A whole-GPU job fits only on node 1: GPU 1's 0.75 is stranded for it.
        let f = s.fragmentation(&BTreeMap::from([(whole(1), 1)])).unwrap();
        assert!((f - 0.75 / 1.75).abs() < 1e-12, "{f}");
        // A half-GPU shared job can use both.
        let half = key(&ResourceRequest::shared(1, 40 * GIB));
        assert_eq!(s.fragmentation(&BTreeMap::from([(half, 1)])), Some(0.0));
        s.release(&[1], &quarter);
        s.release(&[0], &ResourceRequest::whole(1));
        s.release(&[2], &ResourceRequest::whole(1));
        assert_eq!(s.fragmentation(&BTreeMap::from([(whole(2), 1)])), Some(0.0));
        // Everything held whole: nothing free, undefined.
        s.hold(&[0, 1], &ResourceRequest::whole(2));
        s.hold(&[2, 3], &ResourceRequest::whole(2));
        assert_eq!(s.fragmentation(&BTreeMap::from([(whole(1), 1)])), None);
    }
}
