//! [`WasteEngine`]: the state the rules keep between snapshots (how long each condition has held,
//! how far each target's ladder went, each job's utilisation series) and the one function that
//! turns a new snapshot into decisions. The ladders and their timings are described in the
//! module above ([`super`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::config::{AllowList, WasteConfig, duration_text};
use super::types::{
    Action, Decision, Evidence, EvidenceSample, GpuObs, JobObs, MAX_EVIDENCE_SAMPLES, ProcOwner,
    Rule, Snapshot,
};
use crate::model::{JobId, Millis};
use crate::units::{format_duration, format_size};

/// The waste rules over a stream of snapshots. Feed it every sample, in time order.
pub struct WasteEngine {
    config: WasteConfig,
    last_at: Option<Millis>,
    /// The last [`JobObs`] seen for each job, so that leftovers of a job the daemon no longer
    /// lists can still be attributed to their owner and checked for protection.
    jobs: BTreeMap<JobId, JobObs>,
    idle: BTreeMap<JobId, IdleState>,
    zombies: BTreeMap<u32, ProcState>,
    held: BTreeMap<u32, ProcState>,
    /// Running jobs that said they had finished and still hold GPU memory, by job.
    finished: BTreeMap<JobId, ProcState>,
    /// Skips already logged: once per job per rule (per process for strangers).
    skipped: BTreeSet<(Rule, SkipKey)>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum SkipKey {
    Job(JobId),
    Pid(u32),
}

/// How far a target's ladder went. Process ladders use only `Watching`, `Termed` and `Done`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    Watching,
    Warned,
    WarnedAgain,
    /// SIGTERM decided at this time; SIGKILL follows `grace` later.
    Termed(Millis),
    /// The ladder ended with SIGKILL (or a skip); nothing more until the condition resets.
    Done,
}

struct IdleState {
    /// Windows only count from here: the job's first observation, or the last time a busy spell
    /// reset its ladder (so a job hovering around the threshold is warned at most once per
    /// `warn_after`, not on every crossing).
    clock_from: Millis,
    /// Mean utilisation of the job's GPUs per sample, covering at most `act_after`.
    history: VecDeque<UtilPoint>,
    step: Step,
}

#[derive(Clone, Copy)]
struct UtilPoint {
    at: Millis,
    util: f64,
    mem: u64,
}

struct WindowStats {
    mean: f64,
}

impl IdleState {
    /// The mean over the trailing window `w`, if the samples cover it: the job started and was
    /// watched at least `w` ago, and at least two samples with a utilisation span half of it (so a
    /// lone sample after a long gap in the driver's data decides nothing).
    fn window(&self, now: Millis, w: Millis, started_at: Millis) -> Option<WindowStats> {
        if now - self.clock_from < w || now - started_at < w {
            return None;
        }
        let from = now - w;
        let (mut sum, mut count, mut first, mut last) = (0.0, 0usize, now, Millis::MIN);
        for p in self.history.iter().rev().take_while(|p| p.at >= from) {
            sum += p.util;
            count += 1;
            first = first.min(p.at);
            last = last.max(p.at);
        }
        (count >= 2 && last - first >= w / 2).then(|| WindowStats {
            mean: sum / count as f64,
        })
    }

    fn evidence_samples(&self, from: Millis) -> Vec<EvidenceSample> {
        spread(
            self.history
                .iter()
                .filter(|p| p.at >= from)
                .map(|p| EvidenceSample {
                    at: p.at,
                    gpu: None,
                    util: Some(p.util),
                    mem: Some(p.mem),
                })
                .collect(),
        )
    }
}

struct ProcState {
    job: Option<JobId>,
    /// First seen holding at least the rule's `min_mem`, without a break since.
    since: Millis,
    history: VecDeque<EvidenceSample>,
    step: Step,
}

impl ProcState {
    fn new(now: Millis, job: Option<JobId>) -> Self {
        ProcState {
            job,
            since: now,
            history: VecDeque::new(),
            step: Step::Watching,
        }
    }

