//! The schema and its migrations, versioned with `PRAGMA user_version`. Each migration runs once,
//! in its own transaction; a database from a newer baton is refused rather than misread.

use rusqlite::Connection;

use super::StoreError;

const MIGRATIONS: &[&str] = &[
    // 1: jobs and the event log.
    "CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        state TEXT NOT NULL,
        command TEXT NOT NULL,
        cwd TEXT NOT NULL,
        env TEXT NOT NULL,
        owner_uid INTEGER NOT NULL,
        owner TEXT NOT NULL,
        priority INTEGER NOT NULL,
        gpus_requested INTEGER NOT NULL,
        gpu_mem INTEGER,
        time_limit_ms INTEGER,
        retries INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        deps TEXT NOT NULL,
        tags TEXT NOT NULL,
        submitted_at INTEGER NOT NULL,
        started_at INTEGER,
        ended_at INTEGER,
        exit_code INTEGER,
        signal INTEGER,
        reason TEXT,
        gpus TEXT NOT NULL,
        workflow_id INTEGER,
        cancel_requested_by TEXT,
        umask INTEGER
    );
    CREATE INDEX jobs_active ON jobs (state) WHERE state IN ('queued', 'running');
    CREATE INDEX jobs_ended ON jobs (ended_at);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs (id),
        at INTEGER NOT NULL,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX events_job ON events (job_id);",
    // 2: where each job's report goes (channels may hold secrets: the database is 0600), the
    // agent session that submitted it, and the outbox: one row per (job, channel) delivery.
    "ALTER TABLE jobs ADD COLUMN notify TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE jobs ADD COLUMN session TEXT;
    CREATE INDEX jobs_session ON jobs (session);
    CREATE TABLE deliveries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs (id),
        channel TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at INTEGER NOT NULL,
        error TEXT,
        delivered_at INTEGER
    );
    CREATE INDEX deliveries_job ON deliveries (job_id);
    CREATE INDEX deliveries_pending ON deliveries (next_at) WHERE state = 'pending';",
    // 3: workflows. Their tasks are ordinary jobs with a `task` name; an atomic workflow's
    // admission reserves GPUs for each task (`reserved`) under a lease the daemon renews.
    "CREATE TABLE workflows (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        atomic INTEGER NOT NULL,
        state TEXT NOT NULL,
        owner_uid INTEGER NOT NULL,
        owner TEXT NOT NULL,
        source TEXT NOT NULL,
        submitted_at INTEGER NOT NULL,
        admitted_at INTEGER,
        ended_at INTEGER
    );
    CREATE INDEX workflows_active ON workflows (state) WHERE state IN ('queued', 'running');
    ALTER TABLE jobs ADD COLUMN task TEXT;
    ALTER TABLE jobs ADD COLUMN reserved TEXT;
    ALTER TABLE jobs ADD COLUMN lease_until INTEGER;
    ALTER TABLE jobs ADD COLUMN critical_path_ms INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_workflow ON jobs (workflow_id);",
    // 4: a workflow's summary goes out through the outbox too: such a delivery names the
    // workflow (its job_id is the task whose end ended the workflow).
    "ALTER TABLE deliveries ADD COLUMN workflow_id INTEGER;",
    // 5: the tasks a workflow task asked to share a node with (`colocate_with`), as job ids.
    "ALTER TABLE jobs ADD COLUMN colocate TEXT NOT NULL DEFAULT '[]';",
    // 6: the GPU monitor (issue 6). `audit`: every waste decision and what came of it.
    // `job_gpu_usage`: each attempt's use of each of its GPUs, kept up to date while it runs (the
    // report and `baton stats` read it). `gpu_minutes`: each GPU's samples summed per minute.
    "CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at INTEGER NOT NULL,
        rule TEXT NOT NULL,
        job_id INTEGER,
        pid INTEGER,
        gpu INTEGER,
        action TEXT NOT NULL,
        outcome TEXT NOT NULL,
        dry_run INTEGER NOT NULL,
        message TEXT NOT NULL,
        evidence TEXT NOT NULL
    );
    CREATE INDEX audit_at ON audit (at);
    CREATE TABLE job_gpu_usage (
        job_id INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        gpu INTEGER NOT NULL,
        sampled_ms INTEGER NOT NULL,
        idle_ms INTEGER NOT NULL,
        samples INTEGER NOT NULL,
        util_samples INTEGER NOT NULL,
        util_sum REAL NOT NULL,
        util_peak REAL,
        mem_peak INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (job_id, attempt, gpu)
    );
    CREATE TABLE gpu_minutes (
        gpu INTEGER NOT NULL,
        minute INTEGER NOT NULL,
        samples INTEGER NOT NULL,
        util_samples INTEGER NOT NULL,
        util_sum REAL NOT NULL,
        mem_peak INTEGER NOT NULL,
        PRIMARY KEY (gpu, minute)
    );",
    // 7: the Slurm backend (issue 7). A job's submission is recorded (`slurm_submitting_at`)
    // before `sbatch` runs, then its Slurm job id and, once it runs, its node list.
    "ALTER TABLE jobs ADD COLUMN slurm_id INTEGER;
    ALTER TABLE jobs ADD COLUMN slurm_submitting_at INTEGER;
    ALTER TABLE jobs ADD COLUMN slurm_nodes TEXT;
    ALTER TABLE jobs ADD COLUMN slurm_state TEXT;
    CREATE INDEX gpu_minutes_minute ON gpu_minutes (minute);",
    // 8: a retried job waits out its backoff: it starts no earlier than `not_before`.
    "ALTER TABLE jobs ADD COLUMN not_before INTEGER;",
    // 9: a submission's idempotency key: a repeat with the same key (per user) returns the job
    // the first one queued.
    "ALTER TABLE jobs ADD COLUMN request_id TEXT;
    CREATE UNIQUE INDEX jobs_request ON jobs (owner_uid, request_id) WHERE request_id IS NOT NULL;",
    // 10: a job's session channels form one wake chain (issue 13): each later link stands by
    // for the one before it (`after_id`) and is used only if that one did not wake the session.
    "ALTER TABLE deliveries ADD COLUMN after_id INTEGER;
    CREATE INDEX deliveries_after ON deliveries (after_id) WHERE after_id IS NOT NULL;",
    // 11: cores and host memory are resources like GPUs (issue 15). Jobs queued before asked
    // for one core and no memory, the defaults of a new submission.
    "ALTER TABLE jobs ADD COLUMN cpus INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE jobs ADD COLUMN mem INTEGER NOT NULL DEFAULT 0;",
    // 12: the queue's verbs (issue 15): a job held until released, one that begins no earlier
    // than a time, and one that reads a file as its stdin.
    "ALTER TABLE jobs ADD COLUMN held_by TEXT;
    ALTER TABLE jobs ADD COLUMN begin_at INTEGER;
    ALTER TABLE jobs ADD COLUMN stdin TEXT;",
    // 13: `baton requeue` runs an ended job
    // again under the same id. The deliveries of its earlier end are marked superseded then
    // (`superseded_at`): none still waiting is sent, and only the current end's are read back
    // (the report's deliveries, the hook's claim, the inbox fallback's check for a duplicate).
    "ALTER TABLE deliveries ADD COLUMN superseded_at INTEGER;",
    // 14: sweeps and arrays (issue 16): many runs of one command, one unit with one comparison
    // report. Each run is a job that knows its sweep, its index and its parameters; the
    // sweep's report (and its early alert, `kind = 'alert'`) rides on a run's deliveries.
    "CREATE TABLE sweeps (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        param_names TEXT NOT NULL,
        state TEXT NOT NULL,
        owner_uid INTEGER NOT NULL,
        owner TEXT NOT NULL,
        submitted_at INTEGER NOT NULL,
        ended_at INTEGER,
        runs INTEGER NOT NULL,
        max_parallel INTEGER,
        rank_by TEXT,
        notify_each INTEGER NOT NULL DEFAULT 0,
        on_failure TEXT NOT NULL DEFAULT 'continue',
        notify TEXT NOT NULL DEFAULT '[]',
        alerted_at INTEGER,
        request_id TEXT
    );
    CREATE INDEX sweeps_active ON sweeps (state) WHERE state IN ('queued', 'running');
    CREATE UNIQUE INDEX sweeps_request ON sweeps (owner_uid, request_id)
        WHERE request_id IS NOT NULL;
    ALTER TABLE jobs ADD COLUMN sweep_id INTEGER;
    ALTER TABLE jobs ADD COLUMN sweep_index INTEGER;
    ALTER TABLE jobs ADD COLUMN params TEXT;
    CREATE INDEX jobs_sweep ON jobs (sweep_id) WHERE sweep_id IS NOT NULL;
    ALTER TABLE deliveries ADD COLUMN sweep_id INTEGER;
    ALTER TABLE deliveries ADD COLUMN kind TEXT NOT NULL DEFAULT 'end';",
    // 15: mid-run alerts (issue 17): what a running job's output showed, at most once per
    // detector and attempt (the unique index), delivered like reports (`deliveries.alert_id`);
    // the detectors that stop a job (`--stop-on`), and why baton stopped one.
    "CREATE TABLE alerts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id INTEGER NOT NULL REFERENCES jobs (id),
        attempt INTEGER NOT NULL,
        detector TEXT NOT NULL,
        action TEXT NOT NULL,
        at INTEGER NOT NULL,
        seen_at INTEGER NOT NULL,
        evidence TEXT NOT NULL,
        message TEXT NOT NULL
    );
    CREATE UNIQUE INDEX alerts_once ON alerts (job_id, attempt, detector);
    ALTER TABLE deliveries ADD COLUMN alert_id INTEGER;
    ALTER TABLE jobs ADD COLUMN stop_on TEXT;
    ALTER TABLE jobs ADD COLUMN stop_reason TEXT;",
    // 16: what a job's submitter asked to be woken for while it runs (`--wake-on`,
    // `--wake-when`), as JSON; NULL for nothing.
    "ALTER TABLE jobs ADD COLUMN wake TEXT;",
    // 17: a detector raised again in one attempt (a stall after the job printed again, each
    // `--wake-every` digest): its number, in the unique index.
    "ALTER TABLE alerts ADD COLUMN seq INTEGER NOT NULL DEFAULT 1;
    DROP INDEX alerts_once;
    CREATE UNIQUE INDEX alerts_once ON alerts (job_id, attempt, detector, seq);",
    // 18: the GPUs each ended attempt held and for how long, whose (GPU-hour budgets, issue
    // 19); the last attempts of the jobs already ended are counted from their rows.
    "CREATE TABLE gpu_holds (
        job_id INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        owner_uid INTEGER NOT NULL,
        gpus INTEGER NOT NULL,
        started_at INTEGER NOT NULL,
        ended_at INTEGER NOT NULL,
        PRIMARY KEY (job_id, attempt)
    );
    CREATE INDEX gpu_holds_owner ON gpu_holds (owner_uid, ended_at);
    INSERT OR IGNORE INTO gpu_holds
        SELECT id, attempt, owner_uid, max(json_array_length(gpus), gpus_requested),
               started_at, ended_at
        FROM jobs
        WHERE started_at IS NOT NULL AND ended_at IS NOT NULL AND ended_at >= started_at
          AND max(json_array_length(gpus), gpus_requested) > 0;",
    // 19: reservations (`baton reserve`, issue 19): GPUs kept for some users for a window of
    // time; and the reservation each job runs in (`--reservation`), as JSON.
    "CREATE TABLE reservations (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        gpus TEXT NOT NULL,
        start_at INTEGER NOT NULL,
        end_at INTEGER NOT NULL,
        users TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        cancelled_at INTEGER,
        cancelled_by TEXT
    );
    ALTER TABLE jobs ADD COLUMN reservation TEXT;",
    // 20: a job's checkpoint signal (`--signal SIG[@SECS]`), as JSON.
    "ALTER TABLE jobs ADD COLUMN checkpoint_signal TEXT;",
];

pub fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::TooNew {
            found: version,
            known,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}
