//! Prometheus metrics: the one registry of everything baton exports on `GET /metrics` (on the
//! Unix socket, and on TCP with `baton serve --metrics-addr`), the update methods the monitor,
//! scheduler, notifier and waste rules call, the text encoding, and the small TCP server.
//!
//! The output is the Prometheus text format 0.0.4 (prometheus-client's `prometheus_text`
//! encoder), not OpenMetrics: `promtool check metrics` lints only that format (it reports an
//! OpenMetrics counter, whose `# TYPE` line lacks `_total`, as "no help text"), and Prometheus
//! scrapes either.
//!
//! Exported families (all prefixed `baton_`):
//! - per GPU, labels `gpu`, `uuid`, `model`, `job`: `gpu_utilization_percent`,
//!   `gpu_memory_used_bytes`, `gpu_memory_total_bytes`, `gpu_power_watts`,
//!   `gpu_temperature_celsius` (gauges);
//! - `jobs{state}` (gauge: queued, running), `jobs_submitted_total`, `jobs_ended_total{state}`;
//! - histograms `job_run_seconds{state}`, `schedule_latency_seconds`,
//!   `wakeup_latency_seconds{channel}`, `monitor_sample_seconds`;
//! - `waste_actions_total{rule,action,dry_run}`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The labels of every per-GPU series. `job` is part of the identity so that a dashboard can show
/// which job a reading belongs to; [`Metrics::set_gpu`] removes the old series when it changes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GpuLabels {
    /// The GPU's index, as in `CUDA_VISIBLE_DEVICES` and `baton gpus`.
    pub gpu: String,
    pub uuid: String,
    pub model: String,
    /// The ids of the jobs on this GPU, comma-joined; empty when none.
    pub job: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabels {
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WasteLabels {
    rule: String,
    action: String,
    dry_run: bool,
}

/// A float gauge (the default `Gauge` holds an `i64`).
type FloatGauge = Gauge<f64, AtomicU64>;
/// A histogram family needs a named constructor type to live in a struct field.
type HistogramFamily<S> = Family<S, Histogram, fn() -> Histogram>;

/// ML jobs run from seconds (a smoke test) to days (a pre-training run): 10 s up to one week.
const JOB_RUN_BUCKETS: [f64; 15] = [
    10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 43200.0, 86400.0,
    172_800.0, 345_600.0, 604_800.0,
];

/// Scheduling and wake-up latency: 1 ms to 60 s, dense around the 100 ms wake-up target.
const LATENCY_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// One monitor sample (NVML queries for every GPU): 100 µs to 5 s.
const SAMPLE_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn job_run_histogram() -> Histogram {
    Histogram::new(JOB_RUN_BUCKETS)
}

/// A duration fit for a histogram: NaN or infinity (a broken clock reading) is dropped rather than
/// poisoning `_sum` forever, and a negative value (the wall clock stepped back) counts as 0.
fn duration(secs: f64) -> Option<f64> {
    secs.is_finite().then(|| secs.max(0.0))
}

/// Sets `value` on `labels` in `family`, or removes that series when there is no value: a GPU
/// that cannot report its power must show no power series, not a misleading 0 W.
fn set_or_remove(family: &Family<GpuLabels, FloatGauge>, labels: &GpuLabels, value: Option<f64>) {
    match value.filter(|v| v.is_finite()) {
        Some(v) => {
            family.get_or_create(labels).set(v);
        }
        None => {
            family.remove(labels);
        }
    }
}

/// Byte counts go into `i64` gauges (exact, unlike `f64` above 2^53); no GPU comes near the
/// saturation point.
fn bytes(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Every metric baton exports. Shared in an `Arc` across the daemon's tasks: the families have
/// their own interior mutability (atomics and locks), so every method takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    gpu_utilization: Family<GpuLabels, FloatGauge>,
    gpu_memory_used: Family<GpuLabels, Gauge>,
    gpu_memory_total: Family<GpuLabels, Gauge>,
    gpu_power: Family<GpuLabels, FloatGauge>,
    gpu_temperature: Family<GpuLabels, FloatGauge>,
    /// The label set each GPU index was last published under. The families cannot be listed, so
    /// this is how `set_gpu` finds the series to remove when a GPU's job changes. Its lock also
    /// serialises updates of one GPU, so two concurrent calls cannot leave two series behind.
    gpu_labels: Mutex<HashMap<String, GpuLabels>>,
    jobs: Family<QueueLabels, Gauge>,
    jobs_submitted: Counter,
    jobs_ended: Family<StateLabels, Counter>,
    job_run: HistogramFamily<StateLabels>,
    schedule_latency: Histogram,
    wakeup_latency: HistogramFamily<ChannelLabels>,
    waste_actions: Family<WasteLabels, Counter>,
    monitor_sample: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The content type of [`Metrics::encode`]'s output.
    pub const CONTENT_TYPE: &'static str = prometheus_text::CONTENT_TYPE;

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("baton");
        let percent = || Unit::Other("percent".to_owned());
        let watts = || Unit::Other("watts".to_owned());

        let gpu_utilization = Family::<GpuLabels, FloatGauge>::default();
        registry.register_with_unit(
            "gpu_utilization",
            "GPU utilisation: the percentage of the last sample period in which a kernel ran",
            percent(),
            gpu_utilization.clone(),
        );
        let gpu_memory_used = Family::<GpuLabels, Gauge>::default();
        registry.register_with_unit(
            "gpu_memory_used",
            "GPU memory in use, by all processes",
            Unit::Bytes,
            gpu_memory_used.clone(),
        );
        let gpu_memory_total = Family::<GpuLabels, Gauge>::default();
        registry.register_with_unit(
            "gpu_memory_total",
            "GPU memory installed",
            Unit::Bytes,
            gpu_memory_total.clone(),
        );
        let gpu_power = Family::<GpuLabels, FloatGauge>::default();
        registry.register_with_unit("gpu_power", "GPU power draw", watts(), gpu_power.clone());
        let gpu_temperature = Family::<GpuLabels, FloatGauge>::default();
        registry.register_with_unit(
            "gpu_temperature",
            "GPU core temperature",
            Unit::Celsius,
            gpu_temperature.clone(),
        );

        let jobs = Family::<QueueLabels, Gauge>::default();
        registry.register("jobs", "Jobs in the queue, by state", jobs.clone());
        let jobs_submitted = Counter::default();
        registry.register("jobs_submitted", "Jobs submitted", jobs_submitted.clone());
        let jobs_ended = Family::<StateLabels, Counter>::default();
        registry.register(
            "jobs_ended",
            "Jobs ended, by final state",
            jobs_ended.clone(),
        );
        let job_run: HistogramFamily<StateLabels> = Family::new_with_constructor(job_run_histogram);
        registry.register_with_unit(
            "job_run",
            "Run time of ended jobs that started, by final state",
            Unit::Seconds,
            job_run.clone(),
        );
        let schedule_latency = latency_histogram();
        registry.register_with_unit(
            "schedule_latency",
            "Time from submission to start of jobs that could start at once (no dependencies, GPUs free)",
            Unit::Seconds,
            schedule_latency.clone(),
        );
        let wakeup_latency: HistogramFamily<ChannelLabels> =
            Family::new_with_constructor(latency_histogram);
        registry.register_with_unit(
            "wakeup_latency",
            "Time from a job's end to its report being delivered, by delivery channel",
            Unit::Seconds,
            wakeup_latency.clone(),
        );
        let waste_actions = Family::<WasteLabels, Counter>::default();
        registry.register(
            "waste_actions",
            "Waste-rule decisions, by rule and action; dry_run=true ones were only logged",
            waste_actions.clone(),
        );
        let monitor_sample = Histogram::new(SAMPLE_BUCKETS);
        registry.register_with_unit(
            "monitor_sample",
            "Time taken by one monitor sample of all GPUs (baton's own overhead)",
            Unit::Seconds,
            monitor_sample.clone(),
        );

        Self {
            registry,
            gpu_utilization,
            gpu_memory_used,
            gpu_memory_total,
            gpu_power,
            gpu_temperature,
            gpu_labels: Mutex::new(HashMap::new()),
            jobs,
            jobs_submitted,
            jobs_ended,
            job_run,
            schedule_latency,
            wakeup_latency,
            waste_actions,
            monitor_sample,
        }
    }

    /// One GPU's latest reading. `job` is the comma-joined job ids on it ("" when none).
    /// Replaces the previous values for that GPU index: when its labels change (a new job), the
    /// old series are removed first, so a GPU never shows two series at once. A `None` (or
    /// non-finite) reading removes that series instead of exporting a false 0.
    pub fn set_gpu(
        &self,
        gpu: &GpuLabels,
        util_pct: Option<f64>,
        mem_used: u64,
        mem_total: u64,
        power_watts: Option<f64>,
        temp_c: Option<f64>,
    ) {
        let mut current = self
            .gpu_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(old) = current.get(&gpu.gpu)
            && old != gpu
        {
            self.gpu_utilization.remove(old);
            self.gpu_memory_used.remove(old);
            self.gpu_memory_total.remove(old);
            self.gpu_power.remove(old);
            self.gpu_temperature.remove(old);
        }
        set_or_remove(&self.gpu_utilization, gpu, util_pct);
        self.gpu_memory_used.get_or_create(gpu).set(bytes(mem_used));
        self.gpu_memory_total
            .get_or_create(gpu)
            .set(bytes(mem_total));
        set_or_remove(&self.gpu_power, gpu, power_watts);
        set_or_remove(&self.gpu_temperature, gpu, temp_c);
        current.insert(gpu.gpu.clone(), gpu.clone());
    }

    /// Queue length by state: called after every change with the counts of queued and running
    /// jobs.
    pub fn set_queue(&self, queued: i64, running: i64) {
        self.jobs
            .get_or_create(&QueueLabels { state: "queued" })
            .set(queued);
        self.jobs
            .get_or_create(&QueueLabels { state: "running" })
            .set(running);
    }

    /// A job ended in `state` ("succeeded", "failed", "cancelled", "timeout", ...) after running
    /// `run_secs` (None if it never started: it then counts as ended but adds no run time).
    pub fn job_ended(&self, state: &str, run_secs: Option<f64>) {
        let labels = StateLabels {
            state: state.to_owned(),
        };
        self.jobs_ended.get_or_create(&labels).inc();
        if let Some(secs) = run_secs.and_then(duration) {
            self.job_run.get_or_create(&labels).observe(secs);
        }
    }

    pub fn job_submitted(&self) {
        self.jobs_submitted.inc();
    }

    /// Seconds from submission to start of a job that could start at once (no dependencies,
    /// GPUs free): the latency the dispatch path adds.
    pub fn observe_schedule_latency(&self, secs: f64) {
        if let Some(secs) = duration(secs) {
            self.schedule_latency.observe(secs);
        }
    }

    /// Seconds from a job's end to its report being delivered on `channel` (kind: "claude",
    /// "tmux", "file", ...).
    pub fn observe_wakeup_latency(&self, channel: &str, secs: f64) {
        if let Some(secs) = duration(secs) {
            let labels = ChannelLabels {
                channel: channel.to_owned(),
            };
            self.wakeup_latency.get_or_create(&labels).observe(secs);
        }
    }

    /// One waste decision (rule: zombie|idle_job|held_after_exit; action:
    /// notify|deprioritize|sigterm|sigkill|skip; dry_run).
    pub fn waste_action(&self, rule: &str, action: &str, dry_run: bool) {
        let labels = WasteLabels {
            rule: rule.to_owned(),
            action: action.to_owned(),
            dry_run,
        };
        self.waste_actions.get_or_create(&labels).inc();
    }

    /// The duration of one monitor sample (seconds), for overhead tracking.
    pub fn observe_sample_duration(&self, secs: f64) {
        if let Some(secs) = duration(secs) {
            self.monitor_sample.observe(secs);
        }
    }

    /// The whole registry in the Prometheus text format 0.0.4 (what `GET /metrics` returns, with
    /// [`Metrics::CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail and the encoder has no other error source; should
        // that ever change, a partial page plus a log line beats a failed scrape.
        if let Err(error) = prometheus_text::encode(&mut out, &self.registry) {
            tracing::error!(%error, "encoding metrics failed");
        }
        out
    }
}

