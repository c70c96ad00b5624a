//! Workflows (DESIGN §6): parsing and checking a workflow file, the dependency graph of its
//! tasks, and run-time predictions for the critical path.
//!
//! [`parse`] turns the file's text into a [`WorkflowSpec`] or one [`WorkflowError`] that says
//! where and what. A spec that parsed is complete and consistent: every command is non-empty,
//! every size and duration is parsed, every `after` and `colocate_with` names a task of the
//! workflow, and the dependencies have no cycle. Whether the machine can run each task is not
//! decided here; the daemon checks that with [`crate::admission::check`].
//!
//! A task with `matrix:` (a mapping from parameter names to lists of values) is expanded into
//! one task per combination, the last parameter varying fastest: combination `i` of task
//! `train` is the task `train.i`, numbered from 0, whose command has each `{name}` filled with
//! its value ([`crate::sweep::fill`]; `{{` and `}}` are literal braces) and whose
//! [`TaskSpec::params`] and [`TaskSpec::matrix_of`] say which combination of which task it is.
//! Values are their text as written (`1e-4` stays `1e-4`). `after: [train]` and
//! `colocate_with: [train]` mean all of train's tasks; a matrix task's own `after` and
//! `colocate_with` apply to each of its tasks; references name tasks as written, never one
//! expansion. The spec holds only the expanded tasks, so everything that reads it (the graph,
//! the critical path, the daemon) sees plain tasks. A task without `matrix:` keeps its command
//! exactly as written, braces included.
//!
//! The submodules: `raw` (the file's serde shape), `locate` (finding a key's line in the text),
//! `error`, `matrix` (expanding matrix tasks), `dag` (graph algorithms on plain data) and
//! `predict` (run-time estimates).

mod dag;
mod error;
pub(crate) mod locate;
mod matrix;
mod predict;
mod raw;
mod summary;

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::input::{self, InputError};
use crate::model::{Millis, ResourceRequest};
use crate::sweep::Params;
use crate::units::{parse_duration, parse_size};

pub use dag::{CriticalPath, Cycle, Dag, TaskNode};
pub use error::{Location, WorkflowError};
pub use predict::{HISTORY_WINDOW, MIN_PREDICTION_MS, PERCENTILE, SAFETY_TENTHS, predict_ms};
pub use summary::{TaskLine, summary};

pub(crate) use raw::RawCommand;
use raw::{RawMatrix, RawTask, RawWorkflow};

/// Task names become parts of job names, paths and log lines, so they are kept short and plain.
/// The names a matrix task's expansions get (`train.0`, ...) obey it too.
pub const MAX_TASK_NAME_LEN: usize = 64;

/// The largest workflow file accepted: far above any written by hand (a thousand tasks fit in
/// a tenth of it), and small enough that a request carrying it, JSON-escaped, stays well inside
/// the daemon's body limit. Clients check it before sending.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// The most tasks one workflow may have. Each task is a job, queued in one transaction and
/// looked at by every scheduling pass; a generated file of ten thousand tasks is more likely a
/// mistake than a plan, and a larger sweep can be several workflows. Counted after matrices
/// are expanded: each combination is a task.
pub const MAX_TASKS: usize = 1000;

/// A parsed, checked workflow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowSpec {
    pub name: String,
    /// Admit all tasks at once or none (gang admission).
    pub atomic: bool,
    /// The default priority of its tasks; `None` leaves the daemon's default.
    pub priority: Option<i64>,
    /// In the order written, a matrix task's expansions in its place in combination order.
    pub tasks: Vec<TaskSpec>,
}

/// One task of a workflow, normalised: defaults filled in, units parsed, the command expanded.
/// One combination of a matrix task is a task of its own, named `<task>.<i>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub name: String,
    /// The argv to run. A string in the file becomes `["sh", "-c", string]`. For a matrix
    /// task's expansion, with its `{name}` placeholders filled from [`TaskSpec::params`].
    pub command: Vec<String>,
    /// `gpus` whole GPUs; with `gpu_mem`, that much memory on each of `gpus` shared GPUs (one
    /// when `gpus` is not given), as `baton submit` reads `--gpus` and `--gpu-mem`.
    pub request: ResourceRequest,
    /// Cores and the machine's memory (`cpus`, `mem`), where the task says; the daemon fills
    /// in its defaults for the rest ([`TaskSpec::request_with`]).
    #[serde(default)]
    pub cpus: Option<u32>,
    #[serde(default)]
    pub mem: Option<u64>,
    pub time_limit: Option<Millis>,
    /// Names of the tasks this one runs after, repeats removed; a matrix task named in the file
    /// is here as all of its expansions.
    pub after: Vec<String>,
    pub retries: u32,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub priority: Option<i64>,
    /// Names of tasks to place on the same node as this one (matrix tasks expanded, as in
    /// `after`).
    pub colocate_with: Vec<String>,
    /// Where the task's name is written in the file (1-based), for messages about it later. For
    /// a matrix task's expansions, where the matrix task's name is.
    pub line: usize,
    pub column: usize,
    /// The combination of a matrix task's expansion, in the order its parameters are written
    /// (for `BATON_PARAM_<NAME>`, [`crate::sweep::param_env`], and for showing); empty for a
    /// task without a matrix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Params,
    /// The name of the matrix task this one is an expansion of (`train` for `train.3`); `None`
    /// for a task without a matrix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix_of: Option<String>,
}

