//! A sweep file (`baton sweep submit FILE.yaml`): a sweep written down rather than typed as
//! flags. One top-level `sweep:` mapping holds what `baton submit --sweep/--sweep-file/--array`
//! and its options say, under the same names (`gpu_mem` for `--gpu-mem`), so that the file and
//! the flags mean the same:
//!
//! ```yaml
//! sweep:
//!   name: lr-bs
//!   command: python train.py --lr {lr} --bs {bs}
//!   parameters:          # the Cartesian product, the last varying fastest (as --sweep)
//!     lr: [1e-4, 3e-4]
//!     bs: [32, 64]
//!   gpus: 1
//!   max_parallel: 2
//!   rank_by: val_acc
//! ```
//!
//! Exactly one of `parameters` (a mapping from names to lists of values), `runs` (a list of
//! mappings, one run each, as the lines of `--sweep-file`) or `array` (Slurm's syntax, as
//! `--array`). `command` is a list (the program and its arguments, run without a shell, as
//! `baton submit -- CMD ARGS` runs them) or a string, run by `sh -c` (as in workflow files).
//! Values are their text as written (`1e-4` stays `1e-4`), in placeholders and in
//! `BATON_PARAM_<NAME>`.
//!
//! Pure, like the rest of [`crate::sweep`]: [`parse`] turns the text into a [`SweepFile`] or one
//! [`SweepFileError`] that says where (line and column, always) and what. It reads the YAML as
//! workflow files are read (the same crate, the same translation of the parser's errors, keys
//! placed in the text by [`crate::workflow::locate`]); unknown keys are errors that list the
//! known ones. How many runs a sweep may have (`[sweeps] max_runs`) is the daemon's to say.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::{Params, SweepError, compare, fill, parse_array};
use crate::input;
use crate::model::Millis;
use crate::units::{format_size, parse_duration, parse_size};
use crate::workflow::locate::{self, indentation};
use crate::workflow::{Location, RawCommand, WorkflowError};

use super::params_yaml::{Label, ParamName, ParamValue, ParamValues};

/// What this file's messages call a parameter.
static PARAMETER: Label = Label {
    noun: "parameter",
    list: "a list of values, e.g. [1e-4, 3e-4]",
    empty: "a parameter needs at least one value, e.g. [1e-4, 3e-4]",
    nul: "a parameter's value must not contain a NUL byte",
};

/// The largest sweep file read: as `--sweep-file` (10,000 runs of a few parameters fit in a
/// tenth of it), well inside the daemon's body limit.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// The keys a `sweep:` mapping may have, in the order the documentation gives them.
pub const KEYS: &[&str] = &[
    "name",
    "command",
    "parameters",
    "runs",
    "array",
    "gpus",
    "gpu_mem",
    "cpus",
    "mem",
    "time_limit",
    "retries",
    "priority",
    "env",
    "cwd",
    "max_parallel",
    "rank_by",
    "on_failure",
    "notify_each",
    "stop_on",
    "wake_on",
    "wake_when",
    "note_when",
    "stop_when",
    "wake_every",
];

/// A parsed, checked sweep file: what `baton submit`'s flags would have said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweepFile {
    /// `--name`: the sweep's name and its runs' `NAME[INDEX]` (default: the program's name).
    pub name: Option<String>,
    /// The argv template: a string in the file is `["sh", "-c", string]`.
    pub command: Vec<String>,
    pub runs: FileRuns,
    pub gpus: u32,
    pub gpu_mem: Option<u64>,
    pub cpus: Option<u32>,
    pub mem: Option<u64>,
    pub time_limit: Option<Millis>,
    pub retries: u32,
    pub priority: i64,
    pub env: BTreeMap<String, String>,
    /// As written; a relative directory is the file's caller's to resolve.
    pub cwd: Option<String>,
    pub max_parallel: Option<u32>,
    pub rank_by: Option<String>,
    /// `continue` or `stop`.
    pub on_failure: Option<String>,
    pub notify_each: bool,
    /// `--stop-on`: the mid-run detectors that end a run as failed (names checked).
    pub stop_on: Vec<String>,
    /// Each run's milestones, as `--wake-on`, `--wake-when`, `--note-when` and `--stop-when`
    /// (checked), and `--wake-every`.
    pub wake_on: Vec<String>,
    pub wake_when: Vec<String>,
    pub note_when: Vec<String>,
    pub stop_when: Vec<String>,
    pub wake_every: Option<Millis>,
}

