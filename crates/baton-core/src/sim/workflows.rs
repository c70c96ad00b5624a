//! Synthetic multi-task workflows, and what two ways of scheduling them cost.
//!
//! [`generate`] makes a seeded, deterministic list of workflows shaped like a training pipeline:
//! `prep` (1 GPU, 5-15 min) → 1 to 3 `train` tasks in parallel (1, 2, 4 or 8 GPUs within a node,
//! 20-120 min) → `eval` (1 GPU, 5-20 min). Arrivals are a Poisson process whose rate offers the
//! cluster `load` times its GPU capacity in task work.
//!
//! [`run_workflows`] replays them through [`crate::scheduler::plan_with`] (EASY backfill, as the
//! daemon runs) in one of these [`Mode`]s:
//!
//! - **atomic**: a workflow's tasks are queued together as a gang with their dependencies. The
//!   pass admits the gang only when every task fits at once, reserves each task's GPUs, starts
//!   tasks as their dependencies end, and each task gives its GPUs back when it ends. GPUs held
//!   idle: a task's reserved GPUs from admission until it starts.
//! - **chained**: baton's non-atomic workflows. Each task is queued when its predecessors have
//!   ended, prefers the node they ran on ([`crate::locality`]), and gives its GPUs back when it
//!   ends. Nothing is held idle and nothing deadlocks, but a task may wait behind other work.
//! - **chained-no-locality**: the same, placed by best fit alone: what locality buys.
//! - **greedy**: each task is queued alone when its predecessors have ended (no gang; in the
//!   queue at its workflow's arrival, as the gang would be), and the GPUs it gets stay with its
//!   workflow until the whole workflow ends, as a workflow runner that grabs its GPUs task by
//!   task and gives them back at the end does. GPUs held idle: a task's
//!   GPUs from its end until its workflow's end. Two workflows that each hold part of the
//!   cluster while their next task waits for the rest deadlock.
//!
//! Every mode counts the dependency edges whose two tasks ran on the same node (`local_edges`):
//! the data a task leaves on local disk is there for its successor.
//!
//! A **deadlock** is detected when a pass starts nothing, no task is running and tasks are
//! queued: nothing can change any more, since held GPUs come back only when a workflow ends. A
//! watchdog then breaks it, generously to the greedy baseline: the youngest workflows holding
//! GPUs give them back (their finished work is kept), youngest first, until the oldest waiting
//! task fits. Every deadlock is counted; the run always finishes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use serde::{Deserialize, Serialize};

use crate::model::{
    DepKind, Dependency, JobId, JobState, Millis, PendingJob, ResourceRequest, RunningJob,
};
use crate::placement::Occupancy;
use crate::scheduler::{PlanOptions, plan_with};

use super::metrics::{mean, percentile, round, secs};
use super::rng::Rng;
use super::{Cluster, SimError, check_factor, time_limit};

/// One task of a synthetic workflow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticTask {
    pub name: String,
    /// Whole GPUs, on one node.
    pub gpus: u32,
    /// How long it runs.
    pub duration: Millis,
    /// Indices of the tasks it waits for, in the same workflow.
    pub after: Vec<usize>,
}

/// A synthetic workflow: its arrival and its tasks (predecessors before successors).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyntheticWorkflow {
    pub arrival: Millis,
    pub tasks: Vec<SyntheticTask>,
}

