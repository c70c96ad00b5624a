//! `POST /v1/workflows`, `GET /v1/workflows/{id}`, `POST /v1/workflows/{id}/cancel`: DAG
//! workflows (DESIGN §6). A workflow file is parsed and checked whole (syntax, cycles, unknown
//! dependencies, resources this machine can never give) before anything is queued; then all its
//! tasks are queued as ordinary jobs in one transaction, each knowing its predicted critical path.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, Path as UrlPath, State};
use baton_core::placement::Occupancy;
use baton_core::workflow::{self, WorkflowSpec};
use baton_core::{JobId, admission, input};

use crate::api::{CancelRequest, WorkflowSubmitRequest, WorkflowTaskView, WorkflowView};
use crate::daemon::handlers::cancel::cancel_jobs;
use crate::daemon::views::job_view_for;
use crate::daemon::views::{job_view, rfc3339};
use crate::daemon::{ApiError, Daemon, Peer, now_ms};
use crate::store::{JobRecord, NewJob, NewTask, NewWorkflow, WorkflowRecord};
use crate::users;

/// The prediction for a task with no history and no time limit.
const DEFAULT_PREDICTION_MS: i64 = 10 * 60_000;

pub async fn submit(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Json(req): Json<WorkflowSubmitRequest>,
) -> Result<Json<WorkflowView>, ApiError> {
    let source = req.source.clone();
    let bad = |m: String| ApiError::BadRequest(format!("{source}: {m}"));
    let spec = workflow::parse(&req.text).map_err(|e| bad(e.to_string()))?;
    check_resources(&daemon, &spec).map_err(|e| match daemon.no_gpus_hint() {
        Some(hint) => bad(e).with_hint(hint),
        None => bad(e),
    })?;
    if let Some(p) = spec.priority {
        daemon.check_priority(&peer, p, "priority")?;
    }
    for task in &spec.tasks {
        if let Some(p) = task.priority {
            daemon.check_priority(&peer, p, &format!("task {}: priority", task.name))?;
        }
        let host = &daemon.config.host;
        daemon
            .check_caps(
                peer.uid,
                req.context.session().as_deref(),
                &task.request_with(host.default_cpus, host.default_mem),
            )
            .map_err(|e| bad(format!("line {}: task {}: {e}", task.line, task.name)))?;
    }
    let max_retries = daemon.config.retries.max;
    if let Some(task) = spec.tasks.iter().find(|t| t.retries > max_retries) {
        return Err(bad(format!(
            "task {}: retries {} is more than this daemon allows: at most {max_retries} \
             (`[retries] max` in config.toml)",
            task.name, task.retries
        )));
    }
    input::check_path(&req.base_dir).map_err(|e| bad(format!("the workflow's directory: {e}")))?;
    if !Path::new(&req.base_dir).is_absolute() {
        return Err(bad(format!(
            "the workflow's directory must be absolute, not {:?}",
            req.base_dir
        )));
    }
    input::check_env(&req.env).map_err(|e| bad(format!("environment: {e}")))?;
    check_dirs(&spec, &req.base_dir).map_err(bad)?;
    let dag = spec.dag().map_err(|e| bad(e.to_string()))?;
    let (env, channels) = super::submit::env_and_channels(
        &daemon,
        &peer,
        req.env.clone(),
        &req.notify,
        &req.context,
        &req.base_dir,
    )?;
    let now = now_ms();
    let owner = users::name_of(peer.uid);

    if spec.atomic {
        // All its tasks hold their GPUs at once: together they must fit the caps.
        let host = &daemon.config.host;
        let mut whole = baton_core::ResourceRequest::whole(0);
        for task in &spec.tasks {
            let r = task.request_with(host.default_cpus, host.default_mem);
            whole.count += r.count;
            whole.cpus += r.cpus;
            whole.mem += r.mem;
        }
        daemon
            .check_held_caps(peer.uid, req.context.session().as_deref(), &whole)
            .map_err(|e| bad(format!("atomic: all its tasks at once: {e}")))?;
    }
    let (wf, jobs) = {
        let mut inner = daemon.lock();
        daemon.check_queue_room(&inner, peer.uid, spec.tasks.len())?;
        let host = &daemon.config.host;
        let asks_gpus = spec
            .tasks
            .iter()
            .any(|t| t.request_with(host.default_cpus, host.default_mem).count > 0);
        daemon.check_budget(&inner, peer.uid, asks_gpus)?;
        // Predicted run times: the history of the same task of the same workflow, or of the same
        // command, else the time limit, else a default.
        let mut durations = Vec::with_capacity(spec.tasks.len());
        for task in &spec.tasks {
            let history = inner
                .jobs
                .store()
                .run_history(&task.command, &task.name, &spec.name)?;
            durations.push(workflow::predict_ms(
                &history,
                task.time_limit,
                DEFAULT_PREDICTION_MS,
            ));
        }
        let path = dag.critical_path(&durations);
        // Tasks in dependency order, each `after` pointing at earlier positions.
        let order = dag.topological_order().to_vec();
        let position: HashMap<usize, usize> =
            order.iter().enumerate().map(|(pos, &t)| (t, pos)).collect();
        let index: HashMap<&str, usize> = spec
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i))
            .collect();
        let tasks = order
            .iter()
            .map(|&t| {
                let task = &spec.tasks[t];
                let after = dag.predecessors(t).iter().map(|p| position[p]).collect();
                // `parse` checked that every partner is a task of this workflow.
                let colocate = task
                    .colocate_with
                    .iter()
                    .filter_map(|name| index.get(name.as_str()))
                    .map(|i| position[i])
                    .collect();
                let mut task_env: BTreeMap<String, String> = env.clone();
                task_env.extend(task.env.clone());
                let cwd = task_cwd(task, &req.base_dir);
                let job = NewJob {
                    reservation: None,
                    signal: None,
                    name: Some(format!("{}/{}", spec.name, task.name)),
                    command: task.command.clone(),
                    cwd,
                    env: task_env,
                    owner_uid: peer.uid,
                    owner: owner.clone(),
                    priority: task.priority.or(spec.priority).unwrap_or(0),
                    request: task.request_with(
                        daemon.config.host.default_cpus,
                        daemon.config.host.default_mem,
                    ),
                    time_limit: task.time_limit,
                    retries: task.retries,
                    deps: Vec::new(),
                    tags: BTreeMap::new(),
                    submitted_at: now,
                    umask: req.umask.map(|m| m & 0o777),
                    notify: channels.clone(),
                    session: req.context.session(),
                    workflow_id: None,
                    task: Some(task.name.clone()),
                    critical_path: path.remaining_ms[t],
                    begin_at: None,
                    stdin: None,
                    stop_on: Vec::new(),
                    wake: Default::default(),
                    held_by: None,
                    sweep: None,
                    params: task.params.clone(),
                };
                NewTask {
                    job,
                    after,
                    colocate,
                }
            })
            .collect();
        let new = NewWorkflow {
            name: spec.name.clone(),
            atomic: spec.atomic,
            owner_uid: peer.uid,
            owner: owner.clone(),
            source: source.clone(),
            submitted_at: now,
            tasks,
        };
        let (wf, jobs) = inner.jobs.submit_workflow(&new)?;
        for _ in &jobs {
            daemon.metrics.job_submitted();
        }
        (wf, jobs)
    };
    // BATON_WORKFLOW_ID is known only now; the store has it as the jobs' workflow_id, and the
    // launch adds it to the environment.
    daemon.wake();
    tracing::info!(
        workflow = wf.id,
        tasks = jobs.len(),
        atomic = wf.atomic,
        "workflow queued"
    );
    Ok(Json(view(&wf, &jobs, &HashMap::new())))
}

