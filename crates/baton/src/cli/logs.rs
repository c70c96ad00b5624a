//! `baton logs ID [--follow] [--tail N] [--stderr]`: a job's output, streamed from the daemon.

use std::io::{Read, Write};
use std::process::ExitCode;

use super::print_json;
use crate::api::LogsQuery;
use crate::edge::connect::client;
use crate::edge::present;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job: its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
    /// Keep printing new output until the job ends.
    #[arg(long, short)]
    follow: bool,
    /// Only the last N lines.
    #[arg(long, short = 'n', value_name = "N")]
    tail: Option<usize>,
    /// Standard error instead of standard output.
    #[arg(long)]
    stderr: bool,
}

/// `--json`: the output as one string (invalid UTF-8 replaced), once the stream has ended.
#[derive(serde::Serialize)]
struct LogsJson {
    id: u64,
    stream: &'static str,
    text: String,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    let query = LogsQuery {
        stderr: args.stderr,
        tail: args.tail,
        follow: args.follow,
    };
    let client = client();
    let mut body = client.logs(id, &query)?;
    // A queued job has no output yet: say so rather than print nothing.
    if !json
        && let Some(job) = client.list(&[id], false)?.first()
        && job.state == baton_core::JobState::Queued
    {
        let reason = job
            .reason
            .as_deref()
            .map(|r| format!(" ({})", present::terminal_safe(r)))
            .unwrap_or_default();
        let then = if args.follow {
            "its output follows once it starts"
        } else {
            "`baton logs ID --follow` waits for its output"
        };
        eprintln!(
            "baton: job {} has not started yet{reason}; {}",
            id,
            then.replace("ID", &id.to_string())
        );
    }
    if json {
        let mut bytes = Vec::new();
        body.read_to_end(&mut bytes)?;
        print_json(&LogsJson {
            id,
            stream: if args.stderr { "stderr" } else { "stdout" },
            text: String::from_utf8_lossy(&bytes).into_owned(),
        });
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = body.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        if let Err(e) = out.write_all(&chunk[..n]).and_then(|_| out.flush()) {
            // A closed pipe (`| head`) is a normal way to stop reading.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(ExitCode::SUCCESS);
            }
            return Err(e.into());
        }
    }
    Ok(ExitCode::SUCCESS)
}
