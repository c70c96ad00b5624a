//! Where a job's GPUs come from: the per-GPU occupancy of a cluster and the choice of GPUs for a
//! request. Whole-GPU jobs take a GPU nobody uses; memory-sized jobs share a GPU with other
//! memory-sized jobs while their sum fits in its memory, and never share with a whole-GPU job.
//! A job's GPUs all come from one node (a single machine is node 0).
//!
//! Cores and the node's own memory are counted per node like a pool: a job takes its `cpus`
//! and `mem` from the node its GPUs are on. A job without GPUs takes them from the first node
//! (on one machine: the machine); the simulator's multi-node clusters leave cores and memory
//! unlimited, so only the single machine's daemon, where this is exact, sets them.

use crate::model::{Gpu, NodeCapacity, ResourceRequest};

/// Occupancy of one GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    /// Held whole by one job.
    exclusive: bool,
    /// Memory promised to sharing jobs.
    mem_used: u64,
    /// How many jobs hold this GPU (whole or shared).
    holders: u32,
}

/// One node's GPUs: fixed for the life of an occupancy, and shared by its clones (the
/// scheduler clones occupancies to try placements).
#[derive(Debug, PartialEq, Eq)]
struct NodeShape {
    id: u32,
    /// Positions (in `Occupancy::gpus`) of this node's GPUs, by index.
    positions: Vec<usize>,
    /// Its GPUs' memories, largest first: what the empty node could ever offer.
    totals_desc: Vec<u64>,
    /// The cores and memory jobs may take on it (`u64::MAX`: unlimited).
    cpus: u64,
    mem: u64,
}

/// What one node has free, kept up to date on every change so that a request is matched
/// against nodes (a hundred or so) rather than against every GPU of the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NodeFree {
    /// GPUs nobody holds.
    free_whole: usize,
    /// The most memory free on any of its GPUs a shared job could use.
    most_shared_free: u64,
    /// Cores and memory promised to the jobs on it. They may exceed the capacity when running
    /// jobs are counted after the capacity shrank (see [`Occupancy::occupy`]).
    cpus_used: u64,
    mem_used: u64,
}

impl NodeFree {
    fn host_fits(&self, shape: &NodeShape, req: &ResourceRequest) -> bool {
        shape.cpus.saturating_sub(self.cpus_used) >= u64::from(req.cpus)
            && shape.mem.saturating_sub(self.mem_used) >= req.mem
    }
}

/// The occupancy of every GPU of a cluster (one machine is one node).
///
/// A scheduling pass asks "does this fit?" once per queued job and changes the occupancy only
/// when a job starts, so the answers to the common questions are kept up to date on change, per
/// node and overall (`free_whole`, `most_shared_free`), and most requests that do not fit are
/// refused in O(1), the rest after a look at each node's summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occupancy {
    gpus: std::sync::Arc<Vec<Gpu>>,
    slots: Vec<Slot>,
    shapes: std::sync::Arc<Vec<NodeShape>>,
    nodes: Vec<NodeFree>,
    /// For each GPU position, its node's position in `nodes`.
    node_at: std::sync::Arc<Vec<usize>>,
    /// GPUs nobody holds, cluster-wide.
    free_whole: usize,
    /// The most memory free on any GPU a shared job could use, cluster-wide.
    most_shared_free: u64,
}

/// Holding a GPU that does not exist, or taking more than is free: a broken caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("GPU {0} does not exist on this machine")]
    NoSuchGpu(u32),
    #[error("GPU {0} is already taken")]
    Taken(u32),
    #[error("node {0} has not enough cores or memory free")]
    HostFull(u32),
}

impl Occupancy {
    /// GPUs only: cores and memory unlimited.
    pub fn new(gpus: &[Gpu]) -> Self {
        Occupancy::with_hosts(gpus, &[])
    }

