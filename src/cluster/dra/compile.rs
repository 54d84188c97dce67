//! A ResourceClaim's spec made ready to match: each request with its
//! alternatives (one for `exactly`, the subrequests of `firstAvailable`
//! in order), each alternative with its DeviceClass's selectors and its own
//! compiled, and the claim's constraints. Problems are reported with the
//! field path of the claim spec they are at, so `validate` and a pod's
//! reason can both name them.

use super::cel::{Selector, Selectors};
use k8s_openapi::api::resource::v1 as dra;
use std::collections::BTreeMap;

/// How many devices an alternative takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `allocationMode: ExactCount` (the default) with its `count`.
    Count(u32),
    /// `allocationMode: All`: every matching device of the node.
    All,
}

/// Where a selector was written, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The request's (or subrequest's) own `selectors[i]`.
    Request(usize),
    /// `spec.selectors[i]` of the named DeviceClass.
    Class(String, usize),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Request(i) => write!(f, "selector {i}"),
            Origin::Class(c, i) => write!(f, "DeviceClass {c}'s selector {i}"),
        }
    }
}

/// One way to satisfy a request: the request itself (`exactly`) or one of
/// its `firstAvailable` subrequests.
#[derive(Debug, Clone)]
pub struct Alternative {
    /// `request` or `request/subrequest`.
    pub name: String,
    /// Its DeviceClass.
    pub class: String,
    /// The class's selectors, then its own, all of which must select a
    /// device.
    pub selectors: Vec<(Origin, Selector)>,
    /// How many devices.
    pub mode: Mode,
    /// `capacity.requests`: capacity each device must offer (qualified
    /// name, quantity).
    pub capacity: BTreeMap<String, String>,
}

/// A request of a claim.
#[derive(Debug, Clone)]
pub struct Request {
    /// Its name.
    pub name: String,
    /// Its alternatives in the order the user wrote them.
    pub alternatives: Vec<Alternative>,
}

/// What a constraint asks of the devices it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// `matchAttribute`: all have the same value.
    Match(String),
    /// `distinctAttribute`: all have different values.
    Distinct(String),
}

/// A constraint of a claim.
#[derive(Debug, Clone)]
pub struct Constraint {
    /// The requests it covers (`request` or `request/subrequest`; empty:
    /// every request of the claim).
    pub requests: Vec<String>,
    /// What it asks.
    pub rule: Rule,
}

impl Constraint {
    /// Whether it covers the devices of alternative `alt` of `request`.
    pub fn covers(&self, request: &str, alt: &str) -> bool {
        self.requests.is_empty() || self.requests.iter().any(|r| r == request || r == alt)
    }
}

/// A claim ready to match.
#[derive(Debug, Clone)]
pub struct Claim {
    /// Its requests.
    pub requests: Vec<Request>,
    /// Its constraints.
    pub constraints: Vec<Constraint>,
}

