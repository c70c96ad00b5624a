//! Containment: finding and ending every process a job started, whatever it did to its session
//! or process group (`setsid`, double forks, `nohup … &`, a dataloader server, a `torchrun`
//! agent). Two ways, the best one available first:
//!
//! - **A cgroup v2 per attempt**, made by the daemon below its own cgroup where it may (as root,
//!   or in a subtree systemd delegated to it). The job's first process enters it before `exec`,
//!   so every process the job ever starts is born inside, and none can leave it without write
//!   access to a cgroup above (which a job run as its submitter never has). `cgroup.kill` ends
//!   them all at once, and `cgroup.events` says when the last one is gone.
//! - **The supervisor as child subreaper** (`PR_SET_CHILD_SUBREAPER`) everywhere else: an orphan
//!   is reparented to the supervisor instead of init, so every descendant stays below it and is
//!   found through /proc. The supervisor is a subreaper in both cases, which also lets it reap
//!   what its job orphaned.
//!
//! Either way a job's GPUs are released only when its last process is gone, like Slurm's
//! COMPLETING state: what is left when the main process exits gets SIGTERM, the grace period,
//! then SIGKILL (`end_all`). When the supervisor itself dies (`kill -9`), the daemon ends what it
//! left: the cgroup, or, without one, every process that carries the attempt's `BATON_JOB_KEY`
//! and the job's process group (`Marked`).

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal, pidfd_open, pidfd_send_signal};
use serde::{Deserialize, Serialize};

/// The variable that names one attempt of one job of one daemon, machine-wide
/// (`<daemon tag>.<job>.<attempt>`): how the daemon finds the processes of an attempt whose
/// supervisor died, where no cgroup holds them.
pub const KEY_VAR: &str = "BATON_JOB_KEY";

/// How the daemon may contain jobs (`[daemon] containment` in config.toml).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Setting {
    /// A cgroup per attempt where one can be made, else the subreaper.
    #[default]
    Auto,
    /// A cgroup per attempt, or the daemon refuses to start.
    Cgroup,
    /// Never cgroups: the supervisor as child subreaper.
    Subreaper,
}

/// How this daemon contains its jobs, decided once at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Method {
    /// Each attempt gets a cgroup below `root`, the daemon's own directory for them.
    Cgroup { root: PathBuf },
    /// The supervisor as child subreaper; `why` says why there are no cgroups.
    Subreaper { why: String },
}

impl Method {
    /// Chooses the method for a daemon whose jobs' cgroups would be named after `tag`.
    pub fn detect(setting: Setting, tag: &str) -> Result<Method, String> {
        if setting == Setting::Subreaper {
            return Ok(Method::Subreaper {
                why: "containment = \"subreaper\" in config.toml".into(),
            });
        }
        match cgroup_root(tag) {
            Ok(root) => Ok(Method::Cgroup { root }),
            Err(why) if setting == Setting::Auto => Ok(Method::Subreaper { why }),
            Err(why) => Err(format!("containment = \"cgroup\", but {why}")),
        }
    }

    /// One line for logs and `baton info`.
    pub fn describe(&self) -> String {
        match self {
            Method::Cgroup { root } => format!("a cgroup v2 per job, under {}", root.display()),
            Method::Subreaper { why } => {
                format!("the supervisor as child subreaper (no cgroup: {why})")
            }
        }
    }

    /// Prepares the containment of one attempt: its cgroup, made now, or none (the subreaper).
    /// Returns the cgroup and the sentence the job's events record. A cgroup that cannot be made
    /// leaves that attempt to the subreaper, and the sentence says so.
    pub fn prepare(&self, job: u64, attempt: u32) -> (Option<PathBuf>, String) {
        let subreaper = "by its supervisor as child subreaper; the processes of its attempt are \
                         found by BATON_JOB_KEY should the supervisor die";
        match self {
            Method::Cgroup { root } => {
                let dir = root.join(format!("{job}.{attempt}"));
                match fs::create_dir(&dir) {
                    Ok(()) => {}
                    // Left by a launch that never started (the daemon died in between): unused.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !populated(&dir) => {}
                    Err(e) => {
                        return (
                            None,
                            format!("{subreaper} (cannot make cgroup {}: {e})", dir.display()),
                        );
                    }
                }
                let text = format!("in cgroup {}", dir.display());
                (Some(dir), text)
            }
            Method::Subreaper { why } => (None, format!("{subreaper} (no cgroup: {why})")),
        }
    }