    /// GPUs and, per node, the cores and memory jobs may take (nodes not in `hosts` have no
    /// limit; a node in `hosts` without GPUs is a CPU-only node).
    pub fn with_hosts(gpus: &[Gpu], hosts: &[NodeCapacity]) -> Self {
        let mut gpus = gpus.to_vec();
        gpus.sort_by_key(|g| g.index);
        let mut shapes: Vec<NodeShape> = Vec::new();
        let mut nodes: Vec<NodeFree> = Vec::new();
        let mut node_at = Vec::with_capacity(gpus.len());
        for (pos, g) in gpus.iter().enumerate() {
            let at = match shapes.iter().position(|n| n.id == g.node) {
                Some(at) => at,
                None => {
                    shapes.push(NodeShape {
                        id: g.node,
                        positions: Vec::new(),
                        totals_desc: Vec::new(),
                        cpus: u64::MAX,
                        mem: u64::MAX,
                    });
                    nodes.push(NodeFree::default());
                    shapes.len() - 1
                }
            };
            shapes[at].positions.push(pos);
            shapes[at].totals_desc.push(g.memory_total);
            nodes[at].free_whole += 1;
            nodes[at].most_shared_free = nodes[at].most_shared_free.max(g.memory_total);
            node_at.push(at);
        }
        for host in hosts {
            match shapes.iter_mut().find(|n| n.id == host.node) {
                Some(shape) => {
                    shape.cpus = u64::from(host.cpus);
                    shape.mem = host.mem;
                }
                None => {
                    shapes.push(NodeShape {
                        id: host.node,
                        positions: Vec::new(),
                        totals_desc: Vec::new(),
                        cpus: u64::from(host.cpus),
                        mem: host.mem,
                    });
                    nodes.push(NodeFree::default());
                }
            }
        }
        for shape in &mut shapes {
            shape.totals_desc.sort_unstable_by(|a, b| b.cmp(a));
        }
        Occupancy {
            slots: vec![Slot::default(); gpus.len()],
            free_whole: gpus.len(),
            most_shared_free: gpus.iter().map(|g| g.memory_total).max().unwrap_or(0),
            shapes: std::sync::Arc::new(shapes),
            nodes,
            node_at: std::sync::Arc::new(node_at),
            gpus: std::sync::Arc::new(gpus),
        }
    }

    /// Recomputes the summaries of the nodes at `changed` (positions in `nodes`), then the
    /// cluster's.
    fn refresh(&mut self, changed: &[usize]) {
        let mut rescan_max = false;
        for &at in changed {
            let shape = &self.shapes[at];
            let old = self.nodes[at];
            let free_whole = shape
                .positions
                .iter()
                .filter(|&&p| self.slots[p].holders == 0)
                .count();
            let most_shared_free = shape
                .positions
                .iter()
                .filter(|&&p| !self.slots[p].exclusive)
                .map(|&p| {
                    self.gpus[p]
                        .memory_total
                        .saturating_sub(self.slots[p].mem_used)
                })
                .max()
                .unwrap_or(0);
            self.nodes[at] = NodeFree {
                free_whole,
                most_shared_free,
                ..old
            };
            self.free_whole = self.free_whole - old.free_whole + free_whole;
            if most_shared_free >= self.most_shared_free {
                self.most_shared_free = most_shared_free;
            } else if old.most_shared_free == self.most_shared_free {
                // The node that had the most free memory has less now: find the new most.
                rescan_max = true;
            }
        }
        if rescan_max {
            self.most_shared_free = self
                .nodes
                .iter()
                .map(|n| n.most_shared_free)
                .max()
                .unwrap_or(0);
        }
    }

    pub fn gpus(&self) -> &[Gpu] {
        self.gpus.as_slice()
    }

    fn position(&self, index: u32) -> Result<usize, PlacementError> {
        self.gpus
            .binary_search_by_key(&index, |g| g.index)
            .map_err(|_| PlacementError::NoSuchGpu(index))
    }

    fn slot_admits(&self, pos: usize, req: &ResourceRequest) -> bool {
        let slot = &self.slots[pos];
        match req.mem_per_gpu {
            None => slot.holders == 0,
            Some(mem) => {
                !slot.exclusive && self.gpus[pos].memory_total.saturating_sub(slot.mem_used) >= mem
            }
        }
    }

    /// Marks `gpus` as held by a job with request `req`. Fails, changing nothing, if any of them
    /// cannot take it.
    pub fn hold(&mut self, gpus: &[u32], req: &ResourceRequest) -> Result<(), PlacementError> {
        let mut positions = Vec::with_capacity(gpus.len());
        for &index in gpus {
            let pos = self.position(index)?;
            if !self.slot_admits(pos, req) || positions.contains(&pos) {
                return Err(PlacementError::Taken(index));
            }
            positions.push(pos);
        }
        if let Some(at) = self.host_node(&positions)
            && !self.nodes[at].host_fits(&self.shapes[at], req)
        {
            return Err(PlacementError::HostFull(self.shapes[at].id));
        }
        self.take(&positions, req);
        Ok(())
    }

