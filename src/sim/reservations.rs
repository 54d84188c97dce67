//! Reserved capacity in a scenario: on-demand capacity reservations and
//! Capacity Blocks for ML (`cloud.reservations`), with their count, zone,
//! window and the price paid up front. The engine sells them to the core as
//! reserved offerings whose available count is what the run's nodes leave
//! of them, and adds the up-front price to the strategy's cost, so that a
//! scenario run with and without them shows what they are worth.

use crate::api::labels as l;
use crate::catalog::{CapacityType, Catalog, Reservation, ReservationKind};
use crate::core::{ManagedNode, Time};
use schemars::JsonSchema;
use serde::Deserialize;

/// One reservation of a scenario.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationSpec {
    /// Its ID (`cr-...`), unique in the scenario.
    pub id: String,
    /// `capacity-block` or `capacity-reservation` (default).
    #[serde(default = "default_kind")]
    pub kind: ReservationKind,
    /// Instance type it holds.
    pub instance_type: String,
    /// Zone ID.
    pub zone: String,
    /// Instances it holds.
    pub count: u32,
    /// Offset of its start from the scenario's start (Go duration; default
    /// at the start).
    #[serde(default)]
    pub after: Option<String>,
    /// How long it lasts (Go duration); absent: to the end of the run.
    #[serde(default)]
    pub duration: Option<String>,
    /// USD paid for it up front, whatever is used (a block's price, or a
    /// reservation's on-demand charge for the run); added to the cost.
    #[serde(default)]
    pub upfront_price: f64,
}

fn default_kind() -> ReservationKind {
    ReservationKind::OnDemand
}

/// Every problem of `specs`: durations that do not parse, a count of 0, an
/// instance type or zone the region does not sell on demand, a duplicate ID,
/// a negative price.
pub fn problems(specs: &[ReservationSpec], catalog: &Catalog, region: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, r) in specs.iter().enumerate() {
        let at = format!("cloud.reservations[{i}]");
        for (field, v) in [("after", &r.after), ("duration", &r.duration)] {
            if let Some(Err(e)) = v.as_deref().map(crate::api::parse_duration) {
                out.push(format!("{at}.{field}: {e}"));
            }
        }
        if r.count == 0 {
            out.push(format!("{at}.count: must be at least 1"));
        }
        if !(r.upfront_price.is_finite() && r.upfront_price >= 0.0) {
            out.push(format!("{at}.upfrontPrice: must be a number >= 0"));
        }
        let sold = catalog.offerings_in(region).any(|o| {
            o.capacity_type == CapacityType::OnDemand
                && o.instance_type == r.instance_type
                && o.zone_id == r.zone
        });
        if !sold {
            out.push(format!(
                "{at}: {} is not sold in {region} zone {}",
                r.instance_type, r.zone
            ));
        }
        if specs[..i].iter().any(|o| o.id == r.id) {
            out.push(format!("{at}.id: {} is used twice", r.id));
        }
    }
    out
}

/// The scenario's reservations as the catalog's, for a run starting at
/// `start` (specs are checked by [`problems`] first; a bad duration counts
/// as none).
pub fn reservations(specs: &[ReservationSpec], region: &str, start: Time) -> Vec<Reservation> {
    let span = |d: &Option<String>| {
        d.as_deref()
            .and_then(|d| crate::api::parse_duration(d).ok())
            .and_then(|d| chrono::TimeDelta::from_std(d).ok())
    };
    specs
        .iter()
        .map(|r| {
            let from = start + span(&r.after).unwrap_or_default();
            Reservation {
                id: r.id.clone(),
                kind: r.kind,
                instance_type: r.instance_type.clone(),
                region: region.to_string(),
                zone_id: r.zone.clone(),
                total: r.count,
                available: r.count,
                start: Some(from),
                end: span(&r.duration).map(|d| from + d),
                price_per_hour: 0.0,
            }
        })
        .collect()
}

/// What the simulated cloud must sell: every reservation as a reserved
/// offering whatever its window (the core decides when to use one; the
/// cloud prices it at 0, its cost being up front).
pub fn cloud_catalog(catalog: &Catalog, all: &[Reservation]) -> Catalog {
    let always: Vec<Reservation> = all
        .iter()
        .map(|r| Reservation {
            start: None,
            end: None,
            available: r.total.max(1),
            ..r.clone()
        })
        .collect();
    catalog.clone().with_reservations(
        &always,
        chrono::DateTime::<chrono::Utc>::MIN_UTC,
        chrono::TimeDelta::zero(),
    )
}

/// The catalog the core sees at `now`: `catalog` selling what each
/// reservation has left after the run's `nodes` in it (the simulated EC2's
/// available count), within its window and not within `lead` of its end.
pub fn core_catalog(
    catalog: &Catalog,
    all: &[Reservation],
    nodes: &[ManagedNode],
    now: Time,
    lead: std::time::Duration,
) -> Catalog {
    let current: Vec<Reservation> = all
        .iter()
        .map(|r| {
            let used = nodes
                .iter()
                .filter(|n| n.state.labels.get(l::CAPACITY_RESERVATION_ID) == Some(&r.id))
                .count();
            Reservation {
                available: r
                    .total
                    .saturating_sub(u32::try_from(used).unwrap_or(u32::MAX)),
                ..r.clone()
            }
        })
        .collect();
    let lead = chrono::TimeDelta::from_std(lead).unwrap_or_default();
    catalog.clone().with_reservations(&current, now, lead)
}

/// USD paid up front for `specs`.
pub fn upfront_cost(specs: &[ReservationSpec]) -> f64 {
    specs.iter().fold(0.0, |sum, r| sum + r.upfront_price)
}
