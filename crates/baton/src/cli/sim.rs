//! `baton sim`: replay a GPU cluster trace through the scheduling core under each policy, or
//! compare ways of scheduling workflows (atomic, chained with and without locality, greedy) on a
//! synthetic workload. Runs in this process
//! with a simulated clock; no daemon is involved.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use baton_core::limits::Period;
use baton_core::sim::{
    self, Budget, Cluster, DEFAULT_GPUS_PER_NODE, DEFAULT_NODES, DEFAULT_TIME_LIMIT_FACTOR,
    GeneratorOptions, Metrics, Mode, Policy, ReplayOptions, Reservation, Rules, WorkflowMetrics,
};
use baton_core::units::{format_duration, parse_duration};
use serde::Serialize;

use super::{UsageError, print_json};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The pod list to replay, in the format of Alibaba's cluster-trace-gpu-v2023
    /// (`openb_pod_list_*.csv`: columns found by name).
    #[arg(long, value_name = "FILE", required_unless_present = "workflows")]
    trace: Option<PathBuf>,
    /// Which policies to replay.
    #[arg(long, value_enum, default_value = "all")]
    policy: PolicyArg,
    /// Nodes in the simulated cluster.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_NODES)]
    nodes: u32,
    /// GPUs per node (80 GiB each); a job's GPUs all come from one node.
    #[arg(long, value_name = "G", default_value_t = DEFAULT_GPUS_PER_NODE)]
    gpus_per_node: u32,
    /// Each job declares a time limit of its true run time times this (users over-estimate);
    /// backfill trusts it and no job runs past it.
    #[arg(long, value_name = "F", default_value_t = DEFAULT_TIME_LIMIT_FACTOR)]
    time_limit_factor: f64,
    /// Instead of a trace: generate N synthetic workflows and compare atomic admission, chained
    /// tasks (with and without locality) and per-task greedy scheduling.
    #[arg(long, value_name = "N", conflicts_with_all = ["trace", "policy"])]
    workflows: Option<usize>,
    /// Seed of the synthetic workflows (the same seed gives the same workload) [default: 1].
    #[arg(long, value_name = "S")]
    seed: Option<u64>,
    /// Offered load of the synthetic workflows: their task work as a share of the cluster's
    /// GPU capacity [default: 0.9].
    #[arg(long, value_name = "L")]
    load: Option<f64>,
    /// Synthetic users the trace's jobs are spread over (by a hash of each job's name), for
    /// --budget and --reserve-gpus [default: 10].
    #[arg(long, value_name = "N")]
    users: Option<u32>,
    /// Replay each policy again with a GPU-hour budget per user and --budget-period: a user's
    /// GPU jobs wait while their budget is used up, as `[limits] gpu_hours_per_user` makes them.
    #[arg(long, value_name = "GPU_HOURS")]
    budget: Option<f64>,
    /// The budget's period (a month is 30 days here).
    #[arg(long, value_enum, default_value = "week", requires = "budget")]
    budget_period: PeriodArg,
    /// Replay each policy again with a reservation of this many GPUs (on one node) for user
    /// --reserve-user, from --reserve-start after the first arrival for --reserve-duration: that
    /// user's jobs that arrive while it stands and fit in it run in it, as `baton reserve` and
    /// `submit --reservation` make them.
    #[arg(long, value_name = "N", requires = "reserve_duration")]
    reserve_gpus: Option<u32>,
    /// When the reservation begins, after the trace's first arrival (e.g. 120d) [default: 0s].
    #[arg(long, value_parser = parse_duration, value_name = "DUR", requires = "reserve_gpus")]
    reserve_start: Option<i64>,
    /// How long the reservation lasts (e.g. 3d).
    #[arg(long, value_parser = parse_duration, value_name = "DUR", requires = "reserve_gpus")]
    reserve_duration: Option<i64>,
    /// The synthetic user (0 to --users minus 1) the reservation is for.
    #[arg(long, value_name = "K", default_value_t = 0, requires = "reserve_gpus")]
    reserve_user: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PeriodArg {
    Day,
    Week,
    Month,
}

