//! Holding a job to the cores and memory it reserved (`--cpus`, `--mem`).
//!
//! Where the daemon's cgroup delegates the `memory` and `cpu` controllers (systemd's
//! `Delegate=yes`, or root on a machine whose cgroup tree allows it), the job's cgroup gets
//! `memory.max` (and no swap) and `cpu.max`, and the kernel enforces them; a job killed by its
//! own cgroup's OOM killer shows in the cgroup's `memory.events`. Elsewhere the supervisor
//! watches the memory of the job's processes, their proportional set size (so pages that
//! forked workers share count once), and kills them all when it passes the reservation, as
//! Slurm's `OverMemoryKill` does. Cores are not capped without a cgroup: the job is told how
//! many it has (`BATON_CPUS`).

use std::fs;
use std::path::Path;
use std::time::Duration;

/// How often the supervisor looks at a job's memory when no cgroup enforces it.
pub const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// Which limits the kernel enforces for one job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Enforced {
    pub memory: bool,
    pub cpu: bool,
}

/// Writes the job's limits into its cgroup `dir`, where the controllers are there to take them.
pub fn apply(dir: &Path, cpus: u32, mem: Option<u64>) -> Enforced {
    let mut enforced = Enforced::default();
    // Only files the controllers made: written elsewhere they would be plain files, enforcing
    // nothing.
    if let Some(mem) = mem
        && dir.join("memory.max").exists()
        && fs::write(dir.join("memory.max"), mem.to_string()).is_ok()
    {
        // Swapping past the limit would only make the job slow instead of stopped.
        let _ = fs::write(dir.join("memory.swap.max"), "0");
        enforced.memory = true;
    }
    if cpus > 0 && dir.join("cpu.max").exists() {
        enforced.cpu = fs::write(dir.join("cpu.max"), cpu_max(cpus)).is_ok();
    }
    enforced
}

/// `cpu.max` for `cpus` cores: that many periods of run time per period.
fn cpu_max(cpus: u32) -> String {
    const PERIOD_US: u64 = 100_000;
    format!("{} {PERIOD_US}", u64::from(cpus) * PERIOD_US)
}

/// Whether the OOM killer of cgroup `dir` (its `memory.max`) killed a process of it.
pub fn oom_killed_in(dir: &Path) -> bool {
    oom_kills_in(dir).is_some_and(|n| n > 0)
}

/// How many processes of cgroup `dir` any OOM killer (its own `memory.max`'s or the machine's)
/// has killed: `oom_kill` in its `memory.events`, which the memory controller keeps; `None`
/// where the controller is not there.
pub fn oom_kills_in(dir: &Path) -> Option<u64> {
    let events = fs::read_to_string(dir.join("memory.events")).ok()?;
    events
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// The memory the processes `pids` use together, in bytes: the sum of their proportional set
/// sizes, or of their resident sets where the kernel gives no `smaps_rollup`.
pub fn memory_in_use(pids: &[i32]) -> u64 {
    pids.iter().filter_map(|&pid| memory_of(pid)).sum()
}

fn memory_of(pid: i32) -> Option<u64> {
    if let Ok(rollup) = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")) {
        return field_kib(&rollup, "Pss:").map(|kib| kib * 1024);
    }
    let statm = fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the running kernel.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).unwrap_or(4096))
}

/// The value of a `Name:   1234 kB` line.
fn field_kib(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_gives_a_period_per_core() {
        assert_eq!(cpu_max(1), "100000 100000");
        assert_eq!(cpu_max(4), "400000 100000");
    }

    #[test]
    fn rollup_fields_are_read_in_kib() {
        let text = "00400000-7ffd [rollup]\nRss:     2048 kB\nPss:      1024 kB\n";
        assert_eq!(field_kib(text, "Pss:"), Some(1024));
        assert_eq!(field_kib(text, "Swap:"), None);
    }

    #[test]
    fn this_process_uses_some_memory() {
        let used = memory_in_use(&[std::process::id() as i32]);
        assert!(used > 1 << 20, "{used}");
        assert_eq!(
            memory_in_use(&[i32::MAX]),
            0,
            "a process that is gone uses none"
        );
    }

    #[test]
    fn a_directory_without_the_controllers_enforces_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(apply(dir.path(), 2, Some(1 << 30)), Enforced::default());
        assert!(!dir.path().join("memory.max").exists());
    }

    #[test]
    fn a_cgroup_with_the_controllers_gets_the_limits() {
        // The files a cgroup with the memory and cpu controllers has.
        let dir = tempfile::tempdir().unwrap();
        for f in ["memory.max", "memory.swap.max", "cpu.max"] {
            fs::write(dir.path().join(f), "max").unwrap();
        }
        let enforced = apply(dir.path(), 3, Some(8 << 30));
        assert_eq!(
            enforced,
            Enforced {
                memory: true,
                cpu: true
            }
        );
        let read = |f: &str| fs::read_to_string(dir.path().join(f)).unwrap();
        assert_eq!(read("memory.max"), (8u64 << 30).to_string());
        assert_eq!(read("memory.swap.max"), "0");
        assert_eq!(read("cpu.max"), "300000 100000");
        // No --mem: memory is left alone, cores still capped.
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("memory.max"), "max").unwrap();
        fs::write(dir.path().join("cpu.max"), "max").unwrap();
        assert_eq!(
            apply(dir.path(), 1, None),
            Enforced {
                memory: false,
                cpu: true
            }
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("memory.max")).unwrap(),
            "max"
        );
    }

    #[test]
    fn a_cgroup_without_an_oom_kill_says_so() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!oom_killed_in(dir.path()));
        // No memory controller, no count of its own: the machine's is used instead.
        assert_eq!(oom_kills_in(dir.path()), None);
        fs::write(
            dir.path().join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n",
        )
        .unwrap();
        assert!(!oom_killed_in(dir.path()));
        assert_eq!(oom_kills_in(dir.path()), Some(0));
        fs::write(dir.path().join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        assert!(oom_killed_in(dir.path()));
        assert_eq!(oom_kills_in(dir.path()), Some(1));
    }
}
