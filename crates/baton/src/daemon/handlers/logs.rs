//! `GET /v1/jobs/{id}/logs`: a job's stdout or stderr, optionally only the last N lines, and with
//! `follow` kept open until the job has ended and all its output has been sent. Output is read in
//! bounded chunks, so a huge log costs no more memory than a small one.

use std::io::SeekFrom;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::response::Response;
use baton_core::JobId;
use tokio::fs::File;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::api::LogsQuery;
use crate::daemon::{ApiError, Daemon, Peer};

const CHUNK: usize = 64 * 1024;
/// How often a follower re-reads the file while the job runs and no state change wakes it.
const FOLLOW_TICK: Duration = Duration::from_millis(200);

pub async fn handle(
    State(daemon): State<Arc<Daemon>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
    Query(query): Query<LogsQuery>,
) -> Result<Response, ApiError> {
    let id = JobId(id);
    daemon.readable_job(&peer, id, "output")?;
    let files = daemon.files(id);
    let path = if query.stderr {
        files.stderr()
    } else {
        files.stdout()
    };
    let start = match query.tail {
        Some(n) => tail_offset(&path, n).await,
        None => 0,
    };
    let state = Follow {
        daemon,
        id,
        path,
        offset: start,
        follow: query.follow,
        file: None,
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        let chunk = st.next_chunk().await?;
        Some((chunk, st))
    });
    Ok(Response::builder()
        .header("content-type", "application/octet-stream")
        .body(Body::from_stream(stream))
        .expect("static headers are valid"))
}

struct Follow {
    daemon: Arc<Daemon>,
    id: JobId,
    path: PathBuf,
    offset: u64,
    follow: bool,
    file: Option<File>,
    done: bool,
}

impl Follow {
    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, std::io::Error>> {
        if self.done {
            return None;
        }
        let mut changed = self.daemon.changed.subscribe();
        let mut shutting_down = self.daemon.shutting_down.subscribe();
        loop {
            if self.file.is_none()
                && let Ok(mut f) = File::open(&self.path).await
                && f.seek(SeekFrom::Start(self.offset)).await.is_ok()
            {
                self.file = Some(f);
            }
            if let Some(f) = self.file.as_mut() {
                let mut buf = vec![0u8; CHUNK];
                match f.read(&mut buf).await {
                    Ok(0) => {}
                    Ok(n) => {
                        buf.truncate(n);
                        self.offset += n as u64;
                        return Some(Ok(buf));
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(Err(e));
                    }
                }
            }
            // At the end of what was written so far.
            if !self.follow || !self.is_active() {
                // One more read: output written just before the job ended.
                if self.follow && self.file.is_some() {
                    self.follow = false;
                    continue;
                }
                return None;
            }
            changed.borrow_and_update();
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(FOLLOW_TICK) => {}
                _ = shutting_down.wait_for(|s| *s) => return None,
            }
        }
    }

    fn is_active(&self) -> bool {
        self.daemon.lock().jobs.is_active(self.id)
    }
}

/// The offset where the last `n` lines of the file begin (a final newline ends a line, it does
/// not start an empty one).
async fn tail_offset(path: &std::path::Path, n: usize) -> u64 {
    let Ok(mut f) = File::open(path).await else {
        return 0;
    };
    let Ok(len) = f.seek(SeekFrom::End(0)).await else {
        return 0;
    };
    if n == 0 {
        return len;
    }
    let mut pos = len;
    let mut newlines = 0usize;
    let mut skip_final = true;
    let mut buf = vec![0u8; CHUNK];
    while pos > 0 {
        let read = (pos as usize).min(CHUNK);
        pos -= read as u64;
        if f.seek(SeekFrom::Start(pos)).await.is_err()
            || f.read_exact(&mut buf[..read]).await.is_err()
        {
            return 0;
        }
        for i in (0..read).rev() {
            if buf[i] == b'\n' {
                if skip_final && pos + i as u64 == len - 1 {
                    skip_final = false;
                    continue;
                }
                newlines += 1;
                if newlines == n {
                    return pos + i as u64 + 1;
                }
            }
            skip_final = false;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tail_finds_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "a\nb\nc\n").unwrap();
        assert_eq!(tail_offset(&path, 1).await, 4);
        assert_eq!(tail_offset(&path, 2).await, 2);
        assert_eq!(tail_offset(&path, 5).await, 0);
        std::fs::write(&path, "a\nb\nc").unwrap();
        assert_eq!(tail_offset(&path, 1).await, 4);
        // Many lines across chunk boundaries.
        let text: String = (0..50_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let off = tail_offset(&path, 3).await as usize;
        assert_eq!(&text[off..], "line 49997\nline 49998\nline 49999\n");
    }
}