    /// Removes the daemon's cgroup directory, if no job's cgroup is left in it.
    pub fn tidy(&self) {
        if let Method::Cgroup { root } = self {
            let _ = fs::remove_dir(root);
        }
    }
}

/// Where this daemon's jobs' cgroups go: `baton-<tag>` beside the daemon in its own cgroup v2,
/// if the daemon may make cgroups there and move processes into them.
fn cgroup_root(tag: &str) -> Result<PathBuf, String> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mount = cgroup2_mount(&mountinfo).ok_or("no cgroup v2 file system is mounted")?;
    let own = fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2")?;
    let parent = mount.join(own.trim().trim_start_matches('/'));
    // Moving the job's first process from the supervisor's cgroup (this one) into its own
    // needs write access to the procs file of both.
    let procs = parent.join("cgroup.procs");
    rustix::fs::access(&procs, rustix::fs::Access::WRITE_OK)
        .map_err(|e| format!("{} is not writable ({e})", procs.display()))?;
    let root = parent.join(format!("baton-{tag}"));
    match fs::create_dir(&root) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", root.display())),
    }
    // The jobs' cgroups hold them to their cores and memory where these controllers reach
    // this far down (see `limits`); each is asked for alone, so one missing keeps the other.
    for controller in ["+memory", "+cpu"] {
        let _ = fs::write(root.join("cgroup.subtree_control"), controller);
    }
    Ok(root)
}

/// The mount point of the cgroup v2 file system, from /proc/self/mountinfo (`… MOUNT … - cgroup2
/// …`: the fifth field, and the type after the separator).
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_whitespace().next()? == "cgroup2")
            .then(|| before.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// Whether a cgroup still has a live process (`populated 1` in `cgroup.events`). A cgroup that
/// cannot be read (gone) has none.
pub fn populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|l| l.trim() == "populated 1"))
}

/// The live processes of one attempt, whichever way they are contained.
pub trait Processes {
    /// Whether any is left.
    fn any_left(&self) -> bool;
    /// Sends `sig` to every one of them.
    fn signal(&self, sig: Signal);
    /// Their pids, as of now.
    fn pids(&self) -> Vec<i32>;
    /// Kills every one of them.
    fn kill(&self) {
        self.signal(Signal::KILL);
    }
}

/// Ends every process of an attempt: SIGTERM (unless `kill_at` says a stop is already under
/// way), then SIGKILL at `kill_at` or after `grace`, and returns once none is left. A process
/// stuck in the kernel can outlive SIGKILL for a while: after 10 s more it is given up on,
/// and `false` says some were left.
pub fn end_all(procs: &dyn Processes, grace: Duration, kill_at: Option<Instant>) -> bool {
    if !procs.any_left() {
        return true;
    }
    let kill_at = kill_at.unwrap_or_else(|| {
        procs.signal(Signal::TERM);
        Instant::now() + grace
    });
    if wait_until_gone(procs, kill_at) {
        return true;
    }
    procs.kill();
    wait_until_gone(procs, Instant::now() + Duration::from_secs(10))
}

