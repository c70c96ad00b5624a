//! When a job may begin (`submit --begin TIME`, and a reservation's `--start`), as people
//! write it: `now+2h`, `14:00` (today, or tomorrow once that has passed, as Slurm reads it),
//! `today 14:00`, `tomorrow 09:00`, `2026-12-03`, `2026-12-03T09:00`, or RFC 3339 with an offset (`2026-12-03T09:00:00Z`, `…+01:00`). Times without an offset are
//! the caller's local time: the caller passes its zone as a function from an instant to that
//! zone's offset, so the core reads no clock and no time zone database.

use crate::model::Millis;
use crate::units::parse_duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot read {flag} {text:?}: expected now+DURATION (now+2h), HH:MM[:SS] (14:00), today or \
     tomorrow HH:MM (tomorrow 09:00), a date (2026-12-03), a local date and time \
     (2026-12-03T09:00) or RFC 3339 (2026-12-03T09:00:00Z)"
)]
pub struct BeginError {
    /// The option it was given to (`--begin`, `--start`).
    pub flag: &'static str,
    pub text: String,
}

impl BeginError {
    /// The same error, about option `flag`.
    pub fn for_flag(self, flag: &'static str) -> BeginError {
        BeginError { flag, ..self }
    }
}

/// The instant `text` names, given `now` and `offset_at(instant)`: the local zone's offset from
/// UTC, in seconds, at that instant.
pub fn parse_begin(
    text: &str,
    now: Millis,
    offset_at: impl Fn(Millis) -> i64,
) -> Result<Millis, BeginError> {
    let err = || BeginError {
        flag: "--begin",
        text: text.to_string(),
    };
    let t = text.trim();
    if t == "now" {
        return Ok(now);
    }
    if let Some(after) = t.strip_prefix("now+") {
        return parse_duration(after)
            .map(|d| now.saturating_add(d))
            .map_err(|_| err());
    }
    // A local wall-clock time, turned into an instant with the zone's offset then (asked
    // twice, so that a date across a daylight-saving change gets the offset it will have).
    let local = |wall_ms: Millis| {
        let guess = wall_ms - offset_at(wall_ms) * 1000;
        wall_ms - offset_at(guess) * 1000
    };
    let today_wall = (now + offset_at(now) * 1000).div_euclid(DAY_MS) * DAY_MS;
    for (word, days) in [("today ", 0), ("tomorrow ", 1)] {
        if let Some(clock) = t.strip_prefix(word) {
            let clock = time_of_day(clock.trim()).ok_or_else(err)?;
            return Ok(local(today_wall + days * DAY_MS + clock));
        }
    }
    if let Some(clock) = time_of_day(t) {
        let at = local(today_wall + clock);
        return Ok(if at > now {
            at
        } else {
            local(today_wall + DAY_MS + clock)
        });
    }
    let (date, rest) = t.split_at(t.find(['T', ' ']).unwrap_or(t.len()));
    let day = date_days(date).ok_or_else(err)?;
    let wall = day * DAY_MS;
    let rest = rest.get(1..).unwrap_or("");
    if rest.is_empty() {
        return Ok(local(wall));
    }
    let (clock, offset) = split_offset(rest).ok_or_else(err)?;
    let clock = time_of_day(clock).ok_or_else(err)?;
    Ok(match offset {
        Some(seconds) => wall + clock - seconds * 1000,
        None => local(wall + clock),
    })
}

const DAY_MS: Millis = 86_400_000;

/// `HH:MM` or `HH:MM:SS` as milliseconds after midnight.
fn time_of_day(t: &str) -> Option<Millis> {
    let parts: Vec<&str> = t.split(':').collect();
    if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.len() != 2) {
        return None;
    }
    let n: Vec<i64> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, s) = (n[0], n[1], n.get(2).copied().unwrap_or(0));
    (h < 24 && m < 60 && s < 60).then_some(((h * 60 + m) * 60 + s) * 1000)
}

/// `Z`, `+HH:MM` or `-HH:MM` at the end of a time: the time, and the offset in seconds.
fn split_offset(t: &str) -> Option<(&str, Option<i64>)> {
    if let Some(clock) = t.strip_suffix('Z').or_else(|| t.strip_suffix('z')) {
        return Some((clock, Some(0)));
    }
    match t.rfind(['+', '-']) {
        Some(at) => {
            let (clock, offset) = t.split_at(at);
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            let (h, m) = offset[1..].split_once(':')?;
            let (h, m): (i64, i64) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60).then_some((clock, Some(sign * (h * 3600 + m * 60))))
        }
        None => Some((t, None)),
    }
}

