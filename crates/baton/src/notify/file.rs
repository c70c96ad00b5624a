//! `file:PATH`: appends the message to a file (for `auto`, `$BATON_HOME/inbox.md`), in one
//! write so that concurrent deliveries never interleave. A new file is created 0600: a report
//! quotes a job's output, which may be private.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use super::{Message, Outcome};

pub fn deliver(path: &str, msg: &Message) -> Outcome {
    if let Some(dir) = std::path::Path::new(path).parent()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        return Outcome::Failed(format!("cannot create {}: {e}", dir.display()));
    }
    let open = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path);
    let mut file = match open {
        Ok(f) => f,
        Err(e) => return Outcome::Failed(format!("cannot open {path}: {e}")),
    };
    let entry = format!("\n{}\n", msg.text);
    match file.write_all(entry.as_bytes()) {
        Ok(()) => Outcome::Delivered,
        Err(e) => Outcome::Failed(format!("cannot append to {path}: {e}")),
    }
}
