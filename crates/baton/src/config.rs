//! `$BATON_HOME/config.toml`: the daemon's settings file. Optional; every key has a default.
//! Read once when the daemon starts. Unknown sections and keys are errors (a typo must not
//! silently leave a rule at its default), reported with the file, line and column.

use std::path::{Path, PathBuf};

use baton_core::Millis;
use baton_core::waste::WasteConfig;
use serde::Deserialize;

/// Everything the file can say.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// The GPU monitor and waste rules (`[waste]`, `[waste.zombie]`, …).
    pub waste: WasteConfig,
    /// Where jobs run: this machine (default) or a Slurm cluster (`[backend] kind = "slurm"`).
    pub backend: crate::executor::slurm::BackendSettings,
    /// How the daemon itself runs (`[daemon]`).
    pub daemon: DaemonSettings,
    /// How failed jobs are retried (`[retries]`).
    pub retries: RetrySettings,
    /// What the users of a shared (`--system`) daemon may ask for (`[limits]`).
    pub limits: LimitSettings,
    /// How long ended jobs and their output files are kept (`[retention]`).
    pub retention: crate::history::retention::Retention,
    /// The cores and memory jobs may take, and what a job asks for by default (`[resources]`).
    pub resources: ResourceSettings,
    /// How big a sweep may be and when it counts as broken (`[sweeps]`).
    pub sweeps: SweepSettings,
    /// What a running job's output may show that wakes its submitter before it ends (`[midrun]`).
    pub midrun: MidrunSettings,
}

/// `[midrun]`: the detectors that follow a running job's output, each `wake` (the job's
/// channels get a short alert), `note` (recorded, shown in the report), `stop` (the job is
/// ended as failed, as by `--stop-on`) or `off`; how long a
/// process must outlive the error it printed; the shortest silence that is a stall; how long a
/// job that said it finished may stay quiet and idle; and the most wake-ups a job gets in an
/// hour.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MidrunSettings {
    pub nan: DetectorSetting,
    pub error: DetectorSetting,
    #[serde(with = "baton_core::units::serde_duration")]
    pub error_grace: Millis,
    pub stall: DetectorSetting,
    #[serde(with = "baton_core::units::serde_duration")]
    pub stall_after: Millis,
    pub finished_but_alive: DetectorSetting,
    #[serde(with = "baton_core::units::serde_duration")]
    pub finished_grace: Millis,
    /// The shortest `--wake-every` a job may ask for.
    #[serde(with = "baton_core::units::serde_duration")]
    pub min_wake_every: Millis,
    pub slow: DetectorSetting,
    /// No job is slow before it has run this long.
    #[serde(with = "baton_core::units::serde_duration")]
    pub slow_after: Millis,
    pub wakes_per_hour: u32,
    /// The py-spy a stall alert reads a Python job's stacks with: a path, or a name looked up
    /// in the daemon's PATH (a user's own daemon then also looks in the job's PATH); empty:
    /// none are read.
    pub py_spy: String,
}

/// What one detector does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DetectorSetting {
    Wake,
    Note,
    /// End the job as failed at once, as every job's `--stop-on` would.
    Stop,
    Off,
}

impl Default for MidrunSettings {
    fn default() -> Self {
        let policy = baton_core::midrun::Policy::default();
        MidrunSettings {
            nan: DetectorSetting::Wake,
            error: DetectorSetting::Wake,
            error_grace: policy.error_grace_ms,
            stall: DetectorSetting::Wake,
            stall_after: policy.stall_after_ms,
            finished_but_alive: DetectorSetting::Note,
            finished_grace: policy.finished_grace_ms,
            min_wake_every: 10 * 60_000,
            slow: DetectorSetting::Wake,
            slow_after: policy.slow_after_ms,
            wakes_per_hour: policy.wakes_per_hour,
            py_spy: "py-spy".into(),
        }
    }
}

