//! DRA claims as demand the planner packs: before the MIP (or the greedy
//! baseline) runs, each pod whose claims were matched
//! ([`crate::cluster::dra`]) is given the devices its claims take, as
//! resources (`gpu.nvidia.com/gpu: 8`) that only nodes launched to serve DRA
//! claims offer ([`super::candidates`]), and a requirement on the instance
//! types whose devices satisfy them. The MIP keeps its shape: devices are
//! one more resource. Pods that share a ResourceClaim are planned as one
//! pod (their claim is one allocation on one node) and given back their
//! names after. Which alternative of a `firstAvailable` request is planned:
//! the first one some pool can serve, as the user wrote them; among
//! alternatives of the same rank (and, for a pool that opts in with
//! `dra.firstAvailable: Cheapest`, among all it can serve) the one whose
//! node costs the pod least, price plus expected interruption cost.
//! See `docs/dra.md`.

use super::candidates::{pods_per_node, Candidate};
use super::classes::Class;
use super::{risk, Input, Unschedulable};
use crate::api::labels as l;
use crate::api::{FirstAvailable, Operator};
use crate::cluster::dra::{reasons, why_not, Allocation, PodDevices, ShapeKey};
use crate::cluster::{Pod, Requirement, Resources};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The pods ready to plan.
#[derive(Debug, Default)]
pub struct Prepared {
    /// The pods with their devices as demand (one pod per group of pods
    /// sharing a claim), and every pod without claims as it was.
    pub pods: Vec<Pod>,
    /// Pods with claims no pool can serve, and why.
    pub held: Vec<Unschedulable>,
    /// The pods each planned pod stands for, when it stands for several.
    pub members: HashMap<String, Vec<String>>,
}

/// The instance types of one way to serve a pod's claims and the
/// candidates allowed to.
type Serving<'a> = (BTreeSet<&'a str>, Vec<usize>);

/// The shape a candidate launches: its type with its pool's MIG profile.
fn shape_of(input: &Input, c: &Candidate) -> ShapeKey {
    ShapeKey::new(&c.offering.instance_type, input.pools[c.pool].gpu_layout())
}

/// Whether `c` is a node launched to serve DRA claims that has room for
/// `demand` on a fresh node.
fn serves(c: &Candidate, demand: &Resources) -> bool {
    l::LabelLookup::label(&c.labels, l::DRA).is_some_and(|v| v == "true")
        && demand.fits_in(&c.allocatable)
}

/// Prepares `input.pods` for planning (see the module doc).
pub fn prepare(input: &Input, cands: &[Candidate]) -> Prepared {
    let mut out = Prepared::default();
    // Pods sharing a claim become one pod, in the order of their first.
    let mut groups: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    let mut order: Vec<Result<&Pod, String>> = Vec::new();
    for p in input.pods {
        match p.devices.as_ref().and_then(|d| d.group.clone()) {
            Some(g) => {
                if !groups.contains_key(&g) {
                    order.push(Err(g.clone()));
                }
                groups.entry(g).or_default().push(p);
            }
            None => order.push(Ok(p)),
        }
    }
    for item in order {
        let pod = match item {
            Ok(p) => p.clone(),
            Err(g) => {
                let members = &groups[&g];
                let merged = merge(members);
                if members.len() > 1 {
                    out.members.insert(
                        merged.name.clone(),
                        members.iter().map(|m| m.name.clone()).collect(),
                    );
                }
                merged
            }
        };
        let Some(devices) = pod.devices.clone() else {
            out.pods.push(pod);
            continue;
        };
        match demand(input, cands, &pod, &devices) {
            Ok(p) => out.pods.push(p),
            Err(reason) => {
                let names = out
                    .members
                    .remove(&pod.name)
                    .unwrap_or_else(|| vec![pod.name.clone()]);
                out.held.extend(names.into_iter().map(|pod| Unschedulable {
                    pod,
                    reason: reason.clone(),
                }));
            }
        }
    }
    out
}

