//! The `deliveries` table: the outbox of end-of-job reports, one row per channel (`Delivery`,
//! `DeliveryState`), and the wake chain that links a job's session channels so that each is
//! tried only if the one before it did not reach the session: rows queued at a job's end or a
//! workflow's, due rows, recorded outcomes and how the chain moves on, and the Claude Code
//! hook's claim on an ended job's chain (`claim_ended`), and the rows a requeue supersedes
//! (`supersede_deliveries`): a job requeued has one set of deliveries per end, and only the
//! latest is current.

use baton_core::{JobId, Millis};
use rusqlite::params;

use super::events::log_event;
use super::{Store, StoreError, json};
use crate::notify::Channel;

/// One report delivery through one channel: a row of the outbox.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub id: i64,
    pub job: JobId,
    /// What it carries: the job's report, or its workflow's summary or its sweep's comparison
    /// (sent when `job`, the last of them, ended) or its sweep's early alert.
    pub subject: Subject,
    pub channel: Channel,
    pub state: DeliveryState,
    pub attempts: u32,
    pub next_at: Millis,
    pub error: Option<String>,
    pub delivered_at: Option<Millis>,
    /// The earlier link of the wake chain this one stands by for.
    pub after: Option<i64>,
}

pub use crate::api::DeliveryState;

/// What a delivery carries: the job's own report, or a message about the unit the job is part
/// of, anchored on the job whose end (or report) brought it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    Job,
    /// The workflow's summary, on its last task.
    Workflow(u64),
    /// The sweep's comparison report, on its last run.
    Sweep(u64),
    /// The sweep's early alert ("clearly broken"), on the run whose report showed it.
    SweepAlert(u64),
    /// A mid-run alert of the job itself (`alerts.id`), sent while it runs.
    JobAlert(i64),
}

impl Subject {
    /// Its `workflow_id`, `sweep_id`, `kind` and `alert_id` columns.
    fn columns(self) -> (Option<i64>, Option<i64>, &'static str, Option<i64>) {
        match self {
            Subject::Job => (None, None, "end", None),
            Subject::Workflow(w) => (Some(w as i64), None, "end", None),
            Subject::Sweep(s) => (None, Some(s as i64), "end", None),
            Subject::SweepAlert(s) => (None, Some(s as i64), "alert", None),
            Subject::JobAlert(a) => (None, None, "midrun", Some(a)),
        }
    }

    fn read(workflow: Option<i64>, sweep: Option<i64>, kind: &str, alert: Option<i64>) -> Subject {
        match (workflow, sweep, alert) {
            (Some(w), _, _) => Subject::Workflow(w as u64),
            (None, Some(s), _) if kind == "alert" => Subject::SweepAlert(s as u64),
            (None, Some(s), _) => Subject::Sweep(s as u64),
            (None, None, Some(a)) => Subject::JobAlert(a),
            (None, None, None) => Subject::Job,
        }
    }

    /// Whether it is sent while its job runs (needing no report).
    pub fn is_midrun(self) -> bool {
        matches!(self, Subject::JobAlert(_))
    }
}

columns!(
    /// The columns of `deliveries` a `Delivery` is read from.
    DeliveryColumns {
        id,
        job_id,
        channel,
        state,
        attempts,
        next_at,
        error,
        delivered_at,
        workflow_id,
        after_id,
        sweep_id,
        kind,
        alert_id,
    }
);

impl Store {
    /// Pending deliveries due at `now`, oldest first, at most `limit`.
    pub fn due_deliveries(&self, now: Millis, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries_where(
            "WHERE state = 'pending' AND next_at <= ?1 ORDER BY next_at, id LIMIT ?2",
            params![now, limit as i64],
        )
    }

