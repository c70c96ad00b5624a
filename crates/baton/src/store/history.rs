//! History at scale: listings read page by page (newest first, a cursor of ids) on read-only
//! connections of their own (`Readers`), so that a listing never holds the daemon's lock nor
//! the one connection that submits and scheduling passes write through (WAL lets readers run
//! beside the writer); and what retention reads and deletes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use baton_core::{JobId, JobState, Millis};
use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, params_from_iter};

use super::{JobRecord, Store, StoreError};
use crate::history::Filter;
use crate::history::retention::Candidate;

/// A few read-only connections to the daemon's database, opened when first needed and kept
/// for the next listing.
pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Store>>,
}

/// At most this many idle readers are kept (more may be open while many listings run).
const IDLE_READERS: usize = 4;

impl Readers {
    pub fn new(path: &Path) -> Readers {
        Readers {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on a reader (blocking: call it off the async workers).
    pub fn with<T>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let reader = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let reader = match reader {
            Some(r) => r,
            None => Store::open_reader(&self.path)?,
        };
        let result = f(&reader);
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < IDLE_READERS {
            idle.push(reader);
        }
        result
    }
}

/// An ended job's hold on the GPUs, as fair share and `baton stats` count it.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldRow {
    pub id: JobId,
    pub owner_uid: u32,
    pub owner: String,
    pub gpus_requested: u32,
    pub gpu_mem: Option<u64>,
    pub gpus: Vec<u32>,
    pub started_at: Millis,
    pub ended_at: Millis,
}

/// What retention removed (or, for a dry run, would remove).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub jobs: u64,
    pub events: u64,
    pub deliveries: u64,
    pub gpu_usage: u64,
}

impl std::ops::AddAssign for Removed {
    fn add_assign(&mut self, o: Removed) {
        self.jobs += o.jobs;
        self.events += o.events;
        self.deliveries += o.deliveries;
        self.gpu_usage += o.gpu_usage;
    }
}

/// The WHERE conditions of a filter, with their arguments (numbered from 1).
fn conditions(f: &Filter, args: &mut Vec<Value>) -> Vec<String> {
    let arg = |v: Value, args: &mut Vec<Value>| {
        args.push(v);
        format!("?{}", args.len())
    };
    let mut out = Vec::new();
    if !f.states.is_empty() {
        let list: Vec<String> = f
            .states
            .iter()
            .map(|s| arg(Value::Text(s.as_str().into()), args))
            .collect();
        out.push(format!("state IN ({})", list.join(", ")));
    }
    if let Some(name) = &f.name {
        out.push(format!(
            "name GLOB {}",
            arg(Value::Text(name.clone()), args)
        ));
    }
    if !f.owners.is_empty() {
        let list: Vec<String> = f
            .owners
            .iter()
            .map(|o| arg(Value::Text(o.clone()), args))
            .collect();
        out.push(format!("owner IN ({})", list.join(", ")));
    }
    if let Some(since) = f.since {
        out.push(format!(
            "(ended_at IS NULL OR ended_at >= {})",
            arg(Value::Integer(since), args)
        ));
    }
    if let Some(until) = f.until {
        out.push(format!(
            "submitted_at <= {}",
            arg(Value::Integer(until), args)
        ));
    }
    if let Some(w) = f.workflow {
        out.push(format!(
            "workflow_id = {}",
            arg(Value::Integer(w as i64), args)
        ));
    }
    match &f.session {
        Some(Some(s)) => out.push(format!("session = {}", arg(Value::Text(s.clone()), args))),
        Some(None) => out.push("session IS NULL".into()),
        None => {}
    }
    if let Some(uid) = f.uid {
        out.push(format!(
            "owner_uid = {}",
            arg(Value::Integer(uid.into()), args)
        ));
    }
    out
}

fn where_clause(conds: &[String]) -> String {
    if conds.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conds.join(" AND "))
    }
}