/// Pods sharing a claim as one pod: the first's name and constraints, the
/// requests of all, the tolerations all have.
fn merge(members: &[&Pod]) -> Pod {
    let mut p = members[0].clone();
    for m in &members[1..] {
        p.requests.add(&m.requests);
        p.tolerations.retain(|t| m.tolerations.contains(t));
        if m.affinity != p.affinity {
            p.affinity = and(&p.affinity.terms, &m.affinity.terms);
        }
    }
    // One pod slot each.
    p.requests
        .set(crate::cluster::resources::PODS, members.len() as i64);
    // Members of one gang merged here are one unit of it now (a pod group
    // whose members share the group's claim becomes a gang of one).
    if let Some(g) = p.group.as_mut() {
        let same = members
            .iter()
            .filter(|m| m.group.as_ref().is_some_and(|mg| mg.name == g.name))
            .count() as u32;
        g.min_member = g.min_member.saturating_sub(same - 1).max(1);
    }
    p
}

/// The terms of two affinities ANDed.
fn and(a: &[Vec<Requirement>], b: &[Vec<Requirement>]) -> crate::cluster::NodeAffinity {
    let terms = match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_vec(),
        (_, true) => a.to_vec(),
        _ => a
            .iter()
            .flat_map(|x| b.iter().map(move |y| x.iter().chain(y).cloned().collect()))
            .collect(),
    };
    crate::cluster::NodeAffinity { terms }
}

/// `pod` with its claims' devices as demand and the requirement that
/// goes with them, or why no pool can serve its claims.
fn demand(
    input: &Input,
    cands: &[Candidate],
    pod: &Pod,
    devices: &PodDevices,
) -> Result<Pod, String> {
    if let Some(node) = &devices.pinned {
        return pinned(input, pod, devices, node);
    }
    // Each shape some pool can launch to serve the claims, with its
    // candidates.
    let mut servable: BTreeMap<&ShapeKey, (&Allocation, Vec<usize>)> = BTreeMap::new();
    for (i, c) in cands.iter().enumerate() {
        let shape = shape_of(input, c);
        if let Some((key, Ok(a))) = devices.shapes.get_key_value(&shape) {
            if serves(c, &a.demand) {
                servable.entry(key).or_insert((a, Vec::new())).1.push(i);
            }
        }
    }
    if servable.is_empty() {
        return Err(unservable(input, cands, devices));
    }
    let first = servable
        .values()
        .map(|(a, _)| &a.choice)
        .min()
        .cloned()
        .unwrap_or_default();
    // (demand, in the user's order) -> types and the candidates allowed.
    let mut options: BTreeMap<(Resources, bool), Serving<'_>> = BTreeMap::new();
    for (shape, (a, cs)) in &servable {
        let in_order = a.choice == first;
        let allowed: Vec<usize> = cs
            .iter()
            .copied()
            .filter(|&i| {
                in_order || input.pools[cands[i].pool].first_available == FirstAvailable::Cheapest
            })
            .collect();
        if allowed.is_empty() {
            continue;
        }
        let e = options.entry((a.demand.clone(), in_order)).or_default();
        e.0.insert(shape.instance_type.as_str());
        e.1.extend(allowed);
    }
    let with = |d: &Resources| {
        let mut p = pod.clone();
        p.requests.add(d);
        p
    };
    let chosen = if options.len() == 1 {
        options.into_iter().next()
    } else {
        options
            .into_iter()
            .map(|(k, v)| {
                let cost = cheapest(input, cands, &with(&k.0), &v.1);
                (cost, k, v)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, k, v)| (k, v))
    };
    let Some(((d, in_order), (types, allowed))) = chosen else {
        return Err(unservable(input, cands, devices));
    };
    let mut p = with(&d);
    // The types whose devices serve the claims, unless the devices alone
    // say it: no other node launched for DRA has room for them.
    let needed = cands
        .iter()
        .any(|c| serves(c, &d) && !types.contains(c.offering.instance_type.as_str()));
    let types: Vec<&str> = types.into_iter().collect();
    let mut reqs = Vec::new();
    if needed {
        reqs.push(Requirement::new(l::INSTANCE_TYPE, Operator::In, &types));
    }
    if !in_order {
        // An alternative after the first that some pool can serve: only on
        // the pools that chose it by price.
        let mut pools: Vec<&str> = allowed
            .iter()
            .map(|&i| input.pools[cands[i].pool].name.as_str())
            .collect();
        pools.sort_unstable();
        pools.dedup();
        reqs.push(Requirement::new(l::NODEPOOL, Operator::In, &pools));
    }
    if !reqs.is_empty() {
        p.affinity = and(&p.affinity.terms, &[reqs]);
    }
    Ok(p)
}

