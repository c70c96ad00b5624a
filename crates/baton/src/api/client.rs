//! The client side of the protocol: typed calls over the daemon's Unix socket. Starting a
//! daemon when none answers is the client edge's (`crate::edge::connect`).
//!
//! Deliberately small and blocking: one connection per call, HTTP/1.0 (so the daemon marks the
//! end of every body by closing the connection, streamed or not), no async runtime. A CLI call
//! lives a few milliseconds, and setting up a runtime and a general HTTP client cost more than
//! the request itself.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
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
    /// The daemon could not be reached before the request was sent whole: it did nothing.
    #[error("talking to the daemon failed: {0}")]
    Transport(String),
    /// The request was sent, but its answer never came whole (the daemon died or restarted in
    /// between): it may or may not have been carried out.
    #[error("the daemon took the request but its answer was cut off ({detail})")]
    Interrupted { detail: String },
    /// The daemon did not answer in time (stopped with SIGSTOP, or stuck).
    #[error(
        "the baton daemon at {socket} did not answer within {}{}; it may be stopped (SIGSTOP) \
         or stuck. Set BATON_CLIENT_TIMEOUT (e.g. 2m) to wait longer",
        baton_core::units::format_duration(after.as_millis() as i64),
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    NoAnswer {
        socket: PathBuf,
        after: Duration,
        pid: Option<u32>,
        /// Whether the whole request had been sent.
        sent: bool,
    },
    /// A submission whose answer never came, even after retrying with its request id.
    #[error(
        "could not confirm that job was queued: {cause}. It may or may not exist: `baton \
         status` shows it if it does, and submitting again with `--request-id {request_id}` \
         can never queue it twice"
    )]
    Unconfirmed {
        request_id: String,
        cause: Box<ClientError>,
    },
}

impl ClientError {
    /// The daemon could not be reached, or not be heard from (exit code 3, DESIGN §3).
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            ClientError::NotRunning { .. }
                | ClientError::StartFailed(_)
                | ClientError::Transport(_)
                | ClientError::Interrupted { .. }
                | ClientError::NoAnswer { .. }
                | ClientError::Unconfirmed { .. }
        )
    }

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
    /// Its headers, names in lower case.
    pub headers: Vec<(String, String)>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The whole body. One with a `Content-Length` is read to that length rather than to the
    /// connection's close, which the daemon may get to only after the work the request set off
    /// (a submission's scheduling pass): a CLI call returns as soon as its answer is in.
    fn read_whole(self) -> Result<Vec<u8>, ClientError> {
        let length = self
            .header("content-length")
            .and_then(|v| v.parse::<u64>().ok());
        let mut bytes = Vec::new();
        let cut_off = |detail: String| ClientError::Interrupted {
            detail: format!("the answer was cut off: {detail}"),
        };
        match length {
            Some(length) => {
                self.body
                    .take(length)
                    .read_to_end(&mut bytes)
                    .map_err(|e| cut_off(e.to_string()))?;
                if (bytes.len() as u64) < length {
                    return Err(cut_off(format!("{} of {length} bytes", bytes.len())));
                }
            }
            None => {
                let mut body = self.body;
                body.read_to_end(&mut bytes)
                    .map_err(|e| cut_off(e.to_string()))?;
            }
        }
        Ok(bytes)
    }
}

/// How long a call waits for the daemon: every call but those that wait by design gets an
/// answer (or an error that says the daemon does not answer) within `BATON_CLIENT_TIMEOUT`
/// (default 30 s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Patience {
    Call,
    /// `wait` with a timeout: that, and a margin for the daemon to answer after it.
    Until(Duration),
    /// `wait` without one, `logs --follow`: as long as it takes.
    Forever,
}

/// The timeout of an ordinary call.
pub fn call_timeout() -> Duration {
    std::env::var("BATON_CLIENT_TIMEOUT")
        .ok()
        .and_then(|t| baton_core::units::parse_duration(&t).ok())
        .filter(|&ms| ms > 0)
        .map_or(Duration::from_secs(30), |ms| {
            Duration::from_millis(ms as u64)
        })
}

impl Patience {
    fn timeout(self) -> Option<Duration> {
        match self {
            Patience::Call => Some(call_timeout()),
            Patience::Until(d) => Some(d + call_timeout()),
            Patience::Forever => None,
        }
    }
}

