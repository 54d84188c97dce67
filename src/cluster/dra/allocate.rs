//! Allocating claims on one node shape: the devices of an instance type's
//! templates (GPUs whole or partitioned, as a pool has them) taken for
//! every request of every claim of a pod, as the scheduler's allocator
//! takes them from a node's ResourceSlices: each request's alternatives in
//! the user's order, the first that its selectors, count, capacity and the
//! claim's constraints allow. A shareable device (`allowMultipleAllocations`)
//! serves several requests, of this pod's claims and, in the planner, of
//! other pods on the node, while what they consume of its capacities fits
//! ([`super::capacity`]); any other device serves one. The result is the
//! devices taken, by planner resource (shares of a shareable device), or
//! why the shape cannot serve the claims.

use super::capacity::{self, Consumed};
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

/// What an alternative takes: whole devices, and parts of shareable ones
/// (template, device, what it consumes there).
#[derive(Default)]
struct Take {
    devices: Taken,
    parts: Vec<(usize, usize, Consumed)>,
}

/// The node's devices as the requests allocated so far leave them:
/// devices left of each template, and what is consumed of each device of
/// a shareable one.
struct Left {
    whole: Vec<u32>,
    used: Vec<Vec<Consumed>>,
}

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
    let mut left = Left {
        whole: templates.iter().map(|t| t.count).collect(),
        used: templates
            .iter()
            .map(|t| match t.shared {
                Some(_) => vec![Consumed::new(); t.count as usize],
                None => Vec::new(),
            })
            .collect(),
    };
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
                chosen.push((request.name.clone(), alt.name.clone(), taken.devices));
                if let Err(e) = constraints_hold(named.claim, &chosen, templates, type_name) {
                    chosen.pop();
                    why.push(format!("{}: {e}", alt.name));
                    continue;
                }
                for &(j, n) in &chosen.last().expect("just pushed").2 {
                    if templates[j].shared.is_none() {
                        left.whole[j] -= n;
                    }
                }
                // Parts of one request are on distinct devices: beside
                // other pods' requests, which the planner packs by their
                // sum, that holds only for whole devices, so each such part
                // is charged the whole device (`docs/dra.md`).
                let apart = taken.parts.len() > 1;
                for (j, i, c) in taken.parts {
                    let charge = match &templates[j].shared {
                        Some(s) if apart => s.shares.max(1),
                        _ => capacity::shares(&templates[j], &c),
                    };
                    for (name, v) in c {
                        *left.used[j][i].entry(name).or_default() += v;
                    }
                    let r = templates[j].resource();
                    demand.set(&r, demand.get(&r) + i64::from(charge));
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
            for &(j, n) in taken.iter().filter(|(j, _)| templates[*j].shared.is_none()) {
                let r = templates[j].resource();
                let v = demand.get(&r) + i64::from(n);
                demand.set(&r, v);
            }
        }
    }
    Ok(Allocation { demand, choice })
}

/// Devices of the node that alternative `alt` takes, from what is `left`:
/// whole devices, or parts of shareable ones (one part per device: a
/// request's devices are distinct).
fn take(
    alt: &Alternative,
    templates: &[DeviceTemplate],
    left: &Left,
    type_name: &str,
    env: &mut Env,
) -> Result<Take, String> {
    let mut matching = Vec::new();
    let mut misses = Vec::new();
    for (j, t) in templates.iter().enumerate() {
        match selects(alt, t, env) {
            Ok(c) => matching.push((j, c)),
            Err(m) => misses.push(m),
        }
    }
    if matching.is_empty() {
        return Err(no_match(alt, templates, type_name, misses));
    }
    // The devices of each matching template that can serve the request.
    let open = |j: usize, c: &Option<Consumed>| -> Vec<usize> {
        match c {
            None => (0..left.whole[j] as usize).collect(),
            Some(c) => (0..templates[j].count as usize)
                .filter(|&i| capacity::fits(&templates[j], &left.used[j][i], c))
                .collect(),
        }
    };
    let mut out = Take::default();
    match alt.mode {
        Mode::Count(n) => {
            let have: u32 = matching.iter().map(|(j, c)| open(*j, c).len() as u32).sum();
            if have < n {
                let all: u32 = matching.iter().map(|(j, _)| templates[*j].count).sum();
                return Err(if all < n {
                    format!("asks for {n} devices; {type_name} has {all} that match")
                } else if matching.iter().any(|(_, c)| c.is_some()) {
                    format!(
                        "asks for {n} devices; {type_name} has {all} that match, {have} with the capacity left after the pod's other requests"
                    )
                } else {
                    format!(
                        "asks for {n} devices; {type_name} has {all} that match, {have} left after the pod's other requests"
                    )
                });
            }
            let mut need = n;
            for (j, c) in &matching {
                let k = need.min(open(*j, c).len() as u32);
                if k == 0 {
                    continue;
                }
                out.devices.push((*j, k));
                if let Some(c) = c {
                    for i in open(*j, &Some(c.clone())).into_iter().take(k as usize) {
                        out.parts.push((*j, i, c.clone()));
                    }
                }
                need -= k;
            }
        }
        Mode::All => {
            for (j, c) in &matching {
                let t = &templates[*j];
                if open(*j, c).len() < t.count as usize {
                    return Err(format!(
                        "asks for all matching devices, and the pod's other requests take some of {type_name}'s {}",
                        t.kind
                    ));
                }
                out.devices.push((*j, t.count));
                if let Some(c) = c {
                    out.parts
                        .extend((0..t.count as usize).map(|i| (*j, i, c.clone())));
                }
            }
        }
    }
    Ok(out)
}

