//! Parsing of one SQS message body (an EventBridge event, as EventBridge
//! delivers it to an SQS target) into [`InstanceNotice`]s. Pure: text in,
//! notices out; no clock, no I/O.
//!
//! The five event types and the fields read:
//! - `EC2 Spot Instance Interruption Warning` (`aws.ec2`): `detail.instance-id`;
//!   the deadline is the event `time` plus two minutes (the warning's lead).
//! - `EC2 Instance Rebalance Recommendation` (`aws.ec2`): `detail.instance-id`.
//! - `EC2 Instance State-change Notification` (`aws.ec2`):
//!   `detail.instance-id`, `detail.state`.
//! - `AWS Health Event` (`aws.health`) with `detail.service` `EC2` and
//!   `detail.eventTypeCategory` `scheduledChange`: one notice per
//!   `detail.affectedEntities[].entityValue` that is an instance ID, with
//!   `detail.startTime` (RFC 2822 as AWS Health writes it,
//!   `Sat, 05 Jun 2016 15:10:09 GMT`, or RFC 3339).
//! - `Capacity Block Expiration Warning` (`aws.ec2`; the EC2 user guide also
//!   spells it `Capacity Block Reservation Expiration Warning`), sent 40
//!   minutes before a Capacity Block ends: one notice about the whole
//!   reservation, `detail.capacity-reservation-id`, ending at
//!   `detail.end-date` (RFC 3339; absent, the event `time` plus 40 minutes).
//!   The user guide's example writes the envelope's keys as
//!   `customer_event_id` and `detail_type`; both spellings are read.

use crate::cloud::{InstanceNotice, InstanceState, NoticeKind};
use crate::core::Time;
use serde::Deserialize;

/// How long EC2 gives a spot instance between the interruption warning and
/// reclaiming it.
pub const SPOT_INTERRUPTION_LEAD: chrono::TimeDelta = chrono::TimeDelta::minutes(2);

/// `detail-type` of the spot interruption warning.
pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
/// `detail-type` of the rebalance recommendation.
pub const REBALANCE: &str = "EC2 Instance Rebalance Recommendation";
/// `detail-type` of the instance state-change notification.
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
/// `detail-type` of AWS Health events.
pub const HEALTH: &str = "AWS Health Event";
/// `detail-type` of the warning EC2 sends 40 minutes before a Capacity
/// Block ends (the EventBridge event reference's name).
pub const CAPACITY_BLOCK_EXPIRING: &str = "Capacity Block Expiration Warning";
/// The same warning as the EC2 user guide's example names it.
pub const CAPACITY_BLOCK_RESERVATION_EXPIRING: &str =
    "Capacity Block Reservation Expiration Warning";

/// How long before a Capacity Block's end EC2 sends its expiry warning:
/// the end assumed when the warning does not say.
pub const CAPACITY_BLOCK_WARNING_LEAD: chrono::TimeDelta = chrono::TimeDelta::minutes(40);

/// What one message turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// An event we act on: its EventBridge ID and the notices it carries
    /// (several for a Health event that affects several instances; none for
    /// a Health event that names no instance).
    Notices {
        /// The EventBridge event ID (`id`), the key for de-duplication.
        event_id: String,
        /// One notice per affected instance, each with `id == event_id`.
        notices: Vec<InstanceNotice>,
    },
    /// A well-formed event of a kind we do not act on (another detail-type,
    /// a Health event for another service or category).
    Unknown {
        /// The event's ID.
        event_id: String,
        /// `source` / `detail-type`, for the log line.
        what: String,
    },
}

/// Why a message could not be read as an event we know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or not an EventBridge event envelope.
    #[error("not an EventBridge event: {0}")]
    NotAnEvent(String),
    /// A known event type missing a field it must have, or holding a value
    /// that does not parse.
    #[error("{detail_type} event {event_id}: {message}")]
    BadDetail {
        /// The event's detail-type.
        detail_type: String,
        /// The event's ID.
        event_id: String,
        /// What is wrong.
        message: String,
    },
}

/// The EventBridge envelope, with `detail` kept as JSON until the
/// detail-type says what it holds.
#[derive(Deserialize)]
struct Envelope {
    #[serde(alias = "customer_event_id")]
    id: String,
    #[serde(rename = "detail-type", alias = "detail_type")]
    detail_type: String,
    source: String,
    time: Time,
    #[serde(default)]
    detail: serde_json::Value,
}

#[derive(Deserialize)]
struct InstanceDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
}