    /// Counts what a running job holds, whatever else is held: GPUs that are gone or already
    /// taken are skipped, and cores and memory are counted even past the node's capacity (a
    /// capacity lowered under running jobs), so nothing more starts until they end.
    pub fn occupy(&mut self, gpus: &[u32], req: &ResourceRequest) {
        let existing: Vec<usize> = gpus
            .iter()
            .filter_map(|&index| self.position(index).ok())
            .collect();
        // Cores and memory on the node of its GPUs, even where every one of them is counted
        // already (withheld for a reservation, say).
        let host = self.host_node(&existing);
        let positions: Vec<usize> = existing
            .into_iter()
            .filter(|&pos| self.slot_admits(pos, req))
            .collect();
        self.take_on(host, &positions, req);
    }

    /// Keeps `gpus` from every job, whole or shared, whoever holds them now: a view for jobs
    /// that may not use GPUs kept for a reservation ([`crate::windows`]). Never released; the
    /// scheduler withholds on a clone. GPUs that do not exist are ignored.
    pub fn withhold(&mut self, gpus: &[u32]) {
        let mut changed: Vec<usize> = Vec::with_capacity(1);
        for &index in gpus {
            if let Ok(pos) = self.position(index) {
                let slot = &mut self.slots[pos];
                slot.holders += 1;
                slot.exclusive = true;
                if !changed.contains(&self.node_at[pos]) {
                    changed.push(self.node_at[pos]);
                }
            }
        }
        self.refresh(&changed);
    }

    /// The node (its position in `nodes`) whose cores and memory a job on the GPUs at
    /// `positions` takes: theirs, or the first node's for a job without GPUs.
    fn host_node(&self, positions: &[usize]) -> Option<usize> {
        match positions.first() {
            Some(&pos) => Some(self.node_at[pos]),
            None => self.first_node(),
        }
    }

    /// The first node: the one with the lowest id.
    fn first_node(&self) -> Option<usize> {
        (0..self.shapes.len()).min_by_key(|&at| self.shapes[at].id)
    }

    fn take(&mut self, positions: &[usize], req: &ResourceRequest) {
        self.take_on(self.host_node(positions), positions, req);
    }

    /// Takes the GPUs at `positions`, and `req`'s cores and memory on node `host`.
    fn take_on(&mut self, host: Option<usize>, positions: &[usize], req: &ResourceRequest) {
        if req.uses_host()
            && let Some(at) = host
        {
            let node = &mut self.nodes[at];
            node.cpus_used += u64::from(req.cpus);
            node.mem_used += req.mem;
        }
        let mut changed: Vec<usize> = Vec::with_capacity(1);
        for &pos in positions {
            let slot = &mut self.slots[pos];
            slot.holders += 1;
            match req.mem_per_gpu {
                None => slot.exclusive = true,
                Some(mem) => slot.mem_used += mem,
            }
            if !changed.contains(&self.node_at[pos]) {
                changed.push(self.node_at[pos]);
            }
        }
        self.refresh(&changed);
    }

    /// Gives back what [`Occupancy::hold`] took. GPUs that no longer exist are ignored.
    pub fn release(&mut self, gpus: &[u32], req: &ResourceRequest) {
        if req.uses_host() {
            let first = gpus.iter().find_map(|&index| self.position(index).ok());
            let at = match first {
                Some(pos) => Some(self.node_at[pos]),
                None if gpus.is_empty() => self.first_node(),
                None => None,
            };
            if let Some(at) = at {
                let node = &mut self.nodes[at];
                node.cpus_used = node.cpus_used.saturating_sub(u64::from(req.cpus));
                node.mem_used = node.mem_used.saturating_sub(req.mem);
            }
        }
        let mut changed: Vec<usize> = Vec::with_capacity(1);
        for &index in gpus {
            if let Ok(pos) = self.position(index) {
                let slot = &mut self.slots[pos];
                slot.holders = slot.holders.saturating_sub(1);
                match req.mem_per_gpu {
                    None => slot.exclusive = false,
                    Some(mem) => slot.mem_used = slot.mem_used.saturating_sub(mem),
                }
                if !changed.contains(&self.node_at[pos]) {
                    changed.push(self.node_at[pos]);
                }
            }
        }
        self.refresh(&changed);
    }

