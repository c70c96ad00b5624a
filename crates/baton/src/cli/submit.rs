//! `baton submit [opts] -- CMD [ARGS...]`: queue a job. Prints its id alone on stdout (or the job
//! object with --json); a note for people and agents goes to stderr. Starts a user daemon in the
//! background if none is running.

use std::collections::BTreeMap;
use std::path::PathBuf;

use baton_core::units::{parse_duration, parse_size};

use super::{UsageError, print_json};
use crate::api::{JobView, SweepRequest, SweepRuns};
use crate::edge::connect::{self, client};
use crate::edge::present;
use crate::edge::request::{self, Job};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Whole GPUs to allocate (or GPUs to share, with --gpu-mem).
    #[arg(long, default_value_t = 0, value_name = "N")]
    gpus: u32,
    /// Memory needed on each GPU (e.g. 20GiB): lets small jobs share a GPU.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    gpu_mem: Option<u64>,
    /// Cores to reserve (default 1, or `[resources] default_cpus`): the job starts when they
    /// are free, and may be held to them (a cgroup's cpu.max, where the daemon has one).
    #[arg(long, value_name = "N")]
    cpus: Option<u32>,
    /// The machine's memory to reserve (e.g. 8GiB; default none): the job starts when it is
    /// free, and is killed if it uses more.
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    mem: Option<u64>,
    /// A name to show in the queue (default: the program's name).
    #[arg(long)]
    name: Option<String>,
    /// Higher runs first (default 0; negative allowed).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i64,
    /// Start only after these jobs succeed (a failure fails this job too).
    #[arg(long, value_delimiter = ',', value_name = "ID|NAME[,...]")]
    after: Vec<String>,
    /// Start after these jobs end, whatever their result.
    #[arg(long, value_delimiter = ',', value_name = "ID|NAME[,...]")]
    after_any: Vec<String>,
    /// Start only if these jobs do not succeed (a clean-up or a fallback; Slurm's afternotok).
    /// If one succeeds, this job ends `failed` without running.
    #[arg(long, value_delimiter = ',', value_name = "ID|NAME[,...]")]
    after_failed: Vec<String>,
    /// Start only after every earlier job of yours with the same name has ended (one at a time).
    #[arg(long)]
    singleton: bool,
    /// Start no earlier than TIME: now+2h, 14:00 (today, or tomorrow once passed), 2026-12-03,
    /// 2026-12-03T09:00 (local time) or RFC 3339 (2026-12-03T09:00:00Z).
    #[arg(long, value_name = "TIME")]
    begin: Option<String>,
    /// Queue it held: it does not start until `baton release ID`.
    #[arg(long)]
    hold: bool,
    /// Run it in reservation NAME (`baton reservations` lists them): it waits for the window,
    /// runs on the reservation's GPUs and is stopped at the window's end, as by a time limit.
    #[arg(long, value_name = "NAME")]
    reservation: Option<String>,
    /// Send signal SIG to every process of the job SECS seconds (default 60) before its time
    /// limit, so that it can save a checkpoint and exit, as Slurm's --signal: USR1, USR2@120,
    /// 10@30. Needs --time-limit (or a reservation, whose end is then the limit).
    #[arg(long, value_name = "SIG[@SECS]")]
    signal: Option<String>,
    /// A variable for the job, on top of this shell's environment (repeatable).
    #[arg(long = "env", value_parser = parse_env, value_name = "KEY=VALUE")]
    env: Vec<(String, String)>,
    /// A file the job reads as its stdin (default: /dev/null; what is piped into `baton submit`
    /// is not passed on).
    #[arg(long, value_name = "FILE")]
    stdin: Option<PathBuf>,
    /// End the job as failed, freeing its GPUs, when one of these mid-run detectors fires,
    /// instead of waking you and letting it run: nan (a NaN/inf loss), error (an error it
    /// outlives), stall (no output for long while its GPUs idle), finished-but-alive (it said
    /// it finished, then idles without exiting), slow (past twice what earlier runs of its
    /// command took, or its GPU memory climbing past what they held). Comma-separated or
    /// repeated.
    #[arg(long = "stop-on", value_delimiter = ',', value_name = "DETECTOR")]
    stop_on: Vec<String>,
    /// Wake you while it runs at the first line of its output matching REGEX (Rust regex
    /// syntax, e.g. 'Epoch \d+ done'), once. Repeatable.
    #[arg(long = "wake-on", value_name = "REGEX")]
    wake_on: Vec<String>,
    /// Wake you while it runs when a metric it prints first meets COND: METRIC OP NUMBER with
    /// OP one of >=, >, <=, <, == (e.g. 'val_acc>=0.9', 'epoch>=1'), once. Repeatable.
    #[arg(long = "wake-when", value_name = "COND")]
    wake_when: Vec<String>,
    /// Record, without waking you, when a metric it prints first meets COND (as --wake-when),
    /// or a line first matches /REGEX/: shown in its report. Repeatable.
    #[arg(long = "note-when", value_name = "COND")]
    note_when: Vec<String>,
    /// End the job as failed, freeing its GPUs, when a metric it prints first meets COND (as
    /// --wake-when), e.g. 'loss>10' (it diverged) or 'val_acc>=0.95' (good enough), or a line
    /// first matches /REGEX/; its end report then wakes you. Repeatable.
    #[arg(long = "stop-when", value_name = "COND")]
    stop_when: Vec<String>,
    /// Wake you this often while it runs with a short digest (how far it is, its ETA, its last
    /// line), e.g. 2h (at least the daemon's `[midrun] min_wake_every`, default 10m).
    #[arg(long = "wake-every", value_parser = parse_duration, value_name = "DUR")]
    wake_every: Option<i64>,
    /// Wall-clock limit, e.g. 90m, 2h, 1h30m, 01:30:00. The job ends `timeout` when it passes.
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    time_limit: Option<i64>,
    /// Run a failed job again up to N more times (as new attempts of the same job), waiting 1 s
    /// before the first retry and twice as long before each next one, at most 5 min (at most
    /// 100 retries; both set in config.toml's `[retries]`).
    #[arg(long, default_value_t = 0, value_name = "N")]
    retries: u32,
    /// A KEY=VALUE label, e.g. protect=true (repeatable).
    #[arg(long = "tag", value_parser = parse_tag, value_name = "KEY=VALUE")]
    tags: Vec<(String, String)>,
    /// Working directory for the job (default: the current directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Where to deliver the report when the job ends (repeatable): auto (default), claude,
    /// codex[:THREAD], tmux[:PANE], webhook:URL, slack:URL, telegram:URL?chat_id=ID,
    /// cmd:COMMAND, file:PATH.
    #[arg(long, value_name = "SPEC")]
    notify: Vec<String>,
    /// Run the command once per index, as one sweep: Slurm's `--array` syntax (0-99, 1-9:2, a
    /// list 1,3,5-7, and %K for at most K at once: 0-99%4). `{index}` in the command is the
    /// index; each run has BATON_ARRAY_INDEX (and SLURM_ARRAY_TASK_ID). Prints the sweep id.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["sweep", "sweep_file"])]
    array: Option<String>,
    /// Run the command once per combination of values, as one sweep (repeatable: the
    /// Cartesian product), e.g. `--sweep lr=1e-4,3e-4 --sweep bs=32,64 -- python train.py --lr
    /// {lr} --bs {bs}`. Each run has BATON_PARAM_<NAME>. Prints the sweep id.
    #[arg(long, value_name = "NAME=V1,V2,...", conflicts_with = "sweep_file")]
    sweep: Vec<String>,
    /// Run the command once per line of FILE, as one sweep: each line a JSON object of
    /// parameters, e.g. {"lr": 3e-4, "bs": 32}.
    #[arg(long, value_name = "FILE")]
    sweep_file: Option<PathBuf>,
    /// A sweep's runs at most K at once (as --array's %K).
    #[arg(long, value_name = "K")]
    max_parallel: Option<u32>,
    /// The metric a sweep's comparison ranks its runs by, e.g. val_acc or loss:min (default: a
    /// validation metric if the runs print one, else the loss).
    #[arg(long, value_name = "METRIC[:max|min]")]
    rank_by: Option<String>,
    /// Deliver each run's own report too, not only the sweep's one comparison.
    #[arg(long)]
    notify_each: bool,
    /// When a sweep is clearly broken (its first runs all fail the same way, or half of those
    /// that ended failed): `continue` (default; you are woken at once) or `stop` (the other
    /// runs are cancelled too).
    #[arg(long, value_name = "continue|stop")]
    on_failure: Option<String>,
    /// An idempotency key: submitting again with the same key (say, after a lost answer)
    /// returns the job the first submission queued instead of a second copy. Without it, one is
    /// made up, so that baton's own retries never queue a job twice.
    #[arg(long, value_name = "KEY")]
    request_id: Option<String>,
    /// The command and its arguments.
    // No `allow_hyphen_values`: it made a mistyped option before the command (`--gpu 2 -- cmd`)
    // the command itself. Options after the program's name are still the command's own
    // (`trailing_var_arg`), and after `--` anything goes.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// The jobs `--after` and its kin name: ids, or names and globs of your jobs (`--after