#[derive(Deserialize)]
struct StateDetail {
    #[serde(rename = "instance-id")]
    instance_id: String,
    state: String,
}

#[derive(Deserialize)]
struct CapacityBlockDetail {
    #[serde(rename = "capacity-reservation-id")]
    capacity_reservation_id: String,
    #[serde(default, rename = "end-date")]
    end_date: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthDetail {
    service: String,
    event_type_category: String,
    #[serde(default)]
    start_time: Option<String>,
    #[serde(default)]
    affected_entities: Vec<AffectedEntity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AffectedEntity {
    entity_value: String,
}

/// Parses one SQS message body.
///
/// # Errors
/// [`ParseError::NotAnEvent`] when the body is not an EventBridge event
/// (not JSON, no `id`/`detail-type`/`source`/`time`);
/// [`ParseError::BadDetail`] when a known event type lacks a field it must
/// have (`instance-id`, `state`, `capacity-reservation-id`) or holds an
/// instance ID that is not `i-...`, an unknown state, a bad time or a reservation ID that is not `cr-...`.
pub fn parse_message(body: &str) -> Result<Parsed, ParseError> {
    let event: Envelope =
        serde_json::from_str(body).map_err(|e| ParseError::NotAnEvent(e.to_string()))?;
    let bad = |message: String| ParseError::BadDetail {
        detail_type: event.detail_type.clone(),
        event_id: event.id.clone(),
        message,
    };
    let detail = |e: serde_json::Error| bad(format!("detail: {e}"));
    // An instance-scoped event names an EC2 instance (`i-...`); an empty or
    // foreign ID would match no node and be acked as if handled.
    let instance = |id: String| {
        if id.starts_with("i-") {
            Ok(id)
        } else {
            Err(bad(format!(
                "instance-id {id:?} is not an EC2 instance ID (i-...)"
            )))
        }
    };
    let notice = |instance_id: String, kind: NoticeKind| InstanceNotice {
        instance_id,
        kind,
        time: event.time,
        id: event.id.clone(),
    };
    let notices = match (event.source.as_str(), event.detail_type.as_str()) {
        ("aws.ec2", SPOT_INTERRUPTION) => {
            let d: InstanceDetail = serde_json::from_value(event.detail.clone()).map_err(detail)?;
            let deadline = event
                .time
                .checked_add_signed(SPOT_INTERRUPTION_LEAD)
                .ok_or_else(|| bad(format!("time {} is past the end of time", event.time)))?;
            vec![notice(
                instance(d.instance_id)?,
                NoticeKind::SpotInterruption { deadline },
            )]
        }
        ("aws.ec2", REBALANCE) => {
            let d: InstanceDetail = serde_json::from_value(event.detail.clone()).map_err(detail)?;
            vec![notice(instance(d.instance_id)?, NoticeKind::Rebalance)]
        }
        ("aws.ec2", STATE_CHANGE) => {
            let d: StateDetail = serde_json::from_value(event.detail.clone()).map_err(detail)?;
            let state = instance_state(&d.state)
                .ok_or_else(|| bad(format!("unknown instance state {:?}", d.state)))?;
            vec![notice(
                instance(d.instance_id)?,
                NoticeKind::StateChange { state },
            )]
        }
        ("aws.ec2", CAPACITY_BLOCK_EXPIRING | CAPACITY_BLOCK_RESERVATION_EXPIRING) => {
            let d: CapacityBlockDetail =
                serde_json::from_value(event.detail.clone()).map_err(detail)?;
            if !d.capacity_reservation_id.starts_with("cr-") {
                return Err(bad(format!(
                    "capacity-reservation-id {:?} is not a capacity reservation ID (cr-...)",
                    d.capacity_reservation_id
                )));
            }
            let end = match d.end_date.as_deref() {
                Some(s) => health_time(s).ok_or_else(|| bad(format!("bad end-date {s:?}")))?,
                None => event
                    .time
                    .checked_add_signed(CAPACITY_BLOCK_WARNING_LEAD)
                    .ok_or_else(|| bad(format!("time {} is past the end of time", event.time)))?,
            };
            vec![notice(
                d.capacity_reservation_id,
                NoticeKind::ReservationEnding { end },
            )]
        }
        ("aws.health", HEALTH) => {
            let d: HealthDetail = serde_json::from_value(event.detail.clone()).map_err(detail)?;
            if d.service != "EC2" || d.event_type_category != "scheduledChange" {
                return Ok(Parsed::Unknown {
                    what: format!(
                        "{} {} ({} {})",
                        event.source, event.detail_type, d.service, d.event_type_category
                    ),
                    event_id: event.id,
                });
            }
            let start = d
                .start_time
                .as_deref()
                .map(|s| health_time(s).ok_or_else(|| bad(format!("bad startTime {s:?}"))))
                .transpose()?;
            d.affected_entities
                .into_iter()
                .filter(|e| e.entity_value.starts_with("i-"))
                .map(|e| notice(e.entity_value, NoticeKind::ScheduledChange { start }))
                .collect()
        }
        _ => {
            return Ok(Parsed::Unknown {
                what: format!("{} {}", event.source, event.detail_type),
                event_id: event.id,
            })
        }
    };
    Ok(Parsed::Notices {
        event_id: event.id,
        notices,
    })
}

/// EC2's state names as [`InstanceState`]: a stopping instance is going
/// away like one shutting down, a stopped one is gone like a terminated one
/// (its node cannot run pods either way).
fn instance_state(name: &str) -> Option<InstanceState> {
    Some(match name {
        "pending" => InstanceState::Pending,
        "running" => InstanceState::Running,
        "shutting-down" | "stopping" => InstanceState::ShuttingDown,
        "terminated" | "stopped" => InstanceState::Terminated,
        _ => return None,
    })
}

/// A Health event time (or a Capacity Block's `end-date`): RFC 2822 (`Sat, 05 Jun 2016 15:10:09 GMT`, what
/// AWS Health sends) or RFC 3339.
/// The weekday is optional in RFC 2822 and ignored here: a weekday that
/// does not match the date (aws-node-termination-handler's documented
/// example has one) must not cost us a maintenance notice.
fn health_time(text: &str) -> Option<Time> {
    let text = text.trim();
    let without_weekday = match text.split_once(", ") {
        Some((day, rest)) if day.len() == 3 && day.chars().all(|c| c.is_ascii_alphabetic()) => rest,
        _ => text,
    };
    chrono::DateTime::parse_from_rfc2822(without_weekday)
        .or_else(|_| chrono::DateTime::parse_from_rfc3339(text))
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> Time {
        chrono::Utc.with_ymd_and_hms(2021, 2, 18, h, m, s).unwrap()
    }

    /// The example of the EC2 user guide, as EventBridge delivers it to SQS.
    const SPOT: &str = r#"{
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2021-02-18T17:26:21Z",
        "region": "us-east-2",
        "resources": ["arn:aws:ec2:us-east-2a:instance/i-1234567890abcdef0"],
        "detail": {"instance-id": "i-1234567890abcdef0", "instance-action": "terminate"}
    }"#;

    fn only_notice(body: &str) -> InstanceNotice {
        match parse_message(body).expect("parses") {
            Parsed::Notices { notices, .. } if notices.len() == 1 => notices[0].clone(),
            other => panic!("expected one notice, got {other:?}"),
        }
    }

    #[test]
    fn spot_interruption_warning_gives_a_deadline_two_minutes_after_the_event() {
        let n = only_notice(SPOT);
        assert_eq!(n.instance_id, "i-1234567890abcdef0");
        assert_eq!(n.time, at(17, 26, 21));
        assert_eq!(
            n.kind,
            NoticeKind::SpotInterruption {
                deadline: at(17, 28, 21)
            }
        );
        assert_eq!(n.id, "12345678-1234-1234-1234-123456789012");
    }

    #[test]
    fn rebalance_recommendation_names_its_instance() {
        let body = r#"{"version":"0","id":"e-2","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"2021-02-18T17:26:21Z","region":"us-east-2","resources":["arn:aws:ec2:us-east-2:123456789012:instance/i-0b"],"detail":{"instance-id":"i-0b"}}"#;
        let n = only_notice(body);
        assert_eq!(
            (n.instance_id.as_str(), n.kind),
            ("i-0b", NoticeKind::Rebalance)
        );
        assert_eq!(n.id, "e-2");
    }

    #[test]
    fn state_change_maps_ec2_state_names() {
        let body = |state: &str| {
            format!(
                r#"{{"version":"0","id":"e-3","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"1","time":"2021-02-18T17:26:21Z","region":"us-east-1","resources":[],"detail":{{"instance-id":"i-0c","state":"{state}"}}}}"#
            )
        };
        for (name, state) in [
            ("pending", InstanceState::Pending),
            ("running", InstanceState::Running),
            ("shutting-down", InstanceState::ShuttingDown),
            ("stopping", InstanceState::ShuttingDown),
            ("stopped", InstanceState::Terminated),
            ("terminated", InstanceState::Terminated),
        ] {
            assert_eq!(
                only_notice(&body(name)).kind,
                NoticeKind::StateChange { state },
                "{name}"
            );
        }
        let err = parse_message(&body("melting")).unwrap_err().to_string();
        assert!(err.contains("melting") && err.contains("e-3"), "{err}");
    }

    /// The shape of aws-node-termination-handler's documented example.
    const HEALTH_EVENT: &str = r#"{
        "version": "0",
        "id": "7fb65329-1628-4cf3-a740-95fg457h1402",
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "account": "123456789012",
        "time": "2016-06-05T06:27:57Z",
        "region": "us-east-1",
        "resources": ["i-12345678", "i-87654321"],
        "detail": {
            "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "startTime": "Sat, 05 Jun 2016 15:10:09 GMT",
            "eventDescription": [{"language": "en_US", "latestDescription": "retirement"}],
            "affectedEntities": [
                {"entityValue": "i-12345678", "tags": {"stage": "prod"}},
                {"entityValue": "i-87654321"}
            ]
        }
    }"#;

