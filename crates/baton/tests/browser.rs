//! The dashboard in a real browser (issue 18): headless Chromium, driven over its DevTools
//! protocol, against a daemon on simulated GPUs with a workload running. Each page loads with no
//! console error and shows what it must; a job's end reaches an open page without a reload; a
//! cancel from the page works after its confirmation; the overview fits a phone's width. The
//! run saves screenshots under `target/tmp/screenshots/`; with `BATON_UPDATE_SCREENSHOTS=1` it
//! also writes the overview's and a job page's into `docs/screenshots/`, which the README shows.
//!
//! Without Chromium the test skips, unless `BATON_REQUIRE_CHROMIUM=1` (CI) makes that a failure.

#[path = "common/chromium.rs"]
mod chromium;
mod common;

use std::path::{Path, PathBuf};

use chromium::{Chromium, Page};
use common::{Baton, wait_for_file};

/// Where the screenshots go: always under the build's temporary directory, and into the docs
/// when asked.
fn save_screenshot(page: &mut Page, name: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("screenshots");
    let path = dir.join(name);
    page.screenshot(&path);
    if std::env::var_os("BATON_UPDATE_SCREENSHOTS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(&path, docs.join(name)).unwrap();
    }
}

/// A daemon on 2 simulated GPUs serving the dashboard, sampling them every second.
fn start() -> (Baton, String) {
    common::with_dashboard(2, "[waste]\nsample_interval = \"1s\"\n")
}

/// A fresh one-time login link.
fn login_link(b: &Baton) -> String {
    b.run(&["dashboard", "--no-open", "--json"])
        .expect(0)
        .json()["url"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn every_page_loads_clean_updates_live_and_a_cancel_needs_its_confirmation() {
    let (b, base) = start();
    let Some(chromium) = Chromium::launch() else {
        return;
    };
    // The workload: a training job on GPU 0 showing use, a job that crashed, one waiting for
    // both GPUs, one waiting on a gate the test opens, and a small workflow.
    let sim = b.home.join("sim").join("gpu0");
    std::fs::create_dir_all(&sim).unwrap();
    let train = b.submit_sh(
        &["--gpus", "1", "--name", "train-<b>bold</b>"],
        &format!(
            "echo '6442450944 83' > {}/$$; for i in 1 2 3; do echo \"step $i/100 loss=0.$i\"; \
             done; sleep 600",
            sim.display()
        ),
    );
    let crashed = b.submit_sh(
        &["--name", "crash"],
        "echo 'epoch 1 loss=2.3'; echo '<img src=x onerror=alert(1)>'; \
         echo 'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2; exit 1",
    );
    b.wait(&[crashed], "30s");
    b.wait_running(train);
    let wide = b.submit(&["--gpus", "2", "--name", "wide", "--", "true"]);
    let reason = b.wait_reason(wide);
    let gate = b.path("gate");
    let gated = b.submit_sh(
        &["--name", "gated"],
        &wait_for_file(&gate.display().to_string()),
    );
    b.wait_running(gated);
    let flow = b.path("flow.yaml");
    std::fs::write(
        &flow,
        "name: flow\ntasks:\n  prep: {command: \"true\"}\n  fit: {command: \"true\", after: [prep]}\n  \
         score: {command: \"true\", after: [fit]}\n",
    )
    .unwrap();
    let wf: u64 = b
        .run(&["workflow", "submit", &flow.display().to_string()])
        .expect(0)
        .stdout
        .trim()
        .parse()
        .unwrap();

    b.poll_job(train, "its progress read", |j| j["progress"].is_object());
    let mut page = chromium.page();
    page.viewport(1200, 900, false);
    page.open(&login_link(&b));
    page.wait_until(
        "document.querySelectorAll('tr.gpu').length === 2",
        "the overview's GPU rows",
    );
    let queue = page.eval("document.getElementById('queue').innerText");
    assert!(
        queue.as_str().is_some_and(|q| q.contains(&reason)),
        "the queued job's reason ({reason}) in {queue}"
    );
    let running = page.eval("document.getElementById('running').innerText");
    assert!(
        running
            .as_str()
            .is_some_and(|r| r.contains("train-<b>bold</b>") && r.contains("step 3/100")),
        "a job's name is shown as text, with its progress: {running}"
    );
    page.wait_until(
        "document.querySelector('svg.spark polyline')",
        "GPU 0's sparkline",
    );
    save_screenshot(&mut page, "overview.png");

    page.open(&format!("{base}/jobs/{crashed}"));
    let report = page.eval("document.getElementById('report').innerText");
    assert!(
        report
            .as_str()
            .is_some_and(|r| r.contains("CUDA out of memory")),
        "the report's cause: {report}"
    );
    let images = page.eval("document.images.length");
    assert_eq!(images, 0, "output is text, never markup");
    page.open(&format!("{base}/jobs/{train}"));
    page.wait_until(
        "document.querySelector('#gpu-util polyline')",
        "the training job's GPU chart",
    );
    save_screenshot(&mut page, "job.png");

    page.open(&format!("{base}/workflows/{wf}"));
    page.wait_until(
        "document.querySelectorAll('#dag g.task.succeeded').length === 3",
        "the workflow's three tasks, all succeeded",
    );
    save_screenshot(&mut page, "workflow.png");
    for path in ["/history", "/waste?since=1h"] {
        page.open(&format!("{base}{path}"));
        let title = page.eval("document.querySelector('h1').innerText");
        assert!(title.is_string(), "{path}: {title}");
    }

    // A job's end reaches its open page without a reload: the same document, updated.
    page.open(&format!("{base}/jobs/{gated}"));
    page.eval("window.sameDocument = true");
    std::fs::write(&gate, "").unwrap();
    page.wait_until(
        "document.getElementById('job').innerText.includes('succeeded')",
        "the gated job's end, pushed",
    );
    assert_eq!(page.eval("window.sameDocument === true"), true, "no reload");

    // A cancel takes its confirmation; the job is cancelled only once it is given.
    page.open(&format!("{base}/jobs/{train}"));
    page.click_through("a.action[href$='/confirm/cancel']");
    let question = page.eval("document.body.innerText");
    assert!(
        question.as_str().is_some_and(|q| q.contains("Cancel job")),
        "{question}"
    );
    assert_eq!(
        b.state(train),
        "running",
        "nothing happens before the confirmation"
    );
    page.click_through("#confirm");
    page.wait_until(
        "document.getElementById('job').innerText.includes('cancelled')",
        "the cancelled job's page",
    );
    assert_eq!(b.state(train), "cancelled");

    // A phone: the overview fits its width.
    page.viewport(390, 844, true);
    page.open(&format!("{base}/"));
    // Measured against the phone's width, not the window's: a mobile viewport widens to fit
    // a page that overflows it.
    let overflow = page.eval("document.documentElement.scrollWidth - 390");
    assert!(
        overflow.as_i64().is_some_and(|o| o <= 0),
        "the overview is {overflow} px wider than a phone"
    );
    save_screenshot(&mut page, "overview-phone.png");

    assert!(
        page.errors.is_empty(),
        "console errors: {:#?}\nChromium said: {}",
        page.errors,
        chromium.log.lock().unwrap()
    );
}