/// 'prep-*'`: after all of them).
fn after(refs: &[String]) -> anyhow::Result<Vec<u64>> {
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    // A submission starts the daemon when none runs; so does looking up what it runs after.
    Ok(crate::edge::connect::or_start_daemon(&client(), |c| {
        crate::edge::resolve::job_ids(c, refs, crate::edge::resolve::Takes::Many)
    })?)
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

fn parse_tag(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {text:?}")),
    }
}

/// Queues the job (or sweep); the only success is exit 0.
pub fn run(args: Args, json: bool) -> anyhow::Result<()> {
    let cwd = match args.cwd {
        Some(dir) => dir,
        None => std::env::current_dir()?,
    };
    let job = Job {
        command: args.command,
        name: args.name,
        gpus: args.gpus,
        gpu_mem: args.gpu_mem,
        cpus: args.cpus,
        mem: args.mem,
        priority: args.priority,
        after: after(&args.after)?,
        after_any: after(&args.after_any)?,
        after_failed: after(&args.after_failed)?,
        singleton: args.singleton,
        begin_at_ms: match &args.begin {
            Some(text) => Some(
                baton_core::begin::parse_begin(
                    text,
                    crate::clock::now_ms(),
                    crate::clock::local_offset,
                )
                .map_err(|e| UsageError(e.to_string()))?,
            ),
            None => None,
        },
        hold: args.hold,
        reservation: args.reservation.clone(),
        signal: args.signal.clone(),
        stdin: args.stdin.clone(),
        stop_on: args.stop_on.clone(),
        wake_on: args.wake_on,
        wake_when: args.wake_when,
        note_when: args.note_when,
        stop_when: args.stop_when,
        wake_every_ms: args.wake_every,
        time_limit_ms: args.time_limit,
        retries: args.retries,
        tags: args.tags.into_iter().collect::<BTreeMap<_, _>>(),
        notify: args.notify,
        request_id: args.request_id,
        cwd,
        env: args.env.into_iter().collect(),
    };
    if args.stdin.is_none()
        && let Some(what) = piped_stdin()
    {
        eprintln!(
            "baton: note: the job's stdin is /dev/null; the {what} on `baton submit`'s stdin is \
             not passed on (give the job a file with --stdin FILE)"
        );
    }
    let req = request::submit_request(job, request::agent_context())
        .map_err(|e| UsageError(e.to_string()))?;
    if let Some(runs) = sweep_runs(args.array, &args.sweep, args.sweep_file.as_deref())? {
        let req = SweepRequest {
            job: req,
            runs,
            max_parallel: args.max_parallel,
            rank_by: args.rank_by,
            notify_each: args.notify_each,
            on_failure: args.on_failure,
        };
        return send_sweep(&req, json);
    }
    let only_for_sweeps = [
        ("--max-parallel", args.max_parallel.is_some()),
        ("--rank-by", args.rank_by.is_some()),
        ("--notify-each", args.notify_each),
        ("--on-failure", args.on_failure.is_some()),
    ];
    if let Some((flag, _)) = only_for_sweeps.iter().find(|(_, given)| *given) {
        return Err(UsageError(format!(
            "{flag} is for sweeps: add --array, --sweep or --sweep-file"
        ))
        .into());
    }
    let job = connect::submit(&client(), &req)?;
    if json {
        print_json(&job);
    } else {
        println!("{}", job.id);
    }
    eprintln!("{}", note(&job));
    Ok(())
}