    /// Chooses GPUs for `req`, or `None` if it does not fit now. Whole GPUs: the lowest free
    /// indices. Shared: best fit (the GPUs with the least memory left that still fit, preferring
    /// GPUs already shared) so that whole GPUs stay free for whole-GPU jobs. All from one node:
    /// the one with the least room that still fits (keeping emptier nodes whole for big jobs).
    pub fn choose(&self, req: &ResourceRequest) -> Option<Vec<u32>> {
        self.choose_near(req, None)
    }

    /// Like [`Occupancy::choose`], but on node `prefer` if the request fits there (a task next to
    /// the data its predecessor left).
    pub fn choose_near(&self, req: &ResourceRequest, prefer: Option<u32>) -> Option<Vec<u32>> {
        if req.count == 0 {
            let fits = !req.uses_host()
                || self
                    .first_node()
                    .is_some_and(|at| self.nodes[at].host_fits(&self.shapes[at], req));
            return fits.then(Vec::new);
        }
        let count = req.count as usize;
        let hopeless = match req.mem_per_gpu {
            None => self.free_whole < count,
            Some(mem) => self.most_shared_free < mem,
        };
        if hopeless {
            return None;
        }
        // The node: the preferred one if it fits, else the one with the fewest GPUs that could
        // take the request (best fit), lowest id on ties. Whole requests are decided from the
        // node summaries alone; shared ones look at the GPUs of nodes that might fit.
        let admitting = |shape: &NodeShape| -> Vec<usize> {
            shape
                .positions
                .iter()
                .copied()
                .filter(|&p| self.slot_admits(p, req))
                .collect()
        };
        let mut best: Option<((bool, usize, u32), usize)> = None;
        for (at, (node, shape)) in self.nodes.iter().zip(self.shapes.iter()).enumerate() {
            // How many of its GPUs could take the request: known from the summary for whole
            // GPUs; for shared ones, counted on the nodes that might fit.
            let fits = match req.mem_per_gpu {
                None => node.free_whole,
                Some(mem) if node.most_shared_free >= mem => shape
                    .positions
                    .iter()
                    .filter(|&&p| self.slot_admits(p, req))
                    .count(),
                Some(_) => 0,
            };
            if fits < count || !node.host_fits(shape, req) {
                continue;
            }
            let key = (Some(shape.id) != prefer, fits, shape.id);
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, at));
                if !key.0 {
                    break; // the preferred node
                }
            }
        }
        let (_, at) = best?;
        let mut list = admitting(&self.shapes[at]);
        if req.mem_per_gpu.is_some() {
            list.sort_by_key(|&pos| {
                let left = self.gpus[pos].memory_total - self.slots[pos].mem_used;
                (self.slots[pos].holders == 0, left, self.gpus[pos].index)
            });
        }
        let mut chosen: Vec<u32> = list[..count]
            .iter()
            .map(|&pos| self.gpus[pos].index)
            .collect();
        chosen.sort_unstable();
        Some(chosen)
    }

    /// The node GPU `index` is in.
    pub fn node_of(&self, index: u32) -> Option<u32> {
        self.position(index).ok().map(|pos| self.gpus[pos].node)
    }

    /// Places every request at once, each on GPUs free after the ones before it, or none at all.
    /// All on one node when some node can take them all (the fullest such node, as best fit
    /// does for one job), so an atomic workflow's data never leaves its node; else each goes to
    /// the node of the first placed one when it fits there.
    pub fn choose_all(&self, requests: &[ResourceRequest]) -> Option<Vec<Vec<u32>>> {
        if let [one] = requests {
            return self.choose(one).map(|chosen| vec![chosen]);
        }
        // A node without enough whole GPUs free for the whole requests cannot take them all.
        let whole: usize = requests
            .iter()
            .filter(|r| r.mem_per_gpu.is_none())
            .map(|r| r.count as usize)
            .sum();
        let mut candidates: Vec<usize> = (0..self.nodes.len())
            .filter(|&at| self.nodes[at].free_whole >= whole)
            .collect();
        if self.nodes.len() > 1 {
            candidates.sort_by_key(|&at| (self.nodes[at].free_whole, self.shapes[at].id));
            for at in candidates {
                if let Some(out) = self.place_each(requests, Some(self.shapes[at].id), true) {
                    return Some(out);
                }
            }
        }
        self.place_each(requests, None, false)
    }

    /// Places the requests one after another on a trial copy, preferring node `node` (or, when
    /// `None`, the node of the first placed one); with `only_there`, a request that lands on
    /// another node fails the whole placement.
    fn place_each(
        &self,
        requests: &[ResourceRequest],
        mut node: Option<u32>,
        only_there: bool,
    ) -> Option<Vec<Vec<u32>>> {
        let mut trial = self.clone();
        let mut out = Vec::with_capacity(requests.len());
        for req in requests {
            let chosen = trial.choose_near(req, node)?;
            let landed = chosen.first().and_then(|&g| trial.node_of(g));
            if only_there && landed.is_some() && landed != node {
                return None;
            }
            if node.is_none() {
                node = landed;
            }
            trial.hold(&chosen, req).ok()?;
            out.push(chosen);
        }
        Some(out)
    }

    /// Whether `req` could ever fit on this cluster, empty.
    pub fn could_ever_fit(&self, req: &ResourceRequest) -> bool {
        let host_fits =
            |shape: &NodeShape| shape.cpus >= u64::from(req.cpus) && shape.mem >= req.mem;
        if req.count == 0 {
            return !req.uses_host()
                || self
                    .first_node()
                    .is_some_and(|at| host_fits(&self.shapes[at]));
        }
        self.shapes.iter().any(|shape| {
            host_fits(shape)
                && match shape.totals_desc.get(req.count as usize - 1) {
                    None => false,
                    Some(&nth_largest) => req.mem_per_gpu.is_none_or(|mem| nth_largest >= mem),
                }
        })
    }

    /// What is free now, for "why is my job waiting" messages (formatted only when shown).
    pub fn free(&self) -> Free {
        // Cores and memory: the first node's (the machine's, on one machine).
        let host = self
            .first_node()
            .map(|at| (&self.shapes[at], &self.nodes[at]));
        let (cpus, cpus_free, mem, mem_free) = match host {
            Some((shape, node)) => (
                shape.cpus,
                shape.cpus.saturating_sub(node.cpus_used),
                shape.mem,
                shape.mem.saturating_sub(node.mem_used),
            ),
            None => (0, 0, 0, 0),
        };
        Free {
            whole: self.free_whole,
            gpus: self.gpus.len(),
            most_shared: self.most_shared_free,
            cpus_free,
            cpus,
            mem_free,
            mem,
        }
    }
}

