//! Reservations of GPUs for a window of time (`baton reserve`, issue 19): some GPUs kept for a
//! named reservation from its start to its end, as Slurm's advance reservations and gflow's
//! time windows keep them. Pure rules over plain data; the scheduling pass
//! ([`crate::scheduler`]) applies them:
//!
//! - A job outside the reservation may take its GPUs before the window only if, by its own time
//!   limit, it ends before the window starts (backfill into the window); a job without a time
//!   limit never takes them while the reservation stands.
//! - A job submitted into the reservation (`--reservation NAME`) waits for the window, runs
//!   only on its GPUs, and must end by the window's end: it starts with that end as its limit.
//!
//! A reservation's GPUs are chosen when it is made ([`choose_gpus`]): GPUs no other reservation
//! holds for any of the time, on one node, those whose jobs will have ended first.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{JobId, Millis, RunningJob};
use crate::placement::Occupancy;

/// A reservation's window: its GPUs, kept from `start` until `end`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub id: u64,
    /// What `--reservation NAME` names.
    pub name: String,
    pub gpus: Vec<u32>,
    pub start: Millis,
    pub end: Millis,
}

impl Window {
    pub fn has_begun(&self, now: Millis) -> bool {
        now >= self.start
    }

    pub fn is_over(&self, now: Millis) -> bool {
        now >= self.end
    }

    /// Whether a job outside the reservation that takes its GPUs now and holds them until
    /// `ends_by` (`None`: no time limit, forever) would still hold them in the window.
    pub fn is_in_the_way(&self, now: Millis, ends_by: Option<Millis>) -> bool {
        !self.is_over(now) && ends_by.is_none_or(|end| end > self.start)
    }

    /// The GPUs of `cluster` that are not its own: what a job in it may not take.
    pub fn gpus_outside(&self, cluster: &Occupancy) -> Vec<u32> {
        cluster
            .gpus()
            .iter()
            .map(|g| g.index)
            .filter(|g| !self.gpus.contains(g))
            .collect()
    }

    /// Whether it shares any of the time from `start` to `end`.
    pub fn overlaps(&self, start: Millis, end: Millis) -> bool {
        self.start < end && start < self.end
    }
}

/// The GPUs a job outside every reservation may not take, if it would hold them until
/// `ends_by`.
pub fn kept_from<'a>(
    windows: impl IntoIterator<Item = &'a Window>,
    now: Millis,
    ends_by: Option<Millis>,
) -> Vec<u32> {
    let mut out: Vec<u32> = windows
        .into_iter()
        .filter(|w| w.is_in_the_way(now, ends_by))
        .flat_map(|w| w.gpus.iter().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// GPUs chosen for a new reservation, and the running jobs that may still hold some of them
/// when it starts (no time limit, or one past the start): the reservation gets those GPUs only
/// when they end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub gpus: Vec<u32>,
    pub in_the_way: Vec<(JobId, u32)>,
}

/// Why a reservation cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("a reservation needs at least one GPU")]
    NoGpus,
    #[error("it ends before it starts")]
    EndsBeforeStart,
    #[error("{}", too_few(*.count, *.spare, *.total, .overlapping))]
    TooFew {
        count: u32,
        /// The most GPUs of one node that no overlapping reservation holds.
        spare: u32,
        /// The machine's (or cluster's) GPUs.
        total: u32,
        /// The names of the reservations that hold GPUs for some of that time.
        overlapping: Vec<String>,
    },
}

fn too_few(count: u32, spare: u32, total: u32, overlapping: &[String]) -> String {
    let plural = |n: u32| if n == 1 { "" } else { "s" };
    let mut text = format!(
        "it asks for {count} GPU{} but only {spare} {} free of other reservations for that time \
         on one node (of {total} GPU{})",
        plural(count),
        if spare == 1 { "is" } else { "are" },
        plural(total),
    );
    if !overlapping.is_empty() {
        text.push_str(&format!("; overlapping: {}", overlapping.join(", ")));
    }
    text
}

/// Chooses `count` GPUs on one node for a reservation from `start` to `end`: none that another
/// reservation holds for any of that time, and, of those, the ones whose running jobs (in
/// `holders`) are sure to have ended by `start` first, then the lowest indices. The node with
/// the fewest GPUs in the way wins, then the lowest id.
pub fn choose_gpus(
    cluster: &Occupancy,
    windows: &[Window],
    holders: &[RunningJob],
    count: u32,
    start: Millis,
    end: Millis,
) -> Result<Chosen, WindowError> {
    if count == 0 {
        return Err(WindowError::NoGpus);
    }
    if end <= start {
        return Err(WindowError::EndsBeforeStart);
    }
    let overlapping: Vec<&Window> = windows.iter().filter(|w| w.overlaps(start, end)).collect();
    let taken: Vec<u32> = overlapping
        .iter()
        .flat_map(|w| w.gpus.iter().copied())
        .collect();
    // Who holds each GPU past the start.
    let mut in_the_way: BTreeMap<u32, JobId> = BTreeMap::new();
    for h in holders {
        if h.ends_by.is_none_or(|e| e > start) {
            for &g in &h.gpus {
                in_the_way.entry(g).or_insert(h.id);
            }
        }
    }
    let mut by_node: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for g in cluster.gpus() {
        if !taken.contains(&g.index) {
            by_node.entry(g.node).or_default().push(g.index);
        }
    }
    let mut best: Option<Chosen> = None;
    for (_, mut free) in by_node.iter().map(|(n, f)| (n, f.clone())) {
        if free.len() < count as usize {
            continue;
        }
        free.sort_by_key(|g| (in_the_way.contains_key(g), *g));
        free.truncate(count as usize);
        free.sort_unstable();
        let blocking: Vec<(JobId, u32)> = free
            .iter()
            .filter_map(|g| in_the_way.get(g).map(|j| (*j, *g)))
            .collect();
        if best
            .as_ref()
            .is_none_or(|b| blocking.len() < b.in_the_way.len())
        {
            best = Some(Chosen {
                gpus: free,
                in_the_way: blocking,
            });
        }
    }
    best.ok_or_else(|| WindowError::TooFew {
        count,
        spare: by_node.values().map(|f| f.len() as u32).max().unwrap_or(0),
        total: cluster.gpus().len() as u32,
        overlapping: overlapping.iter().map(|w| w.name.clone()).collect(),
    })
}