/// Looks until none is left or `until` passes. There is no event for "the last process of a
/// group is gone", so this polls, briefly, and only while processes are being ended.
fn wait_until_gone(procs: &dyn Processes, until: Instant) -> bool {
    let mut pause = Duration::from_millis(5);
    loop {
        if !procs.any_left() {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep(pause.min(until - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The processes in one cgroup.
pub struct Cgroup {
    pub dir: PathBuf,
}

impl Cgroup {
    /// Removes the (empty) cgroup; one that still holds a process stays.
    pub fn remove(&self) -> bool {
        fs::remove_dir(&self.dir).is_ok() || !self.dir.exists()
    }
}

impl Processes for Cgroup {
    fn any_left(&self) -> bool {
        populated(&self.dir)
    }

    fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    fn signal(&self, sig: Signal) {
        for pid in self.pids() {
            // Through a pidfd taken while the process is still the cgroup's: a pid read from
            // `cgroup.procs` that was reused meanwhile names a process of another cgroup.
            if let Some(fd) = pidfd(pid)
                && in_cgroup(pid, &self.dir)
            {
                let _ = pidfd_send_signal(&fd, sig);
            }
        }
    }

    fn kill(&self) {
        // Linux 5.14+: every process at once, including ones forked while we look.
        if fs::write(self.dir.join("cgroup.kill"), "1").is_err() {
            self.signal(Signal::KILL);
        }
    }
}

/// Whether `/proc/PID/cgroup` puts the process in `dir` (its path there is relative to the
/// cgroup file system's mount point, which `dir` ends with).
fn in_cgroup(pid: i32, dir: &Path) -> bool {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("0::"))
        .any(|path| {
            let path = path.trim().trim_start_matches('/');
            !path.is_empty() && dir.ends_with(path)
        })
}

/// The descendants of this process, which is a child subreaper: every process the job started
/// is below it, however it detached itself.
pub struct Descendants;

impl Descendants {
    /// Makes this process a child subreaper.
    pub fn become_subreaper() -> io::Result<()> {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(Into::into)
    }

    /// Reaps children that have exited, except `keep` (the job's main process, whose status
    /// the supervisor waits for itself). Stops at the first exited child it must keep.
    pub fn reap_except(keep: Option<i32>) {
        loop {
            let Some(pid) = exited_child(keep.is_some()) else {
                return;
            };
            if Some(pid) == keep {
                return;
            }
            // SAFETY: plain waitpid on a child known to have exited.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        }
    }
}

/// The pid of a child that has exited (reaped unless `peek`), if any.
fn exited_child(peek: bool) -> Option<i32> {
    // SAFETY: waitid on our own children with a zeroed siginfo it fills in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let mut flags = libc::WEXITED | libc::WNOHANG;
    if peek {
        flags |= libc::WNOWAIT;
    }
    let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, flags) };
    // SAFETY: si_pid is set by waitid (0 when no child has exited).
    let pid = unsafe { info.si_pid() };
    (rc == 0 && pid > 0).then_some(pid)
}

impl Processes for Descendants {
    fn any_left(&self) -> bool {
        Descendants::reap_except(None);
        // With no child left there is no descendant either: an orphan comes back to us.
        // SAFETY: as above; WNOWAIT leaves any exited child in place.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        rc == 0
    }

    fn signal(&self, sig: Signal) {
        for p in Descendants::below_me() {
            signal_checked(p.pid, p.start, sig);
        }
    }

    fn pids(&self) -> Vec<i32> {
        Descendants::below_me().iter().map(|p| p.pid).collect()
    }
}

impl Descendants {
    /// Every live process below this one.
    fn below_me() -> Vec<ProcessEntry> {
        let me = std::process::id() as i32;
        let table = process_table();
        let mut below = vec![me];
        let mut i = 0;
        while i < below.len() {
            let parent = below[i];
            below.extend(table.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
            i += 1;
        }
        table
            .into_iter()
            .filter(|p| p.pid != me && below.contains(&p.pid))
            .collect()
    }
}

/// An attempt's processes as the daemon finds them when the supervisor is gone and no cgroup
/// holds them: those whose environment carries the attempt's key, and its process group.
pub struct Marked {
    /// `BATON_JOB_KEY=<key>` as it appears in /proc/PID/environ.
    needle: Vec<u8>,
    /// The job's process group and its leader's start time, when recorded.
    group: Option<(i32, u64)>,
}

impl Marked {
    pub fn new(key: &str, group: Option<(i32, u64)>) -> Marked {
        Marked {
            needle: format!("{KEY_VAR}={key}").into_bytes(),
            group,
        }
    }

    fn carries_key(&self, pid: i32) -> bool {
        fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == self.needle))
    }

    fn found(&self) -> Vec<ProcessEntry> {
        process_table()
            .into_iter()
            .filter(|p| p.pid != std::process::id() as i32 && self.carries_key(p.pid))
            .collect()
    }

    fn group_alive(&self) -> Option<i32> {
        let (pgid, started) = self.group?;
        (super::process_start_time(pgid) == Some(started)).then_some(pgid)
    }
}

impl Processes for Marked {
    fn any_left(&self) -> bool {
        self.group_alive().is_some() || !self.found().is_empty()
    }

    fn pids(&self) -> Vec<i32> {
        self.found().iter().map(|p| p.pid).collect()
    }

    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.group_alive() {
            super::kill_group(pgid, sig);
        }
        for p in self.found() {
            // The key is checked again through the pidfd's process: a pid that was reused
            // between the look and the signal carries no key.
            if let Some(fd) = pidfd(p.pid)
                && self.carries_key(p.pid)
            {
                let _ = pidfd_send_signal(&fd, sig);
            }
        }
    }
}

/// One process as /proc/PID/stat gives it.
struct ProcessEntry {
    pid: i32,
    ppid: i32,
    /// Start time in clock ticks since boot: with the pid, names the process for good.
    start: u64,
}

/// Every process on the machine (that /proc shows), with its parent and start time. Live ones
/// only: a zombie holds nothing and cannot be signalled anyway.
fn process_table() -> Vec<ProcessEntry> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) may hold spaces and parentheses: skip past its last ')'.
        let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
        if rest.first() == Some(&"Z") {
            return None;
        }
        Some(ProcessEntry {
            pid,
            ppid: rest.get(1)?.parse().ok()?,
            start: rest.get(19)?.parse().ok()?,
        })
    })
    .collect()
}

