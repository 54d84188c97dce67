//! The ResourceSlices the DRA drivers of a simulated node publish: one
//! slice per driver, its devices made from the same device templates the
//! planner matched claims against (`catalog::devices`), with values of
//! their own for the attributes set on a real node (a UUID, a PCIe root:
//! devices of one topology group share one).

use crate::catalog::devices::{Attribute, AttributeValue, DeviceTemplate};
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// The slices the drivers publish on node `node` whose devices are
/// `templates` (one per driver, in driver order; devices named
/// `<kind>-<i>`).
pub fn resource_slices(node: &str, templates: &[DeviceTemplate]) -> Vec<ResourceSlice> {
    let mut by_driver: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for t in templates {
        let devices = by_driver.entry(&t.driver).or_default();
        for i in 0..t.count {
            devices.push(device(node, t, i));
        }
    }
    by_driver
        .into_iter()
        .filter_map(|(driver, devices)| {
            serde_json::from_value(json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": format!("{node}-{driver}")},
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                }
            }))
            .ok()
        })
        .collect()
}

/// Device `i` of template `t` on `node`, as its driver publishes it.
fn device(node: &str, t: &DeviceTemplate, i: u32) -> Value {
    // The driver's own attributes are published unqualified.
    let local = |name: &str| -> String {
        name.strip_prefix(&format!("{}/", t.driver))
            .unwrap_or(name)
            .to_string()
    };
    let mut attributes = Map::new();
    for (name, a) in &t.attributes {
        let value = match a {
            Attribute::Known(v) => value(v),
            Attribute::RunTime { groups: Some(g) } => {
                json!({"string": format!("{node}-{}-{}", local(name), i * g / t.count.max(1))})
            }
            Attribute::RunTime { groups: None } => {
                json!({"string": format!("{node}-{}-{}-{i}", local(name), t.kind)})
            }
        };
        attributes.insert(local(name), value);
    }
    let policies = t.shared.as_ref().map(|s| &s.policies);
    let capacity: Map<String, Value> = t
        .capacity
        .iter()
        .map(|(name, q)| {
            let mut c = json!({"value": q});
            if let Some(p) = policies.and_then(|p| p.get(name)) {
                c["requestPolicy"] = serde_json::to_value(p).unwrap_or_default();
            }
            (local(name), c)
        })
        .collect();
    let mut d = json!({
        "name": format!("{}-{i}", t.kind),
        "attributes": attributes,
        "capacity": capacity,
    });
    if t.shared.is_some() {
        d["allowMultipleAllocations"] = json!(true);
    }
    d
}

/// An attribute value as a slice carries it.
fn value(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::Bool(b) => json!({"bool": b}),
        AttributeValue::Int(i) => json!({"int": i}),
        AttributeValue::String(s) => json!({"string": s}),
        AttributeValue::Version { version } => json!({"version": version}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::dra::{drivers_published, Objects};
    use crate::cluster::shape::with_dra_devices;
    use crate::cluster::Resources;

    #[test]
    fn an_mps_nodes_slices_publish_shareable_gpus_counted_in_the_shares_planned() {
        let catalog = Catalog::embedded().unwrap();
        let it = catalog.instance_type("g6e.12xlarge").unwrap();
        let templates = catalog.device_templates(it, crate::catalog::GpuLayout::Shared(4));
        let mut objects = Objects::default();
        for s in resource_slices("node-a", &templates) {
            objects.add_slice(s);
        }
        let expected = with_dra_devices(&Resources::new(), &templates);
        let (published, _) = objects.node_devices("node-a");
        assert_eq!(published.get("gpu.nvidia.com/gpu.shared"), 16, "4 GPUs x 4");
        assert_eq!(published, expected);
        assert!(drivers_published(&expected, &published));
        let gpu = &objects.slices["node-a-gpu.nvidia.com"]
            .spec
            .devices
            .as_ref()
            .unwrap()[0];
        assert_eq!(gpu.allow_multiple_allocations, Some(true));
        let policy = gpu.capacity.as_ref().unwrap()["memory"]
            .request_policy
            .as_ref()
            .unwrap();
        assert_eq!(policy.default.as_ref().unwrap().0, "11444Mi");
    }

    #[test]
    fn a_p5s_slices_publish_every_device_its_templates_promise_with_their_attributes() {
        let catalog = Catalog::embedded().unwrap();
        let it = catalog.instance_type("p5.48xlarge").unwrap();
        let templates = catalog.device_templates(it, crate::catalog::GpuLayout::Whole);
        let mut objects = Objects::default();
        for s in resource_slices("node-a", &templates) {
            objects.add_slice(s);
        }
        let (published, taken) = objects.node_devices("node-a");
        let expected = with_dra_devices(&Resources::new(), &templates);
        assert_eq!(published.get("gpu.nvidia.com/gpu"), 8);
        assert_eq!(published.get("dra.net/efa"), 32);
        assert!(taken.is_empty());
        assert!(drivers_published(&expected, &published));
        assert!(objects.node_devices("node-b").0.is_empty());
        let gpu = &objects.slices["node-a-gpu.nvidia.com"]
            .spec
            .devices
            .as_ref()
            .unwrap()[0];
        let attrs = gpu.attributes.as_ref().unwrap();
        assert_eq!(
            attrs["productName"].string.as_deref(),
            Some("NVIDIA H100 80GB HBM3")
        );
        // Devices of one PCIe root share its value: a GPU each on a p5.
        let roots: std::collections::BTreeSet<_> = objects.slices["node-a-gpu.nvidia.com"]
            .spec
            .devices
            .iter()
            .flatten()
            .filter_map(|d| {
                d.attributes
                    .as_ref()?
                    .get("resource.kubernetes.io/pcieRoot")?
                    .string
                    .clone()
            })
            .collect();
        assert_eq!(roots.len(), 8);
    }

    #[test]
    fn a_node_is_not_initialized_until_every_driver_it_expects_has_published() {
        let catalog = Catalog::embedded().unwrap();
        let it = catalog.instance_type("p5.48xlarge").unwrap();
        let templates = catalog.device_templates(it, crate::catalog::GpuLayout::Whole);
        let expected = with_dra_devices(&Resources::new(), &templates);
        let mut objects = Objects::default();
        // The GPU driver only: the EFA driver has not published yet.
        let gpus: Vec<_> = templates
            .iter()
            .filter(|t| t.driver == "gpu.nvidia.com")
            .cloned()
            .collect();
        for s in resource_slices("node-a", &gpus) {
            objects.add_slice(s);
        }
        assert!(!drivers_published(
            &expected,
            &objects.node_devices("node-a").0
        ));
        objects.remove_slices_of("node-a");
        assert!(objects.slices.is_empty());
    }
}
