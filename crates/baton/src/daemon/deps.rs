//! `BATON_DEPS_JSON`: what a job that runs after others sees of them. When a job with
//! dependencies starts, the daemon writes `deps.json` in its directory: each predecessor's job
//! id, task, name, parameters (a workflow matrix task's, a sweep run's), state, exit code and
//! where its report and output are, so that "train 5 seeds, then aggregate" needs no lookups.
//! A predecessor of another user is listed by id and state only. The scheduler starts a
//! dependent only once its predecessors' reports are stored (`scheduling_input`), so the paths
//! name files that exist.
//!
//! Under Slurm the file is written when the job is submitted, which is often before its
//! predecessors end (Slurm's `--dependency` holds it back). A predecessor that has not ended
//! is listed with what the job's start will guarantee and nothing more: `succeeded` and exit
//! code 0 for a `success` dependency (or any task of an atomic workflow, whose batch script
//! starts a task only after those before it succeeded), no state for `any` and `failure`; its
//! report paths are listed only once the report exists.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use baton_core::JobState;

use super::Daemon;
use crate::store::JobRecord;

/// The file, as the job reads it.
#[derive(Serialize)]
struct DepsFile {
    job: u64,
    deps: Vec<Predecessor>,
}

#[derive(Serialize)]
struct Predecessor {
    job: u64,
    /// `success` (`--after`, a workflow's `after`), `any` or `failure`.
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    params: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    report_json: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    report_md: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr: Option<String>,
}

impl Daemon {
    /// Writes `deps.json` for a job with dependencies, and returns its path; `None` for a job
    /// without any, or when it cannot be written (logged: the job still runs, without the
    /// variable). `all_must_succeed`: the job starts only once every predecessor succeeded,
    /// whatever the dependency's kind (a task of an atomic workflow under Slurm).
    pub(crate) fn write_deps_file(
        &self,
        job: &JobRecord,
        all_must_succeed: bool,
    ) -> Option<PathBuf> {
        if job.deps.is_empty() {
            return None;
        }
        let mut deps = Vec::with_capacity(job.deps.len());
        {
            let inner = self.lock();
            for dep in &job.deps {
                let record = match inner.jobs.get(dep.job) {
                    Some(live) => Some(live.listed()),
                    None => inner.jobs.store().get(dep.job).ok().flatten(),
                };
                let Some(record) = record else {
                    continue; // removed by retention: nothing to say of it
                };
                let kind = match dep.kind {
                    baton_core::DepKind::Success => "success",
                    baton_core::DepKind::Any => "any",
                    baton_core::DepKind::Failure => "failure",
                };
                let (state, exit_code) = if record.state().is_terminal() {
                    (
                        Some(record.state().as_str().to_string()),
                        record.exit_code(),
                    )
                } else if all_must_succeed || dep.kind == baton_core::DepKind::Success {
                    // Not ended yet (Slurm): the job starts only once it has succeeded.
                    (Some(JobState::Succeeded.as_str().to_string()), Some(0))
                } else {
                    (None, None)
                };
                let mut entry = Predecessor {
                    job: record.id.0,
                    kind,
                    state,
                    exit_code,
                    name: None,
                    task: None,
                    params: BTreeMap::new(),
                    report_json: None,
                    report_md: None,
                    stdout: None,
                    stderr: None,
                };
                // Another user's job: its id and how it ended, nothing of its contents.
                if record.owner_uid == job.owner_uid {
                    let files = self.files(record.id);
                    entry.name = Some(record.name.clone());
                    entry.task = record.task.clone();
                    entry.params = record.params.iter().cloned().collect();
                    // Under Slurm a report may still be on its way: named once it exists.
                    let (json, md) = (files.report_json(), files.report_md());
                    if json.exists() {
                        entry.report_json = Some(json.display().to_string());
                    }
                    if md.exists() {
                        entry.report_md = Some(md.display().to_string());
                    }
                    entry.stdout = Some(files.stdout().display().to_string());
                    entry.stderr = Some(files.stderr().display().to_string());
                }
                deps.push(entry);
            }
        }
        let body = serde_json::to_vec_pretty(&DepsFile {
            job: job.id.0,
            deps,
        })
        .expect("plain data");
        let files = self.files(job.id);
        let path = files.dir.join("deps.json");
        let written = std::fs::create_dir_all(&files.dir)
            .and_then(|()| crate::report::write_whole(&path, &body))
            .and_then(|()| self.let_owner_read(job, &path));
        match written {
            Ok(()) => Some(path),
            Err(e) => {
                tracing::warn!(job = job.id.0, "cannot write {}: {e}", path.display());
                None
            }
        }
    }

    /// On a shared daemon the job runs as its owner, who must be able to open the file: it is
    /// made theirs, and the directories on the way may be passed through (0711: not listed).
    fn let_owner_read(&self, job: &JobRecord, path: &std::path::Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        if !self.config.system || job.owner_uid == self.uid {
            return Ok(());
        }
        std::os::unix::fs::chown(path, Some(job.owner_uid), None)?;
        let mut dir = path.parent();
        while let Some(d) = dir {
            let mode = std::fs::metadata(d)?.permissions().mode() & 0o7777;
            if mode & 0o001 == 0 {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode | 0o011))?;
            }
            if d == self.config.home {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }
}
