//! The wall clock, read in one place. Everything in `baton-core` takes the time as an argument;
//! the shell reads it here and passes it in.

use baton_core::Millis;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// This machine's offset from UTC at `at`, in seconds (its local time zone, as `date` shows).
pub fn local_offset(at: baton_core::Millis) -> i64 {
    let t = at.div_euclid(1000) as libc::time_t;
    // SAFETY: localtime_r fills the zeroed tm it is given, reading the zone once.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return 0;
    }
    tm.tm_gmtoff
}

/// The budget period around `at` in this machine's local time: when it began (local midnight,
/// Monday's, or the first of the month's) and when the next begins, with that moment for
/// people (`Monday 2026-12-14 00:00`).
pub fn period_bounds(at: Millis, period: baton_core::limits::Period) -> (Millis, Millis, String) {
    use baton_core::limits::Period;
    let t = at.div_euclid(1000) as libc::time_t;
    // SAFETY: localtime_r fills the zeroed tm it is given; mktime reads and normalises it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return (at, at, "never".to_string());
    }
    tm.tm_hour = 0;
    tm.tm_min = 0;
    tm.tm_sec = 0;
    // Whatever daylight saving time is in force on the day mktime lands on.
    tm.tm_isdst = -1;
    match period {
        Period::Day => {}
        Period::Week => tm.tm_mday -= (tm.tm_wday + 6) % 7,
        Period::Month => tm.tm_mday = 1,
    }
    let mut next = tm;
    match period {
        Period::Day => next.tm_mday += 1,
        Period::Week => next.tm_mday += 7,
        Period::Month => next.tm_mon += 1,
    }
    let start = unsafe { libc::mktime(&mut tm) };
    let end = unsafe { libc::mktime(&mut next) };
    const DAYS: [&str; 7] = [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
    ];
    let when = format!(
        "{} {:04}-{:02}-{:02} 00:00",
        DAYS[next.tm_wday.rem_euclid(7) as usize],
        next.tm_year + 1900,
        next.tm_mon + 1,
        next.tm_mday
    );
    (start as Millis * 1000, end as Millis * 1000, when)
}

/// `at` in this machine's local time, to the minute, for people: `Wed 2026-12-09 09:00`.
pub fn local_minute(at: Millis) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    let t = at.div_euclid(1000) as libc::time_t;
    // SAFETY: localtime_r fills the zeroed tm it is given.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("{at} ms");
    }
    format!(
        "{} {:04}-{:02}-{:02} {:02}:{:02}",
        DAYS[tm.tm_wday.rem_euclid(7) as usize],
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::limits::Period;

    #[test]
    fn a_period_holds_its_moment_and_the_next_begins_where_it_ends() {
        // 2026-12-09, a Wednesday, mid-afternoon (whatever the zone, within a day of it).
        let at: Millis = 1_797_000_000_000 + 15 * 3_600_000;
        for period in [Period::Day, Period::Week, Period::Month] {
            let (start, end, when) = period_bounds(at, period);
            assert!(start <= at && at < end, "{period:?}: {start} {at} {end}");
            let (next_start, _, _) = period_bounds(end, period);
            assert_eq!(next_start, end, "{period:?}");
            assert!(when.ends_with(" 00:00"), "{when}");
        }
        let (start, end, when) = period_bounds(at, Period::Week);
        assert!(when.starts_with("Monday "), "{when}");
        // Six to eight days (a daylight saving change moves it by an hour).
        assert!((end - start - 7 * 86_400_000).abs() <= 3_600_000);
    }

    #[test]
    fn a_moment_reads_to_the_minute_with_its_weekday() {
        let text = local_minute(1_797_000_000_000);
        let (day, rest) = text.split_once(' ').unwrap();
        assert!(
            ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].contains(&day),
            "{text}"
        );
        assert_eq!(rest.len(), "2026-12-09 09:00".len(), "{text}");
    }
}
