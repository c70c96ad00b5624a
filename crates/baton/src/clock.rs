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
