//! `baton workflow submit FILE | status ID | cancel ID`: DAG workflows (DESIGN §6). The file is
//! read here, checked with the parser the daemon uses (so a file too large, with too many tasks
//! or otherwise wrong is refused before anything is sent, with the daemon's own message), and
//! sent whole; the daemon parses and checks it again, with what only it knows (the GPUs, the
//! directories), so every client (CLI, MCP) gets the same errors, with the file's name, line
//! and column.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use baton_core::workflow::{self, MAX_FILE_BYTES, WorkflowError};

use super::{UsageError, client, output, print_json};
use crate::api::client::ClientError;
use crate::api::{AgentContext, WorkflowSubmitRequest, WorkflowView};
use crate::paths;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Queue a workflow file: its tasks run as jobs, in dependency order (all at once if
    /// `atomic: true`). Prints the workflow id.
    Submit {
        /// The workflow's YAML file.
        file: PathBuf,
        /// Where each task's report goes (repeatable; default auto), as for `baton submit`.
        #[arg(long, value_name = "SPEC")]
        notify: Vec<String>,
    },
    /// A workflow's tasks and their states.
    Status {
        /// The workflow id.
        id: u64,
    },
    /// Cancel every task of a workflow that has not ended.
    Cancel {
        /// The workflow id.
        id: u64,
        /// Even tasks another agent session submitted.
        #[arg(long)]
        force: bool,
    },
}

pub fn run(command: Command, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        Command::Submit { file, notify } => submit(file, notify, json),
        Command::Status { id } => {
            show(&client().workflow(id)?, json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Cancel { id, force } => {
            show(&client().cancel_workflow(id, force)?, json);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Why a workflow file is not sent. `shown` is the file as the user named it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("{shown}: {error}")]
    Unreadable {
        shown: String,
        error: std::io::Error,
    },
    #[error("{shown}: {error}")]
    Invalid { shown: String, error: WorkflowError },
}

/// Reads a workflow file and checks it as the daemon will ([`check`]). A file over the size
/// limit is refused from its size, unread.
pub(crate) fn read(file: &Path, shown: &str) -> Result<String, FileError> {
    let unreadable = |error| FileError::Unreadable {
        shown: shown.to_string(),
        error,
    };
    let too_large = |bytes: u64| FileError::Invalid {
        shown: shown.to_string(),
        error: WorkflowError::TooLarge {
            bytes: bytes as usize,
        },
    };
    let size = std::fs::metadata(file).map_err(unreadable)?.len();
    if size > MAX_FILE_BYTES as u64 {
        return Err(too_large(size));
    }
    // Bounded too: a pipe or a file still growing has no size to trust.
    let mut text = String::new();
    std::fs::File::open(file)
        .map_err(unreadable)?
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    check(shown, &text)?;
    Ok(text)
}

/// Checks a workflow's text with the daemon's parser: its size, its number of tasks, and
/// everything else the file alone decides.
pub(crate) fn check(shown: &str, text: &str) -> Result<(), FileError> {
    workflow::parse(text)
        .map(drop)
        .map_err(|error| FileError::Invalid {
            shown: shown.to_string(),
            error,
        })
}

fn submit(file: PathBuf, notify: Vec<String>, json: bool) -> anyhow::Result<ExitCode> {
    let text = read(&file, &file.display().to_string()).map_err(|e| UsageError(e.to_string()))?;
    let base = file
        .canonicalize()
        .map_err(|e| UsageError(format!("{}: {e}", file.display())))?
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "/".into());
    let req = WorkflowSubmitRequest {
        source: file.display().to_string(),
        text,
        base_dir: base,
        env: super::captured_env(),
        umask: Some(super::current_umask()),
        notify,
        context: AgentContext::from_env(),
    };
    let client = client();
    let wf = match client.submit_workflow(&req) {
        Err(ClientError::NotRunning { .. }) => {
            client.start_daemon(&paths::user_home())?;
            client.submit_workflow(&req)?
        }
        other => other?,
    };
    if json {
        print_json(&wf);
    } else {
        println!("{}", wf.id);
    }
    eprintln!(
        "baton: queued workflow {} ({}, {} tasks{}); critical path {}; `baton workflow status \
         {}` shows the DAG.\nbaton: {}",
        wf.id,
        wf.name,
        wf.tasks.len(),
        if wf.atomic { ", atomic" } else { "" },
        wf.critical_path.join(" -> "),
        wf.id,
        super::output::workflow_delivery_note(&wf)
    );
    Ok(ExitCode::SUCCESS)
}

fn show(wf: &WorkflowView, json: bool) {
    if json {
        print_json(wf);
        return;
    }
    let mut head = format!("workflow {} \"{}\" {}", wf.id, wf.name, wf.state);
    if wf.atomic && matches!(wf.state.as_str(), "queued" | "running") {
        head.push_str(match &wf.admitted_at {
            Some(_) => " (atomic, GPUs reserved)",
            None => " (atomic, waiting to be admitted whole)",
        });
    }
    if !wf.atomic || !matches!(wf.state.as_str(), "queued" | "running") {
        head.push_str(if wf.atomic { " (atomic)" } else { "" });
    }
    println!("{head}");
    println!("critical path: {}", wf.critical_path.join(" -> "));
    print!("{}", output::task_table(&wf.tasks));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    fn tasks(n: usize) -> String {
        let mut text = String::from("name: sweep\ntasks:\n");
        for i in 0..n {
            text.push_str(&format!("  t{i}: {{command: \"true\"}}\n"));
        }
        text
    }

    /// What the CLI and the MCP server refuse before sending (both call `read` or `check`).
    #[test]
    fn files_too_large_or_with_too_many_tasks_are_refused_before_sending() {
        let ok = file_with(&tasks(3));
        assert_eq!(read(ok.path(), "ok.yaml").unwrap(), tasks(3));

        let text = format!("{}{}", tasks(1), "#".repeat(5_000_000));
        let big = file_with(&text);
        let err = read(big.path(), "big.yaml").unwrap_err();
        assert!(
            matches!(
                &err,
                FileError::Invalid {
                    error: WorkflowError::TooLarge { bytes },
                    ..
                } if *bytes == text.len()
            ),
            "{err:?}"
        );
        let shown = format!(
            "big.yaml: the file is 4.8 MiB ({} bytes); a workflow file may be at most 1 MiB",
            text.len()
        );
        assert!(err.to_string().starts_with(&shown), "{err}");

        let many = file_with(&tasks(1001));
        let err = read(many.path(), "many.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with(
                "many.yaml: line 2, column 1: tasks: the workflow has 1001 tasks; at most 1000"
            ),
            "{err}"
        );
        let err = check("workflow", &tasks(1001)).unwrap_err().to_string();
        assert!(err.starts_with("workflow: line 2, column 1"), "{err}");

        let err = read(Path::new("/nonexistent/w.yaml"), "w.yaml").unwrap_err();
        assert!(matches!(err, FileError::Unreadable { .. }), "{err}");
    }
}