impl Store {
    /// A read-only connection to the database at `path` (already made by the daemon's own).
    pub fn open_reader(path: &Path) -> Result<Store, StoreError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )?;
        // A small page cache each (1 MiB; the OS caches the file anyway).
        conn.execute_batch(
            "PRAGMA busy_timeout=5000; PRAGMA query_only=ON; PRAGMA cache_size=-1024;",
        )?;
        Ok(Store { conn })
    }

    /// One page of the jobs `f` selects, newest first: at most `limit`, with ids below
    /// `before` when given. Read without their environments.
    pub fn list_jobs(
        &self,
        f: &Filter,
        before: Option<JobId>,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut args = Vec::new();
        let mut conds = conditions(f, &mut args);
        if let Some(b) = before {
            args.push(Value::Integer(b.0 as i64));
            conds.push(format!("id < ?{}", args.len()));
        }
        args.push(Value::Integer(limit as i64));
        let sql = format!(
            "{} ORDER BY id DESC LIMIT ?{}",
            where_clause(&conds),
            args.len()
        );
        self.select_listed(&sql, params_from_iter(args))
    }

    /// The `limit` jobs `f` selects that ended last, at or after `since`, latest first.
    pub fn last_ended(
        &self,
        f: &Filter,
        since: Millis,
        limit: usize,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut args = Vec::new();
        let mut conds = conditions(f, &mut args);
        args.push(Value::Integer(since));
        conds.push(format!("ended_at >= ?{}", args.len()));
        args.push(Value::Integer(limit as i64));
        let sql = format!(
            "{} ORDER BY ended_at DESC, id DESC LIMIT ?{}",
            where_clause(&conds),
            args.len()
        );
        self.select_listed(&sql, params_from_iter(args))
    }

    /// How many jobs `f` selects have ended.
    pub fn count_ended(&self, f: &Filter) -> Result<u64, StoreError> {
        let mut args = Vec::new();
        let mut conds = conditions(f, &mut args);
        conds.push("ended_at IS NOT NULL".into());
        let sql = format!("SELECT COUNT(*) AS n FROM jobs {}", where_clause(&conds));
        let n: i64 = self
            .conn
            .prepare_cached(&sql)?
            .query_row(params_from_iter(args), |r| r.get("n"))?;
        Ok(n as u64)
    }

    /// Each job's mean GPU utilisation (percent) over its attempt's samples, across its GPUs,
    /// for the (job, attempt) pairs given; jobs with no sample are absent.
    pub fn gpu_means(&self, jobs: &[(JobId, u32)]) -> Result<HashMap<JobId, f64>, StoreError> {
        let mut out = HashMap::new();
        let mut stmt = self.conn.prepare_cached(
            "SELECT SUM(util_sum) AS s, SUM(util_samples) AS n FROM job_gpu_usage \
             WHERE job_id = ?1 AND attempt = ?2",
        )?;
        for (id, attempt) in jobs {
            let (sum, n): (Option<f64>, Option<i64>) = stmt
                .query_row(rusqlite::params![id.0 as i64, attempt], |r| {
                    Ok((r.get("s")?, r.get("n")?))
                })?;
            if let (Some(sum), Some(n)) = (sum, n)
                && n > 0
            {
                out.insert(*id, sum / n as f64);
            }
        }
        Ok(out)
    }

    /// Calls `each` with every job that ended at or after `since` having started: who owned
    /// it, what it asked for, the GPUs it ran on and when. Streamed, nothing kept: fair share
    /// and `baton stats` fold them as they come.
    pub fn each_held_since(
        &self,
        since: Millis,
        mut each: impl FnMut(HeldRow),
    ) -> Result<(), StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, owner_uid, owner, gpus_requested, gpu_mem, gpus, started_at, ended_at              FROM jobs WHERE ended_at >= ?1 AND started_at IS NOT NULL",
        )?;
        let mut rows = stmt.query([since])?;
        while let Some(r) = rows.next()? {
            let gpus: String = r.get("gpus")?;
            each(HeldRow {
                id: JobId(r.get::<_, i64>("id")? as u64),
                owner_uid: r.get("owner_uid")?,
                owner: r.get("owner")?,
                gpus_requested: r.get("gpus_requested")?,
                gpu_mem: r.get::<_, Option<i64>>("gpu_mem")?.map(|m| m as u64),
                gpus: serde_json::from_str(&gpus).unwrap_or_default(),
                started_at: r.get("started_at")?,
                ended_at: r.get("ended_at")?,
            });
        }
        Ok(())
    }

    // ---- retention -----------------------------------------------------------------------

    /// Up to `limit` ended jobs that ended before `before`, with ids above `after`, by id.
    pub fn retention_candidates(
        &self,
        before: Millis,
        after: JobId,
        limit: usize,
    ) -> Result<Vec<Candidate>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, ended_at, workflow_id FROM jobs WHERE ended_at < ?1 AND id > ?2 \
             AND state NOT IN ('queued', 'running') ORDER BY id LIMIT ?3",
        )?;
        let rows = stmt.query_map(
            rusqlite::params![before, after.0 as i64, limit as i64],
            |r| {
                Ok(Candidate {
                    id: JobId(r.get::<_, i64>("id")? as u64),
                    ended_at: r.get("ended_at")?,
                    workflow: r.get::<_, Option<i64>>("workflow_id")?.map(|w| w as u64),
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Up to `limit` jobs, ids above `after`, that ended in `[from, before)`: those whose output
    /// files fall due.
    pub fn ended_between(
        &self,
        from: Millis,
        before: Millis,
        after: JobId,
        limit: usize,
    ) -> Result<Vec<JobId>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM jobs WHERE ended_at >= ?1 AND ended_at < ?2 AND id > ?3 \
             ORDER BY id LIMIT ?4",
        )?;
        let rows = stmt.query_map(
            rusqlite::params![from, before, after.0 as i64, limit as i64],
            |r| Ok(JobId(r.get::<_, i64>("id")? as u64)),
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The earliest end at or after `at`, if any job ended then.
    pub fn first_end_from(&self, at: Millis) -> Result<Option<Millis>, StoreError> {
        Ok(self
            .conn
            .prepare_cached("SELECT MIN(ended_at) AS m FROM jobs WHERE ended_at >= ?1")?
            .query_row([at], |r| r.get("m"))?)
    }

    /// What deleting these jobs would remove.
    pub fn count_rows_of(&self, ids: &[JobId]) -> Result<Removed, StoreError> {
        let mut out = Removed::default();
        let count = |sql: &str, id: JobId| -> Result<u64, StoreError> {
            let n: i64 = self
                .conn
                .prepare_cached(sql)?
                .query_row([id.0 as i64], |r| r.get(0))?;
            Ok(n as u64)
        };
        for id in ids {
            out.jobs += 1;
            out.events += count("SELECT COUNT(*) FROM events WHERE job_id = ?1", *id)?;
            out.deliveries += count("SELECT COUNT(*) FROM deliveries WHERE job_id = ?1", *id)?;
            out.gpu_usage += count("SELECT COUNT(*) FROM job_gpu_usage WHERE job_id = ?1", *id)?;
        }
        Ok(out)
    }

    /// Deletes these ended jobs with their events, deliveries and GPU usage, in one
    /// transaction. An active job among them is left alone.
    pub fn delete_jobs(&mut self, ids: &[JobId]) -> Result<Removed, StoreError> {
        let tx = self.conn.transaction()?;
        let mut out = Removed::default();
        for id in ids {
            let id = id.0 as i64;
            let ended: Option<String> = tx
                .prepare_cached("SELECT state FROM jobs WHERE id = ?1")?
                .query_row([id], |r| r.get(0))
                .ok();
            let Some(state) = ended else { continue };
            if state.parse::<JobState>().is_ok_and(|s| !s.is_terminal()) {
                continue;
            }
            out.events += tx
                .prepare_cached("DELETE FROM events WHERE job_id = ?1")?
                .execute([id])? as u64;
            out.deliveries += tx
                .prepare_cached("DELETE FROM deliveries WHERE job_id = ?1")?
                .execute([id])? as u64;
            tx.prepare_cached("DELETE FROM alerts WHERE job_id = ?1")?
                .execute([id])?;
            out.gpu_usage += tx
                .prepare_cached("DELETE FROM job_gpu_usage WHERE job_id = ?1")?
                .execute([id])? as u64;
            out.jobs += tx
                .prepare_cached("DELETE FROM jobs WHERE id = ?1")?
                .execute([id])? as u64;
        }
        tx.commit()?;
        Ok(out)
    }

    /// Deletes ended workflows none of whose tasks is left; returns their ids.
    pub fn delete_empty_workflows(&mut self) -> Result<Vec<u64>, StoreError> {
        let tx = self.conn.transaction()?;
        let ids: Vec<u64> = {
            let mut stmt = tx.prepare_cached(
                "SELECT id FROM workflows WHERE state NOT IN ('queued', 'running') AND NOT \
                 EXISTS (SELECT 1 FROM jobs WHERE jobs.workflow_id = workflows.id)",
            )?;
            let rows = stmt.query_map([], |r| Ok(r.get::<_, i64>(0)? as u64))?;
            rows.collect::<Result<_, _>>()?
        };
        for id in &ids {
            tx.prepare_cached("DELETE FROM deliveries WHERE workflow_id = ?1")?
                .execute([*id as i64])?;
            tx.prepare_cached("DELETE FROM workflows WHERE id = ?1")?
                .execute([*id as i64])?;
        }
        tx.commit()?;
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewJob;
    use baton_core::lifecycle::{Ending, Runner, Transition};

    fn ended(store: &mut Store, name: &str, owner: &str, at: Millis) -> JobRecord {
        let mut job = NewJob::plain(&["true"], 1);
        job.name = Some(name.into());
        job.owner = owner.into();
        job.submitted_at = at - 10;
        job.env.insert("SECRET".into(), "x".repeat(100));
        let job = store.insert(&job).unwrap();
        let start = Transition::Start {
            gpus: vec![0],
            at: at - 5,
            on: Runner::Local,
        };
        let (job, _) = store.apply(&job, &start, at - 5).unwrap();
        let (job, _) = store
            .apply(&job, &Transition::End(Ending::succeeded(at)), at)
            .unwrap();
        job
    }

    #[test]
    fn listings_page_newest_first_and_filter_in_sql() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baton.db");
        let mut store = Store::open(&path).unwrap();
        for i in 0..5 {
            ended(&mut store, &format!("sweep-{i}"), "alice", 1_000 + i * 100);
        }
        ended(&mut store, "other", "bob", 2_000);
        store.insert(&NewJob::plain(&["sleep"], 1)).unwrap();
        let reader = Store::open_reader(&path).unwrap();
        let all = Filter::default();
        let page = reader.list_jobs(&all, None, 3).unwrap();
        let ids = |jobs: &[JobRecord]| jobs.iter().map(|j| j.id.0).collect::<Vec<_>>();
        assert_eq!(ids(&page), [7, 6, 5]);
        assert!(
            page.iter().all(|j| j.env.is_empty()),
            "listings skip the environment"
        );
        assert_eq!(
            ids(&reader.list_jobs(&all, Some(JobId(5)), 10).unwrap()),
            [4, 3, 2, 1]
        );
        let f = Filter {
            name: Some("sweep-*".into()),
            since: Some(1_200),
            ..Filter::default()
        };
        assert_eq!(ids(&reader.list_jobs(&f, None, 10).unwrap()), [5, 4, 3]);
        let f = Filter {
            owners: vec!["bob".into()],
            ..Filter::default()
        };
        assert_eq!(ids(&reader.list_jobs(&f, None, 10).unwrap()), [6]);
        let f = Filter {
            states: vec![JobState::Queued],
            ..Filter::default()
        };
        assert_eq!(ids(&reader.list_jobs(&f, None, 10).unwrap()), [7]);
        let f = Filter {
            until: Some(1_000),
            ..Filter::default()
        };
        assert_eq!(ids(&reader.list_jobs(&f, None, 10).unwrap()), [7, 1]);
        assert_eq!(ids(&reader.last_ended(&all, 1_300, 2).unwrap()), [6, 5]);
        assert_eq!(reader.count_ended(&all).unwrap(), 6);
        // A reader never writes.
        assert!(reader.conn.execute("DELETE FROM jobs", []).is_err());
    }

    #[test]
    fn retention_deletes_an_ended_job_and_all_that_is_its() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let old = ended(&mut store, "old", "alice", 1_000);
        let new = ended(&mut store, "new", "alice", 5_000);
        let active = store.insert(&NewJob::plain(&["sleep"], 1)).unwrap();
        let due = store.retention_candidates(2_000, JobId(0), 100).unwrap();
        assert_eq!(due.iter().map(|c| c.id).collect::<Vec<_>>(), [old.id]);
        let counted = store.count_rows_of(&[old.id]).unwrap();
        assert_eq!((counted.jobs, counted.events), (1, 3));
        let removed = store.delete_jobs(&[old.id, active.id]).unwrap();
        assert_eq!(removed, counted, "an active job is never deleted");
        assert!(store.get(old.id).unwrap().is_none());
        assert!(store.get(active.id).unwrap().is_some());
        assert!(store.events(old.id).unwrap().is_empty());
        assert_eq!(store.first_end_from(2_000).unwrap(), Some(5_000));
        assert_eq!(
            store.ended_between(0, 6_000, JobId(0), 10).unwrap(),
            [new.id]
        );
    }
}