impl MidrunSettings {
    /// The detectors' policy, as the pure core takes it.
    pub fn policy(&self) -> baton_core::midrun::Policy {
        use baton_core::midrun::Action;
        let action = |s: DetectorSetting| match s {
            DetectorSetting::Wake => Some(Action::Wake),
            DetectorSetting::Note => Some(Action::Note),
            DetectorSetting::Stop => Some(Action::Stop),
            DetectorSetting::Off => None,
        };
        baton_core::midrun::Policy {
            nan: action(self.nan),
            error: action(self.error),
            error_grace_ms: self.error_grace,
            wakes_per_hour: self.wakes_per_hour,
            stall: action(self.stall),
            stall_after_ms: self.stall_after,
            finished: action(self.finished_but_alive),
            finished_grace_ms: self.finished_grace,
            wake_every_ms: None,
            slow: action(self.slow),
            slow_after_ms: self.slow_after,
            milestones: Vec::new(),
            job_stops: Vec::new(),
        }
    }
}

/// `[sweeps]`: the most runs one sweep or array may have, and when a sweep is clearly broken
/// and its submitter is woken before it ends: the first `early_failures` runs to end all failed
/// the same way, or at least that many ended and `early_failure_share` of them failed.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SweepSettings {
    pub max_runs: u64,
    pub early_failures: usize,
    pub early_failure_share: f64,
}

impl Default for SweepSettings {
    fn default() -> Self {
        SweepSettings {
            max_runs: 10_000,
            early_failures: 3,
            early_failure_share: 0.5,
        }
    }
}

/// `[resources]`: this machine's cores and memory as resources jobs ask for, like GPUs. Each
/// job takes `--cpus` cores (default `default_cpus`) and `--mem` memory (default
/// `default_memory`: none), and a job starts only when they are free, so CPU-only jobs queue
/// instead of all starting at once.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceSettings {
    /// The cores jobs may use (default: the cores this daemon may run on).
    pub cpus: Option<u32>,
    /// The memory jobs may use (default: the machine's, `MemTotal`).
    #[serde(with = "baton_core::units::serde_opt_size")]
    pub memory: Option<u64>,
    /// Cores kept for the system, taken off `cpus`.
    pub reserve_cpus: u32,
    /// Memory kept for the system, taken off `memory`.
    #[serde(with = "baton_core::units::serde_size")]
    pub reserve_memory: u64,
    /// The cores a job takes when it does not say.
    pub default_cpus: u32,
    /// The memory a job takes when it does not say (default: none reserved).
    #[serde(with = "baton_core::units::serde_opt_size")]
    pub default_memory: Option<u64>,
}

impl Default for ResourceSettings {
    fn default() -> Self {
        ResourceSettings {
            cpus: None,
            memory: None,
            reserve_cpus: 0,
            reserve_memory: 0,
            default_cpus: 1,
            default_memory: None,
        }
    }
}

/// What the daemon gives jobs, decided at startup from `[resources]`, `serve --cpus/--memory`
/// and the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostResources {
    /// The cores and memory jobs may take, in all.
    pub capacity: baton_core::model::NodeCapacity,
    /// What a job takes when it does not say.
    pub default_cpus: u32,
    pub default_mem: u64,
}

impl ResourceSettings {
    /// The capacity: `cpus`/`memory` (from the flags, else the file, else `detected`) less what
    /// is kept for the system. Fails when nothing would be left for jobs.
    pub fn host(
        &self,
        cpus: Option<u32>,
        memory: Option<u64>,
        detected: (u32, u64),
    ) -> Result<HostResources, String> {
        let all_cpus = cpus.or(self.cpus).unwrap_or(detected.0);
        let all_mem = memory.or(self.memory).unwrap_or(detected.1);
        let cpus = all_cpus.saturating_sub(self.reserve_cpus);
        let mem = all_mem.saturating_sub(self.reserve_memory);
        if cpus == 0 {
            return Err(format!(
                "[resources] leaves no core for jobs: {all_cpus} in all, reserve_cpus = {}",
                self.reserve_cpus
            ));
        }
        if mem == 0 {
            return Err(format!(
                "[resources] leaves no memory for jobs: {} in all, reserve_memory = {}",
                baton_core::units::format_size(all_mem),
                baton_core::units::format_size(self.reserve_memory)
            ));
        }
        Ok(HostResources {
            capacity: baton_core::model::NodeCapacity { node: 0, cpus, mem },
            default_cpus: self.default_cpus,
            default_mem: self.default_memory.unwrap_or(0),
        })
    }
}

