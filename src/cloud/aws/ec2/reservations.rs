//! Reserved capacity on EC2: the node classes' `capacityReservationSelectorTerms`
//! as `DescribeCapacityReservations` requests, and the answer as the
//! catalog's [`Reservation`]s (on-demand capacity reservations and Capacity
//! Blocks for ML, with zone, type, counts and window). Terms that select
//! nothing usable are reported, not silently dropped: a selector that
//! matches nothing and a block that already ended are the usual mistakes.

use super::settings::CapacityReservationSelectorTerm;
use crate::catalog::{Reservation, ReservationKind};
use aws_sdk_ec2::types::{
    CapacityReservation, CapacityReservationState, CapacityReservationType, Filter,
};
use std::collections::HashMap;

/// The states worth offering: `active` (launchable now) and `scheduled` (a
/// Capacity Block that has not started; offered from its start).
pub const USABLE_STATES: [&str; 2] = ["active", "scheduled"];

/// The `DescribeCapacityReservations` filters of a term: the tag filters of
/// a tag term (`*` matches any value) plus `state` in [`USABLE_STATES`] and
/// `instance-platform` Linux; an ID term is asked for by ID instead (see
/// [`ids`]) and gets no state filter, so that an ended block is reported as
/// ended rather than as missing.
pub fn filters(term: &CapacityReservationSelectorTerm) -> Vec<Filter> {
    if term.id.is_some() {
        return Vec::new();
    }
    let mut out: Vec<Filter> = term
        .tags
        .iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect();
    out.push(
        Filter::builder()
            .name("state")
            .set_values(Some(USABLE_STATES.iter().map(|s| s.to_string()).collect()))
            .build(),
    );
    out
}

/// The reservation IDs of a term (empty for a tag term).
pub fn ids(term: &CapacityReservationSelectorTerm) -> Vec<String> {
    term.id.iter().cloned().collect()
}

/// Our [`Reservation`] for one EC2 reservation, or why it cannot be used:
/// not active or scheduled (expired, cancelled, failed, pending payment),
/// or missing its type or zone. `zone_ids` maps zone names to zone IDs for
/// answers that carry only the name; `price_per_hour` is the selecting
/// term's stated price (0 when it states none).
///
/// # Errors
/// A message naming the reservation and its problem.
pub fn reservation_of(
    cr: &CapacityReservation,
    region: &str,
    zone_ids: &HashMap<String, String>,
    price_per_hour: f64,
) -> Result<Reservation, String> {
    let id = cr
        .capacity_reservation_id()
        .unwrap_or("(no id)")
        .to_string();
    let kind = match cr.reservation_type() {
        Some(CapacityReservationType::CapacityBlock) => ReservationKind::CapacityBlock,
        _ => ReservationKind::OnDemand,
    };
    let end = cr
        .end_date()
        .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos()));
    match cr.state() {
        Some(CapacityReservationState::Active | CapacityReservationState::Scheduled) => {}
        Some(state) => {
            return Err(match (state, end) {
                (CapacityReservationState::Expired, Some(end)) => {
                    format!("capacity reservation {id} ended at {end}")
                }
                (state, _) => format!("capacity reservation {id} is {}", state.as_str()),
            })
        }
        None => return Err(format!("capacity reservation {id} has no state")),
    }
    let instance_type = cr
        .instance_type()
        .ok_or_else(|| format!("capacity reservation {id} has no instance type"))?;
    let zone_id = cr
        .availability_zone_id()
        .map(str::to_string)
        .or_else(|| {
            cr.availability_zone()
                .and_then(|z| zone_ids.get(z).cloned())
        })
        .ok_or_else(|| format!("capacity reservation {id} has no known zone"))?;
    let count = |n: Option<i32>| n.and_then(|n| u32::try_from(n).ok()).unwrap_or(0);
    Ok(Reservation {
        id,
        kind,
        instance_type: instance_type.to_string(),
        region: region.to_string(),
        zone_id,
        total: count(cr.total_instance_count()),
        available: count(cr.available_instance_count()),
        start: cr
            .start_date()
            .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
        end,
        price_per_hour,
    })
}