    #[test]
    fn health_scheduled_change_gives_one_notice_per_affected_instance() {
        let Parsed::Notices { event_id, notices } = parse_message(HEALTH_EVENT).unwrap() else {
            panic!("a scheduled change is acted on");
        };
        assert_eq!(event_id, "7fb65329-1628-4cf3-a740-95fg457h1402");
        let start = Some(chrono::Utc.with_ymd_and_hms(2016, 6, 5, 15, 10, 9).unwrap());
        let got: Vec<(&str, &NoticeKind)> = notices
            .iter()
            .map(|n| (n.instance_id.as_str(), &n.kind))
            .collect();
        assert_eq!(
            got,
            [
                ("i-12345678", &NoticeKind::ScheduledChange { start }),
                ("i-87654321", &NoticeKind::ScheduledChange { start }),
            ]
        );
    }

    #[test]
    fn health_start_time_reads_rfc_2822_with_or_without_weekday_and_rfc_3339() {
        let t = Some(chrono::Utc.with_ymd_and_hms(2023, 1, 27, 6, 0, 0).unwrap());
        assert_eq!(health_time("Fri, 27 Jan 2023 06:00:00 GMT"), t);
        assert_eq!(health_time("27 Jan 2023 06:00:00 GMT"), t);
        assert_eq!(health_time("2023-01-27T06:00:00Z"), t);
        assert_eq!(health_time("Friday"), None);
    }

