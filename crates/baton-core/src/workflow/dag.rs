//! The dependency graph of a workflow: topological order, neighbours, cycle reports and the
//! critical path.
//!
//! It works on plain data ([`TaskNode`]: a name and the indices of the tasks it runs after) so
//! that the scheduler, the simulator and the benchmarks can build graphs of their own, not only
//! from parsed files. Edges point the way work flows: from a task to the tasks that run after it.
//! Every answer is deterministic: ties always go to the task written (or generated) first.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::Millis;

/// One task as the graph sees it. `after` holds indices into the same slice; repeats are
/// ignored, and an index out of range is a programming error (it panics).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskNode {
    pub name: String,
    pub after: Vec<usize>,
}

/// A dependency cycle, in the direction work would flow, starting at its earliest-written task
/// and not repeating it at the end: `[prep, train, eval]` is `prep -> train -> eval -> prep`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("dependency cycle: {}", self.names_closed().join(" -> "))]
pub struct Cycle {
    pub tasks: Vec<usize>,
    pub names: Vec<String>,
}

impl Cycle {
    /// The names with the first repeated at the end, as the cycle is printed.
    pub fn names_closed(&self) -> Vec<String> {
        let mut names = self.names.clone();
        names.extend(self.names.first().cloned());
        names
    }
}

/// A validated acyclic graph with both directions of every edge and a topological order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dag {
    names: Vec<String>,
    predecessors: Vec<Vec<usize>>,
    successors: Vec<Vec<usize>>,
    order: Vec<usize>,
}

/// The result of [`Dag::critical_path`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriticalPath {
    /// For each task: its own predicted duration plus the longest chain of successors after it,
    /// i.e. the least time from its start until everything that depends on it can be done.
    pub remaining_ms: Vec<Millis>,
    /// The longest chain from a task without predecessors to one without successors.
    pub path: Vec<usize>,
    pub names: Vec<String>,
    /// The length of that chain: a lower bound on the workflow's run time.
    pub total_ms: Millis,
}