/// How often the controller asks EC2 for its reservations: counts change
/// as instances launch and blocks start, so much more often than prices.
pub const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Keeps the controller's catalog selling the node classes' reservations:
/// every `every`, and whenever `prices` sends a refreshed catalog, sends
/// `prices` with the last reservations found
/// ([`crate::catalog::Catalog::with_reservations`], no launch within `lead`
/// of an end) to `catalog`. A failed discovery keeps the last reservations
/// and logs a warning; the terms that find nothing usable are logged as
/// warnings whenever the list of them changes, and handed to the node
/// classes' shared state for their status
/// ([`super::NodeClasses::reservation_findings`]). Returns when `cancel` fires.
pub async fn keep_catalog_reserved(
    cloud: super::AwsCloud,
    mut prices: tokio::sync::watch::Receiver<std::sync::Arc<crate::catalog::Catalog>>,
    catalog: tokio::sync::watch::Sender<std::sync::Arc<crate::catalog::Catalog>>,
    every: std::time::Duration,
    lead: std::time::Duration,
    cancel: tokio_util::sync::CancellationToken,
) {
    let lead = chrono::TimeDelta::from_std(lead).unwrap_or(chrono::TimeDelta::zero());
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Vec<Reservation> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {
                match cloud.capacity_reservations().await {
                    Ok(found) => {
                        cloud.node_classes.set_reservation_findings(found.by_class.clone());
                        if found.problems != problems {
                            for p in &found.problems {
                                tracing::warn!(problem = %p, "capacity reservation selector");
                            }
                            problems = found.problems;
                        }
                        last = found.reservations;
                    }
                    Err(e) => tracing::warn!(
                        error = %e,
                        "cannot list capacity reservations; keeping the last ones found"
                    ),
                }
            }
            changed = prices.changed() => if changed.is_err() { return },
        }
        let base = prices.borrow().as_ref().clone();
        let reserved = base.with_reservations(&last, chrono::Utc::now(), lead);
        catalog.send_replace(std::sync::Arc::new(reserved));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_types::DateTime;
    use std::collections::BTreeMap;

    fn block(state: CapacityReservationState) -> CapacityReservation {
        CapacityReservation::builder()
            .capacity_reservation_id("cr-0123")
            .instance_type("p5.48xlarge")
            .availability_zone("us-east-1d")
            .total_instance_count(4)
            .available_instance_count(3)
            .reservation_type(CapacityReservationType::CapacityBlock)
            .start_date(DateTime::from_secs(1_772_000_000))
            .end_date(DateTime::from_secs(1_772_086_400))
            .state(state)
            .build()
    }

    #[test]
    fn an_active_block_becomes_a_reservation_with_its_zone_id_counts_and_window() {
        let zones = HashMap::from([("us-east-1d".to_string(), "use1-az4".to_string())]);
        let r = reservation_of(
            &block(CapacityReservationState::Active),
            "us-east-1",
            &zones,
            0.0,
        )
        .unwrap();
        assert_eq!(r.kind, ReservationKind::CapacityBlock);
        assert_eq!(
            (r.zone_id.as_str(), r.total, r.available),
            ("use1-az4", 4, 3)
        );
        assert_eq!(r.end.unwrap().timestamp(), 1_772_086_400);
        assert_eq!(r.start.unwrap().timestamp(), 1_772_000_000);
    }

    #[test]
    fn an_expired_block_is_reported_as_ended_not_offered() {
        let why = reservation_of(
            &block(CapacityReservationState::Expired),
            "us-east-1",
            &HashMap::new(),
            0.0,
        )
        .unwrap_err();
        assert!(why.contains("cr-0123 ended at"), "{why}");
    }

    #[test]
    fn a_tag_term_filters_by_tag_and_usable_state_and_an_id_term_by_id() {
        let term = CapacityReservationSelectorTerm {
            id: None,
            tags: BTreeMap::from([("team".into(), "ml".into()), ("any".into(), "*".into())]),
            price_per_hour: None,
        };
        let filters = filters(&term);
        let names: Vec<&str> = filters.iter().filter_map(|f| f.name()).collect();
        assert_eq!(names, ["tag-key", "tag:team", "state"]);
        assert!(ids(&term).is_empty());
        let by_id = CapacityReservationSelectorTerm {
            id: Some("cr-1".into()),
            tags: BTreeMap::new(),
            price_per_hour: None,
        };
        assert!(super::filters(&by_id).is_empty());
        assert_eq!(ids(&by_id), ["cr-1"]);
    }
}
