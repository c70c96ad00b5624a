//! The waste rules on real telemetry: the public GenAI serving trace (`../shared/traces/`,
//! per-minute GPU utilisation and memory of image-generation serving pods) replayed through one
//! [`WasteEngine`] with the default thresholds, each pod a running job on its own GPU. Serving
//! pods idle for hours while holding many GiB, so unprotected the idle rule must flag some of
//! them, and tagged `protect=true` every one of those must get exactly one `skip` and nothing
//! else. Also: a `[waste]` table as written in `config.toml` reads into [`WasteConfig`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use baton_core::model::{JobId, Millis};
use baton_core::waste::{
    Action, Decision, GpuObs, JobObs, ProcObs, ProcOwner, Rule, Snapshot, WasteConfig, WasteEngine,
    WasteMode,
};

const UTIL_TRACE: &str = "alibaba-v2026-GenAI-pod_gpu_duty_cycle_anon.tar.gz";
const MEM_TRACE: &str = "alibaba-v2026-GenAI-pod_gpu_memory_used_bytes_anon.tar.gz";

/// One pod's samples, keyed by time: (utilisation percent, memory bytes), either may be missing.
type Series = BTreeMap<Millis, (Option<f64>, Option<u64>)>;

fn traces_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces")
}

/// The one CSV inside a trace archive, through the system's `tar`.
fn extract(name: &str) -> String {
    let path = traces_dir().join(name);
    assert!(
        path.is_file(),
        "the GenAI serving trace is missing: {} (see shared/traces/SOURCES.md)",
        path.display()
    );
    let out = Command::new("tar")
        .arg("xzOf")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tar on {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "tar xzOf {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the trace is UTF-8")
}

fn seconds_to_ms(field: &str) -> Millis {
    let seconds: f64 = field
        .parse()
        .unwrap_or_else(|e| panic!("timestamp {field:?}: {e}"));
    (seconds * 1000.0).round() as Millis
}

/// Both files joined on (container_ip, timestamp), per pod in container_ip order.
fn load_pods() -> Vec<Series> {
    let mut pods: BTreeMap<String, Series> = BTreeMap::new();
    let util = extract(UTIL_TRACE);
    let mut lines = util.lines();
    assert_eq!(lines.next(), Some("value,timestamp_anon,container_ip"));
    for line in lines {
        let [value, ts, ip] = fields(line);
        let util: f64 = value.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"));
        pods.entry(ip.to_string())
            .or_default()
            .entry(seconds_to_ms(ts))
            .or_default()
            .0 = Some(util);
    }
    let mem = extract(MEM_TRACE);
    let mut lines = mem.lines();
    assert_eq!(lines.next(), Some("timestamp_anon,value,container_ip"));
    for line in lines {
        let [ts, value, ip] = fields(line);
        let bytes: f64 = value.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"));
        pods.entry(ip.to_string())
            .or_default()
            .entry(seconds_to_ms(ts))
            .or_default()
            .1 = Some(bytes as u64);
    }
    pods.into_values().collect()
}

fn fields(line: &str) -> [&str; 3] {
    let parts: Vec<&str> = line.split(',').collect();
    parts
        .try_into()
        .unwrap_or_else(|_| panic!("expected 3 fields: {line:?}"))
}

/// Replays every pod as job `i + 1` on GPU `i`, running from its first to its last sample, one
/// snapshot per trace minute. Minutes a pod has no sample for show its GPU with no reading.
fn replay(pods: &[Series], protect: bool) -> Vec<Decision> {
    let config = WasteConfig {
        mode: WasteMode::Enforce,
        ..WasteConfig::default()
    };
    let mut engine = WasteEngine::new(config);
    let spans: Vec<(Millis, Millis)> = pods
        .iter()
        .map(|s| (*s.keys().next().unwrap(), *s.keys().next_back().unwrap()))
        .collect();
    let times: BTreeSet<Millis> = pods.iter().flat_map(|s| s.keys().copied()).collect();
    let mut decisions = Vec::new();
    for &at in &times {
        let mut snapshot = Snapshot {
            at,
            gpus: Vec::new(),
            jobs: Vec::new(),
        };
        for (i, (series, &(first, last))) in pods.iter().zip(&spans).enumerate() {
            if at < first || at > last {
                continue;
            }
            let (util, mem) = series.get(&at).copied().unwrap_or((None, None));
            let id = JobId(i as u64 + 1);
            let mem = mem.unwrap_or(0);
            snapshot.gpus.push(GpuObs {
                index: i as u32,
                util,
                mem_used: mem,
                processes: (mem > 0)
                    .then(|| ProcObs {
                        pid: 10_000 + i as u32,
                        mem,
                        user: Some("serving".into()),
                        owner: ProcOwner::Job(id),
                    })
                    .into_iter()
                    .collect(),
            });
            let mut tags = BTreeMap::new();
            if protect {
                tags.insert("protect".to_string(), "true".to_string());
            }
            snapshot.jobs.push(JobObs {
                id,
                owner: "serving".into(),
                name: format!("genai-pod-{i}"),
                tags,
                gpus: vec![i as u32],
                started_at: first,
                running: true,
                said_finished_at: None,
            });
        }
        decisions.extend(engine.observe(&snapshot));
    }
    decisions
}

