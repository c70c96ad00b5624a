//! What the daemon gives its backend (`executor::Host`): the job table under the daemon's lock,
//! the scheduling pass, and its verdicts on a job's end, which go through the durable path
//! (`durable.rs`) like every other change.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::sync::MutexGuard;

use baton_core::lifecycle::Ending;
use baton_core::{JobId, Millis};

use super::{Daemon, Inner};
use crate::executor::{Host, JobFiles, RunAs};
use crate::jobs::JobTable;
use crate::store::JobRecord;
use crate::tasks::Tasks;

/// The daemon's lock, as a backend sees it: the job table.
pub struct Locked<'a>(pub(crate) MutexGuard<'a, Inner>);

impl Deref for Locked<'_> {
    type Target = JobTable;
    fn deref(&self) -> &JobTable {
        &self.0.jobs
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut JobTable {
        &mut self.0.jobs
    }
}

impl Host for Daemon {
    type Locked<'a> = Locked<'a>;

    fn lock_jobs(&self) -> Locked<'_> {
        Locked(self.lock())
    }

    fn place(
        &self,
        contain: &mut dyn FnMut(&JobRecord) -> String,
    ) -> (Vec<JobRecord>, Option<Millis>) {
        Daemon::place(self, contain)
    }

    fn end(&self, jobs: &mut Locked<'_>, id: JobId, ending: Ending) {
        self.finish(&mut jobs.0, id, ending);
    }

    fn attempt_over(&self, jobs: Locked<'_>, job: &JobRecord, ending: Ending) {
        self.conclude_attempt(jobs.0, job, ending);
    }

    fn started(&self, jobs: &mut Locked<'_>, job: &JobRecord) {
        self.workflow_task_started(&mut jobs.0, job);
    }

    fn changed(&self) {
        self.notify_changed();
    }

    fn wake(&self) {
        Daemon::wake(self);
    }

    fn pass_due(&self) -> bool {
        Daemon::pass_due(self)
    }

    fn deferring_wakes(&self, f: &mut dyn FnMut()) {
        Daemon::deferring_wakes(self, f)
    }

    fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    fn files(&self, id: JobId) -> JobFiles {
        Daemon::files(self, id)
    }

    fn run_as(&self, job: &JobRecord) -> Result<Option<RunAs>, String> {
        Daemon::run_as(self, job)
    }

    fn tag(&self) -> &str {
        &self.tag
    }

    fn deps_file(&self, job: &JobRecord, all_must_succeed: bool) -> Option<std::path::PathBuf> {
        self.write_deps_file(job, all_must_succeed)
    }

    fn grace_ms(&self) -> Millis {
        self.config.grace_ms
    }

    fn home(&self) -> &Path {
        &self.config.home
    }
}
