//! `baton workflow submit FILE | status ID | cancel ID`: DAG workflows (DESIGN §6). The file is
//! read here and sent whole; the daemon parses and checks it, so every client (CLI, MCP) gets
//! the same errors, with the file's name, line and column.

use std::path::PathBuf;
use std::process::ExitCode;

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

fn submit(file: PathBuf, notify: Vec<String>, json: bool) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&file)
        .map_err(|e| UsageError(format!("{}: {e}", file.display())))?;
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
        env: std::env::vars().collect(),
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
        "baton: queued workflow {} ({}, {} tasks{}); critical path {}. Each task's report is \
         delivered when it ends; `baton workflow status {}` shows the DAG.",
        wf.id,
        wf.name,
        wf.tasks.len(),
        if wf.atomic { ", atomic" } else { "" },
        wf.critical_path.join(" -> "),
        wf.id
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
