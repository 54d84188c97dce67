//! A NodePool's status, computed from its NodeClaims: the `Ready` and
//! `ValidationSucceeded` conditions, the launched nodes' resources (keyed
//! and written like `spec.limits`), their number and their cost per hour.
//! Pure: the loop computes it each round and patches it only when
//! [`status_changed`] says so.

use crate::api::nodepool::conditions::{READY, VALIDATION_SUCCEEDED};
use crate::api::{Condition, GpuSharingMode, NodeClaim, NodePool, NodePoolStatus, ResourceList};
use crate::catalog::Catalog;
use crate::cluster::resources::{Resources, CPU, EPHEMERAL_STORAGE, MEMORY};
use crate::cluster::shape::{capacity, GpuSharing};
use crate::core::Time;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as K8sTime;
use kube::ResourceExt;

/// Reasons of the pool's conditions.
pub mod reasons {
    /// `ValidationSucceeded=True`.
    pub const VALID: &str = "Valid";
    /// `ValidationSucceeded=False` and `Ready=False`: the message names the
    /// first problem.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    /// `Ready=True`.
    pub const READY: &str = "Ready";
    /// `Ready=False`: the cloud cannot launch for the pool (its
    /// EC2NodeClass is missing or not Ready); the message says why.
    pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
}

/// The status of `pool`: its nodes are the claims of `claims` that name it
/// and were launched (they have a provider ID). A claim's resources are its
/// `status.capacity`, or, before the node reports one, the catalog's
/// capacity of its instance type under the pool's GPU sharing.
/// `validation` is the first problem found validating the pool (`None`:
/// valid). Conditions keep their `lastTransitionTime` from `previous` while
/// their status does not change; `now` stamps the others.
pub fn node_pool_status(
    pool: &NodePool,
    claims: &[NodeClaim],
    catalog: &Catalog,
    validation: Option<&str>,
    previous: Option<&NodePoolStatus>,
    now: Time,
) -> NodePoolStatus {
    let usage = pool_usage(pool, claims, catalog);
    let generation = pool.metadata.generation;
    let old = previous
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let conditions = match validation {
        None => vec![
            condition(old, READY, true, reasons::READY, "", generation, now),
            condition(
                old,
                VALIDATION_SUCCEEDED,
                true,
                reasons::VALID,
                "",
                generation,
                now,
            ),
        ],
        Some(problem) => vec![
            condition(
                old,
                READY,
                false,
                reasons::VALIDATION_FAILED,
                problem,
                generation,
                now,
            ),
            condition(
                old,
                VALIDATION_SUCCEEDED,
                false,
                reasons::VALIDATION_FAILED,
                problem,
                generation,
                now,
            ),
        ],
    };
    NodePoolStatus {
        conditions,
        resources: to_resource_list(&usage.resources),
        nodes: usage.nodes as i64,
        // Cents of a cent: enough for a status, and stable across rounds.
        cost_per_hour: (usage.cost_per_hour * 10_000.0).round() / 10_000.0,
    }
}

/// What a pool's launched nodes add up to: what counts against its
/// `limits` (the status and the usage metrics report it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolUsage {
    /// Their resources, in canonical units (millicores, bytes, devices).
    pub resources: Resources,
    /// How many.
    pub nodes: usize,
    /// USD per hour together, at launch prices.
    pub cost_per_hour: f64,
}

/// The usage of `pool`: the claims of `claims` that name it and were
/// launched (they have a provider ID), each with its `status.capacity`, or,
/// before the node reports one, the catalog's capacity of its instance type
/// under the pool's GPU sharing.
pub fn pool_usage<'a>(
    pool: &NodePool,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    catalog: &Catalog,
) -> PoolUsage {
    let name = pool.name_any();
    let sharing = sharing_of(pool);
    let mut launched: Vec<&NodeClaim> = claims
        .into_iter()
        .filter(|c| c.spec.node_pool == name && is_launched(c))
        .collect();
    // One order, so that the cost's sum is the same every round.
    launched.sort_by_key(|c| c.name_any());
    let mut usage = PoolUsage {
        nodes: launched.len(),
        ..PoolUsage::default()
    };
    for claim in launched {
        usage
            .resources
            .add(&claim_capacity(claim, catalog, &sharing));
        usage.cost_per_hour += claim.spec.price_per_hour;
    }
    usage
}

/// Turns a valid pool's `Ready` condition `False` with `reason` and
/// `message` (the cloud cannot launch for it); a pool already not Ready
/// (invalid) keeps its own reason. The transition time follows `previous`
/// as in [`node_pool_status`].
pub fn mark_not_ready(
    status: &mut NodePoolStatus,
    reason: &str,
    message: &str,
    previous: Option<&NodePoolStatus>,
    now: Time,
) {
    let old = previous
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if let Some(ready) = status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == READY && c.status == "True")
    {
        *ready = condition(
            old,
            READY,
            false,
            reason,
            message,
            ready.observed_generation,
            now,
        );
    }
}

