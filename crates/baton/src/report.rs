//! Building and storing a job's end-of-run report: the imperative shell around
//! `baton_core::report`. It reads the job's output files (only their last `SCAN_LIMIT` bytes, so a
//! job that printed 10 GB costs the same as one that printed 64 MiB), walks the working directory
//! for files the job wrote (bounded too), asks the supervisor's record whether the OOM killer
//! struck and whether the command could be started at all, and stores the result as
//! `jobs/<id>/report.json` and `report.md`.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use baton_core::report::{self, FileChange, GpuUsage, JobFacts, OutputScanner, Report, Stream};
use baton_core::{JobState, Millis};

use crate::executor::JobFiles;
use crate::gpu::GpuInfo;
use crate::store::{JobGpuUsage, JobRecord};

/// How much of the end of each output stream is scanned.
const SCAN_LIMIT: u64 = 64 << 20;
/// How many directory entries the look for written files may visit, and how deep.
const WALK_ENTRIES: usize = 20_000;
const WALK_DEPTH: usize = 6;
/// How long the look may take: about 1% of the job's run time, within these bounds. A job of a
/// few milliseconds started from a big directory must not pay tens of milliseconds for its
/// report; an hour-long run can afford a thorough look.
const WALK_TIME_MIN: Duration = Duration::from_millis(2);
const WALK_TIME_MAX: Duration = Duration::from_millis(200);
/// Directories that hold tools' caches and environments rather than a run's results.
const SKIP_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    "node_modules",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".cache",
    "target",
];

/// A report and its markdown rendering, made when first asked for: a sweep's run that wakes
/// nobody stores `report.json` alone, and most never have their markdown read.
#[derive(Clone, Debug)]
pub struct Built {
    pub report: Report,
    markdown: std::sync::OnceLock<String>,
}

impl Built {
    pub fn new(report: Report) -> Built {
        Built {
            report,
            markdown: std::sync::OnceLock::new(),
        }
    }

    /// `report` with the markdown it was rendered to earlier (read back from `report.md`).
    pub fn with_markdown(report: Report, markdown: String) -> Built {
        Built {
            report,
            markdown: std::sync::OnceLock::from(markdown),
        }
    }

    pub fn markdown(&self) -> &str {
        self.markdown.get_or_init(|| self.report.to_markdown())
    }
}

/// Who looks at the job's working directory for the files it wrote.
pub enum Look<'a> {
    /// This process, as itself (the daemon serving its own user).
    Here,
    /// A child process with the job owner's identity: a root daemon must not list a directory
    /// (or follow a symlink the job left in place of it) with root's permissions.
    As {
        exe: &'a Path,
        run_as: &'a crate::executor::RunAs,
    },
}

/// What the daemon watched of a job while it ran, for its report.
pub struct Watched<'a> {
    /// The monitor's summary of each GPU the job held.
    pub usage: &'a [JobGpuUsage],
    /// How often the GPU monitor sampled the job's GPUs (`None` where it did not watch them:
    /// a job run by Slurm).
    pub sample_interval: Option<Millis>,
    /// The job's mid-run alerts (every attempt's; the report lists this attempt's).
    pub alerts: &'a [crate::store::AlertRecord],
}