    #[test]
    fn health_event_of_another_category_or_service_is_unknown() {
        for (from, to) in [
            (r#""scheduledChange""#, r#""issue""#),
            (r#""service": "EC2""#, r#""service": "RDS""#),
        ] {
            let body = HEALTH_EVENT.replace(from, to);
            assert!(
                matches!(parse_message(&body), Ok(Parsed::Unknown { .. })),
                "{to}"
            );
        }
    }

    #[test]
    fn health_event_with_an_unreadable_start_time_is_malformed() {
        let body = HEALTH_EVENT.replace("Sat, 05 Jun 2016 15:10:09 GMT", "soon");
        let err = parse_message(&body).unwrap_err();
        assert!(matches!(err, ParseError::BadDetail { .. }), "{err}");
    }

    /// The EC2 user guide's Capacity Block expiry warning, with the
    /// envelope EventBridge puts around every event it delivers.
    const BLOCK_EXPIRING: &str = r#"{
        "version": "0",
        "id": "3f0c1a52-0000-4e1b-9d2e-2b5c8c0c0a11",
        "detail-type": "Capacity Block Expiration Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2021-02-18T10:50:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0123456789abcdef0"],
        "detail": {
            "capacity-reservation-id": "cr-0123456789abcdef0",
            "end-date": "2021-02-18T11:30:00Z"
        }
    }"#;

