//! Which baton job a GPU process belongs to: the `BATON_JOB_ID` in its environment, or in its
//! nearest ancestor's. Every job is started with that variable, and children inherit it, so a
//! data-loader worker or a `torchrun` rank is found through its own environment or its parent's.
//! A process whose environment cannot be read (another user's, for a daemon that is not root)
//! counts as belonging to no job.

use std::fs;

use baton_core::JobId;

/// How far up the process tree to look before giving up.
const MAX_DEPTH: usize = 32;

/// What /proc says about a GPU process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessFacts {
    pub pid: u32,
    /// Its real user id, when readable.
    pub uid: Option<u32>,
    /// The job found in its environment or an ancestor's, and that job's attempt
    /// (`BATON_ATTEMPT`) as the process knew it. A claim only: the monitor accepts it when
    /// the process's user owns that job.
    pub job: Option<JobId>,
    pub attempt: Option<u32>,
    /// Its start time in clock ticks since boot: with the pid, it names the process for good
    /// (a pid is reused; a pid and a start time are not), so a signal never hits a newcomer.
    pub start_time: Option<u64>,
}

/// Looks `pid` up in /proc.
pub fn facts(pid: u32) -> ProcessFacts {
    let (mut job, mut attempt) = (None, None);
    let mut at = pid;
    for _ in 0..MAX_DEPTH {
        if let Some((found, a)) = job_in_environ(at) {
            (job, attempt) = (Some(found), a);
            break;
        }
        match crate::procinfo::parent(at) {
            Some(p) if p > 1 && p != at => at = p,
            _ => break,
        }
    }
    ProcessFacts {
        pid,
        uid: uid(pid),
        job,
        attempt,
        start_time: crate::executor::process_start_time(pid as i32),
    }
}

/// `BATON_JOB_ID` (and `BATON_ATTEMPT`) in the process's environment (as it was at exec).
fn job_in_environ(pid: u32) -> Option<(JobId, Option<u32>)> {
    let environ = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let var = |name: &[u8]| {
        environ.split(|&b| b == 0).find_map(|v| {
            let value = v.strip_prefix(name)?;
            std::str::from_utf8(value).ok()?.parse::<u64>().ok()
        })
    };
    let job = var(b"BATON_JOB_ID=")?;
    Some((JobId(job), var(b"BATON_ATTEMPT=").map(|a| a as u32)))
}

/// The real uid, from `/proc/PID/status`.
fn uid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn a_child_is_found_through_its_parents_environment() {
        // A shell with BATON_JOB_ID starts a child that clears its environment: the child's
        // own environ has no id, its parent's does.
        let mut shell = Command::new("sh")
            .args(["-c", "env -i sleep 30 & echo $!; wait"])
            .env("BATON_JOB_ID", "4242")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(shell.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        let child: u32 = line.trim().parse().unwrap();
        // `env -i` execs sleep: wait until that exec has happened (the process is `sleep`, and
        // its environ reads, and is empty). A read in the middle of an exec (of `env` by the
        // shell, or of `sleep` by `env`) can fail or come back empty, which is not the same.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let emptied = || {
            fs::read_to_string(format!("/proc/{child}/comm")).is_ok_and(|c| c.trim() == "sleep")
                && fs::read(format!("/proc/{child}/environ")).is_ok_and(|e| e.is_empty())
        };
        while !emptied() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(job_in_environ(child), None);
        assert_eq!(job_in_environ(shell.id()), Some((JobId(4242), None)));
        let f = facts(child);
        assert_eq!(f.job, Some(JobId(4242)));
        assert_eq!(f.uid, Some(rustix::process::getuid().as_raw()));
        assert!(f.start_time.is_some());
        let _ = Command::new("kill").arg(child.to_string()).status();
        let _ = shell.wait();

        let me = facts(std::process::id());
        let mine = std::env::var("BATON_JOB_ID")
            .ok()
            .and_then(|v| v.parse().ok());
        assert_eq!(me.job, mine.map(JobId), "the test runner's own job, if any");
    }
}
