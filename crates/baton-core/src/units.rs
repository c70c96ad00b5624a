//! Sizes (`24GiB`, `512M`) and durations (`90m`, `1h30m`, `02:00:00`) as people type them, and
//! the short forms baton prints (`2h13m`, `7.5 GiB`).

use crate::model::Millis;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("invalid size {0:?}: expected a number and a unit, e.g. 24GiB, 512MiB, 8G")]
    Size(String),
    #[error("invalid duration {0:?}: expected e.g. 90s, 30m, 2h, 1h30m, 1d or HH:MM:SS")]
    Duration(String),
}

const KIB: u64 = 1024;

/// Parses a memory size. Binary and decimal-looking suffixes both mean powers of 1024, as GPU
/// memory is always quoted that way (`8G` = `8GiB`). A bare number is bytes.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError::Size(text.to_string());
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| err())?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => KIB.pow(2),
        "g" | "gb" | "gib" => KIB.pow(3),
        "t" | "tb" | "tib" => KIB.pow(4),
        _ => return Err(err()),
    };
    let bytes = number * factor as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(err());
    }
    Ok(bytes.round() as u64)
}

/// `7.5 GiB`, `512 MiB`, `80 GiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    // Rounded to tenths first, so that 49.98 shows as "50", not "50.0".
    let tenths = (value * 10.0).round();
    if unit == 0 || tenths % 10.0 == 0.0 || value >= 100.0 {
        format!("{:.0} {}", value, UNITS[unit])
    } else {
        format!("{:.1} {}", tenths / 10.0, UNITS[unit])
    }
}

/// Parses a duration into milliseconds: unit-suffixed parts (`1h30m`, `90s`, `2d`, `500ms`) or
/// Slurm's clock form (`MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`). A bare number is rejected because
/// tools disagree on its unit (Slurm: minutes, most others: seconds).
pub fn parse_duration(text: &str) -> Result<Millis, UnitError> {
    let err = || UnitError::Duration(text.to_string());
    let t = text.trim();
    if t.is_empty() {
        return Err(err());
    }
    let total = if t.contains(':') {
        parse_clock(t).ok_or_else(err)?
    } else {
        parse_suffixed(t).ok_or_else(err)?
    };
    if total <= 0 { Err(err()) } else { Ok(total) }
}

fn parse_clock(t: &str) -> Option<Millis> {
    let (days, rest) = match t.split_once('-') {
        Some((d, rest)) => (d.parse::<i64>().ok()?, rest),
        None => (0, t),
    };
    let parts: Vec<i64> = rest
        .split(':')
        .map(|p| p.parse::<i64>().ok().filter(|v| *v >= 0))
        .collect::<Option<_>>()?;
    // Checked: `99999999999999-00:00:00` is refused as a duration, not an overflow.
    let seconds = match parts.as_slice() {
        [m, s] => m.checked_mul(60)?.checked_add(*s)?,
        [h, m, s] => h
            .checked_mul(3600)?
            .checked_add(m.checked_mul(60)?)?
            .checked_add(*s)?,
        _ => return None,
    };
    days.checked_mul(86_400)?
        .checked_add(seconds)?
        .checked_mul(1000)
}

fn parse_suffixed(t: &str) -> Option<Millis> {
    let mut total: f64 = 0.0;
    let mut rest = t;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if num_end == 0 {
            return None;
        }
        let value: f64 = rest[..num_end].parse().ok()?;
        let after = &rest[num_end..];
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let unit = after[..unit_end].trim();
        let ms_per = match unit {
            "ms" => 1.0,
            "s" | "sec" | "secs" => 1000.0,
            "m" | "min" | "mins" => 60_000.0,
            "h" | "hr" | "hrs" => 3_600_000.0,
            "d" | "day" | "days" => 86_400_000.0,
            _ => return None,
        };
        total += value * ms_per;
        rest = &after[unit_end..];
    }
    if total.is_finite() && total < i64::MAX as f64 {
        Some(total.round() as Millis)
    } else {
        None
    }
}