    fn record(&mut self, sample: EvidenceSample, keep_from: Millis) {
        self.history.push_back(sample);
        while self.history.front().is_some_and(|s| s.at < keep_from) {
            self.history.pop_front();
        }
    }

    /// The first rung of a process's ladder, both rungs in one observation: notify, then
    /// SIGTERM (SIGKILL follows `grace` later, see [`ProcState::kill_after_grace`]).
    #[allow(clippy::too_many_arguments)]
    fn notify_and_term(
        &mut self,
        out: &mut Out,
        target: Target,
        now: Millis,
        grace: Millis,
        base: &str,
        notify: &str,
        evidence: Evidence,
    ) {
        let term = format!(
            "{base}; stopping it (SIGTERM, SIGKILL after {})",
            duration_text(grace)
        );
        out.push(
            target,
            Action::Notify,
            format!("{base}; {notify}"),
            evidence.clone(),
        );
        out.push(target, Action::Sigterm, term, evidence);
        self.step = Step::Termed(now);
    }

    /// The last rung: SIGKILL, once `grace` has passed since SIGTERM and `p` (described as
    /// `who`) still holds at least `min_mem`.
    #[allow(clippy::too_many_arguments)]
    fn kill_after_grace(
        &mut self,
        out: &mut Out,
        target: Target,
        now: Millis,
        grace: Millis,
        min_mem: u64,
        p: &ProcView,
        who: &str,
    ) {
        let Step::Termed(term_at) = self.step else {
            return;
        };
        if now - term_at < grace {
            return;
        }
        let evidence = self.evidence(
            term_at,
            now,
            p.mem,
            format!(
                "still holding ≥ {} {} after SIGTERM",
                format_size(min_mem),
                duration_text(grace)
            ),
        );
        let message = format!(
            "GPU {}: {who} still holds {} {} after SIGTERM; killing it (SIGKILL)",
            p.gpu,
            format_size(p.mem),
            format_duration(now - term_at)
        );
        out.push(target, Action::Sigkill, message, evidence);
        self.step = Step::Done;
    }

    fn evidence(&self, from: Millis, now: Millis, mem: u64, threshold: String) -> Evidence {
        Evidence {
            samples: spread(
                self.history
                    .iter()
                    .filter(|s| s.at >= from)
                    .copied()
                    .collect(),
            ),
            window_ms: now - from,
            mean_util: None,
            mem: Some(mem),
            threshold,
        }
    }
}

/// A process as the rules see it: its owner and the GPU where it holds the most memory.
struct ProcView<'a> {
    owner: ProcOwner,
    user: Option<&'a str>,
    gpu: u32,
    mem: u64,
    gpu_util: Option<f64>,
}

impl ProcView<'_> {
    fn sample(&self, at: Millis) -> EvidenceSample {
        EvidenceSample {
            at,
            gpu: Some(self.gpu),
            util: self.gpu_util,
            mem: Some(self.mem),
        }
    }

    fn who(&self, pid: u32) -> String {
        match self.user {
            Some(user) => format!("pid {pid} (user {user})"),
            None => format!("pid {pid}"),
        }
    }
}

/// Whom a decision is about.
#[derive(Clone, Copy)]
struct Target {
    rule: Rule,
    job: Option<JobId>,
    pid: Option<u32>,
    gpu: Option<u32>,
}

/// Builds decisions with the engine's mode, so every call site marks dry runs the same way.
struct Out {
    at: Millis,
    dry_run: bool,
    decisions: Vec<Decision>,
}

impl Out {
    fn push(&mut self, target: Target, action: Action, message: String, evidence: Evidence) {
        let message = if self.dry_run && action != Action::Skip {
            format!("{message} (dry run: not carried out)")
        } else {
            message
        };
        self.decisions.push(Decision {
            at: self.at,
            rule: target.rule,
            job: target.job,
            pid: target.pid,
            gpu: target.gpu,
            action,
            dry_run: self.dry_run,
            message,
            evidence,
        });
    }
}