/// This machine's cores (those this process may run on) and memory (`MemTotal`).
pub fn detect_host() -> (u32, u64) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(u64::MAX, |kib| kib * 1024);
    (cpus, mem)
}

/// `[limits]`: on a shared daemon (`baton serve --system`), what users other than root and the
/// `admins` may ask for, so that no user can jump every other user's jobs.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    /// The lowest `--priority` a user may give.
    pub min_priority: i64,
    /// The highest `--priority` a user may give.
    pub max_priority: i64,
    /// Users who, like root, may go beyond these limits.
    pub admins: Vec<String>,
    /// Connections to the API socket open at once, in all (lowered to fit the daemon's limit
    /// on open files).
    pub connections: usize,
    /// Connections to the API socket one user may hold at once (each `baton wait` and
    /// `logs --follow` holds one).
    pub connections_per_user: usize,
    /// How long a client may take to send a whole request; an idle or slow connection is
    /// closed after it.
    #[serde(with = "baton_core::units::serde_duration")]
    pub request_timeout: Millis,
    /// The most GPUs, CPUs and memory one user's jobs hold at once (a job that would go past
    /// waits, saying so), the most jobs one user has queued, and the most GPUs one job asks
    /// for (past those two: refused at submission). None by default.
    pub max_gpus_per_user: Option<u32>,
    pub max_cpus_per_user: Option<u32>,
    #[serde(with = "baton_core::units::serde_opt_size")]
    pub max_mem_per_user: Option<u64>,
    pub max_queued_per_user: Option<u32>,
    pub max_gpus_per_job: Option<u32>,
    /// The same held at once by one agent session's jobs (a session cannot take its user's
    /// whole share).
    pub max_gpus_per_session: Option<u32>,
    pub max_cpus_per_session: Option<u32>,
    #[serde(with = "baton_core::units::serde_opt_size")]
    pub max_mem_per_session: Option<u64>,
    /// GPU-hours one user's jobs may hold per `budget_period`, counted from what they held
    /// (each GPU for as long as it was held, ended attempts and running ones). None by default.
    pub gpu_hours_per_user: Option<GpuHours>,
    /// The period a budget covers: `day`, `week` (from Monday 00:00) or `month`, in the
    /// daemon's local time.
    pub budget_period: baton_core::limits::Period,
    /// What a used-up budget does: `queue` (the user's jobs wait for the next period, saying
    /// so) or `refuse` (submissions are refused until then; running jobs run on).
    pub budget_mode: BudgetMode,
    /// The GPU-hours a user who is neither root nor an admin may keep in reservations of their
    /// own (`baton reserve`), all their standing ones together. None by default: only root
    /// and the admins reserve.
    pub max_reserved_gpu_hours_per_user: Option<GpuHours>,
    /// `[limits.users.NAME]`: one user's own caps, over the ones above.
    pub users: std::collections::BTreeMap<String, UserCaps>,
    /// `[limits.groups.NAME]`: the caps of a group's members, over the ones above (a user's own
    /// entry goes first; of several groups, the first by name that sets the cap).
    pub groups: std::collections::BTreeMap<String, UserCaps>,
}

/// One user's (or a group's members') caps, each replacing `[limits]`'s.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserCaps {
    pub max_gpus_per_user: Option<u32>,
    pub max_cpus_per_user: Option<u32>,
    #[serde(with = "baton_core::units::serde_opt_size")]
    pub max_mem_per_user: Option<u64>,
    pub max_queued_per_user: Option<u32>,
    pub max_gpus_per_job: Option<u32>,
    pub gpu_hours_per_user: Option<GpuHours>,
    /// Only in `[limits.groups.NAME]`: GPU-hours per period the group's members share, all of
    /// their jobs counted together (on top of each one's own budget, if any).
    pub gpu_hours_per_group: Option<GpuHours>,
}