/// A fresh request id (128 random bits, hex) for a submission that was given none.
pub fn new_request_id() -> String {
    let mut bytes = [0u8; 16];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        // No /dev/urandom: time and pid, still unique enough for one user's submissions.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes[..12].copy_from_slice(&now.to_le_bytes()[..12]);
        bytes[12..].copy_from_slice(&std::process::id().to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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

    /// The socket this client talks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Connects within `timeout`: a daemon that stopped accepting leaves a full backlog, and a
    /// plain connect would then block for good.
    fn connect(&self, timeout: Option<Duration>) -> Result<UnixStream, ClientError> {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let refused = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                ClientError::NotRunning {
                    socket: self.socket.clone(),
                }
            }
            _ => transport(format!("{}: {e}", self.socket.display())),
        };
        let addr = SocketAddrUnix::new(&self.socket).map_err(|e| refused(e.into()))?;
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let fd = rustix::net::socket_with(
                AddressFamily::UNIX,
                SocketType::STREAM,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
                None,
            )
            .map_err(|e| transport(std::io::Error::from(e)))?;
            match rustix::net::connect(&fd, &addr) {
                Ok(()) => {
                    let stream = UnixStream::from(fd);
                    stream.set_nonblocking(false).map_err(transport)?;
                    return Ok(stream);
                }
                // The backlog is full: the daemon is not accepting (stopped, or swamped).
                Err(rustix::io::Errno::AGAIN) if deadline.is_none_or(|d| Instant::now() < d) => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(rustix::io::Errno::AGAIN) => return Err(self.no_answer(timeout, false)),
                Err(e) => return Err(refused(e.into())),
            }
        }
    }

    fn no_answer(&self, timeout: Option<Duration>, sent: bool) -> ClientError {
        // A user daemon's pid is in its lock file beside the socket.
        let pid = self.socket.parent().and_then(|dir| {
            std::fs::read_to_string(dir.join("daemon.lock"))
                .ok()?
                .trim()
                .parse()
                .ok()
        });
        ClientError::NoAnswer {
            socket: self.socket.clone(),
            after: timeout.unwrap_or_default(),
            pid,
            sent,
        }
    }

    /// Sends one request and reads the status line and headers, waiting as long as `patience`
    /// allows.
    fn request(
        &self,
        method: &str,
        target: &str,
        body: Option<&[u8]>,
        patience: Patience,
    ) -> Result<Response, ClientError> {
        if let Some(body) = body
            && body.len() > MAX_BODY_BYTES
        {
            return Err(ClientError::TooLarge { bytes: body.len() });
        }
        let timeout = patience.timeout();
        let started = Instant::now();
        let mut stream = self.connect(timeout)?;
        // Each read and write may take what is left of the timeout.
        let left = |timeout: Option<Duration>| {
            timeout.map(|t| {
                t.saturating_sub(started.elapsed())
                    .max(Duration::from_millis(1))
            })
        };
        stream.set_write_timeout(left(timeout)).map_err(transport)?;
        let timed_out = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            )
        };
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
        if let Err(e) = &written {
            if timed_out(e) {
                return Err(self.no_answer(timeout, false));
            }
            if !matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ) {
                return Err(transport(e));
            }
        }
        let sent = written.is_ok();
        // From here on the daemon may have acted on the request: a broken answer says so.
        let cut_off = |e: std::io::Error| {
            if timed_out(&e) {
                self.no_answer(timeout, sent)
            } else if sent {
                ClientError::Interrupted {
                    detail: e.to_string(),
                }
            } else {
                transport(e)
            }
        };
        stream.set_read_timeout(left(timeout)).map_err(transport)?;
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        if let Err(e) = reader.read_line(&mut status_line) {
            return Err(match written {
                Err(w) => transport(w),
                Ok(()) => cut_off(e),
            });
        }
        if status_line.is_empty() {
            return Err(match written {
                Err(w) => transport(w),
                Ok(()) => ClientError::Interrupted {
                    detail: "the connection closed before any answer".into(),
                },
            });
        }
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| ClientError::Interrupted {
                detail: format!("bad status line {status_line:?}"),
            })?;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).map_err(cut_off)? == 0 || line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
        // The body of a long call (logs --follow) streams for as long as it takes; an ordinary
        // one keeps the timeout.
        if patience == Patience::Forever {
            reader.get_ref().set_read_timeout(None).map_err(transport)?;
        }
        if (200..300).contains(&status) {
            return Ok(Response {
                body: reader,
                headers,
            });
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
        patience: Patience,
    ) -> Result<T, ClientError> {
        let bytes = self.request(method, target, body, patience)?.read_whole()?;
        serde_json::from_slice(&bytes).map_err(|e| ClientError::Interrupted {
            detail: format!("unreadable answer: {e}"),
        })
    }

    fn get<T: DeserializeOwned>(&self, target: &str) -> Result<T, ClientError> {
        self.call("GET", target, None, Patience::Call)
    }

    fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        target: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).expect("API types always serialise");
        self.call("POST", target, Some(&body), Patience::Call)
    }

    pub fn info(&self) -> Result<InfoResponse, ClientError> {
        self.get("/info")
    }

    /// A one-time login link to the daemon's dashboard, for this user.
    pub fn web_login(&self) -> Result<crate::api::WebLoginResponse, ClientError> {
        self.post("/web/login", &serde_json::json!({}))
    }

    /// Asks the daemon to stop (running jobs keep running).
    pub fn shutdown(&self) -> Result<ShutdownResponse, ClientError> {
        self.post("/shutdown", &serde_json::json!({}))
    }

    /// Queues a job once, whatever happens on the way: the request carries an id (a fresh one
    /// if it has none), and an answer that is lost (the daemon died or restarted after reading
    /// it) is asked for again with the same id, for which the daemon returns the job it
    /// queued the first time instead of a second one. `start` is called when no daemon runs
    /// (to start one), at most once.
    pub fn submit(
        &self,
        req: &SubmitRequest,
        start: &dyn Fn() -> Result<(), ClientError>,
    ) -> Result<JobView, ClientError> {
        let mut req = req.clone();
        let request_id = req.request_id.get_or_insert_with(new_request_id).clone();
        let body = serde_json::to_vec(&req).expect("API types always serialise");
        self.post_idempotent("/jobs", &body, request_id, start)
    }

    /// Queues a sweep, as [`submit`](Self::submit) queues a job: asked again with the same id
    /// when an answer was lost, so a resent sweep is never queued twice.
    pub fn submit_sweep(
        &self,
        req: &crate::api::SweepRequest,
        start: &dyn Fn() -> Result<(), ClientError>,
    ) -> Result<crate::api::SweepView, ClientError> {
        let mut req = req.clone();
        let request_id = req
            .job
            .request_id
            .get_or_insert_with(new_request_id)
            .clone();
        let body = serde_json::to_vec(&req).expect("API types always serialise");
        self.post_idempotent("/sweeps", &body, request_id, start)
    }

    pub fn sweep(&self, id: u64) -> Result<crate::api::SweepView, ClientError> {
        self.get(&format!("/sweeps/{id}"))
    }

    pub fn sweeps(&self) -> Result<Vec<crate::api::SweepView>, ClientError> {
        self.get("/sweeps")
    }

    pub fn cancel_sweep(
        &self,
        id: u64,
        req: &CancelRequest,
    ) -> Result<crate::api::SweepView, ClientError> {
        self.post(&format!("/sweeps/{id}/cancel"), req)
    }

    /// Blocks until the sweep ends (or `timeout_ms` passes): no call timeout of its own.
    pub fn wait_sweep(
        &self,
        id: u64,
        timeout_ms: Option<i64>,
    ) -> Result<crate::api::SweepView, ClientError> {
        let body = serde_json::to_vec(&crate::api::SweepWaitRequest { timeout_ms })
            .expect("API types always serialise");
        let patience = match timeout_ms {
            Some(ms) => Patience::Until(Duration::from_millis(ms.max(0) as u64)),
            None => Patience::Forever,
        };
        self.call("POST", &format!("/sweeps/{id}/wait"), Some(&body), patience)
    }

    /// POSTs a body that carries an idempotency key, asking again with it while the answer may
    /// have been lost; starts the daemon (`start`) at most once when none runs.
    fn post_idempotent<T: DeserializeOwned>(
        &self,
        target: &str,
        body: &[u8],
        request_id: String,
        start: &dyn Fn() -> Result<(), ClientError>,
    ) -> Result<T, ClientError> {
        let mut started = false;
        let mut pause = Duration::from_millis(100);
        let give_up = Instant::now() + Duration::from_secs(10);
        // Set once an answer was lost: from then on the job may exist.
        let mut lost = false;
        loop {
            let err = match self.call("POST", target, Some(body), Patience::Call) {
                Ok(answer) => return Ok(answer),
                Err(e) => e,
            };
            let cut_off = matches!(err, ClientError::Interrupted { .. });
            let gone = matches!(
                err,
                ClientError::NotRunning { .. } | ClientError::Transport(_)
            );
            if matches!(err, ClientError::NotRunning { .. }) && !started {
                started = true;
                start()?;
                continue;
            }
            // Cut off mid-answer, or the daemon restarting since: ask again, same id.
            if (cut_off || (gone && lost)) && Instant::now() < give_up {
                lost = true;
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
                continue;
            }
            let sent = matches!(err, ClientError::NoAnswer { sent: true, .. });
            return Err(if lost || cut_off || sent {
                ClientError::Unconfirmed {
                    request_id,
                    cause: Box::new(err),
                }
            } else {
                err
            });
        }
    }

    /// The named jobs, or the default view (`all`: every job, every page).
    pub fn list(&self, ids: &[u64], all: bool) -> Result<Vec<JobView>, ClientError> {
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        let query = ListQuery {
            ids: Some(ids.join(",")),
            all,
            ..ListQuery::default()
        };
        Ok(self.list_all(&query, None)?.items)
    }

    /// The jobs of one agent session (`none`: submitted outside any agent session).
    pub fn list_session(&self, session: &str, all: bool) -> Result<Vec<JobView>, ClientError> {
        let query = ListQuery {
            session: Some(session.to_string()),
            all,
            ..ListQuery::default()
        };
        Ok(self.list_all(&query, None)?.items)
    }

    /// One page of `GET /v1/jobs` (or `/v1/history`: `path`).
    fn page<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &ListQuery,
    ) -> Result<Page<T>, ClientError> {
        let resp = self.request("GET", &list_target(path, query), None, Patience::Call)?;
        let number = |name: &str| resp.header(name).and_then(|v| v.parse::<u64>().ok());
        let (next_before, more_ended) = (number(NEXT_HEADER), number(MORE_HEADER));
        // Read whole, then parsed: a page is up to a megabyte, and parsing from a slice is
        // several times faster than from a reader.
        let bytes = resp.read_whole()?;
        let items = serde_json::from_slice(&bytes).map_err(|e| ClientError::Interrupted {
            detail: format!("unreadable answer: {e}"),
        })?;
        Ok(Page {
            items,
            next_before,
            more_ended,
        })
    }

    /// Every page of a listing, newest first, until `limit` jobs (if given) or the last page.
    fn follow<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &ListQuery,
        limit: Option<usize>,
    ) -> Result<Page<T>, ClientError> {
        let mut query = query.clone();
        let mut out: Page<T> = Page {
            items: Vec::new(),
            next_before: None,
            more_ended: None,
        };
        loop {
            query.limit = Some(page_size().min(limit.map_or(usize::MAX, |l| l - out.items.len())));
            let page: Page<T> = self.page(path, &query)?;
            out.items.extend(page.items);
            out.more_ended = out.more_ended.or(page.more_ended);
            out.next_before = page.next_before;
            let full = limit.is_some_and(|l| out.items.len() >= l);
            match page.next_before {
                Some(before) if !full => query.before = Some(before),
                _ => return Ok(out),
            }
        }
    }

    /// A whole listing of jobs (`limit`: at most that many, the newest).
    pub fn list_all(
        &self,
        query: &ListQuery,
        limit: Option<usize>,
    ) -> Result<Page<JobView>, ClientError> {
        self.follow("/jobs", query, limit)
    }

    /// A whole history listing (`limit`: at most that many rows, the newest).
    pub fn history(
        &self,
        query: &ListQuery,
        limit: Option<usize>,
    ) -> Result<Page<HistoryView>, ClientError> {
        self.follow("/history", query, limit)
    }

    /// What retention would remove now (`dry_run`), or removes it.
    pub fn gc(&self, dry_run: bool, older_than: Option<&str>) -> Result<GcReport, ClientError> {
        let target = match older_than {
            Some(d) => format!("/gc?older_than={}", percent_encode(d)),
            None => "/gc".to_string(),
        };
        if dry_run {
            self.get(&target)
        } else {
            self.post(&target, &serde_json::json!({}))
        }
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

    /// Cancels a workflow's tasks (`req.ids` is left empty: the workflow names them).
    pub fn cancel_workflow(
        &self,
        id: u64,
        req: &CancelRequest,
    ) -> Result<WorkflowView, ClientError> {
        self.post(&format!("/workflows/{id}/cancel"), req)
    }

    pub fn report(&self, id: u64) -> Result<ReportResponse, ClientError> {
        self.get(&format!("/jobs/{id}/report"))
    }

    /// Blocks until the jobs end (or `req.timeout_ms` passes): no call timeout of its own.
    pub fn wait(&self, req: &WaitRequest) -> Result<WaitResponse, ClientError> {
        let body = serde_json::to_vec(req).expect("API types always serialise");
        let patience = match req.timeout_ms {
            Some(ms) => Patience::Until(Duration::from_millis(ms.max(0) as u64)),
            None => Patience::Forever,
        };
        self.call("POST", "/wait", Some(&body), patience)
    }

    pub fn hook_claim(
        &self,
        req: &crate::api::HookClaimRequest,
    ) -> Result<crate::api::HookClaimResponse, ClientError> {
        self.post("/hook/claim", req)
    }

    pub fn hook_delivered(&self, ids: &[u64]) -> Result<serde_json::Value, ClientError> {
        self.post(
            "/hook/delivered",
            &crate::api::HookDeliveredRequest { ids: ids.to_vec() },
        )
    }

    pub fn cancel(&self, req: &CancelRequest) -> Result<CancelResponse, ClientError> {
        self.post("/cancel", req)
    }

    pub fn resolve(&self, req: &ResolveRequest) -> Result<ResolveResponse, ClientError> {
        self.post("/resolve", req)
    }

    pub fn select(&self, req: &SelectRequest) -> Result<JobsResponse, ClientError> {
        self.post("/select", req)
    }

    pub fn hold(&self, ids: &[u64]) -> Result<JobsResponse, ClientError> {
        self.post("/hold", &HoldRequest { ids: ids.to_vec() })
    }

    pub fn release(&self, ids: &[u64]) -> Result<JobsResponse, ClientError> {
        self.post("/release", &HoldRequest { ids: ids.to_vec() })
    }

    pub fn update(&self, id: u64, req: &UpdateRequest) -> Result<JobView, ClientError> {
        self.post(&format!("/jobs/{id}/update"), req)
    }

    pub fn requeue(&self, ids: &[u64]) -> Result<RequeueResponse, ClientError> {
        self.post("/requeue", &RequeueRequest { ids: ids.to_vec() })
    }

    pub fn resubmit(&self, id: u64, req: &ResubmitRequest) -> Result<JobView, ClientError> {
        self.post(&format!("/jobs/{id}/resubmit"), req)
    }

    pub fn signal(&self, id: u64, signal: &str) -> Result<SignalResponse, ClientError> {
        self.post(
            &format!("/jobs/{id}/signal"),
            &SignalRequest {
                signal: signal.to_string(),
            },
        )
    }

    pub fn workflows(&self) -> Result<Vec<WorkflowRow>, ClientError> {
        self.get("/workflows")
    }

    pub fn events(&self, id: u64) -> Result<Vec<EventView>, ClientError> {
        self.get(&format!("/jobs/{id}/events"))
    }

    pub fn gpus(&self) -> Result<GpusResponse, ClientError> {
        self.get("/gpus")
    }

    pub fn usage(&self) -> Result<Vec<UsageRow>, ClientError> {
        self.get("/usage")
    }

    /// Makes a reservation (`baton reserve`).
    pub fn reserve(
        &self,
        req: &crate::api::ReserveRequest,
    ) -> Result<crate::api::ReserveResponse, ClientError> {
        self.post("/reservations", req)
    }

    /// The standing reservations, or (`all`) those of the last week too.
    pub fn reservations(&self, all: bool) -> Result<Vec<crate::api::ReservationView>, ClientError> {
        self.get(if all {
            "/reservations?all=true"
        } else {
            "/reservations"
        })
    }

    pub fn cancel_reservation(
        &self,
        name: &str,
    ) -> Result<crate::api::ReservationView, ClientError> {
        self.post(
            &format!("/reservations/{}/cancel", percent_encode(name)),
            &serde_json::json!({}),
        )
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
        let patience = if query.follow {
            Patience::Forever
        } else {
            Patience::Call
        };
        Ok(self.request("GET", &target, None, patience)?.body)
    }
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

/// How many jobs the client asks for per page (`BATON_PAGE_SIZE`, for tests; default and at
/// most [`PAGE_MAX`]).
fn page_size() -> usize {
    std::env::var("BATON_PAGE_SIZE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .map_or(PAGE_MAX, |n| n.min(PAGE_MAX))
}

/// A listing's path and query string.
fn list_target(path: &str, q: &ListQuery) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut add = |key: &str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            parts.push(format!("{key}={}", percent_encode(&v)));
        }
    };
    add("ids", q.ids.clone());
    add("all", q.all.then(|| "true".to_string()));
    add("session", q.session.clone());
    add("state", q.state.clone());
    add("name", q.name.clone());
    add("owner", q.owner.clone());
    add("since", q.since.clone());
    add("until", q.until.clone());
    add("workflow", q.workflow.map(|w| w.to_string()));
    add("limit", q.limit.map(|l| l.to_string()));
    add("before", q.before.map(|b| b.to_string()));
    if parts.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", parts.join("&"))
    }
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