/// Each job's first decision time.
fn first_decision_per_job<'a>(
    decisions: impl IntoIterator<Item = &'a Decision>,
) -> BTreeMap<JobId, Millis> {
    let mut first = BTreeMap::new();
    for d in decisions {
        first
            .entry(d.job.expect("a job-level decision"))
            .or_insert(d.at);
    }
    first
}

#[test]
fn protected_serving_pods_are_only_skipped_and_unprotected_ones_are_flagged() {
    let pods = load_pods();
    assert!(pods.len() >= 100, "only {} pods in the trace", pods.len());
    let samples: usize = pods.iter().map(|s| s.len()).sum();

    let open = replay(&pods, false);
    let strays: Vec<&Decision> = open.iter().filter(|d| d.rule != Rule::IdleJob).collect();
    assert!(
        strays.is_empty(),
        "serving pods' own processes were taken for zombies or leftovers: {:?}",
        strays
            .iter()
            .take(3)
            .map(|d| &d.message)
            .collect::<Vec<_>>()
    );
    let flagged = first_decision_per_job(&open);
    let stopped = open.iter().filter(|d| d.action == Action::Sigterm).count();
    assert!(
        !flagged.is_empty() && stopped > 0,
        "the idle rule flagged {} of {} pods ({} samples) and stopped {stopped}: the replay does \
         not exercise it",
        flagged.len(),
        pods.len(),
        samples
    );
    assert_eq!(
        first_decision_per_job(
            open.iter()
                .filter(|d| d.action == Action::Notify && d.message.ends_with("warning 1 of 2"))
        ),
        flagged,
        "every flagged pod's first decision is its first warning"
    );

    let guarded = replay(&pods, true);
    let acted: Vec<&Decision> = guarded
        .iter()
        .filter(|d| d.action != Action::Skip)
        .collect();
    assert!(
        acted.is_empty(),
        "{} decisions other than skip on protected pods, e.g. {:?}",
        acted.len(),
        acted.first().map(|d| &d.message)
    );
    let mut skips_per_job: BTreeMap<JobId, usize> = BTreeMap::new();
    for d in &guarded {
        assert_eq!(d.rule, Rule::IdleJob, "{}", d.message);
        assert!(
            d.message.ends_with("protected: tag protect=true"),
            "{}",
            d.message
        );
        *skips_per_job.entry(d.job.unwrap()).or_default() += 1;
    }
    let repeated: Vec<_> = skips_per_job.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "skipped more than once: {repeated:?}");
    assert_eq!(
        first_decision_per_job(&guarded),
        flagged,
        "protected, each of the {} pods the idle rule flags gets one skip, at the time it would \
         have been warned ({} skips over {} pods, {} samples)",
        flagged.len(),
        guarded.len(),
        pods.len(),
        samples
    );
}

#[derive(Debug, serde::Deserialize)]
struct ConfigFile {
    waste: WasteConfig,
}

#[test]
fn waste_config_reads_from_config_toml() {
    let text = r#"
        [waste]
        mode = "enforce"
        sample_interval = "10s"
        grace = "45s"

        [waste.zombie]
        min_mem = "2GiB"
        after = "20m"

        [waste.idle_job]
        max_util = 3
        warn_after = "45m"
        act_after = "90m"

        [waste.held_after_exit]
        enabled = false
        min_mem = 1048576

        [waste.allow]
        users = ["root"]
        tags = ["team=infra"]
    "#;
    let file: ConfigFile = toml::from_str(text).unwrap();
    let c = file.waste;
    c.validate().unwrap();
    assert_eq!(c.mode, WasteMode::Enforce);
    assert_eq!((c.sample_interval, c.grace), (10_000, 45_000));
    assert_eq!((c.zombie.min_mem, c.zombie.after), (2 << 30, 20 * 60_000));
    assert_eq!(c.idle_job.max_util, 3.0);
    assert_eq!(
        c.idle_job.second_warn_after(),
        90 * 60_000 - 45 * 60_000 / 4
    );
    assert_eq!(c.held_after_exit.min_mem, 1 << 20);
    assert!(!c.held_after_exit.enabled && c.allow.names.is_empty());

    let err = |text: &str| toml::from_str::<ConfigFile>(text).unwrap_err().to_string();
    let e = err("[waste.zombie]\nmin_memory = \"1GiB\"\n");
    assert!(
        e.contains("unknown field `min_memory`") && e.contains("line 2"),
        "{e}"
    );
    let e = err("[waste.idle_job]\nwarn_after = 60\n");
    assert!(
        e.contains("a duration with a unit") && e.contains("line 2"),
        "{e}"
    );
    let e = err("[waste]\ngrace = \"soon\"\n");
    assert!(e.contains("invalid duration \"soon\""), "{e}");

    let bad: ConfigFile = toml::from_str("[waste.idle_job]\nwarn_after = \"3h\"\n").unwrap();
    let e = bad.waste.validate().unwrap_err().to_string();
    assert!(e.starts_with("waste.idle_job.warn_after = \"3h\""), "{e}");
}
