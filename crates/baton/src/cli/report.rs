//! `baton report ID`: an ended job's report (DESIGN §4) as markdown, or with --json the
//! structured report and how each channel's delivery went.

use std::process::ExitCode;

use super::print_json;
use crate::edge::connect::client;
use crate::edge::present;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The job: its id, or its name (your newest job of that name).
    #[arg(value_name = "ID|NAME")]
    job: String,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let id = crate::edge::resolve::job_id(&client(), &args.job)?;
    let resp = client().report(id)?;
    if json {
        print_json(&resp);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", present::terminal_safe(&resp.markdown));
    if !resp.markdown.ends_with('\n') {
        println!();
    }
    if !resp.deliveries.is_empty() {
        let line: Vec<String> = resp
            .deliveries
            .iter()
            .map(|d| match &d.error {
                Some(e) if d.state != crate::api::DeliveryState::Delivered => {
                    format!("{} {} ({})", d.channel, d.state, present::terminal_safe(e))
                }
                _ => format!("{} {}", d.channel, d.state),
            })
            .collect();
        eprintln!("baton: delivery: {}", line.join("; "));
    }
    Ok(ExitCode::SUCCESS)
}
