//! Limits on what one account holds at once (issue 19): a user's GPUs, CPUs and memory
//! (`[limits] max_gpus_per_user` ...), and an agent session's (`max_gpus_per_session` ...), so
//! that one user's agent cannot take the whole machine. Pure data: the daemon says whose each
//! job is and what each account may hold; the scheduling pass ([`crate::scheduler`]) keeps a
//! job waiting while starting it would take its owner (or its session) past a cap, with a
//! reason that names the cap, and [`Limits::never_fits`] says at submission that a request is
//! over a cap on its own.
//!
//! What counts as held: the running jobs' requests and the GPUs an atomic workflow's admission
//! reserved (they are its owner's as surely as running ones). A job waiting at a limit takes no
//! reservation: it is not ready, as a throttled sweep run is not.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::{JobId, ResourceRequest, RunningJob};
use crate::units::format_size;

/// Whose a job is, for limits: its owner, and the agent session that submitted it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Account {
    User(u32),
    /// `claude:ID`, `codex:ID`, ... as the job's session says.
    Session(String),
    /// A group whose members share a GPU-hour budget (`gpu_hours_per_group`); it has no cap
    /// on what it holds at once.
    Group(String),
}

/// The most an account may hold at once (`None`: no cap on that resource).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cap {
    pub gpus: Option<u32>,
    pub cpus: Option<u32>,
    /// Bytes of host memory.
    pub mem: Option<u64>,
}

impl Cap {
    pub fn is_unlimited(&self) -> bool {
        self.gpus.is_none() && self.cpus.is_none() && self.mem.is_none()
    }
}

/// An account's cap, and what to call it in a reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountCap {
    /// `alice`, `agent session claude:abc`.
    pub who: String,
    pub cap: Cap,
    /// Where each resource's cap is set, before its key: `[limits]`, `[limits.users.alice]`.
    pub gpus_from: String,
    pub cpus_from: String,
    pub mem_from: String,
}

impl AccountCap {
    /// `cap`, all of it set in `source`.
    pub fn new(who: impl Into<String>, source: &str, cap: Cap) -> AccountCap {
        AccountCap {
            who: who.into(),
            cap,
            gpus_from: source.to_string(),
            cpus_from: source.to_string(),
            mem_from: source.to_string(),
        }
    }
}

/// Every job's accounts and every capped account's cap.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// The accounts of each job, running or queued (its owner, then its session if any).
    pub accounts_of: HashMap<JobId, Vec<Account>>,
    /// Only accounts with a cap appear.
    pub caps: HashMap<Account, AccountCap>,
    /// The GPU-hour budget of each account that has one, with what it used this period.
    pub budgets: HashMap<Account, BudgetUse>,
}

/// The stretch of time a GPU-hour budget covers (`[limits] budget_period`): it starts again at
/// the daemon's local midnight, on Monday, or on the first of the month.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    #[default]
    Week,
    Month,
}

impl Period {
    /// `day`, `week`, `month`, as in "this week".
    pub fn noun(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        }
    }
}

/// An account's GPU-hours this period against its budget: every GPU a job held counts for the
/// time it held it, ended attempts and running ones alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetUse {
    /// `alice`.
    pub who: String,
    /// GPU-milliseconds held since the period began.
    pub used_ms: i64,
    /// The budget, in GPU-milliseconds.
    pub budget_ms: i64,
    pub period: Period,
    /// When the period started and when the next begins.
    pub since: crate::Millis,
    pub resets_at: crate::Millis,
    /// `resets_at` for people, in the daemon's local time: `Monday 2026-12-14 00:00`.
    pub resets: String,
    /// The setting, as config.toml spells it: `[limits] gpu_hours_per_user = 40`.
    pub setting: String,
}

impl BudgetUse {
    /// Used up: the account's queued jobs wait for the next period (or are refused).
    pub fn spent(&self) -> bool {
        self.used_ms >= self.budget_ms
    }
}

impl fmt::Display for BudgetUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} has used {} of {} GPU-hours this {}; it resets {} ({})",
            self.who,
            gpu_hours(self.used_ms),
            gpu_hours(self.budget_ms),
            self.period.noun(),
            self.resets,
            self.setting
        )
    }
}

/// GPU-milliseconds as GPU-hours for people: `40`, `12.5`, `0.003`.
pub fn gpu_hours(ms: i64) -> String {
    let hours = ms as f64 / 3_600_000.0;
    let text = if hours.abs() >= 10.0 {
        format!("{hours:.1}")
    } else if hours.abs() >= 1.0 {
        format!("{hours:.2}")
    } else {
        format!("{hours:.4}")
    };
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text.is_empty() || text == "-" {
        "0".to_string()
    } else {
        text.to_string()
    }
}