/// GPU indices as people read them: `0-3`, `0,2,5-7`.
pub struct GpuList<'a>(pub &'a [u32]);

impl fmt::Display for GpuList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut gpus = self.0.to_vec();
        gpus.sort_unstable();
        let mut first = true;
        let mut i = 0;
        while i < gpus.len() {
            let mut j = i;
            while j + 1 < gpus.len() && gpus[j + 1] == gpus[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j > i {
                write!(f, "{}-{}", gpus[i], gpus[j])?;
            } else {
                write!(f, "{}", gpus[i])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Gpu, ResourceRequest};

    const H: Millis = 3_600_000;

    fn cluster(nodes: &[u32]) -> Occupancy {
        let mut gpus = Vec::new();
        let mut index = 0;
        for (node, &n) in nodes.iter().enumerate() {
            for _ in 0..n {
                gpus.push(Gpu {
                    index,
                    memory_total: 80 << 30,
                    node: node as u32,
                });
                index += 1;
            }
        }
        Occupancy::new(&gpus)
    }

    fn window(id: u64, gpus: &[u32], start: Millis, end: Millis) -> Window {
        Window {
            id,
            name: format!("w{id}"),
            gpus: gpus.to_vec(),
            start,
            end,
        }
    }

    fn holder(id: u64, gpus: &[u32], ends_by: Option<Millis>) -> RunningJob {
        RunningJob {
            id: JobId(id),
            gpus: gpus.to_vec(),
            request: ResourceRequest::whole(gpus.len() as u32),
            ends_by,
        }
    }

    #[test]
    fn a_job_is_in_the_way_unless_it_ends_before_the_window() {
        let w = window(1, &[0], 10 * H, 12 * H);
        assert!(!w.is_in_the_way(0, Some(10 * H)));
        assert!(w.is_in_the_way(0, Some(10 * H + 1)));
        assert!(w.is_in_the_way(0, None));
        // During the window, anything is; after it, nothing.
        assert!(w.is_in_the_way(11 * H, Some(11 * H + 1)));
        assert!(!w.is_in_the_way(12 * H, None));
        assert_eq!(
            kept_from(&[w.clone(), window(2, &[3, 1], 20 * H, 21 * H)], 0, None),
            vec![0, 1, 3]
        );
        assert_eq!(kept_from(&[w], 0, Some(H)), Vec::<u32>::new());
    }

    #[test]
    fn gpus_are_chosen_free_of_overlapping_reservations_and_running_jobs_first() {
        let c = cluster(&[4]);
        let others = [window(1, &[0, 1], 10 * H, 12 * H)];
        // GPU 2 is held past the start; GPU 3 by a job that ends before it.
        let holders = [holder(7, &[2], None), holder(8, &[3], Some(9 * H))];
        let chosen = choose_gpus(&c, &others, &holders, 1, 11 * H, 13 * H).unwrap();
        assert_eq!(chosen.gpus, vec![3]);
        assert!(chosen.in_the_way.is_empty());
        let chosen = choose_gpus(&c, &others, &holders, 2, 11 * H, 13 * H).unwrap();
        assert_eq!(chosen.gpus, vec![2, 3]);
        assert_eq!(chosen.in_the_way, vec![(JobId(7), 2)]);
        // Not overlapping in time: GPUs 0 and 1 are free again.
        let chosen = choose_gpus(&c, &others, &holders, 2, 12 * H, 13 * H).unwrap();
        assert_eq!(chosen.gpus, vec![0, 1]);
        let err = choose_gpus(&c, &others, &holders, 3, 11 * H, 13 * H).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it asks for 3 GPUs but only 2 are free of other reservations for that time on one \
             node (of 4 GPUs); overlapping: w1"
        );
    }

    #[test]
    fn a_reservation_keeps_to_one_node_the_one_least_in_the_way() {
        let c = cluster(&[2, 2]);
        let holders = [holder(1, &[0], None)];
        let chosen = choose_gpus(&c, &[], &holders, 2, H, 2 * H).unwrap();
        assert_eq!(chosen.gpus, vec![2, 3]);
        assert!(matches!(
            choose_gpus(&c, &[], &[], 3, H, 2 * H),
            Err(WindowError::TooFew { spare: 2, .. })
        ));
        assert_eq!(
            choose_gpus(&c, &[], &[], 1, H, H),
            Err(WindowError::EndsBeforeStart)
        );
        assert_eq!(
            choose_gpus(&c, &[], &[], 0, H, 2 * H),
            Err(WindowError::NoGpus)
        );
    }

    #[test]
    fn gpu_lists_read_as_ranges() {
        assert_eq!(GpuList(&[3, 0, 1, 2]).to_string(), "0-3");
        assert_eq!(GpuList(&[0, 2, 5, 6, 7]).to_string(), "0,2,5-7");
        assert_eq!(GpuList(&[]).to_string(), "");
    }
}
