//! `baton dashboard`: asks the daemon (over its socket, so it knows who asks) for a one-time
//! login link to its web dashboard, prints it, and opens it in a browser when there is a desktop
//! to open it on. The link is good once, for two minutes; it becomes a session cookie.

use std::process::{ExitCode, Stdio};

use super::print_json;
use crate::edge::connect::client;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only print the link; do not open a browser.
    #[arg(long)]
    no_open: bool,
}

pub fn run(args: Args, json: bool) -> anyhow::Result<ExitCode> {
    let login = client().web_login()?;
    if json {
        print_json(&login);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", login.url);
    eprintln!(
        "baton: the link logs you in once, within two minutes. From another machine, forward the \
         port first: ssh -L {port}:{host} THIS-HOST, then open the link there.",
        port = login.base.rsplit(':').next().unwrap_or("8080"),
        host = login.base.trim_start_matches("http://"),
    );
    let desktop =
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
    if desktop && !args.no_open {
        // The link goes as one argument, never through a shell.
        let _ = std::process::Command::new("xdg-open")
            .arg(&login.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }
    Ok(ExitCode::SUCCESS)
}
