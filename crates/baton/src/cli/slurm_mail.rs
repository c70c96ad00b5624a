//! `baton slurm-mail -s SUBJECT RECIPIENT`: a Slurm `MailProg`. slurmctld runs it the moment a
//! job that asked for mail (`--mail-type=END,FAIL`; a sweep's array: when all of it has
//! ended) ends. Jobs submitted by baton's Slurm
//! backend with `[backend] mail_hook = true` give their daemon's socket as the recipient; this
//! pokes that daemon (`POST /v1/slurm/poke`) so its report goes out within a second instead of
//! at the next poll. Mail for anyone else is handed to the real mailer (`BATON_SLURM_MAILER`,
//! default `/usr/bin/mail`), so installing this as MailProg breaks nobody's mail.

use std::io::{Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// What MailProg is given: `-s SUBJECT RECIPIENT`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(recipient) = args.args.last() else {
        return Ok(ExitCode::SUCCESS);
    };
    let path = Path::new(recipient);
    let is_socket =
        path.is_absolute() && std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if is_socket {
        // The daemon only looks at Slurm sooner; nothing here is trusted or passed on.
        if let Err(e) = poke(path) {
            eprintln!("baton slurm-mail: cannot poke {recipient}: {e}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mailer = std::env::var("BATON_SLURM_MAILER").unwrap_or_else(|_| "/usr/bin/mail".into());
    if !Path::new(&mailer).exists() {
        return Ok(ExitCode::SUCCESS);
    }
    let status = std::process::Command::new(&mailer)
        .args(&args.args)
        .status()?;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

fn poke(socket: &Path) -> std::io::Result<()> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"POST /v1/slurm/poke HTTP/1.0\r\nHost: baton\r\nContent-Length: 0\r\n\r\n")?;
    let mut reply = [0u8; 64];
    let _ = s.read(&mut reply)?;
    Ok(())
}