impl Dag {
    /// Builds the graph, or reports one of its cycles (a task that runs after itself is a cycle
    /// of one).
    pub fn new(nodes: &[TaskNode]) -> Result<Dag, Cycle> {
        let n = nodes.len();
        let mut predecessors: Vec<Vec<usize>> = nodes
            .iter()
            .map(|node| {
                let mut after = node.after.clone();
                after.sort_unstable();
                after.dedup();
                after
            })
            .collect();
        let mut successors = vec![Vec::new(); n];
        for (task, after) in predecessors.iter_mut().enumerate() {
            for &before in after.iter() {
                successors[before].push(task);
            }
        }
        // Built in increasing `task` order, so every successor list is already sorted.
        let names: Vec<String> = nodes.iter().map(|node| node.name.clone()).collect();
        match kahn(&predecessors, &successors) {
            Ok(order) => Ok(Dag {
                names,
                predecessors,
                successors,
                order,
            }),
            Err(stuck) => {
                let tasks = find_cycle(&successors, &stuck);
                let names = tasks.iter().map(|&t| names[t].clone()).collect();
                Err(Cycle { tasks, names })
            }
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, task: usize) -> &str {
        &self.names[task]
    }

    /// The tasks `task` runs after, in increasing index order.
    pub fn predecessors(&self, task: usize) -> &[usize] {
        &self.predecessors[task]
    }

    /// The tasks that run after `task`, in increasing index order.
    pub fn successors(&self, task: usize) -> &[usize] {
        &self.successors[task]
    }

    /// Every task after all of its predecessors; among the tasks ready at any point, the one
    /// written first comes first, so a workflow written in a sensible order keeps it.
    pub fn topological_order(&self) -> &[usize] {
        &self.order
    }

    /// For each task, its duration plus the longest remaining chain after it (see
    /// [`CriticalPath::remaining_ms`]). `durations_ms[i]` is task `i`'s predicted run time;
    /// negative values count as 0. Sums saturate instead of overflowing.
    pub fn remaining_ms(&self, durations_ms: &[Millis]) -> Vec<Millis> {
        assert_eq!(durations_ms.len(), self.len(), "one duration per task");
        let mut remaining = vec![0; self.len()];
        // Successors come later in topological order, so walking it backwards sees them first.
        for &task in self.order.iter().rev() {
            let after = self.successors[task]
                .iter()
                .map(|&s| remaining[s])
                .max()
                .unwrap_or(0);
            remaining[task] = durations_ms[task].max(0).saturating_add(after);
        }
        remaining
    }

    /// The longest chain of predicted run times through the graph. Among equally long chains,
    /// the one through earlier-written tasks.
    pub fn critical_path(&self, durations_ms: &[Millis]) -> CriticalPath {
        let remaining_ms = self.remaining_ms(durations_ms);
        // The longest chain starts at the task with the most remaining time (a task without
        // predecessors: any predecessor would have at least as much), and each step goes to a
        // successor with the most remaining time.
        let longest = |candidates: &mut dyn Iterator<Item = usize>| {
            candidates.max_by_key(|&t| (remaining_ms[t], Reverse(t)))
        };
        let mut path = Vec::new();
        let mut next = longest(&mut (0..self.len()).filter(|&t| self.predecessors[t].is_empty()));
        while let Some(task) = next {
            path.push(task);
            next = longest(&mut self.successors[task].iter().copied());
        }
        let total_ms = path.first().map_or(0, |&t| remaining_ms[t]);
        let names = path.iter().map(|&t| self.names[t].clone()).collect();
        CriticalPath {
            remaining_ms,
            path,
            names,
            total_ms,
        }
    }
}

impl fmt::Display for Dag {
    /// One line per task in topological order: `train <- prep, data`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &task in &self.order {
            write!(f, "{}", self.names[task])?;
            let after = &self.predecessors[task];
            if !after.is_empty() {
                let names: Vec<&str> = after.iter().map(|&p| self.names[p].as_str()).collect();
                write!(f, " <- {}", names.join(", "))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Kahn's algorithm with the ready set ordered by index. `Err` holds the tasks that never became
/// ready: each is on a cycle or downstream of one.
fn kahn(predecessors: &[Vec<usize>], successors: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let mut waiting_on: Vec<usize> = predecessors.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Reverse<usize>> = (0..predecessors.len())
        .filter(|&t| waiting_on[t] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(predecessors.len());
    while let Some(Reverse(task)) = ready.pop() {
        order.push(task);
        for &next in &successors[task] {
            waiting_on[next] -= 1;
            if waiting_on[next] == 0 {
                ready.push(Reverse(next));
            }
        }
    }
    if order.len() == predecessors.len() {
        Ok(order)
    } else {
        Err((0..predecessors.len())
            .filter(|&t| waiting_on[t] > 0)
            .collect())
    }
}

/// A cycle among `stuck` (tasks Kahn's algorithm could not order, which always contain one):
/// depth-first search along successor edges from each stuck task in index order; the first edge
/// back to a task still on the search path closes a cycle, and the part of the path from that
/// task on is the cycle (the part before it is a branch leading into it, not part of it).
/// Iterative, so a long generated chain cannot overflow the stack.
fn find_cycle(successors: &[Vec<usize>], stuck: &[usize]) -> Vec<usize> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Unseen,
        OnPath,
        Done,
    }
    let mut is_stuck = vec![false; successors.len()];
    for &t in stuck {
        is_stuck[t] = true;
    }
    let mut mark = vec![Mark::Unseen; successors.len()];
    for &root in stuck {
        if mark[root] != Mark::Unseen {
            continue;
        }
        // The search path, each task with the position of the next successor to try.
        let mut path: Vec<(usize, usize)> = vec![(root, 0)];
        mark[root] = Mark::OnPath;
        while let Some(top) = path.last_mut() {
            let (task, next) = *top;
            let succs = &successors[task];
            let Some(offset) = succs[next..].iter().position(|&s| is_stuck[s]) else {
                mark[task] = Mark::Done;
                path.pop();
                continue;
            };
            let succ = succs[next + offset];
            top.1 = next + offset + 1;
            match mark[succ] {
                Mark::OnPath => {
                    let start = path.iter().position(|&(t, _)| t == succ).unwrap_or(0);
                    let mut cycle: Vec<usize> = path[start..].iter().map(|&(t, _)| t).collect();
                    let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                    cycle.rotate_left(first);
                    return cycle;
                }
                Mark::Unseen => {
                    mark[succ] = Mark::OnPath;
                    path.push((succ, 0));
                }
                Mark::Done => {}
            }
        }
    }
    unreachable!("Kahn's algorithm left tasks unordered, so there is a cycle among them")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Nodes `t0, t1, ...` from their `after` lists.
    fn nodes(after: &[&[usize]]) -> Vec<TaskNode> {
        after
            .iter()
            .enumerate()
            .map(|(i, a)| TaskNode {
                name: format!("t{i}"),
                after: a.to_vec(),
            })
            .collect()
    }

    fn cycle_of(after: &[&[usize]]) -> String {
        Dag::new(&nodes(after)).unwrap_err().to_string()
    }

    #[test]
    fn order_is_stable_by_index() {
        // t0 and t2 are ready at once; t1 waits for t2.
        let dag = Dag::new(&nodes(&[&[], &[2], &[], &[0, 1]])).unwrap();
        assert_eq!(dag.topological_order(), [0, 2, 1, 3]);
        assert_eq!(dag.predecessors(3), [0, 1]);
        assert_eq!(dag.successors(2), [1]);
        assert_eq!(dag.successors(3), [] as [usize; 0]);
        assert_eq!(dag.to_string(), "t0\nt2\nt1 <- t2\nt3 <- t0, t1\n");
    }

    #[test]
    fn repeated_edges_count_once() {
        let dag = Dag::new(&nodes(&[&[], &[0, 0]])).unwrap();
        assert_eq!(dag.predecessors(1), [0]);
        assert_eq!(dag.successors(0), [1]);
    }

    #[test]
    fn cycles_are_reported_as_cycles() {
        assert_eq!(cycle_of(&[&[0]]), "dependency cycle: t0 -> t0");
        assert_eq!(cycle_of(&[&[1], &[0]]), "dependency cycle: t0 -> t1 -> t0");
        // t0 after t2, t1 after t0, t2 after t1: work would flow t0 -> t1 -> t2 -> t0.
        assert_eq!(
            cycle_of(&[&[2], &[0], &[1]]),
            "dependency cycle: t0 -> t1 -> t2 -> t0"
        );
        // Written out of order, it still starts at the earliest-written task.
        assert_eq!(
            cycle_of(&[&[3], &[4], &[], &[1], &[0]]),
            "dependency cycle: t0 -> t4 -> t1 -> t3 -> t0"
        );
    }

    #[test]
    fn a_cycle_behind_a_side_branch_excludes_the_branch() {
        // t0 -> t1 -> t2 -> t3 -> t4 -> t2, and t5 hangs off the cycle.
        let after: &[&[usize]] = &[&[], &[0], &[1, 4], &[2], &[3], &[3]];
        let cycle = Dag::new(&nodes(after)).unwrap_err();
        assert_eq!(cycle.tasks, [2, 3, 4]);
        assert_eq!(cycle.to_string(), "dependency cycle: t2 -> t3 -> t4 -> t2");
    }

    #[test]
    fn a_cycle_entered_at_its_later_task_still_starts_at_its_earliest() {
        // t0 is stuck behind the cycle t1 <-> t2 and leads into the cycle t3 <-> t4 through t4,
        // so the search walks t0 -> t4 -> t3 -> t4.
        let after: &[&[usize]] = &[&[2], &[2], &[1], &[4], &[0, 3]];
        assert_eq!(cycle_of(after), "dependency cycle: t3 -> t4 -> t3");
    }

    #[test]
    fn critical_path_of_a_diamond() {
        // t0 fans out to t1 (5 ms) and t2 (20 ms), which join in t3.
        let dag = Dag::new(&nodes(&[&[], &[0], &[0], &[1, 2]])).unwrap();
        let cp = dag.critical_path(&[10, 5, 20, 1]);
        assert_eq!(cp.remaining_ms, [31, 6, 21, 1]);
        assert_eq!(cp.path, [0, 2, 3]);
        assert_eq!(cp.names, ["t0", "t2", "t3"]);
        assert_eq!(cp.total_ms, 31);
        // Equal branches: the earlier-written one.
        assert_eq!(dag.critical_path(&[10, 7, 7, 1]).path, [0, 1, 3]);
    }

    #[test]
    fn critical_path_of_a_chain_and_of_parallel_chains() {
        let dag = Dag::new(&nodes(&[&[], &[0], &[1]])).unwrap();
        let cp = dag.critical_path(&[1000, 2000, 3000]);
        assert_eq!(cp.remaining_ms, [6000, 5000, 3000]);
        assert_eq!(cp.path, [0, 1, 2]);
        // Two independent chains t0 -> t1 and t2 -> t3: the longer one, though written second.
        let dag = Dag::new(&nodes(&[&[], &[0], &[], &[2]])).unwrap();
        let cp = dag.critical_path(&[1, 1, 5, 5]);
        assert_eq!((cp.path, cp.total_ms), (vec![2, 3], 10));
        assert!(Dag::new(&[]).unwrap().critical_path(&[]).path.is_empty());
    }

    #[test]
    fn durations_are_clamped_and_saturate() {
        let dag = Dag::new(&nodes(&[&[], &[0]])).unwrap();
        assert_eq!(dag.remaining_ms(&[-5, 3]), [3, 3]);
        assert_eq!(dag.remaining_ms(&[Millis::MAX, 3]), [Millis::MAX, 3]);
    }

    /// A random DAG: edges only go from an earlier to a later position of a random permutation,
    /// so indices are not already in topological order.
    fn random_dag() -> impl Strategy<Value = (Vec<TaskNode>, Vec<Millis>)> {
        (1usize..14)
            .prop_flat_map(|n| {
                (
                    Just((0..n).collect::<Vec<usize>>()).prop_shuffle(),
                    proptest::collection::vec(any::<bool>(), n * n),
                    proptest::collection::vec(0i64..10_000, n),
                )
            })
            .prop_map(|(perm, edges, durations)| {
                let n = perm.len();
                let mut nodes = nodes(&vec![&[][..]; n]);
                for a in 0..n {
                    for b in a + 1..n {
                        if edges[a * n + b] {
                            // perm[a] runs before perm[b]
                            nodes[perm[b]].after.push(perm[a]);
                        }
                    }
                }
                (nodes, durations)
            })
    }

    /// Whether any task can reach itself, by transitive closure (Floyd–Warshall on booleans).
    fn has_cycle_brute_force(nodes: &[TaskNode]) -> bool {
        let n = nodes.len();
        let mut reach = vec![vec![false; n]; n];
        for (task, node) in nodes.iter().enumerate() {
            for &before in &node.after {
                reach[before][task] = true;
            }
        }
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    if reach[i][k] && reach[k][j] {
                        reach[i][j] = true;
                    }
                }
            }
        }
        (0..n).any(|i| reach[i][i])
    }

    proptest! {
        #[test]
        fn topological_order_respects_every_edge((nodes, _) in random_dag()) {
            let dag = Dag::new(&nodes).unwrap();
            let order = dag.topological_order();
            let mut position = vec![usize::MAX; nodes.len()];
            for (pos, &task) in order.iter().enumerate() {
                prop_assert_eq!(position[task], usize::MAX, "task {} listed twice", task);
                position[task] = pos;
            }
            for (task, node) in nodes.iter().enumerate() {
                for &before in &node.after {
                    prop_assert!(position[before] < position[task]);
                    prop_assert!(dag.successors(before).contains(&task));
                    prop_assert!(dag.predecessors(task).contains(&before));
                }
            }
        }

        #[test]
        fn cycle_detection_agrees_with_brute_force(
            n in 1usize..9,
            edges in proptest::collection::vec((0usize..9, 0usize..9), 0..16),
        ) {
            let mut graph = nodes(&vec![&[][..]; n]);
            for (a, b) in edges {
                graph[b % n].after.push(a % n);
            }
            match Dag::new(&graph) {
                Ok(_) => prop_assert!(!has_cycle_brute_force(&graph)),
                Err(cycle) => {
                    prop_assert!(has_cycle_brute_force(&graph));
                    // A real cycle: distinct tasks, each running after the one before it,
                    // starting with the earliest-written.
                    let tasks = &cycle.tasks;
                    let mut distinct = tasks.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    prop_assert_eq!(distinct.len(), tasks.len());
                    prop_assert_eq!(Some(&tasks[0]), tasks.iter().min());
                    for i in 0..tasks.len() {
                        let (from, to) = (tasks[i], tasks[(i + 1) % tasks.len()]);
                        prop_assert!(graph[to].after.contains(&from), "no edge {} -> {}", from, to);
                    }
                }
            }
        }

        #[test]
        fn remaining_covers_every_successor((nodes, durations) in random_dag()) {
            let dag = Dag::new(&nodes).unwrap();
            let cp = dag.critical_path(&durations);
            let rem = &cp.remaining_ms;
            for task in 0..nodes.len() {
                prop_assert!(rem[task] >= durations[task]);
                for &s in dag.successors(task) {
                    prop_assert!(rem[task] >= rem[s] + durations[task]);
                }
                // ...and is no longer than needed: its own time plus one successor's remainder.
                let longest_after = dag.successors(task).iter().map(|&s| rem[s]).max().unwrap_or(0);
                prop_assert_eq!(rem[task], durations[task] + longest_after);
            }
            // The critical path is a real chain, from a source to a sink, as long as the longest
            // remaining time.
            let path = &cp.path;
            prop_assert!(dag.predecessors(path[0]).is_empty());
            prop_assert!(dag.successors(*path.last().unwrap()).is_empty());
            for pair in path.windows(2) {
                prop_assert!(dag.successors(pair[0]).contains(&pair[1]));
            }
            let sum: Millis = path.iter().map(|&t| durations[t]).sum();
            prop_assert_eq!(sum, cp.total_ms);
            prop_assert_eq!(Some(&cp.total_ms), rem.iter().max());
        }
    }
}
