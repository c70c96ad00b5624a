//! The waste rules on generated sample streams (5 s apart, explicit clock): the config as the
//! file spells it, each rule's ladder and its resets, protection, dry-run and determinism.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::model::{JobId, Millis};

const S: Millis = 1000;
const MIN: Millis = 60 * S;
const H: Millis = 60 * MIN;
const STEP: Millis = 5 * S;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn enforce() -> WasteConfig {
    WasteConfig {
        mode: WasteMode::Enforce,
        ..WasteConfig::default()
    }
}

fn gpu(index: u32, util: Option<f64>, processes: Vec<ProcObs>) -> GpuObs {
    GpuObs {
        index,
        util,
        mem_used: processes.iter().map(|p| p.mem).sum(),
        processes,
    }
}

fn proc(pid: u32, mem: u64, owner: ProcOwner) -> ProcObs {
    ProcObs {
        pid,
        mem,
        user: Some("bob".into()),
        owner,
    }
}

fn job(id: u64, gpus: &[u32], started_at: Millis) -> JobObs {
    JobObs {
        id: JobId(id),
        owner: "alice".into(),
        name: "train".into(),
        tags: BTreeMap::new(),
        gpus: gpus.to_vec(),
        started_at,
        running: true,
        said_finished_at: None,
    }
}

fn tagged(mut j: JobObs, key: &str, value: &str) -> JobObs {
    j.tags.insert(key.into(), value.into());
    j
}

fn snap(at: Millis, gpus: Vec<GpuObs>, jobs: Vec<JobObs>) -> Snapshot {
    Snapshot { at, gpus, jobs }
}

/// Feeds one snapshot every 5 s from `from` to `to` inclusive and collects every decision.
fn run(
    engine: &mut WasteEngine,
    from: Millis,
    to: Millis,
    f: impl Fn(Millis) -> Snapshot,
) -> Vec<Decision> {
    let mut all = Vec::new();
    let mut t = from;
    while t <= to {
        all.extend(engine.observe(&f(t)));
        t += STEP;
    }
    all
}

fn ladder(decisions: &[Decision]) -> Vec<(Millis, Rule, Action)> {
    decisions.iter().map(|d| (d.at, d.rule, d.action)).collect()
}

/// A job on GPUs 0 and 1, both at `util` percent, running since t = 0.
fn idle_job_snapshot(t: Millis, util: f64) -> Snapshot {
    let p = |pid| vec![proc(pid, 30 * GIB, ProcOwner::Job(JobId(12)))];
    snap(
        t,
        vec![gpu(0, Some(util), p(100)), gpu(1, Some(util), p(101))],
        vec![job(12, &[0, 1], 0)],
    )
}

fn zombie_snapshot(t: Millis, mem: u64) -> Snapshot {
    snap(
        t,
        vec![gpu(
            0,
            Some(0.0),
            vec![proc(4242, mem, ProcOwner::Stranger)],
        )],
        vec![],
    )
}

#[test]
fn config_defaults_follow_design() {
    let c = WasteConfig::default();
    assert_eq!(c.mode, WasteMode::DryRun);
    assert_eq!((c.sample_interval, c.grace), (5 * S, 30 * S));
    assert!(c.zombie.enabled && c.idle_job.enabled && c.held_after_exit.enabled);
    assert_eq!((c.zombie.min_mem, c.zombie.after), (GIB, 15 * MIN));
    assert_eq!(c.idle_job.max_util, 5.0);
    assert_eq!((c.idle_job.warn_after, c.idle_job.act_after), (H, 2 * H));
    assert_eq!(c.idle_job.second_warn_after(), 105 * MIN);
    assert_eq!(
        (c.held_after_exit.min_mem, c.held_after_exit.after),
        (256 * MIB, MIN)
    );
    assert_eq!(c.allow, AllowList::default());
    assert_eq!(c.validate(), Ok(()));
    // An empty `[waste]` table is the defaults.
    assert_eq!(serde_json::from_value::<WasteConfig>(json!({})).unwrap(), c);
}

