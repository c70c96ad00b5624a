//! The one error type of workflow parsing and validation, and the translation of the YAML
//! parser's errors into it.
//!
//! Every message says where (`line L, column C: `) whenever that is known, then what is wrong in
//! the user's terms. The caller (the daemon) prefixes the file name, so that the whole reads like
//! a compiler diagnostic: `pipeline.yaml: line 4, column 12: unknown field ...`.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{MAX_FILE_BYTES, MAX_TASKS, locate};
use crate::input::InputError;
use crate::sweep::SweepError;
use crate::units::{UnitError, format_size};

/// A 1-based position in the workflow file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkflowError {
    /// What the YAML parser refused: syntax errors, unknown keys, values of the wrong type,
    /// a missing `name`. `at` is `None` for the few errors the parser cannot place.
    #[error("{}{message}", at_prefix(.at))]
    Yaml {
        at: Option<Location>,
        message: String,
    },
    #[error(
        "the file is {} ({bytes} bytes); a workflow file may be at most {} ({MAX_FILE_BYTES} \
         bytes): split it into several workflows",
        format_size(*bytes as u64),
        format_size(MAX_FILE_BYTES as u64)
    )]
    TooLarge { bytes: usize },
    #[error("the file is empty: a workflow needs at least `name` and `tasks`")]
    EmptyFile,
    #[error("{at}: name: the workflow name must not be empty")]
    EmptyName { at: Location },
    #[error(
        "{at}: name: the workflow name must be printable: no control characters such as NUL or \
         a line break"
    )]
    BadName { at: Location },
    #[error("{at}: tasks: a workflow needs at least one task")]
    NoTasks { at: Location },
    #[error(
        "{at}: tasks: the workflow has {count} tasks; at most {MAX_TASKS} are allowed in one \
         workflow: split it into several workflows"
    )]
    TooManyTasks { count: usize, at: Location },
    /// More tasks than [`MAX_TASKS`] once the matrices are expanded; `at` is the `matrix:` key
    /// of the largest matrix, the one to shrink or move to a workflow of its own.
    #[error(
        "{at}: task {task}: matrix: its {combinations} combinations make the workflow {total} \
         tasks; at most {MAX_TASKS} are allowed in one workflow: split it into several workflows"
    )]
    MatrixTooLarge {
        task: String,
        combinations: u64,
        total: u64,
        at: Location,
    },
    #[error("{at}: task {name:?}: {problem}")]
    BadTaskName {
        name: String,
        problem: String,
        at: Location,
    },
    #[error("{at}: task {name}: defined twice (first at line {first_line})")]
    DuplicateTask {
        name: String,
        first_line: usize,
        at: Location,
    },
    /// A written task whose name one of a matrix task's expansions would have.
    #[error(
        "{at}: task {name}: the name is taken: matrix task {matrix} (line {matrix_line}) makes \
         tasks {matrix}.0 to {matrix}.{last}; rename one of them"
    )]
    MatrixNameTaken {
        name: String,
        matrix: String,
        matrix_line: usize,
        last: u64,
        at: Location,
    },
    #[error("{at}: task {task}: missing `command` (a list of strings, or a string run by `sh -c`)")]
    MissingCommand { task: String, at: Location },
    #[error("{at}: task {task}: command: the command is empty")]
    EmptyCommand { task: String, at: Location },
    #[error("{at}: task {task}: {field}: {error}")]
    BadSize {
        task: String,
        field: &'static str,
        error: UnitError,
        at: Location,
    },
    #[error("{at}: task {task}: time_limit: {error}")]
    BadDuration {
        task: String,
        error: UnitError,
        at: Location,
    },
    /// A value no process can be started with (see [`crate::input`]); `field` is its key.
    #[error("{at}: task {task}: {field}: {error}")]
    BadInput {
        task: String,
        field: &'static str,
        error: InputError,
        at: Location,
    },
    /// A matrix task's command with a `{name}` that is none of its parameters, or a `{` never
    /// closed ([`crate::sweep::fill`]'s errors).
    #[error("{at}: task {task}: {error}")]
    Placeholder {
        task: String,
        error: SweepError,
        at: Location,
    },
    #[error("{at}: task {task}: after: no task named {dep:?} (tasks: {})", list_names(.known))]
    UnknownDependency {
        task: String,
        dep: String,
        known: Vec<String>,
        at: Location,
    },
    #[error("{at}: task {task}: after: a task cannot depend on itself")]
    SelfDependency { task: String, at: Location },
    /// `cycle` starts and ends with the same task: `[prep, train, eval, prep]`. `at` is where
    /// its first task is defined.
    #[error("{at}: dependency cycle: {}", cycle.join(" -> "))]
    Cycle { cycle: Vec<String>, at: Location },
    #[error("{at}: task {task}: colocate_with: no task named {other:?} (tasks: {})", list_names(.known))]
    UnknownColocate {
        task: String,
        other: String,
        known: Vec<String>,
        at: Location,
    },
    #[error("{at}: task {task}: colocate_with: a task is always with itself; name other tasks")]
    SelfColocate { task: String, at: Location },
}