    #[test]
    fn capacity_block_expiry_warning_is_one_notice_about_the_reservation_with_its_end() {
        let n = only_notice(BLOCK_EXPIRING);
        assert_eq!(n.instance_id, "cr-0123456789abcdef0");
        assert_eq!(n.kind, NoticeKind::ReservationEnding { end: at(11, 30, 0) });
        assert_eq!(n.id, "3f0c1a52-0000-4e1b-9d2e-2b5c8c0c0a11");
        // The user guide's spelling of the detail-type and of the envelope.
        let guide = BLOCK_EXPIRING
            .replace(
                r#""detail-type": "Capacity Block Expiration Warning""#,
                r#""detail_type": "Capacity Block Reservation Expiration Warning""#,
            )
            .replace(r#""id":"#, r#""customer_event_id":"#);
        let n = only_notice(&guide);
        assert_eq!(n.kind, NoticeKind::ReservationEnding { end: at(11, 30, 0) });
        assert_eq!(n.id, "3f0c1a52-0000-4e1b-9d2e-2b5c8c0c0a11");
    }

    #[test]
    fn capacity_block_warning_without_an_end_date_ends_forty_minutes_after_it() {
        let body = BLOCK_EXPIRING.replace(
            r#",
            "end-date": "2021-02-18T11:30:00Z""#,
            "",
        );
        assert!(!body.contains("end-date"), "{body}");
        assert_eq!(
            only_notice(&body).kind,
            NoticeKind::ReservationEnding { end: at(11, 30, 0) }
        );
    }

    #[test]
    fn capacity_block_warning_without_a_reservation_or_with_a_bad_one_is_malformed() {
        for (from, to, says) in [
            (
                "capacity-reservation-id",
                "reservation",
                "capacity-reservation-id",
            ),
            (
                r#"cr-0123456789abcdef0","#,
                r#"i-0123456789abcdef0","#,
                "not a capacity reservation",
            ),
            ("2021-02-18T11:30:00Z", "at half past", "end-date"),
        ] {
            let err = parse_message(&BLOCK_EXPIRING.replacen(from, to, 2)).unwrap_err();
            assert!(
                matches!(&err, ParseError::BadDetail { detail_type, event_id, .. }
                    if detail_type == CAPACITY_BLOCK_EXPIRING
                        && event_id == "3f0c1a52-0000-4e1b-9d2e-2b5c8c0c0a11"),
                "{err}"
            );
            assert!(err.to_string().contains(says), "{to}: {err}");
        }
    }

    #[test]
    fn other_event_types_are_unknown_not_errors() {
        let body = SPOT.replace(SPOT_INTERRUPTION, "EC2 Fleet Spot Instance Request");
        assert_eq!(
            parse_message(&body),
            Ok(Parsed::Unknown {
                event_id: "12345678-1234-1234-1234-123456789012".into(),
                what: "aws.ec2 EC2 Fleet Spot Instance Request".into(),
            })
        );
        // A known detail-type from a source that is not AWS is not trusted.
        let body = SPOT.replace(r#""aws.ec2""#, r#""my.app""#);
        assert!(matches!(parse_message(&body), Ok(Parsed::Unknown { .. })));
    }

    #[test]
    fn an_event_time_at_the_end_of_time_is_malformed_not_a_panic() {
        for body in [
            SPOT.replace("2021-02-18T17:26:21Z", "+262142-12-31T23:59:59Z"),
            BLOCK_EXPIRING
                .replace("2021-02-18T10:50:00Z", "+262142-12-31T23:59:59Z")
                .replace(
                    r#",
            "end-date": "2021-02-18T11:30:00Z""#,
                    "",
                ),
        ] {
            let err = parse_message(&body).unwrap_err();
            assert!(err.to_string().contains("end of time"), "{err}");
        }
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        for body in [
            "",
            "not json",
            "[]",
            r#"{"id":"x"}"#,
            r#"{"id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","time":"yesterday","detail":{}}"#,
        ] {
            assert!(
                matches!(parse_message(body), Err(ParseError::NotAnEvent(_))),
                "{body:?}"
            );
        }
        let no_instance = SPOT.replace("instance-id", "instance");
        let err = parse_message(&no_instance).unwrap_err();
        assert!(
            matches!(&err, ParseError::BadDetail { detail_type, .. } if detail_type == SPOT_INTERRUPTION),
            "{err}"
        );
    }

    #[test]
    fn an_instance_event_without_an_instance_id_is_malformed() {
        let id = serde_json::from_str::<serde_json::Value>(SPOT).unwrap()["detail"]["instance-id"]
            .as_str()
            .unwrap()
            .to_owned();
        for wrong in ["", "cr-0123", "arn:aws:ec2:us-east-1:1:instance/i-1"] {
            let body = SPOT.replace(&format!("\"{id}\""), &format!("{wrong:?}"));
            let err = parse_message(&body).unwrap_err();
            assert!(
                err.to_string().contains("not an EC2 instance ID"),
                "{wrong:?}: {err}"
            );
        }
    }
}
