//! Allocating claims on one node shape: the devices of an instance type's
//! templates (GPUs whole or partitioned, as a pool has them) taken for
//! every request of every claim of a pod, as the scheduler's allocator
//! takes them from a node's ResourceSlices: each request's alternatives in
//! the user's order, the first that its selectors, count, capacity and the
//! claim's constraints allow. The result is the devices taken, by planner
//! resource, or why the shape cannot serve the claims.

use super::cel::{Env, Outcome};
use super::compile::{Alternative, Claim, Mode, Rule};
use crate::catalog::devices::{qualified, Attribute, AttributeValue, DeviceTemplate};
use crate::cluster::Resources;

/// Devices taken on one node shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// Devices by planner resource (`gpu.nvidia.com/gpu: 8`).
    pub demand: Resources,
    /// The alternative chosen for each request of each claim, in order
    /// (0 for `exactly`): lower is what the user preferred.
    pub choice: Vec<usize>,
}

/// A claim to allocate, with how messages name it.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    /// How messages name it (`claim gpu (template one-h100)`).
    pub label: &'a str,
    /// The compiled claim.
    pub claim: &'a Claim,
}

/// Devices of template `j` taken for one alternative: `(j, n)`.
type Taken = Vec<(usize, u32)>;

/// Allocates `claims` together on a node of `type_name` whose devices are
/// `templates`.
///
/// # Errors
/// Why not, naming the claim, request and the selector, count or
/// constraint that failed.
pub fn allocate(
    claims: &[Named],
    templates: &[DeviceTemplate],
    type_name: &str,
    env: &mut Env,
) -> Result<Allocation, String> {
    let mut left: Vec<u32> = templates.iter().map(|t| t.count).collect();
    let mut choice = Vec::new();
    let mut demand = Resources::new();
    for named in claims {
        // (request, alternative, devices) chosen so far in this claim.
        let mut chosen: Vec<(String, String, Taken)> = Vec::new();
        for request in &named.claim.requests {
            let mut why = Vec::new();
            let mut done = false;
            for (k, alt) in request.alternatives.iter().enumerate() {
                let taken = match take(alt, templates, &left, type_name, env) {
                    Ok(t) => t,
                    Err(e) => {
                        why.push(format!("{}: {e}", alt.name));
                        continue;
                    }
                };
                chosen.push((request.name.clone(), alt.name.clone(), taken));
                if let Err(e) = constraints_hold(named.claim, &chosen, templates, type_name) {
                    chosen.pop();
                    why.push(format!("{}: {e}", alt.name));
                    continue;
                }
                for &(j, n) in &chosen.last().expect("just pushed").2 {
                    left[j] -= n;
                }
                choice.push(k);
                done = true;
                break;
            }
            if !done {
                let why = if request.alternatives.len() == 1 {
                    why.join("; ")
                        .trim_start_matches(&format!("{}: ", request.name))
                        .to_string()
                } else {
                    format!("no alternative fits ({})", why.join("; "))
                };
                return Err(format!("{} request {}: {why}", named.label, request.name));
            }
        }
        for (_, _, taken) in &chosen {
            for &(j, n) in taken {
                let r = templates[j].resource();
                let v = demand.get(&r) + i64::from(n);
                demand.set(&r, v);
            }
        }
    }
    Ok(Allocation { demand, choice })
}

