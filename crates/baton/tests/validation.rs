//! Bad input is refused when it arrives, not queued to fail later: NUL bytes, bad environment
//! names, working directories that are not directories, time limits no clock can hold, workflow
//! files too large or with too many tasks. And every error the API returns, including for routes
//! that do not exist and bodies that are not JSON, is one JSON shape: `{"error", "hint"?}`.
//!
//! The API cases speak HTTP/1.0 on the socket directly (as the client does), so that what is
//! tested is what any caller, not only the CLI, gets.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use common::Baton;
use serde_json::{Value, json};

/// What the daemon answered one raw request.
#[derive(Debug)]
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

impl Answer {
    /// The error body, asserting the status and that the body is the one JSON error shape.
    #[track_caller]
    fn error(&self, status: u16) -> (String, Option<String>) {
        assert_eq!(self.status, status, "{self:#?}");
        assert!(
            self.content_type.starts_with("application/json"),
            "an error body that is not JSON: {self:#?}"
        );
        let body: Value = serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("error body is not JSON ({e}): {self:#?}"));
        let error = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no `error` string in {body}"))
            .to_string();
        assert!(!error.is_empty(), "{body}");
        let hint = match &body["hint"] {
            Value::Null => None,
            Value::String(h) => Some(h.clone()),
            other => panic!("`hint` is neither a string nor absent: {other}"),
        };
        let extra: Vec<&String> = body
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "error" && *k != "hint")
            .collect();
        assert!(extra.is_empty(), "the error shape has extra keys: {body}");
        (error, hint)
    }
}