/// Queues a sweep (starting the user's daemon if none runs) and prints its id (`--json`: the
/// sweep), with a note on stderr: what `baton submit --array/--sweep/--sweep-file` and `baton
/// sweep submit FILE` print alike. The request carries a request id (the caller's, else one
/// made up), so that a lost answer never queues the sweep twice.
pub(super) fn send_sweep(req: &SweepRequest, json: bool) -> anyhow::Result<()> {
    let sweep = connect::submit_sweep(&client(), req)?;
    if json {
        print_json(&sweep);
    } else {
        println!("{}", sweep.id);
    }
    eprintln!("{}", sweep_note(&sweep));
    Ok(())
}

/// The largest `--sweep-file` read: far above any list of runs written by hand or script
/// (10,000 runs of a few parameters fit in a tenth of it), well inside the daemon's body limit.
const MAX_SWEEP_FILE_BYTES: u64 = baton_core::sweep::file::MAX_FILE_BYTES as u64;

/// The runs `--array`, `--sweep` or `--sweep-file` asked for, if any; a file is read and
/// checked here, with line and column. How many runs a sweep may have is the daemon's to say.
fn sweep_runs(
    array: Option<String>,
    sweeps: &[String],
    file: Option<&std::path::Path>,
) -> anyhow::Result<Option<SweepRuns>> {
    let usage = |e: baton_core::sweep::SweepError| UsageError(e.to_string());
    if let Some(spec) = array {
        // Read here too, so a typo exits 2 before the daemon is asked.
        baton_core::sweep::parse_array(&spec, u64::MAX).map_err(usage)?;
        return Ok(Some(SweepRuns::Array { spec }));
    }
    if !sweeps.is_empty() {
        let mut axes = Vec::with_capacity(sweeps.len());
        for flag in sweeps {
            axes.push(baton_core::sweep::parse_sweep_flag(flag).map_err(usage)?);
        }
        return Ok(Some(SweepRuns::Grid { axes }));
    }
    let Some(path) = file else {
        return Ok(None);
    };
    let source = path.display().to_string();
    let size = std::fs::metadata(path)
        .map_err(|e| UsageError(format!("--sweep-file {source}: {e}")))?
        .len();
    if size > MAX_SWEEP_FILE_BYTES {
        return Err(UsageError(format!(
            "--sweep-file {source} is {}, more than the {} a sweep file may be",
            baton_core::units::format_size(size),
            baton_core::units::format_size(MAX_SWEEP_FILE_BYTES)
        ))
        .into());
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("--sweep-file {source}: {e}")))?;
    let runs = baton_core::sweep::parse_runs_file(&text, &source, u64::MAX).map_err(usage)?;
    Ok(Some(SweepRuns::Runs { source, runs }))
}

