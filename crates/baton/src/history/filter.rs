//! What a listing asks for (`baton status` / `baton history` filters, `GET /v1/jobs`), parsed
//! into a [`Filter`] that the store turns into SQL. Pure: the time "now" is an argument.

use baton_core::{JobState, Millis};

/// Which jobs a listing shows. Empty parts select everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Any of these states (empty: any state).
    pub states: Vec<JobState>,
    /// The job's name, as a glob: `*` any run of characters, `?` one (`sweep-*`).
    pub name: Option<String>,
    /// Any of these owners (user names).
    pub owners: Vec<String>,
    /// Jobs still active at or after this time: not ended before it.
    pub since: Option<Millis>,
    /// Jobs submitted at or before this time.
    pub until: Option<Millis>,
    /// Tasks of this workflow.
    pub workflow: Option<u64>,
    /// Jobs of one agent session (`Some(None)`: submitted outside any).
    pub session: Option<Option<String>>,
    /// Jobs of this uid only (set by the daemon, never by the user: a session is one user's).
    pub uid: Option<u32>,
}

impl Filter {
    /// Whether the listing asks for particular jobs (then it shows every job that matches, not
    /// the bounded default view).
    pub fn narrows(&self) -> bool {
        !self.states.is_empty()
            || self.name.is_some()
            || !self.owners.is_empty()
            || self.since.is_some()
            || self.until.is_some()
            || self.workflow.is_some()
    }
}

/// What is wrong with a filter, worded for the user (the API answers 400 with it, the CLI
/// exits 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error(
        "--state: unknown state {0:?}; states are queued, running, succeeded, failed, \
         cancelled, timeout, or active (queued and running) and ended (the other four)"
    )]
    State(String),
    #[error(
        "{flag}: cannot read {text:?} as a time; give a duration before now (`90m`, `1d`), a \
         date (`2026-11-30`, midnight UTC) or an RFC 3339 time (`2026-11-30T14:00:00Z`, \
         `2026-11-30T15:00:00+01:00`)"
    )]
    When { flag: &'static str, text: String },
    #[error("--since ({since}) is after --until ({until}): no job can match")]
    Window { since: String, until: String },
    #[error("{flag}: an empty value matches nothing; leave the option out to match everything")]
    Empty { flag: &'static str },
}

/// Reads `--state` (comma-separated, repeatable): state names, `active` and `ended`.
pub fn parse_states(values: &[String]) -> Result<Vec<JobState>, FilterError> {
    let mut out: Vec<JobState> = Vec::new();
    let mut push = |s: JobState| {
        if !out.contains(&s) {
            out.push(s);
        }
    };
    for word in values.iter().flat_map(|v| v.split(',')) {
        let word = word.trim().to_ascii_lowercase();
        match word.as_str() {
            "" => continue,
            "active" => [JobState::Queued, JobState::Running]
                .into_iter()
                .for_each(&mut push),
            "ended" | "done" => JobState::ALL
                .into_iter()
                .filter(|s| s.is_terminal())
                .for_each(&mut push),
            other => match JobState::ALL.into_iter().find(|s| s.as_str() == other) {
                Some(s) => push(s),
                None => return Err(FilterError::State(other.to_string())),
            },
        }
    }
    if out.is_empty() && !values.is_empty() {
        return Err(FilterError::Empty { flag: "--state" });
    }
    Ok(out)
}

/// Reads a list option (`--owner alice,bob`, repeatable) into its words.
pub fn parse_list(flag: &'static str, values: &[String]) -> Result<Vec<String>, FilterError> {
    let out: Vec<String> = values
        .iter()
        .flat_map(|v| v.split(','))
        .map(|w| w.trim().to_string())
        .filter(|w| !w.is_empty())
        .collect();
    if out.is_empty() && !values.is_empty() {
        return Err(FilterError::Empty { flag });
    }
    Ok(out)
}

/// A time as a user types it, for `--since` and `--until`: a duration before `now` (`90m`,
/// `1d`, `1h30m`), a date (`2026-11-30`: midnight UTC), or an RFC 3339 time with `Z` or an
/// offset (`2026-11-30T14:00:00Z`, `2026-11-30T15:00:00+01:00`; a space for the `T` and no
/// zone, read as UTC, are accepted too). Returns milliseconds since the epoch.
pub fn parse_when(flag: &'static str, text: &str, now: Millis) -> Result<Millis, FilterError> {
    let bad = || FilterError::When {
        flag,
        text: text.to_string(),
    };
    let t = text.trim();
    if t.is_empty() {
        return Err(bad());
    }
    if let Ok(ago) = baton_core::units::parse_duration(t) {
        return Ok(now.saturating_sub(ago));
    }
    if let Some(ms) = parse_date(t) {
        return Ok(ms);
    }
    // An offset at the end (`+01:00`, `-0530`) is taken off and applied by hand: humantime
    // reads only `Z` or no zone.
    let (clock, offset_ms) = split_offset(t).ok_or_else(bad)?;
    let parsed = humantime::parse_rfc3339_weak(clock).map_err(|_| bad())?;
    let ms = parsed
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| bad())?
        .as_millis() as Millis;
    Ok(ms - offset_ms)
}

