//! The `alerts` table: the mid-run alerts raised for each attempt of a job (issue 17), at most
//! one per detector and attempt (a unique index), each committed with its deliveries so that a
//! crash between the two cannot lose a wake-up or send one twice. A restarted daemon reads an
//! attempt's alerts back to resume its detectors without repeating them.

use baton_core::midrun::{Action, Alert, Detector, Raised};
use baton_core::{JobId, Millis};
use rusqlite::params;

use super::deliveries::{Subject, insert_deliveries};
use super::events::log_event;
use super::{Store, StoreError};
use crate::notify::Channel;

/// One alert as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertRecord {
    pub id: i64,
    pub job: JobId,
    pub attempt: u32,
    pub detector: Detector,
    /// Its number among the attempt's alerts of this detector, from 1.
    pub seq: u32,
    pub action: Action,
    /// When it was raised, and when what it tells of was first seen.
    pub at: Millis,
    pub seen_at: Millis,
    /// The output line that showed it (sanitized).
    pub evidence: String,
    /// The message as delivered (markdown, at most `baton_core::midrun::MESSAGE_MAX` bytes).
    pub message: String,
}

impl AlertRecord {
    pub fn raised(&self) -> Raised {
        Raised {
            detector: self.detector,
            action: self.action,
            at: self.at,
            seq: self.seq,
        }
    }
}

columns!(
    /// The columns of `alerts` an `AlertRecord` is read from.
    AlertColumns { id, job_id, attempt, detector, seq, action, at, seen_at, evidence, message }
);

impl Store {
    /// Records an alert of attempt `attempt`, its `alert` event and, when it wakes, its
    /// deliveries through `channels`, in one commit. `None` when this attempt raised this
    /// detector already.
    pub fn add_alert(
        &mut self,
        job: JobId,
        attempt: u32,
        alert: &Alert,
        at: Millis,
        message: &str,
        channels: &[Channel],
    ) -> Result<Option<i64>, StoreError> {
        let tx = self.conn.transaction()?;
        let added = tx
            .prepare_cached(
                "INSERT OR IGNORE INTO alerts (job_id, attempt, detector, action, at, seen_at, \
                 evidence, message, seq) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                job.0 as i64,
                attempt,
                alert.detector.as_str(),
                alert.action.as_str(),
                at,
                alert.seen_at,
                alert.evidence,
                message,
                alert.seq
            ])?;
        if added == 0 {
            return Ok(None);
        }
        let id = tx.last_insert_rowid();
        let detail = format!(
            "{} ({}): {}",
            alert.detector.as_str(),
            alert.action.as_str(),
            alert.evidence
        );
        log_event(&tx, job.0, at, "alert", &detail)?;
        if alert.action == Action::Wake {
            insert_deliveries(&tx, job, Subject::JobAlert(id), channels, at)?;
        }
        tx.commit()?;
        Ok(Some(id))
    }

    /// A job's alerts, every attempt's, oldest first.
    pub fn alerts(&self, job: JobId) -> Result<Vec<AlertRecord>, StoreError> {
        self.read_alerts("WHERE job_id = ?1 ORDER BY id", params![job.0 as i64])
    }

    /// One alert by its id.
    pub fn alert(&self, id: i64) -> Result<Option<AlertRecord>, StoreError> {
        Ok(self
            .read_alerts("WHERE id = ?1", params![id])?
            .into_iter()
            .next())
    }

    fn read_alerts(
        &self,
        filter: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<AlertRecord>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM alerts {filter}",
            AlertColumns::LIST
        ))?;
        let c = AlertColumns::of(&stmt)?;
        let rows = stmt.query_map(args, |r| {
            let detector: String = r.get(c.detector)?;
            let action: String = r.get(c.action)?;
            Ok((
                detector,
                action,
                AlertRecord {
                    id: r.get(c.id)?,
                    job: JobId(r.get::<_, i64>(c.job_id)? as u64),
                    attempt: r.get(c.attempt)?,
                    detector: Detector::Nan,
                    seq: r.get(c.seq)?,
                    action: Action::Note,
                    at: r.get(c.at)?,
                    seen_at: r.get(c.seen_at)?,
                    evidence: r.get(c.evidence)?,
                    message: r.get(c.message)?,
                },
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (detector, action, mut record) = row?;
            // A detector or action this baton does not know (a newer one wrote it): skipped.
            let (Some(detector), Some(action)) =
                (Detector::parse(&detector), Action::parse(&action))
            else {
                continue;
            };
            record.detector = detector;
            record.action = action;
            out.push(record);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::new_job;

    fn alert(detector: Detector, action: Action) -> Alert {
        Alert {
            detector,
            action,
            rate_limited: false,
            seen_at: 5,
            seq: 1,
            evidence: "loss=nan".into(),
            quiet: None,
            slow: None,
            climb: None,
            stop_by: None,
        }
    }

    #[test]
    fn an_alert_is_stored_once_per_detector_and_attempt_with_its_deliveries() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let job = store.insert(&new_job(&["train"])).unwrap();
        let channels = vec![Channel::File {
            path: "/tmp/inbox.md".into(),
        }];
        let nan = alert(Detector::Nan, Action::Wake);
        let id = store
            .add_alert(job.id, 1, &nan, 10, "NaN", &channels)
            .unwrap()
            .expect("new");
        assert_eq!(
            store
                .add_alert(job.id, 1, &nan, 11, "NaN", &channels)
                .unwrap(),
            None
        );
        assert!(
            store
                .add_alert(job.id, 2, &nan, 12, "NaN", &channels)
                .unwrap()
                .is_some()
        );
        let note = alert(Detector::Error, Action::Note);
        assert!(
            store
                .add_alert(job.id, 1, &note, 13, "err", &channels)
                .unwrap()
                .is_some()
        );
        // A detector raised again in the same attempt (a digest, a re-armed stall) is another
        // alert by its number.
        let digest = |seq| Alert {
            seq,
            ..alert(Detector::Digest, Action::Note)
        };
        for seq in [1, 2] {
            assert!(
                store
                    .add_alert(job.id, 1, &digest(seq), 14, "digest", &channels)
                    .unwrap()
                    .is_some()
            );
        }
        assert_eq!(
            store
                .add_alert(job.id, 1, &digest(2), 15, "digest", &channels)
                .unwrap(),
            None
        );
        let deliveries = store.deliveries(job.id).unwrap();
        assert_eq!(deliveries.len(), 2, "one per wake, none for the notes");
        assert_eq!(deliveries[0].subject, Subject::JobAlert(id));
        let stored = store.alerts(job.id).unwrap();
        assert_eq!(stored.len(), 5);
        assert_eq!((stored[4].detector, stored[4].seq), (Detector::Digest, 2));
        assert_eq!(stored[0].detector, Detector::Nan);
        assert_eq!(stored[0].seen_at, 5);
        assert_eq!(stored[2].action, Action::Note);
        assert_eq!(store.alert(id).unwrap().unwrap().message, "NaN");
    }
}
