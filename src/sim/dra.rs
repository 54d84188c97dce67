//! DRA workloads in the simulator: a workload source's `dra:` asks its pods'
//! GPU (MIG, Neuron) demand through ResourceClaims made from
//! ResourceClaimTemplates instead of device-plugin counts
//! ([`crate::plan::workload::dra_form_with`]), matched against the
//! catalog's device templates by the resolver the controller runs
//! ([`crate::cluster::dra::Resolver`]). What the claims mean, and what the
//! nodes publish, is decided there and in the core, never here.

use super::workload::SimJob;
use crate::catalog::Catalog;
use crate::cluster::dra::{Objects, Resolver};
use crate::cluster::Pod;
use schemars::JsonSchema;
use serde::Deserialize;

/// `dra:` of a workload source: its pods ask for their devices through
/// DRA claims, one claim per pod from a ResourceClaimTemplate per distinct
/// request, on the drivers' DeviceClasses (`gpu.nvidia.com`,
/// `mig.nvidia.com`, `neuron.aws.com`). A GPU-model requirement of a
/// trace row becomes a selector on the product name. The fields narrow
/// every GPU request further (all that are given must hold).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DraSpec {
    /// Only GPUs of this product name, as the NVIDIA DRA driver publishes
    /// it (`productName`, e.g. `NVIDIA L4`; `catalog --devices TYPE` shows
    /// a type's).
    #[serde(default)]
    pub product_name: Option<String>,
    /// Only GPUs with at least this much memory (a quantity, `40Gi`).
    #[serde(default)]
    pub min_memory: Option<String>,
    /// A CEL selector of its own on each GPU (`device.attributes[...]`).
    #[serde(default)]
    pub selector: Option<String>,
}

impl DraSpec {
    /// The CEL selector every GPU request carries, if the spec narrows
    /// them.
    pub fn selector(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(p) = &self.product_name {
            parts.push(format!(
                "device.attributes['gpu.nvidia.com'].productName == '{p}'"
            ));
        }
        if let Some(m) = &self.min_memory {
            parts.push(format!(
                "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('{m}')) >= 0"
            ));
        }
        if let Some(s) = &self.selector {
            parts.push(format!("({s})"));
        }
        (!parts.is_empty()).then(|| parts.join(" && "))
    }

    /// Everything wrong with it, as texts naming the field under `at`: a
    /// product name or memory that cannot be put in a selector, a memory
    /// that is not a quantity, a selector that does not compile.
    pub fn problems(&self, at: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(p) = self.product_name.as_ref().filter(|p| p.contains('\'')) {
            out.push(format!("{at}.productName: {p:?} may not contain a quote"));
        }
        if let Some(m) = &self.min_memory {
            if let Err(e) = crate::api::quantity::parse_quantity(m) {
                out.push(format!("{at}.minMemory: {m:?} is not a quantity: {e}"));
            }
        }
        if let Some(s) = &self.selector {
            if let Err(e) = crate::cluster::dra::cel::compile(s) {
                out.push(format!("{at}.selector: {e}"));
            }
        }
        out
    }

    /// Turns the device demand of `jobs` (of workload source `source`)
    /// into DRA claims and returns the DeviceClasses and templates they
    /// name. Each job keeps the GPUs it holds ([`SimJob::gpu_share`]), so
    /// the report charges it the same share of its node.
    pub fn apply(&self, jobs: &mut [SimJob], source: usize) -> Objects {
        let pods: Vec<Pod> = jobs.iter().map(|j| j.pod.clone()).collect();
        let selector = self.selector();
        let prefix = format!("w{source}-");
        let (pods, objects) =
            crate::plan::workload::dra_form_with(&pods, &prefix, selector.as_deref());
        for (j, p) in jobs.iter_mut().zip(pods) {
            if !p.resource_claims.is_empty() && j.gpu_share.is_none() {
                j.gpu_share = Some(j.pod.requests.gpus());
            }
            j.pod = p;
        }
        objects
    }
}

/// Matches the claims of every job's pod against `objects` and the
/// catalog's device templates, as the controller matches a pending pod's:
/// each gets its devices, or reasons it cannot be placed. The GPUs of
/// `pools` that share them by MPS are matched shared too.
pub fn resolve(
    jobs: &mut [SimJob],
    objects: &Objects,
    catalog: &Catalog,
    pools: &[crate::api::NodePool],
) {
    let idx: Vec<usize> = (0..jobs.len())
        .filter(|&i| !jobs[i].pod.resource_claims.is_empty())
        .collect();
    let mut pods: Vec<Pod> = idx.iter().map(|&i| jobs[i].pod.clone()).collect();
    Resolver::new()
        .share_gpus(
            pools
                .iter()
                .filter_map(|p| p.spec.gpu_sharing.dra_gpu_shares()),
        )
        .attach(&mut pods, objects, catalog);
    for (i, p) in idx.into_iter().zip(pods) {
        jobs[i].pod = p;
    }
}
