//! Following running jobs' output for mid-run alerts (issue 17). One task for the daemon: one
//! inotify watch on each running job's directory, from a second after the job started (told by
//! `Daemon::follow`; a job that ends sooner is never followed), so a write to its `stdout` or
//! `stderr` wakes the task, which reads what was appended (never the file again) into the
//! job's `OutputScanner::following` (it skips, unparsed, every line no detector could take
//! anything from); `baton_core::midrun::Watch` decides what that makes an alert. An alert is
//! committed with its deliveries before anything is sent (the outbox sends it, once), and a
//! restarted daemon resumes each attempt's watch from the alerts stored, so none is repeated.
//!
//! Jobs run by this machine's supervisors only: a Slurm job's output lands on a shared file
//! system, where inotify does not see writes made on other nodes.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baton_core::lifecycle::Transition;
use baton_core::midrun::{
    self, Action, Alert, AlertFacts, Detector, Gpus, Milestones, Stacks, Watch,
};
use baton_core::report::progress::Progress;
use baton_core::report::{OutputScanner, Stream};
use baton_core::{JobId, JobState, Millis};
use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use tokio::io::unix::AsyncFd;

use super::{Daemon, now_ms};
use crate::api::ProgressView;
use crate::executor::JobFiles;
use crate::store::AlertRecord;

/// A job is followed from this long after its start (reading what it printed meanwhile): one
/// that ends sooner is told of by its end report alone, and costs the follower nothing.
pub(crate) const FOLLOW_AFTER_MS: Millis = 1000;

/// How often a job that is printing is read. A job's first write after a quiet spell wakes the
/// follower through inotify, which then stops watching it and reads it this often instead until
/// a read finds nothing new, when it is watched again: a chatty job (a hundred flushes a second)
/// costs a read per period rather than a wake-up per write, and an alert is at most this late.
const PACE_MS: Millis = 100;

/// A job that printed more than this before it was followed (a daemon restarted under a long
/// run) is scanned from its last this many bytes per stream.
const RESUME_TAIL: u64 = 8 << 20;

/// Where an alert's message is stored (`BATON_REPORT` for a `cmd:` channel): one file per
/// attempt and detector, as there is one alert.
pub(crate) fn alert_path(
    files: &JobFiles,
    attempt: u32,
    detector: midrun::Detector,
    seq: u32,
) -> PathBuf {
    let name = match seq {
        0 | 1 => format!("alert-{attempt}.{}.md", detector.as_str()),
        n => format!("alert-{attempt}.{}-{n}.md", detector.as_str()),
    };
    files.dir.join(name)
}

/// Whether an inotify event is about the job's output (not its supervisor's record, say).
fn is_output(name: Option<&std::ffi::CStr>) -> bool {
    name.is_some_and(|n| matches!(n.to_bytes(), b"stdout" | b"stderr"))
}

/// The attempts followed, by job and by the inotify watch on its directory; those printing now
/// are read every [`PACE_MS`] instead of watched.
#[derive(Default)]
struct Following {
    jobs: HashMap<JobId, Followed>,
    by_wd: HashMap<i32, JobId>,
    printing: Vec<JobId>,
}

impl Following {
    fn insert(&mut self, id: JobId, followed: Followed) {
        if let Some(wd) = followed.wd {
            self.by_wd.insert(wd, id);
        }
        self.jobs.insert(id, followed);
    }

    fn remove(&mut self, fd: &OwnedFd, id: JobId) {
        let Some(followed) = self.jobs.remove(&id) else {
            return;
        };
        if let Some(wd) = followed.wd {
            self.by_wd.remove(&wd);
            let _ = inotify::remove_watch(fd, wd);
        }
        self.printing.retain(|&p| p != id);
    }

    /// After a read of `id` that found `read` new bytes: a job that printed is read every
    /// period from now on, unwatched; one that printed nothing is watched again (and read once
    /// more, for what it wrote before the watch was back). Returns whether to read it again now.
    fn after_read(&mut self, fd: &OwnedFd, id: JobId, read: u64) -> bool {
        let Some(f) = self.jobs.get_mut(&id) else {
            return false;
        };
        match (read > 0, f.wd) {
            (true, Some(wd)) => {
                self.by_wd.remove(&wd);
                let _ = inotify::remove_watch(fd, wd);
                f.wd = None;
                self.printing.push(id);
                false
            }
            (false, None) => match watch_dir(fd, &f.files) {
                Ok(wd) => {
                    f.wd = Some(wd);
                    self.by_wd.insert(wd, id);
                    self.printing.retain(|&p| p != id);
                    true
                }
                // Read every period still: slower to tell, never blind.
                Err(_) => false,
            },
            _ => false,
        }
    }
}

