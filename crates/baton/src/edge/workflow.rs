//! Reading and checking a workflow file before it is sent (DESIGN §6). The file is checked here
//! with the parser the daemon uses, so that a file too large, with too many tasks or otherwise
//! wrong is refused before anything is sent, with the daemon's own message; the daemon parses
//! and checks it again, with what only it knows (the GPUs, the directories). Every client (CLI,
//! MCP) reads files through here, so all of them get the same errors, with the file's name, line
//! and column.

use std::io::Read;
use std::path::Path;

use baton_core::workflow::{self, MAX_FILE_BYTES, WorkflowError};

/// Why a workflow file is not sent. `shown` is the file as the user named it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{shown}: {error}")]
    Unreadable {
        shown: String,
        error: std::io::Error,
    },
    #[error("{shown}: {error}")]
    Invalid {
        shown: String,
        error: Box<WorkflowError>,
    },
}

/// Reads a workflow file and checks it as the daemon will ([`check`]). A file over the size
/// limit is refused from its size, unread.
pub fn read(file: &Path, shown: &str) -> Result<String, FileError> {
    let unreadable = |error| FileError::Unreadable {
        shown: shown.to_string(),
        error,
    };
    let too_large = |bytes: u64| FileError::Invalid {
        shown: shown.to_string(),
        error: Box::new(WorkflowError::TooLarge {
            bytes: bytes as usize,
        }),
    };
    let size = std::fs::metadata(file).map_err(unreadable)?.len();
    if size > MAX_FILE_BYTES as u64 {
        return Err(too_large(size));
    }
    // Bounded too: a pipe or a file still growing has no size to trust.
    let mut text = String::new();
    std::fs::File::open(file)
        .map_err(unreadable)?
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(unreadable)?;
    check(shown, &text)?;
    Ok(text)
}

/// Checks a workflow's text with the daemon's parser: its size, its number of tasks, and
/// everything else the file alone decides.
pub fn check(shown: &str, text: &str) -> Result<(), FileError> {
    workflow::parse(text)
        .map(drop)
        .map_err(|error| FileError::Invalid {
            shown: shown.to_string(),
            error: Box::new(error),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    fn tasks(n: usize) -> String {
        let mut text = String::from("name: sweep\ntasks:\n");
        for i in 0..n {
            text.push_str(&format!("  t{i}: {{command: \"true\"}}\n"));
        }
        text
    }

    /// What the CLI and the MCP server refuse before sending (both call `read` or `check`).
    #[test]
    fn files_too_large_or_with_too_many_tasks_are_refused_before_sending() {
        let ok = file_with(&tasks(3));
        assert_eq!(read(ok.path(), "ok.yaml").unwrap(), tasks(3));

        let text = format!("{}{}", tasks(1), "#".repeat(5_000_000));
        let big = file_with(&text);
        let err = read(big.path(), "big.yaml").unwrap_err();
        assert!(
            matches!(
                &err,
                FileError::Invalid { error, .. }
                    if matches!(**error, WorkflowError::TooLarge { bytes } if bytes == text.len())
            ),
            "{err:?}"
        );
        let shown = format!(
            "big.yaml: the file is 4.8 MiB ({} bytes); a workflow file may be at most 1 MiB",
            text.len()
        );
        assert!(err.to_string().starts_with(&shown), "{err}");

        let many = file_with(&tasks(1001));
        let err = read(many.path(), "many.yaml").unwrap_err().to_string();
        assert!(
            err.starts_with(
                "many.yaml: line 2, column 1: tasks: the workflow has 1001 tasks; at most 1000"
            ),
            "{err}"
        );
        let err = check("workflow", &tasks(1001)).unwrap_err().to_string();
        assert!(err.starts_with("workflow: line 2, column 1"), "{err}");

        let err = read(Path::new("/nonexistent/w.yaml"), "w.yaml").unwrap_err();
        assert!(matches!(err, FileError::Unreadable { .. }), "{err}");
    }
}
