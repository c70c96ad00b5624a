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