/// Devices of the node that alternative `alt` takes, from what is `left`.
fn take(
    alt: &Alternative,
    templates: &[DeviceTemplate],
    left: &[u32],
    type_name: &str,
    env: &mut Env,
) -> Result<Taken, String> {
    let mut matching = Vec::new();
    let mut misses = Vec::new();
    for (j, t) in templates.iter().enumerate() {
        match selects(alt, t, env) {
            Ok(()) => matching.push(j),
            Err(m) => misses.push(m),
        }
    }
    if matching.is_empty() {
        return Err(no_match(alt, templates, type_name, misses));
    }
    match alt.mode {
        Mode::Count(n) => {
            let have: u32 = matching.iter().map(|&j| left[j]).sum();
            if have < n {
                let all: u32 = matching.iter().map(|&j| templates[j].count).sum();
                return Err(if all < n {
                    format!("asks for {n} devices; {type_name} has {all} that match")
                } else {
                    format!(
                        "asks for {n} devices; {type_name} has {all} that match, {have} left after the pod's other requests"
                    )
                });
            }
            let mut need = n;
            let mut out = Vec::new();
            for &j in &matching {
                let k = need.min(left[j]);
                if k > 0 {
                    out.push((j, k));
                    need -= k;
                }
            }
            Ok(out)
        }
        Mode::All => {
            if let Some(&j) = matching.iter().find(|&&j| left[j] < templates[j].count) {
                return Err(format!(
                    "asks for all matching devices, and the pod's other requests take some of {type_name}'s {}",
                    templates[j].kind
                ));
            }
            Ok(matching.iter().map(|&j| (j, templates[j].count)).collect())
        }
    }
}

/// Whether `alt` selects the devices of `t`: every selector true (the
/// class's first, as the scheduler checks them) and every capacity it
/// requests offered; or, when not, why.
fn selects(alt: &Alternative, t: &DeviceTemplate, env: &mut Env) -> Result<(), Miss> {
    for (origin, sel) in &alt.selectors {
        match env.eval(sel, t) {
            Outcome::True => {}
            Outcome::False => {
                return Err(Miss::False {
                    by_class: matches!(origin, super::compile::Origin::Class(..)),
                    what: format!("{origin} (`{}`)", sel.expression),
                })
            }
            Outcome::Unknown(attr) => {
                return Err(Miss::Unknown(format!(
                    "{origin} (`{}`) reads {attr}, which the driver sets on the node: not known before launch",
                    sel.expression
                )))
            }
            Outcome::Error(e) => {
                return Err(Miss::Error(format!(
                    "{origin} (`{}`) fails on {}: {e}",
                    sel.expression, t.kind
                )))
            }
        }
    }
    for (name, need) in &alt.capacity {
        let have = t.capacity.get(&qualified(&t.driver, name));
        let fits = have.is_some_and(|h| {
            matches!(
                (crate::api::parse_quantity(h), crate::api::parse_quantity(need)),
                (Ok(h), Ok(n)) if h >= n
            )
        });
        if !fits {
            return Err(Miss::False {
                by_class: false,
                what: format!(
                    "capacity {name} {need} (a {} has {})",
                    t.kind,
                    have.map_or("none", String::as_str)
                ),
            });
        }
    }
    Ok(())
}

/// Why a template's devices are not selected.
enum Miss {
    False { by_class: bool, what: String },
    Unknown(String),
    Error(String),
}

/// The reason no device of the node matches `alt`, the most telling first:
/// an attribute not known before launch, a selector that fails, the class
/// (no device of its kind on the type), then the request's own selector.
fn no_match(
    alt: &Alternative,
    templates: &[DeviceTemplate],
    type_name: &str,
    misses: Vec<Miss>,
) -> String {
    if templates.is_empty() {
        return format!(
            "{type_name} has no devices of a DRA driver (DeviceClass {})",
            alt.class
        );
    }
    let mut by_request = None;
    for m in misses {
        match m {
            Miss::Unknown(s) | Miss::Error(s) => return s,
            Miss::False {
                by_class: false,
                what,
            } => {
                by_request.get_or_insert(what);
            }
            Miss::False { by_class: true, .. } => {}
        }
    }
    match by_request {
        Some(what) => {
            let devices: Vec<String> = templates.iter().map(describe).collect();
            format!(
                "{what} selects none of {type_name}'s devices ({})",
                devices.join(", ")
            )
        }
        None => format!("{type_name} has no device in DeviceClass {}", alt.class),
    }
}

