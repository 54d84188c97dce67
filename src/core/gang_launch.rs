//! EFA gangs launched together into a placement group: which claims the
//! provisioner launched for each such gang, so that when one of them is
//! gone before it ever became Ready (EC2 had no capacity for the placement
//! group, or the launch or registration timed out), the other members'
//! claims (in flight, or Ready since) are released (deleted, their pods
//! evicted by the claims' drain) and the gang is planned again whole,
//! rather than left partly launched. Memory only: a restarted core knows no
//! launches, and a gang then falls back to the planner's rule (its pending
//! members are placed on in-flight nodes whole or not at all).
//!
//! A launch is followed until all its claims are Ready: a member whose node
//! is gone after that is the gang drains' business ([`super::gang`]).

use super::{Action, DisruptionReason, OfferingKey, World};
use crate::cluster::Pod;
use std::collections::{BTreeMap, BTreeSet};

/// One gang's launch: its claims, and which were seen in the world still in
/// flight and which became Ready.
#[derive(Debug, Clone, Default)]
struct Launch {
    /// Each claim, with its offering.
    claims: BTreeMap<String, OfferingKey>,
    seen: BTreeSet<String>,
    ready: BTreeSet<String>,
    /// Claims whose offering had a capacity error since they were launched
    /// (such a claim is deleted at once, possibly before it was seen).
    out_of_capacity: BTreeSet<String>,
}

/// The launches of EFA gangs not yet Ready whole.
#[derive(Debug, Clone, Default)]
pub struct GangLaunches {
    gangs: BTreeMap<String, Launch>,
}

/// Whether `pod` goes into a placement group on a node of `instance_type`
/// in `pool`: it is a gang member that requests EFA, its pool asks for EFA
/// (`spec.template.spec.efa`) and the type has it, or its gang must share
/// one network block (`Pod::network_block`).
fn efa_gang_member(world: &World, pool: &str, instance_type: &str, pod: &Pod) -> bool {
    if pod.group.is_none() {
        return false;
    }
    if pod.network_block.is_some() {
        return true;
    }
    let requests = pod.requests.get(crate::api::labels::RESOURCE_EFA) > 0;
    let pool_asks = world
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(pool))
        .is_some_and(|p| p.spec.template.spec.efa);
    let has_efa = world
        .catalog
        .instance_type(instance_type)
        .is_some_and(|it| it.efa_supported);
    requests || (pool_asks && has_efa)
}

impl GangLaunches {
    /// Remembers the claims of `actions`' launches made for EFA gang
    /// members (`pods`: the demand they were planned for).
    pub fn record(&mut self, world: &World, pods: &[Pod], actions: &[Action]) {
        for a in actions {
            let Action::Launch(req) = a else { continue };
            for name in &req.pods {
                let Some(pod) = pods.iter().find(|p| &p.name == name) else {
                    continue;
                };
                let member =
                    efa_gang_member(world, &req.nodepool, &req.offering.instance_type, pod);
                if let (true, Some(g)) = (member, &pod.group) {
                    let launch = self.gangs.entry(g.name.clone()).or_default();
                    launch
                        .claims
                        .insert(req.claim.clone(), req.offering.clone());
                }
            }
        }
    }

    /// Takes in a capacity error for `offering`: the gangs' claims of it
    /// that are gone failed, seen before or not.
    pub fn out_of_capacity(&mut self, offering: &OfferingKey) {
        for launch in self.gangs.values_mut() {
            for (claim, o) in &launch.claims {
                if o == offering {
                    launch.out_of_capacity.insert(claim.clone());
                }
            }
        }
    }

    /// Takes in that `claim` could not even be created: it failed as a
    /// launch without capacity does, seen or not.
    pub fn launch_failed(&mut self, claim: &str) {
        for launch in self.gangs.values_mut() {
            if launch.claims.contains_key(claim) {
                launch.out_of_capacity.insert(claim.to_string());
            }
        }
    }

