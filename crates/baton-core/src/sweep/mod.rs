//! Sweeps and arrays as people write them (issue 16): `--array 0-99:5%4` (Slurm's syntax),
//! `--sweep lr=1e-4,3e-4 --sweep bs=32,64` (the Cartesian product), a JSON-lines file of runs,
//! and the command template whose `{name}` placeholders each run fills in. Pure: the shell
//! reads files and queues the runs; here is what they are, or why there are none.
//!
//! When the runs end: [`compare`] (`compare`) turns them into one comparison report, ranked by a
//! metric, failures grouped by cause; [`broken`] (`early`) says whether a sweep that is still
//! running is clearly broken, so that the agent is woken before the last run ends.

pub mod compare;
pub mod early;
pub mod file;
pub(crate) mod params_yaml;

use std::collections::BTreeMap;

pub use compare::{
    ComparisonReport, FailureGroup, Goal, RankBy, Row, RunSummary, SweepEfficiency, SweepFacts,
    cause_text, compare, parse_rank_by,
};
pub use early::{Broken, EarlyWake, broken};

/// One run of a sweep: its parameters by name, in the order the sweep gave them.
pub type Params = Vec<(String, String)>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    #[error(
        "cannot read --array {0:?}: expected START-END[:STEP][%MAX] or a list of them, e.g. \
         0-99, 1-9:2, 0-15%4, 1,3,5-7"
    )]
    Array(String),
    #[error("cannot read --sweep {0:?}: expected NAME=VALUE[,VALUE...], e.g. lr=1e-4,3e-4")]
    Sweep(String),
    #[error("--sweep {0}: a parameter may be swept only once")]
    Repeated(String),
    #[error(
        "parameter name {0:?}: use letters, digits and `_`, starting with a letter or `_` (it \
         becomes `{{{0}}}` in the command and BATON_PARAM_<NAME> in the environment)"
    )]
    BadName(String),
    #[error("the sweep has no runs")]
    Empty,
    #[error("the sweep has {runs} runs, more than the {max} allowed (`[sweeps] max_runs`)")]
    TooMany { runs: u64, max: u64 },
    #[error("{source_name}:{line}:{column}: {message}")]
    File {
        source_name: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "word {word} of the command has the placeholder {{{name}}}, which is no parameter of \
         this sweep ({known}); write {{{{ and }}}} for literal braces"
    )]
    UnknownPlaceholder {
        word: usize,
        name: String,
        known: String,
    },
    #[error(
        "word {word} of the command has a `{{` that is never closed; write {{{{ for a literal brace"
    )]
    Unclosed { word: usize },
    #[error(
        "cannot read --rank-by {0:?}: expected METRIC, METRIC:max or METRIC:min, e.g. val_acc, \
         loss:min (a metric name is letters, digits and `_ . / -`)"
    )]
    RankBy(String),
}

/// An array: its indices, in order, and how many may run at once (`%K`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Array {
    pub indices: Vec<u32>,
    pub max_parallel: Option<u32>,
}

/// Reads `0-99`, `1-9:2`, `0-15%4`, `1,3,5-7%2` (Slurm's `--array`), refusing more than `max`
/// indices before making them.
pub fn parse_array(text: &str, max: u64) -> Result<Array, SweepError> {
    let err = || SweepError::Array(text.to_string());
    let (list, cap) = match text.trim().split_once('%') {
        Some((list, cap)) => (
            list,
            Some(cap.parse::<u32>().ok().filter(|&k| k > 0).ok_or_else(err)?),
        ),
        None => (text.trim(), None),
    };
    let mut ranges = Vec::new();
    let mut total: u64 = 0;
    for part in list.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((range, step)) => (
                range,
                step.parse::<u32>()
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(err)?,
            ),
            None => (part, 1),
        };
        let (start, end) = match range.split_once('-') {
            Some((a, b)) => (
                a.parse::<u32>().map_err(|_| err())?,
                b.parse::<u32>().map_err(|_| err())?,
            ),
            None => {
                let one = range.parse::<u32>().map_err(|_| err())?;
                (one, one)
            }
        };
        if end < start {
            return Err(err());
        }
        total += u64::from((end - start) / step) + 1;
        if total > max {
            return Err(SweepError::TooMany { runs: total, max });
        }
        ranges.push((start, end, step));
    }
    let mut indices = Vec::with_capacity(total as usize);
    for (start, end, step) in ranges {
        indices.extend((start..=end).step_by(step as usize));
    }
    indices.dedup();
    Ok(Array {
        indices,
        max_parallel: cap,
    })
}

/// One `--sweep NAME=V1,V2` as its name and values.
pub fn parse_sweep_flag(text: &str) -> Result<(String, Vec<String>), SweepError> {
    let (name, values) = text
        .split_once('=')
        .ok_or_else(|| SweepError::Sweep(text.to_string()))?;
    check_name(name)?;
    let values: Vec<String> = values.split(',').map(str::to_string).collect();
    if values.iter().any(|v| v.is_empty()) {
        return Err(SweepError::Sweep(text.to_string()));
    }
    Ok((name.to_string(), values))
}

