//! Signal names as people type them (`TERM`, `SIGUSR1`, `sigint`, `10`, `RTMIN+2`) and back:
//! what `baton signal` and the MCP server's `signal_job` send. Linux numbering (baton runs on
//! Linux: it needs pidfds and /proc). Every signal from 1 to 64 may be sent, `KILL` and `STOP`
//! included, as `scancel --signal` allows: it is the job's owner's own job. 0 (which only
//! checks that a process exists) is refused, since it sends nothing, and so are 32 and 33,
//! which glibc keeps for its threads: what [`parse`] returns is 1-31 or 34-64.

/// The standard signals by number (Linux x86-64 and arm64 agree on these).
const NAMES: [(&str, i32); 31] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// Other names of the same signals.
const ALIASES: [(&str, i32); 3] = [("IOT", 6), ("POLL", 29), ("CLD", 17)];

/// The first and last real-time signals as glibc exposes them to programs (`SIGRTMIN` is 34:
/// glibc keeps 32 and 33 for itself).
const RTMIN: i32 = 34;
const RTMAX: i32 = 64;

/// Why a signal name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignalError {
    #[error("no signal given")]
    Empty,
    #[error(
        "signal 0 sends nothing (it only checks that a process exists); name a signal from 1 to 64"
    )]
    Zero,
    #[error("signal {0} does not exist: Linux signals go from 1 to 64")]
    OutOfRange(i64),
    #[error(
        "signal {0} is kept by the C library for its own threads; use RTMIN (34) to RTMAX (64)"
    )]
    Reserved(i64),
    #[error(
        "unknown signal {0:?}: use a name (TERM, INT, HUP, USR1, USR2, KILL, STOP, CONT, ...), \
         with or without SIG, or a number from 1 to 64"
    )]
    Unknown(String),
}

/// The number of the signal `text` names: `TERM`, `SIGTERM`, `sigterm`, `15`, `RTMIN+1`.
pub fn parse(text: &str) -> Result<i32, SignalError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SignalError::Empty);
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<i64>() {
            Ok(0) => Err(SignalError::Zero),
            Ok(n @ (32 | 33)) => Err(SignalError::Reserved(n)),
            Ok(n) if (1..=i64::from(RTMAX)).contains(&n) => Ok(n as i32),
            Ok(n) => Err(SignalError::OutOfRange(n)),
            Err(_) => Err(SignalError::OutOfRange(i64::MAX)),
        };
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(&(_, n)) = NAMES.iter().chain(&ALIASES).find(|(n, _)| *n == name) {
        return Ok(n);
    }
    let unknown = || SignalError::Unknown(text.to_string());
    let offset = |rest: &str, sign: &str| -> Result<i32, SignalError> {
        match rest.strip_prefix(sign) {
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                n.parse::<i32>().map_err(|_| unknown())
            }
            _ => Err(unknown()),
        }
    };
    let n = match name {
        "RTMIN" => RTMIN,
        "RTMAX" => RTMAX,
        _ if name.starts_with("RTMIN") => RTMIN.saturating_add(offset(&name[5..], "+")?),
        _ if name.starts_with("RTMAX") => RTMAX.saturating_sub(offset(&name[5..], "-")?),
        _ => return Err(unknown()),
    };
    if (RTMIN..=RTMAX).contains(&n) {
        Ok(n)
    } else {
        Err(unknown())
    }
}

/// The name of signal `n` (`SIGTERM`, `SIGRTMIN+2`; `signal 33` for one glibc keeps).
pub fn name(n: i32) -> String {
    if let Some((name, _)) = NAMES.iter().find(|(_, k)| *k == n) {
        return format!("SIG{name}");
    }
    match n {
        RTMIN => "SIGRTMIN".into(),
        RTMAX => "SIGRTMAX".into(),
        n if n > RTMIN && n < RTMAX => format!("SIGRTMIN+{}", n - RTMIN),
        n => format!("signal {n}"),
    }
}

/// A job's checkpoint signal (`--signal SIG[@SECS]`, as Slurm's `--signal`): `signal` comes
/// `lead_ms` before the job's time limit, so that it can save its state and exit before it is
/// stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointSignal {
    pub signal: i32,
    pub lead_ms: crate::Millis,
}