/// `8 gpu (NVIDIA H100 80GB HBM3)`.
fn describe(t: &DeviceTemplate) -> String {
    match t.attribute("productName") {
        Some(Attribute::Known(AttributeValue::String(p))) => {
            format!("{} {} ({p})", t.count, t.kind)
        }
        _ => format!("{} {}", t.count, t.kind),
    }
}

/// Whether the constraints of `claim` hold for the devices `chosen` so far.
fn constraints_hold(
    claim: &Claim,
    chosen: &[(String, String, Taken)],
    templates: &[DeviceTemplate],
    type_name: &str,
) -> Result<(), String> {
    for c in &claim.constraints {
        let covered: Vec<(usize, u32)> = chosen
            .iter()
            .filter(|(r, a, _)| c.covers(r, a))
            .flat_map(|(_, _, t)| t.iter().copied())
            .collect();
        if covered.is_empty() {
            continue;
        }
        let (attr, distinct) = match &c.rule {
            Rule::Match(a) => (a.as_str(), false),
            Rule::Distinct(a) => (a.as_str(), true),
        };
        let verb = if distinct {
            "distinctAttribute"
        } else {
            "matchAttribute"
        };
        let mut known: Vec<&AttributeValue> = Vec::new();
        let mut groups: Vec<(u32, usize, u32)> = Vec::new();
        for &(j, n) in &covered {
            let t = &templates[j];
            match t.attribute(attr) {
                None => {
                    return Err(format!(
                        "constraint {verb} {attr}: {type_name}'s {} devices do not have it",
                        t.kind
                    ))
                }
                Some(Attribute::Known(v)) => known.extend(std::iter::repeat_n(v, n as usize)),
                Some(Attribute::RunTime { groups: Some(g) }) => groups.push((*g, j, n)),
                Some(Attribute::RunTime { groups: None }) => {
                    return Err(format!(
                        "constraint {verb} {attr}: the driver sets it on the node, and which of {type_name}'s devices share a value is not known before launch"
                    ))
                }
            }
        }
        if !known.is_empty() && !groups.is_empty() {
            return Err(format!(
                "constraint {verb} {attr}: known for some of {type_name}'s devices and set on the node for others"
            ));
        }
        if !known.is_empty() {
            let all_same = known.windows(2).all(|w| w[0] == w[1]);
            let all_different = {
                let mut k = known.clone();
                k.sort();
                k.windows(2).all(|w| w[0] != w[1])
            };
            if !distinct && !all_same {
                return Err(format!(
                    "constraint {verb} {attr}: the devices differ in it on {type_name}"
                ));
            }
            if distinct && !all_different {
                return Err(format!(
                    "constraint {verb} {attr}: the devices share a value on {type_name}"
                ));
            }
            continue;
        }
        let g = groups[0].0;
        if groups.iter().any(|(h, _, _)| *h != g) {
            return Err(format!(
                "constraint {verb} {attr}: {type_name}'s devices are grouped differently by it"
            ));
        }
        if distinct {
            let total: u32 = groups.iter().map(|(_, _, n)| n).sum();
            if total > g {
                return Err(format!(
                    "constraint {verb} {attr}: {total} devices, and {type_name} has {g} distinct values"
                ));
            }
            continue;
        }
        let mut per_template: std::collections::BTreeMap<usize, u32> = Default::default();
        for (_, j, n) in &groups {
            *per_template.entry(*j).or_default() += n;
        }
        for (j, n) in per_template {
            let t = &templates[j];
            let per_value = t.count / g.max(1);
            if n > per_value {
                return Err(format!(
                    "constraint {verb} {attr}: {n} {} devices asked, and at most {per_value} share a value on {type_name}",
                    t.kind
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::cel::Selectors;
    use super::super::compile::tests::{classes, spec};
    use super::*;
    use crate::catalog::{Catalog, DeviceData};

    fn on(type_name: &str, mig: Option<&str>, yaml: &str) -> Result<Allocation, String> {
        let catalog = Catalog::embedded().unwrap();
        let it = catalog.instance_type(type_name).unwrap();
        let templates = DeviceData::embedded().templates(it, mig);
        let claim =
            super::super::compile::claim(&spec(yaml), &classes(), &mut Selectors::default())
                .unwrap();
        allocate(
            &[Named {
                label: "claim c",
                claim: &claim,
            }],
            &templates,
            type_name,
            &mut Env::new(),
        )
    }

    const EIGHT_H100: &str = r#"
devices:
  requests:
  - name: gpus
    exactly:
      deviceClassName: gpu.nvidia.com
      count: 8
      selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]
"#;

    #[test]
    fn eight_h100s_by_product_name_fit_a_p5_and_not_a_p4de() {
        let a = on("p5.48xlarge", None, EIGHT_H100).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu"), 8);
        let e = on("p4de.24xlarge", None, EIGHT_H100).unwrap_err();
        assert!(
            e.starts_with("claim c request gpus: selector 0 (`device.attributes")
                && e.contains(
                    "selects none of p4de.24xlarge's devices (8 gpu (NVIDIA A100-SXM4-80GB)"
                ),
            "{e}"
        );
        let e = on("p5.4xlarge", None, EIGHT_H100).unwrap_err();
        assert!(
            e.contains("asks for 8 devices; p5.4xlarge has 1 that match"),
            "{e}"
        );
        let e = on("m7i.xlarge", None, EIGHT_H100).unwrap_err();
        assert!(
            e.contains("m7i.xlarge has no devices of a DRA driver"),
            "{e}"
        );
    }

    #[test]
    fn first_available_takes_the_first_alternative_the_node_can_serve() {
        let yaml = r#"
devices:
  requests:
  - name: gpu
    firstAvailable:
    - {name: h100, deviceClassName: gpu.nvidia.com, selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}
    - {name: l40s, deviceClassName: gpu.nvidia.com, selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'"}}]}
"#;
        assert_eq!(on("p5.48xlarge", None, yaml).unwrap().choice, [0]);
        assert_eq!(on("g6e.xlarge", None, yaml).unwrap().choice, [1]);
        let e = on("g5.xlarge", None, yaml).unwrap_err();
        assert!(
            e.contains("no alternative fits (gpu/h100: selector 0"),
            "{e}"
        );
    }

    #[test]
    fn a_gpu_and_an_efa_on_one_pcie_root_fit_where_the_topology_is_known() {
        let yaml = r#"
devices:
  requests:
  - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}
  - {name: efa, exactly: {deviceClassName: efa.networking.k8s.aws, count: 4}}
  constraints:
  - {requests: [gpu, efa], matchAttribute: resource.kubernetes.io/pcieRoot}
"#;
        let a = on("p5.48xlarge", None, yaml).unwrap();
        assert_eq!(a.demand.get("dra.net/efa"), 4);
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu"), 1);
        // Four EFAs per root on a p5, one on a p4d.
        let e = on("p4d.24xlarge", None, yaml).unwrap_err();
        assert!(
            e.contains("4 efa devices asked, and at most 1 share a value"),
            "{e}"
        );
        let e = on("g6e.48xlarge", None, yaml).unwrap_err();
        assert!(e.contains("not known before launch"), "{e}");
    }

    #[test]
    fn all_mode_takes_every_matching_device_and_mig_partitions_are_devices_too() {
        let all = r#"
devices:
  requests:
  - {name: n, exactly: {deviceClassName: neuron.aws.com, allocationMode: All}}
"#;
        assert_eq!(
            on("trn2.48xlarge", None, all)
                .unwrap()
                .demand
                .get("neuron.aws.com/neuron"),
            16
        );
        let mig = r#"
devices:
  requests:
  - name: slice
    exactly:
      deviceClassName: mig.nvidia.com
      selectors: [{cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10G')) >= 0"}}]
"#;
        let a = on("p4de.24xlarge", Some("1g.10gb"), mig).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/mig-1g.10gb"), 1);
        let e = on("p4de.24xlarge", None, mig).unwrap_err();
        assert!(
            e.contains("has no device in DeviceClass mig.nvidia.com"),
            "{e}"
        );
    }
}
