//! A full disk under the state directory: a job's end that cannot be committed is retried until
//! it is (the job waits in `running`, `wait` waits, its dependents wait), `baton status` says
//! what is wrong meanwhile, and once there is room again everything goes on by itself.
//!
//! The state directory is a small tmpfs the test mounts (root only; skipped otherwise).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Baton, DEADLINE, POLL, wait_for_file};

/// A tmpfs mounted for the test, lazily unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system at `dir` until it has no room left; returns the file that holds it.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0u8; 64 << 10];
    while file.write_all(&block).is_ok() {}
    // The last partial blocks too.
    while file.write_all(&block[..512]).is_ok() {}
    path
}

/// `baton status`'s diagnostics, once they say `what` (bounded).
fn status_says(b: &Baton, what: &str) -> String {
    let until = Instant::now() + DEADLINE;
    loop {
        let out = b.run(&["status"]).expect(0);
        if out.stderr.contains(what) {
            return out.stderr;
        }
        assert!(
            Instant::now() < until,
            "`baton status` never said {what:?}; it said:\n{}{}",
            out.stdout,
            out.stderr
        );
        std::thread::sleep(POLL);
    }
}

#[test]
fn a_job_end_that_cannot_be_committed_is_retried_until_it_is() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small file system for the state directory needs root");
        return;
    }
    let mut b = Baton::unstarted();
    let Some(_fs) = Tmpfs::mount(&b.home, "16m") else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    b.serve_with(&["serve", "--sim-gpus", "1", "--grace", "1s"]);
    let first = b.submit_sh(&["--gpus", "1"], &wait_for_file("go"));
    let after = b.submit_sh(&["--gpus", "1", "--after", &first.to_string()], "true");
    b.wait_running(first);

    let filler = fill(&b.home);
    b.touch("go");
    let said = status_says(&b, "not yet recorded");
    assert!(said.contains("state directory full"), "{said}");
    assert!(said.contains("1 job end not yet recorded"), "{said}");
    let job = b.job(first);
    assert_eq!(job["state"], "running", "{job:#}");
    assert!(
        job["reason"].as_str().unwrap().contains("not recorded yet"),
        "{job:#}"
    );
    assert_eq!(
        b.wait(&[first], "1s").code,
        124,
        "an end not recorded is no end yet"
    );
    assert_eq!(b.state(after), "queued");

    std::fs::remove_file(filler).unwrap();
    b.wait_ok(&[first, after]);
    let out = b.run(&["status"]).expect(0);
    assert!(
        !out.stderr.contains("not yet recorded"),
        "still unhealthy: {}",
        out.stderr
    );
    let events = b.run(&["events", &first.to_string()]).expect(0).stdout;
    assert!(events.contains("succeeded"), "{events}");
    // Its report went out once it could.
    let until = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(b.home.join("inbox.md"))
        .is_ok_and(|t| t.contains(&format!("job {first} ended")))
    {
        assert!(Instant::now() < until, "the report never reached the inbox");
        std::thread::sleep(POLL);
    }
}