impl WasteEngine {
    pub fn new(config: WasteConfig) -> Self {
        WasteEngine {
            config,
            last_at: None,
            jobs: BTreeMap::new(),
            idle: BTreeMap::new(),
            zombies: BTreeMap::new(),
            held: BTreeMap::new(),
            finished: BTreeMap::new(),
            skipped: BTreeSet::new(),
        }
    }

    pub fn config(&self) -> &WasteConfig {
        &self.config
    }

    /// Feeds one snapshot; returns the decisions to record (and, unless `dry_run`, to carry out),
    /// ordered by GPU, pid, job and rule (job-level decisions, which have no GPU, first), and in
    /// ladder order within one target. A snapshot older than the previous one is ignored: the
    /// windows assume time only moves forward.
    pub fn observe(&mut self, snapshot: &Snapshot) -> Vec<Decision> {
        let now = snapshot.at;
        if self.last_at.is_some_and(|last| now < last) {
            return Vec::new();
        }
        self.last_at = Some(now);

        let mut gpus: Vec<&GpuObs> = snapshot.gpus.iter().collect();
        gpus.sort_by_key(|g| g.index);
        let procs = proc_views(&gpus);
        for job in &snapshot.jobs {
            self.jobs.insert(job.id, job.clone());
        }
        let running: BTreeMap<JobId, &JobObs> = snapshot
            .jobs
            .iter()
            .filter(|j| j.running)
            .map(|j| (j.id, j))
            .collect();

        let mut out = Out {
            at: now,
            dry_run: self.config.mode.is_dry_run(),
            decisions: Vec::new(),
        };
        self.zombie_rule(now, &procs, &mut out);
        self.idle_rule(now, &running, &gpus, &mut out);
        self.held_rule(now, &procs, &running, &mut out);
        self.finished_rule(now, &procs, &running, &mut out);
        self.forget(snapshot, &procs);

        let mut decisions = out.decisions;
        // Stable, so one target's rungs keep their ladder order.
        decisions.sort_by_key(|d| (d.gpu, d.pid, d.job, d.rule));
        decisions
    }

    fn zombie_rule(&mut self, now: Millis, procs: &BTreeMap<u32, ProcView>, out: &mut Out) {
        let rule = &self.config.zombie;
        if !rule.enabled {
            self.zombies.clear();
            return;
        }
        let grace = self.config.grace;
        let threshold = format!(
            "a process of no job holding ≥ {} for {}",
            format_size(rule.min_mem),
            duration_text(rule.after)
        );
        let mut seen = BTreeSet::new();
        for (&pid, p) in procs {
            if p.owner != ProcOwner::Stranger || p.mem < rule.min_mem {
                continue;
            }
            seen.insert(pid);
            let st = self
                .zombies
                .entry(pid)
                .or_insert_with(|| ProcState::new(now, None));
            st.record(p.sample(now), now - rule.after - grace);
            let who = p.who(pid);
            let target = Target {
                rule: Rule::Zombie,
                job: None,
                pid: Some(pid),
                gpu: Some(p.gpu),
            };
            match st.step {
                Step::Watching if now - st.since >= rule.after => {
                    let evidence = st.evidence(st.since, now, p.mem, threshold.clone());
                    let base = format!(
                        "GPU {}: {who} holds {} and belongs to no running job, for {}",
                        p.gpu,
                        format_size(p.mem),
                        format_duration(now - st.since)
                    );
                    st.step = Step::Done;
                    if let Some(user) = p
                        .user
                        .filter(|u| self.config.allow.users.iter().any(|a| a == u))
                    {
                        if self.skipped.insert((Rule::Zombie, SkipKey::Pid(pid))) {
                            let message = format!(
                                "{base}; skipped, protected: user {user} is on the allow-list"
                            );
                            out.push(target, Action::Skip, message, evidence);
                        }
                        continue;
                    }
                    let notify = "logged for the admin (audit, metrics, daemon log)";
                    st.notify_and_term(out, target, now, grace, &base, notify, evidence);
                }
                Step::Termed(_) => {
                    st.kill_after_grace(out, target, now, grace, rule.min_mem, p, &who);
                }
                _ => {}
            }
        }
        self.zombies.retain(|pid, _| seen.contains(pid));
    }

