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
//! fit in its capacities; and rounded up again to a size of the device's
//! share [`chain`], so that requests whose shares fit in a node's devices
//! taken together also fit device by device. See `docs/dra.md`.

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

/// The shares of a device of `t` that `consumed` is charged when it is
/// planned: those that cover its largest part of any capacity, rounded up
/// to a size of the device's share chain ([`aligned`]), at least one.
pub fn shares(t: &DeviceTemplate, consumed: &Consumed) -> u32 {
    let n = t.shared.as_ref().map_or(1, |s| s.shares);
    aligned(n, covered(t, consumed))
}

/// The shares of a device of `t` that cover `consumed`: its largest part of
/// any capacity, rounded up, at least one (what it takes of the device,
/// not yet aligned).
fn covered(t: &DeviceTemplate, consumed: &Consumed) -> u32 {
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

/// The sizes a planned request takes of a device in `n` shares: 1, then
/// each size times the next prime factor of `n`, smallest first, up to `n`
/// (4: 1, 2, 4; 6: 1, 2, 6; 12: 1, 2, 4, 12). Each size divides the next,
/// so requests of these sizes fit in a node's devices whenever their sum
/// fits in its shares: placed largest first, a device's used shares are a
/// multiple of the size being placed, so a device with room has room for
/// it (`docs/dra.md`, "Shares per GPU").
pub fn chain(n: u32) -> Vec<u32> {
    let mut out = vec![1];
    let (mut rest, mut size, mut p) = (n.max(1), 1, 2);
    while rest > 1 {
        if p * p > rest {
            p = rest;
        }
        if rest % p == 0 {
            size *= p;
            rest /= p;
            out.push(size);
        } else {
            p += 1;
        }
    }
    out
}

/// `shares` of a device in `n` shares rounded up to the least size of its
/// [`chain`] that covers them (at most `n`).
pub fn aligned(n: u32, shares: u32) -> u32 {
    chain(n)
        .into_iter()
        .find(|&c| c >= shares)
        .unwrap_or(n.max(1))
}

/// The free shares of devices in `n` shares each, `free` of each, that a
/// planner may count as one number: the most such that any requests of
/// [`chain`] sizes whose shares sum to at most it fit in the devices. For
/// each chain size `c`, requests of at least `c` shares can use only the
/// whole `c`-sized blocks of each device's free shares; a sum within the
/// blocks at every size (plus less than one block, which the sum of such
/// requests, a multiple of `c`, cannot use) fits. Devices wholly free count
/// in full; one device counts its free shares exactly.
pub fn free_for_planning(n: u32, free: &[u32]) -> u32 {
    chain(n)
        .into_iter()
        .map(|c| free.iter().map(|f| f / c * c).sum::<u32>() + (c - 1))
        .min()
        .unwrap_or(0)
        .min(free.iter().sum())
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
    fn a_share_chain_steps_by_the_prime_factors_of_the_shares_smallest_first() {
        assert_eq!(chain(1), vec![1]);
        assert_eq!(chain(4), vec![1, 2, 4]);
        assert_eq!(chain(6), vec![1, 2, 6]);
        assert_eq!(chain(7), vec![1, 7]);
        assert_eq!(chain(12), vec![1, 2, 4, 12]);
        assert_eq!(chain(48), vec![1, 2, 4, 8, 16, 48]);
        assert_eq!((aligned(4, 3), aligned(4, 2), aligned(6, 3)), (4, 2, 6));
        assert_eq!((aligned(8, 5), aligned(1, 1), aligned(4, 9)), (8, 1, 4));
    }

    /// Whether requests of `sizes` fit in devices with `free` shares, each
    /// request on one device (exhaustive).
    fn split(sizes: &[u32], free: &mut [u32]) -> bool {
        let Some((&s, rest)) = sizes.split_first() else {
            return true;
        };
        (0..free.len()).any(|i| {
            if free[i] < s {
                return false;
            }
            free[i] -= s;
            let ok = split(rest, free);
            free[i] += s;
            ok
        })
    }

    #[test]
    fn requests_of_chain_sizes_within_the_free_shares_counted_always_fit_device_by_device() {
        // Every free state of up to three devices in 4 or 6 shares, and
        // every multiset of up to four chain-sized requests.
        for n in [4u32, 6] {
            let sizes = chain(n);
            let mut states = vec![vec![]];
            for _ in 0..3 {
                let mut next = Vec::new();
                for st in &states {
                    for f in 0..=n {
                        let mut s: Vec<u32> = st.clone();
                        s.push(f);
                        next.push(s);
                    }
                }
                states.extend(next);
            }
            let mut asks: Vec<Vec<u32>> = vec![vec![]];
            for _ in 0..4 {
                let more: Vec<Vec<u32>> = asks
                    .iter()
                    .flat_map(|a| {
                        sizes.iter().map(move |&s| {
                            let mut b = a.clone();
                            b.push(s);
                            b
                        })
                    })
                    .collect();
                asks.extend(more);
            }
            for free in &states {
                let room = free_for_planning(n, free);
                if free.len() == 1 || free.iter().all(|&f| f == n) {
                    assert_eq!(room, free.iter().sum::<u32>(), "{free:?}");
                }
                for a in &asks {
                    if a.iter().sum::<u32>() <= room {
                        let mut sorted = a.clone();
                        sorted.sort_unstable_by(|x, y| y.cmp(x));
                        assert!(split(&sorted, &mut free.clone()), "{a:?} in {free:?}");
                    }
                }
            }
        }
        // Two GPUs of four shares with two free on each: a whole GPU does
        // not fit, three single shares do.
        assert_eq!(free_for_planning(4, &[2, 2]), 3);
        // 3 + 3 + 2 shares do not fit two GPUs of four; aligned, they sum
        // to more than the eight shares.
        assert!(!split(&[3, 3, 2], &mut [4, 4]));
        assert!(aligned(4, 3) * 2 + aligned(4, 2) > 8);
    }

    #[test]
    fn a_request_is_charged_the_shares_covering_what_it_consumes() {
        let t = device(4, None);
        let of = |gi: f64| Consumed::from([("gpu.example.com/memory".to_string(), gi * GI)]);
        assert_eq!(shares(&t, &of(20.0)), 1);
        assert_eq!(shares(&t, &of(21.0)), 2);
        assert_eq!(shares(&t, &of(41.0)), 4, "three shares, planned as four");
        assert_eq!(shares(&t, &of(80.0)), 4);
        assert_eq!(shares(&t, &of(0.0)), 1, "never nothing");
        assert!(fits(&t, &of(60.0), &of(20.0)));
        assert!(!fits(&t, &of(60.0), &of(21.0)));
    }
}