/// The runs a sweep file asks for: the forms of `--sweep`, `--sweep-file` and `--array`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileRuns {
    /// `parameters:`, in the order written: the Cartesian product, the last fastest.
    Grid(Vec<(String, Vec<String>)>),
    /// `runs:`, each run's parameters in the order written.
    Runs(Vec<Params>),
    /// `array:`, Slurm's syntax (checked).
    Array(String),
}

/// What is wrong with a sweep file, and where (1-based; `1:1` when it is the whole file).
/// Shown as `LINE:COL: message`; the caller puts the file's name in front.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct SweepFileError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl SweepFileError {
    fn at(at: Location, message: impl Into<String>) -> Self {
        SweepFileError {
            line: at.line,
            column: at.column,
            message: message.into(),
        }
    }
}

const START: Location = Location { line: 1, column: 1 };

/// Parses and checks a sweep file's text. The first problem found is returned, in the order of
/// the file's structure (its size, the YAML and each key's type, then the keys' values), so the
/// same file always gets the same message.
pub fn parse(text: &str) -> Result<SweepFile, SweepFileError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(SweepFileError::at(
            START,
            format!(
                "the file is {}; a sweep file may be at most {}",
                format_size(text.len() as u64),
                format_size(MAX_FILE_BYTES as u64)
            ),
        ));
    }
    let blank = |line: &str| {
        let line = line.trim();
        line.is_empty() || line.starts_with('#') || line == "---"
    };
    if text.lines().all(blank) {
        return Err(SweepFileError::at(
            START,
            "the file is empty: a sweep file is a `sweep:` mapping with at least `command` and \
             one of `parameters`, `runs` or `array`",
        ));
    }
    let raw: RawFile = yaml_serde::from_str(text).map_err(|e| yaml_error(&e, text))?;
    let raw = raw.sweep;

    let sweep_at = locate::top_level_keys(text)
        .into_iter()
        .find(|(k, _)| k == "sweep")
        .map_or(START, |(_, at)| at);
    let keys = locate::keys_under(text, "sweep");
    let key_at = |key: &str| {
        keys.iter()
            .find(|(k, _)| k == key)
            .map_or(sweep_at, |(_, at)| *at)
    };
    let bad =
        |key: &str, message: String| SweepFileError::at(key_at(key), format!("{key}: {message}"));

    if let Some(name) = &raw.name
        && (name.trim().is_empty() || name.chars().any(char::is_control))
    {
        return Err(bad(
            "name",
            "the name must not be empty and must be printable (no control characters)".into(),
        ));
    }
    let command = match raw.command {
        None => {
            return Err(SweepFileError::at(
                sweep_at,
                "sweep: missing `command` (a list of strings, or a string run by `sh -c`)",
            ));
        }
        Some(RawCommand::Argv(argv)) => argv,
        Some(RawCommand::Shell(script)) => vec!["sh".into(), "-c".into(), script],
    };
    let program = match command.as_slice() {
        [sh, dash_c, script] if sh == "sh" && dash_c == "-c" => script.as_str(),
        [program, ..] => program.as_str(),
        [] => "",
    };
    if program.trim().is_empty() {
        return Err(bad("command", "the command is empty".into()));
    }
    input::check_command(&command).map_err(|e| bad("command", e.to_string()))?;

    let mut given: Vec<&str> = [
        ("parameters", raw.parameters.is_some()),
        ("runs", raw.runs.is_some()),
        ("array", raw.array.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key))
    .collect();
    // The one written last is the one refused.
    given.sort_by_key(|key| {
        let at = key_at(key);
        (at.line, at.column)
    });
    let runs = match given.as_slice() {
        [] => {
            return Err(SweepFileError::at(
                sweep_at,
                "sweep: give one of `parameters` (a mapping from names to lists of values), \
                 `runs` (a list of mappings, one per run) or `array` (e.g. \"0-99%4\")",
            ));
        }
        [_] => {
            if let Some(axes) = raw.parameters {
                FileRuns::Grid(axes.0)
            } else if let Some(runs) = raw.runs {
                FileRuns::Runs(runs.0)
            } else {
                FileRuns::Array(raw.array.unwrap_or_default())
            }
        }
        [first, second, ..] => {
            return Err(bad(
                second,
                format!("give only one of `parameters`, `runs` or `array`; `{first}` is given too"),
            ));
        }
    };
    let mut cap = None;
    if let FileRuns::Array(spec) = &runs {
        let array = parse_array(spec, u64::MAX).map_err(|e| {
            bad(
                "array",
                match e {
                    SweepError::Array(_) => format!(
                        "cannot read {spec:?}: expected START-END[:STEP][%MAX] or a list of \
                         them, e.g. 0-99, 1-9:2, 0-15%4, 1,3,5-7"
                    ),
                    other => other.to_string(),
                },
            )
        })?;
        cap = array.max_parallel;
    }

    let size = |key: &str, text: &Option<String>| -> Result<Option<u64>, SweepFileError> {
        text.as_deref()
            .map(|t| parse_size(t).map_err(|e| bad(key, e.to_string())))
            .transpose()
    };
    let gpu_mem = size("gpu_mem", &raw.gpu_mem)?;
    let mem = size("mem", &raw.mem)?;
    let time_limit = match &raw.time_limit {
        Some(t) => {
            let ms = parse_duration(t).map_err(|e| bad("time_limit", e.to_string()))?;
            input::check_time_limit(ms).map_err(|e| bad("time_limit", e.to_string()))?;
            Some(ms)
        }
        None => None,
    };
    input::check_env(&raw.env).map_err(|e| bad("env", e.to_string()))?;
    if let Some(cwd) = &raw.cwd {
        input::check_path(cwd).map_err(|e| bad("cwd", e.to_string()))?;
    }
    match (cap, raw.max_parallel) {
        (_, Some(0)) => return Err(bad("max_parallel", "must be at least 1".into())),
        (Some(a), Some(b)) if a != b => {
            return Err(bad(
                "max_parallel",
                format!("{b} disagrees with the array's %{a}; give one"),
            ));
        }
        _ => {}
    }
    if let Some(rank_by) = &raw.rank_by {
        compare::parse_rank_by(rank_by).map_err(|_| {
            bad(
                "rank_by",
                format!(
                    "cannot read {rank_by:?}: expected METRIC, METRIC:max or METRIC:min, e.g. \
                     val_acc, loss:min"
                ),
            )
        })?;
    }
    if let Some(on_failure) = &raw.on_failure
        && !matches!(on_failure.as_str(), "continue" | "stop")
    {
        return Err(bad(
            "on_failure",
            format!("{on_failure:?}: use continue (the default) or stop"),
        ));
    }
    for name in &raw.stop_on {
        if crate::midrun::Detector::ALL
            .iter()
            .all(|d| d.as_str() != name.as_str())
        {
            let known: Vec<&str> = crate::midrun::Detector::ALL
                .iter()
                .map(|d| d.as_str())
                .collect();
            return Err(bad(
                "stop_on",
                format!(
                    "{name:?}: no such detector (there are: {})",
                    known.join(", ")
                ),
            ));
        }
    }
    crate::midrun::Milestones::parse(crate::midrun::AskedMilestones {
        wake_on: &raw.wake_on,
        wake_when: &raw.wake_when,
        note_when: &raw.note_when,
        stop_when: &raw.stop_when,
    })
    .map_err(|e| {
        let key = ["wake_on", "wake_when", "note_when", "stop_when"]
            .into_iter()
            .find(|key| e.contains(&format!("--{}", key.replace('_', "-"))))
            .unwrap_or("wake_on");
        bad(key, e)
    })?;
    let wake_every = match &raw.wake_every {
        Some(text) => Some(
            crate::units::parse_duration(text)
                .map_err(|e| bad("wake_every", format!("{text:?}: {e}")))?,
        ),
        None => None,
    };
    check_placeholders(text, &command, &runs, key_at("command"), key_at("runs"))?;

    Ok(SweepFile {
        name: raw.name,
        command,
        runs,
        gpus: raw.gpus.unwrap_or(0),
        gpu_mem,
        cpus: raw.cpus,
        mem,
        time_limit,
        retries: raw.retries.unwrap_or(0),
        priority: raw.priority.unwrap_or(0),
        env: raw.env,
        cwd: raw.cwd,
        max_parallel: raw.max_parallel,
        rank_by: raw.rank_by,
        on_failure: raw.on_failure,
        notify_each: raw.notify_each,
        stop_on: raw.stop_on,
        wake_on: raw.wake_on,
        wake_when: raw.wake_when,
        note_when: raw.note_when,
        stop_when: raw.stop_when,
        wake_every,
    })
}

