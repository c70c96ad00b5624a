//! `baton completions SHELL`: completion scripts generated from the CLI definition.

use clap::CommandFactory;

pub fn run(shell: clap_complete::Shell) {
    let mut cmd = super::Cli::command();
    clap_complete::generate(shell, &mut cmd, "baton", &mut std::io::stdout());
}