    /// When the next pending delivery falls due, if any is pending.
    pub fn next_delivery_at(&self) -> Result<Option<Millis>, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT MIN(next_at) AS next_at FROM deliveries WHERE state = 'pending'",
            )?
            .query_row([], |r| r.get("next_at"))?)
    }

    /// Every delivery of a job's report (of its latest end, for a job that was requeued), in
    /// channel order.
    pub fn deliveries(&self, job: JobId) -> Result<Vec<Delivery>, StoreError> {
        self.deliveries_where(
            "WHERE job_id = ?1 AND superseded_at IS NULL ORDER BY id",
            params![job.0 as i64],
        )
    }

    fn deliveries_where(
        &self,
        clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM deliveries {clause}",
            DeliveryColumns::LIST
        ))?;
        let c = DeliveryColumns::of(&stmt)?;
        let rows = stmt.query_map(args, |r| {
            let job = r.get::<_, i64>(c.job_id)? as u64;
            let channel: String = r.get(c.channel)?;
            let state: String = r.get(c.state)?;
            Ok((
                job,
                channel,
                Delivery {
                    id: r.get(c.id)?,
                    job: JobId(job),
                    subject: Subject::read(
                        r.get(c.workflow_id)?,
                        r.get(c.sweep_id)?,
                        &r.get::<_, String>(c.kind)?,
                        r.get(c.alert_id)?,
                    ),
                    channel: Channel::File {
                        path: String::new(),
                    },
                    state: DeliveryState::parse(&state),
                    attempts: r.get(c.attempts)?,
                    next_at: r.get(c.next_at)?,
                    error: r.get(c.error)?,
                    delivered_at: r.get(c.delivered_at)?,
                    after: r.get(c.after_id)?,
                },
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (job, channel, mut delivery) = row?;
            delivery.channel = serde_json::from_str(&channel).map_err(|e| StoreError::Corrupt {
                id: job,
                detail: format!("delivery {}: {e}", delivery.id),
            })?;
            out.push(delivery);
        }
        Ok(out)
    }

    /// Records the outcome of one delivery attempt: its new state, and for a retry when. The
    /// wake chain moves on in the same transaction: a delivery that woke the session makes the
    /// links standing by `unneeded`; one that passes on (noted, held, refused, skipped, failed)
    /// makes the next link pending now. Only an unsettled row changes: a hook's word that it
    /// delivered is never overwritten by the outbox's look at it. (The hook may say so while its
    /// link still stands by: it waited on the job, not on the chain.)
    pub fn record_delivery(
        &mut self,
        id: i64,
        state: DeliveryState,
        next_at: Millis,
        error: Option<&str>,
        now: Millis,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        let changed = tx
            .prepare_cached(
                "UPDATE deliveries SET state = ?1, attempts = attempts + 1, next_at = ?2, \
                 error = ?3, delivered_at = CASE WHEN ?1 = 'delivered' THEN ?4 ELSE delivered_at \
                 END WHERE id = ?5 AND state IN ('pending', 'standby')",
            )?
            .execute(params![state.as_str(), next_at, error, now, id])?;
        if changed > 0 {
            advance_chain(&tx, id, state, now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Whether a later link of a wake chain stands by for delivery `id`.
    pub fn has_standby_after(&self, id: i64) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM deliveries WHERE after_id = ?1 AND state = 'standby') \
                 AS standing_by",
            )?
            .query_row(params![id], |r| r.get("standing_by"))?)
    }

    /// Looks at a pending delivery again at `next_at` without counting an attempt (a hook that
    /// has not delivered yet).
    pub fn recheck_delivery(&mut self, id: i64, next_at: Millis) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE deliveries SET next_at = ?1 WHERE id = ?2 AND state = 'pending'",
            )?
            .execute(params![next_at, id])?;
        Ok(())
    }

    /// Puts the Claude Code hook into the wake chain of a job that has ended, in one commit: the
    /// job's channels, the inbox's state as the hook learnt it (`correct`: it only held or
    /// refused what it was sent), the links after the inbox back on standby if the inbox's
    /// "delivery" had made them `unneeded`, and the hook's link, pending, right after `before`
    /// (or at the head of the chain), with what stood by for `before` standing by for it.
    #[allow(clippy::too_many_arguments)]
    pub fn claim_ended(
        &mut self,
        job: JobId,
        channels: &[Channel],
        before: Option<i64>,
        correct: Option<(i64, DeliveryState, String)>,
        hook: &Channel,
        now: Millis,
        why: &str,
    ) -> Result<i64, StoreError> {
        let tx = self.conn.transaction()?;
        tx.prepare_cached("UPDATE jobs SET notify = ?1 WHERE id = ?2")?
            .execute(params![json(&channels), job.0 as i64])?;
        log_event(&tx, job.0, now, "notify", why)?;
        if let Some((id, state, error)) = correct {
            tx.prepare_cached("UPDATE deliveries SET state = ?1, error = ?2 WHERE id = ?3")?
                .execute(params![state.as_str(), error, id])?;
        }
        if let Some(before) = before {
            tx.prepare_cached(
                "WITH RECURSIVE later(id) AS ( \
                     SELECT id FROM deliveries WHERE after_id = ?1 \
                     UNION SELECT d.id FROM deliveries d JOIN later ON d.after_id = later.id) \
                 UPDATE deliveries SET state = 'standby' \
                 WHERE id IN (SELECT id FROM later) AND state = 'unneeded'",
            )?
            .execute(params![before])?;
        }
        tx.prepare_cached(
            "INSERT INTO deliveries (job_id, channel, state, next_at, after_id) \
             VALUES (?1, ?2, 'pending', ?3, ?4)",
        )?
        .execute(params![job.0 as i64, json(hook), now, before])?;
        let link = tx.last_insert_rowid();
        if let Some(before) = before {
            tx.prepare_cached(
                "UPDATE deliveries SET after_id = ?1 WHERE after_id = ?2 AND id != ?1",
            )?
            .execute(params![link, before])?;
        }
        tx.commit()?;
        Ok(link)
    }

    /// Adds a delivery for a job that has ended (the inbox fallback when its agent session is
    /// gone), unless the job already has one through that channel.
    pub fn add_delivery(
        &mut self,
        job: JobId,
        subject: Subject,
        channel: &Channel,
        now: Millis,
    ) -> Result<bool, StoreError> {
        let existing = self.deliveries(job)?;
        if existing
            .iter()
            .any(|d| &d.channel == channel && d.subject == subject)
        {
            return Ok(false);
        }
        let (workflow, sweep, kind, alert) = subject.columns();
        self.conn
            .prepare_cached(
                "INSERT INTO deliveries (job_id, channel, state, next_at, workflow_id, sweep_id, \
                 kind, alert_id) VALUES (?1, ?2, 'pending', ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                job.0 as i64,
                json(channel),
                now,
                workflow,
                sweep,
                kind,
                alert
            ])?;
        Ok(true)
    }
}

