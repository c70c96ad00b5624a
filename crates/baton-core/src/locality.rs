//! Data locality: which node a queued job should prefer, given where the jobs it shares data
//! with ran.
//!
//! A workflow task usually reads what its predecessors wrote to local disk, so running it on
//! their node saves a copy. A task may also name tasks to share a node with (`colocate_with`).
//! The preference is soft: the scheduler places the job on the preferred node when the job fits
//! there now and elsewhere otherwise, because a task that waits for "its" node can wait forever.

use std::collections::HashMap;

use crate::model::JobId;

/// The node to prefer for a job: the node most of its `colocate` partners are on, or, when none
/// of them has a node yet, the node most of its `deps` ran on. Ties go to the partner listed
/// first. `node_of` says where a job runs or ran (`None`: not placed, or placed on no GPU).
pub fn preferred_node(
    colocate: &[JobId],
    deps: &[JobId],
    node_of: impl Fn(JobId) -> Option<u32>,
) -> Option<u32> {
    most_common(colocate.iter().filter_map(|&j| node_of(j)))
        .or_else(|| most_common(deps.iter().filter_map(|&j| node_of(j))))
}

/// The value seen most often; among equals, the one seen first.
fn most_common(nodes: impl Iterator<Item = u32>) -> Option<u32> {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for node in nodes {
        match counts.iter_mut().find(|(n, _)| *n == node) {
            Some((_, c)) => *c += 1,
            None => counts.push((node, 1)),
        }
    }
    // `max_by_key` keeps the last of equal maxima; scanning in reverse makes it the first.
    counts
        .into_iter()
        .rev()
        .max_by_key(|&(_, c)| c)
        .map(|(n, _)| n)
}

/// For a set of dependency edges (predecessor, successor), the share (0 to 1) whose two jobs ran
/// on the same node, counting only edges whose both ends have a node. `None` if no edge counts.
pub fn local_share(edges: &[(JobId, JobId)], nodes: &HashMap<JobId, u32>) -> Option<f64> {
    let (mut local, mut counted) = (0usize, 0usize);
    for (a, b) in edges {
        if let (Some(x), Some(y)) = (nodes.get(a), nodes.get(b)) {
            counted += 1;
            local += usize::from(x == y);
        }
    }
    (counted > 0).then(|| local as f64 / counted as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pairs: &[(u64, u32)]) -> impl Fn(JobId) -> Option<u32> {
        let map: HashMap<JobId, u32> = pairs.iter().map(|&(j, n)| (JobId(j), n)).collect();
        move |j| map.get(&j).copied()
    }

    fn ids(v: &[u64]) -> Vec<JobId> {
        v.iter().map(|&j| JobId(j)).collect()
    }

    #[test]
    fn no_partner_placed_means_no_preference() {
        assert_eq!(preferred_node(&ids(&[1]), &ids(&[2]), at(&[])), None);
        assert_eq!(preferred_node(&[], &[], at(&[(1, 3)])), None);
    }

    #[test]
    fn the_majority_of_predecessors_wins() {
        let nodes = at(&[(1, 4), (2, 7), (3, 7)]);
        assert_eq!(preferred_node(&[], &ids(&[1, 2, 3]), nodes), Some(7));
    }

    #[test]
    fn ties_go_to_the_first_listed() {
        let nodes = at(&[(1, 4), (2, 7)]);
        assert_eq!(preferred_node(&[], &ids(&[1, 2]), &nodes), Some(4));
        assert_eq!(preferred_node(&[], &ids(&[2, 1]), &nodes), Some(7));
    }

    #[test]
    fn colocate_partners_outrank_predecessors() {
        let nodes = at(&[(1, 4), (2, 4), (9, 2)]);
        assert_eq!(preferred_node(&ids(&[9]), &ids(&[1, 2]), &nodes), Some(2));
        // A partner not placed yet: the predecessors decide.
        assert_eq!(preferred_node(&ids(&[8]), &ids(&[1, 2]), &nodes), Some(4));
    }

    #[test]
    fn local_share_counts_edges_with_both_ends_placed() {
        let nodes: HashMap<JobId, u32> = [(JobId(1), 0), (JobId(2), 0), (JobId(3), 1)].into();
        let edges = [
            (JobId(1), JobId(2)), // local
            (JobId(1), JobId(3)), // remote
            (JobId(1), JobId(4)), // 4 never ran: not counted
        ];
        assert_eq!(local_share(&edges, &nodes), Some(0.5));
        assert_eq!(local_share(&edges[2..], &nodes), None);
    }
}
