//! Prometheus metrics with real tools: a daemon started with `--metrics-addr` serves
//! `GET /metrics`, `promtool check metrics` accepts what it serves, and a real Prometheus
//! (Debian package `prometheus`, started here on loopback) scrapes it and answers queries about
//! baton's GPUs and jobs. The Unix socket serves the same text.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Baton, POLL};

/// The tools are required on CI (`.ci/run` installs them); elsewhere a missing tool skips.
fn tool(name: &str) -> Option<String> {
    let path = format!("/usr/bin/{name}");
    if std::path::Path::new(&path).exists() {
        return Some(path);
    }
    if std::env::var_os("BATON_REQUIRE_PROMTOOL").is_some() {
        panic!("{name} is missing (Debian package `prometheus`; .ci/run installs it)");
    }
    eprintln!("skipping: {name} is not installed");
    None
}

/// One HTTP/1.0 GET; returns the status line's code and the body.
fn get(addr: SocketAddr, target: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The address the daemon says it serves metrics on.
fn metrics_addr(b: &Baton) -> SocketAddr {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let log = b.daemon_log();
        if let Some(rest) = log.split("serving Prometheus metrics on http://").nth(1) {
            return rest.split('/').next().unwrap().parse().unwrap();
        }
        assert!(
            Instant::now() < until,
            "no metrics address in the log:\n{log}"
        );
        std::thread::sleep(POLL);
    }
}

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn prometheus_scrapes_baton_and_promtool_accepts_its_metrics() {
    let (Some(promtool), Some(prometheus)) = (tool("promtool"), tool("prometheus")) else {
        return;
    };
    let mut b = Baton::unstarted();
    b.serve_with(&[
        "serve",
        "--sim-gpus",
        "2",
        "--grace",
        "1s",
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let addr = metrics_addr(&b);
    // Some activity: a job that ends, one that runs, so every family has samples.
    let done = b.submit(&["--", "true"]);
    b.wait_ok(&[done]);
    let running = b.submit(&["--gpus", "1", "--", "sleep", "30"]);
    b.wait_running(running);

    // Wait for a sample of the GPUs taken while the job runs (labelled with it).
    let until = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let (code, body) = get(addr, "/metrics");
        assert_eq!(code, 200);
        if body.contains(&format!(r#"job="{running}""#)) {
            break body;
        }
        assert!(Instant::now() < until, "no GPU metrics:\n{body}");
        std::thread::sleep(POLL * 8);
    };
    assert!(text.contains("baton_jobs_submitted_total 2"), "{text}");
    assert!(
        text.contains(r#"baton_jobs_ended_total{state="succeeded"} 1"#),
        "{text}"
    );
    assert_eq!(get(addr, "/nothing").0, 404);

    // promtool lints the exposition.
    let mut check = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // A real Prometheus scrapes it every second.
    let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = b.root.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: baton\n    \
             static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(b.root.join("prometheus.log")).unwrap();
    let _prom = Prometheus(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                b.root.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let query = |q: &str| -> Option<serde_json::Value> {
        let target = format!("/api/v1/query?query={q}");
        let conn = TcpStream::connect(web).ok()?;
        drop(conn);
        let (code, body) = get(web, &target);
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    };
    let until = Instant::now() + Duration::from_secs(60);
    let result = loop {
        // `up` is 1 once a scrape succeeded; then baton's own series are there too.
        if let Some(v) = query("baton_gpu_memory_total_bytes")
            && let Some(r) = v["data"]["result"].as_array()
            && r.len() == 2
        {
            break r.clone();
        }
        let plog = std::fs::read_to_string(b.root.join("prometheus.log")).unwrap_or_default();
        assert!(
            Instant::now() < until,
            "Prometheus never scraped baton; its log:\n{plog}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let total: f64 = result[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert_eq!(total, (80u64 << 30) as f64);
    let up = query("up").unwrap();
    assert_eq!(up["data"]["result"][0]["value"][1], "1", "{up:#}");
    let queued = query("baton_jobs").unwrap();
    assert!(
        queued["data"]["result"].as_array().unwrap().len() >= 2,
        "{queued:#}"
    );
    b.run(&["cancel", &running.to_string()]).expect(0);
}

#[test]
fn the_socket_serves_the_same_metrics() {
    let b = Baton::start(1);
    let job = b.submit(&["--", "true"]);
    b.wait_ok(&[job]);
    let sock = b.home.join("baton.sock");
    let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: baton\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(
        text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200"),
        "{text}"
    );
    assert!(text.contains("baton_jobs_submitted_total 1"), "{text}");
}