/// The deliveries of a job's earlier end, as it is requeued (in the requeue's transaction): none
/// is current any more, and those not sent yet (pending, standing by) never will be: the report
/// they carry is about an attempt that is over, and the next end brings its own. A delivery
/// already in flight finishes; its outcome is not recorded over `unneeded`.
pub(crate) fn supersede_deliveries(
    tx: &rusqlite::Transaction<'_>,
    job: JobId,
    at: Millis,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "UPDATE deliveries SET superseded_at = ?1, \
         error = CASE WHEN state IN ('pending', 'standby') THEN 'the job was requeued first' \
             ELSE error END, \
         state = CASE WHEN state IN ('pending', 'standby') THEN 'unneeded' ELSE state END \
         WHERE job_id = ?2 AND superseded_at IS NULL",
    )?
    .execute(params![at, job.0 as i64])?;
    Ok(())
}

/// One pending delivery per channel; the session channels after the first stand by, each for
/// the one before it (the wake chain, `Channel` says why).
pub(crate) fn insert_deliveries(
    tx: &rusqlite::Transaction<'_>,
    job: JobId,
    subject: Subject,
    channels: &[Channel],
    at: Millis,
) -> Result<(), StoreError> {
    let (workflow, sweep, kind, alert) = subject.columns();
    let mut previous_link: Option<i64> = None;
    for channel in channels {
        let after = if channel.is_session() {
            previous_link
        } else {
            None
        };
        let state = if after.is_some() {
            DeliveryState::Standby
        } else {
            DeliveryState::Pending
        };
        tx.prepare_cached(
            "INSERT INTO deliveries (job_id, channel, state, next_at, workflow_id, after_id, \
             sweep_id, kind, alert_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            job.0 as i64,
            json(channel),
            state.as_str(),
            at,
            workflow,
            after,
            sweep,
            kind,
            alert
        ])?;
        if channel.is_session() {
            previous_link = Some(tx.last_insert_rowid());
        }
    }
    Ok(())
}