/// Marks `pool` (the round's copy, not the API's) not `Ready` with reason
/// [`reasons::NODE_CLASS_NOT_READY`] and `why`, so that the core plans
/// nothing for it ([`NodePool::is_marked_not_ready`]).
pub fn hold_not_ready(pool: &mut NodePool, why: &str, now: Time) {
    let status = pool.status.get_or_insert_with(NodePoolStatus::default);
    let ready = condition(
        &status.conditions,
        READY,
        false,
        reasons::NODE_CLASS_NOT_READY,
        &format!("launches nothing: {why}"),
        pool.metadata.generation,
        now,
    );
    status.conditions.retain(|c| c.type_ != READY);
    status.conditions.push(ready);
}

/// Whether `new` differs from what the pool shows (so it is worth a patch).
pub fn status_changed(current: Option<&NodePoolStatus>, new: &NodePoolStatus) -> bool {
    current != Some(new)
}

fn is_launched(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.provider_id.is_some())
}

fn sharing_of(pool: &NodePool) -> GpuSharing {
    let s = &pool.spec.gpu_sharing;
    match (s.mode, s.time_slicing_replicas(), s.mig_profile()) {
        (GpuSharingMode::TimeSlicing, Some(replicas), _) => GpuSharing::TimeSlicing { replicas },
        (GpuSharingMode::Mig, _, Some(profile)) => GpuSharing::Mig {
            profile: profile.to_string(),
        },
        _ => GpuSharing::None,
    }
}

/// The claim's capacity in canonical units: what its node reported, else
/// what the catalog says its instance type has, else nothing (an unknown
/// type counts as a node without resources rather than failing the status).
fn claim_capacity(claim: &NodeClaim, catalog: &Catalog, sharing: &GpuSharing) -> Resources {
    let reported = claim.status.as_ref().map(|s| &s.capacity);
    if let Some(list) = reported.filter(|l| !l.is_empty()) {
        if let Ok(r) = Resources::parse(list.iter().map(|(k, q)| (k.as_str(), q.0.as_str()))) {
            return r;
        }
    }
    catalog
        .instance_type(&claim.spec.instance_type)
        .map(|it| capacity(it, sharing))
        .unwrap_or_default()
}

/// Canonical units back to quantities: `cpu` in cores (`96`, `1500m`),
/// bytes in the largest binary unit that divides them (`768Gi`), devices as
/// whole numbers.
fn to_resource_list(r: &Resources) -> ResourceList {
    r.iter()
        .map(|(k, v)| (k.to_string(), Quantity(quantity_text(k, v))))
        .collect()
}

fn quantity_text(resource: &str, v: i64) -> String {
    if resource == CPU {
        return if v % 1000 == 0 {
            (v / 1000).to_string()
        } else {
            format!("{v}m")
        };
    }
    let bytes =
        resource == MEMORY || resource == EPHEMERAL_STORAGE || resource.starts_with("hugepages-");
    if !bytes {
        return v.to_string();
    }
    for (suffix, shift) in [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ] {
        let unit = 1i64 << shift;
        if v != 0 && v % unit == 0 {
            return format!("{}{suffix}", v / unit);
        }
    }
    v.to_string()
}

