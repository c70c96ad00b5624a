//! The accept loop of the API socket: takes a listener and a shutdown signal, serves each
//! connection with the router, and drains on stop. It owns what keeps one local user from
//! freezing a shared daemon (the socket of `--system` is open to everyone):
//!
//! - at most `connections_per_user` connections per uid and `connections` in all; one more is
//!   answered at once with a JSON 503 that says so, and closed;
//! - a request must arrive whole (headers, then body) within `request_timeout`; an idle or slow
//!   connection is closed (headers) or answered 408 (body). A request that has arrived may take
//!   as long as it needs (`wait` and `logs --follow` hold theirs open for hours);
//! - one request per connection (no keep-alive), so nothing idles between requests;
//! - descriptors: the connection caps stay well below the limit on open files, so that the
//!   daemon's own work (jobs' files, the database, supervisors' pidfds) always has descriptors,
//!   and a spare one is kept to accept-and-close when the table is full anyway.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};

use super::Peer;

/// Descriptors kept free of connections for everything else the daemon does.
const RESERVED_FDS: u64 = 256;
/// How long a draining daemon waits for requests in flight before it exits anyway.
const DRAIN: Duration = Duration::from_secs(10);

pub use crate::config::ConnectionLimits;

/// The total connection cap, lowered to leave `RESERVED_FDS` of the soft limit on open files
/// (and as many again for what serving a connection opens) to the daemon's own work. The limit
/// itself is left as it is: jobs inherit it, and some programs misbehave with a large one.
pub fn fit_to_descriptors(limits: ConnectionLimits) -> ConnectionLimits {
    let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let room = nofile
        .current
        .map_or(usize::MAX, |n| n.saturating_sub(RESERVED_FDS) as usize / 2);
    ConnectionLimits {
        total: limits.total.min(room.max(1)),
        ..limits
    }
}

/// Connections open per uid, and in all.
#[derive(Default)]
struct Open {
    per_uid: HashMap<u32, usize>,
    total: usize,
}

/// One admitted connection; gives its place back when dropped.
struct Admitted {
    open: Arc<Mutex<Open>>,
    uid: u32,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total -= 1;
        if let Some(n) = open.per_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                open.per_uid.remove(&self.uid);
            }
        }
    }
}

/// Takes a place for `uid`, or says why there is none.
fn admit(open: &Arc<Mutex<Open>>, uid: u32, limits: &ConnectionLimits) -> Result<Admitted, String> {
    let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
    let mine = o.per_uid.get(&uid).copied().unwrap_or(0);
    if mine >= limits.per_user {
        return Err(format!(
            "too many connections from uid {uid}: {mine} are open, the limit per user is {} \
             (`[limits] connections_per_user`); close some and try again",
            limits.per_user
        ));
    }
    if o.total >= limits.total {
        return Err(format!(
            "the daemon has {} connections open, its limit (`[limits] connections`); try again \
             shortly",
            o.total
        ));
    }
    o.total += 1;
    *o.per_uid.entry(uid).or_insert(0) += 1;
    Ok(Admitted {
        open: open.clone(),
        uid,
    })
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting, calls
/// `on_stop` (which ends long-polls) and waits (at most `DRAIN`) for requests in flight.
pub async fn serve(
    listener: UnixListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
    on_stop: impl FnOnce(),
) -> std::io::Result<()> {
    let open = Arc::new(Mutex::new(Open::default()));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut spare = Spare::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.request_timeout)
        .keep_alive(false);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    spare.after_accept_error(&listener, &e).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let peer = Peer::of(&stream);
        let admitted = match admit(&open, peer.uid, &limits) {
            Ok(a) => a,
            Err(why) => {
                tokio::spawn(refuse(stream, why));
                continue;
            }
        };
        let router = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let mut router = router.clone();
            // A Router is always ready: no poll_ready needed.
            async move { tower_service::Service::call(&mut router, request).await }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _admitted = admitted;
            // A client that went away or timed out: nothing to report.
            let _ = connection.await;
        });
    }
    drop(listener);
    on_stop();
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after {DRAIN:?}; stopping anyway");
    }
    Ok(())
}

