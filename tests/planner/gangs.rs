//! Gangs: planned whole in one zone, or not at all while a member is
//! missing or the whole gang does not fit.

use super::*;

#[test]
fn a_gang_of_sixteen_gets_capacity_in_one_zone() {
    let plan = run(&gang(16, 16), &[gpu_pool("gpu")], &[], Strategy::Mip);
    assert_eq!(placed(&plan), 16, "{:?}", plan.unschedulable);
    let zones: BTreeSet<&str> = plan.nodes.iter().map(|n| n.zone.as_str()).collect();
    assert_eq!(zones.len(), 1, "gang spread over {zones:?}");
}

#[test]
fn a_gang_that_cannot_fit_whole_gets_nothing() {
    let mut pool = gpu_pool("gpu");
    pool.limits.resources.set(l::RESOURCE_GPU, 8);
    let plan = run(&gang(16, 16), &[pool], &[], Strategy::Mip);
    assert!(plan.nodes.is_empty(), "launched {:?}", plan.nodes);
    assert_eq!(plan.unschedulable.len(), 16);
}

#[test]
fn a_gang_whose_members_need_different_types_starts_in_a_zone_that_offers_both() {
    // One member pinned to g6.2xlarge, one to g5.2xlarge; g5.2xlarge has
    // capacity in one zone only (the others just failed to launch). The
    // gang must go whole to that zone: a zone that offers only g6.2xlarge
    // would place one member and strand the other.
    let pinned = |name: &str, instance_type: &str| {
        let mut p = gpu_pod(name, 1);
        p.group = Some(GroupRef {
            name: "ml/pair".into(),
            min_member: 2,
        });
        p.affinity.terms = vec![vec![Requirement::new(
            l::INSTANCE_TYPE,
            Operator::In,
            &[instance_type],
        )]];
        p
    };
    let pods = [pinned("ml/a", "g6.2xlarge"), pinned("ml/b", "g5.2xlarge")];
    let g6_zones: BTreeSet<&str> = catalog()
        .offerings_of(REGION, "g6.2xlarge")
        .map(|o| o.zone_id.as_str())
        .collect();
    let open = catalog()
        .offerings_of(REGION, "g5.2xlarge")
        .map(|o| o.zone_id.clone())
        .filter(|z| g6_zones.contains(z.as_str()))
        .max()
        .expect("a zone offers both");
    let unavailable =
        |o: &quartermaster::catalog::Offering| o.instance_type == "g5.2xlarge" && o.zone_id != open;
    let input = Input {
        catalog: catalog(),
        region: REGION,
        pools: &[gpu_pool("gpu")],
        nodes: &[],
        pods: &pods,
        unavailable: &unavailable,
        learned_rate: None,
        offerings: None,
        now: None,
    };
    let start = std::time::Instant::now();
    let plan = plan::plan(&input, Strategy::Mip, &Options::default(), &|| {
        start.elapsed().as_secs_f64()
    });
    assert_eq!(placed(&plan), 2, "{:?}", plan.unschedulable);
    for n in &plan.nodes {
        assert_eq!(n.zone, open, "{:?}", plan.nodes);
    }
}

#[test]
fn a_gang_with_members_missing_waits() {
    let plan = run(&gang(3, 4), &[gpu_pool("gpu")], &[], Strategy::Mip);
    assert!(plan.nodes.is_empty());
    assert!(
        plan.unschedulable[0].reason.contains("3 of its 4"),
        "{:?}",
        plan.unschedulable
    );
}
