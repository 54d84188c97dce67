//! Go-style durations (`90s`, `1h30m`, `500ms`), the format Kubernetes uses
//! for `metav1.Duration` and the one our CRDs and annotations use.

use std::fmt;
use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The string is empty.
    #[error("empty duration (expected e.g. \"90s\", \"1h30m\", \"500ms\")")]
    Empty,
    /// A number is missing or malformed.
    #[error("invalid duration {0:?}: expected a number followed by a unit, e.g. \"90s\", \"1h30m\", \"500ms\"")]
    Number(String),
    /// A number is not followed by a unit.
    #[error("invalid duration {0:?}: missing unit (one of ns, us, ms, s, m, h)")]
    MissingUnit(String),
    /// A unit is not one of ours.
    #[error("invalid duration {input:?}: unknown unit {unit:?} (one of ns, us, ms, s, m, h)")]
    UnknownUnit {
        /// The whole input.
        input: String,
        /// The unit found.
        unit: String,
    },
    /// A sign was given: durations here are never negative.
    #[error("invalid duration {0:?}: must not be negative")]
    Negative(String),
    /// The duration does not fit in a `std::time::Duration`.
    #[error("invalid duration {0:?}: too large")]
    Overflow(String),
}

/// The pattern our CRDs put on duration fields: Go-style terms with the units
/// `ms`, `s`, `m`, `h` (a subset of what [`parse_duration`] accepts).
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Whether `s` matches [`DURATION_PATTERN`] (checked without a regex engine,
/// so that offline validation rejects what the API server would).
pub fn matches_duration_pattern(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            if frac == 0 {
                return false;
            }
            rest = &after_dot[frac..];
        }
        rest = if let Some(r) = rest.strip_prefix("ms") {
            r
        } else if let Some(r) = rest.strip_prefix(['s', 'm', 'h']) {
            r
        } else {
            return false;
        };
    }
    true
}

/// Parses a Go-style duration: one or more `<number><unit>` terms, units
/// `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`, numbers optionally with a
/// fraction (`1.5h`). `"0"` alone is accepted, as Go does. Examples: `"90s"`,
/// `"1h30m"`, `"500ms"`, `"2h45m30.5s"`.
///
/// # Errors
///
/// [`DurationError`] when the string is empty, signed, has a term without a
/// unit or with an unknown unit, or overflows.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.starts_with('-') || s.starts_with('+') {
        return Err(DurationError::Negative(s.to_string()));
    }
    let mut rest = s;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        rest = &rest[number_len..];
        let (whole, frac) = match number.split_once('.') {
            Some((w, f)) => (w, f),
            None => (number, ""),
        };
        if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
            return Err(DurationError::Number(s.to_string()));
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_nanos: u128 = match unit {
            "" => return Err(DurationError::MissingUnit(s.to_string())),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    input: s.to_string(),
                    unit: other.to_string(),
                })
            }
        };
        let overflow = || DurationError::Overflow(s.to_string());
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| overflow())?
        };
        let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(overflow)?;
        // The fraction, digit by digit, truncated below a nanosecond.
        let mut scale = unit_nanos;
        for digit in frac.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * scale;
        }
        total_nanos = total_nanos.checked_add(nanos).ok_or_else(overflow)?;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000)
        .map_err(|_| DurationError::Overflow(s.to_string()))?;
    Ok(Duration::new(secs, (total_nanos % 1_000_000_000) as u32))
}

/// Formats a duration the way Go prints it, without zero terms: `1h30m`,
/// `90s` becomes `1m30s`, `500ms`, `0s`.
pub fn format_duration(d: Duration) -> String {
    struct Go(Duration);
    impl fmt::Display for Go {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let d = self.0;
            if d.is_zero() {
                return f.write_str("0s");
            }
            if d.as_secs() == 0 {
                let n = d.subsec_nanos();
                return if n.is_multiple_of(1_000_000) {
                    write!(f, "{}ms", n / 1_000_000)
                } else if n.is_multiple_of(1_000) {
                    write!(f, "{}us", n / 1_000)
                } else {
                    write!(f, "{n}ns")
                };
            }
            let secs = d.as_secs();
            let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
            if h > 0 {
                write!(f, "{h}h")?;
            }
            if m > 0 {
                write!(f, "{m}m")?;
            }
            let nanos = d.subsec_nanos();
            if nanos > 0 {
                let frac = format!("{nanos:09}");
                write!(f, "{s}.{}s", frac.trim_end_matches('0'))
            } else if s > 0 {
                write!(f, "{s}s")
            } else {
                Ok(())
            }
        }
    }
    Go(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Duration {
        parse_duration(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_single_terms_in_every_unit() {
        assert_eq!(ok("90s"), Duration::from_secs(90));
        assert_eq!(ok("1m"), Duration::from_secs(60));
        assert_eq!(ok("10h"), Duration::from_secs(36_000));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("250us"), Duration::from_micros(250));
        assert_eq!(ok("250µs"), Duration::from_micros(250));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
    }

    #[test]
    fn parses_compound_and_fractional_durations() {
        assert_eq!(ok("1h30m"), Duration::from_secs(5_400));
        assert_eq!(ok("2h45m30s"), Duration::from_secs(9_930));
        assert_eq!(ok("1.5h"), Duration::from_secs(5_400));
        assert_eq!(ok("0.5s"), Duration::from_millis(500));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1m0.25s"), Duration::from_millis(60_250));
    }

    #[test]
    fn accepts_a_bare_zero_like_go() {
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
    }

    #[test]
    fn rejects_missing_or_unknown_units_signs_and_garbage() {
        assert_eq!(parse_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_duration("90"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_duration("5d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_duration("-5s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(parse_duration("s"), Err(DurationError::Number(_))));
        assert!(matches!(
            parse_duration("1.2.3s"),
            Err(DurationError::Number(_))
        ));
        assert!(parse_duration("1h 30m").is_err());
        assert!(parse_duration("Never").is_err());
    }

    #[test]
    fn crd_pattern_accepts_plain_terms_and_rejects_what_the_schema_rejects() {
        for good in ["90s", "1h30m", "500ms", "1.5h", "10h", "1m0s"] {
            assert!(matches_duration_pattern(good), "{good}");
        }
        for bad in ["", "0", ".5s", "5.s", "250us", "7ns", "1h ", "Never", "1d"] {
            assert!(!matches_duration_pattern(bad), "{bad}");
        }
    }

    #[test]
    fn rejects_durations_that_overflow() {
        assert!(matches!(
            parse_duration("99999999999999999999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn formats_like_go_and_round_trips() {
        for (d, s) in [
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(5_400), "1h30m"),
            (Duration::from_secs(36_000), "10h"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(ok(s), d);
        }
    }
}