impl TaskSpec {
    /// Its whole request: the GPUs, and its cores and memory or else these defaults.
    pub fn request_with(&self, default_cpus: u32, default_mem: u64) -> ResourceRequest {
        self.request.with_host(
            self.cpus.unwrap_or(default_cpus),
            self.mem.unwrap_or(default_mem),
        )
    }

    fn at(&self) -> Location {
        Location {
            line: self.line,
            column: self.column,
        }
    }
}

impl WorkflowSpec {
    /// The position of the task called `name`.
    pub fn task_index(&self, name: &str) -> Option<usize> {
        self.tasks.iter().position(|task| task.name == name)
    }

    /// The dependency graph, with task `i` of the graph being `self.tasks[i]`. Always `Ok` for a
    /// spec from [`parse`]; a spec built by hand gets the same checks `parse` makes of `after`
    /// and `colocate_with`.
    pub fn dag(&self) -> Result<Dag, WorkflowError> {
        let index: HashMap<&str, usize> = self
            .tasks
            .iter()
            .enumerate()
            .map(|(i, task)| (task.name.as_str(), i))
            .collect();
        let known = || self.tasks.iter().map(|t| t.name.clone()).collect();
        let mut nodes = Vec::with_capacity(self.tasks.len());
        for task in &self.tasks {
            let mut after = Vec::with_capacity(task.after.len());
            for dep in &task.after {
                if *dep == task.name {
                    return Err(WorkflowError::SelfDependency {
                        task: task.name.clone(),
                        at: task.at(),
                    });
                }
                match index.get(dep.as_str()) {
                    Some(&i) => after.push(i),
                    None => {
                        return Err(WorkflowError::UnknownDependency {
                            task: task.name.clone(),
                            dep: dep.clone(),
                            known: known(),
                            at: task.at(),
                        });
                    }
                }
            }
            for other in &task.colocate_with {
                if *other == task.name {
                    return Err(WorkflowError::SelfColocate {
                        task: task.name.clone(),
                        at: task.at(),
                    });
                }
                if !index.contains_key(other.as_str()) {
                    return Err(WorkflowError::UnknownColocate {
                        task: task.name.clone(),
                        other: other.clone(),
                        known: known(),
                        at: task.at(),
                    });
                }
            }
            nodes.push(TaskNode {
                name: task.name.clone(),
                after,
            });
        }
        Dag::new(&nodes).map_err(|cycle| WorkflowError::Cycle {
            at: self.tasks[cycle.tasks[0]].at(),
            cycle: cycle.names_closed(),
        })
    }
}