/// The note on stderr for a sweep: what was queued, and what will happen when its last run
/// ends (one comparison report, and whether it wakes the agent).
fn sweep_note(sweep: &crate::api::SweepView) -> String {
    let (first, last) = (
        sweep.jobs.first().copied().unwrap_or(0),
        sweep.jobs.last().copied().unwrap_or(0),
    );
    format!(
        "baton: {}\nbaton: {}",
        present::sweep_queued(sweep, first, last),
        present::sweep_delivery_note(sweep),
    )
}

/// What this process's stdin is, when it is something a user may have meant for the job: a
/// pipe or a file (not a terminal, not /dev/null, not closed).
fn piped_stdin() -> Option<&'static str> {
    let stat = rustix::fs::fstat(std::io::stdin()).ok()?;
    match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
        rustix::fs::FileType::Fifo => Some("pipe"),
        rustix::fs::FileType::RegularFile => Some("file"),
        rustix::fs::FileType::Socket => Some("socket"),
        _ => None,
    }
}

/// The note on stderr: where the job stands in the queue, and what will happen when it ends:
/// that its report wakes the agent by itself (it can stop and need not poll), or that nothing
/// will, and what to do instead.
fn note(job: &JobView) -> String {
    format!(
        "baton: {}\nbaton: {}",
        present::job_queued(job, &present::standing(job)),
        present::delivery_note(job, true),
    )
}