/// GPU-hours as config.toml gives them (`40`, `0.5`), kept as GPU-milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuHours(pub i64);

impl<'de> Deserialize<'de> for GpuHours {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let hours = f64::deserialize(d)?;
        if !(hours.is_finite() && hours > 0.0) {
            return Err(serde::de::Error::custom(
                "a budget must be a positive number of GPU-hours (leave it out for none)",
            ));
        }
        Ok(GpuHours((hours * 3_600_000.0).round().max(1.0) as i64))
    }
}

/// What a used-up GPU-hour budget does (`[limits] budget_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetMode {
    /// The user's jobs wait for the next period, their reason saying so.
    #[default]
    Queue,
    /// New submissions are refused until the next period.
    Refuse,
}

/// What one user may hold and queue, resolved from `[limits]` and its overrides; each with the
/// table it comes from (`[limits]`, `[limits.users.alice]`), for the reasons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedCaps {
    /// Held at once (`None`: nothing capped).
    pub held: Option<baton_core::limits::AccountCap>,
    pub max_queued: Option<(u32, String)>,
    pub max_gpus_per_job: Option<(u32, String)>,
    /// GPU-hours per period, and where that is set.
    pub budget: Option<(GpuHours, String)>,
    /// The pooled budgets of the user's groups (`gpu_hours_per_group`): each group's name and
    /// budget.
    pub group_budgets: Vec<(String, GpuHours)>,
}

impl LimitSettings {
    /// `[limits]`'s own per-user caps: what applies where no override does.
    fn defaults(&self) -> UserCaps {
        UserCaps {
            max_gpus_per_user: self.max_gpus_per_user,
            max_cpus_per_user: self.max_cpus_per_user,
            max_mem_per_user: self.max_mem_per_user,
            max_queued_per_user: self.max_queued_per_user,
            max_gpus_per_job: self.max_gpus_per_job,
            gpu_hours_per_user: self.gpu_hours_per_user,
            gpu_hours_per_group: None,
        }
    }

    /// Whether any cap on users or sessions is set (else the scheduler skips limits).
    pub fn caps_anything(&self) -> bool {
        self.defaults() != UserCaps::default()
            || self.session_cap().is_some()
            || !self.users.is_empty()
            || !self.groups.is_empty()
    }

    /// What an agent session may hold at once, if anything is capped.
    pub fn session_cap(&self) -> Option<baton_core::limits::Cap> {
        let cap = baton_core::limits::Cap {
            gpus: self.max_gpus_per_session,
            cpus: self.max_cpus_per_session,
            mem: self.max_mem_per_session,
        };
        (!cap.is_unlimited()).then_some(cap)
    }