    fn idle_rule(
        &mut self,
        now: Millis,
        running: &BTreeMap<JobId, &JobObs>,
        gpus: &[&GpuObs],
        out: &mut Out,
    ) {
        let rule = &self.config.idle_job;
        if !rule.enabled {
            self.idle.clear();
            return;
        }
        let grace = self.config.grace;
        let by_index: BTreeMap<u32, &GpuObs> = gpus.iter().map(|g| (g.index, *g)).collect();
        let mut seen = BTreeSet::new();
        for (&id, job) in running {
            if job.gpus.is_empty() {
                continue;
            }
            seen.insert(id);
            if self.skipped.contains(&(Rule::IdleJob, SkipKey::Job(id))) {
                continue;
            }
            let (mut util_sum, mut util_n, mut mem) = (0.0, 0usize, 0u64);
            for obs in job.gpus.iter().filter_map(|g| by_index.get(g)) {
                mem += obs.mem_used;
                if let Some(u) = obs.util {
                    util_sum += u;
                    util_n += 1;
                }
            }
            let st = self.idle.entry(id).or_insert_with(|| IdleState {
                clock_from: now,
                history: VecDeque::new(),
                step: Step::Watching,
            });
            if util_n > 0 {
                st.history.push_back(UtilPoint {
                    at: now,
                    util: util_sum / util_n as f64,
                    mem,
                });
            }
            let keep_from = now - rule.act_after.max(grace);
            while st.history.front().is_some_and(|p| p.at < keep_from) {
                st.history.pop_front();
            }

            // A busy spell resets the ladder, except between SIGTERM and SIGKILL: the job is
            // already being stopped, and a job busy saving a checkpoint must not escape the kill.
            if !matches!(st.step, Step::Watching | Step::Termed(_))
                && st
                    .window(now, rule.warn_after, job.started_at)
                    .is_some_and(|w| w.mean > rule.max_util)
            {
                st.step = Step::Watching;
                st.clock_from = now;
            }

            let label = job_label(id, Some(job));
            let target = Target {
                rule: Rule::IdleJob,
                job: Some(id),
                pid: None,
                gpu: None,
            };
            let on = gpu_list(&job.gpus);
            let idle_over = |st: &IdleState, w: Millis| {
                st.window(now, w, job.started_at)
                    .filter(|s| s.mean <= rule.max_util)
                    .map(|s| {
                        let evidence = Evidence {
                            samples: st.evidence_samples(now - w),
                            window_ms: w,
                            mean_util: Some(s.mean),
                            mem: Some(mem),
                            threshold: format!(
                                "mean utilisation ≤ {} % over {}",
                                rule.max_util,
                                duration_text(w)
                            ),
                        };
                        let base = format!(
                            "{label} idle on {on}: mean {:.1} % over {}",
                            s.mean,
                            duration_text(w)
                        );
                        (base, evidence)
                    })
            };
            match st.step {
                Step::Watching => {
                    let Some((base, evidence)) = idle_over(st, rule.warn_after) else {
                        continue;
                    };
                    if let Some(reason) = protection(&self.config.allow, job) {
                        self.skipped.insert((Rule::IdleJob, SkipKey::Job(id)));
                        // Protection never lapses, so its series is no longer needed.
                        self.idle.remove(&id);
                        let message = format!("{base}; skipped, protected: {reason}");
                        out.push(target, Action::Skip, message, evidence);
                        continue;
                    }
                    let message = format!("{base}; warning 1 of 2");
                    out.push(target, Action::Notify, message, evidence);
                    st.step = Step::Warned;
                }
                Step::Warned => {
                    let Some((base, evidence)) = idle_over(st, rule.second_warn_after()) else {
                        continue;
                    };
                    let warn = format!(
                        "{base}; warning 2 of 2, it will be stopped after {} idle",
                        duration_text(rule.act_after)
                    );
                    let lower = format!("{base}; lowering its priority");
                    out.push(target, Action::Notify, warn, evidence.clone());
                    out.push(target, Action::Deprioritize, lower, evidence);
                    st.step = Step::WarnedAgain;
                }
                Step::WarnedAgain => {
                    let Some((base, evidence)) = idle_over(st, rule.act_after) else {
                        continue;
                    };
                    let message = format!(
                        "{base}; stopping it (SIGTERM, SIGKILL after {})",
                        duration_text(grace)
                    );
                    out.push(target, Action::Sigterm, message, evidence);
                    st.step = Step::Termed(now);
                }
                Step::Termed(term_at) if now - term_at >= grace => {
                    let since: Vec<f64> = (st.history.iter())
                        .filter(|p| p.at >= term_at)
                        .map(|p| p.util)
                        .collect();
                    let mean_util =
                        (!since.is_empty()).then(|| since.iter().sum::<f64>() / since.len() as f64);
                    let evidence = Evidence {
                        samples: st.evidence_samples(term_at),
                        window_ms: now - term_at,
                        mean_util,
                        mem: Some(mem),
                        threshold: format!("still running {} after SIGTERM", duration_text(grace)),
                    };
                    let message = format!(
                        "{label} still running {} after SIGTERM; killing it (SIGKILL)",
                        format_duration(now - term_at)
                    );
                    out.push(target, Action::Sigkill, message, evidence);
                    st.step = Step::Done;
                }
                Step::Termed(_) | Step::Done => {}
            }
        }
        self.idle.retain(|id, _| seen.contains(id));
    }

