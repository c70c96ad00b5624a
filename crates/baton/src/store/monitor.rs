//! What the GPU monitor keeps in the store: the audit log of waste decisions, each job
//! attempt's use of its GPUs (its report and `baton stats` read it, and it survives a daemon
//! restart mid-run), and every GPU's samples summed per minute (cluster utilisation over time).

use baton_core::{JobId, Millis};
use rusqlite::params;

use super::{Store, StoreError};

/// One waste decision and what came of it.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditEntry {
    pub id: i64,
    pub at: Millis,
    /// `zombie`, `idle_job`, `held_after_exit`.
    pub rule: String,
    pub job: Option<JobId>,
    pub pid: Option<u32>,
    pub gpu: Option<u32>,
    /// `notify`, `deprioritize`, `sigterm`, `sigkill`, `skip`.
    pub action: String,
    /// `pending`, `dry-run`, `skipped`, then what carrying it out did (free text, `failed: …`).
    pub outcome: String,
    pub dry_run: bool,
    pub message: String,
    /// The samples and thresholds behind the decision (JSON).
    pub evidence: serde_json::Value,
}

/// One job's use of one GPU in one sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobGpuSample {
    pub job: JobId,
    pub attempt: u32,
    pub gpu: u32,
    pub util: Option<f64>,
    /// Memory its processes held on that GPU.
    pub mem: u64,
    /// At most the idle threshold (counted as idle time).
    pub idle: bool,
    /// The time this sample stands for.
    pub interval_ms: Millis,
}

/// One GPU in one sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuMinuteSample {
    pub gpu: u32,
    pub util: Option<f64>,
    pub mem: u64,
}

/// One attempt's use of one GPU so far.
#[derive(Clone, Debug, PartialEq)]
pub struct JobGpuUsage {
    pub job: JobId,
    pub attempt: u32,
    pub gpu: u32,
    pub sampled_ms: Millis,
    pub idle_ms: Millis,
    pub samples: u32,
    pub mean_util: Option<f64>,
    pub peak_util: Option<f64>,
    pub mem_peak: u64,
}

/// Each GPU's mean utilisation over a period, from its per-minute sums.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuUtilisation {
    pub gpu: u32,
    pub samples: u64,
    pub mean_util: Option<f64>,
}

/// One GPU over one minute: its mean utilisation and the most memory it held.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuMinute {
    pub gpu: u32,
    /// The minute's start.
    pub minute: Millis,
    pub mean_util: Option<f64>,
    pub mem_peak: u64,
}

columns!(
    /// The columns of `job_gpu_usage` a `JobGpuUsage` is read from.
    UsageColumns {
        job_id,
        attempt,
        gpu,
        sampled_ms,
        idle_ms,
        samples,
        util_samples,
        util_sum,
        util_peak,
        mem_peak,
    }
);

fn read_usage(r: &rusqlite::Row<'_>, c: &UsageColumns) -> rusqlite::Result<JobGpuUsage> {
    let util_samples: i64 = r.get(c.util_samples)?;
    let util_sum: f64 = r.get(c.util_sum)?;
    Ok(JobGpuUsage {
        job: JobId(r.get::<_, i64>(c.job_id)? as u64),
        attempt: r.get(c.attempt)?,
        gpu: r.get(c.gpu)?,
        sampled_ms: r.get(c.sampled_ms)?,
        idle_ms: r.get(c.idle_ms)?,
        samples: r.get(c.samples)?,
        mean_util: (util_samples > 0).then(|| util_sum / util_samples as f64),
        peak_util: r.get(c.util_peak)?,
        mem_peak: r.get::<_, i64>(c.mem_peak)? as u64,
    })
}

columns!(
    /// The columns of `audit` an `AuditEntry` is read from.
    AuditColumns {
        id,
        at,
        rule,
        job_id,
        pid,
        gpu,
        action,
        outcome,
        dry_run,
        message,
        evidence,
    }
);

