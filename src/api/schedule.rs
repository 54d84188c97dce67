//! Standard 5-field cron expressions (`0 8 * * 1-5`) and IANA time zones, as
//! written in NodePool pre-warm windows and disruption budgets, translated
//! for the `cron` crate (which wants a seconds field and numbers Sunday 1..7).

use chrono_tz::Tz;
use std::collections::BTreeSet;
use std::str::FromStr;

/// The pattern our CRDs put on cron fields: a macro (`@daily`) or five
/// whitespace-separated fields. [`parse_cron`] checks the rest.
pub const CRON_PATTERN: &str = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|\s*\S+\s+\S+\s+\S+\s+\S+\s+\S+\s*)$";

/// Why a cron expression or time zone was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Not five fields.
    #[error("invalid cron expression {expr:?}: expected 5 fields (minute hour day-of-month month day-of-week) or a macro such as @daily, found {found} field(s)")]
    FieldCount {
        /// The expression.
        expr: String,
        /// Fields found.
        found: usize,
    },
    /// An `@` macro we do not know.
    #[error("invalid cron expression {0:?}: unknown macro (expected @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly)")]
    UnknownMacro(String),
    /// Both day-of-month and day-of-week are restricted; classic cron ORs
    /// them, the `cron` crate ANDs them, so we refuse the ambiguity.
    #[error("invalid cron expression {0:?}: restrict day-of-month or day-of-week, not both")]
    BothDayFields(String),
    /// The day-of-week field is malformed.
    #[error("invalid cron expression {expr:?}: bad day-of-week {field:?} (0-7 or sun-sat, 0 and 7 are Sunday)")]
    DayOfWeek {
        /// The expression.
        expr: String,
        /// The day-of-week field.
        field: String,
    },
    /// The `cron` crate rejected the translated expression.
    #[error("invalid cron expression {expr:?}: {message}")]
    Invalid {
        /// The expression.
        expr: String,
        /// What the parser said.
        message: String,
    },
    /// A well-formed expression that names no real day, e.g. February 31.
    #[error(
        "invalid cron expression {0:?}: it never fires (no month has that day, e.g. February 31)"
    )]
    NeverFires(String),
    /// Not an IANA time zone name.
    #[error(
        "unknown time zone {0:?} (expected an IANA name such as \"UTC\" or \"Europe/Berlin\")"
    )]
    TimeZone(String),
}

/// Parses a standard 5-field cron expression (`minute hour day-of-month month
/// day-of-week`, day-of-week 0-7 with 0 and 7 Sunday, names allowed) or one of
/// the macros `@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`,
/// `@hourly` into a [`cron::Schedule`] that fires at second 0.
///
/// # Errors
///
/// [`ScheduleError`] for a wrong field count, an unknown macro, a bad field,
/// both day fields restricted (whose meaning differs between cron dialects),
/// or a schedule that never fires ([`ScheduleError::NeverFires`]).
pub fn parse_cron(expr: &str) -> Result<cron::Schedule, ScheduleError> {
    let schedule = parse_cron_fields(expr)?;
    if !fires_at_all(&schedule) {
        return Err(ScheduleError::NeverFires(expr.to_string()));
    }
    Ok(schedule)
}

/// Whether `schedule` ever fires, judged on a bounded horizon without a
/// clock: a 5-field expression repeats with the Gregorian calendar, and with
/// at most one day field restricted every day it allows (February 29
/// included) comes round within the leap year 2000, so an occurrence in
/// the eight years from 2000-01-01 proves it fires and none proves it never
/// does.
fn fires_at_all(schedule: &cron::Schedule) -> bool {
    use chrono::TimeZone;
    let from = chrono::Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
    let horizon = chrono::Utc.with_ymd_and_hms(2008, 1, 1, 0, 0, 0).unwrap();
    schedule
        .after(&(from - chrono::TimeDelta::seconds(1)))
        .next()
        .is_some_and(|t| t < horizon)
}

fn parse_cron_fields(expr: &str) -> Result<cron::Schedule, ScheduleError> {
    let trimmed = expr.trim();
    let invalid = |e: cron::error::Error| ScheduleError::Invalid {
        expr: expr.to_string(),
        message: e.to_string(),
    };
    if trimmed.starts_with('@') {
        let canonical = match trimmed {
            "@yearly" | "@annually" => "@yearly",
            "@monthly" => "@monthly",
            "@weekly" => "@weekly",
            "@daily" | "@midnight" => "@daily",
            "@hourly" => "@hourly",
            _ => return Err(ScheduleError::UnknownMacro(expr.to_string())),
        };
        return cron::Schedule::from_str(canonical).map_err(invalid);
    }
    let fields: Vec<&str> = trimmed.split_whitespace().collect();
    let [minute, hour, dom, month, dow] = fields[..] else {
        return Err(ScheduleError::FieldCount {
            expr: expr.to_string(),
            found: fields.len(),
        });
    };
    let any = |f: &str| f == "*" || f == "?";
    if !any(dom) && !any(dow) {
        return Err(ScheduleError::BothDayFields(expr.to_string()));
    }
    let dow = translate_day_of_week(dow).ok_or_else(|| ScheduleError::DayOfWeek {
        expr: expr.to_string(),
        field: dow.to_string(),
    })?;
    cron::Schedule::from_str(&format!("0 {minute} {hour} {dom} {month} {dow}")).map_err(invalid)
}