#[test]
fn config_reads_the_file_shape_with_human_units() {
    let c: WasteConfig = serde_json::from_value(json!({
        "mode": "enforce",
        "sample_interval": "10s",
        "grace": "1m",
        "zombie": { "min_mem": "2GiB", "after": "20m" },
        "idle_job": { "max_util": 3, "warn_after": "30m", "act_after": "1h30m" },
        "held_after_exit": { "enabled": false, "min_mem": 1048576 },
        "allow": { "users": ["root"], "names": ["notebook"], "tags": ["team=infra", "keep"] }
    }))
    .unwrap();
    assert_eq!(c.mode, WasteMode::Enforce);
    assert_eq!((c.sample_interval, c.grace), (10 * S, MIN));
    assert_eq!((c.zombie.min_mem, c.zombie.after), (2 * GIB, 20 * MIN));
    assert!(c.zombie.enabled, "an omitted key keeps its default");
    assert_eq!(c.idle_job.max_util, 3.0);
    assert_eq!(
        (c.idle_job.warn_after, c.idle_job.act_after),
        (30 * MIN, 90 * MIN)
    );
    assert!(!c.held_after_exit.enabled);
    assert_eq!(c.held_after_exit.min_mem, MIB);
    assert_eq!(c.held_after_exit.after, MIN);
    assert_eq!(c.allow.tags, ["team=infra", "keep"]);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn config_refuses_unknown_keys_and_bad_units() {
    let err = |v: serde_json::Value| {
        serde_json::from_value::<WasteConfig>(v)
            .unwrap_err()
            .to_string()
    };
    assert!(
        err(json!({ "zombie": { "min_memory": "1GiB" } })).contains("unknown field `min_memory`")
    );
    assert!(err(json!({ "samples": "5s" })).contains("unknown field `samples`"));
    assert!(err(json!({ "allow": { "groups": [] } })).contains("unknown field `groups`"));
    assert!(err(json!({ "mode": "kill" })).contains("unknown variant `kill`"));
    assert!(err(json!({ "grace": "soon" })).contains("invalid duration \"soon\""));
    assert!(err(json!({ "idle_job": { "warn_after": 60 } })).contains("a duration with a unit"));
    assert!(err(json!({ "zombie": { "min_mem": "lots" } })).contains("invalid size \"lots\""));
    assert!(err(json!({ "zombie": { "min_mem": -1 } })).contains("cannot be negative"));
}

#[test]
fn config_serializes_back_to_what_it_reads() {
    let c = enforce();
    let v = serde_json::to_value(&c).unwrap();
    assert_eq!(v["mode"], "enforce");
    assert_eq!(v["sample_interval"], "5s");
    assert_eq!(v["zombie"]["min_mem"], "1GiB");
    assert_eq!(v["zombie"]["after"], "15m");
    assert_eq!(v["idle_job"]["act_after"], "2h");
    assert_eq!(v["held_after_exit"]["min_mem"], "256MiB");
    assert_eq!(serde_json::from_value::<WasteConfig>(v).unwrap(), c);
}

#[test]
fn validate_names_the_offending_key() {
    let check = |f: &dyn Fn(&mut WasteConfig)| {
        let mut c = WasteConfig::default();
        f(&mut c);
        c.validate().unwrap_err().to_string()
    };
    let m = check(&|c| c.idle_job.warn_after = 3 * H);
    assert!(
        m.contains("waste.idle_job.warn_after = \"3h\"")
            && m.contains("waste.idle_job.act_after = \"2h\""),
        "{m}"
    );
    let m = check(&|c| c.sample_interval = 500);
    assert!(
        m.contains("waste.sample_interval = \"500ms\" is too short"),
        "{m}"
    );
    let m = check(&|c| c.idle_job.max_util = 150.0);
    assert!(m.contains("waste.idle_job.max_util = 150"), "{m}");
    let m = check(&|c| c.idle_job.max_util = f64::NAN);
    assert!(m.contains("waste.idle_job.max_util"), "{m}");
    let m = check(&|c| c.zombie.after = 0);
    assert!(m.contains("waste.zombie.after"), "{m}");
    let m = check(&|c| c.grace = -5);
    assert!(m.contains("waste.grace"), "{m}");
    let m = check(&|c| c.allow.tags = vec!["=x".into()]);
    assert!(m.contains("waste.allow.tags entry \"=x\""), "{m}");
    let m = check(&|c| c.allow.users = vec![" ".into()]);
    assert!(m.contains("waste.allow.users"), "{m}");
    // warn_after = act_after is allowed: the ladder still runs, one rung per sample.
    let mut c = WasteConfig::default();
    c.idle_job.warn_after = c.idle_job.act_after;
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn rule_and_action_names_are_stable() {
    for rule in Rule::ALL {
        assert_eq!(serde_json::to_value(rule).unwrap(), rule.as_str());
        assert_eq!(rule.as_str().parse::<Rule>(), Ok(rule));
    }
    for action in Action::ALL {
        assert_eq!(serde_json::to_value(action).unwrap(), action.as_str());
        assert_eq!(action.as_str().parse::<Action>(), Ok(action));
    }
    assert_eq!(Rule::HeldAfterExit.as_str(), "held_after_exit");
    assert_eq!(Action::Deprioritize.as_str(), "deprioritize");
    assert!("kill".parse::<Action>().is_err());
}

#[test]
fn zombie_is_stopped_after_15_minutes_and_killed_after_grace() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 2 * H, |t| zombie_snapshot(t, 2 * GIB));
    assert_eq!(
        ladder(&got),
        [
            (15 * MIN, Rule::Zombie, Action::Notify),
            (15 * MIN, Rule::Zombie, Action::Sigterm),
            (15 * MIN + 30 * S, Rule::Zombie, Action::Sigkill),
        ]
    );
    for d in &got {
        assert_eq!(
            (d.job, d.pid, d.gpu, d.dry_run),
            (None, Some(4242), Some(0), false)
        );
        assert_eq!(d.evidence.mem, Some(2 * GIB));
        assert!(d.evidence.samples.len() <= MAX_EVIDENCE_SAMPLES && !d.evidence.samples.is_empty());
    }
    assert_eq!(
        got[1].message,
        "GPU 0: pid 4242 (user bob) holds 2 GiB and belongs to no running job, for 15m00s; \
         stopping it (SIGTERM, SIGKILL after 30s)"
    );
    assert_eq!(got[0].evidence.window_ms, 15 * MIN);
    assert_eq!(
        got[0].evidence.samples[0].at, 0,
        "evidence starts at the first sighting"
    );
    assert_eq!(got[0].evidence.samples.last().unwrap().at, 15 * MIN);
    assert_eq!(got[2].evidence.window_ms, 30 * S);
}