impl SyntheticWorkflow {
    /// GPU-milliseconds of work: Σ GPUs × duration.
    pub fn work(&self) -> f64 {
        self.tasks
            .iter()
            .map(|t| f64::from(t.gpus) * t.duration as f64)
            .sum()
    }
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GeneratorOptions {
    pub workflows: usize,
    pub seed: u64,
    pub cluster: Cluster,
    /// Offered work as a share of the cluster's GPU capacity (1.0: as much work as GPUs).
    pub load: f64,
}

/// The default offered load: high enough that workflows queue for GPUs.
pub const DEFAULT_LOAD: f64 = 0.9;

/// Generates `workflows` workflows; the same options give the same workflows.
pub fn generate(options: &GeneratorOptions) -> Result<Vec<SyntheticWorkflow>, SimError> {
    options.cluster.check()?;
    if !(options.load.is_finite() && options.load > 0.0) {
        return Err(SimError::Options(format!(
            "the load must be a positive number (got {})",
            options.load
        )));
    }
    let mut rng = Rng::new(options.seed);
    let empty = Occupancy::new(&options.cluster.gpus());
    let per_node = options.cluster.gpus_per_node;
    let sizes: Vec<u32> = [1, 2, 4, 8]
        .into_iter()
        .filter(|&g| g <= per_node)
        .collect();
    let mut specs = Vec::with_capacity(options.workflows);
    for _ in 0..options.workflows {
        let minutes =
            |rng: &mut Rng, lo: u64, hi: u64| rng.range(lo * 60, hi * 60) as Millis * 1000;
        let mut tasks = vec![SyntheticTask {
            name: "prep".into(),
            gpus: 1,
            duration: minutes(&mut rng, 5, 15),
            after: vec![],
        }];
        let trains = rng.range(1, 3) as usize;
        for t in 0..trains {
            // 1 GPU 30 %, 2 GPUs 30 %, 4 GPUs 25 %, 8 GPUs 15 % (within what a node has).
            let roll = rng.range(0, 99);
            let want = match roll {
                0..=29 => 1,
                30..=59 => 2,
                60..=84 => 4,
                _ => 8,
            };
            let gpus = sizes
                .iter()
                .copied()
                .filter(|&g| g <= want)
                .max()
                .unwrap_or(1);
            tasks.push(SyntheticTask {
                name: format!("train{}", t + 1),
                gpus,
                duration: minutes(&mut rng, 20, 120),
                after: vec![0],
            });
        }
        tasks.push(SyntheticTask {
            name: "eval".into(),
            gpus: 1,
            duration: minutes(&mut rng, 5, 20),
            after: (1..=trains).collect(),
        });
        // Every workflow must fit the empty cluster whole (atomic admission needs it): shrink
        // the largest train task until it does.
        loop {
            let requests: Vec<ResourceRequest> = tasks
                .iter()
                .map(|t| ResourceRequest::whole(t.gpus))
                .collect();
            if empty.choose_all(&requests).is_some() {
                break;
            }
            let biggest = (1..tasks.len() - 1)
                .max_by_key(|&i| (tasks[i].gpus, Reverse(i)))
                .expect("at least one train task");
            if tasks[biggest].gpus == 1 {
                return Err(SimError::Options(format!(
                    "a {}-GPU cluster is too small for the synthetic workflows \
                     (they need at least 3 GPUs)",
                    options.cluster.total_gpus()
                )));
            }
            tasks[biggest].gpus /= 2;
        }
        specs.push(SyntheticWorkflow { arrival: 0, tasks });
    }
    // Poisson arrivals offering `load` of the capacity on average.
    let work = mean(
        &specs
            .iter()
            .map(SyntheticWorkflow::work)
            .collect::<Vec<_>>(),
    );
    let gap = work / (f64::from(options.cluster.total_gpus()) * options.load);
    let mut t = 0.0;
    for spec in &mut specs {
        spec.arrival = t as Millis;
        t += rng.exponential(gap);
    }
    Ok(specs)
}

/// How workflows are scheduled (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Atomic,
    Chained,
    #[serde(rename = "chained-no-locality")]
    ChainedNoLocality,
    Greedy,
}

impl Mode {
    pub const ALL: [Mode; 4] = [
        Mode::Atomic,
        Mode::Chained,
        Mode::ChainedNoLocality,
        Mode::Greedy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Atomic => "atomic",
            Mode::Chained => "chained",
            Mode::ChainedNoLocality => "chained-no-locality",
            Mode::Greedy => "greedy",
        }
    }

    /// Tasks are queued one by one as their predecessors end (not as one gang).
    fn one_by_one(self) -> bool {
        self != Mode::Atomic
    }

    /// A task's GPUs go back when it ends (not when its workflow ends).
    fn releases_at_task_end(self) -> bool {
        self != Mode::Greedy
    }
}

