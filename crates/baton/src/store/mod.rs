//! Durable state in SQLite (WAL), one file per table: `jobs`, `workflows`, `deliveries` (the
//! outbox and its wake chains), `events` (the append-only log) and `monitor` (GPU samples and
//! the audit log); `schema` holds the migrations, `history` the paged listings, their
//! read-only connections and what retention deletes. Every state change the daemon makes is
//! committed here before it is acted on, so a crash at any point leaves a record the next daemon
//! can recover from. This file owns the connection (`Store`), the error type, and the helpers
//! the tables share: JSON columns and reading columns by name.

/// Declares the columns a query reads, by name: `$ty::LIST` is the explicit SELECT list, and
/// `$ty::of(&stmt)` finds where each named column is in that statement's result, once per
/// statement (rusqlite's `row.get("name")` would scan every column's name on every get), so
/// that rows are read by name at the cost of reading them by position.
macro_rules! columns {
    ($(#[$meta:meta])* $ty:ident { $first:ident $(, $col:ident)* $(,)? }) => {
        $(#[$meta])*
        struct $ty {
            $first: usize,
            $($col: usize,)*
        }

        impl $ty {
            /// The SELECT list, in the order the fields are declared.
            const LIST: &'static str = concat!(stringify!($first) $(, ", ", stringify!($col))*);

            /// Where each column is in `stmt`'s result, found by its name. Each is looked for
            /// first right after the one before it (a `SELECT {LIST}` has them in that order),
            /// so a whole row's worth costs one pass over the names.
            fn of(stmt: &rusqlite::Statement<'_>) -> rusqlite::Result<$ty> {
                let names: Vec<&str> = stmt.column_names().collect();
                let mut next = 0;
                let mut at = |name: &str| -> rusqlite::Result<usize> {
                    let found = match names.get(next) {
                        Some(n) if n.eq_ignore_ascii_case(name) => Some(next),
                        _ => names.iter().position(|n| n.eq_ignore_ascii_case(name)),
                    };
                    let i = found
                        .ok_or_else(|| rusqlite::Error::InvalidColumnName(name.to_string()))?;
                    next = i + 1;
                    Ok(i)
                };
                Ok($ty {
                    $first: at(stringify!($first))?,
                    $($col: at(stringify!($col))?,)*
                })
            }
        }
    };
}

mod alerts;
mod deliveries;
mod events;
mod history;
mod jobs;
mod monitor;
mod names;
mod reservations;
mod schema;
mod sweeps;
mod workflows;

pub use alerts::AlertRecord;
pub use deliveries::{Delivery, DeliveryState, Subject};
pub(crate) use deliveries::{insert_deliveries, supersede_deliveries};
// No caller names `Event` today (they take it from `events()`), but it stays where it was.
#[allow(unused_imports)]
pub use events::Event;
pub(crate) use events::log_event;
pub use history::{HeldRow, Readers, Removed};
pub use jobs::{InReservation, JobRecord, NewJob, SpecChange, default_name};
pub use monitor::{AuditEntry, GpuMinuteSample, JobGpuSample, JobGpuUsage};
pub use names::{NamedJob, is_glob};
pub use reservations::{NewReservation, ReservationRecord};
pub use rusqlite::Transaction;
pub use sweeps::{NewSweep, OnFailure, SweepRecord};
pub use workflows::{NewTask, NewWorkflow, WorkflowRecord};

use std::path::Path;

use rusqlite::Connection;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A file the store keeps beside the database (a workflow's summary).
    #[error("{0}")]
    Io(std::io::Error),
    #[error("corrupt record for job {id}: {detail}")]
    Corrupt { id: u64, detail: String },
    #[error(
        "the database was written by a newer baton (schema version {found}, this one knows {known})"
    )]
    TooNew { found: i64, known: i64 },
    /// A transition that does not apply to the job's state (the caller's view was stale).
    #[error("job {id}: {refused}")]
    Refused {
        id: u64,
        refused: baton_core::lifecycle::Refused,
    },
}

