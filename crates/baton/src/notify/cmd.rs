//! `cmd:COMMAND`: runs the submitter's own command (through `sh -c`, as they wrote it) with the
//! report on stdin and `BATON_JOB_ID`, `BATON_JOB_STATE`, `BATON_EXIT_CODE` and `BATON_REPORT`
//! in its environment. The report never becomes part of the command line.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::{Message, Outcome, command_env, tail_of};

/// A notification command that hangs must not hold its delivery forever.
const TIME_LIMIT: Duration = Duration::from_secs(60);

pub async fn deliver(command: &str, msg: &Message) -> Outcome {
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c").arg(command);
    command_env(&mut cmd, msg);
    cmd.env("BATON_JOB_ID", msg.job.to_string())
        .env("BATON_JOB_STATE", &msg.state)
        .env(
            "BATON_EXIT_CODE",
            msg.exit_code.map(|c| c.to_string()).unwrap_or_default(),
        )
        .env("BATON_REPORT", &msg.report_path)
        .current_dir(if std::path::Path::new(&msg.cwd).is_dir() {
            msg.cwd.as_str()
        } else {
            "/"
        })
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Outcome::Failed(format!("cannot run /bin/sh: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its stdin is fine: a broken pipe is not a failure.
        let _ = stdin.write_all(msg.markdown.as_bytes()).await;
    }
    match tokio::time::timeout(TIME_LIMIT, child.wait_with_output()).await {
        Err(_) => Outcome::Failed(format!(
            "`{command}` did not finish within {}s",
            TIME_LIMIT.as_secs()
        )),
        Ok(Err(e)) => Outcome::Failed(format!("`{command}`: {e}")),
        Ok(Ok(out)) if out.status.success() => Outcome::Delivered,
        Ok(Ok(out)) => Outcome::Failed(format!(
            "`{command}` exited with {}: {}",
            out.status,
            tail_of(&out.stderr, 300)
        )),
    }
}
