//! `baton wait ID... [--timeout DUR] [--exit-zero]`: blocks on the daemon (a held request, no
//! polling) until every named job has ended, then prints each job's report (or, with --brief,
//! one line each), and last one line per job that names its outcome and cause. Exit 0 if all
//! succeeded, 1 if any did not (0 with `--exit-zero`), 124 if the timeout passed first, 3 when the
//! daemon cannot be reached. Survives a daemon restart by waiting again.
//!
//! `--exit-zero` is for an agent's background wait: Claude Code's notice of a background
//! command's end carries only its exit status ("failed with exit code 1" reads as baton failing)
//! and the path of its output, whose last lines then say what happened to the jobs.

use baton_core::JobState;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use baton_core::units::parse_duration;

use super::{EXIT_JOB_FAILED, EXIT_TIMEOUT, print_json};
use crate::edge::connect::{self, client};
use crate::edge::{present, request};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Jobs to wait for.
    #[arg(required = true)]
    #[arg(value_name = "ID|NAME")]
    ids: Vec<String>,
    /// Give up after this long (exit 124), e.g. 30m.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    timeout: Option<i64>,
    /// One line per job instead of its report.
    #[arg(long)]
    brief: bool,
    /// Exit 0 once the jobs have ended, whatever their outcome (it is in the last lines); only
    /// baton's own trouble (3) or the timeout (124) is non-zero. For background waits in agents.
    #[arg(long)]
    exit_zero: bool,
}

/// `job 17 (running)`, `3 jobs (1 running, 2 queued)`.
fn waiting_for(ids: &[u64], states: Option<&[JobState]>) -> String {
    let who = match ids {
        [one] => format!("job {one}"),
        many => format!("{} jobs", many.len()),
    };
    let Some(states) = states else {
        return who;
    };
    let mut counts: Vec<(JobState, usize)> = Vec::new();
    for &state in states {
        match counts.iter_mut().find(|(s, _)| *s == state) {
            Some((_, n)) => *n += 1,
            None => counts.push((state, 1)),
        }
    }
    let parts: Vec<String> = match (ids, counts.as_slice()) {
        ([_], [(state, _)]) => vec![state.to_string()],
        _ => counts.iter().map(|(s, n)| format!("{n} {s}")).collect(),
    };
    format!("{who} ({})", parts.join(", "))
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let ids =
        crate::edge::resolve::job_ids(&client(), &args.ids, crate::edge::resolve::Takes::Many)?;
    let client = client();
    let deadline = args
        .timeout
        .map(|ms| Instant::now() + Duration::from_millis(ms as u64));
    // For a person at a terminal: the time waited and each job's state, redrawn as it changes
    // (the daemon answers at each change; see `unless_changed_from`).
    let spinner = std::io::stderr().is_terminal().then(|| {
        let s = indicatif::ProgressBar::new_spinner();
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{spinner} waiting {elapsed_precise} for {msg}")
        {
            s.set_style(style);
        }
        s.set_message(waiting_for(&ids, None));
        s.enable_steady_tick(Duration::from_millis(120));
        s
    });
    // The states last shown. The first guess, ended, is answered at once with the real states
    // (or, when they have all ended, with the result).
    let mut seen: Vec<JobState> = vec![JobState::Succeeded; ids.len()];
    // Whether the daemon has answered (or at least accepted) a request of ours yet.
    let mut reached = false;
    let response = loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let mut req = request::wait_request(ids.clone(), left, !json && !args.brief);
        if spinner.is_some() {
            req.unless_changed_from = seen.clone();
        }
        match client.wait(&req) {
            Ok(resp) => {
                let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
                match &spinner {
                    Some(s) if !resp.done && !timed_out => {
                        reached = true;
                        seen = resp.jobs.iter().map(|j| j.state).collect();
                        s.set_message(waiting_for(&ids, Some(&seen)));
                        continue;
                    }
                    _ => break resp,
                }
            }
            // The daemon restarted under us: running jobs survive that, so wait on.
            Err(ref e) if connect::waits_through_restart(&client, e, reached, deadline) => {
                reached = true;
                continue;
            }
            Err(e) => {
                if let Some(s) = &spinner {
                    s.finish_and_clear();
                }
                return Err(e.into());
            }
        }
    };
    if let Some(s) = &spinner {
        s.finish_and_clear();
    }
    if json {
        print_json(&response.jobs);
    } else if response.done && !args.brief {
        for (i, job) in response.jobs.iter().enumerate() {
            if i > 0 {
                println!();
            }
            match response.reports.get(i).cloned().flatten() {
                Some(report) => print!("{}", present::terminal_safe(&report)),
                None => println!("{}", present::summary(job)),
            }
        }
        // Last, what happened in one line a job, for whoever reads only the end of the output
        // (an agent told "background command completed", with the output's path).
        println!();
        for (i, job) in response.jobs.iter().enumerate() {
            let line = match response.headlines.get(i).cloned().flatten() {
                Some(headline) => present::terminal_safe(&headline),
                None => present::summary(job),
            };
            println!("baton: {line}");
        }
    } else {
        for job in &response.jobs {
            println!("{}", present::summary(job));
        }
    }
    if !response.done {
        eprintln!("baton: timed out waiting; the jobs are still going");
        return Ok(ExitCode::from(EXIT_TIMEOUT));
    }
    if args.exit_zero || response.jobs.iter().all(|j| j.state == JobState::Succeeded) {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_JOB_FAILED))
    }
}