#[test]
fn zombie_clock_resets_when_its_memory_drops() {
    let mut e = WasteEngine::new(enforce());
    let dip = 10 * MIN;
    let got = run(&mut e, 0, 2 * H, |t| {
        zombie_snapshot(t, if t == dip { 100 * MIB } else { 2 * GIB })
    });
    let restart = dip + STEP;
    assert_eq!(got[0].at, restart + 15 * MIN, "{:?}", ladder(&got));
    assert_eq!(got.len(), 3);
}

#[test]
fn zombie_that_exits_after_sigterm_is_forgotten() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, H, |t| {
        if t > 15 * MIN + 10 * S {
            snap(t, vec![gpu(0, Some(0.0), vec![])], vec![])
        } else {
            zombie_snapshot(t, 2 * GIB)
        }
    });
    let actions: Vec<Action> = got.iter().map(|d| d.action).collect();
    assert_eq!(actions, [Action::Notify, Action::Sigterm]);
}

#[test]
fn strangers_below_min_mem_and_job_processes_are_not_zombies() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 3 * H, |t| {
        snap(
            t,
            vec![
                gpu(0, Some(0.0), vec![proc(7, 512 * MIB, ProcOwner::Stranger)]),
                gpu(
                    1,
                    Some(90.0),
                    vec![proc(8, 70 * GIB, ProcOwner::Job(JobId(3)))],
                ),
            ],
            vec![job(3, &[1], 0)],
        )
    });
    assert_eq!(got, []);
}