/// A parameter name: letters, digits and `_`, not starting with a digit. Shared with workflow
/// matrices, whose parameters fill the same placeholders.
pub fn check_name(name: &str) -> Result<(), SweepError> {
    let mut chars = name.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(SweepError::BadName(name.to_string()))
    }
}

/// Every combination of the swept values (the last parameter varies fastest, as nested loops
/// written in the order given would), refusing more than `max` runs before making them.
pub fn product(axes: &[(String, Vec<String>)], max: u64) -> Result<Vec<Params>, SweepError> {
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in axes {
        if names.contains(&name.as_str()) {
            return Err(SweepError::Repeated(name.clone()));
        }
        names.push(name);
    }
    let runs = axes
        .iter()
        .try_fold(1u64, |n, (_, values)| n.checked_mul(values.len() as u64))
        .unwrap_or(u64::MAX);
    if axes.is_empty() || runs == 0 {
        return Err(SweepError::Empty);
    }
    if runs > max {
        return Err(SweepError::TooMany { runs, max });
    }
    let mut out: Vec<Params> = vec![Vec::new()];
    for (name, values) in axes {
        out = out
            .into_iter()
            .flat_map(|run| {
                values.iter().map(move |v| {
                    let mut run = run.clone();
                    run.push((name.clone(), v.clone()));
                    run
                })
            })
            .collect();
    }
    Ok(out)
}

/// The runs of a JSON-lines file (one object of parameters a line; blank lines skipped), named
/// `source_name` in messages. Values may be strings, numbers or booleans; a run's parameters
/// are in name order.
pub fn parse_runs_file(text: &str, source_name: &str, max: u64) -> Result<Vec<Params>, SweepError> {
    let mut runs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = |column: usize, message: String| SweepError::File {
            source_name: source_name.to_string(),
            line: i + 1,
            column,
            message,
        };
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| at(e.column(), e.to_string()))?;
        let serde_json::Value::Object(object) = value else {
            return Err(at(
                1,
                "expected an object of parameters, e.g. {\"lr\": 3e-4}".into(),
            ));
        };
        let mut params = Params::new();
        for (name, v) in object {
            check_name(&name).map_err(|e| at(1, e.to_string()))?;
            let text = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                other => {
                    return Err(at(
                        1,
                        format!("{name}: a value must be a string, number or boolean, not {other}"),
                    ));
                }
            };
            params.push((name, text));
        }
        // By name, whatever order the JSON reader keeps: the same file, the same runs.
        params.sort();
        runs.push(params);
        if runs.len() as u64 > max {
            return Err(SweepError::TooMany {
                runs: text.lines().filter(|l| !l.trim().is_empty()).count() as u64,
                max,
            });
        }
    }
    if runs.is_empty() {
        return Err(SweepError::Empty);
    }
    Ok(runs)
}

/// The command of one run: each `{name}` replaced by its value, `{{` and `}}` by braces. A
/// `${...}` (a shell's) is left alone, and so is a brace that does not hold a name. An unknown
/// name is an error naming the word, so that a typo (`{lrr}`) queues nothing.
pub fn fill(command: &[String], params: &Params) -> Result<Vec<String>, SweepError> {
    let values: BTreeMap<&str, &str> = params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    command
        .iter()
        .enumerate()
        .map(|(i, word)| fill_word(word, i + 1, &values))
        .collect()
}