/// Whether `alt` selects the devices of `t`: every selector true (the
/// class's first, as the scheduler checks them) and every capacity it
/// requests offered, within the request policy of a shareable device; or,
/// when not, why. For a shareable device, what the request consumes of
/// one.
fn selects(alt: &Alternative, t: &DeviceTemplate, env: &mut Env) -> Result<Option<Consumed>, Miss> {
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
    match &t.shared {
        None => Ok(None),
        Some(_) => capacity::consumed(&alt.capacity, t)
            .map(Some)
            .map_err(|what| Miss::False {
                by_class: false,
                what,
            }),
    }
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
    use crate::catalog::devices::{RequestPolicy, Shared};
    use crate::catalog::{Catalog, DeviceData, GpuLayout};

    fn on(type_name: &str, mig: Option<&str>, yaml: &str) -> Result<Allocation, String> {
        on_layout(type_name, mig.into(), &[yaml])
    }

    /// `claims` allocated together on a node of `type_name` whose GPUs are
    /// laid out as `layout` says.
    fn on_layout(
        type_name: &str,
        layout: GpuLayout<'_>,
        claims: &[&str],
    ) -> Result<Allocation, String> {
        let catalog = Catalog::embedded().unwrap();
        let it = catalog.instance_type(type_name).unwrap();
        let templates = DeviceData::embedded().templates(it, layout);
        allocate_all(&templates, type_name, claims)
    }

    fn allocate_all(
        templates: &[DeviceTemplate],
        type_name: &str,
        claims: &[&str],
    ) -> Result<Allocation, String> {
        // The first is `claim c`, as the single-claim tests name it.
        let labels: Vec<String> = (0..claims.len())
            .map(|i| match i {
                0 => "claim c".to_string(),
                i => format!("claim c{i}"),
            })
            .collect();
        let compiled: Vec<Claim> = claims
            .iter()
            .map(|yaml| {
                super::super::compile::claim(&spec(yaml), &classes(), &mut Selectors::default())
                    .unwrap()
            })
            .collect();
        let named: Vec<Named> = labels
            .iter()
            .zip(&compiled)
            .map(|(label, claim)| Named { label, claim })
            .collect();
        allocate(&named, templates, type_name, &mut Env::new())
    }

    /// One GPU of `memory`, shareable in `shares` shares with `policy` on
    /// its memory when `shares` is set, else exclusive.
    fn gpu(memory: &str, shares: Option<u32>, policy: Option<RequestPolicy>) -> DeviceTemplate {
        let mut attributes = std::collections::BTreeMap::new();
        attributes.insert(
            "gpu.nvidia.com/type".to_string(),
            Attribute::Known(AttributeValue::String("gpu".into())),
        );
        DeviceTemplate {
            driver: "gpu.nvidia.com".into(),
            kind: "gpu".into(),
            count: 1,
            attributes,
            capacity: [("gpu.nvidia.com/memory".to_string(), memory.to_string())].into(),
            source: "test".into(),
            shared: shares.map(|shares| Shared {
                shares,
                policies: policy
                    .into_iter()
                    .map(|p| ("gpu.nvidia.com/memory".to_string(), p))
                    .collect(),
            }),
        }
    }

    /// A claim for one GPU with `memory` of it (none named when empty).
    fn memory_claim(memory: &str) -> String {
        let capacity = if memory.is_empty() {
            String::new()
        } else {
            format!(", capacity: {{requests: {{memory: {memory}}}}}")
        };
        format!("devices:\n  requests:\n  - {{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com{capacity}}}}}\n")
    }

    #[test]
    fn two_claims_of_20gi_share_one_40gi_device_and_a_third_is_refused() {
        let shared = [gpu("40Gi", Some(2), None)];
        let c = memory_claim("20Gi");
        let a = allocate_all(&shared, "t", &[&c, &c]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 2);
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu"), 0);
        let e = allocate_all(&shared, "t", &[&c, &c, &c]).unwrap_err();
        assert!(
            e.starts_with("claim c2 request gpu: asks for 1 devices; t has 1 that match, 0 with the capacity left"),
            "{e}"
        );
        // On an 80Gi device in four shares, each 20Gi claim is one share.
        let big = [gpu("80Gi", Some(4), None)];
        let a = allocate_all(&big, "t", &[&c, &c, &c, &c]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 4);
        assert!(allocate_all(&big, "t", &[&c, &c, &c, &c, &c]).is_err());
    }

    #[test]
    fn a_claim_is_charged_a_size_of_the_share_chain_and_parts_of_one_request_whole_devices() {
        // Two 80Gi GPUs in four shares of 20Gi each.
        let mut two = gpu("80Gi", Some(4), None);
        two.count = 2;
        let two = [two];
        // 60Gi is three shares, planned as four (1, 2, 4): beside another
        // pod's three, no GPU holds a third pod's two.
        let a = allocate_all(&two, "t", &[&memory_claim("60Gi")]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 4);
        let a = allocate_all(&two, "t", &[&memory_claim("40Gi")]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 2);
        // A request for 20Gi of each of two GPUs takes parts of both:
        // charged both GPUs whole.
        let pair = "devices:\n  requests:\n  - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 2, capacity: {requests: {memory: 20Gi}}}}\n";
        let a = allocate_all(&two, "t", &[pair]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 8);
    }

    #[test]
    fn a_device_without_multiple_allocations_serves_one_claim() {
        let exclusive = [gpu("80Gi", None, None)];
        let c = memory_claim("20Gi");
        let a = allocate_all(&exclusive, "t", &[&c]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu"), 1);
        let e = allocate_all(&exclusive, "t", &[&c, &c]).unwrap_err();
        assert!(e.contains("0 left after the pod's other requests"), "{e}");
    }

    #[test]
    fn the_request_policy_rounds_a_request_up_and_gives_one_naming_no_amount_its_default() {
        let policy = super::super::capacity::tests::range("20Gi", "20Gi", "80Gi", "20Gi");
        let t = [gpu("80Gi", Some(4), Some(policy))];
        // 21Gi is rounded up to 40Gi: two shares.
        let a = allocate_all(&t, "t", &[&memory_claim("21Gi")]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 2);
        // No amount named: the default, one share; so 40Gi + 20Gi + 20Gi
        // fill the device, and one more is refused.
        let (big, none) = (memory_claim("21Gi"), memory_claim(""));
        let a = allocate_all(&t, "t", &[&big, &none, &none]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 4);
        assert!(allocate_all(&t, "t", &[&big, &none, &none, &none]).is_err());
        // More than the range allows: the device cannot serve it.
        let e = allocate_all(&t, "t", &[&memory_claim("81Gi")]).unwrap_err();
        assert!(e.contains("capacity memory 81Gi"), "{e}");
    }

    #[test]
    fn an_mps_pools_h100_serves_four_quarter_claims_and_a_whole_one_serves_one() {
        let quarter = "devices:\n  requests:\n  - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, capacity: {requests: {activeThreadPercentage: '25'}}}}\n";
        let claims = [quarter; 4];
        let a = on_layout("p5.4xlarge", GpuLayout::Shared(4), &claims).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 4);
        assert!(on_layout("p5.4xlarge", GpuLayout::Shared(4), &[quarter; 5]).is_err());
        // A claim naming no amount takes one share of memory and threads.
        let plain =
            "devices:\n  requests:\n  - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n";
        let a = on_layout("p5.4xlarge", GpuLayout::Shared(4), &[plain]).unwrap();
        assert_eq!(a.demand.get("gpu.nvidia.com/gpu.shared"), 1);
        // Whole GPUs: one claim per GPU.
        assert!(on_layout("p5.4xlarge", GpuLayout::Whole, &[plain, plain]).is_err());
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
