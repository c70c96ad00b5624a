//! `baton`, the front end people and agents type. It runs `baton submit` itself, the command
//! that agents and scripts run most, often hundreds of times in a row, and hands every other
//! command to `batond`, the whole of baton installed beside it, by exec. Starting the whole
//! binary costs more than a millisecond of relocations and page faults before its first line
//! runs (it holds the daemon, the web server, the database and every command); this one links
//! only what `submit` uses.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use clap::Parser;

/// Runs `baton submit`, or hands the command over and does not return.
pub fn run() -> anyhow::Result<()> {
    let args: Vec<OsString> = std::env::args_os().collect();
    if !submits(&args) {
        return Err(hand_over(&args));
    }
    let cli = crate::cli::FrontCli::parse_from(&args);
    crate::cli::run_front(cli)
}

/// Whether the command is `submit`: the first word that is not the global `--json`.
fn submits(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .find(|arg| *arg != "--json")
        .is_some_and(|arg| arg == "submit")
}

/// Replaces this process with `batond`, the same arguments and the same name in its messages;
/// returns only why it could not.
fn hand_over(args: &[OsString]) -> anyhow::Error {
    let full = crate::paths::batond();
    let err = std::process::Command::new(&full)
        .arg0("baton")
        .args(&args[1..])
        .exec();
    anyhow::anyhow!(
        "cannot run {} ({err}); baton hands every command but `submit` to batond, installed \
         beside it",
        full.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn words(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_submit_is_taken_here() {
        assert!(submits(&words(&["baton", "submit", "--", "true"])));
        assert!(submits(&words(&[
            "baton", "--json", "submit", "--", "true"
        ])));
        assert!(!submits(&words(&["baton", "status"])));
        assert!(!submits(&words(&["baton"])));
        assert!(!submits(&words(&["baton", "--help"])));
        // A job named submit is not the command.
        assert!(!submits(&words(&["baton", "wait", "submit"])));
    }

    #[test]
    fn submit_reads_the_same_here_as_in_batond() {
        let mut front = crate::cli::FrontCli::command();
        let mut full = crate::cli::Cli::command();
        let help = |cmd: &mut clap::Command| {
            cmd.build();
            cmd.find_subcommand_mut("submit")
                .expect("submit")
                .render_long_help()
                .to_string()
        };
        assert_eq!(help(&mut front), help(&mut full));
        let front_sub = front
            .find_subcommand("submit")
            .unwrap()
            .get_about()
            .map(|a| a.to_string());
        let full_sub = full
            .find_subcommand("submit")
            .unwrap()
            .get_about()
            .map(|a| a.to_string());
        assert_eq!(front_sub, full_sub);
    }
}

#[cfg(test)]
mod unwinding {
    /// The unwinder is linked statically (build.rs): a panic still unwinds and is caught.
    #[test]
    fn a_panic_unwinds_to_catch_unwind() {
        let caught = std::panic::catch_unwind(|| {
            let v: Vec<u8> = Vec::new();
            std::hint::black_box(&v);
            panic!("on purpose");
        });
        assert!(caught.is_err());
    }
}