/// What an account holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub gpus: u64,
    pub cpus: u64,
    pub mem: u64,
}

/// A capped resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    Gpus,
    Cpus,
    Memory,
}

/// A cap a job would go past.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitHit {
    pub who: String,
    pub resource: Resource,
    /// What the account holds now, what the job asks for, and the cap.
    pub holds: u64,
    pub asks: u64,
    pub max: u64,
    /// The setting, as config.toml spells it: `[limits] max_gpus_per_user = 4`.
    pub setting: String,
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let amount = |n: u64| match self.resource {
            Resource::Gpus => format!("{n} GPU{}", if n == 1 { "" } else { "s" }),
            Resource::Cpus => format!("{n} CPU{}", if n == 1 { "" } else { "s" }),
            Resource::Memory => format!("{} of memory", format_size(n)),
        };
        write!(
            f,
            "{} already holds {} of at most {}, and this job asks for {} ({})",
            self.who,
            match self.resource {
                Resource::Memory => format_size(self.holds),
                _ => self.holds.to_string(),
            },
            amount(self.max),
            amount(self.asks),
            self.setting
        )
    }
}

impl Limits {
    pub fn is_empty(&self) -> bool {
        self.caps.is_empty()
    }

    /// What each capped account holds through `holders` (running jobs, and jobs with GPUs
    /// reserved).
    pub fn held(&self, holders: &[RunningJob]) -> HashMap<Account, Held> {
        let mut held: HashMap<Account, Held> = HashMap::new();
        if self.is_empty() {
            return held;
        }
        for job in holders {
            self.take(job.id, &job.request, &mut held);
        }
        held
    }

    /// Counts `request` of job `job` as held by its capped accounts.
    pub fn take(&self, job: JobId, request: &ResourceRequest, held: &mut HashMap<Account, Held>) {
        for account in self.accounts_of.get(&job).into_iter().flatten() {
            if self.caps.contains_key(account) {
                let h = held.entry(account.clone()).or_default();
                h.gpus += u64::from(request.count);
                h.cpus += u64::from(request.cpus);
                h.mem += request.mem;
            }
        }
    }

    /// The first cap starting `job` with `request` would take one of its accounts past.
    pub fn check(
        &self,
        job: JobId,
        request: &ResourceRequest,
        held: &HashMap<Account, Held>,
    ) -> Result<(), LimitHit> {
        for account in self.accounts_of.get(&job).into_iter().flatten() {
            let Some(cap) = self.caps.get(account) else {
                continue;
            };
            let now = held.get(account).copied().unwrap_or_default();
            if let Some(hit) = over(account, cap, now, request) {
                return Err(hit);
            }
        }
        Ok(())
    }

    /// The used-up budget of one of `job`'s accounts, if any: the job waits for its period to
    /// end.
    pub fn budget_spent(&self, job: JobId) -> Option<&BudgetUse> {
        self.accounts_of
            .get(&job)
            .into_iter()
            .flatten()
            .find_map(|account| self.budgets.get(account).filter(|b| b.spent()))
    }

    /// The cap `request` is over on its own, for an account holding nothing: such a job can
    /// never start, and is refused at submission.
    pub fn never_fits(
        account: &Account,
        cap: &AccountCap,
        request: &ResourceRequest,
    ) -> Option<LimitHit> {
        over(account, cap, Held::default(), request)
    }
}

/// The key of `resource`'s cap for `account`, as config.toml spells it.
fn key(account: &Account, resource: Resource) -> &'static str {
    match (account, resource) {
        (Account::User(_), Resource::Gpus) => "max_gpus_per_user",
        (Account::User(_), Resource::Cpus) => "max_cpus_per_user",
        (Account::User(_), Resource::Memory) => "max_mem_per_user",
        (Account::Session(_), Resource::Gpus) => "max_gpus_per_session",
        (Account::Session(_), Resource::Cpus) => "max_cpus_per_session",
        (Account::Session(_), Resource::Memory) => "max_mem_per_session",
        // A group has a budget only, never a cap on what it holds, so no reason names one.
        (Account::Group(_), _) => "gpu_hours_per_group",
    }
}

