//! How long a task will probably run, for the critical path and for predicted start times.

use crate::model::Millis;

/// How many of the most recent runs count: old runs of a script that has since changed should
/// stop mattering.
pub const HISTORY_WINDOW: usize = 50;
/// Which percentile of those runs: high, so a task is rarely predicted too short (a too-short
/// prediction puts it late on the critical path and under-reserves time), but not the maximum,
/// so one pathological run does not dominate.
pub const PERCENTILE: usize = 90;
/// Applied to the percentile, in tenths (12 = ×1.2): run times drift and inputs grow.
pub const SAFETY_TENTHS: i64 = 12;
/// No prediction below one second: process start-up alone takes about that.
pub const MIN_PREDICTION_MS: Millis = 1000;

/// The predicted run time of a task, in milliseconds.
///
/// The rule, in order:
/// 1. With a history of past run times (oldest first; negative entries are ignored as bogus):
///    the 90th percentile (nearest rank) of the last 50 runs, times 1.2, at least 1 s, and never
///    more than the time limit, since the task is killed there.
/// 2. Without history, the time limit: the most it can run.
/// 3. Without either, `default_ms` (the daemon's configured guess).
pub fn predict_ms(history: &[Millis], time_limit: Option<Millis>, default_ms: Millis) -> Millis {
    let time_limit = time_limit.filter(|&limit| limit > 0);
    let mut recent: Vec<Millis> = history
        .iter()
        .copied()
        .filter(|&ms| ms >= 0)
        .rev()
        .take(HISTORY_WINDOW)
        .collect();
    if recent.is_empty() {
        return time_limit.unwrap_or(default_ms);
    }
    recent.sort_unstable();
    // Nearest rank: the smallest value with at least 90% of the runs at or below it.
    let rank = (recent.len() * PERCENTILE).div_ceil(100);
    let percentile = recent[rank.max(1) - 1];
    // In i128 so that the margin cannot overflow; the result is capped back into range.
    let padded = (i128::from(percentile) * i128::from(SAFETY_TENTHS) / 10)
        .min(i128::from(Millis::MAX)) as Millis;
    let padded = padded.max(MIN_PREDICTION_MS);
    match time_limit {
        Some(limit) => padded.min(limit),
        None => padded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_history_the_limit_then_the_default() {
        assert_eq!(predict_ms(&[], Some(600_000), 60_000), 600_000);
        assert_eq!(predict_ms(&[], None, 60_000), 60_000);
        assert_eq!(predict_ms(&[-1], None, 60_000), 60_000);
        assert_eq!(predict_ms(&[], Some(0), 60_000), 60_000);
    }

    #[test]
    fn a_high_percentile_with_a_margin() {
        // 1..=10 s: the 90th percentile is 9 s, padded to 10.8 s.
        let history: Vec<Millis> = (1..=10).map(|s| s * 1000).collect();
        assert_eq!(predict_ms(&history, None, 0), 10_800);
        // Order does not matter within the window.
        let reversed: Vec<Millis> = history.iter().rev().copied().collect();
        assert_eq!(predict_ms(&reversed, None, 0), 10_800);
        // One run: itself, padded.
        assert_eq!(predict_ms(&[50_000], None, 0), 60_000);
        // One outlier among twenty does not move it.
        let mut runs = vec![10_000; 19];
        runs.push(1_000_000);
        assert_eq!(predict_ms(&runs, None, 0), 12_000);
    }

    #[test]
    fn only_recent_runs_count() {
        // 50 old slow runs, then 50 fast ones: only the fast ones are in the window.
        let mut history = vec![100_000; 50];
        history.extend(vec![10_000; 50]);
        assert_eq!(predict_ms(&history, None, 0), 12_000);
        history.push(100_000);
        history.push(100_000);
        // 2 slow among the last 50 is still under the 90th percentile...
        assert_eq!(predict_ms(&history, None, 0), 12_000);
        // ...6 is not.
        history.extend(vec![100_000; 4]);
        assert_eq!(predict_ms(&history, None, 0), 120_000);
    }

    #[test]
    fn bounded_below_by_a_second_and_above_by_the_limit() {
        assert_eq!(predict_ms(&[10, 20], None, 0), MIN_PREDICTION_MS);
        assert_eq!(predict_ms(&[100_000], Some(110_000), 0), 110_000);
        assert_eq!(predict_ms(&[100_000], Some(500), 0), 500);
        assert_eq!(predict_ms(&[Millis::MAX], None, 0), Millis::MAX);
    }
}