#[test]
fn idle_job_is_warned_twice_deprioritized_stopped_and_killed() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 4 * H, |t| idle_job_snapshot(t, 0.5));
    let id = Some(JobId(12));
    assert_eq!(
        ladder(&got),
        [
            (H, Rule::IdleJob, Action::Notify),
            (105 * MIN, Rule::IdleJob, Action::Notify),
            (105 * MIN, Rule::IdleJob, Action::Deprioritize),
            (2 * H, Rule::IdleJob, Action::Sigterm),
            (2 * H + 30 * S, Rule::IdleJob, Action::Sigkill),
        ]
    );
    assert!(
        got.iter()
            .all(|d| d.job == id && d.pid.is_none() && d.gpu.is_none())
    );
    assert_eq!(
        got[0].message,
        "job 12 (alice/train) idle on GPUs 0,1: mean 0.5 % over 1h; warning 1 of 2"
    );
    assert!(
        got[1]
            .message
            .ends_with("warning 2 of 2, it will be stopped after 2h idle")
    );
    assert!(
        got[3]
            .message
            .contains("mean 0.5 % over 2h; stopping it (SIGTERM")
    );
    let ev = &got[0].evidence;
    assert_eq!(
        (ev.window_ms, ev.mean_util, ev.mem),
        (H, Some(0.5), Some(60 * GIB))
    );
    assert_eq!(ev.samples.len(), MAX_EVIDENCE_SAMPLES);
    assert_eq!((ev.samples[0].at, ev.samples[11].at), (0, H));
    assert_eq!(ev.threshold, "mean utilisation ≤ 5 % over 1h");
    assert_eq!(got[3].evidence.window_ms, 2 * H);
}

#[test]
fn idle_job_at_the_threshold_counts_as_idle_and_just_above_does_not() {
    let mut e = WasteEngine::new(enforce());
    assert_eq!(run(&mut e, 0, H, |t| idle_job_snapshot(t, 5.0)).len(), 1);
    let mut e = WasteEngine::new(enforce());
    assert_eq!(run(&mut e, 0, 4 * H, |t| idle_job_snapshot(t, 5.1)), []);
}

#[test]
fn idle_windows_count_from_the_first_observation() {
    // Started long before the engine first saw it (e.g. a daemon restart): no history, no verdict.
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 3 * H, 4 * H, |t| {
        let mut s = idle_job_snapshot(t, 0.0);
        s.jobs[0].started_at = -5 * H;
        s
    });
    assert_eq!(ladder(&got)[0], (4 * H, Rule::IdleJob, Action::Notify));
}

#[test]
fn idle_ladder_resets_when_the_job_gets_busy() {
    let mut e = WasteEngine::new(enforce());
    let busy = 70 * MIN..100 * MIN;
    let got = run(&mut e, 0, 3 * H, |t| {
        idle_job_snapshot(t, if busy.contains(&t) { 100.0 } else { 0.0 })
    });
    let l = ladder(&got);
    assert_eq!(l[0], (H, Rule::IdleJob, Action::Notify), "{l:?}");
    assert_eq!(l.len(), 2, "no second warning, no deprioritize: {l:?}");
    // After the busy spell, a fresh, fully idle hour is needed for the next first warning.
    assert!(l[1].0 >= 100 * MIN + H - 3 * MIN, "{l:?}");
    assert!(
        got[1].message.ends_with("warning 1 of 2"),
        "{}",
        got[1].message
    );
}

#[test]
fn idle_rule_ignores_jobs_without_gpus_or_readings() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 4 * H, |t| {
        snap(
            t,
            vec![gpu(
                0,
                None,
                vec![proc(9, 10 * GIB, ProcOwner::Job(JobId(2)))],
            )],
            vec![job(1, &[], 0), job(2, &[0], 0)],
        )
    });
    assert_eq!(got, []);
}

#[test]
fn idle_job_that_ends_after_sigterm_is_not_killed() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 3 * H, |t| {
        if t > 2 * H + 10 * S {
            snap(
                t,
                vec![gpu(0, Some(0.0), vec![]), gpu(1, Some(0.0), vec![])],
                vec![],
            )
        } else {
            idle_job_snapshot(t, 0.0)
        }
    });
    assert_eq!(got.last().unwrap().action, Action::Sigterm);
}

#[test]
fn protected_job_is_skipped_once_over_hours_of_idleness() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 8 * H, |t| {
        let mut s = idle_job_snapshot(t, 0.0);
        s.jobs[0] = tagged(s.jobs[0].clone(), "protect", "true");
        s
    });
    assert_eq!(ladder(&got), [(H, Rule::IdleJob, Action::Skip)]);
    assert_eq!(
        got[0].message,
        "job 12 (alice/train) idle on GPUs 0,1: mean 0.0 % over 1h; skipped, protected: tag protect=true"
    );
    assert_eq!(got[0].evidence.window_ms, H);
}

