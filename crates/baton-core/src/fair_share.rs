//! Fair share: each owner's recent use of the GPUs, decayed over time, so that among jobs of
//! equal priority the owner who used less goes first. One user's 500-job sweep then cannot lock a
//! colleague out: the colleague's job goes ahead of the sweep's queued jobs, while the sweep keeps
//! what it runs. Pure: the caller passes the jobs and the clock.

use std::collections::HashMap;

use crate::model::Millis;

/// Use from this long ago counts half as much as use now.
pub const HALF_LIFE_MS: Millis = 24 * 3_600_000;

/// One job's use of the GPUs: `gpus` GPUs from `start` to `end` (`None`: still running).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Use {
    pub owner: u32,
    pub gpus: f64,
    pub start: Millis,
    pub end: Option<Millis>,
}

/// Each owner's decayed GPU-seconds at `now`: every GPU-second counts `2^(-age / half_life)`,
/// integrated exactly over each job's run.
pub fn usage(uses: &[Use], now: Millis, half_life: Millis) -> HashMap<u32, u64> {
    let lambda = std::f64::consts::LN_2 / half_life.max(1) as f64;
    let mut out: HashMap<u32, f64> = HashMap::new();
    for u in uses {
        let end = u.end.unwrap_or(now).min(now);
        if end <= u.start || u.gpus <= 0.0 {
            continue;
        }
        // ∫ e^{-λ(now - t)} dt from start to end, in seconds.
        let age_end = (now - end) as f64;
        let age_start = (now - u.start) as f64;
        let decayed_ms = ((-lambda * age_end).exp() - (-lambda * age_start).exp()) / lambda;
        *out.entry(u.owner).or_default() += u.gpus * decayed_ms / 1000.0;
    }
    out.into_iter()
        .map(|(k, v)| (k, v.round() as u64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Millis = 3_600_000;

    #[test]
    fn recent_use_counts_fully_and_old_use_fades_by_half_lives() {
        // 2 GPUs for an hour that just ended: about 7,200 GPU-seconds (a little less: decay).
        let now = 100 * H;
        let recent = usage(
            &[Use {
                owner: 1,
                gpus: 2.0,
                start: now - H,
                end: Some(now),
            }],
            now,
            HALF_LIFE_MS,
        );
        assert!((7000..=7200).contains(&recent[&1]), "{recent:?}");
        // The same hour a day earlier counts half.
        let old = usage(
            &[Use {
                owner: 1,
                gpus: 2.0,
                start: now - 25 * H,
                end: Some(now - 24 * H),
            }],
            now,
            HALF_LIFE_MS,
        );
        let ratio = old[&1] as f64 / recent[&1] as f64;
        assert!((0.49..0.51).contains(&ratio), "{ratio}");
        // A running job counts up to now; owners are kept apart.
        let both = usage(
            &[
                Use {
                    owner: 1,
                    gpus: 1.0,
                    start: now - H,
                    end: None,
                },
                Use {
                    owner: 2,
                    gpus: 4.0,
                    start: now - H,
                    end: None,
                },
            ],
            now,
            HALF_LIFE_MS,
        );
        assert!(both[&2] > 3 * both[&1]);
    }
}