/// Builds the report of an ended job. `home` is baton's state directory (never listed as files
/// the job wrote, should the job run inside it).
pub fn build(
    job: &JobRecord,
    files: &JobFiles,
    gpus: &[GpuInfo],
    watched: Watched<'_>,
    home: &Path,
    look: Look<'_>,
) -> Built {
    let mut scanner = OutputScanner::new();
    scan(&mut scanner, Stream::Stdout, &files.stdout());
    scan(&mut scanner, Stream::Stderr, &files.stderr());
    let output = scanner.finish();
    // Read once: what the supervisor recorded of the attempt.
    let record = files.record();
    let attempt = job.attempt();
    let facts = JobFacts {
        id: job.id.0,
        name: job.name.clone(),
        state: job.state(),
        exit_code: job.exit_code(),
        signal: job.signal(),
        reason: job.reason().map(str::to_string),
        start_error: (attempt > 0)
            .then(|| record.start_error_of(attempt))
            .flatten(),
        command: job.command.clone(),
        cwd: job.cwd.clone(),
        gpus: job.gpus().to_vec(),
        request: job.request,
        scheduler_state: job.slurm_state().map(str::to_string),
        nodes: job.slurm_nodes().map(str::to_string),
        attempts: job.attempt(),
        max_attempts: job.retries + 1,
        submitted_at: job.submitted_at,
        started_at: job.started_at(),
        ended_at: job.ended_at().unwrap_or(job.submitted_at),
        time_limit: job.attempt_time_limit(),
        oom_killed: attempt > 0 && record.oom_killed(attempt),
        checkpoint_signalled: job
            .signal
            .filter(|_| {
                attempt > 0
                    && record
                        .exit_of(attempt)
                        .is_some_and(|e| e.checkpoint_signalled)
            })
            .map(|s| s.to_string()),
        memory_exceeded: attempt > 0
            && record
                .exit_of(attempt)
                .is_some_and(|e| e.memory_exceeded.is_some()),
        gpu_sample_interval_ms: watched.sample_interval,
        stdout_path: files.stdout().display().to_string(),
        stderr_path: files.stderr().display().to_string(),
        alerts: watched
            .alerts
            .iter()
            .filter(|a| a.attempt == job.attempt())
            .map(|a| baton_core::report::MidrunNote {
                detector: a.detector.as_str().to_string(),
                action: a.action.as_str().to_string(),
                seen_at: a.seen_at,
                evidence: a.evidence.clone(),
            })
            .collect(),
    };
    // The monitor's summary of each GPU the job held; a GPU it never sampled (a job shorter
    // than one sample interval) still says which it was and how big.
    let usage: Vec<GpuUsage> = job
        .gpus()
        .iter()
        .map(|&index| {
            let sampled = watched.usage.iter().find(|u| u.gpu == index);
            GpuUsage {
                index,
                samples: sampled.map_or(0, |u| u.samples),
                mean_util_pct: sampled.and_then(|u| u.mean_util),
                peak_util_pct: sampled.and_then(|u| u.peak_util),
                peak_mem_bytes: sampled.map(|u| u.mem_peak),
                total_mem_bytes: gpus
                    .iter()
                    .find(|g| g.index == index)
                    .map_or(0, |g| g.memory_total),
            }
        })
        .collect();
    let written = match job.started_at() {
        Some(started) if job.state() != JobState::Queued => {
            let ran = job
                .ended_at()
                .unwrap_or(started)
                .saturating_sub(started)
                .max(0) as u64;
            let budget = Duration::from_millis(ran / 100).clamp(WALK_TIME_MIN, WALK_TIME_MAX);
            match look {
                Look::Here => written_files(Path::new(&job.cwd), started, home, budget),
                Look::As { exe, run_as } => {
                    written_files_as(exe, run_as, &job.cwd, started, home, budget)
                }
            }
        }
        _ => Vec::new(),
    };
    Built::new(report::build(&facts, &output, &usage, &written))
}

