//! Following running jobs' output for mid-run alerts (issue 17). One task for the daemon: one
//! inotify watch on each running job's directory, so a write to its `stdout` or `stderr` wakes
//! the task, which reads what was appended (never the file again) into the job's
//! `OutputScanner`; `baton_core::midrun::Watch` decides what that makes an alert. An alert is
//! committed with its deliveries before anything is sent (the outbox sends it, once), and a
//! restarted daemon resumes each attempt's watch from the alerts stored, so none is repeated.
//!
//! Jobs run by this machine's supervisors only: a Slurm job's output lands on a shared file
//! system, where inotify does not see writes made on other nodes.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_core::lifecycle::Transition;
use baton_core::midrun::{self, Action, Alert, AlertFacts, Watch};
use baton_core::report::{OutputScanner, Stream};
use baton_core::{JobId, JobState, Millis};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::unix::AsyncFd;

use super::{Daemon, now_ms};
use crate::executor::JobFiles;
use crate::store::AlertRecord;

/// A job that printed more than this before it was followed (a daemon restarted under a long
/// run) is scanned from its last this many bytes per stream.
const RESUME_TAIL: u64 = 8 << 20;

/// Where an alert's message is stored (`BATON_REPORT` for a `cmd:` channel): one file per
/// attempt and detector, as there is one alert.
pub(crate) fn alert_path(files: &JobFiles, attempt: u32, detector: midrun::Detector) -> PathBuf {
    files
        .dir
        .join(format!("alert-{attempt}.{}.md", detector.as_str()))
}

/// One attempt being followed.
struct Followed {
    attempt: u32,
    started_at: Millis,
    name: String,
    files: JobFiles,
    /// The inotify watch on its directory.
    wd: i32,
    streams: [Option<File>; 2],
    scanner: OutputScanner,
    watch: Watch,
    /// The daemon's policy with the job's own `--stop-on`.
    policy: midrun::Policy,
}

impl Followed {
    /// Reads what was appended to each stream since the last look, to its end: whatever is
    /// written meanwhile is another inotify event, so it is read at the next turn.
    fn read_new(&mut self, buf: &mut [u8]) {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let i = stream.index();
            if self.streams[i].is_none() {
                let path = match stream {
                    Stream::Stdout => self.files.stdout(),
                    Stream::Stderr => self.files.stderr(),
                };
                let Ok(mut file) = File::open(&path) else {
                    continue; // not made yet: its creation is an event too
                };
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                if len > RESUME_TAIL && file.seek(SeekFrom::Start(len - RESUME_TAIL)).is_ok() {
                    self.scanner.skipped(stream, len - RESUME_TAIL);
                }
                self.streams[i] = Some(file);
            }
            let Some(file) = self.streams[i].as_mut() else {
                continue;
            };
            loop {
                match file.read(buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.scanner.feed(stream, &buf[..n]),
                }
            }
        }
    }
}

