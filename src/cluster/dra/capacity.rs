//! Consumable capacity (Kubernetes KEP-5075, `resource.k8s.io/v1`): what
//! a request consumes of a shareable device (`allowMultipleAllocations`),
//! and the shares the planner charges for it. The rules follow the
//! scheduler's allocator:
//! - a capacity the request names is consumed as asked, rounded up by the
//!   capacity's request policy: to the least of its `validValues` that
//!   covers it, or into its `validRange` (up to `min`, then up to
//!   `min + n * step`); more than the policy allows (above `max` or every
//!   valid value) and the device cannot serve the request;
//! - a capacity the request does not name is consumed at the policy's
//!   `default`, or whole when the capacity has no policy (or no default);
//! - the device serves requests while, for every capacity, what they
//!   consume together stays within its value.
//!
//! The planner counts a shareable device in shares
//! ([`crate::catalog::devices::Shared::shares`]); a request is charged the
//! shares that cover the largest part of any capacity it consumes, rounded
//! up (at least one), so that requests whose shares fit in a device also
//! fit in its capacities. See `docs/dra.md`.

use crate::catalog::devices::{qualified, DeviceTemplate, RequestPolicy};
use std::collections::BTreeMap;

/// Tolerance of the quantity arithmetic (quantities are read as `f64`).
const EPS: f64 = 1e-9;

/// What one request consumes of one device: amount by qualified capacity
/// name.
pub type Consumed = BTreeMap<String, f64>;

/// What a request asking `requests` (capacity name, possibly unqualified,
/// to quantity) consumes of one device of `t`, a shareable template.
///
/// # Errors
/// When a requested amount is more than the capacity's request policy
/// allows, or a quantity does not parse: the capacity, what was asked
/// and what the policy allows.
pub fn consumed(
    requests: &BTreeMap<String, String>,
    t: &DeviceTemplate,
) -> Result<Consumed, String> {
    let policies = t.shared.as_ref().map(|s| &s.policies);
    let asked: BTreeMap<String, &String> = requests
        .iter()
        .map(|(k, v)| (qualified(&t.driver, k), v))
        .collect();
    let mut out = Consumed::new();
    for (name, value) in &t.capacity {
        let value = quantity(value)?;
        let policy = policies.and_then(|p| p.get(name));
        let amount = match (asked.get(name), policy) {
            (Some(q), Some(p)) => round_up(quantity(q)?, p).ok_or_else(|| {
                format!(
                    "capacity {name} {q} is more than a shared {} allows ({})",
                    t.kind,
                    allowed(p)
                )
            })?,
            (Some(q), None) => quantity(q)?,
            (
                None,
                Some(RequestPolicy {
                    default: Some(d), ..
                }),
            ) => quantity(d)?,
            (None, _) => value,
        };
        out.insert(name.clone(), amount);
    }
    Ok(out)
}

/// `asked` rounded up as `p` says, or `None` when it allows no amount
/// that covers it.
fn round_up(asked: f64, p: &RequestPolicy) -> Option<f64> {
    if !p.valid_values.is_empty() {
        return p
            .valid_values
            .iter()
            .filter_map(|v| crate::api::parse_quantity(v).ok())
            .filter(|v| *v + EPS >= asked)
            .min_by(f64::total_cmp);
    }
    let Some(r) = &p.valid_range else {
        return Some(asked);
    };
    let min = crate::api::parse_quantity(&r.min).ok()?;
    let mut amount = asked.max(min);
    if let Some(step) = r
        .step
        .as_deref()
        .and_then(|s| crate::api::parse_quantity(s).ok())
    {
        if step > 0.0 {
            let n = ((amount - min) / step - EPS).ceil().max(0.0);
            amount = min + n * step;
        }
    }
    match r.max.as_deref().map(crate::api::parse_quantity) {
        Some(Ok(max)) if amount > max + EPS => None,
        Some(Err(_)) => None,
        _ => Some(amount),
    }
}

/// What a policy allows, for messages.
fn allowed(p: &RequestPolicy) -> String {
    if let Some(most) = p.valid_values.last() {
        return format!("at most {most}");
    }
    match p.valid_range.as_ref().and_then(|r| r.max.as_ref()) {
        Some(max) => format!("at most {max}"),
        None => "no amount that covers it".into(),
    }
}

fn quantity(q: &str) -> Result<f64, String> {
    crate::api::parse_quantity(q).map_err(|e| e.to_string())
}

/// Whether `more` fits in one device of `t` beside what `used` holds.
pub fn fits(t: &DeviceTemplate, used: &Consumed, more: &Consumed) -> bool {
    t.capacity.iter().all(|(name, value)| {
        let Ok(value) = crate::api::parse_quantity(value) else {
            return false;
        };
        let have = used.get(name).copied().unwrap_or(0.0);
        have + more.get(name).copied().unwrap_or(0.0) <= value * (1.0 + EPS) + EPS
    })
}