impl Store {
    /// Records one monitor sample: every GPU's minute sums and every job's use, in one
    /// transaction.
    pub fn record_samples(
        &mut self,
        at: Millis,
        gpus: &[GpuMinuteSample],
        jobs: &[JobGpuSample],
    ) -> Result<(), StoreError> {
        let minute = at - at.rem_euclid(60_000);
        let tx = self.conn.transaction()?;
        for g in gpus {
            tx.prepare_cached(
                "INSERT INTO gpu_minutes (gpu, minute, samples, util_samples, util_sum, mem_peak) \
                 VALUES (?1, ?2, 1, ?3, ?4, ?5) \
                 ON CONFLICT (gpu, minute) DO UPDATE SET samples = samples + 1, \
                 util_samples = util_samples + ?3, util_sum = util_sum + ?4, \
                 mem_peak = MAX(mem_peak, ?5)",
            )?
            .execute(params![
                g.gpu,
                minute,
                i64::from(g.util.is_some()),
                g.util.unwrap_or(0.0),
                g.mem as i64
            ])?;
        }
        for j in jobs {
            tx.prepare_cached(
                "INSERT INTO job_gpu_usage (job_id, attempt, gpu, sampled_ms, idle_ms, samples, \
                 util_samples, util_sum, util_peak, mem_peak, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?7, ?8, ?9, ?10) \
                 ON CONFLICT (job_id, attempt, gpu) DO UPDATE SET \
                 sampled_ms = sampled_ms + ?4, idle_ms = idle_ms + ?5, samples = samples + 1, \
                 util_samples = util_samples + ?6, util_sum = util_sum + ?7, \
                 util_peak = CASE WHEN ?8 IS NULL THEN util_peak \
                                  WHEN util_peak IS NULL OR ?8 > util_peak THEN ?8 \
                                  ELSE util_peak END, \
                 mem_peak = MAX(mem_peak, ?9), updated_at = ?10",
            )?
            .execute(params![
                j.job.0 as i64,
                j.attempt,
                j.gpu,
                j.interval_ms,
                if j.idle { j.interval_ms } else { 0 },
                i64::from(j.util.is_some()),
                j.util.unwrap_or(0.0),
                j.util,
                j.mem as i64,
                at
            ])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// An attempt's use of each of its GPUs, by GPU.
    pub fn job_usage(&self, job: JobId, attempt: u32) -> Result<Vec<JobGpuUsage>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM job_gpu_usage WHERE job_id = ?1 AND attempt = ?2 ORDER BY gpu",
            UsageColumns::LIST
        ))?;
        let c = UsageColumns::of(&stmt)?;
        let rows = stmt.query_map(params![job.0 as i64, attempt], |r| read_usage(r, &c))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every attempt's use of its GPUs sampled since `since`.
    pub fn usage_since(&self, since: Millis) -> Result<Vec<JobGpuUsage>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM job_gpu_usage WHERE updated_at >= ?1 ORDER BY job_id, attempt, gpu",
            UsageColumns::LIST
        ))?;
        let c = UsageColumns::of(&stmt)?;
        let rows = stmt.query_map([since], |r| read_usage(r, &c))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Each GPU's mean utilisation over the minutes since `since`.
    pub fn gpu_utilisation_since(&self, since: Millis) -> Result<Vec<GpuUtilisation>, StoreError> {
        let minute = since - since.rem_euclid(60_000);
        let mut stmt = self.conn.prepare_cached(
            "SELECT gpu, SUM(samples) AS samples, SUM(util_samples) AS util_samples, \
             SUM(util_sum) AS util_sum FROM gpu_minutes \
             WHERE minute >= ?1 GROUP BY gpu ORDER BY gpu",
        )?;
        let rows = stmt.query_map([minute], |r| {
            let util_samples: i64 = r.get("util_samples")?;
            let util_sum: f64 = r.get("util_sum")?;
            Ok(GpuUtilisation {
                gpu: r.get("gpu")?,
                samples: r.get::<_, i64>("samples")? as u64,
                mean_util: (util_samples > 0).then(|| util_sum / util_samples as f64),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every GPU's minutes from the one holding `from` to the one holding `to`, summed into
    /// spans of `bucket_ms` (whole minutes; each row's `minute` is its span's first), by GPU then
    /// time: the dashboard's charts of what is older than the monitor's in-memory hour, a
    /// bounded number of rows however long the period.
    pub fn gpu_minutes_between(
        &self,
        from: Millis,
        to: Millis,
        bucket_ms: Millis,
    ) -> Result<Vec<GpuMinute>, StoreError> {
        let start = from - from.rem_euclid(60_000);
        let bucket = bucket_ms.max(60_000) - bucket_ms.max(60_000).rem_euclid(60_000);
        let mut stmt = self.conn.prepare_cached(
            "SELECT gpu, ?1 + ((minute - ?1) / ?3) * ?3 AS minute, \
             SUM(util_samples) AS util_samples, SUM(util_sum) AS util_sum, \
             MAX(mem_peak) AS mem_peak FROM gpu_minutes \
             WHERE minute >= ?1 AND minute <= ?2 \
             GROUP BY gpu, (minute - ?1) / ?3 ORDER BY gpu, minute",
        )?;
        let rows = stmt.query_map([start, to, bucket], |r| {
            let util_samples: i64 = r.get("util_samples")?;
            let util_sum: f64 = r.get("util_sum")?;
            Ok(GpuMinute {
                gpu: r.get("gpu")?,
                minute: r.get("minute")?,
                mean_util: (util_samples > 0).then(|| util_sum / util_samples as f64),
                mem_peak: r.get::<_, i64>("mem_peak")? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Drops per-minute GPU sums older than `minutes_before` and audit entries older than
    /// `audit_before`.
    pub fn prune_samples(
        &mut self,
        minutes_before: Millis,
        audit_before: Millis,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM gpu_minutes WHERE minute < ?1")?
            .execute([minutes_before])?;
        self.conn
            .prepare_cached("DELETE FROM audit WHERE at < ?1")?
            .execute([audit_before])?;
        Ok(())
    }

    /// Appends a decision to the audit log; returns its id.
    pub fn add_audit(&mut self, e: &AuditEntry) -> Result<i64, StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO audit (at, rule, job_id, pid, gpu, action, outcome, dry_run, message, \
                 evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?
            .execute(params![
                e.at,
                e.rule,
                e.job.map(|j| j.0 as i64),
                e.pid,
                e.gpu,
                e.action,
                e.outcome,
                e.dry_run,
                e.message,
                e.evidence.to_string()
            ])?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records what came of carrying out a decision.
    pub fn set_audit_outcome(&mut self, id: i64, outcome: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE audit SET outcome = ?1 WHERE id = ?2")?
            .execute(params![outcome, id])?;
        Ok(())
    }

    /// The audit log since `since`, oldest first.
    pub fn audit_since(&self, since: Millis) -> Result<Vec<AuditEntry>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {} FROM audit WHERE at >= ?1 ORDER BY id",
            AuditColumns::LIST
        ))?;
        let c = AuditColumns::of(&stmt)?;
        let rows = stmt.query_map([since], |r| {
            let evidence: String = r.get(c.evidence)?;
            Ok(AuditEntry {
                id: r.get(c.id)?,
                at: r.get(c.at)?,
                rule: r.get(c.rule)?,
                job: r.get::<_, Option<i64>>(c.job_id)?.map(|j| JobId(j as u64)),
                pid: r.get(c.pid)?,
                gpu: r.get(c.gpu)?,
                action: r.get(c.action)?,
                outcome: r.get(c.outcome)?,
                dry_run: r.get(c.dry_run)?,
                message: r.get(c.message)?,
                evidence: serde_json::from_str(&evidence).unwrap_or(serde_json::Value::Null),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_add_up_per_minute_and_per_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let job = |util: Option<f64>, mem: u64, idle: bool| JobGpuSample {
            job: JobId(7),
            attempt: 1,
            gpu: 0,
            util,
            mem,
            idle,
            interval_ms: 5_000,
        };
        let gpu = |util: Option<f64>| GpuMinuteSample {
            gpu: 0,
            util,
            mem: 1 << 30,
        };
        store
            .record_samples(
                60_000,
                &[gpu(Some(10.0))],
                &[job(Some(10.0), 1 << 30, false)],
            )
            .unwrap();
        store
            .record_samples(65_000, &[gpu(Some(2.0))], &[job(Some(2.0), 3 << 30, true)])
            .unwrap();
        store
            .record_samples(70_000, &[gpu(None)], &[job(None, 2 << 30, false)])
            .unwrap();
        let usage = store.job_usage(JobId(7), 1).unwrap();
        assert_eq!(usage.len(), 1);
        let u = &usage[0];
        assert_eq!((u.samples, u.sampled_ms, u.idle_ms), (3, 15_000, 5_000));
        assert_eq!(u.mean_util, Some(6.0), "unknown utilisation is not zero");
        assert_eq!((u.peak_util, u.mem_peak), (Some(10.0), 3 << 30));
        assert!(store.job_usage(JobId(7), 2).unwrap().is_empty());
        let gpus = store.gpu_utilisation_since(0).unwrap();
        assert_eq!(gpus[0].samples, 3);
        assert_eq!(gpus[0].mean_util, Some(6.0));
        assert_eq!(store.usage_since(71_000).unwrap().len(), 0);
        assert_eq!(store.usage_since(70_000).unwrap().len(), 1);
        store
            .record_samples(130_000, &[gpu(Some(50.0))], &[])
            .unwrap();
        let minutes = store.gpu_minutes_between(65_000, 130_000, 60_000).unwrap();
        let shown: Vec<_> = minutes.iter().map(|m| (m.minute, m.mean_util)).collect();
        assert_eq!(shown, [(60_000, Some(6.0)), (120_000, Some(50.0))]);
        assert_eq!(minutes[0].mem_peak, 1 << 30);
        assert!(
            store
                .gpu_minutes_between(0, 59_999, 60_000)
                .unwrap()
                .is_empty()
        );
        // Two minutes to a span: one row, the mean of all three known samples.
        let spans = store.gpu_minutes_between(60_000, 130_000, 120_000).unwrap();
        let shown: Vec<_> = spans.iter().map(|m| (m.minute, m.mean_util)).collect();
        assert_eq!(shown, [(60_000, Some(62.0 / 3.0))]);
    }

    #[test]
    fn audit_entries_round_trip_and_take_their_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let mut entry = AuditEntry {
            id: 0,
            at: 1_000,
            rule: "zombie".into(),
            job: None,
            pid: Some(4242),
            gpu: Some(1),
            action: "sigterm".into(),
            outcome: "pending".into(),
            dry_run: false,
            message: "pid 4242 holds 2 GiB on GPU 1".into(),
            evidence: serde_json::json!({"mem": 2147483648u64}),
        };
        let id = store.add_audit(&entry).unwrap();
        store.set_audit_outcome(id, "done").unwrap();
        entry.id = id;
        entry.outcome = "done".into();
        assert_eq!(store.audit_since(0).unwrap(), vec![entry]);
        assert!(store.audit_since(1_001).unwrap().is_empty());
    }
}