    /// Deletes of the other claims (in flight or Ready) of every gang one
    /// of whose claims is gone before it became Ready, after it was seen in flight or a
    /// capacity error for its offering; such gangs, and gangs whose claims
    /// all became Ready, are forgotten. Other claims not seen yet (the
    /// driver is still creating them) are waited for.
    pub fn release(&mut self, world: &World) -> Vec<Action> {
        let mut out = Vec::new();
        self.gangs.retain(|_, launch| {
            let mut failed = false;
            for claim in launch.claims.keys() {
                match world.nodes.iter().find(|n| &n.claim == claim) {
                    Some(n) if n.state.in_flight => {
                        launch.seen.insert(claim.clone());
                    }
                    Some(_) => {
                        launch.seen.insert(claim.clone());
                        launch.ready.insert(claim.clone());
                    }
                    None => {
                        failed |= (launch.seen.contains(claim)
                            || launch.out_of_capacity.contains(claim))
                            && !launch.ready.contains(claim)
                    }
                }
            }
            if failed {
                // Members already Ready go too: their pods alone cannot
                // start the gang, and would hold the rest back.
                let members = world
                    .nodes
                    .iter()
                    .filter(|n| launch.claims.contains_key(&n.claim));
                for n in members {
                    out.push(Action::Delete {
                        claim: n.claim.clone(),
                        reason: DisruptionReason::GangLaunchFailed,
                    });
                }
                return false;
            }
            launch.ready.len() < launch.claims.len()
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::interruption::fixtures::{node, Fixture, NodeExt};
    use crate::core::ClaimRequest;

    fn member(name: &str) -> Pod {
        let mut p = Pod::new(
            name,
            crate::cluster::Resources::new().with(crate::api::labels::RESOURCE_EFA, 1),
        );
        p.group = Some(crate::cluster::GroupRef {
            name: "ml/g".into(),
            min_member: 2,
        });
        p
    }

    fn p5() -> OfferingKey {
        OfferingKey {
            instance_type: "p5.48xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: crate::catalog::CapacityType::OnDemand,
        }
    }

    fn launch(claim: &str, pod: &str) -> Action {
        Action::Launch(ClaimRequest {
            claim: claim.into(),
            nodepool: "gpu".into(),
            offering: p5(),
            price_per_hour: 1.0,
            pods: vec![pod.into()],
            prewarm_window: None,
            reservation: None,
        })
    }

    fn recorded() -> GangLaunches {
        let mut g = GangLaunches::default();
        let pods = [
            member("ml/a"),
            member("ml/b"),
            Pod::new("ml/solo", Default::default()),
        ];
        let actions = [
            launch("a", "ml/a"),
            launch("b", "ml/b"),
            launch("c", "ml/solo"),
        ];
        g.record(&Fixture::new([]).world(), &pods, &actions);
        assert_eq!(g.gangs["ml/g"].claims.len(), 2, "only the gang's claims");
        g
    }

    fn release_of(claim: &str) -> Action {
        Action::Delete {
            claim: claim.into(),
            reason: DisruptionReason::GangLaunchFailed,
        }
    }

    #[test]
    fn claims_not_seen_yet_are_waited_for_and_a_gang_ready_whole_is_forgotten() {
        let mut g = recorded();
        // The driver has not created the claims yet: nothing is released.
        assert!(g.release(&Fixture::new([]).world()).is_empty());
        let f = Fixture::new([node("a").not_ready()]);
        assert!(g.release(&f.world()).is_empty());
        let f = Fixture::new([node("a"), node("b")]);
        assert!(g.release(&f.world()).is_empty());
        assert!(g.gangs.is_empty(), "ready whole: forgotten");
    }

    #[test]
    fn a_member_gone_before_ready_releases_the_others_still_in_flight() {
        let mut g = recorded();
        let f = Fixture::new([node("a").not_ready(), node("b").not_ready()]);
        assert!(g.release(&f.world()).is_empty());
        let f = Fixture::new([node("b").not_ready()]);
        assert_eq!(g.release(&f.world()), [release_of("b")]);
        assert!(g.gangs.is_empty(), "released once");
        assert!(g.release(&f.world()).is_empty());
    }

    #[test]
    fn a_member_out_of_capacity_before_it_was_seen_releases_the_others_too() {
        let mut g = recorded();
        // The driver created both claims and launched them in one round:
        // `a` failed (and was deleted) before the core saw it.
        g.out_of_capacity(&p5());
        let f = Fixture::new([node("b").not_ready()]);
        assert_eq!(g.release(&f.world()), [release_of("b")]);
    }

    #[test]
    fn a_gang_that_must_share_one_network_block_is_recorded_without_efa() {
        let block = |name: &str| {
            let mut p = member(name);
            p.requests.set(crate::api::labels::RESOURCE_EFA, 0);
            p.network_block = Some(crate::api::labels::network_node_layer(3));
            p
        };
        let mut g = GangLaunches::default();
        let actions = [launch("a", "ml/a"), launch("b", "ml/b")];
        g.record(
            &Fixture::new([]).world(),
            &[block("ml/a"), block("ml/b")],
            &actions,
        );
        assert_eq!(g.gangs["ml/g"].claims.len(), 2);
        let f = Fixture::new([node("a").not_ready(), node("b").not_ready()]);
        assert!(g.release(&f.world()).is_empty());
        let f = Fixture::new([node("b").not_ready()]);
        assert_eq!(g.release(&f.world()), [release_of("b")]);
        // Neither EFA nor one block: a gang launched as any other.
        let mut g = GangLaunches::default();
        let plain = |name: &str| {
            let mut p = block(name);
            p.network_block = None;
            p
        };
        g.record(
            &Fixture::new([]).world(),
            &[plain("ml/a"), plain("ml/b")],
            &actions,
        );
        assert!(g.gangs.is_empty());
    }

    #[test]
    fn a_member_ready_already_is_released_with_the_gang() {
        let mut g = recorded();
        let f = Fixture::new([node("a"), node("b").not_ready()]);
        assert!(g.release(&f.world()).is_empty());
        // `b` times out registering: `a`, Ready and perhaps running its
        // member, cannot start the gang alone.
        let f = Fixture::new([node("a")]);
        assert_eq!(g.release(&f.world()), [release_of("a")]);
    }
}