/// Every `{name}` of the command is a parameter of every run (or `{index}`, each run's index),
/// as the daemon will fill them: a typo queues nothing. Placed at `command:`, or for explicit
/// runs at the run that lacks the parameter.
fn check_placeholders(
    text: &str,
    command: &[String],
    runs: &FileRuns,
    command_at: Location,
    runs_at: Location,
) -> Result<(), SweepFileError> {
    let with_index = |mut params: Params| {
        if !params.iter().any(|(n, _)| n == "index") {
            params.push(("index".into(), "0".into()));
        }
        params
    };
    let problem = |e: SweepError| match e {
        SweepError::UnknownPlaceholder { name, known, .. } => format!(
            "command: {{{name}}} is no parameter of this sweep (it has {known}); write {{{{ and \
             }}}} for literal braces"
        ),
        SweepError::Unclosed { .. } => {
            "command: a `{` is never closed; write {{ for a literal brace".to_string()
        }
        other => format!("command: {other}"),
    };
    match runs {
        FileRuns::Grid(axes) => {
            let params = axes
                .iter()
                .map(|(n, _)| (n.clone(), String::new()))
                .collect();
            fill(command, &with_index(params))
                .map(drop)
                .map_err(|e| SweepFileError::at(command_at, problem(e)))
        }
        FileRuns::Array(_) => fill(command, &with_index(Vec::new()))
            .map(drop)
            .map_err(|e| SweepFileError::at(command_at, problem(e))),
        FileRuns::Runs(list) => {
            let items = list_items(text, runs_at);
            for (i, params) in list.iter().enumerate() {
                if let Err(e) = fill(command, &with_index(params.clone())) {
                    let at = items
                        .get(i)
                        .copied()
                        .filter(|_| items.len() == list.len())
                        .unwrap_or(runs_at);
                    let message = match e {
                        SweepError::UnknownPlaceholder { name, .. } => format!(
                            "runs: run {i} has no parameter {name}, which the command's \
                             {{{name}}} needs (write {{{{ and }}}} for literal braces)"
                        ),
                        other => problem(other),
                    };
                    return Err(SweepFileError::at(at, message));
                }
            }
            Ok(())
        }
    }
}

