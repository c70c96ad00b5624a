//! Retention, applied by the daemon (`[retention]` in config.toml): at start, then whenever
//! the next thing falls due (one sleep until then; nothing polls), and now for `baton gc`. An
//! ended job's row goes with its events, deliveries, GPU usage and directory once it is older
//! than `jobs`; its output files (`stdout`, `stderr`) once older than `outputs`, its report
//! staying with the row. What goes is decided by `crate::history::retention`; never an active
//! job, one an active job depends on or wants to share a node with, a task of an active
//! workflow, or a job whose report or deliveries are still under way.
//!
//! Rows are deleted in small batches, each under the daemon's lock only for its transaction
//! (and the check, in the same hold, that nothing active needs them), so submissions and
//! scheduling passes go on meanwhile.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_core::{JobId, Millis};

use super::{Daemon, Inner, now_ms};
use crate::history::retention::{InUse, Retention, rows_to_remove};
use crate::store::{Removed, StoreError};

/// Rows deleted per transaction (each one a short hold of the daemon's lock).
const BATCH: usize = 200;

#[derive(Default)]
pub(super) struct State {
    /// Jobs that ended before this have had their output files removed (0: not looked yet
    /// since the daemon started).
    outputs_done_before: Mutex<Millis>,
    /// One pass at a time (the loop and `baton gc`).
    pass: Mutex<()>,
}

/// What a pass removed, or for a dry run would remove.
#[derive(Clone, Debug, Default)]
pub(crate) struct Swept {
    pub removed: Removed,
    pub kept_back: u64,
    pub files: u64,
    pub bytes: u64,
    pub workflows: u64,
    pub next_due: Millis,
}

impl Daemon {
    pub(super) async fn retention_loop(self: Arc<Self>) {
        loop {
            let me = self.clone();
            let next = match self
                .tasks
                .spawn_blocking(move || me.sweep(false, None))
                .await
            {
                Ok(Ok(swept)) => {
                    if swept.removed.jobs > 0 || swept.files > 0 {
                        tracing::info!(
                            jobs = swept.removed.jobs,
                            files = swept.files,
                            bytes = swept.bytes,
                            kept_back = swept.kept_back,
                            "retention removed what was due"
                        );
                    }
                    swept.next_due
                }
                Ok(Err(e)) => {
                    tracing::warn!("retention could not run, trying again in a minute: {e}");
                    now_ms() + 60_000
                }
                Err(e) => {
                    tracing::error!("the retention pass failed: {e}");
                    now_ms() + 60_000
                }
            };
            let wait = (next - now_ms()).max(1_000) as u64;
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    }

    /// One retention pass over what is due now; `dry_run` only counts. `windows`, shorter
    /// than `[retention]`'s, apply this once (`baton gc --older-than`).
    pub(crate) fn sweep(
        &self,
        dry_run: bool,
        windows: Option<Retention>,
    ) -> Result<Swept, StoreError> {
        let _one = self
            .retention
            .pass
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now = now_ms();
        let r = windows.unwrap_or(self.config.retention);
        let (rows_before, outputs_before) = (r.rows_before(now), r.outputs_before(now));
        let mut swept = Swept::default();
        // Rows, and with them whole job directories.
        let mut gone: HashSet<JobId> = HashSet::new();
        let mut after = JobId(0);
        loop {
            let batch = self
                .readers
                .with(|s| s.retention_candidates(rows_before, after, BATCH))?;
            let Some(last) = batch.last() else { break };
            after = last.id;
            let go = {
                let mut inner = self.lock();
                let (go, kept) = rows_to_remove(&batch, &in_use(&inner));
                swept.kept_back += kept.len() as u64;
                if !dry_run {
                    let removed = inner.jobs.store_mut().delete_jobs(&go)?;
                    let ended = &self.ended_jobs;
                    let _ = ended.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                        Some(n.saturating_sub(removed.jobs))
                    });
                    swept.removed += removed;
                }
                go
            };
            if dry_run {
                swept.removed += self.readers.with(|s| s.count_rows_of(&go))?;
            }
            for id in &go {
                let dir = crate::paths::job_dir(&self.config.home, id.0);
                let (files, bytes) = files_in(&dir);
                swept.files += files;
                swept.bytes += bytes;
                if !dry_run && files > 0 {
                    let _ = std::fs::remove_dir_all(&dir);
                } else if !dry_run {
                    let _ = std::fs::remove_dir(&dir);
                }
            }
            if dry_run {
                gone.extend(go);
            }
        }
        if !dry_run {
            let workflows = self.lock().jobs.store_mut().delete_empty_workflows()?;
            for w in &workflows {
                let _ = std::fs::remove_dir_all(crate::paths::workflow_dir(&self.config.home, *w));
            }
            swept.workflows = workflows.len() as u64;
        }
        // Output files of jobs past `outputs`, from where the last pass stopped.
        // (A pass with its own windows looks at every job: the mark is the configured one's.)
        let from = match windows {
            Some(_) => 0,
            None => *self
                .retention
                .outputs_done_before
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        };
        let mut after = JobId(0);
        loop {
            let ids = self
                .readers
                .with(|s| s.ended_between(from, outputs_before, after, 1_000))?;
            let Some(last) = ids.last() else { break };
            after = *last;
            for id in ids.iter().filter(|id| !gone.contains(id)) {
                let dir = crate::paths::job_dir(&self.config.home, id.0);
                for name in ["stdout", "stderr"] {
                    let path = dir.join(name);
                    if let Ok(meta) = std::fs::symlink_metadata(&path) {
                        swept.files += 1;
                        swept.bytes += meta.len();
                        if !dry_run {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
            }
        }
        if !dry_run && windows.is_none() {
            *self
                .retention
                .outputs_done_before
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = outputs_before;
        }
        // When the configured windows next have something to remove.
        let c = self.config.retention;
        let (next_row, next_outputs) = self.readers.with(|s| {
            Ok((
                s.first_end_from(c.rows_before(now))?,
                s.first_end_from(c.outputs_before(now))?,
            ))
        })?;
        swept.next_due = c.next_due(now, next_row, next_outputs);
        Ok(swept)
    }
}

/// What active jobs still need of ended ones.
fn in_use(inner: &Inner) -> InUse {
    let mut out = InUse::default();
    for job in inner.jobs.active() {
        out.jobs.extend(job.deps.iter().map(|d| d.job));
        out.jobs.extend(job.colocate.iter().copied());
        out.workflows.extend(job.workflow_id);
    }
    out.workflows.extend(inner.jobs.workflows().map(|w| w.id));
    // A job whose report is being built or delivered is not done with.
    out.jobs.extend(inner.reports_pending.iter().copied());
    out.jobs.extend(inner.delivering.iter().copied());
    out.jobs.extend(inner.unrecorded.jobs.iter().copied());
    out
}

/// The plain files directly in `dir` and their bytes (a job's directory is flat).
fn files_in(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .fold((0, 0), |(n, bytes), m| (n + 1, bytes + m.len()))
}
