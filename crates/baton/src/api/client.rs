//! The client side of the protocol: typed calls over the daemon's Unix socket, and starting a
//! user daemon in the background when `baton submit` finds none.
//!
//! Deliberately small and blocking: one connection per call, HTTP/1.0 (so the daemon marks the
//! end of every body by closing the connection, streamed or not), no async runtime. A CLI call
//! lives a few milliseconds, and setting up a runtime and a general HTTP client cost more than
//! the request itself.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::*;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no baton daemon is running at {socket}; start one with `baton serve` (or `baton submit`, which starts one for you)"
    )]
    NotRunning { socket: PathBuf },
    /// The daemon refused the request: its `error`, and on a line of its own its `hint`.
    #[error("{message}{}", hint.as_ref().map(|h| format!("\nhint: {h}")).unwrap_or_default())]
    Api {
        status: u16,
        message: String,
        hint: Option<String>,
    },
    /// Refused here, before sending: the daemon would refuse it unread.
    #[error(
        "the request is {} ({bytes} bytes); the daemon reads at most {}",
        baton_core::units::format_size(*bytes as u64),
        baton_core::units::format_size(MAX_BODY_BYTES as u64)
    )]
    TooLarge { bytes: usize },
    #[error("could not start a daemon: {0}")]
    StartFailed(String),
    #[error("talking to the daemon failed: {0}")]
    Transport(String),
}

impl ClientError {
    /// Errors the caller caused (bad input, someone else's job, no such job).
    pub fn is_usage(&self) -> bool {
        match self {
            ClientError::Api { status, .. } => (400..500).contains(status),
            ClientError::TooLarge { .. } => true,
            _ => false,
        }
    }
}

fn transport(e: impl std::fmt::Display) -> ClientError {
    ClientError::Transport(e.to_string())
}

/// A response whose status was a success; `body` reads to the end of the body.
pub struct Response {
    pub body: BufReader<UnixStream>,
}