/// Moves a wake chain on after link `id` settled as `state` (see `record_delivery`).
fn advance_chain(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    state: DeliveryState,
    now: Millis,
) -> Result<(), StoreError> {
    if state == DeliveryState::Delivered {
        // Every link after this one, however far down the chain: a level at a time (chains are
        // a few links long, and most deliveries have none after them), not a recursive query,
        // which builds temporary tables each time it runs.
        let mut level = vec![id];
        let mut seen = std::collections::HashSet::new();
        while !level.is_empty() {
            let mut next = Vec::new();
            for link in level {
                if !seen.insert(link) {
                    continue;
                }
                let mut after =
                    tx.prepare_cached("SELECT id FROM deliveries WHERE after_id = ?1")?;
                for later in after.query_map(params![link], |r| r.get::<_, i64>(0))? {
                    next.push(later?);
                }
                tx.prepare_cached(
                    "UPDATE deliveries SET state = 'unneeded', error = NULL \
                     WHERE after_id = ?1 AND state = 'standby'",
                )?
                .execute(params![link])?;
            }
            level = next;
        }
    } else if state.passes_on() {
        tx.prepare_cached(
            "UPDATE deliveries SET state = 'pending', next_at = ?1 \
             WHERE after_id = ?2 AND state = 'standby'",
        )?
        .execute(params![now, id])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use baton_core::lifecycle::{Ending, Transition};

    use super::*;
    use crate::store::tests::new_job;

    /// The states of a job's deliveries, by channel kind, in order.
    fn chain_states(store: &Store, job: JobId) -> Vec<(&'static str, &'static str)> {
        store
            .deliveries(job)
            .unwrap()
            .iter()
            .map(|d| (d.channel.kind(), d.state.as_str()))
            .collect()
    }

    #[test]
    fn a_wake_chain_uses_each_link_only_if_the_one_before_did_not_wake() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let claude = Channel::Claude {
            socket: "/s".into(),
            token: "t".into(),
            session: Some("s".into()),
            inbound: None,
        };
        let tmux = Channel::Tmux {
            pane: "%1".into(),
            server: None,
        };
        let file = Channel::File {
            path: "/tmp/inbox.md".into(),
        };
        let channels = [claude, tmux, file];
        let end = |store: &mut Store| {
            let job = store.insert(&new_job(&["true"])).unwrap();
            let ending = Ending::succeeded(10);
            store
                .apply_all(&[(&job, Transition::End(ending))], 10, |tx| {
                    crate::store::insert_deliveries(
                        tx,
                        job.id,
                        crate::store::Subject::Job,
                        &channels,
                        10,
                    )
                })
                .unwrap();
            let ids: Vec<i64> = store
                .deliveries(job.id)
                .unwrap()
                .iter()
                .map(|d| d.id)
                .collect();
            (job.id, ids)
        };
        // The first link and the file are sent; the tmux link stands by.
        let (woken, ids) = end(&mut store);
        assert_eq!(
            chain_states(&store, woken),
            [
                ("claude", "pending"),
                ("tmux", "standby"),
                ("file", "pending")
            ]
        );
        assert!(store.has_standby_after(ids[0]).unwrap());
        assert_eq!(store.due_deliveries(10, 10).unwrap().len(), 2);
        store
            .record_delivery(ids[0], DeliveryState::Delivered, 11, None, 11)
            .unwrap();
        assert_eq!(
            chain_states(&store, woken),
            [
                ("claude", "delivered"),
                ("tmux", "unneeded"),
                ("file", "pending")
            ]
        );
        // A link that passes on (held, noted, gone, failed) hands over to the next one, at once.
        let (passed, ids) = end(&mut store);
        store
            .record_delivery(ids[0], DeliveryState::Held, 12, Some("bypass"), 12)
            .unwrap();
        assert_eq!(
            chain_states(&store, passed),
            [("claude", "held"), ("tmux", "pending"), ("file", "pending")]
        );
        // A settled row is never overwritten (the outbox's late look after the hook's word).
        store
            .record_delivery(ids[0], DeliveryState::Delivered, 13, None, 13)
            .unwrap();
        assert_eq!(chain_states(&store, passed)[0], ("claude", "held"));
        // The hook takes the inbox's place after the fact (the inbox had been "delivered", as
        // far as its socket said): the inbox becomes held, what it made unneeded stands by again,
        // for the hook.
        let (hooked, ids) = end(&mut store);
        store
            .record_delivery(ids[0], DeliveryState::Delivered, 13, None, 13)
            .unwrap();
        let hook = Channel::ClaudeHook {
            session: "s".into(),
            pid: 1,
            started: 1,
        };
        let link = store
            .claim_ended(
                hooked,
                &channels,
                Some(ids[0]),
                Some((ids[0], DeliveryState::Held, "bypass".into())),
                &hook,
                14,
                "the hook",
            )
            .unwrap();
        assert_eq!(
            chain_states(&store, hooked),
            [
                ("claude", "held"),
                ("tmux", "standby"),
                ("file", "pending"),
                ("claude-hook", "pending")
            ]
        );
        // A hook that is gone passes the wake on to the pane.
        store
            .record_delivery(link, DeliveryState::Skipped, 15, Some("gone"), 15)
            .unwrap();
        assert_eq!(chain_states(&store, hooked)[1], ("tmux", "pending"));
    }

    /// A requeued job's earlier deliveries are no longer its own: those not sent never are, and
    /// its next end's deliveries are the only ones read back (and checked for duplicates).
    #[test]
    fn a_requeue_supersedes_the_deliveries_of_the_earlier_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let webhook = Channel::Webhook {
            url: "http://127.0.0.1:9/hook".into(),
            format: Default::default(),
        };
        let file = Channel::File {
            path: "/tmp/inbox.md".into(),
        };
        let job = store.insert(&new_job(&["false"])).unwrap();
        let end = |store: &mut Store, job: &crate::store::JobRecord, at| {
            let (ended, _) = store
                .apply_all(
                    &[(job, Transition::End(Ending::failed("exit 1", at)))],
                    at,
                    |tx| {
                        crate::store::insert_deliveries(
                            tx,
                            job.id,
                            crate::store::Subject::Job,
                            &[webhook.clone(), file.clone()],
                            at,
                        )
                    },
                )
                .unwrap()
                .remove(0);
            ended
        };
        let ended = end(&mut store, &job, 10);
        let first = store.deliveries(job.id).unwrap();
        // The file went out; the webhook waits for its retry.
        store
            .record_delivery(first[1].id, DeliveryState::Delivered, 11, None, 11)
            .unwrap();
        store
            .record_delivery(
                first[0].id,
                DeliveryState::Pending,
                5_000,
                Some("refused"),
                11,
            )
            .unwrap();
        let requeue = Transition::Requeue { by: "alice".into() };
        let (queued, _) = store
            .apply_all(&[(&ended, requeue)], 12, |tx| {
                supersede_deliveries(tx, job.id, 12)
            })
            .unwrap()
            .remove(0);
        assert!(store.deliveries(job.id).unwrap().is_empty());
        assert_eq!(store.due_deliveries(i64::MAX, 10).unwrap(), []);
        assert_eq!(store.next_delivery_at().unwrap(), None);
        // The inbox fallback of the next end is not mistaken for the earlier end's.
        let (running, _) = store
            .apply(
                &queued,
                &Transition::Start {
                    gpus: vec![],
                    at: 13,
                    on: baton_core::lifecycle::Runner::Local,
                },
                13,
            )
            .unwrap();
        end(&mut store, &running, 20);
        let second = store.deliveries(job.id).unwrap();
        assert_eq!(second.len(), 2);
        assert!(
            second
                .iter()
                .all(|d| d.state == DeliveryState::Pending && d.attempts == 0)
        );
        assert!(second.iter().all(|d| first.iter().all(|f| f.id != d.id)));
        assert_eq!(store.due_deliveries(20, 10).unwrap().len(), 2);
        assert!(!store.add_delivery(job.id, Subject::Job, &file, 21).unwrap());
    }

    #[test]
    fn a_delivery_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let job = store.insert(&new_job(&["true"])).unwrap().id;
        let file = Channel::File {
            path: "/tmp/inbox.md".into(),
        };
        assert_eq!(store.next_delivery_at().unwrap(), None);
        assert!(
            store
                .add_delivery(job, Subject::Workflow(4), &file, 20)
                .unwrap()
        );
        assert!(
            !store
                .add_delivery(job, Subject::Workflow(4), &file, 21)
                .unwrap()
        );
        assert_eq!(store.next_delivery_at().unwrap(), Some(20));
        let id = store.deliveries(job).unwrap()[0].id;
        store
            .record_delivery(id, DeliveryState::Delivered, 30, Some("ok"), 25)
            .unwrap();
        assert_eq!(
            store.deliveries(job).unwrap(),
            [Delivery {
                id,
                job,
                subject: Subject::Workflow(4),
                channel: file,
                state: DeliveryState::Delivered,
                attempts: 1,
                next_at: 30,
                error: Some("ok".into()),
                delivered_at: Some(25),
                after: None,
            }]
        );
        assert!(!store.has_standby_after(id).unwrap());
    }
}