/// The last line a job printed (of whichever stream was written last), sanitized and clipped:
/// a stall's evidence. Empty when it printed nothing.
fn last_line(files: &JobFiles) -> String {
    let newest = [files.stdout(), files.stderr()]
        .into_iter()
        .filter_map(|path| {
            let meta = std::fs::metadata(&path).ok().filter(|m| m.len() > 0)?;
            Some((meta.modified().ok()?, path))
        })
        .max_by_key(|(modified, _)| *modified);
    let Some((_, path)) = newest else {
        return String::new();
    };
    let tail = (|| -> std::io::Result<Vec<u8>> {
        let mut file = File::open(&path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(4096)))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail)?;
        Ok(tail)
    })()
    .unwrap_or_default();
    // A progress bar redraws its line with carriage returns: the last drawing is the line.
    let line = tail
        .split(|&b| b == b'\n' || b == b'\r')
        .rfind(|line| line.iter().any(|b| !b.is_ascii_whitespace()))
        .unwrap_or_default();
    baton_core::report::sanitize_line(line)
        .chars()
        .take(300)
        .collect()
}

/// When the job last wrote to its `stdout` or `stderr` (their modification times).
fn last_written(files: &JobFiles) -> Option<Millis> {
    [files.stdout(), files.stderr()]
        .iter()
        .filter_map(|path| std::fs::metadata(path).ok()?.modified().ok())
        .filter_map(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|since| since.as_millis() as Millis)
        .max()
}

/// Watches a job's directory for writes to its `stdout` and `stderr`.
fn watch_dir(fd: &OwnedFd, files: &JobFiles) -> std::io::Result<i32> {
    // Its launch may not have made the directory yet; it makes it the same way.
    std::fs::create_dir_all(&files.dir)?;
    Ok(inotify::add_watch(fd, &files.dir, WatchFlags::MODIFY)?)
}

/// One attempt being followed.
struct Followed {
    attempt: u32,
    started_at: Millis,
    name: String,
    files: JobFiles,
    /// The inotify watch on its directory; `None` while it is printing and read every period.
    wd: Option<i32>,
    streams: [Option<File>; 2],
    scanner: OutputScanner,
    watch: Watch,
    /// Whether it holds GPUs (the quiet detectors then need them idle too).
    has_gpus: bool,
    /// What its submitter asked to be woken for (`--wake-on`, `--wake-when`).
    milestones: Milestones,
    /// How far it had got at the last read, as the views were told.
    progress: Progress,
    /// The daemon's policy with the job's own `--stop-on`.
    policy: midrun::Policy,
    /// Since when its finished-but-alive stands, as the waste rules were told.
    said_finished: Option<Millis>,
}

/// What an alert about a followed attempt says of it.
struct Subject {
    attempt: u32,
    started_at: Millis,
    name: String,
    files: JobFiles,
    milestones: Milestones,
    /// How far it has got, as `baton status` says it.
    progress: Option<String>,
}

impl Followed {
    fn subject(&self, now: Millis) -> Subject {
        Subject {
            attempt: self.attempt,
            started_at: self.started_at,
            name: self.name.clone(),
            files: self.files.clone(),
            milestones: self.milestones.clone(),
            progress: self.progress.summary(now - self.started_at),
        }
    }