/// Parses and checks a workflow file's text. The first problem found is returned; the checks
/// run in the order of the file's structure (its size, the YAML itself, including each matrix's
/// parameters and values, the workflow's keys and its number of tasks, written and then with
/// matrices expanded, each task's name, each task's own fields, the references between tasks
/// and their cycles, then each matrix task's commands), so the same file always gets the same
/// message.
pub fn parse(text: &str) -> Result<WorkflowSpec, WorkflowError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(WorkflowError::TooLarge { bytes: text.len() });
    }
    let blank = |line: &str| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---"
    };
    if text.lines().all(blank) {
        return Err(WorkflowError::EmptyFile);
    }
    let raw: RawWorkflow =
        yaml_serde::from_str(text).map_err(|e| WorkflowError::from_yaml(&e, text))?;

    let top = locate::top_level_keys(text);
    let key_at = |key: &str| {
        top.iter()
            .find(|(k, _)| k == key)
            .map(|(_, at)| *at)
            .unwrap_or(Location { line: 1, column: 1 })
    };
    if raw.name.trim().is_empty() {
        return Err(WorkflowError::EmptyName { at: key_at("name") });
    }
    // The name is part of every task's job name, shown in one-line listings.
    if raw.name.chars().any(char::is_control) {
        return Err(WorkflowError::BadName { at: key_at("name") });
    }
    let raw_tasks = raw.tasks.0;
    if raw_tasks.is_empty() {
        return Err(WorkflowError::NoTasks {
            at: key_at("tasks"),
        });
    }
    if raw_tasks.len() > MAX_TASKS {
        return Err(WorkflowError::TooManyTasks {
            count: raw_tasks.len(),
            at: key_at("tasks"),
        });
    }

    let positions = task_positions(text, &raw_tasks, key_at("tasks"));
    let counts: Vec<u64> = raw_tasks
        .iter()
        .map(|(_, task)| matrix::combinations(&task.matrix))
        .collect();
    let total = counts.iter().fold(0u64, |sum, &n| sum.saturating_add(n));
    if total > MAX_TASKS as u64 {
        // Only a matrix can make more tasks than are written; the largest (the first of equals)
        // is the one to shrink.
        let largest = (0..raw_tasks.len())
            .filter(|&i| !raw_tasks[i].1.matrix.0.is_empty())
            .max_by_key(|&i| (counts[i], Reverse(i)))
            .expect("more tasks than written come from a matrix");
        let at = positions[largest];
        return Err(WorkflowError::MatrixTooLarge {
            task: raw_tasks[largest].0.clone(),
            combinations: counts[largest],
            total,
            at: locate::task_field(text, at, "matrix").unwrap_or(at),
        });
    }

    let mut first_seen: HashMap<&str, usize> = HashMap::new();
    for (((name, task), &at), &count) in raw_tasks.iter().zip(&positions).zip(&counts) {
        let problem = task_name_problem(name).or_else(|| {
            if task.matrix.0.is_empty() {
                return None;
            }
            let longest = matrix::expanded_name(name, count - 1);
            (longest.len() > MAX_TASK_NAME_LEN).then(|| {
                format!(
                    "its matrix makes {count} tasks, named {name}.0 to {longest}, and {longest} \
                     is {} characters long; at most {MAX_TASK_NAME_LEN} are allowed",
                    longest.len()
                )
            })
        });
        if let Some(problem) = problem {
            return Err(WorkflowError::BadTaskName {
                name: name.clone(),
                problem,
                at,
            });
        }
        if let Some(first) = first_seen.insert(name, at.line) {
            return Err(WorkflowError::DuplicateTask {
                name: name.clone(),
                first_line: first,
                at,
            });
        }
    }
    // Every name in the expanded spec must be one task's: a written task may not have the name
    // of a matrix task's expansion. (Two matrix tasks' expansions cannot meet: their written
    // names differ, and `train.3` is split at its last dot.)
    let matrix_counts: HashMap<&str, u64> = raw_tasks
        .iter()
        .zip(&counts)
        .filter(|((_, task), _)| !task.matrix.0.is_empty())
        .map(|((name, _), &count)| (name.as_str(), count))
        .collect();
    for ((name, _), &at) in raw_tasks.iter().zip(&positions) {
        if let Some((matrix, last)) = matrix::expansion_of(name, &matrix_counts) {
            return Err(WorkflowError::MatrixNameTaken {
                name: name.clone(),
                matrix: matrix.to_string(),
                matrix_line: first_seen[matrix],
                last,
                at,
            });
        }
    }

    let mut written = Vec::with_capacity(raw_tasks.len());
    let mut matrices = Vec::with_capacity(raw_tasks.len());
    for ((name, mut task), at) in raw_tasks.into_iter().zip(positions) {
        matrices.push(std::mem::take(&mut task.matrix));
        written.push(task_spec(name, task, at)?);
    }
    // The references and cycles are checked among the tasks as written, so that a message names
    // what the file says; expanding keeps both (an edge to a matrix task becomes edges to all of
    // its tasks, which makes no cycle the written graph did not have).
    let mut spec = WorkflowSpec {
        name: raw.name,
        atomic: raw.atomic,
        priority: raw.priority,
        tasks: written,
    };
    spec.dag()?;
    if matrices.iter().any(|m: &RawMatrix| !m.0.is_empty()) {
        let written = std::mem::take(&mut spec.tasks);
        spec.tasks = matrix::expand(written.into_iter().zip(matrices).collect())?;
        debug_assert!(spec.dag().is_ok(), "expanding keeps the graph valid");
    }
    Ok(spec)
}