impl WorkflowError {
    /// Where in the file the problem is, when known.
    pub fn location(&self) -> Option<Location> {
        use WorkflowError::*;
        match self {
            Yaml { at, .. } => *at,
            TooLarge { .. } | EmptyFile => None,
            EmptyName { at }
            | BadName { at }
            | NoTasks { at }
            | TooManyTasks { at, .. }
            | MatrixTooLarge { at, .. }
            | MatrixNameTaken { at, .. }
            | Placeholder { at, .. }
            | BadInput { at, .. }
            | BadTaskName { at, .. }
            | DuplicateTask { at, .. }
            | MissingCommand { at, .. }
            | EmptyCommand { at, .. }
            | BadSize { at, .. }
            | BadDuration { at, .. }
            | UnknownDependency { at, .. }
            | SelfDependency { at, .. }
            | Cycle { at, .. }
            | UnknownColocate { at, .. }
            | SelfColocate { at, .. } => Some(*at),
        }
    }

    /// Translates a parser error. `yaml_serde` renders its position inside the message
    /// (`... at line 4 column 12`, sometimes followed by more context); we move it to the front
    /// in our own form and keep the rest of its wording, which is already precise.
    /// `text` is the parsed source, used to place duplicate keys better than the parser does.
    pub(crate) fn from_yaml(err: &yaml_serde::Error, text: &str) -> Self {
        let mut message = err.to_string();
        let at = err.location().map(|loc| {
            // The message states the position unless it is the very start of the file.
            let marker = format!(" at line {} column {}", loc.line(), loc.column());
            if let Some(start) = message.find(&marker) {
                message.replace_range(start..start + marker.len(), "");
            }
            Location {
                line: loc.line(),
                column: loc.column(),
            }
        });
        let at = at.map(|at| match duplicate_key(&message) {
            Some(key) => locate::repeated_key(text, at, key).unwrap_or(at),
            None => at,
        });
        WorkflowError::Yaml {
            at,
            message: plain_type_names(&message),
        }
    }
}

/// The key of a "duplicate field `gpus`" message (after an optional `path: `).
fn duplicate_key(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("duplicate field `")?;
    rest.split_once('`').map(|(key, _)| key)
}

fn at_prefix(at: &Option<Location>) -> String {
    at.map(|at| format!("{at}: ")).unwrap_or_default()
}

/// serde names the Rust types it expected; people writing YAML think in numbers.
fn plain_type_names(message: &str) -> String {
    message
        .replace("expected u32", "expected a whole number >= 0")
        .replace("expected i64", "expected a whole number")
}

/// The known tasks for an "unknown task" message: all of them for a hand-written workflow, the
/// first few for a generated one with hundreds, so the message stays readable.
fn list_names(names: &[String]) -> String {
    const SHOWN: usize = 20;
    if names.len() <= SHOWN {
        names.join(", ")
    } else {
        format!(
            "{}, ... and {} more",
            names[..SHOWN].join(", "),
            names.len() - SHOWN
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_task_lists_are_shortened() {
        let known: Vec<String> = (0..25).map(|i| format!("t{i}")).collect();
        let err = WorkflowError::UnknownDependency {
            task: "t3".into(),
            dep: "x".into(),
            known,
            at: Location { line: 5, column: 3 },
        };
        let text = err.to_string();
        assert!(text.ends_with("t18, t19, ... and 5 more)"), "{text}");
        assert!(!text.contains("t20"), "{text}");
    }
}
