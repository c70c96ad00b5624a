//! `baton status [ID...]`: the queue, or the named jobs, or the jobs its filters select. The
//! default view is bounded: every active job and the last few ended (`[daemon] recent` and
//! `recent_shown`), with a line that says how many more ended jobs there are. With `--all` or a
//! filter, every job that matches, fetched page by page. `FilterArgs` are shared with
//! `baton history`.

use std::process::ExitCode;

use super::{UsageError, print_json};
use crate::api::ListQuery;
use crate::edge::connect::client;
use crate::edge::{present, request};

/// The filters of `status` and `history`.
#[derive(Debug, Default, clap::Args)]
pub struct FilterArgs {
    /// Only jobs in these states (comma-separated or repeated): queued, running, succeeded,
    /// failed, cancelled, timeout, or active, ended.
    #[arg(long, value_name = "STATE")]
    pub state: Vec<String>,
    /// Only jobs whose name matches (a glob: `sweep-*`, `run-?`).
    #[arg(long, value_name = "GLOB")]
    pub name: Option<String>,
    /// Only jobs of these users (comma-separated or repeated).
    #[arg(long, value_name = "USER")]
    pub owner: Vec<String>,
    /// Only jobs not ended before this: a duration ago (`1d`, `90m`), a date (`2026-11-30`,
    /// midnight UTC) or an RFC 3339 time.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only jobs submitted at or before this (same forms as --since).
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,
    /// Only the tasks of this workflow.
    #[arg(long, value_name = "ID")]
    pub workflow: Option<u64>,
    /// At most this many jobs: the newest.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
}

impl FilterArgs {
    /// Whether any filter is given.
    pub fn any(&self) -> bool {
        !self.state.is_empty()
            || self.name.is_some()
            || !self.owner.is_empty()
            || self.since.is_some()
            || self.until.is_some()
            || self.workflow.is_some()
            || self.limit.is_some()
    }

    /// The listing query, checked here first so that a mistake exits 2 with its reason before
    /// anything is asked of the daemon.
    pub fn query(&self) -> Result<ListQuery, UsageError> {
        crate::history::filter::build(
            &self.state,
            self.name.as_deref(),
            &self.owner,
            self.since.as_deref(),
            self.until.as_deref(),
            self.workflow,
            None,
            crate::clock::now_ms(),
        )
        .map_err(|e| UsageError(e.to_string()))?;
        let joined = |v: &[String]| (!v.is_empty()).then(|| v.join(","));
        Ok(ListQuery {
            state: joined(&self.state),
            name: self.name.clone(),
            owner: joined(&self.owner),
            since: self.since.clone(),
            until: self.until.clone(),
            workflow: self.workflow,
            ..ListQuery::default()
        })
    }
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to show, by id, name or glob (default: queued, running and the last few ended jobs).
    #[arg(value_name = "ID|NAME")]
    ids: Vec<String>,
    /// Every job the daemon remembers, however long ago it ended.
    #[arg(long)]
    all: bool,
    /// Only the jobs this agent session submitted (Claude session, Codex thread or tmux pane;
    /// outside any, the jobs submitted outside any).
    #[arg(long)]
    mine: bool,
    /// Show each run of a sweep or array as its own row (by default a sweep is one line with
    /// its counts).
    #[arg(long)]
    expand: bool,
    #[command(flatten)]
    filters: FilterArgs,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    if !args.ids.is_empty() && (args.mine || args.all || args.filters.any()) {
        return Err(UsageError(
            "job ids name the jobs to show; drop --all, --mine and the filters, or the ids".into(),
        )
        .into());
    }
    let mut query = args.filters.query()?;
    query.all = args.all || args.filters.limit.is_some();
    if args.mine {
        query.session = Some(request::mine(&request::agent_context()));
    }
    let (mut jobs, more) = if args.ids.is_empty() {
        let limit = args.filters.limit.map(|l| l as usize);
        let page = client().list_all(&query, limit)?;
        (page.items, page.more_ended)
    } else {
        let ids =
            crate::edge::resolve::job_ids(&client(), &args.ids, crate::edge::resolve::Takes::Many)?;
        (client().list(&ids, false)?, None)
    };
    if args.ids.is_empty() {
        // Pages come newest first; the table reads oldest to newest, as it always has.
        jobs.sort_by_key(|j| j.id);
    }
    let narrowed = args.all || args.filters.any();
    if json {
        print_json(&jobs);
    } else if jobs.is_empty() {
        println!(
            "{}",
            if args.filters.any() {
                "no jobs match"
            } else {
                present::no_jobs(narrowed, args.mine)
            }
        );
        if let Some(n) = more.filter(|n| *n > 0) {
            println!("{}", present::more_ended(n));
        }
    } else {
        // A sweep is one line with its counts, unless asked to expand or named by its runs.
        let mut sweeps: Vec<u64> = Vec::new();
        if !args.expand && args.ids.is_empty() {
            for job in &jobs {
                if let Some(s) = job.sweep_id
                    && !sweeps.contains(&s)
                {
                    sweeps.push(s);
                }
            }
        }
        let mut lines: Vec<crate::api::SweepView> = if sweeps.is_empty() {
            Vec::new()
        } else {
            client()
                .sweeps()?
                .into_iter()
                .filter(|s| sweeps.contains(&s.id))
                .collect()
        };
        lines.sort_by_key(|s| s.id);
        let shown: Vec<crate::api::JobView> = jobs
            .into_iter()
            .filter(|j| !j.sweep_id.is_some_and(|s| lines.iter().any(|l| l.id == s)))
            .collect();
        if !shown.is_empty() {
            print!("{}", present::job_table(&shown));
        }
        for job in &shown {
            if !args.ids.is_empty() {
                print!("{}", present::progress_line(job));
            }
            print!("{}", present::alert_lines(job));
        }
        for sweep in &lines {
            println!("{}", present::sweep_line(sweep));
        }
        if !lines.is_empty() {
            println!(
                "(`baton sweep status ID` lists a sweep's runs; `baton status --expand` shows \
                 them here)"
            );
        }
        if let Some(n) = more.filter(|n| *n > 0) {
            println!("{}", present::more_ended(n));
        }
    }
    // The daemon's own trouble (a full state directory), on stderr: a diagnostic, in every mode.
    if let Ok(info) = client().info()
        && let Some(health) = info.health
    {
        eprintln!("baton: {}", health.problem);
    }
    Ok(ExitCode::SUCCESS)
}