/// A problem of a claim spec: the field path (from the spec, e.g.
/// `devices.requests[0].exactly.selectors[1].cel.expression`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Field path within the claim spec.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The compiled selectors of a DeviceClass, or its problems with their
/// paths (`spec.selectors[0].cel.expression`).
pub fn class_selectors(
    class: &dra::DeviceClass,
    selectors: &mut Selectors,
) -> Result<Vec<(Origin, Selector)>, Vec<Problem>> {
    let name = class.metadata.name.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for (i, s) in class
        .spec
        .iter()
        .flat_map(|s| s.selectors.iter().flatten())
        .enumerate()
    {
        let path = format!("spec.selectors[{i}].cel.expression");
        match &s.cel {
            None => problems.push(Problem {
                path: format!("spec.selectors[{i}]"),
                message: "a selector without `cel` selects nothing Quartermaster knows".into(),
            }),
            Some(c) => match selectors.get(&c.expression) {
                Ok(sel) => out.push((Origin::Class(name.clone(), i), sel)),
                Err(message) => problems.push(Problem { path, message }),
            },
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Compiles a claim spec against the DeviceClasses.
///
/// # Errors
/// Every problem, with its path: no requests, a request with neither or
/// both of `exactly` and `firstAvailable`, an unknown DeviceClass (or one
/// whose selectors do not compile), a selector that does not compile, a
/// bad count or allocation mode, a capacity that is not a quantity, a
/// constraint naming an unknown request or no attribute.
pub fn claim(
    spec: &dra::ResourceClaimSpec,
    classes: &BTreeMap<String, dra::DeviceClass>,
    selectors: &mut Selectors,
) -> Result<Claim, Vec<Problem>> {
    let mut problems = Vec::new();
    let devices = spec.devices.clone().unwrap_or_default();
    let mut requests = Vec::new();
    for (i, r) in devices.requests.iter().flatten().enumerate() {
        let at = format!("devices.requests[{i}]");
        let alternatives = match (&r.exactly, &r.first_available) {
            (Some(e), None) => {
                let sub = Sub {
                    class: &e.device_class_name,
                    selectors: e.selectors.as_deref().unwrap_or_default(),
                    mode: e.allocation_mode.as_deref(),
                    count: e.count,
                    capacity: e.capacity.as_ref(),
                };
                sub.compile(
                    r.name.clone(),
                    &format!("{at}.exactly"),
                    classes,
                    selectors,
                    &mut problems,
                )
                .into_iter()
                .collect()
            }
            (None, Some(subs)) if !subs.is_empty() => subs
                .iter()
                .enumerate()
                .filter_map(|(j, s)| {
                    let sub = Sub {
                        class: &s.device_class_name,
                        selectors: s.selectors.as_deref().unwrap_or_default(),
                        mode: s.allocation_mode.as_deref(),
                        count: s.count,
                        capacity: s.capacity.as_ref(),
                    };
                    sub.compile(
                        format!("{}/{}", r.name, s.name),
                        &format!("{at}.firstAvailable[{j}]"),
                        classes,
                        selectors,
                        &mut problems,
                    )
                })
                .collect(),
            (Some(_), Some(_)) => {
                problems.push(Problem {
                    path: at.clone(),
                    message: "sets both exactly and firstAvailable".into(),
                });
                Vec::new()
            }
            _ => {
                problems.push(Problem {
                    path: at.clone(),
                    message: "sets neither exactly nor firstAvailable".into(),
                });
                Vec::new()
            }
        };
        requests.push(Request {
            name: r.name.clone(),
            alternatives,
        });
    }
    if requests.is_empty() && problems.is_empty() {
        problems.push(Problem {
            path: "devices.requests".into(),
            message: "the claim requests no devices".into(),
        });
    }
    let mut constraints = Vec::new();
    for (i, c) in devices.constraints.iter().flatten().enumerate() {
        let at = format!("devices.constraints[{i}]");
        let names = c.requests.clone().unwrap_or_default();
        for (j, n) in names.iter().enumerate() {
            let known = requests
                .iter()
                .any(|r| r.name == *n || r.alternatives.iter().any(|a| a.name == *n));
            if !known {
                problems.push(Problem {
                    path: format!("{at}.requests[{j}]"),
                    message: format!("names no request of the claim ({n:?})"),
                });
            }
        }
        let rule = match (&c.match_attribute, &c.distinct_attribute) {
            (Some(a), None) => Rule::Match(a.clone()),
            (None, Some(a)) => Rule::Distinct(a.clone()),
            _ => {
                problems.push(Problem {
                    path: at,
                    message: "needs exactly one of matchAttribute and distinctAttribute".into(),
                });
                continue;
            }
        };
        constraints.push(Constraint {
            requests: names,
            rule,
        });
    }
    if problems.is_empty() {
        Ok(Claim {
            requests,
            constraints,
        })
    } else {
        Err(problems)
    }
}

/// The fields `exactly` and a `firstAvailable` subrequest share.
struct Sub<'a> {
    class: &'a str,
    selectors: &'a [dra::DeviceSelector],
    mode: Option<&'a str>,
    count: Option<i64>,
    capacity: Option<&'a dra::CapacityRequirements>,
}

impl Sub<'_> {
    fn compile(
        &self,
        name: String,
        at: &str,
        classes: &BTreeMap<String, dra::DeviceClass>,
        selectors: &mut Selectors,
        problems: &mut Vec<Problem>,
    ) -> Option<Alternative> {
        let before = problems.len();
        let mut all = Vec::new();
        match classes.get(self.class) {
            None => problems.push(Problem {
                path: format!("{at}.deviceClassName"),
                message: format!("DeviceClass {:?} does not exist", self.class),
            }),
            Some(c) => match class_selectors(c, selectors) {
                Ok(s) => all.extend(s),
                Err(ps) => problems.extend(ps.into_iter().map(|p| Problem {
                    path: format!("{at}.deviceClassName"),
                    message: format!("DeviceClass {}: {p}", self.class),
                })),
            },
        }
        for (i, s) in self.selectors.iter().enumerate() {
            let Some(c) = &s.cel else {
                problems.push(Problem {
                    path: format!("{at}.selectors[{i}]"),
                    message: "a selector without `cel` selects nothing Quartermaster knows".into(),
                });
                continue;
            };
            match selectors.get(&c.expression) {
                Ok(sel) => all.push((Origin::Request(i), sel)),
                Err(message) => problems.push(Problem {
                    path: format!("{at}.selectors[{i}].cel.expression"),
                    message,
                }),
            }
        }
        let mode = match self.mode.unwrap_or("ExactCount") {
            "ExactCount" => match self.count.unwrap_or(1) {
                n if (1..=i64::from(u32::MAX)).contains(&n) => Mode::Count(n as u32),
                n => {
                    problems.push(Problem {
                        path: format!("{at}.count"),
                        message: format!("{n} is not a positive count"),
                    });
                    Mode::Count(1)
                }
            },
            "All" => Mode::All,
            other => {
                problems.push(Problem {
                    path: format!("{at}.allocationMode"),
                    message: format!("unknown allocation mode {other:?} (ExactCount or All)"),
                });
                Mode::Count(1)
            }
        };
        let mut capacity = BTreeMap::new();
        for (k, q) in self
            .capacity
            .and_then(|c| c.requests.as_ref())
            .into_iter()
            .flatten()
        {
            if crate::api::parse_quantity(&q.0).is_err() {
                problems.push(Problem {
                    path: format!("{at}.capacity.requests[{k}]"),
                    message: format!("{:?} is not a quantity", q.0),
                });
            }
            capacity.insert(k.clone(), q.0.clone());
        }
        (problems.len() == before).then_some(Alternative {
            name,
            class: self.class.to_string(),
            selectors: all,
            mode,
            capacity,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The NVIDIA chart's `gpu.nvidia.com` class, the EFA chart's class
    /// and the Neuron driver's.
    pub(crate) fn classes() -> BTreeMap<String, dra::DeviceClass> {
        let class = |name: &str, expr: &str| {
            let c: dra::DeviceClass = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": expr}}]}
            }))
            .unwrap();
            (name.to_string(), c)
        };
        [
            class(
                "gpu.nvidia.com",
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            ),
            class(
                "mig.nvidia.com",
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
            ),
            class(
                "efa.networking.k8s.aws",
                "device.driver == \"dra.net\" && device.attributes[\"dra.net\"].pciDevice == 'Elastic Fabric Adapter (EFA)'",
            ),
            class("neuron.aws.com", "device.driver == 'neuron.aws.com'"),
        ]
        .into_iter()
        .collect()
    }

    pub(crate) fn spec(yaml: &str) -> dra::ResourceClaimSpec {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn a_claim_compiles_with_its_class_selectors_first_and_its_alternatives_in_order() {
        let c = claim(
            &spec(
                r#"
devices:
  requests:
  - name: gpu
    firstAvailable:
    - {name: h100, deviceClassName: gpu.nvidia.com, selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]}
    - {name: l40s, deviceClassName: gpu.nvidia.com, count: 2}
  constraints:
  - {requests: [gpu], matchAttribute: resource.kubernetes.io/pcieRoot}
"#,
            ),
            &classes(),
            &mut Selectors::default(),
        )
        .unwrap();
        let alts = &c.requests[0].alternatives;
        assert_eq!(alts[0].name, "gpu/h100");
        assert_eq!(alts[1].mode, Mode::Count(2));
        assert_eq!(
            alts[0]
                .selectors
                .iter()
                .map(|(o, _)| o.to_string())
                .collect::<Vec<_>>(),
            ["DeviceClass gpu.nvidia.com's selector 0", "selector 0"]
        );
        assert!(c.constraints[0].covers("gpu", "gpu/l40s"));
    }

    #[test]
    fn every_problem_of_a_claim_is_named_with_its_path() {
        let problems = claim(
            &spec(
                r#"
devices:
  requests:
  - name: a
    exactly: {deviceClassName: tpu.example.com}
  - name: b
    exactly: {deviceClassName: gpu.nvidia.com, count: 0, selectors: [{cel: {expression: "device.attributes["}}]}
  - name: c
  constraints:
  - {requests: [z], matchAttribute: x}
"#,
            ),
            &classes(),
            &mut Selectors::default(),
        )
        .unwrap_err();
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 5, "{text:#?}");
        assert!(text[0].starts_with("devices.requests[0].exactly.deviceClassName: DeviceClass \"tpu.example.com\" does not exist"), "{text:#?}");
        assert!(
            text[1].starts_with(
                "devices.requests[1].exactly.selectors[0].cel.expression: does not compile"
            ),
            "{text:#?}"
        );
        assert!(
            text[2].starts_with("devices.requests[1].exactly.count: 0"),
            "{text:#?}"
        );
        assert!(
            text[3].contains("devices.requests[2]: sets neither"),
            "{text:#?}"
        );
        assert!(
            text[4].contains("devices.constraints[0].requests[0]"),
            "{text:#?}"
        );
    }
}