fn fill_word(word: &str, n: usize, values: &BTreeMap<&str, &str>) -> Result<String, SweepError> {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(at) = rest.find(['{', '}']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("{{") {
            out.push('{');
            rest = after;
            continue;
        }
        if let Some(after) = tail.strip_prefix("}}") {
            out.push('}');
            rest = after;
            continue;
        }
        if let Some(after) = tail.strip_prefix('}') {
            out.push('}');
            rest = after;
            continue;
        }
        // `{`: a placeholder only when it holds a name; `${…}` is the shell's.
        let shell = out.ends_with('$');
        let Some(close) = tail.find('}') else {
            if shell || !tail[1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                out.push_str(tail);
                return Ok(out);
            }
            return Err(SweepError::Unclosed { word: n });
        };
        let name = &tail[1..close];
        let is_name = check_name(name).is_ok();
        if shell || !is_name {
            out.push_str(&tail[..=close]);
        } else {
            match values.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    return Err(SweepError::UnknownPlaceholder {
                        word: n,
                        name: name.to_string(),
                        known: if values.is_empty() {
                            "it has none".to_string()
                        } else {
                            values
                                .keys()
                                .map(|k| format!("{{{k}}}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        },
                    });
                }
            }
        }
        rest = &tail[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The environment a run gets: `BATON_PARAM_<NAME>` for each parameter (upper case).
pub fn param_env(params: &Params) -> Vec<(String, String)> {
    params
        .iter()
        .map(|(k, v)| (format!("BATON_PARAM_{}", k.to_ascii_uppercase()), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[&str]) -> Vec<String> {
        ws.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arrays_read_like_slurms() {
        let a = parse_array("0-4", 100).unwrap();
        assert_eq!((a.indices, a.max_parallel), (vec![0, 1, 2, 3, 4], None));
        let a = parse_array("1-9:2%3", 100).unwrap();
        assert_eq!((a.indices, a.max_parallel), (vec![1, 3, 5, 7, 9], Some(3)));
        assert_eq!(
            parse_array("1,3,5-7", 100).unwrap().indices,
            [1, 3, 5, 6, 7]
        );
        assert_eq!(parse_array("7", 100).unwrap().indices, [7]);
        for bad in ["", "a-b", "5-1", "0-9:0", "0-9%0", "0-9%x", "-3", "1,,2"] {
            assert!(
                matches!(parse_array(bad, 100), Err(SweepError::Array(_))),
                "{bad}"
            );
        }
        assert_eq!(
            parse_array("0-99999", 10_000).unwrap_err(),
            SweepError::TooMany {
                runs: 100_000,
                max: 10_000
            }
        );
    }

    #[test]
    fn sweeps_are_the_product_last_fastest() {
        let lr = parse_sweep_flag("lr=1e-4,3e-4").unwrap();
        let bs = parse_sweep_flag("bs=32,64").unwrap();
        let runs = product(&[lr.clone(), bs], 100).unwrap();
        let text: Vec<String> = runs
            .iter()
            .map(|r| {
                r.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert_eq!(
            text,
            [
                "lr=1e-4 bs=32",
                "lr=1e-4 bs=64",
                "lr=3e-4 bs=32",
                "lr=3e-4 bs=64"
            ]
        );
        assert_eq!(
            product(&[lr.clone(), lr.clone()], 100),
            Err(SweepError::Repeated("lr".into()))
        );
        assert_eq!(product(&[], 100), Err(SweepError::Empty));
        let big = ("x".to_string(), (0..101).map(|i| i.to_string()).collect());
        assert!(matches!(
            product(&[big], 100),
            Err(SweepError::TooMany { runs: 101, .. })
        ));
        for bad in ["lr", "lr=", "lr=1,,2", "1lr=3", "l-r=3"] {
            assert!(parse_sweep_flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_runs_file_is_one_object_a_line_with_line_and_column_on_errors() {
        let runs = parse_runs_file(
            "{\"lr\": 3e-4, \"bs\": 32}\n\n{\"lr\": \"1e-3\", \"warm\": true}\n",
            "runs.jsonl",
            10,
        )
        .unwrap();
        assert_eq!(
            runs[0],
            vec![("bs".into(), "32".into()), ("lr".into(), "0.0003".into())]
        );
        assert_eq!(
            runs[1],
            vec![("lr".into(), "1e-3".into()), ("warm".into(), "true".into())]
        );
        let e = parse_runs_file("{\"lr\": 1}\n{\"lr\": }\n", "runs.jsonl", 10).unwrap_err();
        assert!(e.to_string().starts_with("runs.jsonl:2:"), "{e}");
        let e = parse_runs_file("[1, 2]\n", "runs.jsonl", 10).unwrap_err();
        assert!(e.to_string().contains("expected an object"), "{e}");
        assert_eq!(parse_runs_file("\n \n", "r", 10), Err(SweepError::Empty));
        assert!(matches!(
            parse_runs_file("{}\n{}\n{}\n", "r", 2),
            Err(SweepError::TooMany { runs: 3, max: 2 })
        ));
    }

    #[test]
    fn placeholders_are_filled_and_a_typo_queues_nothing() {
        let params: Params = vec![("lr".into(), "3e-4".into()), ("bs".into(), "32".into())];
        let cmd = words(&[
            "python",
            "train.py",
            "--lr",
            "{lr}",
            "--out=runs/lr{lr}-bs{bs}",
        ]);
        assert_eq!(
            fill(&cmd, &params).unwrap(),
            words(&[
                "python",
                "train.py",
                "--lr",
                "3e-4",
                "--out=runs/lr3e-4-bs32"
            ])
        );
        // A shell's ${...}, braces that hold no name, and escapes are left as they mean.
        let cmd = words(&["sh", "-c", "echo ${HOME} {lr} {{lr}} {\"a\": 1} }"]);
        assert_eq!(
            fill(&cmd, &params).unwrap()[2],
            "echo ${HOME} 3e-4 {lr} {\"a\": 1} }"
        );
        let e = fill(&words(&["x", "{lrr}"]), &params).unwrap_err();
        assert_eq!(
            e.to_string(),
            "word 2 of the command has the placeholder {lrr}, which is no parameter of this \
             sweep ({bs}, {lr}); write {{ and }} for literal braces"
        );
        assert_eq!(
            fill(&words(&["{lr"]), &params),
            Err(SweepError::Unclosed { word: 1 })
        );
        assert_eq!(
            param_env(&params),
            [
                ("BATON_PARAM_LR".to_string(), "3e-4".to_string()),
                ("BATON_PARAM_BS".to_string(), "32".to_string())
            ]
        );
    }
}