#[test]
fn allow_list_matches_users_names_and_tags() {
    let mut config = enforce();
    config.allow = AllowList {
        users: vec!["carol".into()],
        names: vec!["notebook".into()],
        tags: vec!["team=infra".into(), "keep".into()],
    };
    let mut e = WasteEngine::new(config);
    let jobs = || {
        let mut by_user = job(1, &[0], 0);
        by_user.owner = "carol".into();
        let mut by_name = job(2, &[1], 0);
        by_name.name = "notebook".into();
        vec![
            by_user,
            by_name,
            tagged(job(3, &[2], 0), "team", "infra"),
            tagged(job(4, &[3], 0), "keep", "anything"),
            tagged(job(5, &[4], 0), "team", "research"),
            tagged(job(6, &[5], 0), "protect", "no"),
        ]
    };
    let got = run(&mut e, 0, 3 * H, |t| {
        let mut gpus: Vec<GpuObs> = (0..6).map(|i| gpu(i, Some(0.0), vec![])).collect();
        let mut root = proc(77, 4 * GIB, ProcOwner::Stranger);
        root.user = Some("carol".into());
        gpus.push(gpu(6, Some(0.0), vec![root]));
        snap(t, gpus, jobs())
    });
    let skips: Vec<(Option<JobId>, Option<u32>, &str)> = got
        .iter()
        .filter(|d| d.action == Action::Skip)
        .map(|d| (d.job, d.pid, d.message.split("protected: ").nth(1).unwrap()))
        .collect();
    assert_eq!(
        skips,
        [
            // The stranger's 15 minutes come before the jobs' hour.
            (None, Some(77), "user carol is on the allow-list"),
            (Some(JobId(1)), None, "user carol is on the allow-list"),
            (Some(JobId(2)), None, "name notebook is on the allow-list"),
            (Some(JobId(3)), None, "tag team=infra is on the allow-list"),
            (
                Some(JobId(4)),
                None,
                "tag keep=anything is on the allow-list"
            ),
        ]
    );
    // Jobs 5 and 6 match nothing and go the whole way.
    for id in [5, 6] {
        let actions: Vec<Action> = got
            .iter()
            .filter(|d| d.job == Some(JobId(id)))
            .map(|d| d.action)
            .collect();
        assert_eq!(
            actions,
            [
                Action::Notify,
                Action::Notify,
                Action::Deprioritize,
                Action::Sigterm,
                Action::Sigkill
            ]
        );
    }
}

/// Job 7 runs on GPU 1 until `end`; then its main process is gone but pid 500 (2 GiB) and pid 501
/// (100 MiB, under the threshold) stay.
fn leftover_snapshot(t: Millis, end: Millis, protect: bool) -> Snapshot {
    let mut j = job(7, &[1], 0);
    if protect {
        j = tagged(j, "protect", "yes");
    }
    let owner = if t < end {
        ProcOwner::Job(JobId(7))
    } else {
        j.running = false;
        ProcOwner::Ended(JobId(7))
    };
    let procs = vec![proc(500, 2 * GIB, owner), proc(501, 100 * MIB, owner)];
    let mut s = snap(
        t,
        vec![gpu(0, Some(0.0), vec![]), gpu(1, Some(80.0), procs)],
        vec![j],
    );
    if t >= end + MIN {
        // The daemon may stop listing an ended job; the engine still knows whose pids these are.
        s.jobs.clear();
    }
    s
}

#[test]
fn leftover_processes_are_stopped_after_a_minute_and_killed_after_grace() {
    let mut e = WasteEngine::new(enforce());
    let end = 10 * MIN;
    let got = run(&mut e, 0, H, |t| leftover_snapshot(t, end, false));
    assert_eq!(
        ladder(&got),
        [
            (end + MIN, Rule::HeldAfterExit, Action::Notify),
            (end + MIN, Rule::HeldAfterExit, Action::Sigterm),
            (end + MIN + 30 * S, Rule::HeldAfterExit, Action::Sigkill),
        ]
    );
    assert!(
        got.iter()
            .all(|d| (d.job, d.pid, d.gpu) == (Some(JobId(7)), Some(500), Some(1)))
    );
    assert_eq!(
        got[0].message,
        "GPU 1: pid 500 of job 7 (alice/train) holds 2 GiB for 1m00s after the job's main process \
         ended; telling its owner"
    );
}