impl PeriodArg {
    fn period(self) -> Period {
        match self {
            PeriodArg::Day => Period::Day,
            PeriodArg::Week => Period::Week,
            PeriodArg::Month => Period::Month,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PolicyArg {
    Fifo,
    Backfill,
    Baton,
    All,
}

impl PolicyArg {
    fn policies(self) -> Vec<Policy> {
        match self {
            PolicyArg::Fifo => vec![Policy::Fifo],
            PolicyArg::Backfill => vec![Policy::Backfill],
            PolicyArg::Baton => vec![Policy::Baton],
            PolicyArg::All => Policy::ALL.to_vec(),
        }
    }
}

/// A policy's metrics and how long its replay took here.
#[derive(Serialize)]
struct Timed<T> {
    #[serde(flatten)]
    metrics: T,
    wall_s: f64,
}

#[derive(Serialize)]
struct TraceInfo {
    file: String,
    rows: usize,
    jobs: usize,
    skipped_unscheduled: usize,
    skipped_nonpositive: usize,
}

#[derive(Serialize)]
struct ClusterInfo {
    nodes: u32,
    gpus_per_node: u32,
    gpus: u32,
    gpu_memory_gib: u64,
}

#[derive(Serialize)]
struct ReplayReport {
    trace: TraceInfo,
    cluster: ClusterInfo,
    time_limit_factor: f64,
    /// The budget and reservation each policy was replayed again with, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    rules: Option<Rules>,
    policies: Vec<Timed<Metrics>>,
}

#[derive(Serialize)]
struct WorkflowReport {
    workflows: usize,
    seed: u64,
    load: f64,
    cluster: ClusterInfo,
    time_limit_factor: f64,
    modes: Vec<Timed<WorkflowMetrics>>,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    if args.nodes == 0 || args.gpus_per_node == 0 {
        return Err(UsageError("--nodes and --gpus-per-node must be at least 1".into()).into());
    }
    if !(args.time_limit_factor.is_finite() && args.time_limit_factor > 0.0) {
        return Err(UsageError(format!(
            "--time-limit-factor must be a positive number, not {}",
            args.time_limit_factor
        ))
        .into());
    }
    let cluster = Cluster::new(args.nodes, args.gpus_per_node);
    let cluster_info = ClusterInfo {
        nodes: cluster.nodes,
        gpus_per_node: cluster.gpus_per_node,
        gpus: cluster.total_gpus(),
        gpu_memory_gib: cluster.gpu_memory >> 30,
    };
    if args.workflows.is_none() && (args.seed.is_some() || args.load.is_some()) {
        return Err(UsageError(
            "--seed and --load shape the synthetic workflows: use them with --workflows N".into(),
        )
        .into());
    }
    if let Some(workflows) = args.workflows {
        return run_workflows(&args, workflows, cluster, cluster_info, json);
    }
    let path = args.trace.as_ref().expect("clap requires --trace here");
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read the trace {}: {e}", path.display())))?;
    let trace =
        sim::parse_openb(&text).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    if trace.jobs.is_empty() {
        return Err(UsageError(format!(
            "{}: no job to replay ({} rows, {} never scheduled, {} with no run time)",
            path.display(),
            trace.rows,
            trace.skipped_unscheduled,
            trace.skipped_nonpositive
        ))
        .into());
    }
    let options = ReplayOptions {
        cluster,
        time_limit_factor: args.time_limit_factor,
        rules: Rules::default(),
    };
    let rules = rules_of(&args)?;
    if let Some(rules) = &rules {
        rules
            .check(&cluster)
            .map_err(|e| UsageError(e.to_string()))?;
    }
    let mut results = Vec::new();
    for policy in args.policy.policies() {
        // Without the rules, and again with them: their effect is the difference.
        for rules in [Rules::default()].into_iter().chain(rules) {
            let options = ReplayOptions { rules, ..options };
            let t0 = Instant::now();
            let replay = sim::replay(&trace.jobs, policy, &options)
                .map_err(|e| UsageError(e.to_string()))?;
            results.push(Timed {
                metrics: replay.metrics,
                wall_s: seconds(t0),
            });
        }
    }
    let report = ReplayReport {
        trace: TraceInfo {
            file: path.display().to_string(),
            rows: trace.rows,
            jobs: trace.jobs.len(),
            skipped_unscheduled: trace.skipped_unscheduled,
            skipped_nonpositive: trace.skipped_nonpositive,
        },
        cluster: cluster_info,
        time_limit_factor: args.time_limit_factor,
        rules,
        policies: results,
    };
    if json {
        print_json(&report);
    } else {
        print!("{}", replay_table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The budget and reservation the options ask for, if any.
fn rules_of(args: &Args) -> Result<Option<Rules>, UsageError> {
    if args.budget.is_none() && args.reserve_gpus.is_none() {
        if args.users.is_some() {
            return Err(UsageError(
                "--users spreads the jobs for --budget and --reserve-gpus: use it with one".into(),
            ));
        }
        return Ok(None);
    }
    if args.workflows.is_some() {
        return Err(UsageError(
            "--budget and --reserve-gpus apply to a trace replay (--trace), not --workflows".into(),
        ));
    }
    let budget = match args.budget {
        Some(h) if !(h.is_finite() && h > 0.0) => {
            return Err(UsageError(format!(
                "--budget must be a positive number of GPU-hours, not {h}"
            )));
        }
        Some(gpu_hours) => Some(Budget {
            gpu_hours,
            period: args.budget_period.period(),
        }),
        None => None,
    };
    let reservation = match (args.reserve_gpus, args.reserve_duration) {
        (Some(gpus), Some(duration)) => Some(Reservation {
            gpus,
            start: args.reserve_start.unwrap_or(0),
            duration,
            user: args.reserve_user,
        }),
        _ => None,
    };
    Ok(Some(Rules {
        users: args.users.unwrap_or(sim::rules::DEFAULT_USERS),
        budget,
        reservation,
    }))
}

fn run_workflows(
    args: &Args,
    workflows: usize,
    cluster: Cluster,
    cluster_info: ClusterInfo,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if workflows == 0 {
        return Err(UsageError("--workflows must be at least 1".into()).into());
    }
    let seed = args.seed.unwrap_or(1);
    let load = args.load.unwrap_or(sim::workflows::DEFAULT_LOAD);
    if !(load.is_finite() && load > 0.0) {
        return Err(UsageError(format!("--load must be a positive number, not {load}")).into());
    }
    let specs = sim::generate(&GeneratorOptions {
        workflows,
        seed,
        cluster,
        load,
    })
    .map_err(|e| UsageError(e.to_string()))?;
    let mut modes = Vec::new();
    for mode in Mode::ALL {
        let t0 = Instant::now();
        let metrics = sim::run_workflows(&specs, mode, &cluster, args.time_limit_factor)
            .map_err(|e| UsageError(e.to_string()))?;
        modes.push(Timed {
            metrics,
            wall_s: seconds(t0),
        });
    }
    let report = WorkflowReport {
        workflows,
        seed,
        load,
        cluster: cluster_info,
        time_limit_factor: args.time_limit_factor,
        modes,
    };
    if json {
        print_json(&report);
    } else {
        print!("{}", workflow_table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn seconds(t0: Instant) -> f64 {
    (t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
}

fn replay_table(r: &ReplayReport) -> String {
    let mut out = format!(
        "trace {}: {} rows, {} jobs replayed ({} never scheduled, {} without run time skipped)\n\
         cluster: {} nodes × {} GPUs ({} GPUs of {} GiB), time limit = run time × {}\n\n",
        r.trace.file,
        r.trace.rows,
        r.trace.jobs,
        r.trace.skipped_unscheduled,
        r.trace.skipped_nonpositive,
        r.cluster.nodes,
        r.cluster.gpus_per_node,
        r.cluster.gpus,
        r.cluster.gpu_memory_gib,
        r.time_limit_factor,
    );
    let header = [
        "policy",
        "jobs",
        "avg JCT s",
        "p50 JCT s",
        "p99 JCT s",
        "avg wait s",
        "makespan s",
        "GPU alloc",
        "frag",
        "wall s",
    ];
    let rows: Vec<Vec<String>> = r
        .policies
        .iter()
        .map(|p| {
            let m = &p.metrics;
            vec![
                match m.rules {
                    Some(_) => format!("{} + rules", m.policy),
                    None => m.policy.to_string(),
                },
                m.jobs.to_string(),
                format!("{:.0}", m.avg_jct_s),
                format!("{:.0}", m.p50_jct_s),
                format!("{:.0}", m.p99_jct_s),
                format!("{:.0}", m.avg_wait_s),
                format!("{:.0}", m.makespan_s),
                format!("{:.1}%", m.gpu_alloc_rate * 100.0),
                format!("{:.3}", m.fragmentation),
                format!("{:.2}", p.wall_s),
            ]
        })
        .collect();
    out.push_str(&table(&header, &rows));
    let notes: Vec<String> = r
        .policies
        .iter()
        .filter(|p| p.metrics.impossible + p.metrics.unfinished > 0)
        .map(|p| {
            format!(
                "{}: {} jobs could never fit this cluster, {} never started\n",
                p.metrics.policy, p.metrics.impossible, p.metrics.unfinished
            )
        })
        .collect();
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes.concat());
    }
    if let Some(rules) = &r.rules {
        out.push_str(&rules_notes(rules, &r.policies));
    }
    out
}

/// What the rules are, and what they did under each policy.
fn rules_notes(rules: &Rules, policies: &[Timed<Metrics>]) -> String {
    let mut out = format!("\nrules ({} synthetic users):", rules.users);
    if let Some(b) = &rules.budget {
        out.push_str(&format!(
            " a budget of {} GPU-hours per user per {}",
            b.gpu_hours,
            b.period.noun()
        ));
    }
    if let Some(r) = &rules.reservation {
        out.push_str(&format!(
            "{} a reservation of {} GPU{} for user{} from {} after the first arrival for {}",
            if rules.budget.is_some() { ";" } else { "" },
            r.gpus,
            if r.gpus == 1 { "" } else { "s" },
            r.user,
            format_duration(r.start),
            format_duration(r.duration)
        ));
    }
    out.push('\n');
    let plain = |policy: Policy| {
        policies
            .iter()
            .find(|p| p.metrics.policy == policy && p.metrics.rules.is_none())
    };
    for p in policies {
        let Some(e) = &p.metrics.rules else {
            continue;
        };
        let before = plain(p.metrics.policy).map_or(0.0, |b| b.metrics.avg_wait_s);
        out.push_str(&format!(
            "{}: mean wait {:.0} s with the rules, {:.0} s without",
            p.metrics.policy, p.metrics.avg_wait_s, before
        ));
        if rules.budget.is_some() {
            out.push_str(&format!(
                "; {} jobs waited for their owner's budget",
                e.held_by_budget
            ));
        }
        if rules.reservation.is_some() {
            out.push_str(&format!(
                "; the reservation ran {} of its {} jobs (mean wait {:.0} s, others {:.0} s; {} \
                 stopped at its end), {} never started in it (left out of the means)",
                e.reserved_ran,
                e.reserved,
                e.reserved_avg_wait_s,
                e.outside_avg_wait_s,
                e.reserved_cut,
                e.reserved_missed
            ));
        }
        out.push('\n');
    }
    out
}

fn workflow_table(r: &WorkflowReport) -> String {
    let mut out = format!(
        "{} synthetic workflows (seed {}, load {}) on {} nodes × {} GPUs ({} GPUs)\n\n",
        r.workflows, r.seed, r.load, r.cluster.nodes, r.cluster.gpus_per_node, r.cluster.gpus
    );
    let header = [
        "mode",
        "done",
        "avg completion s",
        "p99 completion s",
        "makespan s",
        "busy GPU-h",
        "idle held GPU-h",
        "deadlocks",
        "local edges",
        "wall s",
    ];
    let rows: Vec<Vec<String>> = r
        .modes
        .iter()
        .map(|p| {
            let m = &p.metrics;
            vec![
                m.mode.as_str().to_string(),
                format!("{}/{}", m.completed, m.workflows),
                format!("{:.0}", m.avg_completion_s),
                format!("{:.0}", m.p99_completion_s),
                format!("{:.0}", m.makespan_s),
                format!("{:.1}", m.busy_gpu_h),
                format!("{:.1}", m.idle_held_gpu_h),
                m.deadlocks.to_string(),
                format!("{:.0} %", m.local_edges * 100.0),
                format!("{:.2}", p.wall_s),
            ]
        })
        .collect();
    out.push_str(&table(&header, &rows));
    out
}

/// Left-aligned first column, right-aligned numbers.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                s.push_str(&format!("{cell:<w$}"));
            } else {
                s.push_str(&format!("  {cell:>w$}"));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}
