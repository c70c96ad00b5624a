//! The daemon's link to its supervisor (`supervisor/`): the one already listening on the state
//! directory's socket, or one started (`baton supervisor SOCKET`) when none answers. Launches
//! and cancels go to it as lines (`supervisor::protocol`). A thread per connection reads its
//! `ended` lines and hands each batch of them (every line that had arrived) to the daemon's
//! `Events`, on that thread: an end is recorded, and the next jobs started, with no hop to
//! another thread in between. When the connection ends (the supervisor was killed), the
//! attempts it had been given and not finished go to `Events::gone`, and the daemon reads each
//! one's record to learn what became of it, as it does after a restart.

use std::collections::HashSet;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::supervisor::protocol::{Ended, Request};

/// How long a supervisor just started may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// What the daemon does with what the supervisor says. Called on the link's reader thread.
pub trait Events: Send + Sync + 'static {
    /// These attempts ended (their ends are in their records).
    fn ended(&self, ended: &[Ended]);
    /// The supervisor is gone, with these attempts given to it and not reported ended.
    fn gone(&self, unfinished: Vec<Ended>);
}

/// The daemon's handle on its supervisor; connected on first use, and again after the
/// supervisor went away.
pub struct Link {
    exe: PathBuf,
    socket: PathBuf,
    events: OnceLock<Arc<dyn Events>>,
    conn: Mutex<Option<Arc<Conn>>>,
}

/// One attempt, as the supervisor names it.
type Key = (String, u32);

struct Conn {
    writer: Mutex<UnixStream>,
    /// The supervisor's pid, from the socket's peer credentials.
    pid: i32,
    given: Mutex<Given>,
}

/// The attempts given to one supervisor and not reported ended.
#[derive(Default)]
struct Given {
    /// True once the connection ended: nothing more goes through it.
    closed: bool,
    attempts: HashSet<Key>,
}

/// How a cancel reaches an attempt the supervisor runs.
pub struct Stopper {
    key: Key,
    conn: Weak<Conn>,
}

impl Link {
    /// The link to the supervisor of the state directory whose socket is `socket`, started
    /// from the baton binary `exe` when none runs.
    pub fn new(exe: PathBuf, socket: PathBuf) -> Link {
        Link {
            exe,
            socket,
            events: OnceLock::new(),
            conn: Mutex::new(None),
        }
    }

    /// Where what the supervisor says goes; set once, before the first connection.
    pub fn set_events(&self, events: Arc<dyn Events>) {
        let _ = self.events.set(events);
    }

    /// Connects to the supervisor, starting one if none runs.
    pub fn connect(&self) -> io::Result<()> {
        self.connected().map(drop)
    }

    /// Asks the supervisor to run the launch written in `dir`.
    pub fn launch(&self, dir: &Path, attempt: u32) -> io::Result<Stopper> {
        let key = key(dir, attempt)?;
        let mut last = None;
        // A supervisor that died since the last launch is replaced once.
        for _ in 0..2 {
            let conn = self.connected()?;
            // Given before it is sent: should the supervisor die at once, the attempt is among
            // those `gone` reports.
            if !conn.give(&key) {
                self.forget(&conn);
                continue;
            }
            let request = Request::Launch {
                attempt,
                dir: key.0.clone(),
            };
            match conn.send(&request) {
                Ok(()) => {
                    return Ok(Stopper {
                        key,
                        conn: Arc::downgrade(&conn),
                    });
                }
                Err(e) => {
                    conn.take_back(&key);
                    self.forget(&conn);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("the supervisor went away")))
    }

    /// The pid of the supervisor this daemon reaches (connecting first), for a restarted
    /// daemon to tell the attempts it runs.
    pub fn supervisor_pid(&self) -> Option<i32> {
        self.connected().ok().map(|c| c.pid)
    }

    /// For a restarted daemon: an attempt that the supervisor with `pid` runs, found in its
    /// record, from now on followed through this link. `None` if that supervisor is not the
    /// one this daemon reaches.
    pub fn adopt(&self, dir: &Path, attempt: u32, pid: i32) -> Option<Stopper> {
        let key = key(dir, attempt).ok()?;
        let conn = self.connected().ok()?;
        (conn.pid == pid && conn.give(&key)).then(|| Stopper {
            key,
            conn: Arc::downgrade(&conn),
        })
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
                match self.opened(stream, None) {
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
        self.opened(stream, Some(child))
    }

    /// A connection to a supervisor of this user, with its reader thread started. `child`: the
    /// supervisor, when this daemon started it (reaped once it exits).
    fn opened(&self, stream: UnixStream, child: Option<Child>) -> io::Result<Arc<Conn>> {
        let cred = rustix::net::sockopt::socket_peercred(stream.as_fd())?;
        if cred.uid != rustix::process::geteuid() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the supervisor's socket belongs to another user",
            ));
        }
        let events = self
            .events
            .get()
            .cloned()
            .ok_or_else(|| io::Error::other("nothing takes the supervisor's word yet"))?;
        let reader = stream.try_clone()?;
        let conn = Arc::new(Conn {
            writer: Mutex::new(stream),
            pid: cred.pid.as_raw_nonzero().get(),
            given: Mutex::default(),
        });
        let theirs = conn.clone();
        std::thread::Builder::new()
            .name("baton-supervisor-link".into())
            .spawn(move || theirs.read(reader, child, &*events))?;
        Ok(conn)
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
    fn writer(&self) -> MutexGuard<'_, UnixStream> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn given(&self) -> MutexGuard<'_, Given> {
        self.given.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_closed(&self) -> bool {
        self.given().closed
    }

    /// Counts the attempt as given to this supervisor; false once the connection ended.
    fn give(&self, key: &Key) -> bool {
        let mut given = self.given();
        if given.closed {
            return false;
        }
        given.attempts.insert(key.clone());
        true
    }

    fn take_back(&self, key: &Key) {
        self.given().attempts.remove(key);
    }

    fn send(&self, request: &Request) -> io::Result<()> {
        self.writer().write_all(request.line().as_bytes())
    }

    /// The reader thread: hands each batch of ends to `events`, then, when the connection
    /// ends, the attempts left.
    fn read(self: Arc<Conn>, stream: UnixStream, child: Option<Child>, events: &dyn Events) {
        let mut reader = BufReader::new(stream);
        let mut batch = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            match Ended::parse(line.trim_end_matches('\n')) {
                Some(ended) => {
                    self.given()
                        .attempts
                        .remove(&(ended.dir.clone(), ended.attempt));
                    batch.push(ended);
                }
                None => tracing::warn!("unexpected line from the supervisor: {line:?}"),
            }
            // Every end that has arrived goes in one batch: one scheduling pass after them.
            if !reader.buffer().contains(&b'\n') && !batch.is_empty() {
                events.ended(&batch);
                batch.clear();
            }
        }
        let left: Vec<Ended> = {
            let mut given = self.given();
            given.closed = true;
            std::mem::take(&mut given.attempts)
                .into_iter()
                .map(|(dir, attempt)| Ended { attempt, dir })
                .collect()
        };
        if !left.is_empty() {
            tracing::warn!(
                "the supervisor is gone with {} attempt(s) unfinished; reading their records",
                left.len()
            );
        }
        events.gone(left);
        if let Some(mut child) = child {
            let _ = child.wait();
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