fn over(
    account: &Account,
    cap: &AccountCap,
    held: Held,
    request: &ResourceRequest,
) -> Option<LimitHit> {
    let checks = [
        (
            Resource::Gpus,
            cap.cap.gpus.map(u64::from),
            held.gpus,
            u64::from(request.count),
            &cap.gpus_from,
        ),
        (
            Resource::Cpus,
            cap.cap.cpus.map(u64::from),
            held.cpus,
            u64::from(request.cpus),
            &cap.cpus_from,
        ),
        (
            Resource::Memory,
            cap.cap.mem,
            held.mem,
            request.mem,
            &cap.mem_from,
        ),
    ];
    checks
        .into_iter()
        .find_map(|(resource, max, holds, asks, source)| {
            let max = max?;
            (asks > 0 && holds + asks > max).then(|| LimitHit {
                who: cap.who.clone(),
                resource,
                holds,
                asks,
                max,
                setting: format!(
                    "{} {} = {}",
                    source,
                    key(account, resource),
                    match resource {
                        Resource::Memory => format!("\"{}\"", format_size(max)),
                        _ => max.to_string(),
                    }
                ),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_hours_read_as_people_write_them() {
        assert_eq!(gpu_hours(40 * 3_600_000), "40");
        assert_eq!(gpu_hours(45_000_000), "12.5");
        assert_eq!(gpu_hours(10_800), "0.003");
        assert_eq!(gpu_hours(0), "0");
        assert_eq!(gpu_hours(1_800), "0.0005");
    }

    fn limits(cap: Cap) -> Limits {
        let alice = Account::User(1000);
        let session = Account::Session("claude:s1".into());
        Limits {
            accounts_of: [
                (JobId(1), vec![alice.clone(), session.clone()]),
                (JobId(2), vec![alice.clone()]),
                (JobId(3), vec![Account::User(1001)]),
            ]
            .into_iter()
            .collect(),
            caps: [
                (alice, AccountCap::new("alice", "[limits]", cap)),
                (
                    session,
                    AccountCap::new(
                        "agent session claude:s1",
                        "[limits]",
                        Cap {
                            gpus: Some(1),
                            ..Cap::default()
                        },
                    ),
                ),
            ]
            .into_iter()
            .collect(),
            budgets: HashMap::new(),
        }
    }

    fn running(id: u64, gpus: u32) -> RunningJob {
        RunningJob {
            id: JobId(id),
            gpus: (0..gpus).collect(),
            request: ResourceRequest::whole(gpus),
            ends_by: None,
        }
    }

    #[test]
    fn a_job_waits_while_it_would_take_its_owner_past_a_cap_and_says_which() {
        let l = limits(Cap {
            gpus: Some(4),
            ..Cap::default()
        });
        let held = l.held(&[running(2, 3), running(3, 4)]);
        assert_eq!(held[&Account::User(1000)].gpus, 3, "only alice's own count");
        assert!(l.check(JobId(2), &ResourceRequest::whole(1), &held).is_ok());
        let hit = l
            .check(JobId(2), &ResourceRequest::whole(2), &held)
            .unwrap_err();
        assert_eq!(
            hit.to_string(),
            "alice already holds 3 of at most 4 GPUs, and this job asks for 2 GPUs \
             ([limits] max_gpus_per_user = 4)"
        );
        assert!(
            l.check(JobId(3), &ResourceRequest::whole(4), &held).is_ok(),
            "bob has no cap"
        );
    }

    #[test]
    fn a_session_has_its_own_cap_within_its_owners() {
        let l = limits(Cap::default());
        let mut held = l.held(&[]);
        assert!(l.check(JobId(1), &ResourceRequest::whole(1), &held).is_ok());
        l.take(JobId(1), &ResourceRequest::whole(1), &mut held);
        let hit = l
            .check(JobId(1), &ResourceRequest::whole(1), &held)
            .unwrap_err();
        assert!(
            hit.to_string()
                .starts_with("agent session claude:s1 already holds 1")
                && hit.setting == "[limits] max_gpus_per_session = 1",
            "{hit}"
        );
    }

    #[test]
    fn memory_and_cpus_are_capped_too_and_a_request_over_a_cap_never_fits() {
        let cap = AccountCap::new(
            "alice",
            "[limits.users.alice]",
            Cap {
                gpus: None,
                cpus: Some(8),
                mem: Some(64 << 30),
            },
        );
        let mut request = ResourceRequest::whole(0);
        request.mem = 100 << 30;
        let hit = Limits::never_fits(&Account::User(1000), &cap, &request).unwrap();
        assert_eq!(hit.resource, Resource::Memory);
        assert_eq!(
            hit.setting,
            "[limits.users.alice] max_mem_per_user = \"64 GiB\""
        );
        request.mem = 0;
        request.cpus = 8;
        assert!(Limits::never_fits(&Account::User(1000), &cap, &request).is_none());
        request.cpus = 9;
        assert_eq!(
            Limits::never_fits(&Account::User(1000), &cap, &request)
                .unwrap()
                .resource,
            Resource::Cpus
        );
    }
}