/// The least a pod costs per hour on one of `allowed` (its share of the
/// node's price plus its expected interruption cost), `f64::MAX` where
/// none takes it.
fn cheapest(input: &Input, cands: &[Candidate], pod: &Pod, allowed: &[usize]) -> f64 {
    let class = Class::of(pod, 0);
    allowed
        .iter()
        .filter_map(|&i| {
            let c = &cands[i];
            let k = pods_per_node(&class, c);
            (k > 0).then(|| {
                let aversion = input.pools[c.pool].risk_aversion;
                c.price() / f64::from(k) + risk::pod_risk_cost(&class.exposure, c, k, aversion)
            })
        })
        .fold(f64::MAX, f64::min)
}

/// A pod whose claim is allocated on `node`: it can run only there, with
/// its other claims' devices taken from that node's shape.
fn pinned(input: &Input, pod: &Pod, devices: &PodDevices, node: &str) -> Result<Pod, String> {
    let Some(n) = input.nodes.iter().find(|n| n.name == node) else {
        return Err(format!(
            "a DRA claim of it is allocated on node {node}, which is not one Quartermaster can place pods on"
        ));
    };
    let mut p = pod.clone();
    let layout = n
        .nodepool
        .as_ref()
        .and_then(|np| input.pools.iter().find(|x| x.name == *np))
        .map(crate::cluster::Pool::gpu_layout)
        .unwrap_or_default();
    let shape = ShapeKey::new(n.instance_type.as_deref().unwrap_or_default(), layout);
    // Claims still to allocate are matched on the node's shape (a pod
    // whose claims are all allocated takes nothing more there).
    match devices.shapes.get(&shape) {
        Some(Ok(a)) => p.requests.add(&a.demand),
        Some(Err(e)) => return Err(format!("on node {node}: {e}")),
        None => {}
    }
    p.affinity = and(
        &p.affinity.terms,
        &[vec![Requirement::new(l::HOSTNAME, Operator::In, &[node])]],
    );
    Ok(p)
}

/// Why no pool can launch a node that serves `devices`: the types that
/// would, if any, and why the types the pools launch do not.
fn unservable(input: &Input, cands: &[Candidate], devices: &PodDevices) -> String {
    let launched: BTreeSet<ShapeKey> = cands.iter().map(|c| shape_of(input, c)).collect();
    let fit: Vec<String> = devices
        .shapes
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(k, _)| k.to_string())
        .take(4)
        .collect();
    let ours = why_not(
        devices
            .shapes
            .iter()
            .filter(|(k, _)| launched.contains(*k))
            .map(|(k, v)| (k, v.as_ref())),
        3,
    );
    let no_driver = cands.iter().any(|c| {
        let shape = shape_of(input, c);
        devices
            .shapes
            .get(&shape)
            .is_some_and(|r| r.as_ref().is_ok_and(|a| !serves(c, &a.demand)))
    });
    let mut why = if fit.is_empty() {
        "no instance type's devices satisfy its DRA claims".to_string()
    } else {
        format!(
            "no NodePool may launch an instance type whose devices satisfy its DRA claims ({} would)",
            fit.join(", ")
        )
    };
    if no_driver {
        why.push_str("; a pool that may launch one does not run the DRA drivers they need (spec.dra.drivers)");
    }
    if !ours.is_empty() {
        why.push_str(&format!("; on the types the pools launch: {ours}"));
    }
    why
}