/// Where each parsed task is written. In a block-style file the keys found in the text are the
/// parsed tasks, one for one (repeats included, which is how a duplicate's second definition is
/// placed). Otherwise each is looked up by name, falling back to the `tasks:` line.
fn task_positions(text: &str, tasks: &[(String, RawTask)], tasks_at: Location) -> Vec<Location> {
    let written = locate::task_keys(text);
    let same_keys = written.len() == tasks.len()
        && written
            .iter()
            .zip(tasks)
            .all(|((key, _), (name, _))| key == name);
    if same_keys {
        return written.into_iter().map(|(_, at)| at).collect();
    }
    tasks
        .iter()
        .map(|(name, _)| {
            written
                .iter()
                .find(|(key, _)| key == name)
                .map_or(tasks_at, |(_, at)| *at)
        })
        .collect()
}

/// Why `name` cannot name a task, if it cannot: names must be 1 to 64 of `A-Z a-z 0-9 _ . -`.
fn task_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a task name must not be empty".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Some(format!(
            "{bad:?} is not allowed in a task name (only letters, digits, `_`, `.` and `-` are)"
        ));
    }
    if name.len() > MAX_TASK_NAME_LEN {
        return Some(format!(
            "the name is {} characters long; at most {MAX_TASK_NAME_LEN} are allowed",
            name.len()
        ));
    }
    None
}

/// Checks one task's own fields and normalises them.
fn task_spec(name: String, raw: RawTask, at: Location) -> Result<TaskSpec, WorkflowError> {
    let command = match raw.command {
        None => {
            return Err(WorkflowError::MissingCommand { task: name, at });
        }
        Some(RawCommand::Argv(argv)) => argv,
        Some(RawCommand::Shell(script)) => vec!["sh".into(), "-c".into(), script],
    };
    if command_is_empty(&command) {
        return Err(WorkflowError::EmptyCommand { task: name, at });
    }
    let bad = |field: &'static str, error: InputError| WorkflowError::BadInput {
        task: name.clone(),
        field,
        error,
        at,
    };
    input::check_command(&command).map_err(|e| bad("command", e))?;
    input::check_env(&raw.env).map_err(|e| bad("env", e))?;
    if let Some(cwd) = &raw.cwd {
        input::check_path(cwd).map_err(|e| bad("cwd", e))?;
    }
    let gpus = raw.gpus.unwrap_or(0);
    let request = match raw.gpu_mem {
        None => ResourceRequest::whole(gpus),
        Some(text) => match parse_size(&text) {
            // Memory without a count means one shared GPU.
            Ok(mem) => ResourceRequest::shared(gpus.max(1), mem),
            Err(error) => {
                return Err(WorkflowError::BadSize {
                    task: name,
                    field: "gpu_mem",
                    error,
                    at,
                });
            }
        },
    };
    let mem = match raw.mem.as_deref().map(parse_size) {
        None => None,
        Some(Ok(mem)) => Some(mem),
        Some(Err(error)) => {
            return Err(WorkflowError::BadSize {
                task: name,
                field: "mem",
                error,
                at,
            });
        }
    };
    if raw.cpus == Some(0) {
        return Err(bad("cpus", InputError::ZeroCpus));
    }
    let time_limit = match raw.time_limit.as_deref().map(parse_duration) {
        None => None,
        Some(Ok(ms)) => {
            input::check_time_limit(ms).map_err(|e| bad("time_limit", e))?;
            Some(ms)
        }
        Some(Err(error)) => {
            return Err(WorkflowError::BadDuration {
                task: name,
                error,
                at,
            });
        }
    };
    Ok(TaskSpec {
        command,
        request,
        cpus: raw.cpus,
        mem,
        time_limit,
        after: dedup_in_order(raw.after.0),
        retries: raw.retries,
        env: raw.env,
        cwd: raw.cwd,
        priority: raw.priority,
        colocate_with: dedup_in_order(raw.colocate_with.0),
        line: at.line,
        column: at.column,
        params: Params::new(),
        matrix_of: None,
        name,
    })
}

/// Whether a command has nothing to run: no program, or a blank one.
fn command_is_empty(command: &[String]) -> bool {
    let program = match command {
        [] => "",
        // For a shell command, the script is what must not be empty.
        [sh, dash_c, script] if sh == "sh" && dash_c == "-c" => script,
        [program, ..] => program,
    };
    program.trim().is_empty()
}

fn dedup_in_order(names: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        if !kept.contains(&name) {
            kept.push(name);
        }
    }
    kept
}