#[derive(Clone)]
pub struct Client {
    socket: PathBuf,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Client {
            socket: socket.into(),
        }
    }

    /// Sends one request and reads the status line and headers.
    fn request(
        &self,
        method: &str,
        target: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, ClientError> {
        if let Some(body) = body
            && body.len() > MAX_BODY_BYTES
        {
            return Err(ClientError::TooLarge { bytes: body.len() });
        }
        let mut stream = UnixStream::connect(&self.socket).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning {
                    socket: self.socket.clone(),
                }
            }
            _ => transport(format!("{}: {e}", self.socket.display())),
        })?;
        let mut head = format!("{method} {PREFIX}{target} HTTP/1.0\r\nHost: baton\r\n");
        if let Some(body) = body {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut message = head.into_bytes();
        message.extend_from_slice(body.unwrap_or_default());
        // A daemon that refuses a request before reading its body (a caller it does not serve)
        // answers and closes while the body is still being written: the answer is then read
        // anyway, and the write error reported only if there is none.
        let written = stream.write_all(&message);
        if let Err(e) = &written
            && !matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            )
        {
            return Err(transport(e));
        }

        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        if let Err(e) = reader.read_line(&mut status_line) {
            return Err(transport(written.err().unwrap_or(e)));
        }
        if status_line.is_empty()
            && let Err(e) = written
        {
            return Err(transport(e));
        }
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| transport(format!("bad status line {status_line:?}")))?;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).map_err(transport)? == 0 || line == "\r\n" {
                break;
            }
        }
        if (200..300).contains(&status) {
            return Ok(Response { body: reader });
        }
        let mut text = String::new();
        let _ = reader.read_to_string(&mut text);
        let (message, hint) = match serde_json::from_str::<ErrorBody>(&text) {
            Ok(body) => (body.error, body.hint),
            Err(_) => (format!("daemon answered {status}: {text}"), None),
        };
        Err(ClientError::Api {
            status,
            message,
            hint,
        })
    }

    fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        target: &str,
        body: Option<&[u8]>,
    ) -> Result<T, ClientError> {
        let resp = self.request(method, target, body)?;
        serde_json::from_reader(resp.body).map_err(transport)
    }

    fn get<T: DeserializeOwned>(&self, target: &str) -> Result<T, ClientError> {
        self.call("GET", target, None)
    }

    fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        target: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).expect("API types always serialise");
        self.call("POST", target, Some(&body))
    }

    pub fn info(&self) -> Result<InfoResponse, ClientError> {
        self.get("/info")
    }

    pub fn submit(&self, req: &SubmitRequest) -> Result<JobView, ClientError> {
        self.post("/jobs", req)
    }

    pub fn list(&self, ids: &[u64], all: bool) -> Result<Vec<JobView>, ClientError> {
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        self.get(&format!("/jobs?ids={}&all={all}", ids.join(",")))
    }

    /// The jobs of one agent session (`none`: submitted outside any agent session).
    pub fn list_session(&self, session: &str, all: bool) -> Result<Vec<JobView>, ClientError> {
        self.get(&format!(
            "/jobs?session={}&all={all}",
            percent_encode(session)
        ))
    }

    pub fn submit_workflow(
        &self,
        req: &WorkflowSubmitRequest,
    ) -> Result<WorkflowView, ClientError> {
        self.post("/workflows", req)
    }

    pub fn workflow(&self, id: u64) -> Result<WorkflowView, ClientError> {
        self.get(&format!("/workflows/{id}"))
    }

    pub fn cancel_workflow(&self, id: u64, force: bool) -> Result<WorkflowView, ClientError> {
        self.post(
            &format!("/workflows/{id}/cancel"),
            &CancelRequest {
                ids: Vec::new(),
                force,
                session: AgentContext::from_env().session(),
            },
        )
    }

    pub fn report(&self, id: u64) -> Result<ReportResponse, ClientError> {
        self.get(&format!("/jobs/{id}/report"))
    }

    pub fn wait(&self, req: &WaitRequest) -> Result<WaitResponse, ClientError> {
        self.post("/wait", req)
    }

    pub fn cancel(&self, req: &CancelRequest) -> Result<CancelResponse, ClientError> {
        self.post("/cancel", req)
    }

    pub fn events(&self, id: u64) -> Result<Vec<EventView>, ClientError> {
        self.get(&format!("/jobs/{id}/events"))
    }

    pub fn gpus(&self) -> Result<GpusResponse, ClientError> {
        self.get("/gpus")
    }

    /// Waste decisions of the last `since_ms` (all kept, if `None`).
    pub fn audit(&self, since_ms: Option<i64>) -> Result<Vec<AuditView>, ClientError> {
        self.get(&since_target("/audit", since_ms))
    }

    pub fn stats(&self, since_ms: Option<i64>) -> Result<StatsResponse, ClientError> {
        self.get(&since_target("/stats", since_ms))
    }

    /// The job's output as a reader (endless with `follow` until the job ends).
    pub fn logs(&self, id: u64, query: &LogsQuery) -> Result<impl Read + use<>, ClientError> {
        let mut target = format!(
            "/jobs/{id}/logs?stderr={}&follow={}",
            query.stderr, query.follow
        );
        if let Some(n) = query.tail {
            target.push_str(&format!("&tail={n}"));
        }
        Ok(self.request("GET", &target, None)?.body)
    }

    /// Starts a user daemon in the background for `home` and waits (at most 10 s) until it
    /// answers. Only the user's own socket is ever auto-started: a system socket or an explicit
    /// `BATON_SOCKET` that nobody serves is reported instead.
    pub fn start_daemon(&self, home: &Path) -> Result<(), ClientError> {
        if self.socket != home.join("baton.sock") {
            return Err(ClientError::NotRunning {
                socket: self.socket.clone(),
            });
        }
        spawn_daemon(home)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.info() {
                Ok(_) => return Ok(()),
                Err(ClientError::NotRunning { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(ClientError::NotRunning { .. }) => {
                    return Err(ClientError::StartFailed(format!(
                        "it did not open {} within 10 s; see {}",
                        self.socket.display(),
                        home.join("daemon.log").display()
                    )));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

fn spawn_daemon(home: &Path) -> Result<(), ClientError> {
    let fail = |e: std::io::Error| ClientError::StartFailed(e.to_string());
    std::fs::create_dir_all(home).map_err(fail)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.join("daemon.log"))
        .map_err(fail)?;
    let exe = std::env::current_exe().map_err(fail)?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("serve")
        .env("BATON_HOME", home)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(fail)?)
        .stderr(log);
    // Its own session: the daemon must outlive this terminal and this client.
    use std::os::unix::process::CommandExt;
    unsafe {
        cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(Into::into));
    }
    cmd.spawn().map_err(fail)?;
    eprintln!(
        "baton: started a daemon in the background (state in {}, log in daemon.log)",
        home.display()
    );
    Ok(())
}

/// Encodes a query value: session ids are plain, but a pane like `%3` is not.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn since_target(path: &str, since_ms: Option<i64>) -> String {
    match since_ms {
        Some(ms) => format!("{path}?since_ms={ms}"),
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_shows_its_hint_on_a_line_of_its_own() {
        let with = ClientError::Api {
            status: 400,
            message: "--time-limit: 400d00h is longer than the maximum of 365d".into(),
            hint: Some("a job submitted without --time-limit has no limit at all".into()),
        };
        assert_eq!(
            with.to_string(),
            "--time-limit: 400d00h is longer than the maximum of 365d\n\
             hint: a job submitted without --time-limit has no limit at all"
        );
        assert!(with.is_usage());
        let without = ClientError::Api {
            status: 404,
            message: "job 9 does not exist".into(),
            hint: None,
        };
        assert_eq!(without.to_string(), "job 9 does not exist");
        let big = ClientError::TooLarge { bytes: 9 << 20 };
        assert!(big.is_usage());
        assert_eq!(
            big.to_string(),
            "the request is 9 MiB (9437184 bytes); the daemon reads at most 8 MiB"
        );
    }
}