/// What one mode achieved. A workflow's completion time is its last task's end minus its
/// arrival; hours are GPU-hours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowMetrics {
    pub mode: Mode,
    pub workflows: usize,
    /// Workflows that completed (all of them unless deadlocks could not be broken).
    pub completed: usize,
    pub avg_completion_s: f64,
    pub p50_completion_s: f64,
    pub p99_completion_s: f64,
    /// From the first arrival to the last workflow's end.
    pub makespan_s: f64,
    /// GPU-hours spent running tasks.
    pub busy_gpu_h: f64,
    /// GPU-hours held by a workflow without a task running on them.
    pub idle_held_gpu_h: f64,
    /// Instants at which no progress was possible with work left.
    pub deadlocks: usize,
    /// Times a workflow was made to give back the GPUs it held, to break a deadlock.
    pub forced_releases: usize,
    /// Share (0 to 1) of dependency edges whose two tasks ran on the same node.
    pub local_edges: f64,
    pub passes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Task {
    /// Its predecessors have not all ended.
    Blocked,
    Queued,
    /// GPUs reserved by its workflow's admission, since then.
    Reserved(Millis),
    Running,
    /// Ended at this time.
    Done(Millis),
}

struct Flow {
    tasks: Vec<Task>,
    /// The job of each task in the current attempt.
    jobs: Vec<JobId>,
    done: usize,
    end: Option<Millis>,
}

struct Sim<'a> {
    specs: &'a [SyntheticWorkflow],
    mode: Mode,
    factor: f64,
    flows: Vec<Flow>,
    /// Job id − 1 → (workflow, task).
    owner: Vec<(usize, usize)>,
    gpus_of: HashMap<JobId, Vec<u32>>,
    /// The node each started job ran on.
    node_of: HashMap<JobId, u32>,
    pending: Vec<PendingJob>,
    running: Vec<RunningJob>,
    states: HashMap<JobId, JobState>,
    completions: BinaryHeap<Reverse<(Millis, JobId)>>,
    busy_ms: f64,
    idle_ms: f64,
}

