//! The dashboard (issue 18) over real HTTP: a daemon on simulated GPUs serving `--web-addr` on
//! a loopback port of its choosing. No session gives 401; `baton dashboard` gives a one-time
//! link that becomes a session cookie; the overview shows the GPUs and the queue, with what job
//! owners wrote shown as text.

mod common;

use common::{Baton, header, http};

/// A daemon serving the dashboard, and its address.
fn start(gpus: u32) -> (Baton, String) {
    start_with_config(gpus, "")
}

/// [`start`], with `config` as its config.toml.
fn start_with_config(gpus: u32, config: &str) -> (Baton, String) {
    common::with_dashboard(gpus, config)
}

/// Logs in with a fresh link; returns the session cookie (`name=value`).
fn log_in(b: &Baton, base: &str) -> String {
    let login = b
        .run(&["dashboard", "--no-open", "--json"])
        .expect(0)
        .json();
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
        header(&headers, "content-security-policy")
            .is_some_and(|c| c.contains("default-src 'self'")),
        "{headers:?}"
    );
    assert_eq!(body.matches("<tr class=\"gpu\">").count(), 2, "{body}");
    assert!(
        !body.contains(hostile),
        "markup from a job's name is never markup: {body}"
    );
    assert!(
        body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{body}"
    );
    assert!(body.contains("next-&lt;b&gt;"), "{body}");
    let reason = b.job(queued)["reason"].as_str().unwrap().to_string();
    assert!(
        body.contains(
            &reason
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('\'', "&#39;")
        ),
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

/// A job's page: its report once it ended (the cause, its output quoted as text), the end of
/// its output, its events.
#[test]
fn a_jobs_page_shows_its_report_and_output_as_text() {
    let (b, base) = start(1);
    let id = b.submit_sh(
        &["--name", "crash"],
        "echo 'step 3 loss=0.5'; echo '<img src=x onerror=alert(1)>'; \
         echo 'RuntimeError: CUDA out of memory' >&2; exit 3",
    );
    b.wait(&[id], "30s");
    let cookie = log_in(&b, &base);
    let (status, _, body) = http(&base, &format!("/jobs/{id}"), Some(&cookie));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<h2>Report</h2>"), "{body}");
    assert!(body.contains("CUDA out of memory"), "{body}");
    assert!(!body.contains("<img src=x"), "{body}");
    assert!(
        body.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{body}"
    );
    assert!(body.contains("id=\"events\""), "{body}");
    assert!(
        body.contains(
            "/jobs/{id}/confirm/requeue"
                .replace("{id}", &id.to_string())
                .as_str()
        )
    );
    let (status, _, _) = http(&base, "/jobs/999", Some(&cookie));
    assert_eq!(status, 404);
    let (status, _, _) = http(&base, &format!("/jobs/{id}"), None);
    assert_eq!(status, 401);
}

/// Cancel from the page: a confirmation first, then a form post carrying the session's CSRF
/// token; a post without it (what another site could send) is refused and changes nothing.
#[test]
fn a_cancel_from_the_page_needs_its_confirmation_and_csrf_token() {
    let (b, base) = start(1);
    let id = b.submit(&["--gpus", "1", "--", "sleep", "60"]);
    b.wait_running(id);
    let cookie = log_in(&b, &base);
    let (status, _, page) = http(&base, &format!("/jobs/{id}/confirm/cancel"), Some(&cookie));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains(&format!("Cancel job {id}?")), "{page}");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a CSRF token in the form")
        .to_string();
    let path = format!("/jobs/{id}/cancel");
    let (status, _, _) = common::http_post(&base, &path, Some(&cookie), "csrf=forged");
    assert_eq!(status, 403, "a forged token");
    let (status, _, _) = common::http_post(&base, &path, Some(&cookie), "");
    assert_eq!(status, 403, "no token");
    let (status, _, _) = common::http_post(&base, &path, None, &format!("csrf={csrf}"));
    assert_eq!(status, 401, "no session");
    assert_eq!(b.state(id), "running", "nothing changed");
    let (status, headers, _) =
        common::http_post(&base, &path, Some(&cookie), &format!("csrf={csrf}"));
    assert_eq!(status, 303, "{headers:?}");
    assert_eq!(
        header(&headers, "location"),
        Some(format!("/jobs/{id}").as_str())
    );
    b.poll_job(id, "cancelled", |j| j["state"] == "cancelled");
}

