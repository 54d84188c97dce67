//! Fallback offerings for a launch: where else the same node could be
//! bought if the planner's offering has no capacity at launch time, so that
//! a provider that takes ranked alternatives in one call (EC2 CreateFleet
//! overrides) does not need a second planning round for a plain capacity
//! miss. Pure: the catalog, the pool and the claim's pods decide.
//!
//! The rule: the same instance type and capacity type (so the node's shape,
//! price class and interruption profile stay what the planner chose) in the
//! pool's other allowed zones, cheapest first, at most [`MAX_FALLBACKS`].
//! None when a pod of the claim is pinned to a zone (a zone requirement or a
//! zone spread): moving it would break its constraint.

use super::interruption::offering_key;
use super::{ClaimRequest, OfferingKey, World};
use crate::api::labels as l;
use crate::cluster::{Pod, Pool, Resources};

/// Most fallback offerings handed to the provider per launch.
pub const MAX_FALLBACKS: usize = 3;

/// The next-best compatible offerings for `req`, cheapest first (ties by
/// zone), excluding the offering itself. `pods` are the claim's pods as the
/// world has them (pending or not); a pod pinned to a zone empties the list.
pub fn fallbacks(req: &ClaimRequest, world: &World, pods: &[&Pod]) -> Vec<OfferingKey> {
    // A reservation is one zone's: its claim stays where it was planned.
    if req.reservation.is_some() || pods.iter().any(|p| pinned_to_zone(p)) {
        return Vec::new();
    }
    let Some(api_pool) = world
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(req.nodepool.as_str()))
    else {
        return Vec::new();
    };
    let Ok(pool) = Pool::from_api(api_pool, Resources::new()) else {
        return Vec::new();
    };
    let Some(it) = world.catalog.instance_type(&req.offering.instance_type) else {
        return Vec::new();
    };
    let mut found: Vec<(f64, OfferingKey)> = world
        .catalog
        .offerings_of(world.region, &it.name)
        .filter(|o| o.capacity_type == req.offering.capacity_type)
        .filter(|o| o.zone_id != req.offering.zone)
        .filter(|o| {
            let labels =
                crate::cluster::shape::node_labels(it, o, world.catalog.zone_names(), &pool.name);
            pool.requirements.iter().all(|r| r.matches(&labels))
        })
        .map(|o| (o.price_per_hour, offering_key(o)))
        .collect();
    found.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.zone.cmp(&b.1.zone)));
    found
        .into_iter()
        .map(|(_, k)| k)
        .take(MAX_FALLBACKS)
        .collect()
}

/// A pod that must run in the zone the planner chose: it requires a zone
/// label, or spreads over zones.
fn pinned_to_zone(pod: &Pod) -> bool {
    pod.zone_spread.is_some()
        || pod
            .affinity
            .terms
            .iter()
            .flatten()
            .any(|r| r.key == l::ZONE || r.key == l::ZONE_ID)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodePool, NodePoolSpec, Operator, Requirement};
    use crate::catalog::{CapacityType, Catalog};
    use crate::cluster::ZoneSpread;
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static C: OnceLock<Catalog> = OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    fn pool(requirements: Vec<Requirement>) -> NodePool {
        let mut spec = NodePoolSpec {
            capacity_types: vec![CapacityType::Spot, CapacityType::OnDemand],
            ..Default::default()
        };
        spec.template.spec.requirements = requirements;
        NodePool::new("gpu", spec)
    }

    fn world<'a>(pools: &'a [NodePool]) -> World<'a> {
        World {
            nodes_revision: 0,
            catalog: catalog(),
            region: "us-east-1",
            pools,
            pending: &[],
            nodes: &[],
            pdbs: &[],
        }
    }

    fn zones(capacity_type: CapacityType) -> Vec<(String, f64)> {
        catalog()
            .offerings_of("us-east-1", "g5.xlarge")
            .filter(|o| o.capacity_type == capacity_type)
            .map(|o| (o.zone_id.clone(), o.price_per_hour))
            .collect()
    }

    fn request(zone: &str, capacity_type: CapacityType) -> ClaimRequest {
        ClaimRequest {
            cluster_placement: false,
            claim: "gpu-1".into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: zone.into(),
                capacity_type,
            },
            price_per_hour: 1.0,
            pods: vec!["ml/a".into()],
            prewarm_window: None,
            reservation: None,
        }
    }

    #[test]
    fn fallbacks_are_the_same_type_and_capacity_in_other_zones_cheapest_first() {
        let all = zones(CapacityType::Spot);
        assert!(all.len() >= 3, "the fixture needs several zones: {all:?}");
        let chosen = &all[0].0;
        let pools = [pool(vec![])];
        let pod = Pod::new("ml/a", Resources::new());
        let got = fallbacks(
            &request(chosen, CapacityType::Spot),
            &world(&pools),
            &[&pod],
        );
        assert!(!got.is_empty() && got.len() <= MAX_FALLBACKS);
        assert!(got.iter().all(|k| k.instance_type == "g5.xlarge"
            && k.capacity_type == CapacityType::Spot
            && &k.zone != chosen));
        let price = |z: &str| all.iter().find(|(zz, _)| zz == z).unwrap().1;
        let prices: Vec<f64> = got.iter().map(|k| price(&k.zone)).collect();
        assert!(prices.windows(2).all(|w| w[0] <= w[1]), "{prices:?}");
        // The cheapest other zone leads.
        let cheapest = all
            .iter()
            .filter(|(z, _)| z != chosen)
            .map(|(_, p)| *p)
            .fold(f64::INFINITY, f64::min);
        assert_eq!(prices[0], cheapest);
    }

    #[test]
    fn fallbacks_stay_in_the_pools_allowed_zones() {
        let all = zones(CapacityType::OnDemand);
        let (a, b) = (all[0].0.clone(), all[1].0.clone());
        let pools = [pool(vec![Requirement::new(
            l::ZONE_ID,
            Operator::In,
            &[&a, &b],
        )])];
        let got = fallbacks(&request(&a, CapacityType::OnDemand), &world(&pools), &[]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].zone, b);
    }

    #[test]
    fn no_fallbacks_when_a_pod_is_pinned_to_a_zone() {
        let all = zones(CapacityType::Spot);
        let pools = [pool(vec![])];
        let mut pinned = Pod::new("ml/a", Resources::new());
        pinned.affinity.terms = vec![vec![Requirement::new(l::ZONE, Operator::In, &[&all[0].0])]];
        let req = request(&all[0].0, CapacityType::Spot);
        assert!(fallbacks(&req, &world(&pools), &[&pinned]).is_empty());
        let mut spread = Pod::new("ml/b", Resources::new());
        spread.zone_spread = Some(ZoneSpread {
            max_skew: 1,
            selector: "app=x".into(),
        });
        assert!(fallbacks(&req, &world(&pools), &[&spread]).is_empty());
        let free = Pod::new("ml/c", Resources::new());
        assert!(!fallbacks(&req, &world(&pools), &[&free]).is_empty());
    }
}