/// What a machine has free at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Free {
    /// GPUs nobody holds.
    pub whole: usize,
    /// GPUs on the machine.
    pub gpus: usize,
    /// The most memory free on any GPU a shared job could use.
    pub most_shared: u64,
    /// The machine's cores free and in all (`u64::MAX`: unlimited).
    #[serde(default)]
    pub cpus_free: u64,
    #[serde(default)]
    pub cpus: u64,
    /// The machine's memory free and in all, in bytes (`u64::MAX`: unlimited).
    #[serde(default)]
    pub mem_free: u64,
    #[serde(default)]
    pub mem: u64,
}

impl Free {
    /// Whether the cores or the memory are what `req` lacks (now, or, with `ever`, on the empty
    /// machine).
    pub fn host_short(&self, req: &ResourceRequest, ever: bool) -> bool {
        let (cpus, mem) = if ever {
            (self.cpus, self.mem)
        } else {
            (self.cpus_free, self.mem_free)
        };
        u64::from(req.cpus) > cpus || req.mem > mem
    }

    /// What of `req` this machine can never give: `needs 32 CPUs; jobs may use 16 CPUs here`.
    pub fn describe_capacity(&self, req: &ResourceRequest) -> String {
        if u64::from(req.cpus) > self.cpus {
            format!(
                "needs {} CPU{}; jobs may use {} CPU{} here",
                req.cpus,
                plural(req.cpus as usize),
                self.cpus,
                plural(self.cpus as usize)
            )
        } else {
            format!(
                "needs {} of memory; jobs may use {} here",
                crate::units::format_size(req.mem),
                crate::units::format_size(self.mem)
            )
        }
    }