/// Signals `pid` only if it is still the process that started at `start`.
fn signal_checked(pid: i32, start: u64, sig: Signal) {
    if let Some(fd) = pidfd(pid)
        && super::process_start_time(pid) == Some(start)
    {
        let _ = pidfd_send_signal(&fd, sig);
    }
}

fn pidfd(pid: i32) -> Option<OwnedFd> {
    pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_in_mountinfo() {
        let hybrid = "29 23 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      35 29 0:30 / /sys/fs/cgroup/unified rw,nosuid,nodev - cgroup2 cgroup2 rw\n\
                      36 29 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let unified =
            "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            cgroup2_mount(unified),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            cgroup2_mount("36 29 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw\n"),
            None
        );
    }

    #[test]
    fn subreaper_is_a_setting_and_says_so() {
        let m = Method::detect(Setting::Subreaper, "t").unwrap();
        assert!(m.describe().contains("subreaper"), "{}", m.describe());
        let (cgroup, text) = m.prepare(7, 1);
        assert_eq!(cgroup, None);
        assert!(text.contains("BATON_JOB_KEY"), "{text}");
    }

    #[test]
    fn marked_processes_are_found_by_their_key_alone() {
        let key = format!("test.{}.1", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(KEY_VAR, &key)
            .spawn()
            .unwrap();
        let other = std::process::Command::new("sleep")
            .arg("30")
            .env(KEY_VAR, format!("{key}0"))
            .spawn()
            .unwrap();
        // The environment is the exec's: wait until sleep has replaced the forked copy of us.
        let marked = Marked::new(&key, None);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !marked.carries_key(child.id() as i32) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(marked.any_left());
        assert!(end_all(&marked, Duration::from_secs(5), None));
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        // A process with a longer key that starts with this one is someone else's.
        let mut other = other;
        assert!(other.try_wait().unwrap().is_none(), "another key was hit");
        let _ = other.kill();
        let _ = other.wait();
    }
}
