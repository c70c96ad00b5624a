//! The stacks of a stalled job's Python processes, for its stall alert: its processes are its
//! cgroup's, or the ones below the supervisor of that attempt alone (a child subreaper, so
//! whatever the job starts stays there, `executor::attempt_processes`), the
//! Python ones are told by their executable, and each is read with `py-spy dump`, a few at
//! most, all within a time limit. py-spy is looked up where the daemon's own user would run
//! it; what it prints is stored whole beside the alert and quoted fenced, as untrusted program
//! state, and never reaches a shell.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use baton_core::midrun::Stacks;

use crate::executor::{JobFiles, RunAs};

/// The most Python processes of one job read (a job with many dataloader workers is told by
/// its first few).
const MAX_PROCESSES: usize = 4;
/// How long reading all of them may take.
const TIME_LIMIT: Duration = Duration::from_secs(10);
/// The most of one process's dump kept.
const MAX_DUMP_BYTES: usize = 64 << 10;

/// Where the stall alert's stacks are stored: beside its message.
pub fn stored_at(alert_file: &Path) -> PathBuf {
    alert_file.with_extension("stacks.txt")
}

/// The stacks of attempt `attempt`'s Python processes (`None`: it runs none, or its processes
/// are not known), with py-spy as `setting` names it: a path, or a name looked up in the
/// daemon's PATH and then in `job_path` (the job's own PATH, given only to a user's own daemon:
/// a shared daemon runs as root and must not run what a user's PATH names). The whole dump is
/// stored at `store_at`. With `run_as` (a shared daemon's job of another user) py-spy runs as
/// the job's owner: a root daemon never reads a user's process memory as root, since a parser
/// fed memory its owner controls must not hold root's rights.
pub fn read(
    files: &JobFiles,
    attempt: u32,
    setting: &str,
    job_path: Option<&str>,
    run_as: Option<&RunAs>,
    store_at: &Path,
) -> Option<Stacks> {
    let pythons: Vec<u32> = crate::executor::attempt_processes(files, attempt)?
        .into_iter()
        .filter(|&pid| is_python(pid))
        .take(MAX_PROCESSES)
        .collect();
    if pythons.is_empty() {
        return None;
    }
    let Some(py_spy) = find(setting, job_path) else {
        return Some(Stacks::NoPySpy);
    };
    let deadline = Instant::now() + TIME_LIMIT;
    let mut dumps = Vec::new();
    let mut failures = Vec::new();
    for pid in pythons {
        match dump(&py_spy, pid, run_as, deadline) {
            Ok(text) => dumps.push(text),
            Err(why) => failures.push(format!("pid {pid}: {why}")),
        }
    }
    if dumps.is_empty() {
        return Some(Stacks::Failed(failures.join("; ")));
    }
    let mut text = dumps.join("\n");
    for failure in &failures {
        text.push_str(&format!("\n(py-spy could not read {failure})\n"));
    }
    if let Err(e) = crate::report::write_whole(store_at, text.as_bytes()) {
        tracing::warn!("cannot store the stacks in {}: {e}", store_at.display());
    }
    Some(Stacks::Dumped {
        text,
        path: store_at.display().to_string(),
    })
}

/// Whether `pid` runs a Python interpreter (CPython or PyPy), by its executable's name.
fn is_python(pid: u32) -> bool {
    let Ok(exe) = std::fs::read_link(format!("/proc/{pid}/exe")) else {
        return false;
    };
    exe.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("python") || n.starts_with("pypy"))
}

/// py-spy as `setting` names it: a path as given, or a name found in the daemon's PATH, then
/// in `job_path`. Empty: not looked for.
fn find(setting: &str, job_path: Option<&str>) -> Option<PathBuf> {
    if setting.is_empty() {
        return None;
    }
    if setting.contains('/') {
        let path = PathBuf::from(setting);
        return is_executable(&path).then_some(path);
    }
    let own = std::env::var("PATH").unwrap_or_default();
    [own.as_str(), job_path.unwrap_or("")]
        .iter()
        .flat_map(|path| path.split(':'))
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join(setting))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `py-spy dump --pid PID` (as `run_as`, if given), killed if it runs past `deadline`.
fn dump(
    py_spy: &Path,
    pid: u32,
    run_as: Option<&RunAs>,
    deadline: Instant,
) -> Result<String, String> {
    let mut cmd = Command::new(py_spy);
    cmd.args(["dump", "--pid", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(run_as) = run_as {
        crate::executor::run_as_user(&mut cmd, run_as);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", py_spy.display()))?;
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    // Read on their own thread, so a dump larger than a pipe's buffer cannot block py-spy, and
    // the wait below can give up on time.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut err = Vec::new();
        if let Some(s) = stdout.as_mut() {
            let _ = s.take(MAX_DUMP_BYTES as u64).read_to_end(&mut out);
            // The rest is not kept, but read, or py-spy would block on a full pipe.
            let _ = std::io::copy(s, &mut std::io::sink());
        }
        if let Some(s) = stderr.as_mut() {
            let _ = s.take(4096).read_to_end(&mut err);
        }
        let _ = tx.send((out, err));
    });
    let wait = deadline.saturating_duration_since(Instant::now());
    let Ok((out, err)) = rx.recv_timeout(wait) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("py-spy took longer than {}s", TIME_LIMIT.as_secs()));
    };
    let status = child.wait().map_err(|e| e.to_string())?;
    if status.success() && !out.is_empty() {
        return Ok(String::from_utf8_lossy(&out).into_owned());
    }
    let err = String::from_utf8_lossy(&err);
    let why = err
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("it printed nothing");
    Err(format!("py-spy failed ({status}): {why}"))
}