    /// `needs 2 whole GPUs, 1 of 4 free`; `needs 4 CPUs, 1 of 16 free` when the cores are what
    /// it lacks.
    pub fn describe(&self, req: &ResourceRequest) -> String {
        if u64::from(req.cpus) > self.cpus_free {
            return format!(
                "needs {} CPU{}, {} of {} free",
                req.cpus,
                plural(req.cpus as usize),
                self.cpus_free,
                self.cpus
            );
        }
        if req.mem > self.mem_free {
            return format!(
                "needs {} of memory, {} of {} free",
                crate::units::format_size(req.mem),
                crate::units::format_size(self.mem_free),
                crate::units::format_size(self.mem)
            );
        }
        match req.mem_per_gpu {
            None => format!(
                "needs {} whole GPU{}, {} of {} free",
                req.count,
                plural(req.count as usize),
                self.whole,
                self.gpus
            ),
            Some(mem) => format!(
                "needs {} GPU{} with {} free, the most free on any GPU is {}",
                req.count,
                plural(req.count as usize),
                crate::units::format_size(mem),
                crate::units::format_size(self.most_shared)
            ),
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn machine(n: u32) -> Occupancy {
        let gpus: Vec<Gpu> = (0..n)
            .map(|index| Gpu {
                index,
                memory_total: 80 * GIB,
                node: 0,
            })
            .collect();
        Occupancy::new(&gpus)
    }

    /// `nodes` nodes of `per_node` 80 GiB GPUs, indices numbered across the cluster.
    fn cluster(nodes: u32, per_node: u32) -> Occupancy {
        let gpus: Vec<Gpu> = (0..nodes * per_node)
            .map(|index| Gpu {
                index,
                memory_total: 80 * GIB,
                node: index / per_node,
            })
            .collect();
        Occupancy::new(&gpus)
    }

    #[test]
    fn a_job_never_spans_nodes_and_goes_where_it_fits_tightest() {
        let mut occ = cluster(2, 4);
        assert!(occ.could_ever_fit(&ResourceRequest::whole(4)));
        assert!(
            !occ.could_ever_fit(&ResourceRequest::whole(5)),
            "5 GPUs exist only across nodes"
        );
        occ.hold(&[0], &ResourceRequest::whole(1)).unwrap();
        // Node 0 has 3 free, node 1 has 4: a 3-GPU job takes node 0 and keeps node 1 whole.
        assert_eq!(occ.choose(&ResourceRequest::whole(3)), Some(vec![1, 2, 3]));
        assert_eq!(
            occ.choose(&ResourceRequest::whole(4)),
            Some(vec![4, 5, 6, 7])
        );
        occ.hold(&[4, 5], &ResourceRequest::whole(2)).unwrap();
        // 3 free on node 0 and 2 on node 1: 5 free in all, but no node has 4.
        assert_eq!(occ.choose(&ResourceRequest::whole(4)), None);
        // A preference wins when the job fits there.
        assert_eq!(
            occ.choose_near(&ResourceRequest::whole(1), Some(0)),
            Some(vec![1])
        );
        assert_eq!(
            occ.choose_near(&ResourceRequest::whole(1), Some(1)),
            Some(vec![6])
        );
    }

    #[test]
    fn all_or_nothing_placement_keeps_a_gang_together_or_places_none() {
        let occ = cluster(2, 2);
        let two = [ResourceRequest::whole(1), ResourceRequest::whole(1)];
        let placed = occ.choose_all(&two).unwrap();
        assert_eq!(
            placed.iter().map(|g| occ.node_of(g[0])).collect::<Vec<_>>(),
            [Some(0), Some(0)],
            "the gang shares a node"
        );
        let five = [
            ResourceRequest::whole(2),
            ResourceRequest::whole(2),
            ResourceRequest::whole(1),
        ];
        assert_eq!(occ.choose_all(&five), None);
        assert_eq!(occ.free().whole, 4, "a failed gang placement holds nothing");
    }

    #[test]
    fn a_gang_goes_whole_to_a_node_that_can_take_it_all() {
        // Node 0 has 1 GPU free, node 1 all 4. Best fit alone would put the 1-GPU head on node 0
        // and the 3-GPU rest on node 1; node 1 can take all of it.
        let mut occ = cluster(2, 4);
        occ.hold(&[0, 1, 2], &ResourceRequest::whole(3)).unwrap();
        let gang = [ResourceRequest::whole(1), ResourceRequest::whole(3)];
        let placed = occ.choose_all(&gang).unwrap();
        assert_eq!(placed, vec![vec![4], vec![5, 6, 7]]);
        // When no node can take it all, it is split, the head's node first.
        let big = [ResourceRequest::whole(1), ResourceRequest::whole(4)];
        assert_eq!(occ.choose_all(&big), Some(vec![vec![3], vec![4, 5, 6, 7]]));
    }

    #[test]
    fn whole_gpus_take_lowest_free_indices() {
        let mut occ = machine(4);
        occ.hold(&[0, 2], &ResourceRequest::whole(2)).unwrap();
        assert_eq!(occ.choose(&ResourceRequest::whole(2)), Some(vec![1, 3]));
        assert_eq!(occ.choose(&ResourceRequest::whole(3)), None);
    }

    #[test]
    fn shared_jobs_pack_and_never_mix_with_whole() {
        let mut occ = machine(2);
        let small = ResourceRequest::shared(1, 30 * GIB);
        occ.hold(&[0], &small).unwrap();
        // Best fit: the second small job goes next to the first, keeping GPU 1 whole.
        assert_eq!(occ.choose(&small), Some(vec![0]));
        occ.hold(&[0], &small).unwrap();
        // 60 GiB used on GPU 0: a third 30 GiB job no longer fits there.
        assert_eq!(occ.choose(&small), Some(vec![1]));
        assert_eq!(occ.choose(&ResourceRequest::whole(2)), None);
        assert_eq!(occ.choose(&ResourceRequest::whole(1)), Some(vec![1]));
        occ.hold(&[1], &ResourceRequest::whole(1)).unwrap();
        assert_eq!(occ.choose(&small), None);
        assert_eq!(
            occ.hold(&[1], &small),
            Err(PlacementError::Taken(1)),
            "a shared job never lands on a whole-GPU job"
        );
    }

    #[test]
    fn release_restores_capacity() {
        let mut occ = machine(1);
        let req = ResourceRequest::shared(1, 50 * GIB);
        occ.hold(&[0], &req).unwrap();
        assert_eq!(occ.choose(&req), None);
        occ.release(&[0], &req);
        assert_eq!(occ.choose(&req), Some(vec![0]));
        assert_eq!(occ, machine(1));
    }

    #[test]
    fn cores_and_memory_are_taken_from_the_node_and_given_back() {
        let host = NodeCapacity {
            node: 0,
            cpus: 8,
            mem: 32 * GIB,
        };
        let gpus: Vec<Gpu> = (0..2)
            .map(|index| Gpu {
                index,
                memory_total: 80 * GIB,
                node: 0,
            })
            .collect();
        let mut occ = Occupancy::with_hosts(&gpus, &[host]);
        let empty = occ.clone();
        let gpu_job = ResourceRequest::whole(1).with_host(6, 16 * GIB);
        occ.hold(&[0], &gpu_job).unwrap();
        // GPU 1 is free but only 2 cores are.
        assert_eq!(occ.choose(&ResourceRequest::whole(1).with_host(4, 0)), None);
        assert_eq!(
            occ.hold(&[1], &ResourceRequest::whole(1).with_host(4, 0)),
            Err(PlacementError::HostFull(0)),
            "a failed hold takes nothing"
        );
        let cpu_job = ResourceRequest::whole(0).with_host(2, 16 * GIB);
        assert_eq!(occ.choose(&cpu_job), Some(vec![]));
        occ.hold(&[], &cpu_job).unwrap();
        assert_eq!(occ.choose(&ResourceRequest::whole(0).with_host(1, 0)), None);
        assert_eq!(occ.free().cpus_free, 0);
        assert_eq!(occ.free().mem_free, 0);
        occ.release(&[], &cpu_job);
        occ.release(&[0], &gpu_job);
        assert_eq!(occ, empty);
        // What runs is counted even past the capacity; nothing more fits until it ends.
        occ.occupy(&[], &ResourceRequest::whole(0).with_host(12, 0));
        assert_eq!(occ.free().cpus_free, 0);
        assert!(occ.could_ever_fit(&ResourceRequest::whole(0).with_host(8, 0)));
        assert!(!occ.could_ever_fit(&ResourceRequest::whole(0).with_host(9, 0)));
        assert!(!occ.could_ever_fit(&ResourceRequest::whole(1).with_host(1, 33 * GIB)));
    }

    #[test]
    fn impossible_requests_are_recognised() {
        let mut occ = machine(4);
        assert!(!occ.could_ever_fit(&ResourceRequest::whole(5)));
        assert!(!occ.could_ever_fit(&ResourceRequest::shared(1, 81 * GIB)));
        assert!(occ.could_ever_fit(&ResourceRequest::shared(4, 80 * GIB)));
        assert_eq!(
            occ.hold(&[7], &ResourceRequest::whole(1)),
            Err(PlacementError::NoSuchGpu(7))
        );
    }
}
