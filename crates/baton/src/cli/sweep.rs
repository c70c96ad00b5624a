//! `baton sweep submit FILE | status ID | list | cancel ID | wait ID`: sweeps and arrays as one
//! unit (issue 16). They are queued by `baton submit --array/--sweep/--sweep-file` or from a
//! sweep file (`sweep submit`, the same request the flags make); here is how to look at one,
//! stop one, and block until its comparison report is ready.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use baton_core::sweep::file::{self, FileRuns, MAX_FILE_BYTES, SweepFile};

use super::{UsageError, print_json};
use crate::api::{SweepRequest, SweepRuns, SweepView};
use crate::edge::connect::client;
use crate::edge::{present, request};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Queue the sweep a YAML file describes: a top-level `sweep:` with `command`, one of
    /// `parameters` (the product, as --sweep), `runs` (as --sweep-file) or `array`, and
    /// `baton submit`'s options under their names (gpus, gpu_mem, max_parallel, rank_by, ...).
    /// Prints the sweep id, as `baton submit --sweep` does.
    Submit {
        /// The sweep file. Its runs work in its directory unless it says `cwd` (relative to
        /// it), as a workflow file's tasks do.
        file: PathBuf,
        /// Where the comparison report goes (repeatable; default auto), as for `baton submit`.
        #[arg(long, value_name = "SPEC")]
        notify: Vec<String>,
        /// An idempotency key: submitting again with the same key returns the sweep the first
        /// submission queued (without it, one is made up for baton's own retries).
        #[arg(long, value_name = "KEY")]
        request_id: Option<String>,
    },
    /// A sweep's runs, one row each: parameters, state and final metrics, in the sweep's order;
    /// with --report, the comparison report instead.
    Status {
        /// The sweep id (printed by `baton submit --array/--sweep`).
        id: u64,
        /// Print the comparison report (as delivered at the end; so far, while runs remain).
        #[arg(long)]
        report: bool,
    },
    /// Every sweep, newest first, one line each with its counts.
    List,
    /// Cancel every run of a sweep that has not ended.
    Cancel {
        /// The sweep id.
        id: u64,
        /// Even runs another agent session submitted.
        #[arg(long)]
        force: bool,
    },
    /// Block until the sweep's last run has ended, then print its comparison report. Exits 0 if
    /// every run succeeded, 1 if not.
    Wait {
        /// The sweep id.
        id: u64,
        /// Give up after this long (e.g. 30m), exiting 124 with the sweep as it stands.
        #[arg(long, value_parser = baton_core::units::parse_duration, value_name = "DUR")]
        timeout: Option<i64>,
    },
}