/// The lead when `--signal` gives none: a minute, Slurm's default.
pub const DEFAULT_LEAD_MS: crate::Millis = 60_000;

/// `USR1`, `SIGUSR2@90`, `10@30`: a signal and, after `@`, whole seconds before the time limit.
pub fn parse_checkpoint(text: &str) -> Result<CheckpointSignal, String> {
    let (sig, lead) = match text.trim().split_once('@') {
        Some((sig, secs)) => {
            let secs: u32 = secs.trim().parse().map_err(|_| {
                format!("{text:?}: after @ comes whole seconds before the time limit (USR1@60)")
            })?;
            if secs == 0 {
                return Err(format!(
                    "{text:?}: the signal must come at least 1 s before the time limit"
                ));
            }
            (sig, crate::Millis::from(secs) * 1000)
        }
        None => (text, DEFAULT_LEAD_MS),
    };
    let signal = parse(sig).map_err(|e| format!("{text:?}: {e}"))?;
    if signal == 9 || signal == 19 {
        return Err(format!(
            "{text:?}: {} cannot be caught, so no job can checkpoint on it",
            name(signal)
        ));
    }
    Ok(CheckpointSignal {
        signal,
        lead_ms: lead,
    })
}

impl std::fmt::Display for CheckpointSignal {
    /// `SIGUSR1@60`, as `--signal` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", name(self.signal), self.lead_ms / 1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_signal_reads_as_slurm_writes_it() {
        let c = parse_checkpoint("USR1").unwrap();
        assert_eq!((c.signal, c.lead_ms), (10, 60_000));
        assert_eq!(c.to_string(), "SIGUSR1@60");
        let c = parse_checkpoint("SIGUSR2@90").unwrap();
        assert_eq!((c.signal, c.lead_ms), (12, 90_000));
        assert_eq!(parse_checkpoint("10@5").unwrap().lead_ms, 5_000);
        for bad in [
            "USR1@", "USR1@-3", "USR1@0", "USR1@1.5", "NOPE@3", "KILL", "@30",
        ] {
            assert!(parse_checkpoint(bad).is_err(), "{bad}");
        }
        assert!(
            parse_checkpoint("KILL@5")
                .unwrap_err()
                .contains("cannot be caught")
        );
    }

    #[test]
    fn names_numbers_and_prefixes_all_read() {
        for (text, n) in [
            ("TERM", 15),
            ("SIGTERM", 15),
            ("sigterm", 15),
            (" usr1 ", 10),
            ("SIGUSR1", 10),
            ("10", 10),
            ("KILL", 9),
            ("STOP", 19),
            ("cont", 18),
            ("IOT", 6),
            ("RTMIN", 34),
            ("SIGRTMIN+2", 36),
            ("RTMAX-1", 63),
            ("64", 64),
        ] {
            assert_eq!(parse(text), Ok(n), "{text}");
        }
    }

    #[test]
    fn what_names_no_signal_is_refused_with_a_reason() {
        assert_eq!(parse(""), Err(SignalError::Empty));
        assert_eq!(parse("0"), Err(SignalError::Zero));
        assert_eq!(parse("65"), Err(SignalError::OutOfRange(65)));
        assert_eq!(parse("33"), Err(SignalError::Reserved(33)));
        assert_eq!(
            parse("99999999999999999999999"),
            Err(SignalError::OutOfRange(i64::MAX))
        );
        for bad in [
            "TERMINATE",
            "SIG",
            "-15",
            "RTMIN+40",
            "RTMIN+",
            "RTMAX+1",
            "15x",
            "USR 1",
        ] {
            assert!(matches!(parse(bad), Err(SignalError::Unknown(_))), "{bad}");
        }
        assert!(parse("BOGUS").unwrap_err().to_string().contains("1 to 64"));
    }

    #[test]
    fn every_signal_has_a_name_that_reads_back() {
        for n in (1..=31).chain(34..=64) {
            let name = name(n);
            assert_eq!(parse(&name), Ok(n), "{name}");
        }
        assert_eq!(name(33), "signal 33");
        assert_eq!(name(15), "SIGTERM");
    }
}