/// Live updates: the page carries the script that follows `/events`, and the daemon sends a
/// `change` there when a job ends, with no reload and no polling.
#[test]
fn a_job_ending_is_pushed_to_the_page_as_an_event() {
    use std::io::{BufRead, BufReader, Write};
    let (b, base) = start(1);
    let cookie = log_in(&b, &base);
    let (_, _, overview) = http(&base, "/", Some(&cookie));
    assert!(
        overview.contains("<script src=\"/live.js\" defer></script>"),
        "{overview}"
    );
    let (status, headers, script) = http(&base, "/live.js", None);
    assert_eq!(status, 200);
    assert!(header(&headers, "content-type").is_some_and(|t| t.contains("javascript")));
    assert!(script.contains("new EventSource(\"/events\")"), "{script}");
    let (status, _, _) = http(&base, "/events", None);
    assert_eq!(status, 401, "no session, no stream");

    let host = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(15)))
        .unwrap();
    write!(
        stream,
        "GET /events HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    assert!(status_line.contains(" 200 "), "{status_line}");
    let id = b.submit(&["--", "true"]);
    b.wait_ok(&[id]);
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line).expect("an event within 15 s");
        assert!(n > 0, "the stream ended");
        if line.trim() == "event: change" {
            break;
        }
    }
    // A stopping daemon ends the stream rather than wait on it.
    let mut b = b;
    b.stop_daemon();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
}

/// The history page: every job, newest first, filtered as `baton history` filters, paged.
#[test]
fn the_history_page_lists_filters_and_pages_the_jobs() {
    let (b, base) = start(1);
    let ok = b.submit(&["--name", "prep", "--", "true"]);
    let bad = b.submit_sh(&["--name", "train-<1>"], "exit 4");
    let other = b.submit(&["--name", "eval", "--", "true"]);
    b.wait(&[ok, bad, other], "30s");
    let cookie = log_in(&b, &base);
    let (status, _, body) = http(&base, "/history", Some(&cookie));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.matches("<tr class=\"row\">").count(), 3, "{body}");
    assert!(body.contains("train-&lt;1&gt;"), "{body}");
    assert!(
        body.find(&format!("/jobs/{other}\"")) < body.find(&format!("/jobs/{ok}\"")),
        "newest first: {body}"
    );
    let (_, _, failed) = http(
        &base,
        "/history?state=failed&name=&owner=&since=",
        Some(&cookie),
    );
    assert_eq!(failed.matches("<tr class=\"row\">").count(), 1, "{failed}");
    assert!(failed.contains(&format!("/jobs/{bad}\"")), "{failed}");
    let (_, _, first) = http(&base, "/history?limit=2", Some(&cookie));
    assert_eq!(first.matches("<tr class=\"row\">").count(), 2, "{first}");
    let next = first
        .split("id=\"next\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to older jobs")
        .replace("&amp;", "&");
    let (_, _, rest) = http(&base, &next, Some(&cookie));
    assert!(rest.contains(&format!("/jobs/{ok}\"")), "{rest}");
    let (status, _, _) = http(&base, "/history", None);
    assert_eq!(status, 401);
    let (status, _, body) = http(&base, "/history?since=whenever", Some(&cookie));
    assert_eq!(
        status, 400,
        "a bad filter is refused with what is wrong: {body}"
    );
}

