//! The dashboard's weight and first render (issue 18): a release daemon on 4 simulated GPUs
//! with 1,000 ended jobs in its history, 4 running (their GPUs busy), 20 queued and a finished
//! workflow; headless Chromium loads each page RUNS times (default 20) and reads the page's own
//! Performance API: bytes transferred (the page and what it loads; the live event stream is
//! left out, it never ends), time to the first byte, and first contentful paint. The server's
//! own time for the HTML (a plain HTTP GET from here) is shown beside it. Exits 1 when the
//! overview is over 200 KB or its first paint's median over 300 ms.
//!
//!   cargo bench -p baton-gpu --bench dashboard
//!   RUNS=50 HISTORY=5000 cargo bench -p baton-gpu --bench dashboard

#[path = "../tests/common/chromium.rs"]
mod chromium;
#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use chromium::{Chromium, Page};
use common::Baton;
use serde_json::Value;

/// The targets the issue sets for the overview.
const MAX_OVERVIEW_BYTES: f64 = 200.0 * 1024.0;
const MAX_FIRST_PAINT_MS: f64 = 300.0;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The median, 90th percentile and largest of `values`.
fn spread(values: &mut [f64]) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), values[values.len() - 1])
}

/// One load of `url`: (bytes transferred, first byte ms, first contentful paint ms).
fn load(page: &mut Page, url: &str) -> (f64, f64, f64) {
    page.open(url);
    let facts: Value = page.eval(
        "(() => {
           const nav = performance.getEntriesByType('navigation')[0];
           const paint = performance.getEntriesByType('paint')
             .find(e => e.name === 'first-contentful-paint');
           const loaded = performance.getEntriesByType('resource')
             .filter(r => !r.name.endsWith('/events'))
             .reduce((sum, r) => sum + r.transferSize, 0);
           return {bytes: nav.transferSize + loaded, ttfb: nav.responseStart,
                   paint: paint ? paint.startTime : null, load: nav.loadEventEnd};
         })()",
    );
    let number = |key: &str| facts[key].as_f64().unwrap_or(f64::NAN);
    let paint = facts["paint"].as_f64().unwrap_or_else(|| number("load"));
    (number("bytes"), number("ttfb"), paint)
}

/// Waits for the jobs `ids` (a JSON array of numbers) to end.
fn wait_all(b: &Baton, ids: &Value) {
    let ids: Vec<String> = ids
        .as_array()
        .expect("job ids")
        .iter()
        .map(|id| id.to_string())
        .collect();
    let mut args = vec!["wait", "--brief", "--exit-zero", "--timeout", "10m"];
    args.extend(ids.iter().map(String::as_str));
    b.run(&args).expect(0);
}

