//! The dashboard (`baton serve --web-addr`): pages for the people who share the GPUs, served
//! over TCP (loopback by default) beside the Unix socket's API. Nobody is anonymous: `baton
//! dashboard` asks the daemon, over the socket whose peer credentials say who is asking, for a
//! one-time login token; `GET /login?token=...` trades it for a session cookie bound to that
//! uid, and every page is rendered for that peer exactly as the socket's API would answer it
//! (`Peer::may_act_on`). Without a session: 401. Pages are server-rendered HTML with every
//! value escaped (`html`); nothing is fetched from anywhere else.

mod chart;
mod history;
mod html;
mod job;
mod overview;
mod sweep;
mod waste;
mod workflow;

use std::collections::HashMap;
use std::future::Future;
use std::io::Read;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use baton_core::Millis;

use crate::daemon::{ApiError, Daemon, Peer, now_ms};

/// How long a login token may wait to be used.
const TOKEN_LIFETIME_MS: Millis = 2 * 60_000;
/// How long a session lasts.
const SESSION_LIFETIME_MS: Millis = 12 * 3_600_000;
/// The session cookie's name.
const COOKIE: &str = "baton_session";

/// The login tokens handed out and the sessions they became, each bound to the uid that asked.
#[derive(Default)]
pub struct Sessions {
    tokens: Mutex<HashMap<String, (Peer, Millis)>>,
    sessions: Mutex<HashMap<String, Session>>,
}

/// A logged-in browser: whose it is, until when, and the token its forms must carry (a form
/// posted from another site cannot know it).
#[derive(Clone)]
struct Session {
    peer: Peer,
    expires: Millis,
    csrf: String,
}

impl Sessions {
    /// A one-time token for `peer`, good for [`TOKEN_LIFETIME_MS`] (`None`: no randomness to
    /// make one with).
    pub fn token_for(&self, peer: Peer) -> Option<String> {
        let token = random_hex()?;
        let now = now_ms();
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        tokens.retain(|_, (_, expires)| *expires > now);
        tokens.insert(token.clone(), (peer, now + TOKEN_LIFETIME_MS));
        Some(token)
    }

    /// Uses `token` up: a new session for its peer, if it is good.
    fn log_in(&self, token: &str) -> Option<String> {
        let now = now_ms();
        let (peer, expires) = self
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token)?;
        if expires <= now {
            return None;
        }
        let session = random_hex()?;
        let csrf = random_hex()?;
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, s| s.expires > now);
        sessions.insert(
            session.clone(),
            Session {
                peer,
                expires: now + SESSION_LIFETIME_MS,
                csrf,
            },
        );
        Some(session)
    }

    /// The live session the request's cookie names, if any.
    fn session(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.get(id).filter(|s| s.expires > now_ms()).cloned()
    }

    /// Whose session the request's cookie names, if it names a live one.
    fn peer(&self, headers: &HeaderMap) -> Option<Peer> {
        self.session(headers).map(|s| s.peer)
    }
}

/// 32 random bytes as hex: a token or session id nobody can guess (`None` without
/// `/dev/urandom`: then no session is safe, and none is made).
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The dashboard's routes.
fn router(daemon: Arc<Daemon>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/login", get(login))
        .route("/jobs/{id}", get(job_page))
        .route("/jobs/{id}/confirm/{action}", get(confirm))
        .route("/jobs/{id}/{action}", post(act))
        .route("/history", get(history_page))
        .route("/waste", get(waste_page))
        .route("/sweeps/{id}", get(sweep_page))
        .route("/workflows/{id}", get(workflow_page))
        .route("/events", get(events))
        .route("/live.js", get(live_js))
        .route("/favicon.svg", get(favicon))
        .with_state(daemon)
}

/// Serves the dashboard on `listener` until `shutdown` resolves.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    daemon: Arc<Daemon>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(daemon))
        .with_graceful_shutdown(shutdown)
        .await
}

#[derive(serde::Deserialize)]
struct LoginQuery {
    #[serde(default)]
    token: String,
}

