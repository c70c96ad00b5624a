//! The `[waste]` section of `$BATON_HOME/config.toml`: the rules' thresholds, the mode and the
//! allow-list, with the defaults of DESIGN §7, and [`WasteConfig::validate`] for the combinations
//! serde cannot catch.
//!
//! Durations and sizes are written the way people type them (`"15m"`, `"1GiB"`) and parsed by
//! [`crate::units`]; a size may also be a bare integer of bytes. A duration must carry a unit,
//! because tools disagree on what a bare number means. Unknown keys are errors, so a misspelt
//! threshold is refused at load time instead of silently keeping its default.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::Millis;

const SECOND: Millis = 1000;
const MINUTE: Millis = 60 * SECOND;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Whether decisions are carried out. Dry-run is the default so that turning the monitor on can
/// never kill anything until an admin has read the audit and opted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WasteMode {
    #[default]
    DryRun,
    Enforce,
}

impl WasteMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WasteMode::DryRun => "dry-run",
            WasteMode::Enforce => "enforce",
        }
    }

    pub fn is_dry_run(self) -> bool {
        self == WasteMode::DryRun
    }
}

impl fmt::Display for WasteMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[waste]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WasteConfig {
    pub mode: WasteMode,
    /// How often the daemon samples the GPUs and calls [`super::WasteEngine::observe`].
    #[serde(with = "crate::units::serde_duration")]
    pub sample_interval: Millis,
    /// Time between SIGTERM and SIGKILL.
    #[serde(with = "crate::units::serde_duration")]
    pub grace: Millis,
    pub zombie: ZombieRule,
    pub idle_job: IdleJobRule,
    pub held_after_exit: HeldAfterExitRule,
    pub allow: AllowList,
}

impl Default for WasteConfig {
    fn default() -> Self {
        WasteConfig {
            mode: WasteMode::DryRun,
            sample_interval: 5 * SECOND,
            grace: 30 * SECOND,
            zombie: ZombieRule::default(),
            idle_job: IdleJobRule::default(),
            held_after_exit: HeldAfterExitRule::default(),
            allow: AllowList::default(),
        }
    }
}

/// `[waste.zombie]`: a process that belongs to no baton job, holding at least `min_mem` on one
/// GPU for at least `after`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ZombieRule {
    pub enabled: bool,
    #[serde(with = "size")]
    pub min_mem: u64,
    #[serde(with = "crate::units::serde_duration")]
    pub after: Millis,
}

impl Default for ZombieRule {
    fn default() -> Self {
        ZombieRule {
            enabled: true,
            min_mem: GIB,
            after: 15 * MINUTE,
        }
    }
}

/// `[waste.idle_job]`: a running job whose GPUs' mean utilisation stays at or under `max_util`
/// percent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdleJobRule {
    pub enabled: bool,
    pub max_util: f64,
    #[serde(with = "crate::units::serde_duration")]
    pub warn_after: Millis,
    #[serde(with = "crate::units::serde_duration")]
    pub act_after: Millis,
}

impl IdleJobRule {
    /// When the second warning (and the priority drop) comes: three quarters of the way from
    /// `warn_after` to `act_after`, which is DESIGN §7's 105 min with the default 60/120 min and
    /// leaves the owner a last quarter of the escalation to react before SIGTERM.
    pub fn second_warn_after(&self) -> Millis {
        self.act_after - (self.act_after - self.warn_after) / 4
    }
}

impl Default for IdleJobRule {
    fn default() -> Self {
        IdleJobRule {
            enabled: true,
            max_util: 5.0,
            warn_after: 60 * MINUTE,
            act_after: 120 * MINUTE,
        }
    }
}

/// `[waste.held_after_exit]`: a job's processes still holding at least `min_mem` on one GPU
/// `after` its main process ended. The default waits a minute because CUDA contexts of a
/// cleanly exiting process are normally gone within seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeldAfterExitRule {
    pub enabled: bool,
    #[serde(with = "size")]
    pub min_mem: u64,
    #[serde(with = "crate::units::serde_duration")]
    pub after: Millis,
}

impl Default for HeldAfterExitRule {
    fn default() -> Self {
        HeldAfterExitRule {
            enabled: true,
            min_mem: 256 * MIB,
            after: MINUTE,
        }
    }
}

/// `[waste.allow]`: who and what the rules never act on (their decisions are still logged, as
/// `skip`). `tags` entries are `"key"` (any value) or `"key=value"`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AllowList {
    pub users: Vec<String>,
    pub names: Vec<String>,
    pub tags: Vec<String>,
}

/// What [`WasteConfig::validate`] refuses; each message names the key as written in the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WasteConfigError {
    #[error("waste.sample_interval = {0:?} is too short: sample at most once a second (\"1s\")")]
    SampleIntervalTooShort(String),
    #[error("{key} = {value:?} must be longer than zero")]
    NotPositive { key: &'static str, value: String },
    #[error(
        "waste.idle_job.warn_after = {warn:?} is longer than waste.idle_job.act_after = {act:?}: \
         the warning must come before the action"
    )]
    WarnAfterAct { warn: String, act: String },
    #[error("waste.idle_job.max_util = {0} is not a percentage: expected a number from 0 to 100")]
    MaxUtil(f64),
    #[error("waste.allow.{list} has an empty entry")]
    EmptyAllowEntry { list: &'static str },
    #[error("waste.allow.tags entry {0:?} has no key: expected \"key\" or \"key=value\"")]
    BadTag(String),
}

impl WasteConfig {
    /// Checks what the types allow but the rules cannot work with. Called once at load time so a
    /// bad file fails `baton serve` with a message that names the key.
    pub fn validate(&self) -> Result<(), WasteConfigError> {
        if self.sample_interval < SECOND {
            return Err(WasteConfigError::SampleIntervalTooShort(duration_text(
                self.sample_interval,
            )));
        }
        let positive = [
            ("waste.grace", self.grace),
            ("waste.zombie.after", self.zombie.after),
            ("waste.idle_job.warn_after", self.idle_job.warn_after),
            ("waste.idle_job.act_after", self.idle_job.act_after),
            ("waste.held_after_exit.after", self.held_after_exit.after),
        ];
        for (key, value) in positive {
            if value <= 0 {
                return Err(WasteConfigError::NotPositive {
                    key,
                    value: duration_text(value),
                });
            }
        }
        let idle = &self.idle_job;
        if idle.warn_after > idle.act_after {
            return Err(WasteConfigError::WarnAfterAct {
                warn: duration_text(idle.warn_after),
                act: duration_text(idle.act_after),
            });
        }
        if !(0.0..=100.0).contains(&idle.max_util) {
            return Err(WasteConfigError::MaxUtil(idle.max_util));
        }
        let lists = [
            ("users", &self.allow.users),
            ("names", &self.allow.names),
            ("tags", &self.allow.tags),
        ];
        for (list, entries) in lists {
            if entries.iter().any(|e| e.trim().is_empty()) {
                return Err(WasteConfigError::EmptyAllowEntry { list });
            }
        }
        if let Some(bad) = self.allow.tags.iter().find(|t| t.starts_with('=')) {
            return Err(WasteConfigError::BadTag(bad.clone()));
        }
        Ok(())
    }
}

pub use crate::units::duration_text;

use crate::units::serde_size as size;
