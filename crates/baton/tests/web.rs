//! The dashboard (issue 18) over real HTTP: a daemon on simulated GPUs serving `--web-addr` on
//! a loopback port of its choosing. No session gives 401; `baton dashboard` gives a one-time
//! link that becomes a session cookie; the overview shows the GPUs and the queue, with what job
//! owners wrote shown as text.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::Baton;

/// One HTTP/1.1 request, its whole answer: status, headers (lower-cased names) and body.
fn http(base: &str, path: &str, cookie: Option<&str>) -> (u16, Vec<(String, String)>, String) {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap();
    let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{cookie}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// A daemon serving the dashboard, and its address.
fn start(gpus: u32) -> (Baton, String) {
    let mut b = Baton::unstarted();
    let gpus = gpus.to_string();
    b.serve_with(&[
        "serve",
        "--sim-gpus",
        &gpus,
        "--grace",
        "1s",
        "--web-addr",
        "127.0.0.1:0",
    ]);
    let login = b.run(&["dashboard", "--no-open", "--json"]).expect(0).json();
    let base = login["base"].as_str().unwrap().to_string();
    (b, base)
}

/// Logs in with a fresh link; returns the session cookie (`name=value`).
fn log_in(b: &Baton, base: &str) -> String {
    let login = b.run(&["dashboard", "--no-open", "--json"]).expect(0).json();
    let url = login["url"].as_str().unwrap();
    let path = url.trim_start_matches(base);
    let (status, headers, _) = http(base, path, None);
    assert_eq!(status, 303, "{headers:?}");
    assert_eq!(header(&headers, "location"), Some("/"));
    let cookie = header(&headers, "set-cookie").expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    // The link is good once.
    let (again, _, _) = http(base, path, None);
    assert_eq!(again, 401, "a login link used twice");
    cookie.split(';').next().unwrap().to_string()
}

#[test]
fn no_session_no_page_and_a_login_link_is_good_once() {
    let (b, base) = start(1);
    let (status, headers, body) = http(&base, "/", None);
    assert_eq!(status, 401);
    assert!(body.contains("baton dashboard"), "{body}");
    assert_eq!(header(&headers, "cache-control"), Some("no-store"));
    let (status, _, _) = http(&base, "/", Some("baton_session=guessed"));
    assert_eq!(status, 401, "a made-up session");
    let (status, _, _) = http(&base, "/login?token=guessed", None);
    assert_eq!(status, 401, "a made-up token");
    let cookie = log_in(&b, &base);
    let (status, _, body) = http(&base, "/", Some(&cookie));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<h2>GPUs</h2>"), "{body}");
}

#[test]
fn the_overview_shows_each_gpu_and_the_queue_with_what_owners_wrote_as_text() {
    let (b, base) = start(2);
    let hostile = "<script>alert(1)</script>";
    let running = b.submit(&["--gpus", "2", "--name", hostile, "--", "sleep", "60"]);
    b.wait_running(running);
    let queued = b.submit(&["--gpus", "1", "--name", "next-<b>", "--", "true"]);
    b.wait_reason(queued);
    let cookie = log_in(&b, &base);
    let (status, headers, body) = http(&base, "/", Some(&cookie));
    assert_eq!(status, 200, "{body}");
    assert!(
        header(&headers, "content-security-policy").is_some_and(|c| c.contains("default-src 'self'")),
        "{headers:?}"
    );
    assert_eq!(body.matches("<tr class=\"gpu\">").count(), 2, "{body}");
    assert!(!body.contains(hostile), "markup from a job's name is never markup: {body}");
    assert!(
        body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{body}"
    );
    assert!(body.contains("next-&lt;b&gt;"), "{body}");
    let reason = b.job(queued)["reason"].as_str().unwrap().to_string();
    assert!(
        body.contains(&reason.replace('<', "&lt;").replace('>', "&gt;").replace('\'', "&#39;")),
        "the queued job's reason ({reason}): {body}"
    );
    b.run(&["cancel", &running.to_string()]).expect(0);
}

#[test]
fn a_daemon_without_a_dashboard_says_how_to_serve_one() {
    let b = Baton::start(1);
    let out = b.run(&["dashboard", "--no-open"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("serves no dashboard") && out.stderr.contains("--web-addr"),
        "{out:?}"
    );
}