/// The waste and usage page: the KPIs of `baton stats` and the audit log of `baton audit`,
/// here with an idle job the (dry-run) rules warned about.
#[test]
fn the_waste_page_shows_usage_and_the_rules_decisions() {
    let (b, base) = start_with_config(
        1,
        "[waste]\nsample_interval = \"1s\"\n\n[waste.idle_job]\nwarn_after = \"2s\"\n\
         act_after = \"1h\"\n",
    );
    let idle = b.submit(&["--gpus", "1", "--name", "idle", "--", "sleep", "60"]);
    b.wait_running(idle);
    let cookie = log_in(&b, &base);
    let until = std::time::Instant::now() + common::DEADLINE;
    let body = loop {
        let (status, _, body) = http(&base, "/waste?since=1h", Some(&cookie));
        assert_eq!(status, 200, "{body}");
        if body.contains("<tr class=\"entry\">") {
            break body;
        }
        assert!(std::time::Instant::now() < until, "no audit entry: {body}");
        std::thread::sleep(common::POLL * 8);
    };
    assert!(
        body.contains("idle_job") && body.contains("(dry run)"),
        "{body}"
    );
    assert!(body.contains(&format!("/jobs/{idle}\"")), "{body}");
    // The overview flags it too.
    let (_, _, overview) = http(&base, "/", Some(&cookie));
    let flags = overview.split("id=\"flags\"").nth(1).expect("waste flags");
    assert!(
        flags.contains("<tr class=\"flag\">") && flags.contains("idle_job"),
        "{overview}"
    );
    assert!(flags.contains(&format!("/jobs/{idle}\"")), "{overview}");
    assert!(
        body.contains("GPU-hours allocated") && body.contains("id=\"owners\""),
        "{body}"
    );
    let (status, _, body) = http(&base, "/waste?since=soon", Some(&cookie));
    assert_eq!(status, 400, "{body}");
    let (status, _, _) = http(&base, "/waste", None);
    assert_eq!(status, 401);
    b.run(&["cancel", &idle.to_string()]).expect(0);
}

/// The sweep page: its comparison table, sortable by any column, and the ranking metric drawn
/// against each parameter.
#[test]
fn the_sweep_page_shows_the_comparison_sortable_and_charted() {
    let (b, base) = start(2);
    let out = b
        .run(&[
            "submit",
            "--sweep",
            "lr=1,3,2",
            "--rank-by",
            "val_acc",
            "--",
            "sh",
            "-c",
            "echo \"epoch=1 val_acc=0.{lr}\"",
        ])
        .expect(0);
    let id: u64 = out.stdout.trim().parse().unwrap();
    b.run(&["sweep", "wait", &id.to_string()]).expect(0);
    let cookie = log_in(&b, &base);
    let (status, _, body) = http(&base, &format!("/sweeps/{id}"), Some(&cookie));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("id=\"headline\""), "{body}");
    assert_eq!(body.matches("<tr class=\"run\">").count(), 3, "{body}");
    assert!(body.contains("<svg class=\"chart\""), "{body}");
    let order = |page: &str| -> Vec<String> {
        page.split("<tr class=\"run\">")
            .skip(1)
            .filter_map(|row| {
                row.split("<td>")
                    .nth(5)?
                    .split("</td>")
                    .next()
                    .map(String::from)
            })
            .collect()
    };
    let (_, _, up) = http(&base, &format!("/sweeps/{id}?sort=val_acc"), Some(&cookie));
    let (_, _, down) = http(&base, &format!("/sweeps/{id}?sort=-val_acc"), Some(&cookie));
    assert_eq!(order(&up), ["0.1", "0.2", "0.3"], "{up}");
    assert_eq!(order(&down), ["0.3", "0.2", "0.1"], "{down}");
    let (status, _, _) = http(&base, "/sweeps/999", Some(&cookie));
    assert_eq!(status, 404);
    // Each run's page leads to its sweep.
    let run = b
        .run(&["sweep", "status", &id.to_string(), "--json"])
        .expect(0)
        .json()["jobs"][0]
        .as_u64()
        .unwrap();
    let (_, _, page) = http(&base, &format!("/jobs/{run}"), Some(&cookie));
    assert!(page.contains(&format!("href=\"/sweeps/{id}\"")), "{page}");
}

/// Polls page `path` until `pred` holds of its body; returns it.
fn poll_page(
    base: &str,
    path: &str,
    cookie: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let until = std::time::Instant::now() + common::DEADLINE;
    loop {
        let (status, _, body) = http(base, path, Some(cookie));
        assert_eq!(status, 200, "{body}");
        if pred(&body) {
            return body;
        }
        assert!(std::time::Instant::now() < until, "{what}: {body}");
        std::thread::sleep(common::POLL * 4);
    }
}