/// Reads a request's whole body before its handler runs, within the time left of
/// `request_timeout`: a client that sends its body slowly (or not at all) gets a 408 instead of
/// holding its connection and a handler. A middleware, so every route is covered.
pub async fn whole_body_within(
    axum::extract::State(daemon): axum::extract::State<Arc<super::Daemon>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Result<axum::response::Response, super::ApiError> {
    let timeout = daemon.config.connections.request_timeout;
    let (parts, body) = request.into_parts();
    let limit = crate::api::MAX_BODY_BYTES;
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        // Worded, with its hint, where every refusal of axum's is (`error::json_errors`).
        Ok(Err(_)) => {
            use axum::response::IntoResponse;
            return Ok(axum::http::StatusCode::PAYLOAD_TOO_LARGE.into_response());
        }
        Err(_) => {
            return Err(super::ApiError::Rejected {
                status: axum::http::StatusCode::REQUEST_TIMEOUT,
                message: format!(
                    "the request body did not arrive within {} (`[limits] request_timeout`)",
                    baton_core::units::format_duration(timeout.as_millis() as i64)
                ),
            });
        }
    };
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    Ok(next.run(request).await)
}

/// Answers a connection over a limit with a JSON 503 and closes it, without waiting long for
/// a client that does not read.
async fn refuse(mut stream: UnixStream, why: String) {
    let body = serde_json::to_string(&crate::api::ErrorBody {
        error: why,
        hint: Some("each user of a shared daemon may hold a bounded number of connections".into()),
    })
    .expect("plain data");
    let response = format!(
        "HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(response.as_bytes()),
    )
    .await;
    let _ = stream.shutdown().await;
}

/// A descriptor held in reserve: when accept fails because the process has none left, it is
/// given up to accept the waiting connection and close it at once (otherwise the listener stays
/// readable and the loop spins), then taken again.
struct Spare(Option<std::fs::File>);

impl Spare {
    fn new() -> Spare {
        Spare(std::fs::File::open("/dev/null").ok())
    }

    async fn after_accept_error(&mut self, listener: &UnixListener, e: &std::io::Error) {
        let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
        if !out_of_fds {
            // ECONNABORTED and the like: that one client's trouble.
            tracing::debug!("accept failed: {e}");
            return;
        }
        tracing::error!("out of file descriptors: refusing connections for a moment");
        self.0 = None;
        if let Ok(Ok((stream, _))) =
            tokio::time::timeout(Duration::from_millis(10), listener.accept()).await
        {
            drop(stream);
        }
        self.0 = std::fs::File::open("/dev/null").ok();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            total: 3,
            per_user: 2,
            request_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn places_are_counted_per_user_and_in_all_and_given_back() {
        let open = Arc::new(Mutex::new(Open::default()));
        let a1 = admit(&open, 1000, &limits()).unwrap();
        let _a2 = admit(&open, 1000, &limits()).unwrap();
        let err = admit(&open, 1000, &limits()).err().unwrap();
        assert!(
            err.contains("uid 1000") && err.contains("limit per user is 2"),
            "{err}"
        );
        let _b1 = admit(&open, 1001, &limits()).unwrap();
        let err = admit(&open, 1002, &limits()).err().unwrap();
        assert!(err.contains("3 connections open"), "{err}");
        drop(a1);
        admit(&open, 1002, &limits()).unwrap();
        assert_eq!(open.lock().unwrap().per_uid.get(&1000), Some(&1));
    }

    #[test]
    fn the_total_leaves_descriptors_for_the_daemon() {
        let fitted = fit_to_descriptors(ConnectionLimits {
            total: usize::MAX,
            ..limits()
        });
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(n) = nofile.current {
            assert!((fitted.total as u64) <= n.saturating_sub(RESERVED_FDS));
        }
    }
}