    /// Reads what was appended to each stream since the last look, to its end (whatever is
    /// written meanwhile is read at the next turn); returns how many bytes that was.
    fn read_new(&mut self, buf: &mut [u8]) -> u64 {
        let mut read = 0;
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
                    Ok(n) => {
                        read += n as u64;
                        self.scanner.feed(stream, &buf[..n]);
                        // A short read of a regular file is its end for now: no second read
                        // to be told so.
                        if n < buf.len() {
                            break;
                        }
                    }
                }
            }
        }
        read
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
        let Some(mut looks) = self.follow_rx.lock().ok().and_then(|mut rx| rx.take()) else {
            return;
        };
        let mut followed = Following::default();
        // Jobs that started, by when they are to be followed (`FOLLOW_AFTER_MS`).
        let mut due: BTreeMap<(Millis, JobId), ()> = BTreeMap::new();
        let mut buf = vec![0u8; 256 << 10];
        // When the jobs printing are read next.
        let mut next_pace: Option<Millis> = None;
        let mut events = vec![MaybeUninit::<u8>::uninit(); 16 << 10];
        // At first every running job (recovered after a restart); then each job the daemon
        // says started or stopped running (`Daemon::follow`).
        let mut dirty: Vec<JobId> = Vec::new();
        let mut to_look: Vec<JobId> = self.running_jobs();
        // A job that ran before this daemon did was quiet, as far as it knows, from now on.
        let follower_started = now_ms();
        loop {
            let now = now_ms();
            while let Some((&(at, id), ())) = due.first_key_value() {
                if at > now {
                    break;
                }
                due.remove(&(at, id));
                to_look.push(id);
            }
            if next_pace.is_some_and(|at| at <= now) {
                next_pace = None;
                dirty.extend_from_slice(&followed.printing);
            }
            if !to_look.is_empty() {
                let started =
                    self.look_at(fd.get_ref(), &mut followed, &to_look, now, follower_started);
                for (id, at) in started {
                    due.insert((at, id), ());
                }
                // Just followed: what it printed so far is read at once.
                dirty.append(&mut to_look);
            }
            dirty.sort_unstable();
            dirty.dedup();
            let now = now_ms();
            for id in std::mem::take(&mut dirty) {
                let Some(f) = followed.jobs.get_mut(&id) else {
                    continue;
                };
                let read = f.read_new(&mut buf);
                let mut printed = read > 0;
                if followed.after_read(fd.get_ref(), id, read)
                    && let Some(f) = followed.jobs.get_mut(&id)
                {
                    let read = f.read_new(&mut buf);
                    printed |= read > 0;
                    followed.after_read(fd.get_ref(), id, read);
                }
                let Some(f) = followed.jobs.get_mut(&id) else {
                    continue;
                };
                if printed {
                    f.watch.output_at(now);
                    let progress = f.scanner.progress();
                    if progress != f.progress {
                        f.progress = progress;
                        self.set_progress(id, Some(progress));
                    }
                }
                let has_gpus = f.has_gpus;
                let mut alerts = f.watch.check(&f.scanner.so_far(), now, &f.policy, || {
                    self.gpus_of(id, has_gpus)
                });
                alerts.extend(
                    f.watch
                        .check_memory(now, &f.policy, || self.lock().monitor.memory_series(id)),
                );
                for mut alert in alerts {
                    if matches!(
                        alert.detector,
                        Detector::Stall | Detector::Digest | Detector::Slow
                    ) {
                        alert.evidence = last_line(&f.files);
                    }
                    let subject = f.subject(now);
                    if alert.detector == Detector::Stall && !self.config.py_spy.is_empty() {
                        // Where its Python processes hang, read off this loop: py-spy may
                        // take a while.
                        let me = Arc::clone(&self);
                        self.tasks.spawn_blocking(move || {
                            let stacks = me.python_stacks(id, &subject, &alert);
                            me.raise_alert(id, &subject, alert, now, stacks.as_ref());
                        });
                        continue;
                    }
                    self.raise_alert(id, &subject, alert, now, None);
                }
                let said_finished = f.watch.said_finished_since();
                if said_finished != f.said_finished {
                    f.said_finished = said_finished;
                    self.lock().monitor.set_said_finished(id, said_finished);
                }
            }
            if !followed.printing.is_empty() && next_pace.is_none() {
                next_pace = Some(now + PACE_MS);
            }
            let next = followed
                .jobs
                .values()
                .filter_map(|f| f.watch.next_check(&f.policy))
                .chain(due.keys().next().map(|(at, _)| *at))
                .chain(next_pace)
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
                look = looks.recv() => {
                    let Some(id) = look else { return };
                    to_look.push(id);
                    while let Ok(id) = looks.try_recv() {
                        to_look.push(id);
                    }
                }
                ready = fd.readable() => {
                    let Ok(mut guard) = ready else { return };
                    let mut reader = inotify::Reader::new(fd.get_ref(), &mut events);
                    loop {
                        match reader.next() {
                            Ok(event) => {
                                if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
                                    dirty.extend(followed.jobs.keys().copied());
                                } else if is_output(event.file_name())
                                    && let Some(id) = followed.by_wd.get(&event.wd())
                                {
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
                // An error's grace period, a silence long enough to look at, a job's time to be
                // followed, or the period of the jobs printing came (the loop's top reads those).
                _ = sleep => {
                    let now = now_ms();
                    dirty.extend(
                        followed
                            .jobs
                            .iter()
                            .filter(|(_, f)| f.watch.next_check(&f.policy).is_some_and(|at| at <= now))
                            .map(|(id, _)| *id),
                    );
                }
            }
        }
    }

    /// How far running job `job` has got and when it should end, as its output says; `None`
    /// for a job not followed or that printed no counter.
    pub(crate) fn progress_view(&self, job: &crate::store::JobRecord) -> Option<ProgressView> {
        if job.state() != JobState::Running {
            return None;
        }
        let progress = *self.progress.lock().ok()?.get(&job.id)?;
        let now = now_ms();
        let remaining_ms = progress.remaining_ms(now - job.started_at()?);
        Some(ProgressView {
            counters: progress.describe(),
            fraction: progress.fraction(),
            remaining_ms,
            eta: remaining_ms.map(|left| super::views::rfc3339(now + left)),
        })
    }

    /// Records how far job `id` has got (`None`: it is no longer followed).
    fn set_progress(&self, id: JobId, progress: Option<Progress>) {
        let Ok(mut map) = self.progress.lock() else {
            return;
        };
        match progress {
            Some(p) if !p.is_empty() => {
                map.insert(id, p);
            }
            _ => {
                map.remove(&id);
            }
        }
    }

    /// The GPUs of running job `id` as the monitor saw them, for the quiet detectors.
    fn gpus_of(&self, id: JobId, has_gpus: bool) -> Gpus {
        if !has_gpus {
            return Gpus::NoGpus;
        }
        let idle_at = self.config.waste.idle_job.max_util;
        Gpus::IdleSince(self.lock().monitor.idle_since(id, idle_at))
    }

    /// The jobs running now.
    fn running_jobs(&self) -> Vec<JobId> {
        let inner = self.lock();
        inner
            .jobs
            .active()
            .filter(|j| j.state() == JobState::Running)
            .map(|j| j.id)
            .collect()
    }

    /// Follows each of `ids` that runs now (its current attempt) and has run for
    /// `FOLLOW_AFTER_MS`, and stops following those that do not run; returns those that run
    /// but not yet for that long, with when they are to be followed.
    fn look_at(
        &self,
        fd: &OwnedFd,
        followed: &mut Following,
        ids: &[JobId],
        now: Millis,
        follower_started: Millis,
    ) -> Vec<(JobId, Millis)> {
        let mut later = Vec::new();
        for &id in ids {
            let running = {
                let inner = self.lock();
                inner
                    .jobs
                    .get(id)
                    .filter(|j| j.state() == JobState::Running)
                    .cloned()
            };
            let same = match (&running, followed.jobs.get(&id)) {
                (Some(job), Some(f)) => f.attempt == job.attempt(),
                _ => false,
            };
            if same {
                continue;
            }
            followed.remove(fd, id);
            self.set_progress(id, None);
            self.lock().monitor.set_said_finished(id, None);
            let Some(job) = running else {
                continue;
            };
            let attempt = job.attempt();
            let started_at = job.started_at().unwrap_or_else(now_ms);
            let has_gpus = !job.gpus().is_empty();
            if started_at + FOLLOW_AFTER_MS > now {
                later.push((id, started_at + FOLLOW_AFTER_MS));
                continue;
            }
            let files = self.files(id);
            let wd = match watch_dir(fd, &files) {
                Ok(wd) => wd,
                Err(e) => {
                    tracing::warn!(job = id.0, "cannot follow the job's output: {e}");
                    continue;
                }
            };
            let policy = self
                .config
                .midrun
                .with_stop_on(&job.stop_on)
                .with_milestones(&job.wake);
            // Checked at submission; a pattern this build cannot compile is followed without.
            let scanner = OutputScanner::with_milestones(&job.wake).unwrap_or_else(|e| {
                tracing::warn!(job = id.0, "its milestones are not watched: {e}");
                OutputScanner::following()
            });
            // What earlier successful runs of the same command predict (`slow`), read on a
            // reader: a command never run before is a scan of the whole history, which must not
            // hold the daemon's lock.
            let history = match self.readers.with(|s| s.run_history(&job.command, "", "")) {
                Ok(history) => history,
                Err(e) => {
                    tracing::warn!(job = id.0, "cannot read its command's history: {e}");
                    Vec::new()
                }
            };
            let predicted = baton_core::workflow::predict_ms(&history, None, 0);
            // And the most GPU memory they held (a memory `slow`, a leak).
            let peaks = if has_gpus {
                match self.readers.with(|s| s.run_memory_peaks(&job.command)) {
                    Ok(peaks) => peaks,
                    Err(e) => {
                        tracing::warn!(job = id.0, "cannot read its command's memory: {e}");
                        Vec::new()
                    }
                }
            } else {
                Vec::new()
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
            let mut watch = Watch::resume(raised, started_at.max(follower_started));
            watch.expect(started_at, predicted, history.len());
            let peak = peaks.iter().copied().max().unwrap_or(0);
            watch.expect_memory(started_at, peak, peaks.len());
            if let Some(at) = last_written(&files) {
                watch.printed_before_resume_at(at);
            }
            followed.insert(
                id,
                Followed {
                    attempt,
                    started_at,
                    name: job.name,
                    files,
                    wd: Some(wd),
                    streams: [None, None],
                    scanner,
                    watch,
                    has_gpus,
                    milestones: job.wake,
                    progress: Progress::default(),
                    policy,
                    said_finished: None,
                },
            );
        }
        later
    }

    /// The stacks of the stalled job's Python processes, stored beside the alert (`None`: it
    /// runs no Python). A user's own daemon also finds py-spy in the job's PATH; a shared one
    /// runs it as the job's owner.
    fn python_stacks(&self, id: JobId, subject: &Subject, alert: &Alert) -> Option<Stacks> {
        let (job_path, run_as) = {
            let inner = self.lock();
            let job = inner.jobs.get(id)?;
            let run_as = match self.run_as(job) {
                Ok(run_as) => run_as,
                Err(e) => {
                    tracing::warn!(job = id.0, "cannot read its stacks: {e}");
                    return None;
                }
            };
            let path = (!self.config.system)
                .then(|| job.env.get("PATH").cloned())
                .flatten();
            (path, run_as)
        };
        let alert_file = alert_path(&subject.files, subject.attempt, alert.detector, alert.seq);
        crate::stacks::read(
            &subject.files,
            subject.attempt,
            &self.config.py_spy,
            job_path.as_deref(),
            run_as.as_ref(),
            &crate::stacks::stored_at(&alert_file),
        )
    }

    /// Commits one alert with its deliveries (none for a note, or where the job has no channel
    /// to wake: then it is a note) and wakes the outbox; for a stop, then stops the job (its
    /// end report is delivered as for any end).
    fn raise_alert(
        &self,
        id: JobId,
        f: &Subject,
        mut alert: Alert,
        now: Millis,
        stacks: Option<&Stacks>,
    ) {
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
            milestones: &f.milestones,
            progress: f.progress.clone(),
            stacks,
        };
        let message = midrun::message(&facts, &alert, &at_text);
        // Stored before it is committed: the outbox may send it (naming the file) at once.
        let path = alert_path(&f.files, f.attempt, alert.detector, alert.seq);
        if let Err(e) = crate::report::write_whole(&path, message.as_bytes()) {
            tracing::warn!(job = id.0, "cannot store {}: {e}", path.display());
        }
        let added = inner
            .jobs
            .store_mut()
            .add_alert(id, f.attempt, &alert, now, &message, &channels);
        match added {
            Ok(Some(_)) => {
                tracing::info!(
                    job = id.0,
                    detector = alert.detector.as_str(),
                    action = alert.action.as_str(),
                    "mid-run alert"
                );
                if alert.action == Action::Stop {
                    let stop = Transition::RequestStop {
                        reason: midrun::stop_reason(&alert, &f.milestones),
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