/// Where each item of the block list under the key at `key` begins (`- lr: 1` lines). Empty
/// for a flow list (`runs: [{lr: 1}]`), whose callers fall back to the key.
fn list_items(text: &str, key: Location) -> Vec<Location> {
    let key_indent = key.column - 1;
    let mut items = Vec::new();
    let mut item_indent = None;
    for (index, line) in text.lines().enumerate().skip(key.line) {
        let body = line.trim_start_matches(' ');
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let indent = indentation(line);
        // A block list may sit at its key's own indentation (`runs:\n- a: 1`).
        if indent < key_indent || (indent == key_indent && !body.starts_with('-')) {
            break;
        }
        if !body.starts_with("- ") && body != "-" {
            continue;
        }
        if *item_indent.get_or_insert(indent) == indent {
            items.push(locate::at(index, indent));
        }
    }
    items
}

/// A parser error as `LINE:COL: message`, translated as a workflow file's are.
fn yaml_error(err: &yaml_serde::Error, text: &str) -> SweepFileError {
    match WorkflowError::from_yaml(err, text) {
        WorkflowError::Yaml { at, message } => SweepFileError::at(at.unwrap_or(START), message),
        other => SweepFileError::at(other.location().unwrap_or(START), other.to_string()),
    }
}

// The file as written.

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a sweep file: a mapping with one key, `sweep`"
)]
struct RawFile {
    sweep: RawSweep,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    default,
    deny_unknown_fields,
    expecting = "a sweep: a mapping with `command`, one of `parameters`, `runs` or `array`, and \
                 optionally name, gpus, gpu_mem, cpus, mem, time_limit, retries, priority, env, \
                 cwd, max_parallel, rank_by, on_failure, notify_each, stop_on, wake_on, \
                 wake_when, note_when, stop_when, wake_every"
)]
struct RawSweep {
    name: Option<String>,
    command: Option<RawCommand>,
    parameters: Option<RawParameters>,
    runs: Option<RawRuns>,
    array: Option<String>,
    gpus: Option<u32>,
    gpu_mem: Option<String>,
    cpus: Option<u32>,
    mem: Option<String>,
    time_limit: Option<String>,
    retries: Option<u32>,
    priority: Option<i64>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    max_parallel: Option<u32>,
    rank_by: Option<String>,
    on_failure: Option<String>,
    notify_each: bool,
    stop_on: Vec<String>,
    wake_on: Vec<String>,
    wake_when: Vec<String>,
    note_when: Vec<String>,
    stop_when: Vec<String>,
    wake_every: Option<String>,
}

