//! Waste rules (DESIGN §7): deciding, from the GPU samples the daemon attributes to jobs, which
//! processes and jobs waste GPUs, and how far to escalate against each. Pure: the daemon builds a
//! [`Snapshot`] per sample, feeds it to one [`WasteEngine`], records every returned [`Decision`]
//! in the audit and, in `enforce` mode, carries it out. The engine keeps its own state between
//! snapshots (clocks, ladder positions, each job's utilisation series), so the caller keeps none.
//!
//! The rules and their ladders (defaults in brackets; each rung is returned exactly once, and a
//! target that leaves the snapshot is forgotten):
//! - **zombie**: a process of no baton job holding at least `min_mem` [1 GiB] on one GPU, seen so
//!   continuously for `after` [15 min] (from its first sighting; dropping below `min_mem` or
//!   vanishing resets the clock). Then `notify` (there is no owner: the audit and metrics reach the
//!   admin) and `sigterm` together; `sigkill` if it still holds `min_mem` `grace` [30 s] later.
//!   There is no `deprioritize`, as there is no job. A process whose user is on `allow.users` gets
//!   one `skip` instead.
//! - **idle_job**: a running job with GPUs whose mean utilisation (over its GPUs, per sample; GPUs
//!   with no reading left out) averages at most `max_util` [5 %] over a trailing window. Three
//!   windows: `warn_after` [60 min] → `notify` (warning 1 of 2); three quarters of the way to
//!   `act_after` [105 min, DESIGN's figure] → `notify` (warning 2 of 2) + `deprioritize`;
//!   `act_after` [120 min] → `sigterm`; `grace` later, if the job still runs → `sigkill`. Each
//!   window must be covered: the job started and was first observed at least the window ago, and
//!   readings span at least half of it. If the mean over `warn_after` rises above `max_util`
//!   before SIGTERM the ladder resets, and the windows restart from that moment (no flapping
//!   warnings for a job hovering at the threshold). Jobs with no GPUs are never checked. One
//!   rung per snapshot at most, so sparse sampling cannot skip a warning.
//! - **held_after_exit**: a process of a job whose main process ended (`ProcOwner::Ended`, or a
//!   job the snapshot does not list as running) holding at least `min_mem` [256 MiB] on one GPU
//!   for `after` [60 s] → `notify` (the job's owner) and `sigterm`, then `sigkill` after `grace`.
//!   One ladder per pid; all pids of a job cross together, so the caller can merge notices.
//!   Held after finish, the same rule for a job still running: one whose output said the work
//!   was done and then sat quiet and idle (`JobObs::said_finished_at`, from the mid-run
//!   `finished-but-alive` alert) and whose processes hold at least `min_mem` on a GPU, `after`
//!   later → `notify` and `sigterm` of the job as a whole (its main process is among them, and
//!   a graceful stop ends it with the reason), `sigkill` after `grace` if it still runs. Its
//!   printing again clears `said_finished_at` and the ladder.
//!
//! Protection: a job tagged `protect=true` (`true`, `1` or `yes`), or whose owner, name or a tag
//! is on `[waste.allow]`, is never acted on: the first rung becomes a single `skip` naming the
//! reason, logged once per job per rule, and nothing follows. Leftover processes of a job the
//! engine never saw are skipped too, since their protection cannot be checked; list ended jobs
//! with `running = false` to avoid that after a daemon restart.
//!
//! Dry-run returns the same decisions at the same times with `dry_run = true`; since nothing is
//! killed, the ladder simply ends after its `sigkill`, as it does in enforce mode.

mod config;
mod engine;
mod types;

#[cfg(test)]
mod tests;

pub use config::{
    AllowList, HeldAfterExitRule, IdleJobRule, WasteConfig, WasteConfigError, WasteMode,
    ZombieRule, duration_text,
};
pub use engine::WasteEngine;
pub use types::{
    Action, Decision, Evidence, EvidenceSample, GpuObs, JobObs, MAX_EVIDENCE_SAMPLES, ProcObs,
    ProcOwner, Rule, Snapshot, UnknownAction, UnknownRule,
};