    fn held_rule(
        &mut self,
        now: Millis,
        procs: &BTreeMap<u32, ProcView>,
        running: &BTreeMap<JobId, &JobObs>,
        out: &mut Out,
    ) {
        let rule = &self.config.held_after_exit;
        if !rule.enabled {
            self.held.clear();
            return;
        }
        let grace = self.config.grace;
        let threshold = format!(
            "≥ {} still held {} after the job's main process ended",
            format_size(rule.min_mem),
            duration_text(rule.after)
        );
        let mut seen = BTreeSet::new();
        for (&pid, p) in procs {
            // A process that names a job the snapshot does not list as running is a leftover
            // whichever way the daemon classified it: the job list is the authority on running.
            let job = match p.owner {
                ProcOwner::Ended(id) => id,
                ProcOwner::Job(id) if !running.contains_key(&id) => id,
                _ => continue,
            };
            if p.mem < rule.min_mem {
                continue;
            }
            seen.insert(pid);
            let st = self
                .held
                .entry(pid)
                .or_insert_with(|| ProcState::new(now, Some(job)));
            if st.job != Some(job) {
                *st = ProcState::new(now, Some(job));
            }
            st.record(p.sample(now), now - rule.after - grace);
            let meta = self.jobs.get(&job);
            let label = job_label(job, meta);
            let target = Target {
                rule: Rule::HeldAfterExit,
                job: Some(job),
                pid: Some(pid),
                gpu: Some(p.gpu),
            };
            match st.step {
                Step::Watching if now - st.since >= rule.after => {
                    let evidence = st.evidence(st.since, now, p.mem, threshold.clone());
                    let base = format!(
                        "GPU {}: pid {pid} of {label} holds {} for {} after the job's main process ended",
                        p.gpu,
                        format_size(p.mem),
                        format_duration(now - st.since)
                    );
                    st.step = Step::Done;
                    // Protection is a promise: leftovers of a job the engine never saw are not
                    // touched, since whether that job was protected cannot be known.
                    let reason = match meta {
                        None => Some(format!(
                            "no record of job {job}, so its protection cannot be checked"
                        )),
                        Some(m) => protection(&self.config.allow, m),
                    }
                    .or_else(|| {
                        p.user
                            .filter(|u| self.config.allow.users.iter().any(|a| a == u))
                            .map(|u| format!("user {u} is on the allow-list"))
                    });
                    if let Some(reason) = reason {
                        if self
                            .skipped
                            .insert((Rule::HeldAfterExit, SkipKey::Job(job)))
                        {
                            let message = format!("{base}; skipped, protected: {reason}");
                            out.push(target, Action::Skip, message, evidence);
                        }
                        continue;
                    }
                    st.notify_and_term(
                        out,
                        target,
                        now,
                        grace,
                        &base,
                        "telling its owner",
                        evidence,
                    );
                }
                Step::Termed(_) => {
                    let who = format!("pid {pid} of {label}");
                    st.kill_after_grace(out, target, now, grace, rule.min_mem, p, &who);
                }
                _ => {}
            }
        }
        self.held.retain(|pid, _| seen.contains(pid));
    }

