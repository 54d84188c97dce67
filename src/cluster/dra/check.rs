//! `validate` for DRA objects (`resource.k8s.io/v1` DeviceClasses,
//! ResourceClaims and ResourceClaimTemplates): every CEL selector
//! compiled, every request and constraint checked, each problem with its
//! field path and line. A claim's DeviceClass that none of the files
//! defines is a warning, not an error: it may be installed by a driver's
//! chart.

use super::cel::Selectors;
use super::compile;
use crate::api::read::{Document, Problem};
use k8s_openapi::api::resource::v1 as dra;
use std::collections::BTreeMap;

/// The API group of DRA objects.
pub const GROUP: &str = "resource.k8s.io/";

/// Whether a document is a DRA object this module checks.
pub fn is_dra(doc: &Document) -> bool {
    let (v, k) = doc.kind();
    v.starts_with(GROUP) && matches!(k, "DeviceClass" | "ResourceClaim" | "ResourceClaimTemplate")
}

/// What checking one document found.
#[derive(Debug, Default, PartialEq)]
pub struct Checked {
    /// Problems (the document is not valid).
    pub problems: Vec<Problem>,
    /// Warnings (a DeviceClass none of the files defines).
    pub warnings: Vec<Problem>,
}

/// Checks the DRA documents among `docs` (others are left out of the
/// result), the DeviceClasses among them known to the claims.
pub fn check(docs: &[&Document]) -> BTreeMap<usize, Checked> {
    let mut selectors = Selectors::default();
    let mut classes: BTreeMap<String, dra::DeviceClass> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for doc in docs
        .iter()
        .filter(|d| is_dra(d) && d.kind().1 == "DeviceClass")
    {
        let mut c = Checked::default();
        match serde_json::from_value::<dra::DeviceClass>(doc.value.clone()) {
            Ok(class) => {
                if let Err(ps) = compile::class_selectors(&class, &mut selectors) {
                    c.problems
                        .extend(ps.iter().map(|p| doc.problem(&p.path, &p.message)));
                }
                classes.insert(class.metadata.name.clone().unwrap_or_default(), class);
            }
            Err(e) => c.problems.push(doc.problem("", e.to_string())),
        }
        out.insert(doc.number, c);
    }
    for doc in docs
        .iter()
        .filter(|d| is_dra(d) && d.kind().1 != "DeviceClass")
    {
        let (prefix, spec) = match doc.kind().1 {
            "ResourceClaim" => (
                "spec",
                serde_json::from_value::<dra::ResourceClaim>(doc.value.clone())
                    .map(|c| c.spec.unwrap_or_default()),
            ),
            _ => (
                "spec.spec",
                serde_json::from_value::<dra::ResourceClaimTemplate>(doc.value.clone())
                    .map(|t| t.spec.and_then(|s| s.spec).unwrap_or_default()),
            ),
        };
        let mut c = Checked::default();
        match spec {
            Err(e) => c.problems.push(doc.problem("", e.to_string())),
            Ok(spec) => {
                // Classes the files do not define stand in without
                // selectors, each named in a warning.
                let mut known = classes.clone();
                for r in spec
                    .devices
                    .iter()
                    .flat_map(|d| d.requests.iter().flatten())
                {
                    let names = r.exactly.iter().map(|e| &e.device_class_name).chain(
                        r.first_available
                            .iter()
                            .flatten()
                            .map(|s| &s.device_class_name),
                    );
                    for n in names {
                        if !known.contains_key(n) {
                            c.warnings.push(doc.problem(
                                &format!("{prefix}.devices"),
                                format!("DeviceClass {n} is not defined in these files: it must exist in the cluster"),
                            ));
                            let mut stand_in = dra::DeviceClass::default();
                            stand_in.metadata.name = Some(n.clone());
                            known.insert(n.clone(), stand_in);
                        }
                    }
                }
                c.warnings.dedup();
                if let Err(ps) = compile::claim(&spec, &known, &mut selectors) {
                    c.problems.extend(
                        ps.iter()
                            .map(|p| doc.problem(&format!("{prefix}.{}", p.path), &p.message)),
                    );
                }
            }
        }
        out.insert(doc.number, c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::read::documents;

    #[test]
    fn every_selector_is_compiled_and_named_with_its_path_and_line() {
        let text = r#"apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: big-gpu}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com'"}
  - cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi') >= 0"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: t, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: big-gpu
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].productName.shout()"}
      - {name: nic, exactly: {deviceClassName: efa.networking.k8s.aws}}
"#;
        let docs = documents(text).unwrap();
        let refs: Vec<&Document> = docs.iter().collect();
        let r = check(&refs);
        let class = &r[&1].problems;
        assert_eq!(class.len(), 1, "{class:?}");
        assert_eq!(class[0].path, "spec.selectors[1].cel.expression");
        assert_eq!(class[0].line, Some(7));
        assert!(
            class[0].message.starts_with("does not compile"),
            "{class:?}"
        );
        let claim = &r[&2];
        // Its class's broken selector, then its own.
        assert_eq!(claim.problems.len(), 2, "{claim:?}");
        assert!(claim.problems[0]
            .message
            .starts_with("DeviceClass big-gpu: spec.selectors[1]"));
        assert_eq!(
            claim.problems[1].path,
            "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"
        );
        assert_eq!(claim.problems[1].line, Some(20));
        assert!(claim.problems[1].message.contains("unknown function shout"));
        // The EFA class is the chart's: a warning, not an error.
        assert_eq!(claim.warnings.len(), 1, "{claim:?}");
        assert!(claim.warnings[0].message.contains("efa.networking.k8s.aws"));
    }
}