/// Job 8 on GPU 0, holding 2 GiB at 0 % from its main process, said it had finished at
/// `said` (its finished-but-alive alert) until `printed` (it printed again).
fn said_finished_snapshot(t: Millis, said: Millis, printed: Option<Millis>, tag: bool) -> Snapshot {
    let mut j = job(8, &[0], 0);
    if tag {
        j = tagged(j, "protect", "yes");
    }
    j.said_finished_at = (t >= said && printed.is_none_or(|p| t < p)).then_some(said);
    snap(
        t,
        vec![gpu(
            0,
            Some(0.0),
            vec![proc(800, 2 * GIB, ProcOwner::Job(JobId(8)))],
        )],
        vec![j],
    )
}

#[test]
fn a_running_job_that_said_it_finished_is_held_after_finish_and_stopped_as_a_whole() {
    let mut e = WasteEngine::new(enforce());
    let said = 5 * MIN;
    let got = run(&mut e, 0, 20 * MIN, |t| {
        said_finished_snapshot(t, said, None, false)
    });
    assert_eq!(
        ladder(&got),
        [
            (said + MIN, Rule::HeldAfterExit, Action::Notify),
            (said + MIN, Rule::HeldAfterExit, Action::Sigterm),
            (said + MIN + 30 * S, Rule::HeldAfterExit, Action::Sigkill),
        ]
    );
    // The job, not one pid: a graceful stop that ends it with the reason.
    assert!(
        got.iter()
            .all(|d| (d.job, d.pid, d.gpu) == (Some(JobId(8)), None, Some(0)))
    );
    assert_eq!(
        got[0].message,
        "GPU 0: job 8 (alice/train) holds 2 GiB though its output said it had finished and it has \
         printed nothing since, its GPUs idle (finished-but-alive); telling its owner"
    );

    // It printed again before `after` was up: the claim is gone and nothing happens; said
    // again later, the clock starts over.
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 20 * MIN, |t| {
        let mut s = said_finished_snapshot(t, said, Some(said + 30 * S), false);
        if t >= 10 * MIN {
            s = said_finished_snapshot(t, 10 * MIN, None, false);
        }
        s
    });
    assert_eq!(got[0].at, 11 * MIN, "{:?}", ladder(&got));

    // Protected: one skip.
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, 20 * MIN, |t| {
        said_finished_snapshot(t, said, None, true)
    });
    assert_eq!(
        ladder(&got),
        [(said + MIN, Rule::HeldAfterExit, Action::Skip)]
    );

    // The rule off: nothing.
    let mut config = enforce();
    config.held_after_exit.enabled = false;
    let mut e = WasteEngine::new(config);
    assert!(
        run(&mut e, 0, 20 * MIN, |t| said_finished_snapshot(
            t, said, None, false
        ))
        .is_empty()
    );
}

#[test]
fn leftovers_of_protected_or_unknown_jobs_are_skipped_once() {
    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, H, |t| {
        let mut s = leftover_snapshot(t, 10 * MIN, true);
        if t >= 10 * MIN {
            // A second big leftover of the same job: still one skip per job.
            s.gpus[0]
                .processes
                .push(proc(502, 3 * GIB, ProcOwner::Ended(JobId(7))));
        }
        s
    });
    assert_eq!(
        ladder(&got),
        [(11 * MIN, Rule::HeldAfterExit, Action::Skip)]
    );
    assert!(
        got[0].message.ends_with("protected: tag protect=yes"),
        "{}",
        got[0].message
    );

    let mut e = WasteEngine::new(enforce());
    let got = run(&mut e, 0, H, |t| {
        snap(
            t,
            vec![gpu(
                0,
                Some(0.0),
                vec![proc(9, 2 * GIB, ProcOwner::Ended(JobId(99)))],
            )],
            vec![],
        )
    });
    assert_eq!(ladder(&got), [(MIN, Rule::HeldAfterExit, Action::Skip)]);
    assert!(
        got[0]
            .message
            .ends_with("no record of job 99, so its protection cannot be checked")
    );
}