/// `YYYY-MM-DD` as days since 1970-01-01 (the proleptic Gregorian calendar).
fn date_days(date: &str) -> Option<i64> {
    let mut parts = date.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, i64, i64) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in_month = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month[(m - 1) as usize] {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-02T10:30:00Z.
    const NOW: Millis = 1_796_207_400_000;
    const UTC: fn(Millis) -> i64 = |_| 0;
    const PLUS_ONE: fn(Millis) -> i64 = |_| 3600;

    #[test]
    fn dates_count_days_from_the_epoch() {
        assert_eq!(date_days("1970-01-01"), Some(0));
        assert_eq!(date_days("2000-03-01"), Some(11_017));
        assert_eq!(date_days("2026-12-02"), Some(NOW / DAY_MS));
        assert_eq!(date_days("2024-02-29"), Some(19_782));
        assert_eq!(date_days("2026-02-29"), None, "not a leap year");
        assert_eq!(date_days("2026-13-01"), None);
        assert_eq!(date_days("26-12-01"), None);
    }

    #[test]
    fn relative_and_clock_times() {
        assert_eq!(parse_begin("now", NOW, UTC), Ok(NOW));
        assert_eq!(parse_begin("now+2h", NOW, UTC), Ok(NOW + 7_200_000));
        // 14:00 is still ahead today; 09:00 has passed, so it is tomorrow's.
        assert_eq!(
            parse_begin("14:00", NOW, UTC),
            Ok(NOW + 3 * 3_600_000 + 1_800_000)
        );
        assert_eq!(parse_begin("09:00", NOW, UTC), Ok(NOW - 5_400_000 + DAY_MS));
        // In UTC+1 it is 11:30 locally: 12:00 local is 11:00Z, half an hour away.
        assert_eq!(parse_begin("12:00", NOW, PLUS_ONE), Ok(NOW + 1_800_000));
        assert_eq!(parse_begin("12:00:30", NOW, PLUS_ONE), Ok(NOW + 1_830_000));
        // Named days: today's even when passed, tomorrow's always.
        let midnight = NOW / DAY_MS * DAY_MS;
        assert_eq!(
            parse_begin("tomorrow 09:00", NOW, UTC),
            Ok(midnight + DAY_MS + 9 * 3_600_000)
        );
        assert_eq!(
            parse_begin("today 09:00", NOW, UTC),
            Ok(midnight + 9 * 3_600_000)
        );
        assert_eq!(
            parse_begin("tomorrow 09:00", NOW, PLUS_ONE),
            Ok(midnight + DAY_MS + 8 * 3_600_000)
        );
    }

    #[test]
    fn dates_and_rfc3339() {
        let midnight = (NOW / DAY_MS + 1) * DAY_MS; // 2026-12-03T00:00Z
        assert_eq!(parse_begin("2026-12-03", NOW, UTC), Ok(midnight));
        assert_eq!(
            parse_begin("2026-12-03", NOW, PLUS_ONE),
            Ok(midnight - 3_600_000)
        );
        assert_eq!(
            parse_begin("2026-12-03T09:00", NOW, PLUS_ONE),
            Ok(midnight + 8 * 3_600_000)
        );
        assert_eq!(
            parse_begin("2026-12-03T09:00:00Z", NOW, PLUS_ONE),
            Ok(midnight + 9 * 3_600_000)
        );
        assert_eq!(
            parse_begin("2026-12-03T09:00:00+02:00", NOW, UTC),
            Ok(midnight + 7 * 3_600_000)
        );
        assert_eq!(
            parse_begin("2026-12-03T09:00:00-05:30", NOW, UTC),
            Ok(midnight + 14 * 3_600_000 + 1_800_000)
        );
    }

    #[test]
    fn what_cannot_be_read_says_what_can() {
        for bad in [
            "tomorrow",
            "25:00",
            "now+soon",
            "2026-12-03T9",
            "12:3",
            "",
            "2026-12-03T09:00+5",
            "tomorrow 9am",
            "yesterday 09:00",
        ] {
            let e = parse_begin(bad, NOW, UTC).unwrap_err();
            assert!(e.to_string().contains("now+DURATION"), "{bad}: {e}");
        }
    }
}