pub fn run(command: Command, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        Command::Submit {
            file,
            notify,
            request_id,
        } => submit(&file, notify, request_id, json),
        Command::Status { id, report } => {
            let sweep = client().sweep(id)?;
            if json {
                print_json(&sweep);
            } else if report {
                print!("{}", clean(sweep.markdown.as_deref().unwrap_or("")));
            } else {
                show(&sweep);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List => {
            let sweeps = client().sweeps()?;
            if json {
                print_json(&sweeps);
            } else if sweeps.is_empty() {
                println!("no sweeps");
            } else {
                for sweep in &sweeps {
                    println!("{}", present::sweep_line(sweep));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Cancel { id, force } => {
            let req = request::cancel_request(Vec::new(), force, &request::agent_context());
            let sweep = client().cancel_sweep(id, &req)?;
            if json {
                print_json(&sweep);
            } else {
                println!("{}", present::sweep_line(&sweep));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Wait { id, timeout } => {
            let sweep = wait(id, timeout)?;
            if json {
                print_json(&sweep);
            } else if sweep.ended_at.is_some() {
                print!("{}", clean(sweep.markdown.as_deref().unwrap_or("")));
            } else {
                println!("{}", present::sweep_line(&sweep));
            }
            Ok(ExitCode::from(
                match (sweep.ended_at.is_some(), sweep.state.as_str()) {
                    (false, _) => 124,
                    (true, "succeeded") => 0,
                    (true, _) => 1,
                },
            ))
        }
    }
}

/// `baton sweep wait`: until the sweep ends or `timeout` passes. A daemon restarting meanwhile
/// is waited for (the runs survive it), as `baton wait` does, so that a restart is never
/// reported as the caller's timeout.
fn wait(id: u64, timeout: Option<i64>) -> anyhow::Result<SweepView> {
    let client = client();
    let deadline = timeout.map(|ms| Instant::now() + Duration::from_millis(ms.max(0) as u64));
    let mut reached = false;
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()).as_millis() as i64);
        match client.wait_sweep(id, left) {
            Ok(sweep) => return Ok(sweep),
            Err(ref e)
                if crate::edge::connect::waits_through_restart(&client, e, reached, deadline) =>
            {
                reached = true;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// `baton sweep submit FILE`: the file read and checked here (a mistake is `FILE:LINE:COL:
/// message`, exit 2, nothing sent), then the request `baton submit` would make of the same
/// options, sent the same way.
fn submit(
    path: &Path,
    notify: Vec<String>,
    request_id: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let shown = path.display().to_string();
    let text = read(path).map_err(|e| UsageError(format!("{shown}: {e}")))?;
    let spec = file::parse(&text).map_err(|e| UsageError(format!("{shown}:{e}")))?;
    let dir = path
        .canonicalize()
        .map_err(|e| UsageError(format!("{shown}: {e}")))?
        .parent()
        .unwrap_or(Path::new("/"))
        .to_path_buf();
    let req = sweep_request(spec, &shown, &dir, notify, request_id)?;
    super::submit::send_sweep(&req, json).map(|()| ExitCode::SUCCESS)
}

/// A sweep file's text, bounded: a pipe or a file still growing has no size to trust.
fn read(path: &Path) -> std::io::Result<String> {
    let size = std::fs::metadata(path)?.len();
    if size > MAX_FILE_BYTES as u64 {
        return Err(std::io::Error::other(format!(
            "the file is {}; a sweep file may be at most {}",
            baton_core::units::format_size(size),
            baton_core::units::format_size(MAX_FILE_BYTES as u64)
        )));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// The request for a parsed sweep file: what `baton submit` makes of the same options, with
/// the runs' working directory the file's (`dir`), or its `cwd` taken from there.
fn sweep_request(
    spec: SweepFile,
    shown: &str,
    dir: &Path,
    notify: Vec<String>,
    request_id: Option<String>,
) -> anyhow::Result<SweepRequest> {
    let cwd = match &spec.cwd {
        Some(cwd) => dir.join(cwd),
        None => dir.to_path_buf(),
    };
    let job = request::Job {
        reservation: None,
        signal: None,
        command: spec.command,
        name: spec.name,
        gpus: spec.gpus,
        gpu_mem: spec.gpu_mem,
        cpus: spec.cpus,
        mem: spec.mem,
        priority: spec.priority,
        after: Vec::new(),
        after_any: Vec::new(),
        after_failed: Vec::new(),
        singleton: false,
        begin_at_ms: None,
        hold: false,
        stdin: None,
        stop_on: spec.stop_on,
        wake_on: spec.wake_on,
        wake_when: spec.wake_when,
        note_when: spec.note_when,
        stop_when: spec.stop_when,
        wake_every_ms: spec.wake_every,
        time_limit_ms: spec.time_limit,
        retries: spec.retries,
        tags: Default::default(),
        notify,
        request_id,
        cwd,
        env: spec.env,
    };
    let job = request::submit_request(job, request::agent_context())
        .map_err(|e| UsageError(format!("{shown}: {e}")))?;
    let runs = match spec.runs {
        FileRuns::Grid(axes) => SweepRuns::Grid { axes },
        FileRuns::Runs(runs) => SweepRuns::Runs {
            source: shown.to_string(),
            runs,
        },
        FileRuns::Array(spec) => SweepRuns::Array { spec },
    };
    Ok(SweepRequest {
        job,
        runs,
        max_parallel: spec.max_parallel,
        rank_by: spec.rank_by,
        notify_each: spec.notify_each,
        on_failure: spec.on_failure,
    })
}

/// Drops terminal control characters from text that quotes job output (the report is
/// sanitised already; this is the second belt, as for `baton report`).
fn clean(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect()
}

/// One row per run, in the sweep's order: the parameters, the state, the final metrics the
/// comparison has, and why a run failed or waits.
fn show(sweep: &SweepView) {
    println!("{}", present::sweep_line(sweep));
    let Some(comparison) = &sweep.comparison else {
        return;
    };
    let mut rows: Vec<&baton_core::sweep::compare::Row> = comparison.rows.iter().collect();
    rows.sort_by_key(|r| r.position);
    let mut header: Vec<String> = vec!["JOB".into()];
    header.extend(sweep.params.iter().map(|p| p.to_uppercase()));
    header.push("STATE".into());
    header.extend(comparison.metric_columns.iter().cloned());
    header.push("NOTE".into());
    let mut table: Vec<Vec<String>> = vec![header];
    for row in rows {
        let mut cells = vec![row.job.to_string()];
        for name in &sweep.params {
            let value = row
                .params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            cells.push(value);
        }
        cells.push(row.state.as_str().to_string());
        for value in &row.metrics {
            cells.push(value.clone().unwrap_or_else(|| "-".into()));
        }
        cells.push(row.cause.clone().unwrap_or_default());
        table.push(cells.into_iter().map(|c| clean(&c)).collect());
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|i| {
            table
                .iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in &table {
        let mut text = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        println!("{}", text.trim_end());
    }
}