    /// The caps of user `name`, a member of the groups named `groups`: each from the user's own
    /// entry, else the first of its groups (by name) that sets it, else `[limits]`.
    pub fn caps_for(&self, name: &str, groups: &[String]) -> ResolvedCaps {
        let mut layers: Vec<(String, &UserCaps)> = Vec::new();
        if let Some(own) = self.users.get(name) {
            layers.push((format!("[limits.users.{name}]"), own));
        }
        for (group, caps) in &self.groups {
            if groups.contains(group) {
                layers.push((format!("[limits.groups.{group}]"), caps));
            }
        }
        let base = self.defaults();
        layers.push(("[limits]".to_string(), &base));
        // The value of one key, and the layer it came from.
        fn pick<T: Copy>(
            layers: &[(String, &UserCaps)],
            key: impl Fn(&UserCaps) -> Option<T>,
        ) -> Option<(T, String)> {
            layers
                .iter()
                .find_map(|(source, caps)| key(caps).map(|v| (v, source.clone())))
        }
        let gpus = pick(&layers, |c| c.max_gpus_per_user);
        let cpus = pick(&layers, |c| c.max_cpus_per_user);
        let mem = pick(&layers, |c| c.max_mem_per_user);
        fn from<T>(value: &Option<(T, String)>) -> String {
            value.as_ref().map_or_else(String::new, |v| v.1.clone())
        }
        let held = baton_core::limits::AccountCap {
            who: name.to_string(),
            cap: baton_core::limits::Cap {
                gpus: gpus.as_ref().map(|g| g.0),
                cpus: cpus.as_ref().map(|c| c.0),
                mem: mem.as_ref().map(|m| m.0),
            },
            gpus_from: from(&gpus),
            cpus_from: from(&cpus),
            mem_from: from(&mem),
        };
        ResolvedCaps {
            held: (!held.cap.is_unlimited()).then_some(held),
            max_queued: pick(&layers, |c| c.max_queued_per_user),
            max_gpus_per_job: pick(&layers, |c| c.max_gpus_per_job),
            budget: pick(&layers, |c| c.gpu_hours_per_user),
            group_budgets: self
                .groups
                .iter()
                .filter(|(group, _)| groups.contains(group))
                .filter_map(|(group, caps)| Some((group.clone(), caps.gpu_hours_per_group?)))
                .collect(),
        }
    }
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            min_priority: -100,
            max_priority: 100,
            admins: Vec::new(),
            connections: 1024,
            connections_per_user: 128,
            request_timeout: 10_000,
            max_gpus_per_user: None,
            max_cpus_per_user: None,
            max_mem_per_user: None,
            max_queued_per_user: None,
            max_gpus_per_job: None,
            max_gpus_per_session: None,
            max_cpus_per_session: None,
            max_mem_per_session: None,
            gpu_hours_per_user: None,
            budget_period: Default::default(),
            budget_mode: Default::default(),
            max_reserved_gpu_hours_per_user: None,
            users: Default::default(),
            groups: Default::default(),
        }
    }
}

/// What one connection to the API socket may hold and for how long, and how many there may be
/// (the accept loop enforces them, `daemon/server.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub total: usize,
    pub per_user: usize,
    pub request_timeout: std::time::Duration,
}

impl LimitSettings {
    /// What the API socket's accept loop enforces.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            total: self.connections,
            per_user: self.connections_per_user,
            request_timeout: std::time::Duration::from_millis(self.request_timeout.max(0) as u64),
        }
    }
}

/// `[retries]`: how far `--retries` may go, and how long a failed job waits before each new
/// attempt (doubling from `delay` up to `max_delay`), so a job that fails at once never re-runs
/// in a tight loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// The most retries a job may ask for.
    pub max: u32,
    /// The wait before the first retry.
    #[serde(with = "baton_core::units::serde_duration")]
    pub delay: Millis,
    /// The longest wait between two attempts.
    #[serde(with = "baton_core::units::serde_duration")]
    pub max_delay: Millis,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max: 100,
            delay: 1_000,
            max_delay: 300_000,
        }
    }
}

impl RetrySettings {
    /// How long a job waits after its `failed_attempts`-th failure.
    pub fn delay_after(&self, failed_attempts: u32) -> Millis {
        baton_core::retry_delay(failed_attempts, self.delay, self.max_delay)
    }
}

/// `[daemon]`: how the daemon runs, whoever starts it (`baton serve`, or `baton submit` starting
/// one in the background).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonSettings {
    /// How every process of a job is held and ended: `auto` (a cgroup v2 per job where the
    /// daemon may make one, else the supervisor as child subreaper), `cgroup` (or refuse to
    /// start), `subreaper`.
    pub containment: crate::executor::contain::Setting,
    /// Simulated GPUs instead of NVML (as `baton serve --sim-gpus N`).
    pub sim_gpus: Option<u32>,
    /// Also serve Prometheus metrics over TCP here (as `--metrics-addr`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Serve the dashboard here (as `--web-addr`), e.g. 127.0.0.1:8080.
    pub web_addr: Option<std::net::SocketAddr>,
    /// SIGTERM-to-SIGKILL grace when a job is cancelled or ends (as `--grace`; default 30s).
    #[serde(with = "baton_core::units::serde_opt_duration")]
    pub grace: Option<Millis>,
    /// How long ended jobs stay in `baton status` without `--all` (as `--recent`; default 1h).
    #[serde(with = "baton_core::units::serde_opt_duration")]
    pub recent: Option<Millis>,
    /// At most this many of those ended jobs in `baton status` without `--all` (default 10;
    /// a line says how many more there are).
    pub recent_shown: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Reads the settings at `path`; a missing file means all defaults.
