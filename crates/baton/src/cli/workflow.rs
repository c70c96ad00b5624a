//! `baton workflow submit FILE | status ID | cancel ID | list`: DAG workflows (DESIGN §6). The file is
//! read and checked here as the MCP server's `submit_workflow` does (`crate::edge::workflow`:
//! a wrong file is refused before anything is sent, with the daemon's own message), and sent
//! whole; the daemon checks it again with what only it knows.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::{UsageError, print_json};
use crate::api::{WorkflowRow, WorkflowView};
use crate::edge::connect::{self, client};
use crate::edge::{present, request, workflow};

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
    /// Every workflow, one row each: its state and how many of its tasks have ended.
    List,
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
        Command::List => {
            list(&client().workflows()?, json);
            Ok(ExitCode::SUCCESS)
        }
        Command::Cancel { id, force } => {
            let req = request::cancel_request(Vec::new(), force, &request::agent_context());
            show(&client().cancel_workflow(id, &req)?, json);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn submit(file: PathBuf, notify: Vec<String>, json: bool) -> anyhow::Result<ExitCode> {
    let text = workflow::read(&file, &file.display().to_string())
        .map_err(|e| UsageError(e.to_string()))?;
    let canonical = file
        .canonicalize()
        .map_err(|e| UsageError(format!("{}: {e}", file.display())))?;
    let base = canonical.parent().unwrap_or(Path::new("/"));
    let req = request::workflow_request(
        file.display().to_string(),
        text,
        base,
        notify,
        request::agent_context(),
    );
    let wf = connect::or_start_daemon(&client(), |c| c.submit_workflow(&req))?;
    if json {
        print_json(&wf);
    } else {
        println!("{}", wf.id);
    }
    eprintln!(
        "baton: {}; `baton workflow status {}` shows the DAG.\nbaton: {}",
        present::workflow_queued(&wf),
        wf.id,
        present::workflow_delivery_note(&wf)
    );
    Ok(ExitCode::SUCCESS)
}

fn show(wf: &WorkflowView, json: bool) {
    if json {
        print_json(wf);
        return;
    }
    let mut head = format!("workflow {} \"{}\" {}", wf.id, wf.name, wf.state);
    if wf.atomic && !wf.state.is_terminal() {
        head.push_str(match &wf.admitted_at {
            Some(_) => " (atomic, GPUs reserved)",
            None => " (atomic, waiting to be admitted whole)",
        });
    }
    if !wf.atomic || wf.state.is_terminal() {
        head.push_str(if wf.atomic { " (atomic)" } else { "" });
    }
    println!("{head}");
    println!("critical path: {}", wf.critical_path.join(" -> "));
    print!("{}", present::task_table(&wf.tasks));
}

fn list(rows: &[WorkflowRow], json: bool) {
    if json {
        print_json(&rows);
        return;
    }
    if rows.is_empty() {
        println!("no workflows (`baton workflow submit FILE` queues one)");
        return;
    }
    print!("{}", present::workflow_table(rows));
}