impl Sim<'_> {
    fn new_job(&mut self, wf: usize, task: usize) -> JobId {
        self.owner.push((wf, task));
        JobId(self.owner.len() as u64)
    }

    fn arrive(&mut self, wf: usize) {
        let spec = &self.specs[wf];
        let n = spec.tasks.len();
        let jobs: Vec<JobId> = (0..n).map(|t| self.new_job(wf, t)).collect();
        self.flows[wf] = Flow {
            tasks: vec![Task::Blocked; n],
            jobs: jobs.clone(),
            done: 0,
            end: None,
        };
        for (t, task) in spec.tasks.iter().enumerate() {
            match self.mode {
                Mode::Atomic => {
                    self.states.insert(jobs[t], JobState::Queued);
                    let deps = task
                        .after
                        .iter()
                        .map(|&p| Dependency {
                            job: jobs[p],
                            kind: DepKind::Success,
                        })
                        .collect();
                    let mut job = PendingJob::new(
                        jobs[t],
                        0,
                        spec.arrival,
                        ResourceRequest::whole(task.gpus),
                        Some(time_limit(task.duration, self.factor)),
                        deps,
                    );
                    job.gang = Some(wf as u64);
                    self.pending.push(job);
                    self.flows[wf].tasks[t] = Task::Queued;
                }
                _ if task.after.is_empty() => self.queue_alone(wf, t),
                _ => {}
            }
        }
    }

    /// Greedy and chained modes: a ready task queued on its own, in its workflow's place in the
    /// queue (its arrival, as a gang is). Greedy: its GPUs stay with the workflow until the
    /// workflow ends, which nobody can predict, so no time limit for backfill to trust.
    /// Chained: its own time limit, and the node its predecessors ran on preferred.
    fn queue_alone(&mut self, wf: usize, t: usize) {
        let job = self.flows[wf].jobs[t];
        let task = &self.specs[wf].tasks[t];
        let limit = match self.mode {
            Mode::Greedy => None,
            _ => Some(time_limit(task.duration, self.factor)),
        };
        let mut pending = PendingJob::new(
            job,
            0,
            self.specs[wf].arrival,
            ResourceRequest::whole(task.gpus),
            limit,
            Vec::new(),
        );
        if self.mode == Mode::Chained {
            let preds: Vec<JobId> = task.after.iter().map(|&p| self.flows[wf].jobs[p]).collect();
            pending.prefer_node =
                crate::locality::preferred_node(&[], &preds, |j| self.node_of.get(&j).copied());
        }
        self.pending.push(pending);
        self.flows[wf].tasks[t] = Task::Queued;
    }

    fn pass(&mut self, gpus: &[crate::model::Gpu], now: Millis) -> bool {
        let plan = plan_with(
            gpus,
            &self.running,
            &self.pending,
            &self.states,
            now,
            PlanOptions { backfill: true },
        );
        for admission in plan.admissions {
            for (job, reserved) in admission.reserved {
                let (wf, t) = self.owner[job.0 as usize - 1];
                self.flows[wf].tasks[t] = Task::Reserved(now);
                if let Some(p) = self.pending.iter_mut().find(|p| p.id == job) {
                    p.reserved = Some(reserved);
                }
            }
        }
        let started = !plan.starts.is_empty();
        let node_by_gpu: HashMap<u32, u32> = gpus.iter().map(|g| (g.index, g.node)).collect();
        for start in plan.starts {
            let (wf, t) = self.owner[start.job.0 as usize - 1];
            let spec = &self.specs[wf].tasks[t];
            if let Task::Reserved(since) = self.flows[wf].tasks[t] {
                self.idle_ms += f64::from(spec.gpus) * (now - since) as f64;
            }
            self.flows[wf].tasks[t] = Task::Running;
            let pos = self
                .pending
                .iter()
                .position(|p| p.id == start.job)
                .expect("a started job was queued");
            let job = self.pending.swap_remove(pos);
            let limit = time_limit(spec.duration, self.factor);
            let duration = spec.duration.min(limit);
            self.busy_ms += f64::from(spec.gpus) * duration as f64;
            self.completions.push(Reverse((now + duration, start.job)));
            self.states.insert(start.job, JobState::Running);
            if let Some(node) = start.gpus.first().and_then(|g| node_by_gpu.get(g)) {
                self.node_of.insert(start.job, *node);
            }
            self.gpus_of.insert(start.job, start.gpus.clone());
            self.running.push(RunningJob {
                id: start.job,
                gpus: start.gpus,
                request: job.request,
                ends_by: match self.mode {
                    Mode::Greedy => None,
                    _ => Some(now.saturating_add(limit)),
                },
            });
        }
        started
    }

    fn complete(&mut self, job: JobId, now: Millis) {
        let (wf, t) = self.owner[job.0 as usize - 1];
        debug_assert_eq!(self.flows[wf].tasks[t], Task::Running);
        self.states.insert(job, JobState::Succeeded);
        self.flows[wf].tasks[t] = Task::Done(now);
        self.flows[wf].done += 1;
        if self.mode.releases_at_task_end() {
            self.release(job);
        }
        if self.mode.one_by_one() {
            let spec = &self.specs[wf];
            for s in 0..spec.tasks.len() {
                let ready = self.flows[wf].tasks[s] == Task::Blocked
                    && spec.tasks[s]
                        .after
                        .iter()
                        .all(|&p| matches!(self.flows[wf].tasks[p], Task::Done(_)));
                if ready {
                    self.queue_alone(wf, s);
                }
            }
        }
        if self.flows[wf].done == self.specs[wf].tasks.len() {
            self.flows[wf].end = Some(now);
            if self.mode == Mode::Greedy {
                self.give_back(wf, now);
            }
        }
    }

    fn release(&mut self, job: JobId) {
        if let Some(pos) = self.running.iter().position(|r| r.id == job) {
            self.running.swap_remove(pos);
        }
        self.gpus_of.remove(&job);
    }

    /// Greedy mode: the workflow's GPUs go back; each finished task's were idle since its end.
    fn give_back(&mut self, wf: usize, now: Millis) {
        for t in 0..self.specs[wf].tasks.len() {
            if let Task::Done(end) = self.flows[wf].tasks[t] {
                let job = self.flows[wf].jobs[t];
                if self.gpus_of.contains_key(&job) {
                    self.idle_ms += f64::from(self.specs[wf].tasks[t].gpus) * (now - end) as f64;
                    self.release(job);
                }
            }
        }
    }

    /// Breaks a deadlock so that the first queued task (in the pass's order: that of the oldest
    /// workflow with a queued task) can start: the youngest other workflows holding GPUs give
    /// them back, youngest first, until it fits; its own workflow only if it still does not
    /// (its own idle GPUs leave no node with room). Finished work is kept. Returns how many
    /// workflows gave their GPUs back.
    fn break_deadlock(&mut self, gpus: &[crate::model::Gpu], now: Millis) -> usize {
        let Some(head) = self
            .pending
            .iter()
            // The pass's queue order.
            .min_by_key(|p| crate::scheduler::queue_key(p))
        else {
            return 0;
        };
        let (request, head_wf) = (head.request, self.owner[head.id.0 as usize - 1].0);
        let mut occupancy = Occupancy::new(gpus);
        for r in &self.running {
            let _ = occupancy.hold(&r.gpus, &r.request);
        }
        let mut released = 0;
        while occupancy.choose(&request).is_none() {
            let holders = || {
                self.running
                    .iter()
                    .map(|r| self.owner[r.id.0 as usize - 1].0)
            };
            let Some(victim) = holders()
                .filter(|&wf| wf != head_wf)
                .max_by_key(|&wf| (self.specs[wf].arrival, wf))
                .or_else(|| holders().next())
            else {
                break;
            };
            for r in self
                .running
                .iter()
                .filter(|r| self.owner[r.id.0 as usize - 1].0 == victim)
            {
                occupancy.release(&r.gpus, &r.request);
            }
            // In a deadlock nothing runs: every GPU it holds is a finished task's.
            self.give_back(victim, now);
            released += 1;
        }
        released
    }
}