async fn get_metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, Metrics::CONTENT_TYPE)],
        metrics.encode(),
    )
}

/// The `GET /metrics` route alone; generic over the outer router's state so that the daemon can
/// `merge` it into its Unix-socket router too.
pub fn router<S: Clone + Send + Sync + 'static>(metrics: Arc<Metrics>) -> Router<S> {
    Router::new()
        .route("/metrics", get(get_metrics))
        .with_state(metrics)
}

/// Serves GET /metrics (and nothing else: 404) on a TCP listener until `shutdown` resolves. Used
/// by `baton serve --metrics-addr`. Only metrics are exposed on TCP: the job API stays on the
/// Unix socket, where the peer's credentials are known.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router::<()>(metrics))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    use std::time::Duration;

    fn h100(gpu: &str, job: &str) -> GpuLabels {
        GpuLabels {
            gpu: gpu.to_owned(),
            uuid: format!("GPU-0000000{gpu}-aaaa-bbbb-cccc-dddddddddddd"),
            model: "NVIDIA H100 80GB HBM3".to_owned(),
            job: job.to_owned(),
        }
    }

    const GIB: u64 = 1 << 30;

    /// What a daemon with two GPUs and a few finished jobs would have recorded.
    fn realistic() -> Metrics {
        let m = Metrics::new();
        m.set_gpu(
            &h100("0", "12,13"),
            Some(87.5),
            40 * GIB,
            80 * GIB,
            Some(312.25),
            Some(61.0),
        );
        // GPU 1 is idle and its driver reports neither power nor temperature.
        m.set_gpu(&h100("1", ""), Some(0.0), 0, 80 * GIB, None, None);
        m.set_queue(3, 2);
        for _ in 0..5 {
            m.job_submitted();
        }
        m.job_ended("succeeded", Some(4000.0));
        m.job_ended("failed", Some(12.0));
        m.job_ended("cancelled", None);
        m.observe_schedule_latency(0.004);
        m.observe_schedule_latency(0.2);
        m.observe_wakeup_latency("claude", 0.03);
        m.observe_wakeup_latency("file", 0.002);
        m.waste_action("idle_job", "notify", false);
        m.waste_action("zombie", "sigterm", true);
        m.waste_action("zombie", "sigterm", true);
        m.observe_sample_duration(0.0015);
        m
    }

    fn lines_starting<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn encode_has_expected_series() {
        let text = realistic().encode();
        let gpu0 = r#"{gpu="0",uuid="GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",model="NVIDIA H100 80GB HBM3",job="12,13"}"#;
        let gpu1 = r#"{gpu="1",uuid="GPU-00000001-aaaa-bbbb-cccc-dddddddddddd",model="NVIDIA H100 80GB HBM3",job=""}"#;
        let expected = [
            "# TYPE baton_gpu_utilization_percent gauge".to_owned(),
            format!("baton_gpu_utilization_percent{gpu0} 87.5"),
            format!("baton_gpu_utilization_percent{gpu1} 0.0"),
            format!("baton_gpu_memory_used_bytes{gpu0} {}", 40 * GIB),
            format!("baton_gpu_memory_total_bytes{gpu1} {}", 80 * GIB),
            format!("baton_gpu_power_watts{gpu0} 312.25"),
            format!("baton_gpu_temperature_celsius{gpu0} 61.0"),
            "# TYPE baton_jobs gauge".to_owned(),
            r#"baton_jobs{state="queued"} 3"#.to_owned(),
            r#"baton_jobs{state="running"} 2"#.to_owned(),
            "# TYPE baton_jobs_submitted_total counter".to_owned(),
            "baton_jobs_submitted_total 5".to_owned(),
            r#"baton_jobs_ended_total{state="cancelled"} 1"#.to_owned(),
            "# TYPE baton_job_run_seconds histogram".to_owned(),
            r#"baton_job_run_seconds_bucket{state="succeeded",le="3600"} 0"#.to_owned(),
            r#"baton_job_run_seconds_bucket{state="succeeded",le="7200"} 1"#.to_owned(),
            r#"baton_job_run_seconds_bucket{state="failed",le="+Inf"} 1"#.to_owned(),
            r#"baton_job_run_seconds_sum{state="failed"} 12.0"#.to_owned(),
            r#"baton_schedule_latency_seconds_bucket{le="0.005"} 1"#.to_owned(),
            r#"baton_schedule_latency_seconds_bucket{le="0.25"} 2"#.to_owned(),
            "baton_schedule_latency_seconds_count 2".to_owned(),
            r#"baton_wakeup_latency_seconds_count{channel="claude"} 1"#.to_owned(),
            r#"baton_wakeup_latency_seconds_bucket{channel="file",le="0.0025"} 1"#.to_owned(),
            r#"baton_waste_actions_total{rule="zombie",action="sigterm",dry_run="true"} 2"#
                .to_owned(),
            r#"baton_waste_actions_total{rule="idle_job",action="notify",dry_run="false"} 1"#
                .to_owned(),
            "baton_monitor_sample_seconds_count 1".to_owned(),
        ];
        for line in &expected {
            assert!(
                text.lines().any(|l| l == line),
                "missing line {line:?} in:\n{text}"
            );
        }
        // GPU 1 has no power or temperature reading: no series rather than a fake 0.
        assert_eq!(lines_starting(&text, "baton_gpu_power_watts{").len(), 1);
        assert_eq!(
            lines_starting(&text, "baton_gpu_temperature_celsius{").len(),
            1
        );
        // A job that never started counts as ended but has no run time.
        assert!(!text.contains(r#"baton_job_run_seconds_count{state="cancelled"}"#));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn gpu_keeps_one_series_when_its_job_changes() {
        let m = Metrics::new();
        m.set_gpu(
            &h100("0", "1"),
            Some(50.0),
            GIB,
            80 * GIB,
            Some(200.0),
            Some(50.0),
        );
        m.set_gpu(
            &h100("1", "2"),
            Some(10.0),
            GIB,
            80 * GIB,
            Some(100.0),
            Some(40.0),
        );
        m.set_gpu(
            &h100("0", "3"),
            Some(95.0),
            2 * GIB,
            80 * GIB,
            Some(300.0),
            None,
        );
        m.set_gpu(
            &h100("0", ""),
            Some(0.0),
            0,
            80 * GIB,
            Some(60.0),
            Some(35.0),
        );
        let text = m.encode();
        for family in [
            "baton_gpu_utilization_percent{",
            "baton_gpu_memory_used_bytes{",
            "baton_gpu_memory_total_bytes{",
            "baton_gpu_power_watts{",
            "baton_gpu_temperature_celsius{",
        ] {
            let gpu0 = lines_starting(&text, family)
                .into_iter()
                .filter(|l| l.contains(r#"gpu="0""#))
                .collect::<Vec<_>>();
            assert_eq!(gpu0.len(), 1, "{family}: {gpu0:?}");
            assert!(gpu0[0].contains(r#"job="""#), "{}", gpu0[0]);
            // The other GPU is untouched.
            assert_eq!(
                lines_starting(&text, family)
                    .iter()
                    .filter(|l| l.contains(r#"gpu="1",uuid"#) && l.contains(r#"job="2""#))
                    .count(),
                1,
                "{family}"
            );
        }
        // A reading that disappears removes its series even when the labels stay the same.
        m.set_gpu(
            &h100("1", "2"),
            None,
            GIB,
            80 * GIB,
            Some(f64::NAN),
            Some(40.0),
        );
        let text = m.encode();
        assert!(!text.contains(r#"baton_gpu_utilization_percent{gpu="1""#));
        assert!(!text.contains(r#"baton_gpu_power_watts{gpu="1""#));
        assert!(text.contains(r#"baton_gpu_temperature_celsius{gpu="1""#));
    }

    #[test]
    fn bad_durations_do_not_poison_histograms() {
        let m = Metrics::new();
        m.observe_schedule_latency(f64::NAN);
        m.observe_schedule_latency(-0.5);
        m.observe_wakeup_latency("tmux", f64::INFINITY);
        let text = m.encode();
        assert!(text.contains("baton_schedule_latency_seconds_count 1\n"));
        assert!(text.contains("baton_schedule_latency_seconds_sum 0.0\n"));
        assert!(!text.contains(r#"channel="tmux""#));
    }

    /// `promtool check metrics` (parse + lint) on a fresh page and a realistic one. It fails
    /// rather than skips when BATON_REQUIRE_PROMTOOL=1, so CI cannot pass by lacking promtool.
    #[test]
    fn promtool_accepts_output() {
        let promtool = std::env::var_os("PROMTOOL").unwrap_or_else(|| "promtool".into());
        for text in [Metrics::new().encode(), realistic().encode()] {
            let child = Command::new(&promtool)
                .args(["check", "metrics"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            let mut child = match child {
                Ok(child) => child,
                Err(e) if std::env::var("BATON_REQUIRE_PROMTOOL").as_deref() == Ok("1") => {
                    panic!("BATON_REQUIRE_PROMTOOL=1 but {promtool:?} cannot run: {e}")
                }
                Err(e) => {
                    eprintln!(
                        "skipping: {promtool:?} cannot run ({e}); \
                         set BATON_REQUIRE_PROMTOOL=1 to fail instead"
                    );
                    return;
                }
            };
            child
                .stdin
                .take()
                .expect("stdin is piped")
                .write_all(text.as_bytes())
                .expect("write to promtool");
            let out = child.wait_with_output().expect("promtool runs");
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            eprintln!("promtool check metrics: {}, output: {said:?}", out.status);
            // Exit status 3 means lint problems, which must fail the test too.
            assert!(
                out.status.success(),
                "promtool rejected:\n{said}\n---\n{text}"
            );
            assert!(said.trim().is_empty(), "promtool lint:\n{said}");
        }
    }

    /// A minimal HTTP/1.0 GET: (status line, headers, body).
    fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String, String) {
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let (head, body) = response.split_once("\r\n\r\n").expect("header end");
        let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
        (
            status.to_owned(),
            headers.to_ascii_lowercase(),
            body.to_owned(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_tcp_serves_metrics_only_and_stops() {
        let metrics = Arc::new(realistic());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_tcp(listener, metrics.clone(), async {
            let _ = stopped.await;
        }));

        let (status, headers, body) =
            tokio::task::spawn_blocking(move || http_get(addr, "/metrics"))
                .await
                .expect("client");
        assert!(status.contains(" 200 "), "{status}");
        assert!(
            headers.contains(&format!("content-type: {}", Metrics::CONTENT_TYPE)),
            "{headers}"
        );
        assert_eq!(body, metrics.encode());
        assert!(body.contains("baton_jobs_submitted_total 5\n"));

        let (status, _, _) = tokio::task::spawn_blocking(move || http_get(addr, "/other"))
            .await
            .expect("client");
        assert!(status.contains(" 404 "), "{status}");

        stop.send(()).expect("server still running");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("server stops on shutdown")
            .expect("server task")
            .expect("server result");
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "still listening"
        );
    }
}
