//! Matrix tasks (issue 16): a task with `matrix:` stands for one task per combination of its
//! parameters' values, as a CI matrix does. This module owns what that means: how many tasks a
//! matrix makes, what they are called, their commands with the `{name}` placeholders filled,
//! and a reference to a matrix task turned into references to all of its tasks.
//!
//! The expansion is the last step of `parse`, after the tasks have been checked as written
//! (their fields, their `after` and `colocate_with`, their cycles): a mistake is reported once,
//! in the names the file uses, and the graph, the critical path and the daemon then see only
//! plain tasks.
//!
//! Naming: the combinations are numbered from 0 in the order of [`sweep::product`] (the last
//! parameter varies fastest), and combination `i` of task `train` is the task `train.i`. The
//! number and not the values: a value may hold any character at any length, while the number
//! keeps the name short and within the task-name rules. The values are in
//! [`TaskSpec::params`], the written name in [`TaskSpec::matrix_of`].

use std::collections::HashMap;

use super::raw::RawMatrix;
use super::{MAX_TASKS, TaskSpec, WorkflowError, command_is_empty};
use crate::sweep;

/// How many tasks a task with this matrix is: the product of its lists' lengths, 1 without a
/// matrix. Saturating: the sum over the file is compared with [`MAX_TASKS`] before any task is
/// made, so a matrix of 10^30 combinations is refused, not attempted.
pub(super) fn combinations(matrix: &RawMatrix) -> u64 {
    matrix
        .0
        .iter()
        .fold(1u64, |n, (_, values)| n.saturating_mul(values.len() as u64))
}

/// The name of combination `index` of the matrix task `task`.
pub(super) fn expanded_name(task: &str, index: u64) -> String {
    format!("{task}.{index}")
}

/// The matrix task whose expansions include `name`, with its last index, if there is one.
/// `counts` holds the matrix tasks only. Only the canonical number counts (`train.01` is no
/// expansion's name, so it is free).
pub(super) fn expansion_of<'a>(
    name: &str,
    counts: &HashMap<&'a str, u64>,
) -> Option<(&'a str, u64)> {
    let (task, index) = name.rsplit_once('.')?;
    let canonical = !index.is_empty()
        && index.bytes().all(|b| b.is_ascii_digit())
        && (index == "0" || !index.starts_with('0'));
    if !canonical {
        return None;
    }
    let (&task, &count) = counts.get_key_value(task)?;
    // Too many digits for a u64 is beyond any count.
    let index: u64 = index.parse().ok()?;
    (index < count).then_some((task, count - 1))
}

/// The tasks with each matrix task replaced, in its place, by its tasks in combination order,
/// and every `after` and `colocate_with` that names a matrix task made to name all of its
/// tasks. A matrix task's own `after` and `colocate_with` go to each of its tasks unchanged
/// (then widened in the same way).
pub(super) fn expand(tasks: Vec<(TaskSpec, RawMatrix)>) -> Result<Vec<TaskSpec>, WorkflowError> {
    let mut groups: HashMap<String, Vec<String>> = HashMap::new();
    let mut expanded = Vec::with_capacity(tasks.len());
    for (task, matrix) in tasks {
        if matrix.0.is_empty() {
            // Its command is left exactly as written: braces in it are literal, as they were
            // before matrices existed.
            expanded.push(task);
            continue;
        }
        // `parse` checked the total against MAX_TASKS, and the parameters (names, repeats,
        // empty lists) were checked as they were read; `product` cannot refuse.
        let runs = sweep::product(&matrix.0, MAX_TASKS as u64)
            .expect("a matrix is checked before it is expanded");
        let mut names = Vec::with_capacity(runs.len());
        for (index, params) in (0u64..).zip(runs) {
            let command = sweep::fill(&task.command, &params).map_err(|error| {
                WorkflowError::Placeholder {
                    task: task.name.clone(),
                    error,
                    at: task.at(),
                }
            })?;
            let name = expanded_name(&task.name, index);
            // `command: ["{tool}", x]` with `tool: [""]`.
            if command_is_empty(&command) {
                return Err(WorkflowError::EmptyCommand {
                    task: name,
                    at: task.at(),
                });
            }
            names.push(name.clone());
            expanded.push(TaskSpec {
                name,
                command,
                params,
                matrix_of: Some(task.name.clone()),
                ..task.clone()
            });
        }
        groups.insert(task.name, names);
    }
    if groups.is_empty() {
        return Ok(expanded);
    }
    let widen = |names: &mut Vec<String>| {
        *names = names
            .drain(..)
            .flat_map(|name| groups.get(&name).cloned().unwrap_or_else(|| vec![name]))
            .collect();
    };
    for task in &mut expanded {
        widen(&mut task.after);
        widen(&mut task.colocate_with);
    }
    Ok(expanded)
}