    /// Held after finish, for a job that is still running: its output said the work was done
    /// and it then sat quiet with its GPUs idle (`said_finished_at`), yet its processes hold at
    /// least `min_mem` on a GPU. The `held_after_exit` rule's ladder, for the job as a whole,
    /// since its main process is among them: `after` later, `notify` (its owner) and `sigterm`
    /// (a graceful stop of the job, so it ends with the reason), then `sigkill` after `grace`
    /// if it still runs. Printing again ends the claim and resets the ladder.
    fn finished_rule(
        &mut self,
        now: Millis,
        procs: &BTreeMap<u32, ProcView>,
        running: &BTreeMap<JobId, &JobObs>,
        out: &mut Out,
    ) {
        let rule = &self.config.held_after_exit;
        if !rule.enabled {
            self.finished.clear();
            return;
        }
        let grace = self.config.grace;
        let mut seen = BTreeSet::new();
        for (&id, job) in running {
            let Some(said_at) = job.said_finished_at else {
                continue;
            };
            // Where it holds the most: the GPU the message names.
            let Some(held) = procs
                .values()
                .filter(|p| p.owner == ProcOwner::Job(id))
                .max_by_key(|p| (p.mem, std::cmp::Reverse(p.gpu)))
                .filter(|p| p.mem >= rule.min_mem)
            else {
                continue;
            };
            seen.insert(id);
            let st = self
                .finished
                .entry(id)
                .or_insert_with(|| ProcState::new(now.max(said_at), Some(id)));
            st.record(held.sample(now), now - rule.after - grace);
            let label = job_label(id, Some(job));
            let target = Target {
                rule: Rule::HeldAfterExit,
                job: Some(id),
                pid: None,
                gpu: Some(held.gpu),
            };
            match st.step {
                Step::Watching if now - st.since >= rule.after => {
                    let threshold = format!(
                        "≥ {} still held {} after the job said it had finished",
                        format_size(rule.min_mem),
                        duration_text(rule.after)
                    );
                    let evidence = st.evidence(st.since, now, held.mem, threshold);
                    let base = format!(
                        "GPU {}: {label} holds {} though its output said it had finished and it \
                         has printed nothing since, its GPUs idle (finished-but-alive)",
                        held.gpu,
                        format_size(held.mem)
                    );
                    st.step = Step::Done;
                    if let Some(reason) = protection(&self.config.allow, job) {
                        if self.skipped.insert((Rule::HeldAfterExit, SkipKey::Job(id))) {
                            let message = format!("{base}; skipped, protected: {reason}");
                            out.push(target, Action::Skip, message, evidence);
                        }
                        continue;
                    }
                    st.notify_and_term(
                        out,
                        target,
                        now,
                        grace,
                        &base,
                        "telling its owner",
                        evidence,
                    );
                }
                Step::Termed(term_at) if now - term_at >= grace => {
                    let threshold = format!("still running {} after SIGTERM", duration_text(grace));
                    let evidence = st.evidence(term_at, now, held.mem, threshold);
                    let message = format!(
                        "{label} still running {} after SIGTERM; killing it (SIGKILL)",
                        format_duration(now - term_at)
                    );
                    out.push(target, Action::Sigkill, message, evidence);
                    st.step = Step::Done;
                }
                _ => {}
            }
        }
        self.finished.retain(|id, _| seen.contains(id));
    }