/// Sends one request on the daemon's socket and reads the whole answer. A daemon that refuses a
/// body before reading all of it may close its end while the body is still being written: the
/// write error is ignored and the answer read anyway, as a careful client does.
fn raw(b: &Baton, head: &str, body: &[u8]) -> Answer {
    let mut s = UnixStream::connect(b.home.join("baton.sock")).unwrap();
    let mut message = head.as_bytes().to_vec();
    message.extend_from_slice(body);
    let _ = s.write_all(&message);
    let mut bytes = Vec::new();
    let _ = s.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer to {head:?}: {text:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    Answer {
        status,
        content_type,
        body: body.to_string(),
    }
}

fn post(b: &Baton, path: &str, body: &[u8]) -> Answer {
    let head = format!(
        "POST {path} HTTP/1.0\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    raw(b, &head, body)
}

fn get(b: &Baton, path: &str) -> Answer {
    raw(
        b,
        &format!("GET {path} HTTP/1.0\r\nHost: baton\r\n\r\n"),
        b"",
    )
}

/// A valid submission with `patch`'s fields replaced.
fn submission(b: &Baton, patch: Value) -> Vec<u8> {
    let mut job = json!({"command": ["true"], "cwd": b.work.display().to_string()});
    for (k, v) in patch.as_object().unwrap() {
        job[k] = v.clone();
    }
    serde_json::to_vec(&job).unwrap()
}

/// POSTs the submission and returns the 400's message.
#[track_caller]
fn refused(b: &Baton, patch: Value) -> String {
    let answer = post(b, "/v1/jobs", &submission(b, patch.clone()));
    let (error, _) = answer.error(400);
    error
}

#[track_caller]
fn nothing_queued(b: &Baton) {
    let all = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(all, json!([]), "a refused submission queued a job");
}

#[test]
fn nul_bytes_and_bad_environment_names_are_refused_at_admission() {
    let b = Baton::start(1);
    let err = refused(&b, json!({"command": ["echo", "a\u{0}b"]}));
    assert!(err.contains("NUL") && err.contains("word 2"), "{err}");
    let err = refused(&b, json!({"command": ["ec\u{0}ho"]}));
    assert!(err.contains("NUL") && err.contains("word 1"), "{err}");
    let err = refused(&b, json!({"env": {"A": "x\u{0}y"}}));
    assert!(err.contains("NUL") && err.contains("\"A\""), "{err}");
    let err = refused(&b, json!({"env": {"A\u{0}B": "x"}}));
    assert!(err.contains("NUL"), "{err}");
    let err = refused(&b, json!({"env": {"A=B": "x"}}));
    assert!(err.contains("`=`") && err.contains("A=B"), "{err}");
    let err = refused(&b, json!({"env": {"": "x"}}));
    assert!(err.contains("empty"), "{err}");
    let cwd = format!("{}/a\u{0}b", b.work.display());
    let err = refused(&b, json!({"cwd": cwd}));
    assert!(err.contains("NUL"), "{err}");
    let err = refused(&b, json!({"name": "a\u{0}b"}));
    assert!(err.contains("--name"), "{err}");
    nothing_queued(&b);
}

#[test]
fn a_working_directory_that_is_missing_or_a_file_is_refused_at_admission() {
    let b = Baton::start(1);
    let missing = b.work.join("missing");
    let err = refused(&b, json!({"cwd": missing.display().to_string()}));
    assert!(
        err.contains("does not exist") && err.contains(&missing.display().to_string()),
        "{err}"
    );
    let file = b.path("file.txt");
    std::fs::write(&file, "not a directory").unwrap();
    let err = refused(&b, json!({"cwd": file.display().to_string()}));
    assert!(err.contains("not a directory"), "{err}");

    // The CLI says the same before it sends anything.
    let out = b
        .run(&["submit", "--cwd", &file.display().to_string(), "--", "true"])
        .expect(2);
    assert!(out.stderr.contains("not a directory"), "{}", out.stderr);
    let out = b
        .run(&[
            "submit",
            "--cwd",
            &missing.display().to_string(),
            "--",
            "true",
        ])
        .expect(2);
    assert!(out.stderr.contains("missing"), "{}", out.stderr);
    nothing_queued(&b);
}

#[test]
fn a_time_limit_beyond_a_year_is_refused_and_says_the_maximum() {
    let b = Baton::start(1);
    let err = refused(&b, json!({"time_limit_ms": i64::MAX}));
    assert!(
        err.contains("--time-limit") && err.contains("365d"),
        "{err}"
    );
    let (err, hint) = post(
        &b,
        "/v1/jobs",
        &submission(&b, json!({"time_limit_ms": 366 * 86_400_000_i64})),
    )
    .error(400);
    assert!(err.contains("366d") && err.contains("365d"), "{err}");
    assert!(hint.is_some_and(|h| h.contains("without --time-limit")));

    // The CLI shows the message and its hint, and exits 2.
    let out = b
        .run(&["submit", "--time-limit", "400d", "--", "true"])
        .expect(2);
    assert!(
        out.stderr.contains("365d") && out.stderr.contains("hint: "),
        "{}",
        out.stderr
    );
    // Exactly the maximum is fine.
    let id = b.submit(&["--time-limit", "365d", "--", "true"]);
    b.wait_ok(&[id]);
}

#[test]
fn unknown_routes_wrong_methods_and_malformed_requests_get_json_errors() {
    let b = Baton::start(1);
    // An unknown route, outside and inside /v1.
    let (err, hint) = get(&b, "/jobs").error(404);
    assert!(err.contains("GET /jobs"), "{err}");
    assert!(hint.is_some_and(|h| h.contains("/v1")));
    get(&b, "/v1/nope").error(404);
    // A known route with the wrong method names the methods it takes.
    let (err, hint) = get(&b, "/v1/wait").error(405);
    assert!(err.contains("GET") && err.contains("/v1/wait"), "{err}");
    assert!(hint.is_some_and(|h| h.contains("POST")));
    // Bodies that are not JSON, or not the route's shape.
    let (err, _) = post(&b, "/v1/jobs", b"{not json").error(400);
    assert!(err.contains("JSON"), "{err}");
    let (err, _) = post(&b, "/v1/jobs", br#"{"command": ["true"]}"#).error(422);
    assert!(err.contains("cwd"), "{err}");
    let (err, _) = post(&b, "/v1/jobs", &submission(&b, json!({"bogus": 1}))).error(422);
    assert!(err.contains("bogus"), "{err}");
    let no_type = format!(
        "POST /v1/jobs HTTP/1.0\r\nHost: baton\r\nContent-Length: {}\r\n\r\n",
        2
    );
    let (_, hint) = raw(&b, &no_type, b"{}").error(415);
    assert!(hint.is_some_and(|h| h.contains("application/json")));
    // Path and query parameters of the wrong type.
    let (err, _) = get(&b, "/v1/jobs/abc/logs").error(400);
    assert!(err.contains("abc"), "{err}");
    let (err, _) = get(&b, "/v1/jobs?all=maybe").error(400);
    assert!(err.contains("maybe") || err.contains("all"), "{err}");
    // Errors the handlers produce keep their shape.
    get(&b, "/v1/workflows/77").error(404);
    nothing_queued(&b);
}

#[test]
fn a_body_over_the_daemons_limit_gets_a_json_413() {
    let b = Baton::start(1);
    let text = "x".repeat(9 << 20);
    let body = serde_json::to_vec(&json!({
        "source": "big.yaml", "text": text, "base_dir": b.work.display().to_string(),
    }))
    .unwrap();
    let (err, hint) = post(&b, "/v1/workflows", &body).error(413);
    assert!(err.contains("8 MiB"), "{err}");
    assert!(hint.is_some_and(|h| h.contains("1 MiB")));
    // The daemon is fine afterwards.
    b.run(&["status"]).expect(0);
}

fn write(b: &Baton, name: &str, text: &str) -> String {
    std::fs::write(b.path(name), text).unwrap();
    b.path(name).display().to_string()
}

/// A workflow of `n` independent tasks, padded with a comment to at least `bytes`.
fn workflow_text(n: usize, bytes: usize) -> String {
    let mut text = String::from("name: many\ntasks:\n");
    for i in 0..n {
        text.push_str(&format!("  t{i}: {{command: \"true\"}}\n"));
    }
    while text.len() < bytes {
        text.push_str("# padding to make the file large, as a generated file might be\n");
    }
    text
}

#[test]
fn workflow_files_too_large_are_refused_before_sending_with_exit_2() {
    let b = Baton::start(1);
    for (name, bytes) in [("two.yaml", 2_000_000), ("five.yaml", 5_000_000)] {
        let file = write(&b, name, &workflow_text(3, bytes));
        let out = b.run(&["workflow", "submit", &file]).expect(2);
        assert!(
            out.stderr.contains(name) && out.stderr.contains("at most 1 MiB"),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains("Broken pipe"), "{}", out.stderr);
        assert!(!out.stderr.contains("413"), "{}", out.stderr);
    }
    // Sent anyway, the daemon refuses the text too, with the same message.
    let body = serde_json::to_vec(&json!({
        "source": "two.yaml", "text": workflow_text(3, 2_000_000),
        "base_dir": b.work.display().to_string(),
    }))
    .unwrap();
    let (err, _) = post(&b, "/v1/workflows", &body).error(400);
    assert!(err.contains("at most 1 MiB"), "{err}");
    nothing_queued(&b);
}

#[test]
fn a_workflow_with_too_many_tasks_is_refused_with_the_count_and_the_limit() {
    let b = Baton::start(1);
    let file = write(&b, "many.yaml", &workflow_text(11_820, 0));
    let out = b.run(&["workflow", "submit", &file]).expect(2);
    assert!(
        out.stderr.contains("11820 tasks") && out.stderr.contains("at most 1000"),
        "{}",
        out.stderr
    );
    let body = serde_json::to_vec(&json!({
        "source": "many.yaml", "text": workflow_text(1001, 0),
        "base_dir": b.work.display().to_string(),
    }))
    .unwrap();
    let (err, _) = post(&b, "/v1/workflows", &body).error(400);
    assert!(err.contains("1001 tasks"), "{err}");
    nothing_queued(&b);
    // The limit itself is fine.
    let file = write(&b, "max.yaml", &workflow_text(1000, 0));
    b.run(&["workflow", "submit", &file]).expect(0);
}

#[test]
fn workflow_tasks_get_the_same_admission_checks_as_jobs() {
    let b = Baton::start(1);
    std::fs::write(b.path("file.txt"), "x").unwrap();
    let cases = [
        (
            "name: w\ntasks:\n  a: {command: [\"echo\", \"a\\0b\"]}\n",
            "NUL",
        ),
        (
            "name: w\ntasks:\n  a: {command: \"true\", env: {\"A=B\": x}}\n",
            "`=`",
        ),
        (
            "name: w\ntasks:\n  a: {command: \"true\", env: {A: \"x\\0y\"}}\n",
            "NUL",
        ),
        (
            "name: w\ntasks:\n  a: {command: \"true\", time_limit: 400d}\n",
            "365d",
        ),
        (
            "name: w\ntasks:\n  a: {command: \"true\", cwd: file.txt}\n",
            "not a directory",
        ),
        (
            "name: w\ntasks:\n  a: {command: \"true\", cwd: missing}\n",
            "does not exist",
        ),
        (
            "name: \"w\\0x\"\ntasks:\n  a: {command: \"true\"}\n",
            "name",
        ),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let file = write(&b, &format!("w{i}.yaml"), text);
        let out = b.run(&["workflow", "submit", &file]).expect(2);
        assert!(
            out.stderr.contains(needle) && out.stderr.contains(&format!("w{i}.yaml")),
            "{text}: {}",
            out.stderr
        );
    }
    nothing_queued(&b);
    // A task that runs after another may use a directory that one creates.
    let file = write(
        &b,
        "made.yaml",
        "name: made\ntasks:\n  mk: {command: \"mkdir out\"}\n  use: {command: \"touch here\", cwd: out, after: [mk]}\n",
    );
    let out = b.run(&["workflow", "submit", &file, "--json"]).expect(0);
    let ids: Vec<u64> = out.json()["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["job"]["id"].as_u64().unwrap())
        .collect();
    b.wait_ok(&ids);
    assert!(b.path("out/here").exists());
}
