//! Mid-run alerts end to end (issue 17): a daemon on simulated GPUs following real processes'
//! output as they write it. A NaN loss wakes the submitter once while the job runs; an error
//! the process outlives wakes it after the grace period, one it dies of does not (its end report
//! tells); `note` records without waking; a restart neither repeats nor loses an alert; the end
//! report lists them.

mod common;

use std::path::Path;

use common::{Baton, wait_contains};
use serde_json::Value;

fn alert_end(job: u64) -> String {
    format!("[end of baton alert for job {job}]")
}

fn report_end(job: u64) -> String {
    format!("[end of baton report for job {job}]")
}

fn inbox(b: &Baton) -> (String, std::path::PathBuf) {
    let path = b.path("inbox.md");
    (format!("file:{}", path.display()), path)
}

/// Waits until the job has `n` alerts and each was delivered; returns them (`status --json`).
#[track_caller]
fn delivered_alerts(b: &Baton, id: u64, n: usize) -> Vec<Value> {
    let until = std::time::Instant::now() + common::DEADLINE;
    loop {
        let alerts = b.job(id)["alerts"].as_array().cloned().unwrap_or_default();
        let done = alerts.len() == n
            && alerts.iter().all(|a| {
                a["deliveries"]
                    .as_array()
                    .is_some_and(|d| !d.is_empty() && d.iter().all(|d| d["state"] == "delivered"))
            });
        if done {
            return alerts;
        }
        assert!(
            std::time::Instant::now() < until,
            "job {id}'s alerts: {alerts:#?}\n{}",
            b.daemon_log()
        );
        std::thread::sleep(common::POLL);
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn a_nan_loss_wakes_the_submitter_once_while_the_job_runs() {
    let b = Baton::start(2);
    let (channel, path) = inbox(&b);
    let id = b.submit_sh(
        &["--gpus", "1", "--notify", &channel],
        "echo 'step 1 loss=0.52'; echo 'step 2 loss=nan'; echo 'step 3 loss=nan'; sleep 60",
    );
    wait_contains(&path, &alert_end(id));
    let text = read(&path);
    assert_eq!(b.state(id), "running", "the alert came while it ran");
    assert!(text.contains("its loss became NaN or infinite"), "{text}");
    assert!(
        text.contains("step 2 loss=nan"),
        "the first NaN line: {text}"
    );
    assert!(text.contains("untrusted"), "{text}");
    assert!(text.contains(&format!("`baton cancel {id}`")), "{text}");
    let stored = b.home.join(format!("jobs/{id}/alert-1.nan.md"));
    assert!(read(&stored).contains("step 2 loss=nan"), "stored too");
    let events = b.run(&["events", &id.to_string()]).expect(0).stdout;
    assert!(
        events.contains("alert") && events.contains("nan (wake)"),
        "{events}"
    );
    let alerts = delivered_alerts(&b, id, 1);
    assert_eq!(alerts[0]["detector"], "nan");
    assert_eq!(alerts[0]["evidence"], "step 2 loss=nan");
    assert_eq!(alerts[0]["deliveries"][0]["channel"], channel);
    let status = b.run(&["status", &id.to_string()]).expect(0).stdout;
    assert!(
        status.contains(&format!("job {id} alert (nan, attempt 1)"))
            && status.contains("step 2 loss=nan")
            && status.contains("delivered"),
        "{status}"
    );

    b.run(&["cancel", &id.to_string()]).expect(0);
    wait_contains(&path, &report_end(id));
    let text = read(&path);
    assert_eq!(text.matches(&alert_end(id)).count(), 1, "one alert: {text}");
    let report = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(
        report.contains("mid-run alert (nan)") && report.contains("its submitter was woken"),
        "{report}"
    );
}

#[test]
fn an_error_the_process_outlives_wakes_after_the_grace_and_one_it_dies_of_does_not() {
    let b = Baton::with_config(2, "[midrun]\nerror_grace = \"1s\"\nnan = \"note\"\n");
    let (channel, path) = inbox(&b);
    let traceback = "printf 'Traceback (most recent call last):\\n  File \"w.py\", line 3, in <module>\\n    work()\\nRuntimeError: DataLoader worker (pid 7) is killed\\n' >&2";
    let dies = b.submit_sh(&["--notify", &channel], &format!("{traceback}; exit 1"));
    let hangs = b.submit_sh(
        &["--notify", &channel],
        &format!("echo 'loss=nan'; {traceback}; sleep 60"),
    );
    wait_contains(&path, &alert_end(hangs));
    assert_eq!(b.state(hangs), "running");
    let text = read(&path);
    assert!(
        text.contains("it printed an error and is still running")
            && text.contains("RuntimeError: DataLoader worker (pid 7) is killed"),
        "{text}"
    );
    assert!(
        !text.contains("its loss became NaN"),
        "nan is a note: nobody is woken for it: {text}"
    );
    // The one that died of its exception: its end report tells, no alert.
    wait_contains(&path, &report_end(dies));
    assert!(!read(&path).contains(&alert_end(dies)), "{}", read(&path));

    b.run(&["cancel", &hangs.to_string()]).expect(0);
    wait_contains(&path, &report_end(hangs));
    let report = b.run(&["report", &hangs.to_string()]).expect(0).stdout;
    assert!(report.contains("mid-run alert (error)"), "{report}");
    assert!(
        report.contains("mid-run alert (nan)") && report.contains("recorded, nobody woken"),
        "{report}"
    );
}

/// A job that prints all the time is read every period rather than at each write, and one that
/// fell quiet is watched again: an error whose traceback spans several reads, and a NaN printed
/// after a quiet spell, are each found once, with their own lines.
#[test]
fn a_job_printing_all_the_time_is_followed_through_its_reads_and_quiet_spells() {
    let b = Baton::with_config(2, "[midrun]\nerror_grace = \"1s\"\n");
    let (channel, path) = inbox(&b);
    let chatter = |n: u32, loss: &str| {
        format!(
            "i=0; while [ $i -lt {n} ]; do echo \"step $i loss={loss} lr=3e-4\"; i=$((i+1)); sleep 0.01; done"
        )
    };
    let script = [
        // Past the second before it is followed, printing: read every period.
        chatter(150, "0.5"),
        "printf 'Traceback (most recent call last):\\n' >&2; sleep 0.3".into(),
        "printf '  File \"w.py\", line 3, in <module>\\n    work()\\n' >&2; sleep 0.3".into(),
        "printf 'RuntimeError: worker 3 hung up\\n' >&2".into(),
        chatter(50, "0.4"),
        // Quiet: watched again; the NaN's write wakes the follower.
        "sleep 1.5; echo 'step 9999 loss=nan lr=3e-4'".into(),
        chatter(50, "nan"),
        "sleep 60".into(),
    ]
    .join("; ");
    let id = b.submit_sh(&["--notify", &channel], &script);
    let alerts = delivered_alerts(&b, id, 2);
    assert_eq!(b.state(id), "running", "both came while it ran");
    let by = |detector: &str| {
        alerts
            .iter()
            .find(|a| a["detector"] == detector)
            .unwrap_or_else(|| panic!("no {detector} alert: {alerts:#?}"))
    };
    assert_eq!(by("nan")["evidence"], "step 9999 loss=nan lr=3e-4");
    let error = by("error")["evidence"].as_str().unwrap_or_default();
    assert!(error.contains("RuntimeError: worker 3 hung up"), "{error}");
    b.run(&["cancel", &id.to_string()]).expect(0);
    wait_contains(&path, &report_end(id));
    let text = read(&path);
    assert_eq!(
        text.matches(&alert_end(id)).count(),
        2,
        "two alerts: {text}"
    );
}

/// Waits until the job has `n` alerts; returns them (`status --json`).
#[track_caller]
fn alerts_of(b: &Baton, id: u64, n: usize) -> Vec<Value> {
    let job = b.poll_job(id, &format!("one with {n} alerts"), |j| {
        j["alerts"].as_array().is_some_and(|a| a.len() >= n)
    });
    job["alerts"].as_array().cloned().unwrap_or_default()
}

/// Three quiet jobs on simulated GPUs: one whose GPU sits idle stalls (and the alert quotes its
/// last line), one whose GPU is busy does not, and one that said it finished is a
/// finished-but-alive note, not a stall.
#[test]
fn a_quiet_job_on_an_idle_gpu_stalls_one_busy_on_it_does_not_and_one_that_finished_is_a_note() {
    let b = Baton::with_config(
        3,
        "[midrun]\nstall_after = \"2s\"\nfinished_grace = \"2s\"\n\n[waste]\nsample_interval = \"1s\"\n",
    );
    let (channel, path) = inbox(&b);
    let busy_gpu = "d=\"$BATON_HOME/sim/gpu$CUDA_VISIBLE_DEVICES\"; mkdir -p \"$d\"; \
                    echo \"$(( 3 << 30 )) 80\" > \"$d/$$\"";
    let stalls = b.submit_sh(
        &["--gpus", "1", "--notify", &channel],
        "echo 'step 5 loss=0.31'; echo 'all-reduce, rank 0 of 8'; sleep 60",
    );
    let busy = b.submit_sh(
        &["--gpus", "1", "--notify", &channel],
        &format!("{busy_gpu}; echo 'step 5 loss=0.31'; sleep 60"),
    );
    let finished = b.submit_sh(
        &["--gpus", "1", "--notify", &channel],
        "echo 'step 900 loss=0.02'; echo 'Training finished in 3h 2m'; sleep 60",
    );
    let alerts = delivered_alerts(&b, stalls, 1);
    assert_eq!(alerts[0]["detector"], "stall");
    assert_eq!(
        alerts[0]["evidence"], "all-reduce, rank 0 of 8",
        "its last line"
    );
    wait_contains(&path, &alert_end(stalls));
    let text = read(&path);
    assert!(
        text.contains("it looks stalled: nothing printed for")
            && text.contains("its GPUs near idle"),
        "{text}"
    );
    let noted = alerts_of(&b, finished, 1);
    assert_eq!(noted.len(), 1, "{noted:#?}");
    assert_eq!(noted[0]["detector"], "finished-but-alive");
    assert_eq!(noted[0]["action"], "note");
    assert_eq!(noted[0]["evidence"], "Training finished in 3h 2m");
    // As long quiet as the one that stalled, and longer than it takes: busy on its GPU.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let job = b.job(busy);
    assert!(job.get("alerts").is_none(), "{job:#}\n{}", b.daemon_log());
    assert!(
        !read(&path).contains(&alert_end(finished)),
        "a note wakes nobody"
    );
    for id in [stalls, busy, finished] {
        b.run(&["cancel", &id.to_string()]).expect(0);
    }
    wait_contains(&path, &report_end(finished));
    let report = b.run(&["report", &finished.to_string()]).expect(0).stdout;
    assert!(
        report.contains("mid-run alert (finished-but-alive)"),
        "{report}"
    );
}

/// A job whose only tqdm bar reached 100% and that then sits quiet has finished but is alive
/// (a note), where one whose inner bar of nested ones reached 100% may hang mid-run: a stall.
#[test]
fn a_bar_at_its_end_then_quiet_is_finished_but_alive_unless_bars_are_nested() {
    let b = Baton::with_config(
        1,
        "[midrun]\nstall_after = \"2s\"\nfinished_grace = \"2s\"\n",
    );
    let (channel, path) = inbox(&b);
    let done = b.submit_sh(
        &["--notify", &channel],
        "printf ' 50%%|#####     | 5/10 [00:01<00:01]\\r' >&2; \
         printf '100%%|##########| 10/10 [00:02<00:00]\\n' >&2; sleep 600",
    );
    let nested = b.submit_sh(
        &["--notify", &channel],
        "printf ' 33%%|###       | 1/3 [00:10<00:20]\\n' >&2; \
         printf '100%%|##########| 500/500 [00:10<00:00]\\n' >&2; sleep 600",
    );
    let noted = alerts_of(&b, done, 1);
    assert_eq!(
        (&noted[0]["detector"], &noted[0]["action"]),
        (&Value::from("finished-but-alive"), &Value::from("note")),
        "{noted:#?}"
    );
    assert_eq!(noted[0]["evidence"], "a progress bar at 100% (10/10)");
    let stalled = delivered_alerts(&b, nested, 1);
    assert_eq!(stalled[0]["detector"], "stall", "{stalled:#?}");
    wait_contains(&path, &alert_end(nested));
    assert!(
        !read(&path).contains(&alert_end(done)),
        "a note wakes nobody"
    );
    for id in [done, nested] {
        b.run(&["cancel", &id.to_string()]).expect(0);
    }
}

/// `--wake-on` and `--wake-when`: the submitter is woken once for each, at the first line that
/// shows it, while the job runs on; a bad one is refused and nothing is queued.
#[test]
fn milestones_the_submitter_asked_for_wake_it_once_each_while_the_job_runs() {
    let b = Baton::start(1);
    let (channel, path) = inbox(&b);
    let id = b.submit_sh(
        &[
            "--notify",
            &channel,
            "--wake-on",
            r"Epoch \d+ done",
            "--wake-when",
            "val_acc>=0.9",
        ],
        "echo 'epoch 1 val_acc=0.71'; sleep 1.5; echo 'epoch 2 val_acc=0.93'; \
         echo 'epoch 3 val_acc=0.95'; echo 'Epoch 3 done'; echo 'Epoch 4 done'; sleep 60",
    );
    let alerts = delivered_alerts(&b, id, 2);
    assert_eq!(b.state(id), "running");
    let by = |detector: &str| {
        alerts
            .iter()
            .find(|a| a["detector"] == detector)
            .unwrap_or_else(|| panic!("no {detector} alert: {alerts:#?}"))
    };
    assert_eq!(by("milestone-1")["evidence"], "Epoch 3 done");
    assert_eq!(by("milestone-2")["evidence"], "epoch 2 val_acc=0.93");
    wait_contains(&path, &alert_end(id));
    let text = read(&path);
    assert!(
        text.contains(
            "is still running and reached what you asked to be woken for: --wake-when \
             'val_acc>=0.9'"
        ),
        "{text}"
    );
    assert!(text.contains(r"--wake-on 'Epoch \d+ done'"), "{text}");
    b.run(&["cancel", &id.to_string()]).expect(0);
    wait_contains(&path, &report_end(id));
    assert_eq!(read(&path).matches(&alert_end(id)).count(), 2);

    for (flag, value, says) in [
        ("--wake-when", "val_acc=>0.9", "expected METRIC OP NUMBER"),
        ("--wake-on", "(", "--wake-on '(': regex parse error"),
    ] {
        let out = b.run(&["submit", flag, value, "--", "true"]);
        assert_eq!(out.code, 2, "{out:?}");
        assert!(out.stderr.contains(says), "{out:?}");
    }
    let listed = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(1),
        "nothing more queued"
    );
}

/// `--note-when` records a milestone without waking anyone; `--stop-when` ends the job as
/// failed at its first line, freeing its GPU, and the end report (naming the condition) is
/// what wakes the submitter.
#[test]
fn a_milestone_can_only_note_or_stop_the_job() {
    let b = Baton::start(1);
    let (channel, path) = inbox(&b);
    let id = b.submit_sh(
        &[
            "--gpus",
            "1",
            "--notify",
            &channel,
            "--note-when",
            "epoch>=1",
            "--stop-when",
            "loss>10",
        ],
        "echo 'epoch=1 loss=0.4'; sleep 2; echo 'epoch=2 loss=12.5'; sleep 600",
    );
    // A line pattern, `/REGEX/`, stops one too.
    let asserted = b.submit_sh(
        &["--stop-when", "/device-side assert triggered/"],
        "echo 'step 1 loss=0.4'; echo 'RuntimeError: CUDA error: device-side assert triggered'; \
         sleep 600",
    );
    let stopped = b.poll_job(asserted, "stopped", |j| j["state"] == "failed");
    assert_eq!(
        stopped["reason"], "stopped by baton: it met --stop-when '/device-side assert triggered/'",
        "{stopped:#}"
    );
    let job = b.poll_job(id, "stopped", |j| j["state"] == "failed");
    assert_eq!(
        job["reason"], "stopped by baton: it met --stop-when 'loss>10'",
        "{job:#}"
    );
    let alerts = job["alerts"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = alerts
        .iter()
        .map(|a| {
            (
                a["detector"].as_str().unwrap(),
                a["action"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, [("milestone-1", "note"), ("milestone-2", "stop")]);
    wait_contains(&path, &report_end(id));
    let text = read(&path);
    assert!(
        !text.contains(&alert_end(id)),
        "neither alert wakes: {text}"
    );
    let report = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(
        report.contains("stopped by baton: it met --stop-when 'loss>10'"),
        "{report}"
    );
    // Its GPU went to the next job.
    let next = b.submit(&["--gpus", "1", "--", "true"]);
    b.wait_ok(&[next]);

    let out = b.run(&["submit", "--stop-when", "loss>>1", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--stop-when 'loss>>1'"), "{out:?}");
}

/// `nan` and `error` re-arm once their condition cleared: a loss that turned finite and then
/// NaN again wakes the submitter a second time, and so does an error of another kind; the same
/// error printed again does not.
#[test]
fn nan_and_error_alert_again_once_their_condition_cleared_and_came_back() {
    let b = Baton::with_config(1, "[midrun]\nerror_grace = \"1s\"\nwakes_per_hour = 10\n");
    let (channel, path) = inbox(&b);
    let id = b.submit_sh(
        &["--notify", &channel],
        "tb() { printf 'Traceback (most recent call last):\\n  File \"train.py\", line 9, in \
         <module>\\n%s\\n' \"$1\" >&2; }; \
         echo 'step 1 loss=nan'; sleep 2; echo 'step 2 loss=0.31'; echo 'step 3 loss=nan'; \
         tb 'RuntimeError: DataLoader worker (pid 7) is killed by signal'; sleep 3; \
         tb 'RuntimeError: DataLoader worker (pid 9) is killed by signal'; sleep 1; \
         tb 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB'; \
         sleep 600",
    );
    let alerts = delivered_alerts(&b, id, 4);
    let kinds: Vec<(&str, u64)> = alerts
        .iter()
        .map(|a| {
            (
                a["detector"].as_str().unwrap(),
                a["seq"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    let count = |d: &str| kinds.iter().filter(|(k, _)| *k == d).count();
    assert_eq!((count("nan"), count("error")), (2, 2), "{alerts:#?}");
    wait_contains(&path, "step 3 loss=nan");
    wait_contains(&path, "torch.OutOfMemoryError");
    b.run(&["cancel", &id.to_string()]).expect(0);
}

/// Real-shaped output, each job on its own channel: a PyTorch loop whose loss turns NaN and
/// goes on, Hugging Face's Trainer and Lightning finishing and then not exiting, a plain
/// "Training finished" followed by a sleep, an NCCL watchdog timeout and a dataloader worker's
/// traceback each followed by a hang. Each gives exactly one message, within a bounded time.
#[test]
fn real_shaped_logs_each_give_exactly_one_message() {
    let b = Baton::with_config(
        1,
        "[midrun]\nerror_grace = \"1s\"\nstall_after = \"1h\"\nfinished_grace = \"2s\"\n\
         finished_but_alive = \"wake\"\n",
    );
    let scenarios: [(&str, &str, &str); 6] = [
        (
            "nan",
            "pytorch",
            "i=1; while [ $i -le 30 ]; do echo \"Epoch 1 | step $i/500 | loss 2.$i | lr 3e-4\"; \
             i=$((i+1)); done; while true; do echo \"Epoch 1 | step $i/500 | loss nan | lr 3e-4\"; \
             i=$((i+1)); sleep 0.2; done",
        ),
        (
            "finished-but-alive",
            "hf-trainer",
            "echo \"{'loss': 0.4123, 'grad_norm': 1.9, 'learning_rate': 1e-05, 'epoch': 2.99}\"; \
             echo \"{'train_runtime': 812.3, 'train_samples_per_second': 81.2, 'train_loss': \
             0.41, 'epoch': 3.0}\"; echo ''; \
             echo 'Training completed. Do not forget to share your model on huggingface.co/models =)'; \
             sleep 600",
        ),
        (
            "finished-but-alive",
            "lightning",
            "echo 'Epoch 2: 100%|##########| 250/250 [00:31<00:00,  8.01it/s, v_num=0, \
             train_loss=0.213]'; \
             echo '`Trainer.fit` stopped: `max_epochs=3` reached.'; sleep 600",
        ),
        (
            "finished-but-alive",
            "plain",
            "echo 'step 900 loss=0.02'; echo 'Training finished in 3h 2m'; sleep 600",
        ),
        (
            "error",
            "nccl-timeout",
            "echo 'step 12 loss=0.8'; echo '[rank0]:[E1204 10:00:00.000 ProcessGroupNCCL.cpp:616] \
             [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, \
             OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600032 \
             milliseconds before timing out.' >&2; sleep 600",
        ),
        (
            "error",
            "dataloader",
            "echo 'step 3 loss=1.1'; printf 'Traceback (most recent call last):\\n  File \
             \"/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py\", line 308, \
             in _worker_loop\\n    data = fetcher.fetch(index)\\nRuntimeError: DataLoader \
             worker (pid 4242) is killed by signal: Killed.\\n' >&2; sleep 600",
        ),
    ];
    let started = std::time::Instant::now();
    let jobs: Vec<(u64, &str, std::path::PathBuf)> = scenarios
        .iter()
        .map(|(detector, name, script)| {
            let path = b.path(&format!("inbox-{name}.md"));
            let channel = format!("file:{}", path.display());
            let id = b.submit_sh(&["--name", name, "--notify", &channel], script);
            (id, *detector, path)
        })
        .collect();
    for (id, detector, path) in &jobs {
        wait_contains(path, &alert_end(*id));
        let alerts = b.job(*id)["alerts"].as_array().cloned().unwrap_or_default();
        assert_eq!(alerts.len(), 1, "job {id}: {alerts:#?}");
        assert_eq!(alerts[0]["detector"], *detector, "job {id}: {alerts:#?}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    // And nothing more comes.
    std::thread::sleep(std::time::Duration::from_secs(2));
    for (id, _, path) in &jobs {
        assert_eq!(
            read(path).matches(&alert_end(*id)).count(),
            1,
            "{}",
            read(path)
        );
        b.run(&["cancel", &id.to_string()]).expect(0);
    }
}

/// Waits until `baton status ID --json` shows the job's progress; returns it.
#[track_caller]
fn progress_of(b: &Baton, id: u64, counters: &str) -> Value {
    let job = b.poll_job(id, &format!("at {counters}"), |j| {
        j["progress"]["counters"] == counters
    });
    job["progress"].clone()
}

/// A running job's counters (`step N/M`, a tqdm bar) are its progress: `baton status`, its
/// JSON and MCP show how far it is and the time left at its pace so far.
#[test]
fn a_running_jobs_counters_and_bars_are_its_progress_and_eta() {
    let b = Baton::start(1);
    let steps = b.submit_sh(
        &[],
        "i=1; while [ $i -le 250 ]; do echo \"step $i/1000 loss=0.3\"; i=$((i+1)); done; sleep 60",
    );
    let bar = b.submit_sh(
        &[],
        "printf '\\r 10%%|#         | 1/10 [00:01<00:09]' >&2; \
         printf '\\r 40%%|####      | 4/10 [00:04<00:06]\\r' >&2; sleep 60",
    );
    let progress = progress_of(&b, steps, "step 250/1000");
    assert_eq!(progress["fraction"], 0.25);
    let left = progress["remaining_ms"].as_i64().expect("an estimate");
    assert!(left > 0, "{progress:#}");
    assert!(progress["eta"].as_str().is_some(), "{progress:#}");
    let text = b.run(&["status", &steps.to_string()]).expect(0).stdout;
    assert!(
        text.contains(&format!("job {steps} progress: step 250/1000 (25%); about")),
        "{text}"
    );
    assert!(text.contains(", 25%, "), "the TIME column: {text}");
    let progress = progress_of(&b, bar, "bar 4/10");
    assert_eq!(progress["fraction"], 0.4);
    for id in [steps, bar] {
        b.run(&["cancel", &id.to_string()]).expect(0);
    }
    b.wait(&[steps, bar], "30s");
    assert!(b.job(steps).get("progress").is_none(), "only while it runs");
}

/// The running job's ETA refines the queue's outlook: a job waiting for the GPU of a job with
/// no time limit has no predicted start (no bound exists), but an expected one, from the
/// running job's progress.
#[test]
fn a_running_jobs_eta_gives_the_job_waiting_for_its_gpu_an_expected_start() {
    let b = Baton::start(1);
    let running = b.submit_sh(
        &["--gpus", "1"],
        "i=1; while [ $i -le 100 ]; do echo \"step $i/100\"; i=$((i+1)); sleep 0.1; done",
    );
    b.wait_running(running);
    let waiting = b.submit(&["--gpus", "1", "--", "true"]);
    b.poll_job(running, "with an ETA", |j| j["progress"]["eta"].is_string());
    let listed = b.run(&["status", "--json"]).expect(0).json();
    let queued = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == waiting)
        .unwrap()
        .clone();
    assert_eq!(queued["state"], "queued", "{queued:#}");
    assert!(
        queued.get("predicted_start").is_none(),
        "no bound: {queued:#}"
    );
    assert!(queued["expected_start"].is_string(), "{queued:#}");
    let table = b.run(&["status"]).expect(0).stdout;
    assert!(table.contains("(running jobs' progress)"), "{table}");
    b.wait_ok(&[running, waiting]);
}

/// `--wake-every`: a digest each period (how far the job is, its last line), each its own alert;
/// and a stall is raised again once the job printed again and fell quiet again.
#[test]
fn digests_come_every_period_and_a_stall_rearms_after_the_job_prints_again() {
    let b = Baton::with_config(
        2,
        "[midrun]\nmin_wake_every = \"1s\"\nstall_after = \"1s\"\n",
    );
    let (channel, path) = inbox(&b);
    let digests = b.submit_sh(
        &["--notify", &channel, "--wake-every", "2s"],
        "i=1; while [ $i -le 100 ]; do echo \"step $i/100 loss=0.5\"; i=$((i+1)); sleep 0.3; done",
    );
    let stalls = b.submit_sh(
        &["--notify", &channel],
        "echo 'step 1 loss=0.9'; sleep 6; echo 'step 2 loss=0.8'; sleep 60",
    );
    let alerts = delivered_alerts(&b, digests, 2);
    assert!(
        alerts.iter().all(|a| a["detector"] == "digest"),
        "{alerts:#?}"
    );
    assert_eq!(
        (alerts[0]["seq"].as_u64(), alerts[1]["seq"].as_u64()),
        (Some(1), Some(2))
    );
    assert!(
        alerts[1]["path"]
            .as_str()
            .unwrap()
            .ends_with("alert-1.digest-2.md"),
        "{alerts:#?}"
    );
    let text = read(&path);
    assert!(
        text.contains("here is the progress digest you asked for"),
        "{text}"
    );
    assert!(text.contains("Progress: step "), "{text}");
    assert!(text.contains("/100 ("), "{text}");
    assert!(
        text.contains("The next digest comes in 2s (--wake-every)"),
        "{text}"
    );

    let alerts = delivered_alerts(&b, stalls, 2);
    assert!(
        alerts.iter().all(|a| a["detector"] == "stall"),
        "{alerts:#?}"
    );
    assert_eq!(alerts[0]["evidence"], "step 1 loss=0.9");
    assert_eq!(alerts[1]["evidence"], "step 2 loss=0.8");
    assert_eq!(alerts[1]["seq"], 2);

    let out = b.run(&["submit", "--wake-every", "500ms", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr
            .contains("--wake-every 500ms: shorter than this daemon allows (1s"),
        "{out:?}"
    );
    for id in [digests, stalls] {
        b.run(&["cancel", &id.to_string()]).expect(0);
    }
}

/// `slow`: a run of a command that earlier ran three times in a fraction of a second, going on
/// past twice what they predict, wakes the submitter once, quoting its last line.
#[test]
fn a_run_far_slower_than_its_commands_history_is_slow() {
    let b = Baton::with_config(1, "[midrun]\nslow_after = \"1s\"\n");
    let (channel, path) = inbox(&b);
    let script = "if [ -e slow ]; then echo 'step 1 loss=0.5'; sleep 60; else sleep 0.2; fi";
    let fast: Vec<u64> = (0..3).map(|_| b.submit_sh(&[], script)).collect();
    b.wait_ok(&fast);
    b.touch("slow");
    let id = b.submit_sh(&["--notify", &channel], script);
    let alerts = delivered_alerts(&b, id, 1);
    assert_eq!(alerts[0]["detector"], "slow");
    assert_eq!(alerts[0]["evidence"], "step 1 loss=0.5");
    wait_contains(&path, &alert_end(id));
    let text = read(&path);
    assert!(
        text.contains("that 3 earlier successful runs of the same command predict"),
        "{text}"
    );
    b.run(&["cancel", &id.to_string()]).expect(0);
}

/// `slow` by memory: a run whose GPU memory climbs steadily past the most that three earlier
/// successful runs of the same command held wakes the submitter once, before it runs out.
#[test]
fn a_run_whose_gpu_memory_climbs_past_its_commands_history_is_slow() {
    let b = Baton::with_config(
        3,
        "[midrun]\nslow_after = \"10s\"\n\n[waste]\nsample_interval = \"1s\"\n",
    );
    let (channel, path) = inbox(&b);
    let script = "d=\"$BATON_HOME/sim/gpu$CUDA_VISIBLE_DEVICES\"; mkdir -p \"$d\"; \
                  if [ -e leak ]; then i=0; while true; do \
                    echo \"$(( (1 << 30) + i * (300 << 20) )) 50\" > \"$d/$$\"; \
                    echo \"step $i\"; i=$((i + 1)); sleep 1; done; \
                  else echo \"$(( 1 << 30 )) 50\" > \"$d/$$\"; sleep 6; fi";
    let earlier: Vec<u64> = (0..3)
        .map(|_| b.submit_sh(&["--gpus", "1"], script))
        .collect();
    b.wait_ok(&earlier);
    b.touch("leak");
    let id = b.submit_sh(&["--gpus", "1", "--notify", &channel], script);
    // Not before `slow_after` (10 s), then looked at every 2.5 s: a loaded machine's late
    // samples only delay it.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while b.job(id)["alerts"].as_array().is_none_or(Vec::is_empty) {
        assert!(
            std::time::Instant::now() < until,
            "no alert: {}",
            b.daemon_log()
        );
        std::thread::sleep(common::POLL * 8);
    }
    let alerts = delivered_alerts(&b, id, 1);
    assert_eq!(alerts[0]["detector"], "slow", "{alerts:#?}");
    wait_contains(&path, &alert_end(id));
    let text = read(&path);
    assert!(
        text.contains("its GPU memory has climbed steadily from")
            && text
                .contains("past the 1 GiB that 3 earlier successful runs of the same command held"),
        "{text}"
    );
    b.run(&["cancel", &id.to_string()]).expect(0);
}

#[test]
fn a_restart_neither_repeats_nor_loses_an_alert() {
    let mut b = Baton::with_config(2, "[midrun]\nerror_grace = \"1s\"\n");
    let (channel, path) = inbox(&b);
    let id = b.submit_sh(
        &["--notify", &channel],
        "echo 'loss=nan'; while [ ! -e go ]; do sleep 0.1; done; \
         echo 'RuntimeError: CUDA error: an illegal memory access was encountered' >&2; \
         echo 'torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp' >&2; sleep 60",
    );
    wait_contains(&path, &alert_end(id));
    // Killed once the delivery is recorded (a `kill -9` right after a channel took it, before
    // that, sends it again after the restart, as for reports).
    delivered_alerts(&b, id, 1);
    b.kill_daemon();
    b.serve_with(&["serve", "--sim-gpus", "2", "--grace", "1s"]);
    // The restarted daemon reads the job's output again (the NaN among it) and follows on.
    b.touch("go");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while read(&path).matches(&alert_end(id)).count() < 2 {
        assert!(
            std::time::Instant::now() < until,
            "no error alert after the restart: {}\n{}",
            read(&path),
            b.daemon_log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let text = read(&path);
    assert_eq!(text.matches("its loss became NaN").count(), 1, "{text}");
    assert_eq!(text.matches("printed an error").count(), 1, "{text}");
    b.run(&["cancel", &id.to_string()]).expect(0);
    wait_contains(&path, &report_end(id));
    assert_eq!(read(&path).matches(&alert_end(id)).count(), 2);
}

#[test]
fn stop_on_ends_the_job_as_failed_and_frees_its_gpu_for_the_next() {
    let b = Baton::start(1);
    let (channel, path) = inbox(&b);
    let id = b.submit_sh(
        &["--gpus", "1", "--stop-on", "nan", "--notify", &channel],
        "echo 'step 7 loss=inf'; sleep 60",
    );
    let next = b.submit_sh(&["--gpus", "1"], "true");
    let out = b.wait(&[id], "30s");
    assert_eq!(out.code, 1, "{out:?}");
    let job = b.job(id);
    assert_eq!(job["state"], "failed", "{job:#}");
    assert_eq!(
        job["reason"], "stopped by baton: its loss became NaN or infinite (--stop-on nan)",
        "{job:#}"
    );
    assert_eq!(job["alerts"][0]["action"], "stop", "{job:#}");
    // Its GPU went to the next job; its end report, not an alert, was delivered.
    b.wait_ok(&[next]);
    wait_contains(&path, &report_end(id));
    let text = read(&path);
    assert!(!text.contains(&alert_end(id)), "{text}");
    assert!(text.contains("stopped by baton"), "{text}");
    let report = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(report.contains("baton stopped the job"), "{report}");
}

/// `stop` in config.toml stops every job the detector fires for, and says so.
#[test]
fn a_detector_set_to_stop_in_the_config_stops_the_job_and_names_the_setting() {
    let b = Baton::with_config(1, "[midrun]\nnan = \"stop\"\n");
    let id = b.submit_sh(&["--gpus", "1"], "echo 'step 7 loss=nan'; sleep 60");
    let job = b.poll_job(id, "stopped", |j| j["state"] == "failed");
    assert_eq!(
        job["reason"],
        "stopped by baton: its loss became NaN or infinite ([midrun] nan = \"stop\")",
        "{job:#}"
    );
    let out = b.run(&["report", &id.to_string()]).expect(0).stdout;
    assert!(out.contains("baton stopped the job"), "{out}");
}

#[test]
fn an_unknown_detector_is_refused_and_nothing_is_queued() {
    let b = Baton::start(1);
    let out = b.run(&["submit", "--stop-on", "nan,stal", "--", "true"]);
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains(
            "\"stal\": no such detector (there are: nan, error, stall, finished-but-alive, slow)"
        ),
        "{out:?}"
    );
    let listed = b.run(&["status", "--all", "--json"]).expect(0).json();
    assert_eq!(listed, serde_json::json!([]), "nothing queued");
}

/// The py-spy that `.ci/run` installs beside the MCP SDK, in `target/mcp-venv`.
fn py_spy() -> Option<std::path::PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv/bin/py-spy");
    path.exists().then_some(path)
}

/// A Python script that prints a step and then hangs in `wait_for_peers` (an all-reduce that
/// never returns), its dataloader thread asleep beside it.
const HANGS: &str = "import threading, time\n\
def wait_for_peers():\n    time.sleep(600)\n\
def loader():\n    time.sleep(600)\n\
threading.Thread(target=loader, name='loader', daemon=True).start()\n\
print('step 5 loss=0.31', flush=True)\n\
wait_for_peers()\n";

/// A stalled Python job's alert says where it hangs: the stacks of its processes as py-spy
/// reads them (and the whole dump stored beside the alert).
#[test]
fn a_stalled_python_jobs_alert_carries_the_stacks_where_it_hangs() {
    let Some(py_spy) = py_spy() else {
        assert!(
            std::env::var_os("BATON_REQUIRE_AGENT_CLIS").is_none(),
            "py-spy is required (BATON_REQUIRE_AGENT_CLIS is set) but target/mcp-venv has none"
        );
        eprintln!("skipping: no py-spy in target/mcp-venv (run .ci/run)");
        return;
    };
    let b = Baton::with_config(
        1,
        &format!(
            "[midrun]\nstall_after = \"2s\"\npy_spy = \"{}\"\n",
            py_spy.display()
        ),
    );
    std::fs::write(b.path("hangs.py"), HANGS).unwrap();
    let (channel, path) = inbox(&b);
    let id = b.submit(&["--notify", &channel, "--", "python3", "hangs.py"]);
    let alerts = delivered_alerts(&b, id, 1);
    assert_eq!(alerts[0]["detector"], "stall");
    wait_contains(&path, &alert_end(id));
    let text = read(&path);
    assert!(
        text.contains("Where its Python processes are (py-spy dump"),
        "{text}"
    );
    assert!(text.contains("wait_for_peers (hangs.py:3)"), "{text}");
    let stored = b.home.join(format!("jobs/{id}/alert-1.stall.stacks.txt"));
    assert!(
        text.contains(&format!("All of it: {}", stored.display())),
        "{text}"
    );
    let all = read(&stored);
    assert!(
        all.contains("\"loader\"") && all.contains("loader (hangs.py:5)"),
        "{all}"
    );
    b.run(&["cancel", &id.to_string()]).expect(0);
}

/// Without py-spy, a stalled Python job's alert says how to get its stacks next time; a job
/// that runs no Python says nothing of py-spy.
#[test]
fn without_py_spy_a_stalled_python_jobs_alert_says_how_to_get_its_stacks() {
    let b = Baton::with_config(
        1,
        "[midrun]\nstall_after = \"2s\"\npy_spy = \"/nonexistent/py-spy\"\n",
    );
    std::fs::write(b.path("hangs.py"), HANGS).unwrap();
    let (channel, path) = inbox(&b);
    let python = b.submit(&["--notify", &channel, "--", "python3", "hangs.py"]);
    let shell = b.submit_sh(
        &["--notify", &channel],
        "echo 'step 5 loss=0.31'; sleep 600",
    );
    delivered_alerts(&b, python, 1);
    delivered_alerts(&b, shell, 1);
    wait_contains(&path, &alert_end(python));
    wait_contains(&path, &alert_end(shell));
    let text = read(&path);
    let about = |id: u64| {
        let start = text.find(&format!("Job {id} (")).unwrap();
        let end = start + text[start..].find(&alert_end(id)).unwrap();
        text[start..end].to_string()
    };
    assert!(
        about(python).contains("install py-spy (`pip install py-spy`)"),
        "{text}"
    );
    assert!(!about(shell).contains("py-spy"), "{text}");
    for id in [python, shell] {
        b.run(&["cancel", &id.to_string()]).expect(0);
    }
}