pub(crate) fn k8s_time(t: Time) -> K8sTime {
    K8sTime(
        k8s_openapi::jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// A condition; its transition time is the old one's when the status is
/// unchanged, else `now`.
pub(crate) fn condition(
    old: &[Condition],
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let last_transition_time = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| k8s_time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time,
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{GpuSharing as ApiSharing, NodeClaimSpec, NodeClaimStatus, NodePoolSpec};
    use crate::catalog::CapacityType;
    use chrono::TimeZone;
    use std::collections::BTreeMap;
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static C: OnceLock<Catalog> = OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    fn at(h: u32) -> Time {
        chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, h, 0, 0)
            .single()
            .unwrap()
    }

    fn pool(name: &str, sharing: ApiSharing) -> NodePool {
        let mut p = NodePool::new(
            name,
            NodePoolSpec {
                gpu_sharing: sharing,
                ..NodePoolSpec::default()
            },
        );
        p.metadata.generation = Some(3);
        p
    }

    fn claim(name: &str, pool: &str, instance_type: &str, price: f64, launched: bool) -> NodeClaim {
        let mut c = NodeClaim::new(
            name,
            NodeClaimSpec {
                node_pool: pool.into(),
                instance_type: instance_type.into(),
                zone: "use1-az4".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: price,
                resources: BTreeMap::new(),
                labels: BTreeMap::new(),
                taints: Vec::new(),
                startup_taints: Vec::new(),
                termination_grace_period: None,
                expire_after: None,
            },
        );
        if launched {
            c.status = Some(NodeClaimStatus {
                provider_id: Some(format!("aws:///use1-az4/i-{name}")),
                ..NodeClaimStatus::default()
            });
        }
        c
    }

    fn with_capacity(mut c: NodeClaim, pairs: &[(&str, &str)]) -> NodeClaim {
        let status = c.status.get_or_insert_with(NodeClaimStatus::default);
        status.capacity = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect();
        c
    }

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn a_pools_launched_claims_are_counted_summed_and_priced() {
        let claims = vec![
            with_capacity(
                claim("a", "train", "p5.48xlarge", 30.5, true),
                &[
                    ("cpu", "192"),
                    ("memory", "2000Gi"),
                    ("nvidia.com/gpu", "8"),
                ],
            ),
            with_capacity(
                claim("b", "train", "p5.48xlarge", 31.25, true),
                &[
                    ("cpu", "191500m"),
                    ("memory", "2000Gi"),
                    ("nvidia.com/gpu", "8"),
                ],
            ),
            claim("c", "train", "p5.48xlarge", 30.0, false),
            claim("d", "infer", "g6.xlarge", 0.8, true),
        ];
        let s = node_pool_status(
            &pool("train", ApiSharing::default()),
            &claims,
            catalog(),
            None,
            None,
            at(1),
        );
        assert_eq!(s.nodes, 2);
        assert_eq!(s.cost_per_hour, 61.75);
        assert_eq!(
            s.resources,
            BTreeMap::from([
                ("cpu".to_string(), q("383500m")),
                ("memory".to_string(), q("4000Gi")),
                ("nvidia.com/gpu".to_string(), q("16")),
            ])
        );
    }

    #[test]
    fn a_claim_without_reported_capacity_counts_its_instance_types_under_the_pools_sharing() {
        let claims = vec![claim("a", "infer", "g6.xlarge", 0.8, true)];
        let whole = node_pool_status(
            &pool("infer", ApiSharing::default()),
            &claims,
            catalog(),
            None,
            None,
            at(1),
        );
        assert_eq!(whole.resources.get("nvidia.com/gpu"), Some(&q("1")));
        assert_eq!(whole.resources.get("cpu"), Some(&q("4")));
        let sliced = node_pool_status(
            &pool("infer", ApiSharing::time_slicing(4)),
            &claims,
            catalog(),
            None,
            None,
            at(1),
        );
        assert_eq!(sliced.resources.get("nvidia.com/gpu.shared"), Some(&q("4")));
        assert_eq!(sliced.resources.get("nvidia.com/gpu"), None);
    }

    #[test]
    fn a_valid_pool_is_ready_and_an_invalid_one_names_its_problem() {
        let p = pool("train", ApiSharing::default());
        let ok = node_pool_status(&p, &[], catalog(), None, None, at(1));
        let by_type = |s: &NodePoolStatus, t: &str| {
            s.conditions.iter().find(|c| c.type_ == t).cloned().unwrap()
        };
        assert_eq!(by_type(&ok, READY).status, "True");
        assert_eq!(by_type(&ok, VALIDATION_SUCCEEDED).reason, reasons::VALID);
        assert_eq!(by_type(&ok, READY).observed_generation, Some(3));
        assert_eq!(ok.nodes, 0);
        assert!(ok.resources.is_empty());

        let bad = node_pool_status(
            &p,
            &[],
            catalog(),
            Some("spec.limits[nodes]: not a whole number"),
            Some(&ok),
            at(2),
        );
        let ready = by_type(&bad, READY);
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, reasons::VALIDATION_FAILED);
        assert_eq!(ready.message, "spec.limits[nodes]: not a whole number");
        assert_eq!(ready.last_transition_time, k8s_time(at(2)));
        assert_eq!(by_type(&bad, VALIDATION_SUCCEEDED).status, "False");
    }

    #[test]
    fn an_unchanged_status_keeps_its_transition_times_and_needs_no_patch() {
        let p = pool("train", ApiSharing::default());
        let claims = vec![claim("a", "train", "p5.48xlarge", 30.5, true)];
        let first = node_pool_status(&p, &claims, catalog(), None, None, at(1));
        let again = node_pool_status(&p, &claims, catalog(), None, Some(&first), at(5));
        assert_eq!(again, first);
        assert!(!status_changed(Some(&first), &again));
        assert!(status_changed(None, &again));
        let more = vec![
            claims[0].clone(),
            claim("b", "train", "p5.48xlarge", 30.5, true),
        ];
        let grown = node_pool_status(&p, &more, catalog(), None, Some(&first), at(5));
        assert!(status_changed(Some(&first), &grown));
        assert_eq!(grown.conditions, first.conditions);
    }

    #[test]
    fn quantities_are_written_in_their_natural_units() {
        assert_eq!(quantity_text("cpu", 4000), "4");
        assert_eq!(quantity_text("cpu", 1500), "1500m");
        assert_eq!(quantity_text("memory", 3 << 30), "3Gi");
        assert_eq!(quantity_text("memory", 1000), "1000");
        assert_eq!(quantity_text("nvidia.com/gpu", 0), "0");
        assert_eq!(quantity_text("nvidia.com/gpu", 8), "8");
        assert_eq!(quantity_text("pods", 1024), "1024");
    }
}
