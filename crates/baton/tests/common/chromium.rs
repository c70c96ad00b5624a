//! Headless Chromium over its DevTools protocol, for the dashboard's browser test and benchmark:
//! a browser with its own profile, and a page session that navigates, evaluates, waits on the
//! document (a `MutationObserver`, not a poll), clicks, takes screenshots, and notes every
//! console error, uncaught exception and error log entry.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// How long any one browser step may take.
pub const STEP: Duration = Duration::from_secs(30);

/// A headless Chromium with its own profile, killed (all its processes) when dropped.
pub struct Chromium {
    child: Child,
    /// Where its DevTools HTTP endpoint listens (`http://127.0.0.1:PORT`).
    devtools: String,
    /// What it printed, for a failure's message.
    pub log: Arc<Mutex<String>>,
    _profile: tempfile::TempDir,
}

impl Chromium {
    /// Starts Chromium, or `None` when none is installed (and none is required).
    pub fn launch() -> Option<Chromium> {
        let binary = ["chromium", "chromium-browser", "google-chrome"]
            .into_iter()
            .find(|b| {
                Command::new(b)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            });
        let Some(binary) = binary else {
            assert!(
                std::env::var_os("BATON_REQUIRE_CHROMIUM").is_none(),
                "Chromium is required (BATON_REQUIRE_CHROMIUM is set) but none is installed"
            );
            eprintln!("skipped: no Chromium (apt install chromium)");
            return None;
        };
        let profile = tempfile::tempdir().unwrap();
        let mut child = std::os::unix::process::CommandExt::process_group(
            Command::new(binary).args([
                "--headless=new",
                "--no-sandbox", // the tests run as root
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1200,900",
                &format!("--user-data-dir={}", profile.path().display()),
                "about:blank",
            ]),
            0,
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
        let log = Arc::new(Mutex::new(String::new()));
        let (found, port) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let kept = Arc::clone(&log);
        // Reads its stderr to the end (so it never blocks on a full pipe), passing on the
        // DevTools port when it says it.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("DevTools listening on ws://").nth(1) {
                    let _ = found.send(rest.split('/').next().unwrap_or("").to_string());
                }
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let chromium = |host: String| Chromium {
            child,
            devtools: format!("http://{host}"),
            log,
            _profile: profile,
        };
        match port.recv_timeout(STEP) {
            Ok(host) => Some(chromium(host)),
            Err(_) => {
                let started = chromium(String::new());
                panic!("Chromium never listened: {}", started.log.lock().unwrap());
            }
        }
    }