/// The shares of a device of `t` that `consumed` is charged: those that
/// cover its largest part of any capacity, rounded up, at least one.
pub fn shares(t: &DeviceTemplate, consumed: &Consumed) -> u32 {
    charge(
        t.shared.as_ref().map_or(1, |s| s.shares),
        t.capacity.iter().filter_map(|(name, value)| {
            let value = crate::api::parse_quantity(value)
                .ok()
                .filter(|v| *v > 0.0)?;
            Some(consumed.get(name).copied().unwrap_or(0.0) / value)
        }),
    )
}

/// The shares, of `shares` per device, that cover the largest of `parts`
/// (what is consumed of each capacity, as a part of it), rounded up, at
/// least one and at most all.
pub fn charge(shares: u32, parts: impl Iterator<Item = f64>) -> u32 {
    let shares = shares.max(1);
    let most = parts.fold(0.0, f64::max);
    ((most * f64::from(shares) - EPS).ceil() as u32).clamp(1, shares)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::devices::{Shared, ValidRange};

    /// A shareable device of 80Gi memory in `shares` shares, its memory
    /// governed by `policy`.
    fn device(shares: u32, policy: Option<RequestPolicy>) -> DeviceTemplate {
        DeviceTemplate {
            driver: "gpu.example.com".into(),
            kind: "gpu".into(),
            count: 1,
            attributes: BTreeMap::new(),
            capacity: BTreeMap::from([("gpu.example.com/memory".into(), "80Gi".into())]),
            source: "test".into(),
            shared: Some(Shared {
                shares,
                policies: policy
                    .into_iter()
                    .map(|p| ("gpu.example.com/memory".to_string(), p))
                    .collect(),
            }),
        }
    }

    /// A policy rounding requests into `min..=max` in `step`s, `default`
    /// for a request naming no amount.
    pub(crate) fn range(default: &str, min: &str, max: &str, step: &str) -> RequestPolicy {
        RequestPolicy {
            default: Some(default.into()),
            valid_range: Some(ValidRange {
                min: min.into(),
                max: Some(max.into()),
                step: Some(step.into()),
            }),
            valid_values: Vec::new(),
        }
    }

    fn ask(q: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("memory".to_string(), q.to_string())])
    }

    const GI: f64 = (1u64 << 30) as f64;

    fn memory(c: &Consumed) -> f64 {
        c["gpu.example.com/memory"] / GI
    }

    #[test]
    fn a_range_rounds_a_request_up_to_its_step_and_refuses_more_than_its_max() {
        let t = device(4, Some(range("20Gi", "10Gi", "60Gi", "20Gi")));
        assert_eq!(
            memory(&consumed(&ask("1Gi"), &t).unwrap()),
            10.0,
            "up to min"
        );
        assert_eq!(memory(&consumed(&ask("10Gi"), &t).unwrap()), 10.0);
        assert_eq!(
            memory(&consumed(&ask("11Gi"), &t).unwrap()),
            30.0,
            "min + step"
        );
        assert_eq!(memory(&consumed(&ask("50Gi"), &t).unwrap()), 50.0);
        let e = consumed(&ask("51Gi"), &t).unwrap_err();
        assert!(
            e.contains("more than a shared gpu allows (at most 60Gi)"),
            "{e}"
        );
        assert_eq!(
            memory(&consumed(&BTreeMap::new(), &t).unwrap()),
            20.0,
            "a request naming no amount consumes the default"
        );
    }

    #[test]
    fn valid_values_round_a_request_up_to_the_least_that_covers_it() {
        let t = device(
            4,
            Some(RequestPolicy {
                default: Some("20Gi".into()),
                valid_range: None,
                valid_values: vec!["20Gi".into(), "40Gi".into(), "80Gi".into()],
            }),
        );
        assert_eq!(memory(&consumed(&ask("21Gi"), &t).unwrap()), 40.0);
        assert_eq!(memory(&consumed(&ask("80Gi"), &t).unwrap()), 80.0);
        assert!(consumed(&ask("81Gi"), &t).is_err());
    }

    #[test]
    fn without_a_policy_a_request_takes_what_it_asks_or_else_the_whole_capacity() {
        let t = device(4, None);
        assert_eq!(memory(&consumed(&ask("13Gi"), &t).unwrap()), 13.0);
        assert_eq!(memory(&consumed(&BTreeMap::new(), &t).unwrap()), 80.0);
    }

    #[test]
    fn a_request_is_charged_the_shares_covering_what_it_consumes() {
        let t = device(4, None);
        let of = |gi: f64| Consumed::from([("gpu.example.com/memory".to_string(), gi * GI)]);
        assert_eq!(shares(&t, &of(20.0)), 1);
        assert_eq!(shares(&t, &of(21.0)), 2);
        assert_eq!(shares(&t, &of(80.0)), 4);
        assert_eq!(shares(&t, &of(0.0)), 1, "never nothing");
        assert!(fits(&t, &of(60.0), &of(20.0)));
        assert!(!fits(&t, &of(60.0), &of(21.0)));
    }
}
