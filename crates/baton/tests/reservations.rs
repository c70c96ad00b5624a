//! Reservations (issue 19) on a daemon of one user: `baton reserve` keeps GPUs for a window;
//! jobs outside it take those GPUs only if they end, by their time limit, before it begins; a
//! job submitted `--reservation NAME` runs in it, on its GPUs, and is stopped at its end; a
//! cancelled reservation's queued jobs end as failed, saying why. Bad requests are refused
//! with what exists. (Two users, who may reserve and run where: tests/system.rs.)

mod common;

use common::Baton;

fn reserve(b: &Baton, args: &[&str]) -> String {
    let mut full = vec!["reserve"];
    full.extend_from_slice(args);
    b.run(&full).expect(0).stdout.trim().to_string()
}

fn reservation(b: &Baton, name: &str, all: bool) -> serde_json::Value {
    let mut args = vec!["reservations", "--json"];
    if all {
        args.push("--all");
    }
    let rows = b.run(&args).expect(0).json();
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no reservation {name}: {rows}"))
}

#[test]
fn a_reservation_keeps_its_gpus_until_it_runs_its_own_jobs_and_stops_them_at_its_end() {
    let b = Baton::start(4);
    // Two GPUs from a minute from now, for an hour.
    assert_eq!(
        reserve(
            &b,
            &[
                "--gpus",
                "2",
                "--start",
                "now+1m",
                "--duration",
                "1h",
                "--name",
                "later"
            ]
        ),
        "later"
    );
    let later = reservation(&b, "later", false);
    assert_eq!(later["state"], "upcoming", "{later}");
    let kept: Vec<u64> = later["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect();
    assert_eq!(kept.len(), 2, "{later}");

    // A job without a time limit would run into it: it may not have all four GPUs, and is not
    // told it starts now.
    let out = b
        .run(&["submit", "--gpus", "4", "--", "sleep", "60"])
        .expect(0);
    assert!(
        out.stderr.contains("predicted start") && !out.stderr.contains("it starts now"),
        "{out:?}"
    );
    let whole: u64 = out.stdout.trim().parse().unwrap();
    let reason = b.wait_reason(whole);
    assert!(
        reason.starts_with("reservation: needs 4 whole GPUs, 4 of 4 free")
            && reason.contains("kept for reservation later")
            && reason.contains("with a time limit that ends before then it may use them"),
        "{reason}"
    );
    // One that ends before the window begins backfills into it.
    let short = b.submit(&["--gpus", "4", "--time-limit", "30s", "--", "true"]);
    b.wait_ok(&[short]);
    b.run(&["cancel", &whole.to_string()]).expect(0);

    // A window from now, for three seconds: its job runs on its GPUs and is stopped at its end.
    reserve(&b, &["--gpus", "2", "--duration", "3s", "--name", "now"]);
    let now = reservation(&b, "now", false);
    assert_eq!(now["state"], "active", "{now}");
    let inside = b.submit_sh(
        &["--gpus", "2", "--reservation", "now"],
        "echo \"gpus=$CUDA_VISIBLE_DEVICES\"; sleep 60",
    );
    let job = b.wait_running(inside);
    assert_eq!(job["reservation"], "now", "{job}");
    let on: Vec<u64> = job["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect();
    let reserved: Vec<u64> = now["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect();
    assert_eq!(on, reserved, "{job}");
    b.wait(&[inside], "60s");
    let job = b.job(inside);
    assert_eq!(job["state"], "timeout", "{job}");
    assert_eq!(
        job["reason"], "its reservation now ended: a job in a reservation ends with its window",
        "{job}"
    );
    let ran = common::millis(&job["ended_at"]) - common::millis(&job["started_at"]);
    assert!((1_500..20_000).contains(&ran), "ran {ran} ms: {job}");
    let ended = reservation(&b, "now", true);
    assert_eq!(
        (&ended["state"], &ended["running"]),
        (&"ended".into(), &0.into()),
        "{ended}"
    );

    // A job waiting for a window that is cancelled can never start: it ends failed, saying why.
    let waiting = b.submit(&["--gpus", "1", "--reservation", "later", "--", "true"]);
    let reason = b.wait_reason(waiting);
    assert!(
        reason.starts_with("reservation: later begins in "),
        "{reason}"
    );
    let out = b.run(&["reserve", "--cancel", "later"]).expect(0);
    assert!(
        out.stderr
            .contains("its 1 queued job(s) end as failed (a held one once released)"),
        "{out:?}"
    );
    b.wait(&[waiting], "30s");
    let job = b.job(waiting);
    assert_eq!(
        (&job["state"], &job["reason"]),
        (
            &"failed".into(),
            &"its reservation later was cancelled by root before it could start".into()
        ),
        "{job}"
    );
    assert!(
        b.run(&["reservations"])
            .expect(0)
            .stdout
            .starts_with("no reservations")
    );
}

#[test]
fn impossible_reservations_and_submissions_are_refused_saying_what_exists() {
    let b = Baton::start(4);
    let refused = |args: &[&str], code: i32, needle: &str| {
        let out = b.run(args);
        assert_eq!(out.code, code, "{args:?}: {out:?}");
        assert!(out.stderr.contains(needle), "{args:?}: {out:?}");
    };
    refused(
        &["reserve", "--gpus", "5", "--duration", "1h"],
        2,
        "only 4 are free of other reservations",
    );
    refused(
        &[
            "reserve",
            "--gpus",
            "1",
            "--start",
            "2020-01-01",
            "--duration",
            "1h",
        ],
        2,
        "is in the past",
    );
    refused(
        &[
            "reserve",
            "--gpus",
            "1",
            "--start",
            "someday",
            "--duration",
            "1h",
        ],
        2,
        "cannot read --start \"someday\"",
    );
    refused(
        &[
            "reserve",
            "--gpus",
            "1",
            "--duration",
            "1h",
            "--name",
            "no spaces",
        ],
        2,
        "a name is letters, digits",
    );
    refused(&["reserve", "--gpus", "1"], 2, "--duration");
    reserve(&b, &["--gpus", "3", "--duration", "1h", "--name", "big"]);
    // The GPUs it keeps are not there for an overlapping one.
    refused(
        &[
            "reserve",
            "--gpus",
            "2",
            "--start",
            "now+30m",
            "--duration",
            "1h",
        ],
        2,
        "only 1 is free of other reservations for that time on one node (of 4 GPUs); \
         overlapping: big",
    );
    let out = b.run(&[
        "reserve",
        "--gpus",
        "1",
        "--duration",
        "1h",
        "--name",
        "big",
    ]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("a reservation named big stands"),
        "{out:?}"
    );
    refused(
        &[
            "submit",
            "--reservation",
            "nope",
            "--gpus",
            "1",
            "--",
            "true",
        ],
        2,
        "no such reservation (there are: big)",
    );
    refused(
        &[
            "submit",
            "--reservation",
            "big",
            "--gpus",
            "4",
            "--",
            "true",
        ],
        2,
        "keeps 3 GPUs",
    );
    refused(
        &["submit", "--reservation", "big", "--", "true"],
        2,
        "asks for 1 to 3 with --gpus",
    );
    // A queued job in it cannot be made to need more than it keeps.
    let queued = b.submit(&[
        "--reservation",
        "big",
        "--gpus",
        "1",
        "--begin",
        "now+1h",
        "--",
        "true",
    ]);
    refused(
        &["update", &queued.to_string(), "--gpus", "4"],
        2,
        "runs in reservation big, which keeps 3 GPUs: it asks for 1 to 3",
    );
    b.run(&["cancel", &queued.to_string()]).expect(0);
    let out = b.run(&["reserve", "--cancel", "nope"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(
        out.stderr.contains("no standing reservation named nope"),
        "{out:?}"
    );
    // Unnamed: named for its id.
    let name = reserve(&b, &["--gpus", "1", "--duration", "10m"]);
    assert!(name.starts_with("resv-"), "{name}");
    // What was refused left nothing behind: two reservations.
    let rows = b.run(&["reservations", "--json"]).expect(0).json();
    assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
    let table = b.run(&["reservations"]).expect(0).stdout;
    assert!(
        table.starts_with("NAME ") && table.contains("big "),
        "{table}"
    );
}

#[test]
fn reservations_survive_a_daemon_restart() {
    let mut b = Baton::start(2);
    reserve(
        &b,
        &[
            "--gpus",
            "2",
            "--start",
            "now+1h",
            "--duration",
            "1h",
            "--name",
            "kept",
        ],
    );
    let queued = b.submit(&["--gpus", "1", "--reservation", "kept", "--", "true"]);
    b.kill_daemon();
    b.serve();
    let kept = reservation(&b, "kept", false);
    assert_eq!(
        (&kept["state"], &kept["queued"]),
        (&"upcoming".into(), &1.into()),
        "{kept}"
    );
    let reason = b.wait_reason(queued);
    assert!(
        reason.starts_with("reservation: kept begins in "),
        "{reason}"
    );
    // Its GPUs stay kept from a job without a time limit.
    let other = b.submit(&["--gpus", "1", "--", "sleep", "60"]);
    assert!(b.wait_reason(other).starts_with("reservation: needs"));
}