    /// Its one page, over the page's own DevTools WebSocket.
    pub fn page(&self) -> Page {
        // Its first tab may be listed a moment after DevTools says it listens.
        let until = Instant::now() + STEP;
        let url = loop {
            let body = self.targets();
            let targets: Vec<Value> = serde_json::from_str(&body).unwrap();
            if let Some(url) = targets
                .iter()
                .find(|t| t["type"] == "page")
                .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            {
                break url.to_string();
            }
            assert!(Instant::now() < until, "no page target: {body}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let host = url
            .trim_start_matches("ws://")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let stream = TcpStream::connect(&host).unwrap();
        stream.set_read_timeout(Some(STEP)).unwrap();
        let (ws, _) = tungstenite::client::client(url.as_str(), stream).expect("DevTools socket");
        let mut page = Page {
            ws,
            next_id: 0,
            events: Vec::new(),
            errors: Vec::new(),
        };
        for domain in ["Page", "Runtime", "Log"] {
            page.call(&format!("{domain}.enable"), json!({}));
        }
        page
    }
}

impl Chromium {
    /// `GET /json/list`: its targets (read to its `Content-Length`, since DevTools keeps the
    /// connection open whatever the request asks).
    fn targets(&self) -> String {
        use std::io::Write;
        let host = self.devtools.trim_start_matches("http://");
        let mut stream = TcpStream::connect(host).unwrap();
        stream.set_read_timeout(Some(STEP)).unwrap();
        write!(stream, "GET /json/list HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut length = 0;
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).expect("DevTools answers");
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        std::io::Read::read_exact(&mut reader, &mut body).unwrap();
        String::from_utf8(body).unwrap()
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        // The browser and its renderers share its process group.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

/// One page's DevTools session.
pub struct Page {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Events not yet waited for.
    events: Vec<Value>,
    /// Every console error, uncaught exception and error log entry so far.
    pub errors: Vec<String>,
}

impl Page {
    /// The next message from the browser; events are kept (errors noted) as they pass.
    fn receive(&mut self) -> Value {
        loop {
            let message = self.ws.read().expect("a DevTools message in time");
            let Message::Text(text) = message else {
                continue;
            };
            let value: Value = serde_json::from_str(&text).unwrap();
            match value["method"].as_str() {
                Some("Runtime.consoleAPICalled")
                    if matches!(value["params"]["type"].as_str(), Some("error" | "assert")) =>
                {
                    self.errors
                        .push(format!("console: {}", value["params"]["args"]));
                }
                Some("Runtime.exceptionThrown") => {
                    self.errors.push(format!(
                        "exception: {}",
                        value["params"]["exceptionDetails"]
                    ));
                }
                Some("Log.entryAdded") if value["params"]["entry"]["level"] == "error" => {
                    self.errors
                        .push(format!("log: {}", value["params"]["entry"]));
                }
                _ => {}
            }
            return value;
        }
    }

    /// Calls `method`; its result.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(Message::text(request.to_string()))
            .expect("send to DevTools");
        let until = Instant::now() + STEP;
        loop {
            assert!(Instant::now() < until, "no answer to {method} in {STEP:?}");
            let message = self.receive();
            if message["id"] == id {
                assert!(message["error"].is_null(), "{method}: {}", message["error"]);
                return message["result"].clone();
            }
            if message["method"].is_string() {
                self.events.push(message);
            }
        }
    }

    /// Waits for event `method` (one already received counts); drops the events before it.
    pub fn wait_event(&mut self, method: &str) -> Value {
        if let Some(at) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.drain(..=at).next_back().unwrap();
        }
        self.events.clear();
        let until = Instant::now() + STEP;
        loop {
            assert!(Instant::now() < until, "no {method} in {STEP:?}");
            let message = self.receive();
            if message["method"] == method {
                return message;
            }
        }
    }

    /// Goes to `url` and waits for it to load.
    pub fn open(&mut self, url: &str) {
        self.events.clear();
        let result = self.call("Page.navigate", json!({"url": url}));
        assert!(result["errorText"].is_null(), "{url}: {result}");
        self.wait_event("Page.loadEventFired");
    }

    /// What `expression` comes to (a promise: what it resolves to).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            result["exceptionDetails"].is_null(),
            "{expression}: {}",
            result["exceptionDetails"]
        );
        result["result"]["value"].clone()
    }

    /// Waits until `condition` (a JavaScript expression) holds, watching the document change
    /// rather than polling it; fails after [`STEP`] with `what`.
    pub fn wait_until(&mut self, condition: &str, what: &str) {
        let script = format!(
            "new Promise((resolve, reject) => {{
               const check = () => {{ if ({condition}) {{ observer.disconnect(); resolve(true); }} }};
               const observer = new MutationObserver(check);
               observer.observe(document, {{subtree: true, childList: true, characterData: true}});
               setTimeout(() => reject(new Error({what:?} + ': ' + document.body.innerText)), {});
               check();
             }})",
            STEP.as_millis() - 5_000
        );
        self.eval(&script);
    }

    /// Clicks the element `selector` names and waits for the page it leads to.
    pub fn click_through(&mut self, selector: &str) {
        self.events.clear();
        let found = self.eval(&format!(
            "(() => {{ const e = document.querySelector({selector:?}); if (!e) return false; \
             e.click(); return true; }})()"
        ));
        assert_eq!(found, true, "nothing matches {selector}");
        self.wait_event("Page.loadEventFired");
    }

    /// The visible page as a PNG at `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// Sets the viewport: `width` by `height` CSS pixels, as a phone (`mobile`) or a desktop.
    pub fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        );
    }
}