/// Parses an IANA time zone name (`UTC`, `Europe/Berlin`).
///
/// # Errors
///
/// [`ScheduleError::TimeZone`] for a name chrono-tz does not know.
pub fn parse_time_zone(name: &str) -> Result<Tz, ScheduleError> {
    Tz::from_str(name).map_err(|_| ScheduleError::TimeZone(name.to_string()))
}

/// Rewrites a standard day-of-week field (0-7, Sunday 0 or 7) into the
/// `cron` crate's numbering (Sunday 1 .. Saturday 7). Names are the same in
/// both and pass through; numeric items are expanded into explicit lists.
fn translate_day_of_week(field: &str) -> Option<String> {
    if field == "*" || field == "?" {
        return Some(field.to_string());
    }
    let mut out = Vec::new();
    for item in field.split(',') {
        if item.chars().any(|c| c.is_ascii_alphabetic()) {
            out.push(item.to_string());
            continue;
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (item, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            _ if range == "*" => (0, 6),
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None if item.contains('/') => (range.parse::<u32>().ok()?, 6),
            None => {
                let d = range.parse::<u32>().ok()?;
                (d, d)
            }
        };
        if lo > hi || hi > 7 {
            return None;
        }
        let days: BTreeSet<u32> = (lo..=hi).step_by(step as usize).map(|d| d % 7).collect();
        out.extend(days.into_iter().map(|d| (d + 1).to_string()));
    }
    Some(out.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Timelike, Utc, Weekday};

    fn next_days(expr: &str, n: usize) -> Vec<Weekday> {
        let s = parse_cron(expr).unwrap();
        let from = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap(); // a Sunday
        s.after(&from).take(n).map(|t| t.weekday()).collect()
    }

    #[test]
    fn weekday_range_means_monday_to_friday_as_in_standard_cron() {
        use Weekday::*;
        assert_eq!(next_days("0 8 * * 1-5", 6), [Mon, Tue, Wed, Thu, Fri, Mon]);
        assert_eq!(next_days("0 8 * * MON-FRI", 5), [Mon, Tue, Wed, Thu, Fri]);
    }

    #[test]
    fn sunday_is_both_zero_and_seven() {
        use Weekday::*;
        assert_eq!(next_days("0 8 * * 0", 2), [Sun, Sun]);
        assert_eq!(next_days("30 1 * * 7", 1), [Sun]);
        assert_eq!(next_days("0 8 * * 5-7", 3), [Sun, Fri, Sat]);
        assert_eq!(next_days("0 8 * * */2", 4), [Sun, Tue, Thu, Sat]);
    }

    #[test]
    fn fires_at_the_given_minute_and_second_zero() {
        let s = parse_cron("15 8 * * *").unwrap();
        let t = s
            .after(&Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap())
            .next()
            .unwrap();
        assert_eq!((t.day(), t.hour(), t.minute(), t.second()), (2, 8, 15, 0));
    }

    #[test]
    fn accepts_macros_including_the_robfig_aliases() {
        for m in [
            "@daily",
            "@midnight",
            "@hourly",
            "@weekly",
            "@monthly",
            "@yearly",
            "@annually",
        ] {
            assert!(parse_cron(m).is_ok(), "{m}");
        }
        assert!(matches!(
            parse_cron("@often"),
            Err(ScheduleError::UnknownMacro(_))
        ));
    }

    #[test]
    fn rejects_wrong_field_counts_and_bad_fields() {
        assert!(matches!(
            parse_cron("0 0 8 * * 1-5"),
            Err(ScheduleError::FieldCount { found: 6, .. })
        ));
        assert!(matches!(
            parse_cron("0 8 * *"),
            Err(ScheduleError::FieldCount { found: 4, .. })
        ));
        assert!(matches!(
            parse_cron("61 8 * * *"),
            Err(ScheduleError::Invalid { .. })
        ));
        assert!(matches!(
            parse_cron("0 25 * * *"),
            Err(ScheduleError::Invalid { .. })
        ));
        assert!(matches!(
            parse_cron("0 8 * * 8"),
            Err(ScheduleError::DayOfWeek { .. })
        ));
        assert!(matches!(
            parse_cron("0 8 * * 5-1"),
            Err(ScheduleError::DayOfWeek { .. })
        ));
        assert!(parse_cron("not a cron").is_err());
    }

    #[test]
    fn refuses_to_guess_when_both_day_fields_are_restricted() {
        assert!(matches!(
            parse_cron("0 8 1 * 1"),
            Err(ScheduleError::BothDayFields(_))
        ));
    }

    #[test]
    fn a_schedule_that_never_fires_is_refused() {
        for never in ["0 8 31 2 *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"] {
            assert!(
                matches!(parse_cron(never), Err(ScheduleError::NeverFires(_))),
                "{never}: {:?}",
                parse_cron(never).map(|s| s.to_string())
            );
        }
        assert!(parse_cron("0 8 31 2 *")
            .unwrap_err()
            .to_string()
            .contains("never fires"));
        // Rare is not never: February 29 and the 31st of some months fire.
        for rare in ["0 0 29 2 *", "0 0 31 1-3 *", "0 0 30 * *"] {
            assert!(parse_cron(rare).is_ok(), "{rare}");
        }
    }

    #[test]
    fn time_zones_are_iana_names() {
        assert_eq!(
            parse_time_zone("Europe/Berlin").unwrap(),
            chrono_tz::Europe::Berlin
        );
        assert_eq!(parse_time_zone("UTC").unwrap(), chrono_tz::UTC);
        assert!(matches!(
            parse_time_zone("Mars/Olympus"),
            Err(ScheduleError::TimeZone(_))
        ));
        assert!(parse_time_zone("CEST").is_err());
    }
}
