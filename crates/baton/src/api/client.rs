//! The client side of the protocol: typed calls over the daemon's Unix socket, and starting a
//! user daemon in the background when `baton submit` finds none.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::*;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "no baton daemon is running at {socket}; start one with `baton serve` (or `baton submit`, which starts one for you)"
    )]
    NotRunning { socket: PathBuf },
    #[error("{message}")]
    Api { status: u16, message: String },
    #[error("could not start a daemon: {0}")]
    StartFailed(String),
    #[error("talking to the daemon failed: {0}")]
    Transport(#[from] reqwest::Error),
}

impl ClientError {
    /// Errors the caller caused (bad input, someone else's job, no such job).
    pub fn is_usage(&self) -> bool {
        matches!(self, ClientError::Api { status, .. } if (400..500).contains(status))
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    socket: PathBuf,
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        let socket = socket.into();
        let http = reqwest::Client::builder()
            .unix_socket(socket.clone())
            .build()
            .expect("a client with no TLS and no proxies always builds");
        Client { http, socket }
    }

    fn url(path: &str) -> String {
        format!("http://baton{PREFIX}{path}")
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let resp = self.execute(req).await?;
        Ok(resp.json().await?)
    }

    async fn execute(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let resp = req.send().await.map_err(|e| {
            if e.is_connect() {
                ClientError::NotRunning {
                    socket: self.socket.clone(),
                }
            } else {
                ClientError::Transport(e)
            }
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let text = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<ErrorBody>(&text)
            .map(|b| b.error)
            .unwrap_or_else(|_| format!("daemon answered {status}: {text}"));
        Err(ClientError::Api {
            status: status.as_u16(),
            message,
        })
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(Self::url(path))
    }

    fn post<B: Serialize>(&self, path: &str, body: &B) -> reqwest::RequestBuilder {
        self.http.post(Self::url(path)).json(body)
    }

    pub async fn info(&self) -> Result<InfoResponse, ClientError> {
        self.send(self.get("/info")).await
    }

    pub async fn submit(&self, req: &SubmitRequest) -> Result<JobView, ClientError> {
        self.send(self.post("/jobs", req)).await
    }

    pub async fn list(&self, ids: &[u64], all: bool) -> Result<Vec<JobView>, ClientError> {
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        let query = ListQuery {
            ids: (!ids.is_empty()).then(|| ids.join(",")),
            all,
        };
        self.send(self.get("/jobs").query(&query)).await
    }

    pub async fn wait(&self, req: &WaitRequest) -> Result<WaitResponse, ClientError> {
        self.send(self.post("/wait", req)).await
    }

    pub async fn cancel(&self, ids: &[u64]) -> Result<CancelResponse, ClientError> {
        self.send(self.post("/cancel", &CancelRequest { ids: ids.to_vec() }))
            .await
    }

    pub async fn events(&self, id: u64) -> Result<Vec<EventView>, ClientError> {
        self.send(self.get(&format!("/jobs/{id}/events"))).await
    }

    pub async fn gpus(&self) -> Result<GpusResponse, ClientError> {
        self.send(self.get("/gpus")).await
    }

    /// The job's output as a stream of chunks (endless with `follow` until the job ends).
    pub async fn logs(
        &self,
        id: u64,
        query: &LogsQuery,
    ) -> Result<impl Stream<Item = Result<Vec<u8>, ClientError>> + use<>, ClientError> {
        let resp = self
            .execute(self.get(&format!("/jobs/{id}/logs")).query(query))
            .await?;
        Ok(resp
            .bytes_stream()
            .map(|r| r.map(|b| b.to_vec()).map_err(ClientError::from)))
    }

    /// Starts a user daemon in the background for `home` and waits (at most 10 s) until it
    /// answers. Only the user's own socket is ever auto-started: a system socket or an explicit
    /// `BATON_SOCKET` that nobody serves is reported instead.
    pub async fn start_daemon(&self, home: &Path) -> Result<(), ClientError> {
        if self.socket != home.join("baton.sock") {
            return Err(ClientError::NotRunning {
                socket: self.socket.clone(),
            });
        }
        spawn_daemon(home)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.info().await {
                Ok(_) => return Ok(()),
                Err(ClientError::NotRunning { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
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