/// Gives the plan back the names of the pods each planned pod stood for.
pub fn expand(plan: &mut super::Plan, members: &HashMap<String, Vec<String>>) {
    if members.is_empty() {
        return;
    }
    let all = |name: &String| {
        members
            .get(name)
            .cloned()
            .unwrap_or_else(|| vec![name.clone()])
    };
    for n in &mut plan.nodes {
        n.pods = n.pods.iter().flat_map(all).collect();
    }
    plan.existing = std::mem::take(&mut plan.existing)
        .into_iter()
        .flat_map(|e| {
            all(&e.pod)
                .into_iter()
                .map(move |pod| super::ExistingPlacement {
                    pod,
                    node: e.node.clone(),
                })
        })
        .collect();
    plan.unschedulable = std::mem::take(&mut plan.unschedulable)
        .into_iter()
        .flat_map(|u| {
            all(&u.pod).into_iter().map(move |pod| Unschedulable {
                pod,
                reason: u.reason.clone(),
            })
        })
        .collect();
}

/// For `--explain`: for each distinct set of claims, which devices were
/// planned on which types, and what ruled each other type out (the
/// selector, constraint or class), one line per reason.
pub fn explain(input: &Input) -> Vec<String> {
    // Pods not placeable are reported with their reasons already.
    let pods: Vec<Pod> = input
        .pods
        .iter()
        .filter(|p| p.not_placeable.is_empty())
        .cloned()
        .collect();
    let input = &Input {
        pods: &pods,
        ..*input
    };
    let cands = super::candidates::candidates(input);
    let launched: BTreeSet<ShapeKey> = cands.iter().map(|c| shape_of(input, c)).collect();
    let prepared = prepare(input, &cands);
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for p in &prepared.pods {
        let Some(d) = &p.devices else { continue };
        if !seen.insert(std::sync::Arc::as_ptr(&d.shapes)) {
            continue;
        }
        let demand: Resources = p
            .requests
            .iter()
            .filter(|(k, _)| d.shapes.values().flatten().any(|a| a.demand.get(k) > 0))
            .fold(Resources::new(), |r, (k, v)| r.with(k, v));
        // The launched types where the claims take these devices (and the
        // pod's requirements, which may narrow them, allow).
        let mut types: Vec<String> = d
            .shapes
            .iter()
            .filter(|(k, r)| launched.contains(*k) && r.as_ref().is_ok_and(|a| a.demand == demand))
            .filter(|(k, _)| {
                cands.iter().any(|c| {
                    c.offering.instance_type == k.instance_type && p.affinity.matches(&c.labels)
                })
            })
            .map(|(k, _)| k.to_string())
            .collect();
        types.dedup();
        let devices: Vec<String> = demand.iter().map(|(k, v)| format!("{v} {k}")).collect();
        out.push(format!(
            "pods like {}: {} take {} on {}",
            p.name,
            d.claims.join(", "),
            devices.join(", "),
            types.join(", ")
        ));
        let ruled_out = reasons(
            d.shapes
                .iter()
                .filter(|(k, _)| launched.contains(*k))
                .map(|(k, v)| (k, v.as_ref())),
            usize::MAX,
        );
        out.extend(ruled_out.into_iter().map(|r| format!("  ruled out: {r}")));
    }
    for h in &prepared.held {
        out.push(format!("{}: {}", h.pod, h.reason));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{plan, Options, Strategy};
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::dra::{Objects, Resolver};
    use crate::cluster::{ClaimRef, GpuSharing, Pool, Toleration};
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static C: OnceLock<Catalog> = OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    const CLASSES: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
"#;

    /// The DRA objects of `CLASSES` and `yaml`, read as `plan` reads them.
    fn objects(yaml: &str) -> Objects {
        let mut m = crate::cluster::workloads::Manifests::default();
        m.parse(&format!("{CLASSES}\n---\n{yaml}")).unwrap();
        assert!(m.pods.is_empty() && m.other.is_empty(), "{:?}", m.other);
        m.dra
    }

    /// A GPU-tolerating pod with one claim: a template's (`template`) or a
    /// shared ResourceClaim (`claim:NAME`).
    fn pod(name: &str, source: &str) -> Pod {
        let mut p = Pod::new(name, Resources::new().with("cpu", 2000));
        p.tolerations.push(Toleration::exists(l::TAINT_GPU));
        let (claim, template) = match source.strip_prefix("claim:") {
            Some(c) => (Some(c.to_string()), None),
            None => (None, Some(source.to_string())),
        };
        p.resource_claims.push(ClaimRef {
            name: "gpu".into(),
            claim,
            template,
            generated: None,
            group: None,
        });
        p
    }

    fn planned(pools: &[Pool], yaml: &str, mut pods: Vec<Pod>) -> super::super::Plan {
        Resolver::new()
            .share_gpus(pools.iter().filter_map(|p| p.dra_gpu_shares))
            .attach(&mut pods, &objects(yaml), catalog());
        let input = Input::offline(catalog(), "us-east-1", pools, &pods);
        plan(&input, Strategy::Mip, &Options::default(), &|| 0.0)
    }

    fn template(name: &str, request: &str) -> String {
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n  spec:\n    devices:\n      requests:\n{request}\n"
        )
    }

    fn one_type(p: &super::super::Plan) -> String {
        let types: BTreeSet<&str> = p.nodes.iter().map(|n| n.instance_type.as_str()).collect();
        assert_eq!(types.len(), 1, "{p:#?}");
        types.into_iter().next().unwrap().to_string()
    }

    #[test]
    fn eight_h100s_by_product_name_plan_a_p5_launched_to_serve_dra() {
        let yaml = template(
            "eight-h100",
            "      - name: gpus\n        exactly:\n          deviceClassName: gpu.nvidia.com\n          count: 8\n          selectors: [{cel: {expression: \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'\"}}]",
        );
        let p = planned(
            &[Pool::new("gpu")],
            &yaml,
            vec![pod("ml/train", "eight-h100")],
        );
        assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
        assert_eq!(one_type(&p), "p5.48xlarge");
        assert_eq!(p.nodes[0].labels[l::DRA], "true");
    }

    #[test]
    fn one_gpu_with_40_gib_plans_a_type_whose_gpu_has_that_much() {
        let yaml = template(
            "big",
            "      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n          selectors: [{cel: {expression: \"device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0\"}}]",
        );
        let p = planned(&[Pool::new("gpu")], &yaml, vec![pod("ml/infer", "big")]);
        let it = catalog().instance_type(&one_type(&p)).unwrap().clone();
        let gib = it.accelerator.unwrap().memory_mib_per_device / 1024;
        assert!(gib >= 40, "{} has {gib} GiB GPUs", it.name);
    }

    const H100_ELSE_L40S: &str = "      - name: gpu\n        firstAvailable:\n        - {name: h100, deviceClassName: gpu.nvidia.com, selectors: [{cel: {expression: \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'\"}}]}\n        - {name: l40s, deviceClassName: gpu.nvidia.com, selectors: [{cel: {expression: \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'\"}}]}";

    fn families(name: &str, families: &[&str]) -> Pool {
        let mut p = Pool::new(name);
        p.requirements
            .push(Requirement::new(l::INSTANCE_FAMILY, Operator::In, families));
        p
    }

    #[test]
    fn first_available_follows_the_users_order_and_falls_through_when_no_pool_offers_the_first() {
        let yaml = template("pick", H100_ELSE_L40S);
        let p = planned(&[Pool::new("gpu")], &yaml, vec![pod("ml/a", "pick")]);
        // The L40S is cheaper; the user asked for an H100 first.
        assert!(one_type(&p).starts_with("p5."), "{p:#?}");
        let p = planned(
            &[families("g6e", &["g6e"])],
            &yaml,
            vec![pod("ml/a", "pick")],
        );
        assert!(one_type(&p).starts_with("g6e."), "{p:#?}");
    }

    #[test]
    fn a_pool_may_choose_among_alternatives_by_risk_adjusted_price() {
        let yaml = template("pick", H100_ELSE_L40S);
        let mut cheapest = Pool::new("gpu");
        cheapest.first_available = FirstAvailable::Cheapest;
        let p = planned(&[cheapest], &yaml, vec![pod("ml/a", "pick")]);
        assert!(one_type(&p).starts_with("g6e."), "{p:#?}");
    }

    #[test]
    fn two_pods_sharing_a_claim_land_on_one_node_with_its_devices_once() {
        let yaml = "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: pair, namespace: ml}\nspec:\n  devices:\n    requests:\n    - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}\n";
        let p = planned(
            &[families("g6", &["g6"])],
            yaml,
            vec![pod("ml/a", "claim:pair"), pod("ml/b", "claim:pair")],
        );
        assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
        assert_eq!(p.nodes.len(), 1, "{p:#?}");
        assert_eq!(p.nodes[0].pods, ["ml/a", "ml/b"]);
        // Two GPUs for the pair, not four: a 4-GPU g6 would be more than it needs.
        let it = catalog().instance_type(&p.nodes[0].instance_type).unwrap();
        assert!(it.accelerator.as_ref().unwrap().count >= 2);
    }

    #[test]
    fn four_quarter_claims_share_one_gpu_of_an_mps_pool_and_need_four_without_sharing() {
        let yaml = template(
            "quarter",
            "      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n          capacity: {requests: {memory: 10Gi}}",
        );
        // Light on CPU: the GPU, not the CPU, decides how many share a node.
        let pods = || {
            (0..4)
                .map(|i| {
                    let mut p = pod(&format!("ml/p{i}"), "quarter");
                    p.requests.set("cpu", 500);
                    p
                })
                .collect()
        };
        let gpus = |p: &super::super::Plan| -> u32 {
            p.nodes
                .iter()
                .map(|n| {
                    let it = catalog().instance_type(&n.instance_type).unwrap();
                    it.accelerator.as_ref().map_or(0, |a| a.count)
                })
                .sum()
        };
        // An L40S has 45 GiB: in four shares, a 10Gi claim is one share.
        let mut mps = families("mps", &["g6e"]);
        mps.sharing = GpuSharing::TimeSlicing { replicas: 4 };
        mps.dra_gpu_shares = Some(4);
        let shared = planned(&[mps], &yaml, pods());
        assert!(
            shared.unschedulable.is_empty(),
            "{:?}",
            shared.unschedulable
        );
        assert_eq!(shared.nodes.len(), 1, "{shared:#?}");
        assert_eq!(shared.nodes[0].pods.len(), 4);
        assert_eq!(gpus(&shared), 1, "{shared:#?}");
        let whole = planned(&[families("whole", &["g6e"])], &yaml, pods());
        assert!(whole.unschedulable.is_empty(), "{:?}", whole.unschedulable);
        assert_eq!(gpus(&whole), 4, "{whole:#?}");
    }

    #[test]
    fn unsatisfiable_claims_and_unknown_classes_are_reported_not_placed() {
        let yaml = format!(
            "{}---\n{}",
            template(
                "a300",
                "      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n          selectors: [{cel: {expression: \"device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A300'\"}}]"
            ),
            template(
                "tpu",
                "      - {name: t, exactly: {deviceClassName: tpu.example.com}}"
            ),
        );
        let p = planned(
            &[Pool::new("gpu")],
            &yaml,
            vec![pod("ml/a", "a300"), pod("ml/b", "tpu")],
        );
        assert!(p.nodes.is_empty(), "{p:#?}");
        let why: BTreeMap<&str, &str> = p
            .unschedulable
            .iter()
            .map(|u| (u.pod.as_str(), u.reason.as_str()))
            .collect();
        assert!(
            why["ml/a"].contains("no instance type can satisfy its DRA claims: claim gpu (template a300) request gpu: selector 0"),
            "{why:#?}"
        );
        assert!(
            why["ml/b"].contains("claim gpu (template tpu): devices.requests[0].exactly.deviceClassName: DeviceClass \"tpu.example.com\" does not exist"),
            "{why:#?}"
        );
    }

    #[test]
    fn a_pool_without_the_drivers_is_not_launched_for_claims_and_says_so() {
        let yaml = template(
            "one",
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}",
        );
        let mut plugin_only = Pool::new("plugin");
        plugin_only.dra_drivers = Some(Vec::new());
        let p = planned(&[plugin_only], &yaml, vec![pod("ml/a", "one")]);
        assert!(p.nodes.is_empty(), "{p:#?}");
        assert!(
            p.unschedulable[0]
                .reason
                .contains("does not run the DRA drivers they need"),
            "{:?}",
            p.unschedulable
        );
    }
}