/// A task's working directory: its `cwd`, relative to the workflow file's directory, which is
/// also the default.
fn task_cwd(task: &workflow::TaskSpec, base_dir: &str) -> String {
    match &task.cwd {
        Some(dir) if Path::new(dir).is_absolute() => dir.clone(),
        Some(dir) => format!("{}/{dir}", base_dir.trim_end_matches('/')),
        None => base_dir.to_string(),
    }
}

/// Refuses, before anything is queued, a working directory a task could never start in: one
/// that is not a directory, or, for a task that runs after no other, one that does not exist. A
/// task with `after` may use a directory its predecessors create (`mkdir out`, then `cwd: out`),
/// so for it only an existing non-directory is refused. (What the daemon cannot see, see
/// `submit::check_dir`.)
fn check_dirs(spec: &WorkflowSpec, base_dir: &str) -> Result<(), String> {
    for task in &spec.tasks {
        let dir = task_cwd(task, base_dir);
        let missing = matches!(
            std::fs::metadata(&dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound
        );
        if missing && !task.after.is_empty() {
            continue;
        }
        super::submit::check_dir(&dir).map_err(|e| {
            let field = if task.cwd.is_some() {
                "cwd"
            } else {
                "the workflow file's directory"
            };
            format!(
                "line {}, column {}: task {}: {field}: {e}",
                task.line, task.column, task.name
            )
        })?;
    }
    Ok(())
}

/// Refuses, before anything is queued, a task this machine can never run, and an atomic
/// workflow whose tasks cannot all hold their GPUs at once.
fn check_resources(daemon: &Daemon, spec: &WorkflowSpec) -> Result<(), String> {
    if !daemon.places_here() {
        // Slurm judges what its cluster can run (sbatch's refusal is passed on); an atomic
        // workflow becomes one heterogeneous job, allocated whole or not at all.
        return Ok(());
    }
    let host = &daemon.config.host;
    let request =
        |t: &baton_core::workflow::TaskSpec| t.request_with(host.default_cpus, host.default_mem);
    for task in &spec.tasks {
        admission::check(&request(task), &daemon.gpus, Some(&host.capacity))
            .map_err(|e| format!("line {}: task {}: {e}", task.line, task.name))?;
    }
    if spec.atomic {
        let requests: Vec<_> = spec.tasks.iter().map(request).collect();
        if daemon.machine.choose_all(&requests).is_none() {
            let gpus_only: Vec<_> = spec.tasks.iter().map(|t| t.request).collect();
            if Occupancy::new(&daemon.gpus)
                .choose_all(&gpus_only)
                .is_some()
            {
                let cpus: u32 = requests.iter().map(|r| r.cpus).sum();
                let mem: u64 = requests.iter().map(|r| r.mem).sum();
                return Err(format!(
                    "atomic: all {} tasks must hold their cores and memory at once ({cpus} CPUs, \
                     {} of memory), more than the {} CPUs and {} jobs may use here; make it \
                     non-atomic or smaller",
                    spec.tasks.len(),
                    baton_core::units::format_size(mem),
                    host.capacity.cpus,
                    baton_core::units::format_size(host.capacity.mem),
                ));
            }
            let whole: u32 = spec
                .tasks
                .iter()
                .filter(|t| t.request.mem_per_gpu.is_none())
                .map(|t| t.request.count)
                .sum();
            return Err(format!(
                "atomic: all {} tasks must hold their GPUs at once ({whole} whole GPUs, plus \
                 shared ones), which this machine's {} GPUs can never do; make it non-atomic \
                 or smaller",
                spec.tasks.len(),
                daemon.gpus.len()
            ));
        }
    }
    Ok(())
}

pub async fn status(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<u64>,
) -> Result<Json<WorkflowView>, ApiError> {
    let (wf, jobs, reasons) = daemon.workflow_with_jobs(id)?;
    Ok(Json(view_for(&peer, &wf, &jobs, &reasons)))
}

pub async fn cancel(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    UrlPath(id): UrlPath<u64>,
    Json(req): Json<CancelRequest>,
) -> Result<Json<WorkflowView>, ApiError> {
    let (_, jobs, _) = daemon.workflow_with_jobs(id)?;
    let open: Vec<JobId> = jobs
        .iter()
        .filter(|j| !j.state().is_terminal())
        .map(|j| j.id)
        .collect();
    if !open.is_empty() {
        cancel_jobs(&daemon, &peer, &open, req.force, req.session.as_deref())?;
    }
    let (wf, jobs, reasons) = daemon.workflow_with_jobs(id)?;
    Ok(Json(view_for(&peer, &wf, &jobs, &reasons)))
}

/// A workflow, its tasks, and the reasons to show for tasks where they are not the recorded
/// ones (why each waits now).
type WorkflowWithJobs = (WorkflowRecord, Vec<JobRecord>, HashMap<JobId, String>);

impl Daemon {
    /// A workflow and its tasks, the live copies for those still active.
    fn workflow_with_jobs(&self, id: u64) -> Result<WorkflowWithJobs, ApiError> {
        let inner = self.lock();
        let wf = match inner.jobs.workflow(id) {
            Some(wf) => wf.clone(),
            None => inner
                .jobs
                .store()
                .workflow(id)?
                .ok_or_else(|| ApiError::NotFound(format!("workflow {id} does not exist")))?,
        };
        let mut jobs = inner.jobs.store().workflow_jobs(id)?;
        for job in jobs.iter_mut() {
            if let Some(live) = inner.jobs.get(job.id) {
                *job = live.clone();
            }
        }
        let reasons = inner.jobs.shown_reasons(&jobs);
        Ok((wf, jobs, reasons))
    }
}

/// The workflow object: its tasks in the order they were queued (dependency order), and the
/// predicted critical path read back from the tasks' own predictions.
/// The workflow as `peer` may see it: another user's without its source file and with its tasks
/// as `job_view_for` shows them.
pub fn view_for(
    peer: &Peer,
    wf: &WorkflowRecord,
    jobs: &[JobRecord],
    reasons: &HashMap<JobId, String>,
) -> WorkflowView {
    let mut out = view(wf, jobs, reasons);
    if !(peer.reads_everything() || peer.uid == wf.owner_uid) {
        out.source = String::new();
        for (task, job) in out.tasks.iter_mut().zip(jobs) {
            let reason = task.job.reason.take();
            task.job = job_view_for(peer, job);
            task.job.reason = reason;
        }
    }
    out
}

/// The workflow object; `reasons` are shown over the tasks' recorded ones.
pub fn view(
    wf: &WorkflowRecord,
    jobs: &[JobRecord],
    reasons: &HashMap<JobId, String>,
) -> WorkflowView {
    let name_of: HashMap<JobId, String> = jobs
        .iter()
        .map(|j| (j.id, j.task.clone().unwrap_or_else(|| j.name.clone())))
        .collect();
    let tasks: Vec<WorkflowTaskView> = jobs
        .iter()
        .map(|j| WorkflowTaskView {
            task: name_of[&j.id].clone(),
            after: j
                .deps
                .iter()
                .filter_map(|d| name_of.get(&d.job).cloned())
                .collect(),
            reserved: j.reserved().map(<[u32]>::to_vec),
            critical_path_ms: j.critical_path,
            job: {
                let mut view = job_view(j);
                if let Some(reason) = reasons.get(&j.id) {
                    view.reason = Some(reason.clone());
                }
                view
            },
        })
        .collect();
    // Longest chain: from the root with the longest path, keep taking the successor with the
    // longest path.
    let mut critical_path = Vec::new();
    let roots = jobs.iter().filter(|j| j.deps.is_empty());
    let mut current = roots.max_by_key(|j| (j.critical_path, std::cmp::Reverse(j.id)));
    while let Some(job) = current {
        critical_path.push(name_of[&job.id].clone());
        current = jobs
            .iter()
            .filter(|j| j.deps.iter().any(|d| d.job == job.id))
            .max_by_key(|j| (j.critical_path, std::cmp::Reverse(j.id)));
    }
    WorkflowView {
        id: wf.id,
        name: wf.name.clone(),
        atomic: wf.atomic,
        state: wf.state,
        owner: wf.owner.clone(),
        source: wf.source.clone(),
        submitted_at: rfc3339(wf.submitted_at),
        admitted_at: wf.admitted_at.map(rfc3339),
        ended_at: wf.ended_at.map(rfc3339),
        critical_path,
        tasks,
    }
}