/// A zombie on GPU 2, an idle job on GPUs 0-1 and a leftover on GPU 3, for six hours.
fn busy_machine(t: Millis) -> Snapshot {
    let mut s = idle_job_snapshot(t, 1.0);
    s.gpus.push(gpu(
        2,
        Some(0.0),
        vec![proc(4242, 2 * GIB, ProcOwner::Stranger)],
    ));
    s.gpus.push(gpu(
        3,
        Some(0.0),
        vec![proc(600, GIB, ProcOwner::Ended(JobId(8)))],
    ));
    let mut ended = job(8, &[3], 0);
    ended.running = false;
    s.jobs.push(ended);
    s
}

#[test]
fn dry_run_walks_the_same_ladder_once_and_carries_nothing_out() {
    let dry = run(
        &mut WasteEngine::new(WasteConfig::default()),
        0,
        6 * H,
        busy_machine,
    );
    let live = run(&mut WasteEngine::new(enforce()), 0, 6 * H, busy_machine);
    assert_eq!(ladder(&dry), ladder(&live));
    assert_eq!(dry.len(), 3 + 3 + 5, "{:?}", ladder(&dry));
    assert!(
        dry.iter()
            .all(|d| d.dry_run && d.message.ends_with("(dry run: not carried out)"))
    );
    assert!(
        live.iter()
            .all(|d| !d.dry_run && !d.message.contains("dry run"))
    );
    let mut steps: Vec<_> = dry
        .iter()
        .map(|d| (d.rule, d.job, d.pid, d.action, d.message.clone()))
        .collect();
    let n = steps.len();
    steps.dedup();
    assert_eq!(steps.len(), n, "a rung repeated");
}

#[test]
fn decisions_are_deterministic_and_ordered() {
    let first = run(&mut WasteEngine::new(enforce()), 0, 6 * H, busy_machine);
    let again = run(&mut WasteEngine::new(enforce()), 0, 6 * H, busy_machine);
    assert_eq!(first, again);
    // The order GPUs and processes arrive in does not matter.
    let shuffled = run(&mut WasteEngine::new(enforce()), 0, 6 * H, |t| {
        let mut s = busy_machine(t);
        s.gpus.reverse();
        s.jobs.reverse();
        s
    });
    assert_eq!(first, shuffled);
    // Within one call: by GPU, then pid, job and rule; rungs of one target in ladder order.
    let mut config = enforce();
    config.zombie.after = MIN;
    let mut e = WasteEngine::new(config);
    let both = run(&mut e, 0, MIN, |t| {
        let mut s = busy_machine(t);
        s.gpus[0]
            .processes
            .push(proc(4243, 2 * GIB, ProcOwner::Stranger));
        s
    });
    let keys: Vec<_> = both
        .iter()
        .map(|d| (d.gpu, d.pid, d.job, d.rule, d.action))
        .collect();
    assert_eq!(
        keys,
        [
            (Some(0), Some(4243), None, Rule::Zombie, Action::Notify),
            (Some(0), Some(4243), None, Rule::Zombie, Action::Sigterm),
            (Some(2), Some(4242), None, Rule::Zombie, Action::Notify),
            (Some(2), Some(4242), None, Rule::Zombie, Action::Sigterm),
            (
                Some(3),
                Some(600),
                Some(JobId(8)),
                Rule::HeldAfterExit,
                Action::Notify
            ),
            (
                Some(3),
                Some(600),
                Some(JobId(8)),
                Rule::HeldAfterExit,
                Action::Sigterm
            ),
        ]
    );
}

#[test]
fn a_snapshot_from_the_past_is_ignored() {
    let mut e = WasteEngine::new(enforce());
    run(&mut e, 0, 10 * MIN, |t| zombie_snapshot(t, 2 * GIB));
    assert_eq!(e.observe(&zombie_snapshot(-H, 2 * GIB)), []);
    let got = run(&mut e, 10 * MIN + STEP, H, |t| zombie_snapshot(t, 2 * GIB));
    assert_eq!(got[0].at, 15 * MIN);
}

#[test]
fn disabled_rules_decide_nothing() {
    let mut c = enforce();
    c.zombie.enabled = false;
    c.idle_job.enabled = false;
    c.held_after_exit.enabled = false;
    assert_eq!(run(&mut WasteEngine::new(c), 0, 6 * H, busy_machine), []);
}