/// Runs `specs` (in arrival order) on `cluster` in `mode`; tasks declare time limits of their
/// duration times `time_limit_factor`.
pub fn run_workflows(
    specs: &[SyntheticWorkflow],
    mode: Mode,
    cluster: &Cluster,
    time_limit_factor: f64,
) -> Result<WorkflowMetrics, SimError> {
    cluster.check()?;
    check_factor(time_limit_factor)?;
    if specs.windows(2).any(|w| w[0].arrival > w[1].arrival) {
        return Err(SimError::Options(
            "the workflows must be in arrival order".into(),
        ));
    }
    let gpus = cluster.gpus();
    let mut sim = Sim {
        specs,
        mode,
        factor: time_limit_factor,
        flows: specs
            .iter()
            .map(|_| Flow {
                tasks: Vec::new(),
                jobs: Vec::new(),
                done: 0,
                end: None,
            })
            .collect(),
        owner: Vec::new(),
        gpus_of: HashMap::new(),
        node_of: HashMap::new(),
        pending: Vec::new(),
        running: Vec::new(),
        states: HashMap::new(),
        completions: BinaryHeap::new(),
        busy_ms: 0.0,
        idle_ms: 0.0,
    };
    let (mut passes, mut deadlocks, mut forced_releases) = (0u64, 0usize, 0usize);
    let mut next = 0;
    'events: loop {
        let now = match (
            specs.get(next).map(|s| s.arrival),
            sim.completions.peek().map(|Reverse((t, _))| *t),
        ) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(c)) => c,
            (Some(a), Some(c)) => a.min(c),
        };
        while let Some(&Reverse((t, job))) = sim.completions.peek()
            && t == now
        {
            sim.completions.pop();
            sim.complete(job, now);
        }
        while let Some(spec) = specs.get(next)
            && spec.arrival == now
        {
            sim.arrive(next);
            next += 1;
        }
        while !sim.pending.is_empty() {
            passes += 1;
            let started = sim.pass(&gpus, now);
            if started || !sim.completions.is_empty() {
                break;
            }
            // Nothing runs, nothing started, tasks wait: no event can ever change that.
            deadlocks += 1;
            // Only greedy holds GPUs with nothing running: atomic admission and chained tasks
            // cannot get here (their tests check that); if they did, stop.
            if mode != Mode::Greedy {
                break 'events;
            }
            match sim.break_deadlock(&gpus, now) {
                0 => break 'events,
                n => forced_releases += n,
            }
        }
    }

    let mut completion = Vec::new();
    let mut last_end = Millis::MIN;
    for (spec, flow) in specs.iter().zip(&sim.flows) {
        if let Some(end) = flow.end {
            completion.push(secs(end - spec.arrival));
            last_end = last_end.max(end);
        }
    }
    completion.sort_by(f64::total_cmp);
    let makespan = match specs.first() {
        Some(first) if !completion.is_empty() => last_end - first.arrival,
        _ => 0,
    };
    let hours = |ms: f64| round(ms / 3_600_000.0, 2);
    let edges: Vec<(JobId, JobId)> = specs
        .iter()
        .zip(&sim.flows)
        .flat_map(|(spec, flow)| {
            spec.tasks.iter().enumerate().flat_map(move |(t, task)| {
                task.after
                    .iter()
                    .map(move |&p| (flow.jobs[p], flow.jobs[t]))
            })
        })
        .collect();
    let local_edges = crate::locality::local_share(&edges, &sim.node_of).unwrap_or(0.0);
    Ok(WorkflowMetrics {
        mode,
        workflows: specs.len(),
        completed: completion.len(),
        avg_completion_s: round(mean(&completion), 3),
        p50_completion_s: round(percentile(&completion, 50.0), 3),
        p99_completion_s: round(percentile(&completion, 99.0), 3),
        makespan_s: round(secs(makespan), 3),
        busy_gpu_h: hours(sim.busy_ms),
        idle_held_gpu_h: hours(sim.idle_ms),
        deadlocks,
        forced_releases,
        local_edges: round(local_edges, 3),
        passes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Millis = 60_000;

    fn task(gpus: u32, minutes: i64, after: &[usize]) -> SyntheticTask {
        SyntheticTask {
            name: String::new(),
            gpus,
            duration: minutes * MIN,
            after: after.to_vec(),
        }
    }

    /// Two workflows at once on one node of 4 GPUs, each `a` (2 GPUs, 10 min) → `b` (1 GPU,
    /// 5 min). Greedy: both `a`s run, end, and keep their 2 GPUs each; both `b`s wait for a GPU
    /// that only the other workflow's end could free. Atomic: the first workflow is admitted
    /// whole (3 GPUs), the second waits whole until the first `a` gives back its 2.
    fn crafted() -> Vec<SyntheticWorkflow> {
        let flow = SyntheticWorkflow {
            arrival: 0,
            tasks: vec![task(2, 10, &[]), task(1, 5, &[0])],
        };
        vec![flow.clone(), flow]
    }

    #[test]
    fn greedy_deadlocks_on_the_crafted_case_and_atomic_does_not() {
        let cluster = Cluster::new(1, 4);
        let greedy = run_workflows(&crafted(), Mode::Greedy, &cluster, 1.5).unwrap();
        assert_eq!(
            (greedy.deadlocks, greedy.forced_releases),
            (1, 1),
            "{greedy:?}"
        );
        assert_eq!(greedy.completed, 2);
        // At 10 min both `b`s wait for a GPU the other workflow holds. The watchdog makes the
        // second workflow give back its 2 GPUs: both `b`s run 10-15.
        assert_eq!(greedy.makespan_s, 15.0 * 60.0);
        assert_eq!(greedy.avg_completion_s, 15.0 * 60.0);
        // Idle: the first `a`'s 2 GPUs 10-15 (the second's went back at 10).
        assert_eq!(greedy.idle_held_gpu_h, round(10.0 / 60.0, 2));

        let atomic = run_workflows(&crafted(), Mode::Atomic, &cluster, 1.5).unwrap();
        assert_eq!(atomic.deadlocks, 0, "{atomic:?}");
        assert_eq!(atomic.completed, 2);
        // First: a 0-10, b 10-15 (its GPU reserved idle 0-10). Second: admitted at 10 when the
        // first `a` ends, a 10-20, b 20-25 (reserved idle 10-20).
        assert_eq!(atomic.makespan_s, 25.0 * 60.0);
        assert_eq!(atomic.avg_completion_s, (15.0 + 25.0) / 2.0 * 60.0);
        assert_eq!(atomic.idle_held_gpu_h, round(20.0 / 60.0, 2));
    }

    #[test]
    fn greedy_holds_finished_tasks_gpus_until_the_workflow_ends() {
        // One workflow: a (2 GPUs, 10 min) → b (1 GPU, 30 min). Greedy keeps a's 2 GPUs idle
        // for b's 30 min: 1 GPU-hour. Atomic reserves b's GPU during a: 10 GPU-minutes.
        let spec = vec![SyntheticWorkflow {
            arrival: 0,
            tasks: vec![task(2, 10, &[]), task(1, 30, &[0])],
        }];
        let cluster = Cluster::new(1, 4);
        let greedy = run_workflows(&spec, Mode::Greedy, &cluster, 1.5).unwrap();
        assert_eq!(greedy.idle_held_gpu_h, 1.0);
        assert_eq!(greedy.busy_gpu_h, round(50.0 / 60.0, 2));
        let atomic = run_workflows(&spec, Mode::Atomic, &cluster, 1.5).unwrap();
        assert_eq!(atomic.idle_held_gpu_h, round(10.0 / 60.0, 2));
        assert_eq!(greedy.makespan_s, 40.0 * 60.0);
        assert_eq!(atomic.makespan_s, 40.0 * 60.0);
    }

    #[test]
    fn generation_is_deterministic_and_fits_the_cluster() {
        let options = GeneratorOptions {
            workflows: 200,
            seed: 11,
            cluster: Cluster::new(2, 8),
            load: DEFAULT_LOAD,
        };
        let a = generate(&options).unwrap();
        assert_eq!(a, generate(&options).unwrap());
        assert_ne!(
            a,
            generate(&GeneratorOptions {
                seed: 12,
                ..options
            })
            .unwrap()
        );
        let empty = Occupancy::new(&options.cluster.gpus());
        for spec in &a {
            let requests: Vec<ResourceRequest> = spec
                .tasks
                .iter()
                .map(|t| ResourceRequest::whole(t.gpus))
                .collect();
            assert!(empty.choose_all(&requests).is_some());
            assert!(
                spec.tasks
                    .iter()
                    .all(|t| t.gpus <= 8 && t.duration >= 5 * MIN)
            );
        }
        assert!(a.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        for mode in Mode::ALL {
            let x = run_workflows(&a, mode, &options.cluster, 1.5).unwrap();
            assert_eq!(x, run_workflows(&a, mode, &options.cluster, 1.5).unwrap());
        }
        assert!(
            generate(&GeneratorOptions {
                cluster: Cluster::new(1, 2),
                ..options
            })
            .is_err()
        );
    }

    #[test]
    fn atomic_admission_never_deadlocks_and_finishes_everything() {
        for seed in 0..6 {
            for cluster in [Cluster::new(1, 8), Cluster::new(2, 4), Cluster::new(4, 8)] {
                let specs = generate(&GeneratorOptions {
                    workflows: 60,
                    seed,
                    cluster,
                    load: 1.2,
                })
                .unwrap();
                let atomic = run_workflows(&specs, Mode::Atomic, &cluster, 1.5).unwrap();
                assert_eq!(atomic.deadlocks, 0, "seed {seed} {cluster:?}");
                assert_eq!(atomic.completed, 60);
                let greedy = run_workflows(&specs, Mode::Greedy, &cluster, 1.5).unwrap();
                assert_eq!(
                    greedy.completed, 60,
                    "greedy finishes once deadlocks are broken"
                );
                for mode in [Mode::Chained, Mode::ChainedNoLocality] {
                    let chained = run_workflows(&specs, mode, &cluster, 1.5).unwrap();
                    assert_eq!(chained.deadlocks, 0, "seed {seed} {cluster:?} {mode:?}");
                    assert_eq!(chained.completed, 60);
                    assert_eq!(chained.idle_held_gpu_h, 0.0, "nothing is held idle");
                }
            }
        }
    }

    #[test]
    fn chained_tasks_follow_their_predecessor_to_its_node() {
        // On a busy cluster of two nodes, preferring the predecessor's node keeps more edges
        // local than best fit alone.
        let cluster = Cluster::new(2, 4);
        let specs = generate(&GeneratorOptions {
            workflows: 80,
            seed: 3,
            cluster,
            load: 0.9,
        })
        .unwrap();
        let near = run_workflows(&specs, Mode::Chained, &cluster, 1.5).unwrap();
        let anywhere = run_workflows(&specs, Mode::ChainedNoLocality, &cluster, 1.5).unwrap();
        assert!(
            near.local_edges > anywhere.local_edges,
            "locality: {near:?}\nno locality: {anywhere:?}"
        );
        assert!(near.local_edges > 0.5, "{near:?}");
    }

    #[test]
    fn a_successor_that_fits_runs_where_its_predecessor_ran() {
        // Node 0 is half full for a long time (another workflow's 2-GPU task), node 1 empty.
        // `a` (1 GPU) arrives next and best fit puts it on node 0; when it ends, its successor
        // `b` (1 GPU) fits on both nodes. Without locality best fit picks node 0 as well, so to
        // tell them apart the blocker ends before `b` is queued and node 1 is then fuller:
        // a third workflow's 3-GPU task holds it.
        let specs = vec![
            SyntheticWorkflow {
                arrival: 0,
                tasks: vec![task(2, 30, &[])],
            },
            SyntheticWorkflow {
                arrival: 0,
                tasks: vec![task(1, 10, &[]), task(1, 10, &[0])],
            },
            SyntheticWorkflow {
                arrival: MIN,
                tasks: vec![task(3, 60, &[])],
            },
        ];
        let cluster = Cluster::new(2, 4);
        // At 0: the blocker takes GPUs 0-1, `a` best-fits on node 0 (GPU 2). At 1 min the
        // 3-GPU task goes to node 1. At 10 min `a` ends and `b` is queued: node 0 has 2 free
        // GPUs, node 1 has 1: best fit says node 1; locality says node 0, where `a` ran.
        let near = run_workflows(&specs, Mode::Chained, &cluster, 1.5).unwrap();
        assert_eq!(near.local_edges, 1.0, "{near:?}");
        let anywhere = run_workflows(&specs, Mode::ChainedNoLocality, &cluster, 1.5).unwrap();
        assert_eq!(anywhere.local_edges, 0.0, "{anywhere:?}");
    }
}
