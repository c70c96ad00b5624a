//! The daemon's link to its supervisor (`supervisor/`): the one already listening on the state
//! directory's socket, or one started (`baton supervisor SOCKET`) when none answers. Launches
//! and cancels go to it as lines (`supervisor::protocol`); each `ended` line resolves the
//! `Waiter` of that attempt. A thread per connection reads those lines. When the connection
//! ends (the supervisor was killed), every waiter still open resolves, and the daemon reads
//! each attempt's record to learn what became of it, as it does after a restart.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::supervisor::protocol::{Ended, Request};

/// How long a supervisor just started may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The daemon's handle on its supervisor; connected on first use, and again after the
/// supervisor went away.
pub struct Link {
    exe: PathBuf,
    socket: PathBuf,
    conn: Mutex<Option<Arc<Conn>>>,
}

/// One attempt, as the supervisor names it.
type Key = (String, u32);

struct Conn {
    writer: Mutex<UnixStream>,
    /// The supervisor's pid, from the socket's peer credentials.
    pid: i32,
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    /// False once the connection ended: nothing more will be resolved through it.
    closed: bool,
    by_attempt: HashMap<Key, (u64, oneshot::Sender<()>)>,
}

/// Resolves when the supervisor says the attempt ended, or when the supervisor is gone.
pub struct Waiter {
    rx: oneshot::Receiver<()>,
    key: Key,
    id: u64,
    conn: Weak<Conn>,
}

/// How a cancel reaches an attempt the supervisor runs.
pub struct Stopper {
    key: Key,
    conn: Weak<Conn>,
}

static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

impl Link {
    /// The link to the supervisor of the state directory whose socket is `socket`, started
    /// from the baton binary `exe` when none runs.
    pub fn new(exe: PathBuf, socket: PathBuf) -> Link {
        Link {
            exe,
            socket,
            conn: Mutex::new(None),
        }
    }

    /// Asks the supervisor to run the launch written in `dir`. The waiter is registered before
    /// the request goes out, so its end cannot come first.
    pub fn launch(&self, dir: &Path, attempt: u32) -> io::Result<(Waiter, Stopper)> {
        let key = key(dir, attempt)?;
        let mut last = None;
        // A supervisor that died since the last launch is replaced once.
        for _ in 0..2 {
            let conn = self.connected()?;
            let Some(waiter) = conn.register(&key) else {
                self.forget(&conn);
                continue;
            };
            let request = Request::Launch {
                attempt,
                dir: key.0.clone(),
            };
            match conn.send(&request) {
                Ok(()) => {
                    let stopper = Stopper {
                        key,
                        conn: Arc::downgrade(&conn),
                    };
                    return Ok((waiter, stopper));
                }
                Err(e) => {
                    drop(waiter);
                    self.forget(&conn);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the supervisor went away")))
    }

    /// For a restarted daemon: a waiter (and a stopper) for an attempt that the supervisor it
    /// now reaches may be running, with that supervisor's pid, to be kept only if the attempt's
    /// record names that pid. Registered before the record is read, so an end in between is
    /// not missed.
    pub fn watch(&self, dir: &Path, attempt: u32) -> Option<(Waiter, Stopper, i32)> {
        let key = key(dir, attempt).ok()?;
        let conn = self.connected().ok()?;
        let waiter = conn.register(&key)?;
        let stopper = Stopper {
            key,
            conn: Arc::downgrade(&conn),
        };
        Some((waiter, stopper, conn.pid))
    }

    /// Connects to the supervisor, starting one if none runs.
    pub fn connect(&self) -> io::Result<()> {
        self.connected().map(drop)
    }

    fn connections(&self) -> MutexGuard<'_, Option<Arc<Conn>>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn connected(&self) -> io::Result<Arc<Conn>> {
        let mut conn = self.connections();
        if let Some(c) = conn.as_ref()
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        let fresh = self.open()?;
        *conn = Some(fresh.clone());
        Ok(fresh)
    }

    fn forget(&self, dead: &Arc<Conn>) {
        let mut conn = self.connections();
        if conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, dead)) {
            *conn = None;
        }
    }