    /// Drops what concerns jobs and processes the snapshot no longer shows, so the engine's
    /// memory follows the machine, not its history.
    fn forget(&mut self, snapshot: &Snapshot, procs: &BTreeMap<u32, ProcView>) {
        let mut referenced: BTreeSet<JobId> = snapshot.jobs.iter().map(|j| j.id).collect();
        referenced.extend(procs.values().filter_map(|p| match p.owner {
            ProcOwner::Job(id) | ProcOwner::Ended(id) => Some(id),
            ProcOwner::Stranger => None,
        }));
        self.jobs.retain(|id, _| referenced.contains(id));
        self.skipped.retain(|(_, key)| match key {
            SkipKey::Job(id) => referenced.contains(id),
            SkipKey::Pid(pid) => procs.contains_key(pid),
        });
    }
}

/// Each pid once, with the GPU where it holds the most memory (the lowest index on a tie) and
/// the owner and user of its first listing.
fn proc_views<'a>(gpus: &[&'a GpuObs]) -> BTreeMap<u32, ProcView<'a>> {
    let mut procs: BTreeMap<u32, ProcView<'a>> = BTreeMap::new();
    for gpu in gpus {
        for p in &gpu.processes {
            let view = procs.entry(p.pid).or_insert_with(|| ProcView {
                owner: p.owner,
                user: p.user.as_deref(),
                gpu: gpu.index,
                mem: p.mem,
                gpu_util: gpu.util,
            });
            if p.mem > view.mem {
                view.gpu = gpu.index;
                view.mem = p.mem;
                view.gpu_util = gpu.util;
            }
        }
    }
    procs
}

/// Why a job is never acted on, if it is: `protect=true`, or a match on the allow-list.
fn protection(allow: &AllowList, job: &JobObs) -> Option<String> {
    if let Some(value) = job.tags.get("protect")
        && matches!(value.to_ascii_lowercase().as_str(), "true" | "1" | "yes")
    {
        return Some(format!("tag protect={value}"));
    }
    if allow.users.contains(&job.owner) {
        return Some(format!("user {} is on the allow-list", job.owner));
    }
    if allow.names.contains(&job.name) {
        return Some(format!("name {} is on the allow-list", job.name));
    }
    allow
        .tags
        .iter()
        .find_map(|entry| match entry.split_once('=') {
            Some((key, want)) => (job.tags.get(key).map(String::as_str) == Some(want))
                .then(|| format!("tag {key}={want} is on the allow-list")),
            None => job
                .tags
                .get(entry)
                .map(|value| format!("tag {entry}={value} is on the allow-list")),
        })
}

fn job_label(id: JobId, job: Option<&JobObs>) -> String {
    match job {
        Some(j) => format!("job {id} ({}/{})", j.owner, j.name),
        None => format!("job {id}"),
    }
}

fn gpu_list(gpus: &[u32]) -> String {
    let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
    let noun = if gpus.len() == 1 { "GPU" } else { "GPUs" };
    format!("{noun} {}", list.join(","))
}

/// At most [`MAX_EVIDENCE_SAMPLES`], evenly spread, first and last kept.
fn spread(samples: Vec<EvidenceSample>) -> Vec<EvidenceSample> {
    if samples.len() <= MAX_EVIDENCE_SAMPLES {
        return samples;
    }
    let last = samples.len() - 1;
    (0..MAX_EVIDENCE_SAMPLES)
        .map(|i| samples[i * last / (MAX_EVIDENCE_SAMPLES - 1)])
        .collect()
}