pub fn load(path: &Path) -> Result<Settings, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Settings::default()),
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    parse(&text, path)
}

/// Parses the text of a settings file named `path` (for messages).
pub fn parse(text: &str, path: &Path) -> Result<Settings, ConfigError> {
    let settings: Settings = toml::from_str(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| line_column(text, span.start))
            .unwrap_or((1, 1));
        ConfigError::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })?;
    settings
        .waste
        .validate()
        .map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let l = &settings.limits;
    if l.min_priority > l.max_priority {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "[limits] min_priority ({}) is above max_priority ({})",
                l.min_priority, l.max_priority
            ),
        });
    }
    if l.connections == 0 || l.connections_per_user == 0 || l.request_timeout < 100 {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: "[limits] connections and connections_per_user must be at least 1, and \
                      request_timeout at least 100ms"
                .into(),
        });
    }
    if let Some(user) = l
        .users
        .iter()
        .find_map(|(name, caps)| caps.gpu_hours_per_group.map(|_| name))
    {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "[limits.users.{user}] gpu_hours_per_group: a budget a group's members share \
                 belongs under [limits.groups.NAME] (a user's own is gpu_hours_per_user)"
            ),
        });
    }
    if l.admins.iter().any(|a| a.trim().is_empty()) {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: "[limits] admins: a user name may not be empty".into(),
        });
    }
    if settings.resources.default_cpus == 0 {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: "[resources] default_cpus must be at least 1".into(),
        });
    }
    settings
        .retention
        .validate()
        .map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let sw = &settings.sweeps;
    if sw.max_runs == 0
        || sw.early_failures == 0
        || !(sw.early_failure_share > 0.0 && sw.early_failure_share <= 1.0)
    {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: "[sweeps] max_runs and early_failures must be at least 1, and \
                      early_failure_share between 0 (excluded) and 1"
                .into(),
        });
    }
    let r = &settings.retries;
    if r.delay < 0 || r.max_delay < r.delay {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "[retries] max_delay ({}) must be at least delay ({})",
                baton_core::units::duration_text(r.max_delay),
                baton_core::units::duration_text(r.delay)
            ),
        });
    }
    Ok(settings)
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::waste::WasteMode;

    fn parse_str(text: &str) -> Result<Settings, ConfigError> {
        parse(text, Path::new("config.toml"))
    }

    #[test]
    fn limits_resolve_a_users_own_entry_then_their_groups_then_the_defaults() {
        let s = parse_str(
            "[limits]\nmax_gpus_per_user = 2\nmax_mem_per_user = \"64G\"\nmax_queued_per_user = 100\n\n\
             [limits.users.alice]\nmax_gpus_per_user = 6\n\n\
             [limits.groups.lab]\nmax_gpus_per_user = 4\nmax_queued_per_user = 500\n\n\
             [limits.groups.zoo]\nmax_gpus_per_user = 1\nmax_gpus_per_job = 1\n",
        )
        .unwrap();
        let l = &s.limits;
        assert!(l.caps_anything());
        let alice = l.caps_for("alice", &["lab".into()]);
        let held = alice.held.unwrap();
        assert_eq!(held.cap.gpus, Some(6));
        assert_eq!(held.gpus_from, "[limits.users.alice]");
        assert_eq!(
            (held.cap.mem, held.mem_from.as_str()),
            (Some(64 << 30), "[limits]")
        );
        assert_eq!(
            alice.max_queued,
            Some((500, "[limits.groups.lab]".to_string()))
        );
        let bob = l.caps_for("bob", &["zoo".into(), "lab".into()]);
        assert_eq!(bob.held.unwrap().cap.gpus, Some(4), "lab comes before zoo");
        assert_eq!(
            bob.max_gpus_per_job,
            Some((1, "[limits.groups.zoo]".to_string()))
        );
        let carol = l.caps_for("carol", &[]);
        assert_eq!(carol.held.unwrap().cap.gpus, Some(2));
        assert_eq!(carol.max_gpus_per_job, None);
        assert!(!parse_str("").unwrap().limits.caps_anything());
        match parse_str("[limits]\nmax_gpus_per_user = \"two\"\n").unwrap_err() {
            ConfigError::Parse { line, .. } => assert_eq!(line, 2),
            other => panic!("{other}"),
        }
        match parse_str("[limits.users.alice]\nmax_gpus = 2\n").unwrap_err() {
            ConfigError::Parse { line, message, .. } => {
                assert!(
                    line == 2 && message.contains("unknown field `max_gpus`"),
                    "{message}"
                )
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_missing_file_is_all_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let s = load(&dir.path().join("config.toml")).unwrap();
        assert_eq!(s.waste.mode, WasteMode::DryRun);
        assert_eq!(s.waste.sample_interval, 5_000);
    }

    #[test]
    fn the_waste_section_is_read() {
        let s = parse_str(
            "[waste]\nmode = \"enforce\"\nsample_interval = \"1s\"\ngrace = \"2s\"\n\n\
             [waste.zombie]\nmin_mem = \"2GiB\"\nafter = \"3s\"\n\n\
             [waste.idle_job]\nmax_util = 3\nwarn_after = \"4s\"\nact_after = \"8s\"\n\n\
             [waste.allow]\nusers = [\"alice\"]\ntags = [\"serving\"]\n",
        )
        .unwrap();
        let w = &s.waste;
        assert_eq!(w.mode, WasteMode::Enforce);
        assert_eq!((w.sample_interval, w.grace), (1_000, 2_000));
        assert_eq!((w.zombie.min_mem, w.zombie.after), (2 << 30, 3_000));
        assert_eq!(w.idle_job.max_util, 3.0);
        assert_eq!(
            (w.idle_job.warn_after, w.idle_job.act_after),
            (4_000, 8_000)
        );
        assert_eq!(w.allow.users, ["alice"]);
    }

    #[test]
    fn typos_and_bad_values_name_the_line_and_column() {
        let err = parse_str("[waste]\nmode = \"enforce\"\n\n[waste.zombi]\nafter = \"1m\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config.toml:4:"), "{err}");
        assert!(err.contains("zombi"), "{err}");
        let err = parse_str("[waste]\nmode = \"kill-everything\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config.toml:2:8"), "{err}");
        let err = parse_str("[waste.idle_job]\nwarn_after = \"2h\"\nact_after = \"1h\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("warn_after"), "{err}");
        let err = parse_str("[wast]\n").unwrap_err().to_string();
        assert!(err.starts_with("config.toml:1:"), "{err}");
    }

    #[test]
    fn the_daemon_section_holds_what_serve_takes_as_flags() {
        let d = parse_str(
            "[daemon]\nsim_gpus = 4\nmetrics_addr = \"127.0.0.1:9464\"\ngrace = \"5s\"\n\
             recent = \"2h\"\ncontainment = \"subreaper\"\n",
        )
        .unwrap()
        .daemon;
        assert_eq!(d.sim_gpus, Some(4));
        assert_eq!(d.metrics_addr, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!((d.grace, d.recent), (Some(5_000), Some(7_200_000)));
        assert_eq!(d.containment, crate::executor::contain::Setting::Subreaper);
        let d = parse_str("").unwrap().daemon;
        assert_eq!((d.sim_gpus, d.grace, d.recent), (None, None, None));
        let err = parse_str("[daemon]\nsim_gpu = 4\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("config.toml:2:") && err.contains("sim_gpu"),
            "{err}"
        );
    }

    #[test]
    fn resources_come_from_the_machine_less_what_is_kept() {
        let r = parse_str("").unwrap().resources;
        let host = r.host(None, None, (16, 64 << 30)).unwrap();
        assert_eq!(
            (
                host.capacity.cpus,
                host.capacity.mem,
                host.default_cpus,
                host.default_mem
            ),
            (16, 64 << 30, 1, 0)
        );
        let r = parse_str(
            "[resources]\ncpus = 12\nreserve_cpus = 2\nreserve_memory = \"4GiB\"\n\
             default_cpus = 2\ndefault_memory = \"1GiB\"\n",
        )
        .unwrap()
        .resources;
        let host = r.host(None, None, (16, 64 << 30)).unwrap();
        assert_eq!(
            (
                host.capacity.cpus,
                host.capacity.mem,
                host.default_cpus,
                host.default_mem
            ),
            (10, 60 << 30, 2, 1 << 30)
        );
        // The flags win over the file.
        let host = r.host(Some(4), Some(8 << 30), (16, 64 << 30)).unwrap();
        assert_eq!((host.capacity.cpus, host.capacity.mem), (2, 4 << 30));
        let err = r.host(Some(2), None, (16, 64 << 30)).unwrap_err();
        assert!(err.contains("no core for jobs"), "{err}");
        let err = parse_str("[resources]\ndefault_cpus = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("default_cpus"), "{err}");
        let err = parse_str("[resources]\nmemory = \"lots\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config.toml:2:"), "{err}");
    }

    #[test]
    fn retention_keeps_rows_90_days_and_outputs_30_unless_told() {
        let s = parse_str("").unwrap();
        assert_eq!(s.retention, crate::history::retention::Retention::default());
        assert_eq!(s.daemon.recent_shown, None);
        let s = parse_str(
            "[retention]\njobs = \"7d\"\noutputs = \"1d\"\n\n[daemon]\nrecent_shown = 3\n",
        )
        .unwrap();
        assert_eq!(
            (s.retention.jobs, s.retention.outputs, s.daemon.recent_shown),
            (7 * 86_400_000, 86_400_000, Some(3))
        );
        let err = parse_str("[retention]\njobs = \"1d\"\noutputs = \"2d\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("outputs") && err.contains("jobs"), "{err}");
        let err = parse_str("[retention]\nrows = \"1d\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("config.toml:2:"), "{err}");
    }

    #[test]
    fn limits_default_to_a_priority_range() {
        let l = parse_str("").unwrap().limits;
        assert_eq!((l.min_priority, l.max_priority), (-100, 100));
        let l = parse_str("[limits]\nmax_priority = 10\nadmins = [\"alice\"]\n")
            .unwrap()
            .limits;
        assert_eq!(
            (l.min_priority, l.max_priority, l.admins),
            (-100, 10, vec!["alice".into()])
        );
        let err = parse_str("[limits]\nmin_priority = 5\nmax_priority = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("min_priority"), "{err}");
    }

    #[test]
    fn retries_have_a_cap_and_a_backoff() {
        let r = parse_str("").unwrap().retries;
        assert_eq!((r.max, r.delay, r.max_delay), (100, 1_000, 300_000));
        assert_eq!(
            [1, 2, 3, 10, 50].map(|n| r.delay_after(n)),
            [1_000, 2_000, 4_000, 300_000, 300_000]
        );
        let r = parse_str("[retries]\nmax = 5\ndelay = \"250ms\"\nmax_delay = \"2s\"\n")
            .unwrap()
            .retries;
        assert_eq!((r.max, r.delay_after(1), r.delay_after(9)), (5, 250, 2_000));
        let err = parse_str("[retries]\ndelay = \"1m\"\nmax_delay = \"1s\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_delay"), "{err}");
        let err = parse_str("[retries]\ndelay = 5\n").unwrap_err().to_string();
        assert!(err.starts_with("config.toml:2:"), "{err}");
    }
}