impl StoreError {
    /// The disk (or the database's size limit) is full: a write may go through once there is
    /// room again.
    pub fn is_full(&self) -> bool {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => {
                e.code == rusqlite::ErrorCode::DiskFull
            }
            StoreError::Io(e) => e.raw_os_error() == Some(libc::ENOSPC),
            _ => false,
        }
    }

    /// The error in a few words, for messages that say what will happen next.
    pub fn short(&self) -> String {
        match self {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(e, Some(text))) => {
                format!("{text} ({:?})", e.code)
            }
            other => other.to_string(),
        }
    }
}

pub struct Store {
    conn: Connection,
}

/// How many prepared statements a connection keeps: more than the store has.
const STATEMENT_CACHE: usize = 256;

impl Store {
    /// Opens (creating and migrating as needed) the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open(path)?;
        // WAL: readers never block the writer. synchronous=NORMAL: a commit is in the WAL before
        // it returns, so it survives any crash of the daemon (the promise jobs rely on); only an
        // OS crash or power loss can drop the last commits, and that also kills every job they
        // describe. FULL would add an fsync to every submit, start and end.
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; \
             PRAGMA busy_timeout=5000;",
        )?;
        // Every statement is prepared once and kept (`prepare_cached`): the store has about 70,
        // more than rusqlite's default cache of 16 holds.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // One plan per statement whatever its parameters: otherwise SQLite re-prepares a cached
        // statement whenever a bound value might change its plan (a partial index, a LIMIT, the
        // STAT4 estimates this build has), which made every report and delivery query parse its
        // SQL again. Every partial index here is chosen by a literal in the query, not a value.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        schema::migrate(&conn)?;
        Ok(Store { conn })
    }
}

/// How many frames the write-ahead log may hold before the checkpointer copies it back into the
/// database (SQLite's own automatic checkpoint runs at the same size).
const CHECKPOINT_FRAMES: i32 = 1000;

impl Store {
    /// Copies the write-ahead log back into the database on a thread of its own, with a
    /// connection of its own, instead of in whichever commit fills it. That commit (a
    /// submission, a job's start or end) used to stall for the copy, a few milliseconds every
    /// fifty jobs or so, and more where the checkpoint's sync reaches a disk; and it held the
    /// daemon's lock meanwhile. The copy is passive: it never waits for the writer, and what it
    /// cannot copy yet (a reader still on older pages) it copies at the next turn. `path`: this
    /// store's database.
    pub fn checkpoint_in_background(&mut self, path: &Path) -> Result<(), StoreError> {
        let checkpointer = Connection::open(path)?;
        checkpointer.execute_batch("PRAGMA busy_timeout=5000; PRAGMA synchronous=NORMAL;")?;
        // Asked once a commit leaves the log long enough; one request waiting is enough.
        let (tx, rx) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("baton-checkpoint".into())
            .spawn(move || {
                // Ends when the store, and with it the hook that asks, is dropped.
                while rx.recv().is_ok() {
                    let copied = checkpointer.wal_checkpoint_v2(
                        Some(rusqlite::MAIN_DB),
                        rusqlite::wal::CheckpointMode::PASSIVE,
                    );
                    if let Err(e) = copied {
                        tracing::warn!("checkpoint of the state database failed: {e}");
                    }
                }
            })
            .map_err(StoreError::Io)?;
        // The hook replaces SQLite's automatic checkpoint (which is itself a WAL hook).
        self.conn.wal_hook(Some(
            move |_: &mut rusqlite::hooks::Wal, frames: std::ffi::c_int| {
                if frames >= CHECKPOINT_FRAMES {
                    let _ = tx.try_send(());
                }
                Ok(())
            },
        ))?;
        Ok(())
    }
}

