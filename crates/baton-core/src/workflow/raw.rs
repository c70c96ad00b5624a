//! The workflow file exactly as written: the serde shapes the YAML is read into before checks.
//!
//! Kept apart from the public spec so that the file format (optional keys, a command as list or
//! string, tasks as an ordered mapping) can stay forgiving in form while the spec the daemon gets
//! is normalised. `deny_unknown_fields` everywhere: a typo such as `gpu: 1` must be an error, not
//! a task that silently asks for no GPU.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::sweep::params_yaml::{Label, ParamName, ParamValues};

/// What a workflow file's messages call a matrix's parameter.
static MATRIX_PARAMETER: Label = Label {
    noun: "matrix parameter",
    list: "a list of values",
    empty: "a matrix parameter needs at least one value",
    nul: "a matrix value must not contain a NUL byte",
};

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a workflow: a mapping with `name` and `tasks`"
)]
pub(crate) struct RawWorkflow {
    pub name: String,
    #[serde(default)]
    pub atomic: bool,
    #[serde(default)]
    pub priority: Option<i64>,
    /// Missing and empty are one error, reported by validation with a location.
    #[serde(default)]
    pub tasks: RawTasks,
}

/// The tasks in the order written (a map type would sort them or drop repeats; the order is what
/// people see in `baton workflow status`, and a repeated name must be reported, not merged).
#[derive(Debug, Default)]
pub(crate) struct RawTasks(pub Vec<(String, RawTask)>);

#[derive(Debug, Default, Deserialize)]
#[serde(
    default,
    deny_unknown_fields,
    expecting = "a task: a mapping with `command` and optionally gpus, gpu_mem, cpus, mem, time_limit, after, retries, env, cwd, priority, colocate_with, matrix"
)]
pub(crate) struct RawTask {
    /// Optional here so that its absence is reported as such, at the task's line.
    pub command: Option<RawCommand>,
    pub gpus: Option<u32>,
    /// Sizes and durations are read as text and parsed by `units`, whose errors say what a
    /// valid value looks like.
    pub gpu_mem: Option<String>,
    /// Cores, and the machine's memory, as `submit --cpus/--mem`.
    pub cpus: Option<u32>,
    pub mem: Option<String>,
    pub time_limit: Option<String>,
    pub after: NameList,
    pub retries: u32,
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub priority: Option<i64>,
    pub colocate_with: NameList,
    /// Empty when the task has none (the key is absent); a `matrix:` written with nothing in it
    /// is an error, not a plain task.
    pub matrix: RawMatrix,
}

/// `command: [python, train.py]` runs the program directly; `command: "make all"` runs the
/// string with `sh -c`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RawCommand {
    Argv(Vec<String>),
    Shell(String),
}

/// A list of task names. One name may be written without brackets (`after: prep`): it cannot
/// mean anything else, and it is the form people type first.
#[derive(Debug, Default)]
pub(crate) struct NameList(pub Vec<String>);

/// A task's `matrix:`: its parameters in the order written (the order of the product), each
/// with its values as text. Checked as it is read, so that a bad name, a repeat, an empty list
/// or a value that is not a scalar is placed by the parser at the key or value itself.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct RawMatrix(pub Vec<(String, Vec<String>)>);

impl<'de> Deserialize<'de> for RawTasks {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TasksVisitor;
        impl<'de> Visitor<'de> for TasksVisitor {
            type Value = RawTasks;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping from task names to tasks")
            }
            fn visit_unit<E: de::Error>(self) -> Result<RawTasks, E> {
                Ok(RawTasks::default()) // `tasks:` with nothing under it: "no tasks"
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawTasks, A::Error> {
                let mut tasks = Vec::new();
                while let Some((name, task)) = map.next_entry::<String, Option<RawTask>>()? {
                    tasks.push((name, task.unwrap_or_default()));
                }
                Ok(RawTasks(tasks))
            }
        }
        deserializer.deserialize_any(TasksVisitor)
    }
}

impl<'de> Deserialize<'de> for RawCommand {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CommandVisitor;
        impl<'de> Visitor<'de> for CommandVisitor {
            type Value = RawCommand;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of strings, or a string run by `sh -c`")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RawCommand, E> {
                Ok(RawCommand::Shell(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawCommand, A::Error> {
                let mut argv = Vec::new();
                while let Some(arg) = seq.next_element::<String>()? {
                    argv.push(arg);
                }
                Ok(RawCommand::Argv(argv))
            }
        }
        deserializer.deserialize_any(CommandVisitor)
    }
}

impl<'de> Deserialize<'de> for NameList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NamesVisitor;
        impl<'de> Visitor<'de> for NamesVisitor {
            type Value = NameList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of task names")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<NameList, E> {
                Ok(NameList(vec![s.to_string()]))
            }
            fn visit_unit<E: de::Error>(self) -> Result<NameList, E> {
                Ok(NameList::default()) // `after:` with nothing: no dependencies
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NameList, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    names.push(name);
                }
                Ok(NameList(names))
            }
        }
        deserializer.deserialize_any(NamesVisitor)
    }
}

impl<'de> Deserialize<'de> for RawMatrix {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MatrixVisitor;
        impl<'de> Visitor<'de> for MatrixVisitor {
            type Value = RawMatrix;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a matrix: a mapping from parameter names to lists of values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMatrix, A::Error> {
                let mut axes: Vec<(String, Vec<String>)> = Vec::new();
                while let Some(name) = map.next_key_seed(ParamName {
                    seen: axes.iter().map(|(n, _)| n.as_str()).collect(),
                    label: &MATRIX_PARAMETER,
                })? {
                    let values = map.next_value_seed(ParamValues(&MATRIX_PARAMETER))?;
                    axes.push((name, values));
                }
                if axes.is_empty() {
                    // `matrix:` or `matrix: {}`: more likely unfinished than meant as one task.
                    return Err(de::Error::custom(
                        "a matrix needs at least one parameter, e.g. `seed: [1, 2, 3]`",
                    ));
                }
                Ok(RawMatrix(axes))
            }
        }
        deserializer.deserialize_map(MatrixVisitor)
    }
}
