//! The `events` table: each job's append-only history (`baton events ID`), written in the same
//! transaction as the change it records (`log_event`) or on its own (`add_event`).

use baton_core::{JobId, Millis};
use rusqlite::params;

use super::{Store, StoreError};

/// One row of the event log.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub job: JobId,
    pub at: Millis,
    pub kind: String,
    pub detail: String,
}

columns!(
    /// The columns of `events` an `Event` is read from.
    EventColumns { job_id, at, kind, detail }
);

impl Store {
    /// Adds one entry to a job's history (`baton events ID`).
    pub fn add_event(
        &mut self,
        id: JobId,
        kind: &str,
        detail: &str,
        at: Millis,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO events (job_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![id.0 as i64, at, kind, detail])?;
        Ok(())
    }

    pub fn events(&self, id: JobId) -> Result<Vec<Event>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM events WHERE job_id = ?1 ORDER BY id",
            EventColumns::LIST
        ))?;
        let c = EventColumns::of(&stmt)?;
        let rows = stmt.query_map([id.0 as i64], |r| {
            Ok(Event {
                job: JobId(r.get::<_, i64>(c.job_id)? as u64),
                at: r.get(c.at)?,
                kind: r.get(c.kind)?,
                detail: r.get(c.detail)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Adds one entry to a job's history inside the transaction that makes the change.
pub(crate) fn log_event(
    tx: &rusqlite::Transaction<'_>,
    id: u64,
    at: Millis,
    kind: &str,
    detail: &str,
) -> Result<(), StoreError> {
    tx.prepare_cached("INSERT INTO events (job_id, at, kind, detail) VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![id as i64, at, kind, detail])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::new_job;

    #[test]
    fn events_read_back_in_the_order_they_were_added() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let job = store.insert(&new_job(&["true"])).unwrap().id;
        let other = store.insert(&new_job(&["true"])).unwrap().id;
        store.add_event(job, "note", "first", 20).unwrap();
        store.add_event(other, "note", "elsewhere", 15).unwrap();
        store.add_event(job, "waste", "second", 10).unwrap();
        let event = |at, kind: &str, detail: &str| Event {
            job,
            at,
            kind: kind.into(),
            detail: detail.into(),
        };
        assert_eq!(
            store.events(job).unwrap()[1..], // after `submitted`
            [event(20, "note", "first"), event(10, "waste", "second")]
        );
    }
}
