//! Finding jobs by name: a user's jobs whose name is `train-lr3` (the newest first) or matches
//! a glob (`sweep-*`, `lr-?`, `run-[0-9]`, as SQLite's GLOB reads them: case-sensitive, like the
//! shell), for the commands that take a job's name where an id goes.

use baton_core::{JobId, JobState};
use rusqlite::params;

use super::{Store, StoreError};

/// One job a name matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedJob {
    pub id: JobId,
    pub name: String,
    pub state: JobState,
    pub session: Option<String>,
}

/// Whether `text` holds a glob character (`*`, `?`, `[`).
pub fn is_glob(text: &str) -> bool {
    text.contains(['*', '?', '['])
}

impl Store {
    /// `owner_uid`'s jobs named `pattern` (exactly, or as a glob), newest first, at most
    /// `limit`; with `active_only`, only those queued or running.
    pub fn jobs_named(
        &self,
        owner_uid: u32,
        pattern: &str,
        active_only: bool,
        limit: usize,
    ) -> Result<Vec<NamedJob>, StoreError> {
        let test = if is_glob(pattern) { "GLOB" } else { "=" };
        let active = if active_only {
            " AND state IN ('queued', 'running')"
        } else {
            ""
        };
        let sql = format!(
            "SELECT id, name, state, session FROM jobs WHERE owner_uid = ?1 AND name {test} ?2{active} \
             ORDER BY id DESC LIMIT ?3"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(params![owner_uid, pattern, limit as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, name, state, session) = row?;
            out.push(NamedJob {
                id: JobId(id as u64),
                name,
                state: state.parse().unwrap_or(JobState::Failed),
                session,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewJob;

    #[test]
    fn names_match_exactly_or_as_globs_newest_first_and_only_the_owners() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("baton.db")).unwrap();
        let mut add = |name: &str, owner_uid: u32| {
            store
                .insert(&NewJob {
                    name: Some(name.into()),
                    owner_uid,
                    ..NewJob::plain(&["true"], 0)
                })
                .unwrap()
                .id
        };
        let a = add("train-lr3", 1000);
        let b = add("train-lr4", 1000);
        let c = add("train-lr3", 1000);
        let _theirs = add("train-lr3", 1001);
        let ids = |pattern: &str| -> Vec<JobId> {
            store
                .jobs_named(1000, pattern, false, 10)
                .unwrap()
                .into_iter()
                .map(|j| j.id)
                .collect()
        };
        assert_eq!(ids("train-lr3"), [c, a], "newest first, the owner's only");
        assert_eq!(ids("train-*"), [c, b, a]);
        assert_eq!(ids("train-lr[4]"), [b]);
        assert_eq!(ids("Train-*"), Vec::<JobId>::new(), "case-sensitive");
        assert_eq!(
            ids("train"),
            Vec::<JobId>::new(),
            "a plain name matches whole"
        );
        assert!(is_glob("a*") && is_glob("a?") && is_glob("a[1]") && !is_glob("a-1"));
    }
}