/// `GET /login?token=...`: a good token becomes a session cookie, and the overview.
async fn login(State(daemon): State<Arc<Daemon>>, Query(q): Query<LoginQuery>) -> Response {
    let Some(session) = daemon.web.log_in(&q.token) else {
        return unauthorized("That login link is used up, expired or wrong.");
    };
    let cookie = format!(
        "{COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_LIFETIME_MS / 1000
    );
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// A page rendered for the session's peer: 401 without a session, and a refusal (403, 404, 400)
/// shown as a page with its status.
async fn session_page<Page>(
    daemon: &Daemon,
    headers: &HeaderMap,
    render: impl FnOnce(Peer) -> Page,
) -> Response
where
    Page: Future<Output = Result<String, ApiError>>,
{
    let Some(peer) = daemon.web.peer(headers) else {
        return unauthorized("This page needs a session.");
    };
    match render(peer).await {
        Ok(page) => page_response(page),
        Err(e) => refused(&e),
    }
}

/// `GET /`: the overview, for the session's peer.
async fn overview(State(daemon): State<Arc<Daemon>>, headers: HeaderMap) -> Response {
    session_page(&daemon, &headers, |peer| overview::render(&daemon, peer)).await
}

/// `GET /jobs/ID`: the job's page, if the session's peer may read it.
async fn job_page(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    session_page(&daemon, &headers, |peer| job::render(&daemon, peer, id)).await
}

/// `GET /history?state=&name=&owner=&since=&before=`: the job history, filtered and paged.
async fn history_page(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    Query(query): Query<crate::api::ListQuery>,
) -> Response {
    // Empty fields of the filter form are no filter.
    let blank = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
    let query = crate::api::ListQuery {
        state: blank(query.state),
        name: blank(query.name),
        owner: blank(query.owner),
        since: blank(query.since),
        until: blank(query.until),
        ..query
    };
    session_page(&daemon, &headers, |peer| {
        history::render(&daemon, peer, query)
    })
    .await
}

#[derive(serde::Deserialize)]
struct SortQuery {
    #[serde(default)]
    sort: String,
}

/// `GET /sweeps/ID?sort=COLUMN`: the sweep and its comparison.
async fn sweep_page(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Query(query): Query<SortQuery>,
) -> Response {
    session_page(&daemon, &headers, |peer| {
        sweep::render(&daemon, peer, id, &query.sort)
    })
    .await
}

/// `GET /workflows/ID`: the workflow's DAG and tasks.
async fn workflow_page(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Response {
    session_page(&daemon, &headers, |peer| {
        workflow::render(&daemon, peer, id)
    })
    .await
}

#[derive(serde::Deserialize)]
struct WasteQuery {
    #[serde(default)]
    since: String,
}

/// `GET /waste?since=7d`: usage KPIs and the waste rules' audit log.
async fn waste_page(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    Query(query): Query<WasteQuery>,
) -> Response {
    session_page(&daemon, &headers, |peer| {
        waste::render(&daemon, peer, &query.since)
    })
    .await
}

/// `GET /jobs/ID/confirm/ACTION`: asks before anything is done.
async fn confirm(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    Path((id, action)): Path<(u64, String)>,
) -> Response {
    let Some(session) = daemon.web.session(&headers) else {
        return unauthorized("This page needs a session.");
    };
    let Some(action) = job::JobAction::parse(&action) else {
        return refused(&ApiError::NotFound(format!("no action {action:?}")));
    };
    page_response(job::confirmation(id, action, &session.csrf))
}

#[derive(serde::Deserialize)]
struct ActForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /jobs/ID/ACTION`: a confirmed action, from a form of this dashboard (its CSRF token),
/// checked by the API's own handler; back to the job's page.
async fn act(
    State(daemon): State<Arc<Daemon>>,
    headers: HeaderMap,
    Path((id, action)): Path<(u64, String)>,
    Form(form): Form<ActForm>,
) -> Response {
    let Some(session) = daemon.web.session(&headers) else {
        return unauthorized("This needs a session.");
    };
    if form.csrf.is_empty() || form.csrf != session.csrf {
        return refused(&ApiError::Forbidden(
            "this form did not come from your dashboard session".into(),
        ));
    }
    let Some(action) = job::JobAction::parse(&action) else {
        return refused(&ApiError::NotFound(format!("no action {action:?}")));
    };
    match job::act(&daemon, session.peer, id, action).await {
        Ok(()) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, format!("/jobs/{id}"))],
        )
            .into_response(),
        Err(e) => refused(&e),
    }
}

/// `GET /events`: a server-sent event (`change`) each time a job changes state, for the pages
/// to refresh themselves; it ends when the daemon stops.
async fn events(State(daemon): State<Arc<Daemon>>, headers: HeaderMap) -> Response {
    if daemon.web.peer(&headers).is_none() {
        return unauthorized("The live updates need a session.");
    }
    let feed = daemon.subscribe_changes();
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        if *feed.stopping.borrow() {
            return None;
        }
        // A job's change goes first: a page that shows both needs one refresh, not two.
        let event = tokio::select! {
            biased;
            _ = feed.stopping.changed() => return None,
            seen = feed.changed.changed() => {
                seen.ok()?;
                // The page fetched for the change shows the latest sample too.
                feed.sampled.borrow_and_update();
                let count = *feed.changed.borrow_and_update();
                Event::default().event("change").data(count.to_string())
            }
            seen = feed.sampled.changed() => {
                seen.ok()?;
                let count = *feed.sampled.borrow_and_update();
                Event::default().event("sample").data(count.to_string())
            }
        };
        Some((Ok::<_, std::convert::Infallible>(event), feed))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The pages' one script: on each `change`, the page fetches itself again and swaps its body
/// in (no reload, no timer that polls).
const LIVE_JS: &str = include_str!("live.js");

/// The pages' icon (a browser asks for one; without it, every page logs a 404).
const FAVICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
<rect width=\"16\" height=\"16\" rx=\"3\" fill=\"#3574b5\"/>\
<path d=\"M3 13 L13 3\" stroke=\"#fff\" stroke-width=\"2.5\" stroke-linecap=\"round\"/></svg>";

async fn favicon() -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "max-age=86400"),
        ],
        FAVICON,
    )
        .into_response()
}

async fn live_js() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        LIVE_JS,
    )
        .into_response()
}

/// What the API refused, as a page with its status.
fn refused(error: &ApiError) -> Response {
    let mut response = page_response(html::page(
        "baton: refused",
        &format!(
            "<p>{}</p><p><a href=\"/\">overview</a></p>",
            html::escape(&error.to_string())
        ),
    ));
    *response.status_mut() = error.status();
    response
}

/// A page, never cached, never framed by another site.
fn page_response(body: String) -> Response {
    let mut response = Html(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// 401, saying how to get in.
fn unauthorized(why: &str) -> Response {
    let body = html::page(
        "baton: log in",
        &format!(
            "<p>{}</p><p>Run <code>baton dashboard</code> on the machine: it prints a login link \
             for you.</p>",
            html::escape(why)
        ),
    );
    let mut response = page_response(body);
    *response.status_mut() = StatusCode::UNAUTHORIZED;
    response
}