impl Daemon {
    /// Follows every running job of this machine until the daemon stops.
    pub(super) async fn midrun_loop(self: Arc<Self>) {
        if !self.places_here() {
            return;
        }
        let fd = match inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
            .map_err(std::io::Error::from)
            .and_then(|fd| {
                // SAFETY: an OwnedFd stays open and keeps its number until the AsyncFd drops it.
                unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)
            }) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::error!("cannot follow running jobs (no mid-run alerts): {e}");
                return;
            }
        };
        let mut followed: HashMap<JobId, Followed> = HashMap::new();
        let mut changed = self.changed.subscribe();
        let mut buf = vec![0u8; 64 << 10];
        let mut events = vec![MaybeUninit::<u8>::uninit(); 16 << 10];
        // Which jobs run changes only with the job table: looked at again only then.
        let mut table_changed = true;
        loop {
            let mut dirty: Vec<JobId> = Vec::new();
            if table_changed {
                changed.borrow_and_update();
                dirty = self.reconcile(fd.get_ref(), &mut followed);
                table_changed = false;
            }
            let next = followed
                .values()
                .filter_map(|f| f.watch.next_check(&f.policy))
                .min();
            let sleep = async {
                match next {
                    Some(at) => {
                        let wait = (at - now_ms()).max(0) as u64;
                        tokio::time::sleep(Duration::from_millis(wait)).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = changed.changed() => table_changed = true,
                ready = fd.readable() => {
                    let Ok(mut guard) = ready else { return };
                    let by_wd: HashMap<i32, JobId> =
                        followed.iter().map(|(id, f)| (f.wd, *id)).collect();
                    let mut reader = inotify::Reader::new(fd.get_ref(), &mut events);
                    loop {
                        match reader.next() {
                            Ok(event) => {
                                if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                                    dirty.extend(followed.keys().copied());
                                } else if let Some(id) = by_wd.get(&event.wd()) {
                                    dirty.push(*id);
                                }
                            }
                            Err(rustix::io::Errno::AGAIN) => {
                                guard.clear_ready();
                                break;
                            }
                            Err(rustix::io::Errno::INTR) => {}
                            Err(e) => {
                                tracing::error!("reading inotify events: {e}");
                                guard.clear_ready();
                                break;
                            }
                        }
                    }
                }
                _ = sleep => dirty.extend(followed.keys().copied()),
            }
            dirty.sort_unstable();
            dirty.dedup();
            let now = now_ms();
            for id in dirty {
                let Some(f) = followed.get_mut(&id) else {
                    continue;
                };
                f.read_new(&mut buf);
                let alerts = f.watch.check(&f.scanner.so_far(), now, &f.policy);
                for alert in alerts {
                    self.raise_alert(id, f, alert, now);
                }
            }
        }
    }

    /// Starts following the jobs that run now and stops following those that do not; returns
    /// the ones just started, to be read at once (they may have printed already).
    fn reconcile(&self, fd: &OwnedFd, followed: &mut HashMap<JobId, Followed>) -> Vec<JobId> {
        type Run = (JobId, u32, Millis, String, Vec<midrun::Detector>);
        let running: Vec<Run> = {
            let inner = self.lock();
            inner
                .jobs
                .active()
                .filter(|j| j.state() == JobState::Running)
                .map(|j| {
                    let started = j.started_at().unwrap_or_else(now_ms);
                    (
                        j.id,
                        j.attempt(),
                        started,
                        j.name.clone(),
                        j.stop_on.clone(),
                    )
                })
                .collect()
        };
        followed.retain(|id, f| {
            let keep = running
                .iter()
                .any(|(r, attempt, ..)| r == id && *attempt == f.attempt);
            if !keep {
                let _ = inotify::remove_watch(fd, f.wd);
            }
            keep
        });
        let mut fresh = Vec::new();
        for (id, attempt, started_at, name, stop_on) in running {
            if followed.contains_key(&id) {
                continue;
            }
            let files = self.files(id);
            let flags = WatchFlags::MODIFY | WatchFlags::CREATE;
            // Its launch may not have made the directory yet; it makes it the same way.
            let watched = std::fs::create_dir_all(&files.dir)
                .and_then(|()| Ok(inotify::add_watch(fd, &files.dir, flags)?));
            let wd = match watched {
                Ok(wd) => wd,
                Err(e) => {
                    tracing::warn!(job = id.0, "cannot follow the job's output: {e}");
                    continue;
                }
            };
            // After a restart: what this attempt raised already is not raised again.
            let raised = match self.lock().jobs.store().alerts(id) {
                Ok(alerts) => alerts
                    .iter()
                    .filter(|a| a.attempt == attempt)
                    .map(AlertRecord::raised)
                    .collect(),
                Err(e) => {
                    tracing::warn!(job = id.0, "cannot read the job's alerts: {e}");
                    Vec::new()
                }
            };
            followed.insert(
                id,
                Followed {
                    attempt,
                    started_at,
                    name,
                    files,
                    wd,
                    streams: [None, None],
                    scanner: OutputScanner::new(),
                    watch: Watch::resume(raised),
                    policy: self.config.midrun.with_stop_on(&stop_on),
                },
            );
            fresh.push(id);
        }
        fresh
    }

    /// Commits one alert with its deliveries (none for a note, or where the job has no channel
    /// to wake: then it is a note) and wakes the outbox; for a stop, then stops the job (its
    /// end report is delivered as for any end).
    fn raise_alert(&self, id: JobId, f: &Followed, mut alert: Alert, now: Millis) {
        let mut inner = self.lock();
        let Some(job) = inner.jobs.get(id).cloned() else {
            return; // ended meanwhile: its report says it all
        };
        let channels = if alert.action == Action::Wake {
            self.end_channels(&inner, &job)
        } else {
            Vec::new()
        };
        if alert.action == Action::Wake && channels.is_empty() {
            alert.action = Action::Note;
        }
        let at_text = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + Duration::from_millis(alert.seen_at.max(0) as u64),
        )
        .to_string();
        let facts = AlertFacts {
            job: id.0,
            name: &f.name,
            started_at: f.started_at,
        };
        let message = midrun::message(&facts, &alert, &at_text);
        // Stored before it is committed: the outbox may send it (naming the file) at once.
        let path = alert_path(&f.files, f.attempt, alert.detector);
        if let Err(e) = crate::report::write_whole(&path, message.as_bytes()) {
            tracing::warn!(job = id.0, "cannot store {}: {e}", path.display());
        }
        let store = inner.jobs.store_mut();
        match store.add_alert(id, f.attempt, &alert, now, &message, &channels) {
            Ok(Some(_)) => {
                let detail = format!(
                    "{} ({}): {}",
                    alert.detector.as_str(),
                    alert.action.as_str(),
                    alert.evidence
                );
                if let Err(e) = store.add_event(id, "alert", &detail, now) {
                    tracing::warn!(job = id.0, "cannot record the alert event: {e}");
                }
                tracing::info!(
                    job = id.0,
                    detector = alert.detector.as_str(),
                    action = alert.action.as_str(),
                    "mid-run alert"
                );
                if alert.action == Action::Stop {
                    let stop = Transition::RequestStop {
                        reason: midrun::stop_reason(alert.detector),
                    };
                    let mut jobs = super::host::Locked(inner);
                    if let Err(e) = self.cancel(&mut jobs, &job, stop) {
                        tracing::error!(job = id.0, "cannot stop the job: {e}");
                    }
                    drop(jobs);
                    self.notify_changed();
                }
                self.outbox_wake.notify_one();
            }
            Ok(None) => {} // raised before this restart
            Err(e) => tracing::error!(job = id.0, "cannot record the alert: {e}"),
        }
    }
}