/// The short human form: `850ms`, `42s`, `7m05s`, `2h13m`, `3d04h`.
pub fn format_duration(ms: Millis) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// The exact, shortest unit-suffixed form of a duration (`15m`, `90s`, `2h`, `1500ms`): it parses
/// back to the same value, unlike the rounded [`format_duration`].
pub fn duration_text(ms: Millis) -> String {
    const SECOND: Millis = 1000;
    const MINUTE: Millis = 60 * SECOND;
    const HOUR: Millis = 60 * MINUTE;
    if ms != 0 && ms % HOUR == 0 {
        format!("{}h", ms / HOUR)
    } else if ms != 0 && ms % MINUTE == 0 {
        format!("{}m", ms / MINUTE)
    } else if ms != 0 && ms % SECOND == 0 {
        format!("{}s", ms / SECOND)
    } else {
        format!("{ms}ms")
    }
}

/// Serde for a duration written with its unit (`"90s"`, `"15m"`, `"2h"`) in settings files. A
/// bare number is refused: tools disagree on what it means.
pub mod serde_duration {
    use std::fmt;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    use super::{duration_text, parse_duration};
    use crate::model::Millis;

    pub fn serialize<S: Serializer>(ms: &Millis, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&duration_text(*ms))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Millis, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Millis;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration with a unit, e.g. \"90s\", \"15m\" or \"2h\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Millis, E> {
                parse_duration(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// The exact form of a size (`1GiB`, `256MiB`, or bytes), as settings files write it.
pub fn size_text(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    UNITS
        .iter()
        .find(|(unit, _)| bytes != 0 && bytes.is_multiple_of(*unit))
        .map(|(unit, name)| format!("{}{name}", bytes / unit))
        .unwrap_or_else(|| bytes.to_string())
}

/// Serde for a size in settings files: `"8GiB"`, `"512MiB"`, or a number of bytes.
pub mod serde_size {
    use std::fmt;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    use super::{parse_size, size_text};

    pub fn serialize<S: Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&size_text(*bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = u64;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"1GiB\" or \"512MiB\", or a number of bytes")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
                parse_size(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
                Ok(v)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
                u64::try_from(v).map_err(|_| E::custom(format!("a size cannot be negative: {v}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// [`serde_size`] for a setting that may be absent.
pub mod serde_opt_size {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => super::serde_size::serialize(b, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "super::serde_size")] u64);
        Option::<Wrapped>::deserialize(d).map(|w| w.map(|w| w.0))
    }
}

/// [`serde_duration`] for a setting that may be absent.
pub mod serde_opt_duration {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::model::Millis;

    pub fn serialize<S: Serializer>(ms: &Option<Millis>, s: S) -> Result<S::Ok, S::Error> {
        match ms {
            Some(ms) => super::serde_duration::serialize(ms, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Millis>, D::Error> {
        #[derive(Deserialize)]
        struct Wrapped(#[serde(with = "super::serde_duration")] Millis);
        Option::<Wrapped>::deserialize(d).map(|w| w.map(|w| w.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("24GiB"), Ok(24 << 30));
        assert_eq!(parse_size("8G"), Ok(8 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0G").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert_eq!(format_size(80 << 30), "80 GiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size((50 << 20) - 2048), "50 MiB");
        assert_eq!(format_size((7 << 30) + (1 << 29) + (1 << 20)), "7.5 GiB");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90m"), Ok(90 * 60_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("1.5s"), Ok(1500));
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("02:00:00"), Ok(7_200_000));
        assert_eq!(parse_duration("1-00:00:10"), Ok(86_410_000));
        assert_eq!(parse_duration("05:30"), Ok(330_000));
        assert!(parse_duration("99999999999999-00:00:00").is_err());
        assert!(parse_duration("9223372036854775807:00").is_err());
        for bad in ["", "10", "5 fortnights", "h", "-3m", "0s", "1:2:3:4"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(format_duration(850), "850ms");
        assert_eq!(format_duration(42_000), "42s");
        assert_eq!(format_duration(425_000), "7m05s");
        assert_eq!(format_duration(7_980_000), "2h13m");
        assert_eq!(format_duration(273_600_000), "3d04h");
    }
}