/// `YYYY-MM-DD` as midnight UTC.
fn parse_date(t: &str) -> Option<Millis> {
    let mut parts = t.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, u32, u32) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400_000)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Splits a trailing UTC offset off an RFC 3339 time: the rest, and the offset in ms (east
/// positive). `Z` and no zone are offset 0 (humantime reads `Z` itself).
fn split_offset(t: &str) -> Option<(&str, Millis)> {
    // Only after the time of day: a date's own dashes are not an offset.
    let time_at = t.find(['T', 't', ' '])?;
    let tail = &t[time_at..];
    let Some(sign_at) = tail.rfind(['+', '-']) else {
        return Some((t, 0));
    };
    let (clock, zone) = t.split_at(time_at + sign_at);
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let digits: String = zone[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = digits[2..].parse().ok()?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some((clock, sign * (hours * 3_600_000 + minutes * 60_000)))
}

/// The whole filter from its parts as typed, checked: `now` anchors relative times.
#[allow(clippy::too_many_arguments)]
pub fn build(
    states: &[String],
    name: Option<&str>,
    owners: &[String],
    since: Option<&str>,
    until: Option<&str>,
    workflow: Option<u64>,
    session: Option<Option<String>>,
    now: Millis,
) -> Result<Filter, FilterError> {
    let since_ms = since.map(|t| parse_when("--since", t, now)).transpose()?;
    let until_ms = until.map(|t| parse_when("--until", t, now)).transpose()?;
    if let (Some(s), Some(u)) = (since_ms, until_ms)
        && s > u
    {
        return Err(FilterError::Window {
            since: since.unwrap_or_default().to_string(),
            until: until.unwrap_or_default().to_string(),
        });
    }
    let name = match name.map(str::trim) {
        Some("") => return Err(FilterError::Empty { flag: "--name" }),
        other => other.map(str::to_string),
    };
    Ok(Filter {
        states: parse_states(states)?,
        name,
        owners: parse_list("--owner", owners)?,
        since: since_ms,
        until: until_ms,
        workflow,
        session,
        uid: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_796_000_000_000;

    #[test]
    fn states_take_names_groups_and_lists() {
        let s = |v: &[&str]| parse_states(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            s(&["failed,timeout"]).unwrap(),
            [JobState::Failed, JobState::Timeout]
        );
        assert_eq!(
            s(&["active", "running"]).unwrap(),
            [JobState::Queued, JobState::Running]
        );
        assert_eq!(s(&["ended"]).unwrap().len(), 4);
        assert_eq!(s(&["FAILED"]).unwrap(), [JobState::Failed]);
        assert_eq!(s(&[]).unwrap(), []);
        let err = s(&["finished"]).unwrap_err().to_string();
        assert!(
            err.contains("\"finished\"") && err.contains("succeeded"),
            "{err}"
        );
        assert!(matches!(s(&[","]), Err(FilterError::Empty { .. })));
    }

    #[test]
    fn times_are_durations_ago_dates_or_rfc3339() {
        assert_eq!(parse_when("--since", "1d", NOW), Ok(NOW - 86_400_000));
        assert_eq!(parse_when("--since", "90m", NOW), Ok(NOW - 5_400_000));
        assert_eq!(
            parse_when("--since", "2026-11-30", NOW),
            Ok(days_from_civil(2026, 11, 30) * 86_400_000)
        );
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        let z = parse_when("--since", "2026-11-30T14:00:00Z", NOW).unwrap();
        assert_eq!(
            z,
            days_from_civil(2026, 11, 30) * 86_400_000 + 14 * 3_600_000
        );
        assert_eq!(
            parse_when("--since", "2026-11-30T15:00:00+01:00", NOW),
            Ok(z)
        );
        assert_eq!(
            parse_when("--since", "2026-11-30T08:30:00-05:30", NOW),
            Ok(z)
        );
        assert_eq!(parse_when("--since", "2026-11-30 14:00:00", NOW), Ok(z));
        assert_eq!(
            parse_when("--since", "2026-11-30T14:00:00.250Z", NOW),
            Ok(z + 250)
        );
        for bad in [
            "",
            "yesterday",
            "2026-13-01",
            "2026-02-30",
            "2026-11-30T25:00:00Z",
            "1x",
        ] {
            let err = parse_when("--until", bad, NOW).unwrap_err().to_string();
            assert!(err.starts_with("--until: cannot read"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_filter_is_checked_whole() {
        let f = build(
            &["failed".into()],
            Some("sweep-*"),
            &["alice,bob".into()],
            Some("2d"),
            Some("1d"),
            Some(3),
            None,
            NOW,
        )
        .unwrap();
        assert_eq!(f.owners, ["alice", "bob"]);
        assert_eq!(
            (f.since, f.until),
            (Some(NOW - 172_800_000), Some(NOW - 86_400_000))
        );
        assert!(f.narrows());
        assert!(!Filter::default().narrows());
        let err = build(&[], None, &[], Some("1d"), Some("2d"), None, None, NOW).unwrap_err();
        assert!(matches!(err, FilterError::Window { .. }), "{err}");
        let err = build(&[], Some(" "), &[], None, None, None, None, NOW).unwrap_err();
        assert!(matches!(err, FilterError::Empty { flag: "--name" }));
    }
}
