//! Checks on what a process is to be started with, for a job and for a workflow's task alike: its
//! command, its environment, the text of its working directory and its time limit.
//!
//! The kernel cannot pass a NUL byte in an argument, an environment string or a path, and an
//! environment name ends at its first `=`: a job holding one would be queued, wait for its GPUs,
//! and only then fail to start. A time limit is added to clocks; one near `i64::MAX` overflows
//! them. So these are refused when the job arrives. Whether the directory exists is I/O, and the
//! daemon's to check; this module only judges values.
//!
//! Messages name no field: the caller puts its own name for it in front (`--time-limit: `,
//! `task train: time_limit: `), so one rule reads naturally in the CLI and in a workflow file.

use std::collections::BTreeMap;

use crate::model::Millis;
use crate::units::format_duration;

/// The longest time limit a job may ask for: a year. Longer than any real run, and small enough
/// that every clock it is added to (start + limit, now + limit, sums over a workflow's tasks)
/// stays far from overflowing.
pub const MAX_TIME_LIMIT_MS: Millis = 365 * 86_400_000;

/// [`MAX_TIME_LIMIT_MS`] as people type it.
pub const MAX_TIME_LIMIT_TEXT: &str = "365d";

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// `word` counts from 1, the program being word 1.
    #[error("word {word} contains a NUL byte, which no program can be given as an argument")]
    NulInCommand { word: usize },
    #[error("variable name {name:?} contains a NUL byte, which an environment cannot hold")]
    NulInEnvName { name: String },
    #[error("the value of {name:?} contains a NUL byte, which an environment cannot hold")]
    NulInEnvValue { name: String },
    #[error("a variable name is empty; a name is one or more characters other than `=` and NUL")]
    EmptyEnvName,
    #[error(
        "variable name {name:?} contains `=`, which would end the name there; a name is one or \
         more characters other than `=` and NUL"
    )]
    EqualsInEnvName { name: String },
    #[error("{path:?} contains a NUL byte, which no path can hold")]
    NulInPath { path: String },
    #[error("must be positive")]
    TimeLimitNotPositive,
    #[error(
        "{} is longer than the maximum of {MAX_TIME_LIMIT_TEXT}",
        format_duration(*ms)
    )]
    TimeLimitTooLong { ms: Millis },
    #[error("must be at least 1: every process needs a core to run on")]
    ZeroCpus,
}

/// A command's words may hold anything but NUL. (Whether it is empty is the caller's rule: a
/// workflow's `sh -c` script and a job's argv say it differently.)
pub fn check_command(argv: &[String]) -> Result<(), InputError> {
    match argv.iter().position(|word| word.contains('\0')) {
        Some(i) => Err(InputError::NulInCommand { word: i + 1 }),
        None => Ok(()),
    }
}

/// Every name is non-empty, without `=` or NUL; every value is without NUL.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), InputError> {
    for (name, value) in env {
        if name.is_empty() {
            return Err(InputError::EmptyEnvName);
        }
        if name.contains('\0') {
            return Err(InputError::NulInEnvName { name: name.clone() });
        }
        if name.contains('=') {
            return Err(InputError::EqualsInEnvName { name: name.clone() });
        }
        if value.contains('\0') {
            return Err(InputError::NulInEnvValue { name: name.clone() });
        }
    }
    Ok(())
}

/// A path as text: anything but NUL.
pub fn check_path(path: &str) -> Result<(), InputError> {
    if path.contains('\0') {
        return Err(InputError::NulInPath {
            path: path.to_string(),
        });
    }
    Ok(())
}

/// Positive, and at most [`MAX_TIME_LIMIT_MS`].
pub fn check_time_limit(ms: Millis) -> Result<(), InputError> {
    if ms <= 0 {
        Err(InputError::TimeLimitNotPositive)
    } else if ms > MAX_TIME_LIMIT_MS {
        Err(InputError::TimeLimitTooLong { ms })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::parse_duration;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn commands_may_hold_anything_but_nul() {
        assert_eq!(check_command(&words(&["echo", "ü \t\n$x"])), Ok(()));
        assert_eq!(
            check_command(&words(&["echo", "a", "b\0"])),
            Err(InputError::NulInCommand { word: 3 })
        );
        let text = check_command(&words(&["a\0"])).unwrap_err().to_string();
        assert_eq!(
            text,
            "word 1 contains a NUL byte, which no program can be given as an argument"
        );
    }

    #[test]
    fn environment_names_and_values() {
        let env = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(check_env(&env(&[("PATH", "/bin"), ("X", "a=b")])), Ok(()));
        assert_eq!(check_env(&env(&[("", "x")])), Err(InputError::EmptyEnvName));
        assert_eq!(
            check_env(&env(&[("A=B", "x")])),
            Err(InputError::EqualsInEnvName { name: "A=B".into() })
        );
        assert_eq!(
            check_env(&env(&[("A\0", "x")])),
            Err(InputError::NulInEnvName { name: "A\0".into() })
        );
        assert_eq!(
            check_env(&env(&[("A", "x\0")])),
            Err(InputError::NulInEnvValue { name: "A".into() })
        );
        assert!(
            check_env(&env(&[("A=B", "x")]))
                .unwrap_err()
                .to_string()
                .contains("\"A=B\" contains `=`")
        );
    }

    #[test]
    fn paths_may_hold_anything_but_nul() {
        assert_eq!(check_path("/tmp/ünïcode dir"), Ok(()));
        assert_eq!(
            check_path("/tmp/a\0b"),
            Err(InputError::NulInPath {
                path: "/tmp/a\0b".into()
            })
        );
    }

    #[test]
    fn time_limits_are_positive_and_at_most_a_year() {
        assert_eq!(parse_duration(MAX_TIME_LIMIT_TEXT), Ok(MAX_TIME_LIMIT_MS));
        assert_eq!(check_time_limit(1), Ok(()));
        assert_eq!(check_time_limit(MAX_TIME_LIMIT_MS), Ok(()));
        assert_eq!(check_time_limit(0), Err(InputError::TimeLimitNotPositive));
        assert_eq!(check_time_limit(-5), Err(InputError::TimeLimitNotPositive));
        assert_eq!(
            check_time_limit(MAX_TIME_LIMIT_MS + 1),
            Err(InputError::TimeLimitTooLong {
                ms: MAX_TIME_LIMIT_MS + 1
            })
        );
        assert_eq!(
            check_time_limit(i64::MAX).unwrap_err().to_string(),
            "106751991167d07h is longer than the maximum of 365d"
        );
    }
}