    /// Connects to the supervisor that listens, or starts one and connects to it.
    fn open(&self) -> io::Result<Arc<Conn>> {
        let mut last = None;
        // A supervisor that is exiting (nothing to run, no daemon) answers `busy` to its
        // successor until it is gone: a few tries.
        for _ in 0..5 {
            if let Ok(stream) = UnixStream::connect(&self.socket) {
                match Conn::open(stream, None) {
                    Ok(conn) => return Ok(conn),
                    // A socket of someone else's: no supervisor of ours can listen there.
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(e),
                    Err(_) => {}
                }
            }
            match self.start() {
                Ok(conn) => return Ok(conn),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(last.unwrap_or_else(|| io::Error::other("no supervisor")))
    }

    fn start(&self) -> io::Result<Arc<Conn>> {
        let mut child = Command::new(&self.exe)
            .arg("supervisor")
            .arg(&self.socket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let said = child
            .stdout
            .take()
            .map(|out| first_line(out, START_TIMEOUT))
            .unwrap_or_default();
        if said.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other(format!(
                "the supervisor did not start: {}",
                if said.is_empty() {
                    "no answer"
                } else {
                    said.trim()
                }
            )));
        }
        let stream = UnixStream::connect(&self.socket)?;
        Conn::open(stream, Some(child))
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // The reader thread holds the connection too: shutting it down ends that thread, and
        // tells the supervisor this daemon is gone.
        if let Some(conn) = self.connections().take() {
            let _ = conn.writer().shutdown(Shutdown::Both);
        }
    }
}

impl Conn {
    /// A connection to a supervisor of this user, with its reader thread started. `child`: the
    /// supervisor, when this daemon started it (reaped once it exits).
    fn open(stream: UnixStream, child: Option<Child>) -> io::Result<Arc<Conn>> {
        let cred = rustix::net::sockopt::socket_peercred(stream.as_fd())?;
        if cred.uid != rustix::process::geteuid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the supervisor's socket belongs to another user",
            ));
        }
        let reader = stream.try_clone()?;
        let conn = Arc::new(Conn {
            writer: Mutex::new(stream),
            pid: cred.pid.as_raw_nonzero().get(),
            waiters: Mutex::default(),
        });
        let theirs = conn.clone();
        std::thread::Builder::new()
            .name("baton-supervisor-link".into())
            .spawn(move || theirs.read(reader, child))?;
        Ok(conn)
    }

    fn writer(&self) -> MutexGuard<'_, UnixStream> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn waiters(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_closed(&self) -> bool {
        self.waiters().closed
    }

    fn register(self: &Arc<Conn>, key: &Key) -> Option<Waiter> {
        let mut waiters = self.waiters();
        if waiters.closed {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let id = NEXT_WAITER.fetch_add(1, Ordering::Relaxed);
        waiters.by_attempt.insert(key.clone(), (id, tx));
        Some(Waiter {
            rx,
            key: key.clone(),
            id,
            conn: Arc::downgrade(self),
        })
    }

    fn send(&self, request: &Request) -> io::Result<()> {
        self.writer().write_all(request.line().as_bytes())
    }

    /// The reader thread: resolves waiters as their attempts end, then every one left when
    /// the connection ends.
    fn read(self: Arc<Conn>, stream: UnixStream, child: Option<Child>) {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let Some(Ended { attempt, dir }) = Ended::parse(&line) else {
                tracing::warn!("unexpected line from the supervisor: {line:?}");
                continue;
            };
            if let Some((_, tx)) = self.waiters().by_attempt.remove(&(dir, attempt)) {
                let _ = tx.send(());
            }
        }
        let left = {
            let mut waiters = self.waiters();
            waiters.closed = true;
            std::mem::take(&mut waiters.by_attempt)
        };
        if !left.is_empty() {
            tracing::warn!(
                "the supervisor is gone with {} attempt(s) unfinished; reading their records",
                left.len()
            );
        }
        for (_, tx) in left.into_values() {
            let _ = tx.send(());
        }
        if let Some(mut child) = child {
            let _ = child.wait();
        }
    }
}

impl Waiter {
    /// Resolves when the attempt ended, or its supervisor is gone.
    pub async fn ended(mut self) {
        let _ = (&mut self.rx).await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.upgrade() {
            let mut waiters = conn.waiters();
            if waiters
                .by_attempt
                .get(&self.key)
                .is_some_and(|(id, _)| *id == self.id)
            {
                waiters.by_attempt.remove(&self.key);
            }
        }
    }
}

impl Stopper {
    /// Asks the supervisor to stop the attempt; false when it cannot be reached.
    pub fn stop(&self) -> bool {
        let Some(conn) = self.conn.upgrade() else {
            return false;
        };
        !conn.is_closed()
            && conn
                .send(&Request::Stop {
                    attempt: self.key.1,
                    dir: self.key.0.clone(),
                })
                .is_ok()
    }
}

fn key(dir: &Path, attempt: u32) -> io::Result<Key> {
    let dir = dir
        .to_str()
        .filter(|d| !d.contains('\n'))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "unusable job path"))?;
    Ok((dir.to_string(), attempt))
}

/// The first line `out` gives within `timeout` (empty if none).
fn first_line(mut out: impl Read + AsFd, timeout: Duration) -> String {
    use rustix::event::{PollFd, PollFlags, poll};
    let until = Instant::now() + timeout;
    let mut said = Vec::new();
    let mut buf = [0u8; 256];
    while !said.contains(&b'\n') {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let wait = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as i64,
        };
        let mut fds = [PollFd::new(&out, PollFlags::IN)];
        match poll(&mut fds, Some(&wait)) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => break,
        }
        match out.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => said.extend_from_slice(&buf[..n]),
        }
    }
    let end = said.iter().position(|&b| b == b'\n').unwrap_or(said.len());
    String::from_utf8_lossy(&said[..end]).into_owned()
}
