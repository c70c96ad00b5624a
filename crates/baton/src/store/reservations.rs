//! The `reservations` table (`baton reserve`, issue 19): each reservation's window (its GPUs,
//! start and end), whom it is for, who made it, and when and by whom it was cancelled. A
//! reservation is never changed once made: cancelling marks it, so what a job ran in stays
//! readable.

use baton_core::Millis;
use baton_core::windows::Window;
use rusqlite::{Row, params};

use super::{Store, StoreError, json};

/// A reservation as made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReservation {
    pub name: String,
    pub gpus: Vec<u32>,
    pub start: Millis,
    pub end: Millis,
    /// The users whose jobs may run in it.
    pub users: Vec<String>,
    pub created_by: String,
    pub created_at: Millis,
}

/// A reservation as recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationRecord {
    pub id: u64,
    pub made: NewReservation,
    pub cancelled: Option<(Millis, String)>,
}

impl ReservationRecord {
    /// The window the scheduler keeps.
    pub fn window(&self) -> Window {
        Window {
            id: self.id,
            name: self.made.name.clone(),
            gpus: self.made.gpus.clone(),
            start: self.made.start,
            end: self.made.end,
        }
    }

    /// Neither cancelled nor over at `now`.
    pub fn stands(&self, now: Millis) -> bool {
        self.cancelled.is_none() && now < self.made.end
    }
}

const COLUMNS: &str =
    "id, name, gpus, start_at, end_at, users, created_by, created_at, cancelled_at, cancelled_by";

fn from_row(r: &Row<'_>) -> Result<ReservationRecord, StoreError> {
    let id: i64 = r.get(0)?;
    let corrupt = |what: &str, e: serde_json::Error| StoreError::Corrupt {
        id: id as u64,
        detail: format!("reservation {what}: {e}"),
    };
    let gpus: String = r.get(2)?;
    let users: String = r.get(5)?;
    let cancelled_at: Option<Millis> = r.get(8)?;
    let cancelled_by: Option<String> = r.get(9)?;
    Ok(ReservationRecord {
        id: id as u64,
        made: NewReservation {
            name: r.get(1)?,
            gpus: serde_json::from_str(&gpus).map_err(|e| corrupt("gpus", e))?,
            start: r.get(3)?,
            end: r.get(4)?,
            users: serde_json::from_str(&users).map_err(|e| corrupt("users", e))?,
            created_by: r.get(6)?,
            created_at: r.get(7)?,
        },
        cancelled: cancelled_at.map(|at| (at, cancelled_by.unwrap_or_default())),
    })
}

impl Store {
    /// Records a new reservation.
    pub fn insert_reservation(
        &mut self,
        new: &NewReservation,
    ) -> Result<ReservationRecord, StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO reservations \
                 (name, gpus, start_at, end_at, users, created_by, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                new.name,
                json(&new.gpus),
                new.start,
                new.end,
                json(&new.users),
                new.created_by,
                new.created_at,
            ])?;
        Ok(ReservationRecord {
            id: self.conn.last_insert_rowid() as u64,
            made: new.clone(),
            cancelled: None,
        })
    }

    /// Reservations that end after `since`, cancelled ones too, by start.
    pub fn reservations_ending_after(
        &self,
        since: Millis,
    ) -> Result<Vec<ReservationRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM reservations WHERE end_at > ?1 ORDER BY start_at, id"
        ))?;
        let mut rows = stmt.query(params![since])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(from_row(r)?);
        }
        Ok(out)
    }

    /// The highest id a reservation has had (0 before the first).
    pub fn max_reservation_id(&self) -> Result<u64, StoreError> {
        let id: i64 =
            self.conn
                .query_row("SELECT coalesce(max(id), 0) FROM reservations", [], |r| {
                    r.get(0)
                })?;
        Ok(id as u64)
    }

    /// Marks a reservation cancelled.
    pub fn cancel_reservation(&mut self, id: u64, by: &str, at: Millis) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE reservations SET cancelled_at = ?1, cancelled_by = ?2 \
                 WHERE id = ?3 AND cancelled_at IS NULL",
            )?
            .execute(params![at, by, id as i64])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_kept_until_it_ends_and_cancelling_marks_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let new = NewReservation {
            name: "deadline".into(),
            gpus: vec![2, 3],
            start: 1_000,
            end: 5_000,
            users: vec!["alice".into()],
            created_by: "root".into(),
            created_at: 500,
        };
        let made = store.insert_reservation(&new).unwrap();
        assert!(made.stands(4_999) && !made.stands(5_000));
        assert_eq!(made.window().gpus, vec![2, 3]);
        let listed = store.reservations_ending_after(4_000).unwrap();
        assert_eq!(listed, vec![made.clone()]);
        assert!(store.reservations_ending_after(5_000).unwrap().is_empty());
        store.cancel_reservation(made.id, "alice", 2_000).unwrap();
        let listed = store.reservations_ending_after(0).unwrap();
        assert_eq!(listed[0].cancelled, Some((2_000, "alice".to_string())));
        assert!(!listed[0].stands(2_500));
    }
}