/// A value as its JSON column holds it.
fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data always serialises")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use baton_core::{DepKind, Dependency, JobId, ResourceRequest};

    use super::*;
    use crate::notify::Channel;

    /// A job with every field set, for the tables' tests.
    pub(super) fn new_job(command: &[&str]) -> NewJob {
        NewJob {
            name: None,
            command: command.iter().map(|s| s.to_string()).collect(),
            cwd: "/tmp".into(),
            env: BTreeMap::from([("A".into(), "1".into())]),
            owner_uid: 1000,
            owner: "alice".into(),
            priority: 3,
            request: ResourceRequest::shared(2, 8 << 30),
            time_limit: Some(60_000),
            retries: 1,
            deps: vec![Dependency {
                job: JobId(7),
                kind: DepKind::Any,
            }],
            tags: BTreeMap::from([("protect".into(), "true".into())]),
            submitted_at: 1_000,
            umask: Some(0o022),
            notify: vec![Channel::File {
                path: "/tmp/inbox.md".into(),
            }],
            session: Some("tmux:%1".into()),
            workflow_id: None,
            task: None,
            critical_path: 0,
            begin_at: Some(5_000),
            reservation: Some(InReservation {
                id: 2,
                name: "deadline".into(),
                end: 9_000,
            }),
            signal: Some(baton_core::signal::CheckpointSignal {
                signal: 10,
                lead_ms: 30_000,
            }),
            stdin: Some("/tmp/input.txt".into()),
            stop_on: vec![baton_core::midrun::Detector::Nan],
            wake: baton_core::midrun::Milestones::parse(baton_core::midrun::AskedMilestones {
                wake_on: &["Epoch \\d+ done".into()],
                wake_when: &["val_acc>=0.9".into()],
                ..Default::default()
            })
            .expect("valid milestones"),
            held_by: None,
            sweep: None,
            params: Vec::new(),
        }
    }

    #[test]
    fn the_log_is_copied_back_in_the_background_and_stays_bounded() {
        let frame = 4096 + 24;
        let bound = 3 * CHECKPOINT_FRAMES as u64 * frame;
        // Without any checkpoint the log holds every frame written: the bound means something.
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        store
            .conn
            .pragma_update(None, "wal_autocheckpoint", 0)
            .unwrap();
        for _ in 0..600 {
            store.insert(&new_job(&["true"])).unwrap();
        }
        let grown = std::fs::metadata(dir.path().join("baton.db-wal"))
            .unwrap()
            .len();
        assert!(grown > bound, "{grown} bytes: too few writes to tell");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baton.db");
        let mut store = Store::open(&path).unwrap();
        store.checkpoint_in_background(&path).unwrap();
        let wal = dir.path().join("baton.db-wal");
        // Each job is several frames: past the threshold many times over.
        for _ in 0..600 {
            store.insert(&new_job(&["true"])).unwrap();
        }
        // Without checkpoints the log would hold every frame written; with them it is reused
        // from its start once copied back, and stays near the threshold.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            // A write after a complete checkpoint starts the log over.
            store.insert(&new_job(&["true"])).unwrap();
            let len = std::fs::metadata(&wal).unwrap().len();
            if len <= bound {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "the log grew to {len} bytes: nothing copies it back"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn state_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baton.db");
        {
            let mut store = Store::open(&path).unwrap();
            store.insert(&new_job(&["true"])).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.max_id().unwrap(), 1);
        assert_eq!(store.active().unwrap().len(), 1);
    }

    columns!(Pair { b, a });

    #[test]
    fn columns_are_found_by_name_whatever_their_order() {
        let conn = Connection::open_in_memory().unwrap();
        assert_eq!(Pair::LIST, "b, a");
        let stmt = conn.prepare("SELECT 1 AS a, 2 AS B, 3 AS c").unwrap();
        let cols = Pair::of(&stmt).unwrap();
        assert_eq!((cols.a, cols.b), (0, 1));
        let stmt = conn.prepare("SELECT 1 AS a").unwrap();
        assert!(matches!(
            Pair::of(&stmt),
            Err(rusqlite::Error::InvalidColumnName(name)) if name == "b"
        ));
    }
}