/// Feeds the last `SCAN_LIMIT` bytes of one output file to the scanner.
fn scan(scanner: &mut OutputScanner, stream: Stream, path: &Path) {
    let Ok(mut file) = fs::File::open(path) else {
        return;
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > SCAN_LIMIT && file.seek(SeekFrom::Start(len - SCAN_LIMIT)).is_ok() {
        scanner.skipped(stream, len - SCAN_LIMIT);
    }
    // No bigger than the file (plus room to see it grew): most short jobs print little or
    // nothing, and a fresh 256 KiB buffer is a mapping made and unmapped per stream.
    let mut buf = vec![0u8; (len.min(256 << 10) as usize).max(4 << 10)];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => scanner.feed(stream, &buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

/// Files under `cwd` modified at or after `since`, newest first, from a walk bounded in entries,
/// depth and time that skips hidden directories, tool caches and baton's own state directory.
/// Breadth first, so a walk cut short has still seen the top of the tree, where runs write.
fn written_files(cwd: &Path, since: Millis, home: &Path, budget: Duration) -> Vec<FileChange> {
    let deadline = Instant::now() + budget;
    let mut out = Vec::new();
    let mut visited = 0;
    let mut queue = std::collections::VecDeque::from([(cwd.to_path_buf(), 0)]);
    while let Some((dir, depth)) = queue.pop_front() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > WALK_ENTRIES || (visited % 64 == 0 && Instant::now() > deadline) {
                return sorted(out);
            }
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if kind.is_dir() {
                let skip = name.starts_with('.') && name != "."
                    || SKIP_DIRS.contains(&name.as_ref())
                    || path == home;
                if !skip && depth + 1 < WALK_DEPTH {
                    queue.push_back((path, depth + 1));
                }
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let modified = millis(meta.modified().ok());
            if modified < since {
                continue;
            }
            let rel = path.strip_prefix(cwd).unwrap_or(&path);
            out.push(FileChange {
                path: rel.display().to_string(),
                bytes: meta.len(),
                modified_at: modified,
                created: meta
                    .created()
                    .ok()
                    .is_some_and(|c| millis(Some(c)) >= since),
            });
        }
    }
    sorted(out)
}

/// The walk done by `baton written-files` running as another user; nothing if it fails.
fn written_files_as(
    exe: &Path,
    run_as: &crate::executor::RunAs,
    cwd: &str,
    since: Millis,
    home: &Path,
    budget: Duration,
) -> Vec<FileChange> {
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("written-files")
        .arg(cwd)
        .arg(since.to_string())
        .arg(home)
        .arg(budget.as_millis().to_string())
        .env_clear()
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    crate::executor::run_as_user(&mut cmd, run_as);
    cmd.output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or_default()
}

/// `baton written-files CWD SINCE HOME BUDGET_MS`: the walk, for a daemon that must not do it
/// with its own permissions; prints the files as JSON.
pub fn written_files_command(args: &[String]) -> i32 {
    let [cwd, since, home, budget] = args else {
        return 2;
    };
    let (Ok(since), Ok(budget)) = (since.parse::<Millis>(), budget.parse::<u64>()) else {
        return 2;
    };
    let files = written_files(
        Path::new(cwd),
        since,
        Path::new(home),
        Duration::from_millis(budget),
    );
    println!("{}", serde_json::to_string(&files).expect("plain data"));
    0
}

fn sorted(mut files: Vec<FileChange>) -> Vec<FileChange> {
    files.sort_by(|a, b| {
        b.modified_at
            .cmp(&a.modified_at)
            .then_with(|| a.path.cmp(&b.path))
    });
    files
}

fn millis(t: Option<std::time::SystemTime>) -> Millis {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as Millis)
}

/// Writes `report.json` and, unless told not to, `report.md`, each whole or not at all
/// (temporary file, then rename), so a reader never sees half a report.
pub fn store(files: &JobFiles, built: &Built, with_markdown: bool) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(&built.report).map_err(io::Error::other)?;
    match write_whole(&files.report_json(), &json) {
        // A job cancelled before it ever started has no directory yet.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(&files.dir)?;
            write_whole(&files.report_json(), &json)?;
        }
        written => written?,
    }
    if with_markdown {
        write_whole(&files.report_md(), built.markdown().as_bytes())?;
    }
    Ok(())
}

/// Writes a file whole under a temporary name, then renames it: a reader sees the old file or
/// the new one, never half of one.
pub(crate) fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    // A temporary name of its own per write: two builders never write into one file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    fs::rename(&tmp, path)
}

/// Where the report's markdown is, written now from `built` if it was not (a sweep's run stores
/// `report.json` alone until someone asks for its report).
pub fn markdown_file(files: &JobFiles, built: &Built) -> PathBuf {
    let path = files.report_md();
    if !path.exists()
        && let Err(e) = write_whole(&path, built.markdown().as_bytes())
    {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
    path
}

/// The stored report's data alone, without its markdown, if it has been built.
pub fn load_report(files: &JobFiles) -> Option<Report> {
    serde_json::from_slice(&fs::read(files.report_json()).ok()?).ok()
}

/// The stored report, if it has been built. A sweep's run stores `report.json` alone; its
/// markdown is made from it, as it was when the report was built.
pub fn load(files: &JobFiles) -> Option<Built> {
    let report = load_report(files)?;
    Some(match fs::read_to_string(files.report_md()) {
        Ok(markdown) => Built::with_markdown(report, markdown),
        Err(_) => Built::new(report),
    })
}