fn main() {
    // `cargo bench` passes `--bench`; nothing here takes arguments.
    let runs = env_number("RUNS", 20).max(1);
    let history = env_number("HISTORY", 1000);
    let (mut b, _) = common::with_dashboard(4, "[waste]\nsample_interval = \"1s\"\n");
    let Some(chromium) = Chromium::launch() else {
        eprintln!("no Chromium: apt install chromium");
        std::process::exit(1);
    };

    let started = Instant::now();
    let array = b
        .run(&[
            "submit",
            "--array",
            &format!("1-{history}"),
            "--name",
            "history",
            "--",
            "true",
        ])
        .expect(0);
    let sweep = array.stdout.trim().to_string();
    let runs_of = b
        .run(&["sweep", "status", &sweep, "--json"])
        .expect(0)
        .json();
    wait_all(&b, &runs_of["jobs"]);
    eprintln!(
        "{history} ended jobs in {:.1} s (sweep {sweep})",
        started.elapsed().as_secs_f64()
    );
    let sim = b.home.join("sim");
    let mut running = Vec::new();
    for gpu in 0..4 {
        let dir = sim.join(format!("gpu{gpu}"));
        std::fs::create_dir_all(&dir).unwrap();
        running.push(b.submit_sh(
            &["--gpus", "1", "--name", &format!("train-{gpu}")],
            &format!(
                "echo '{} {}' > {}/$$; for i in $(seq 1 40); do echo \"step $i/1000 \
                 loss=0.$i\"; done; sleep 600",
                (gpu + 2) << 30,
                60 + gpu * 10,
                dir.display()
            ),
        ));
    }
    for &id in &running {
        b.wait_running(id);
    }
    for i in 0..20 {
        b.submit(&[
            "--gpus",
            "1",
            "--name",
            &format!("queued-{i}"),
            "--",
            "true",
        ]);
    }
    let flow = b.path("flow.yaml");
    std::fs::write(
        &flow,
        "name: flow\ntasks:\n  prep: {command: \"true\"}\n  fit: {command: \"true\", after: [prep]}\n  \
         score: {command: \"true\", after: [fit]}\n",
    )
    .unwrap();
    let wf = b
        .run(&["workflow", "submit", &flow.display().to_string()])
        .expect(0)
        .stdout
        .trim()
        .to_string();
    let tasks = b
        .run(&["workflow", "status", &wf, "--json"])
        .expect(0)
        .json();
    let ids: Vec<Value> = tasks["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["job"]["id"].clone())
        .collect();
    wait_all(&b, &Value::Array(ids));
    // A few samples for the sparklines and charts.
    std::thread::sleep(std::time::Duration::from_secs(3));

    let login = b
        .run(&["dashboard", "--no-open", "--json"])
        .expect(0)
        .json();
    let base = login["base"].as_str().unwrap().to_string();
    let mut page = chromium.page();
    page.viewport(1200, 900, false);
    page.open(login["url"].as_str().unwrap());
    let cookie = page.call(
        "Network.getCookies",
        serde_json::json!({"urls": [format!("{base}/")]}),
    );
    let session = cookie["cookies"][0]["value"].as_str().unwrap().to_string();
    let cookie = format!("baton_session={session}");

    println!(
        "| page ({history} jobs in the history, {runs} loads each) | transferred | server (p50) \
         | first byte (p50) | first paint (p50 / p90 / max) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut verdict = Vec::new();
    let pages = [
        ("overview", "/".to_string()),
        (
            "job (running, with charts)",
            format!("/jobs/{}", running[0]),
        ),
        ("history (first page)", "/history".to_string()),
        ("waste and usage (7d)", "/waste?since=7d".to_string()),
        ("workflow", format!("/workflows/{wf}")),
        ("sweep (1,000 runs)", format!("/sweeps/{sweep}")),
    ];
    for (name, path) in &pages {
        let mut server = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            let (status, _, _) = common::http(&base, path, Some(&cookie));
            server.push(t0.elapsed().as_secs_f64() * 1e3);
            assert_eq!(status, 200, "{path}");
        }
        let (mut bytes, mut ttfb, mut paint) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            let (b, t, p) = load(&mut page, &format!("{base}{path}"));
            bytes.push(b);
            ttfb.push(t);
            paint.push(p);
        }
        let (server, _, _) = spread(&mut server);
        let (bytes, _, _) = spread(&mut bytes);
        let (ttfb, _, _) = spread(&mut ttfb);
        let (p50, p90, max) = spread(&mut paint);
        println!(
            "| {name} | {:.1} KB | {server:.1} ms | {ttfb:.1} ms | {p50:.0} / {p90:.0} / {max:.0} \
             ms |",
            bytes / 1024.0
        );
        if path == "/" {
            if bytes > MAX_OVERVIEW_BYTES {
                verdict.push(format!(
                    "the overview is {:.1} KB (target 200 KB)",
                    bytes / 1024.0
                ));
            }
            if p50 > MAX_FIRST_PAINT_MS {
                verdict.push(format!(
                    "the overview's first paint is {p50:.0} ms (target 300 ms)"
                ));
            }
        }
    }
    assert!(page.errors.is_empty(), "console errors: {:#?}", page.errors);
    for &id in &running {
        b.run(&["cancel", &id.to_string()]);
    }
    drop(chromium);
    b.stop_daemon();
    if verdict.is_empty() {
        println!("\ntargets met: the overview under 200 KB, its first paint under 300 ms");
    } else {
        println!("\nmissed: {}", verdict.join("; "));
        std::process::exit(1);
    }
}