/// `parameters:` in the order written, each with its values as text; checked as read, so that a
/// bad name, a repeat, an empty list or a value that is no scalar is placed at itself.
#[derive(Debug)]
struct RawParameters(Vec<(String, Vec<String>)>);

/// `runs:`: one mapping of parameters per run.
#[derive(Debug)]
struct RawRuns(Vec<Params>);

impl<'de> Deserialize<'de> for RawParameters {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ParametersVisitor;
        impl<'de> Visitor<'de> for ParametersVisitor {
            type Value = RawParameters;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a mapping from parameter names to lists of values, e.g. `lr: [1e-4, 3e-4]`",
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawParameters, A::Error> {
                let mut axes: Vec<(String, Vec<String>)> = Vec::new();
                while let Some(name) = map.next_key_seed(ParamName {
                    seen: axes.iter().map(|(n, _)| n.as_str()).collect(),
                    label: &PARAMETER,
                })? {
                    let values = map.next_value_seed(ParamValues(&PARAMETER))?;
                    axes.push((name, values));
                }
                if axes.is_empty() {
                    return Err(de::Error::custom(
                        "give at least one parameter, e.g. `lr: [1e-4, 3e-4]`",
                    ));
                }
                Ok(RawParameters(axes))
            }
        }
        deserializer.deserialize_map(ParametersVisitor)
    }
}

impl<'de> Deserialize<'de> for RawRuns {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RunsVisitor;
        impl<'de> Visitor<'de> for RunsVisitor {
            type Value = RawRuns;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a list of runs, each a mapping of parameters, e.g. `- {lr: 3e-4, bs: 32}`",
                )
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawRuns, A::Error> {
                let mut runs = Vec::new();
                while let Some(Run(params)) = seq.next_element()? {
                    runs.push(params);
                }
                if runs.is_empty() {
                    return Err(de::Error::custom("the list of runs is empty"));
                }
                Ok(RawRuns(runs))
            }
        }
        deserializer.deserialize_seq(RunsVisitor)
    }
}

/// One run of `runs:`: its parameters, in the order written.
struct Run(Params);

impl<'de> Deserialize<'de> for Run {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RunVisitor;
        impl<'de> Visitor<'de> for RunVisitor {
            type Value = Run;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a run: a mapping of parameters to values, e.g. `{lr: 3e-4, bs: 32}`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Run, A::Error> {
                let mut params: Params = Vec::new();
                while let Some(name) = map.next_key_seed(ParamName {
                    seen: params.iter().map(|(n, _)| n.as_str()).collect(),
                    label: &PARAMETER,
                })? {
                    let value = map.next_value_seed(ParamValue(&PARAMETER))?;
                    params.push((name, value));
                }
                Ok(Run(params))
            }
        }
        deserializer.deserialize_map(RunVisitor)
    }
}

#[cfg(test)]
mod tests;