/// What the monitor samples is drawn: a sparkline of each GPU's last hour on the overview, and
/// the utilisation and memory of a job's GPUs while it ran on its page.
#[test]
fn gpu_use_is_charted_on_the_overview_and_on_the_jobs_page() {
    let (b, base) = start_with_config(2, "[waste]\nsample_interval = \"1s\"\n");
    let sim = b.home.join("sim").join("gpu0");
    std::fs::create_dir_all(&sim).unwrap();
    let id = b.submit_sh(
        &["--gpus", "1", "--name", "busy"],
        &format!("echo '2147483648 75' > {}/$$; sleep 60", sim.display()),
    );
    b.wait_running(id);
    let cookie = log_in(&b, &base);
    let body = poll_page(&base, "/", &cookie, "no sparkline with a line", |body| {
        body.contains("GPU 0 utilisation over the last hour")
            && body.split("<svg class=\"spark\"").nth(1).is_some_and(|s| {
                s.split("</svg>")
                    .next()
                    .is_some_and(|s| s.contains("<polyline"))
            })
    });
    assert_eq!(body.matches("<svg class=\"spark\"").count(), 2, "{body}");
    let page = poll_page(
        &base,
        &format!("/jobs/{id}"),
        &cookie,
        "no chart of the job's GPU",
        |body| {
            body.split("id=\"gpu-util\"")
                .nth(1)
                .is_some_and(|s| s.split("</figure>").next().unwrap().contains("<polyline"))
                && body.contains("id=\"gpu-memory\"")
        },
    );
    let util = page.split("id=\"gpu-util\"").nth(1).unwrap();
    let util = util.split("</figure>").next().unwrap();
    assert!(
        util.contains("<polyline") && util.contains(">100%<"),
        "{util}"
    );
    // Only the GPU the job ran on.
    assert!(util.contains("GPU 0") && !util.contains("GPU 1"), "{util}");
    let memory = page.split("id=\"gpu-memory\"").nth(1).unwrap();
    assert!(
        memory.contains(">2 GiB<"),
        "its peak labels the axis: {memory}"
    );
    b.run(&["cancel", &id.to_string()]).expect(0);
}

/// The workflow page draws the DAG: a box per task coloured by its state, an edge per
/// dependency, the critical path heavier, the GPUs an atomic admission reserved; the overview
/// links to it, and so does each task's page.
#[test]
fn the_workflow_page_draws_the_dag_with_its_states_and_critical_path() {
    let (b, base) = start(2);
    let file = b.path("pipe.yaml");
    std::fs::write(
        &file,
        "name: pipe\natomic: true\ntasks:\n  prep: {command: \"true\"}\n  \
         train: {command: \"sleep 60\", gpus: 1, time_limit: 10m, after: [prep]}\n  \
         eval: {command: \"true\", gpus: 1, time_limit: 5m, after: [train]}\n  \
         lint: {command: \"true\", time_limit: 1m}\n",
    )
    .unwrap();
    let out = b
        .run(&["workflow", "submit", &file.display().to_string()])
        .expect(0);
    let wf: u64 = out.stdout.trim().parse().unwrap();
    let cookie = log_in(&b, &base);
    let page = poll_page(
        &base,
        &format!("/workflows/{wf}"),
        &cookie,
        "train never ran",
        |body| body.contains("class=\"task running critical\" data-task=\"train\""),
    );
    assert_eq!(page.matches("<g class=\"task ").count(), 4, "{page}");
    assert!(
        page.contains("class=\"task succeeded critical\" data-task=\"prep\""),
        "{page}"
    );
    assert!(
        page.contains("class=\"task queued critical\" data-task=\"eval\""),
        "{page}"
    );
    assert!(
        page.contains("class=\"task succeeded\" data-task=\"lint\""),
        "lint is off the critical path: {page}"
    );
    assert_eq!(page.matches("class=\"edge critical\"").count(), 2, "{page}");
    assert!(
        page.contains("reserved GPU "),
        "eval's reserved GPU: {page}"
    );
    assert!(page.contains("prep → train → eval"), "{page}");
    let (_, _, overview) = http(&base, "/", Some(&cookie));
    assert!(
        overview.contains(&format!("href=\"/workflows/{wf}\"")),
        "{overview}"
    );
    let train = b.job(
        b.run(&["workflow", "status", &wf.to_string(), "--json"])
            .expect(0)
            .json()["tasks"][1]["job"]["id"]
            .as_u64()
            .unwrap(),
    );
    let (_, _, job_page) = http(&base, &format!("/jobs/{}", train["id"]), Some(&cookie));
    assert!(
        job_page.contains(&format!("href=\"/workflows/{wf}\"")),
        "{job_page}"
    );
    let (status, _, _) = http(&base, "/workflows/999", Some(&cookie));
    assert_eq!(status, 404);
    b.run(&["workflow", "cancel", &wf.to_string()]).expect(0);
}
