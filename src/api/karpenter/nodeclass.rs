//! A Karpenter `EC2NodeClass` (`karpenter.k8s.aws/v1`) as ours: images,
//! subnets, security groups, capacity reservations, identity, tags, block
//! devices, instance store, user data and instance metadata options.
//! Quartermaster boots Amazon Linux 2023 (nodeadm) only, so AL2,
//! Bottlerocket and Windows set-ups are reported with what to do; the
//! kubelet settings, which our EC2NodeClass does not have, are reported
//! one by one.

use super::fields::{as_integer, describe, entry, index, join, Fields, Notes};
use super::metadata;
use crate::api::nodeclass::{
    user_data_mime_boundary, AmiAlias, AmiSelectorTerm, BlockDevice, BlockDeviceMapping,
    CapacityReservationSelectorTerm, EC2NodeClass, EC2NodeClassSpec, InstanceStorePolicy,
    MetadataOptions, SelectorTerm, MAX_EXTRA_TAGS,
};
use crate::api::quantity::parse_quantity;
use serde_json::{Map, Value};

/// Karpenter's instance metadata hop limit when unset: pods (one hop
/// further) cannot reach the instance metadata service.
pub const KARPENTER_HOP_LIMIT: i32 = 1;
/// Most block device mappings our EC2NodeClass takes.
const MAX_BLOCK_DEVICES: usize = 10;

/// Our EC2NodeClass for a Karpenter one, as a value.
pub(super) fn convert(doc: &Value, notes: &mut Notes) -> Option<Value> {
    let (metadata, spec) = metadata::object(
        doc,
        notes,
        "subnets, security groups and a role are required",
        empty_spec,
        spec,
    );
    let class = EC2NodeClass {
        metadata,
        spec,
        status: None,
    };
    let mut v = serde_json::to_value(&class).ok()?;
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    Some(v)
}

fn empty_spec() -> EC2NodeClassSpec {
    serde_json::from_value(serde_json::json!({
        "subnetSelectorTerms": [], "securityGroupSelectorTerms": []
    }))
    .expect("the two required fields suffice")
}

/// The image family a class boots, from `amiFamily` or its alias.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Family {
    Al2023,
    /// AL2, Bottlerocket, Windows...: not bootable by Quartermaster.
    Other(String),
    /// `Custom`: the user data is the user's alone.
    Custom,
}

fn family_of(name: &str) -> Family {
    match name.to_ascii_lowercase().as_str() {
        "al2023" => Family::Al2023,
        "custom" => Family::Custom,
        _ => Family::Other(name.to_string()),
    }
}

fn spec(v: &Value, path: &str, notes: &mut Notes) -> EC2NodeClassSpec {
    let mut f = Fields::of(v, path, notes);
    let mut out = empty_spec();
    let ami_family = f.string("amiFamily", notes);
    let alias_family = f
        .take("amiSelectorTerms")
        .and_then(|t| t.as_array())
        .and_then(|terms| terms.iter().find_map(|t| t.get("alias")?.as_str()))
        .and_then(|a| a.split('@').next())
        .map(family_of);
    let family = ami_family.as_deref().map(family_of);
    match &family {
        Some(Family::Other(name)) => notes.lost(
            &f.at("amiFamily"),
            format!("Quartermaster boots Amazon Linux 2023 with nodeadm only, not {name}: the converted class boots al2023@latest (or the AL2023-based images its terms select); move the node set-up (user data, kubelet settings) to AL2023 and check the workloads run there"),
        ),
        Some(Family::Custom) => notes.lost(
            &f.at("amiFamily"),
            "Custom: Karpenter passes such user data untouched; Quartermaster always adds its nodeadm NodeConfig (which joins the node) after the class's user data, so the images must be AL2023-based (nodeadm) and the user data must not join the node itself",
        ),
        Some(Family::Al2023) | None => {}
    }
    // An alias of another family is reported with its term.
    let family = family.or(alias_family);
    out.ami_selector_terms = ami_terms(v.get("amiSelectorTerms"), &f.at("amiSelectorTerms"), notes);
    out.subnet_selector_terms = selector_terms(
        f.list("subnetSelectorTerms", notes),
        &f.at("subnetSelectorTerms"),
        notes,
    );
    out.security_group_selector_terms = selector_terms(
        f.list("securityGroupSelectorTerms", notes),
        &f.at("securityGroupSelectorTerms"),
        notes,
    );
    out.capacity_reservation_selector_terms = reservation_terms(
        f.list("capacityReservationSelectorTerms", notes),
        &f.at("capacityReservationSelectorTerms"),
        notes,
    );
    out.role = f.string("role", notes).filter(|r| !r.is_empty());
    out.instance_profile = f.string("instanceProfile", notes).filter(|p| !p.is_empty());
    out.tags = tags(&mut f, notes);
    let kubelet_config = f
        .take("kubelet")
        .map(|k| kubelet(k, &f.at("kubelet"), notes))
        .unwrap_or_default();
    if let Some(list) = f.list("blockDeviceMappings", notes) {
        let path = f.at("blockDeviceMappings");
        out.block_device_mappings = list
            .iter()
            .enumerate()
            .filter_map(|(i, m)| block_device(m, &index(&path, i), notes))
            .collect();
        if out.block_device_mappings.len() > MAX_BLOCK_DEVICES {
            for i in MAX_BLOCK_DEVICES..out.block_device_mappings.len() {
                notes.lost(
                    &index(&path, i),
                    format!(
                        "Quartermaster takes at most {MAX_BLOCK_DEVICES} block devices: left out"
                    ),
                );
            }
            out.block_device_mappings.truncate(MAX_BLOCK_DEVICES);
        }
    }
    if let Some(p) = f.string("instanceStorePolicy", notes) {
        match p.as_str() {
            "RAID0" => out.instance_store_policy = Some(InstanceStorePolicy::Raid0),
            _ => notes.lost(
                &f.at("instanceStorePolicy"),
                format!("unknown policy {p:?} (RAID0): instance-store disks are left alone"),
            ),
        }
    }
    let user_data = f.string("userData", notes);
    if user_data.is_some() {
        if let Some(Family::Other(name)) = &family {
            notes.lost(
                &f.at("userData"),
                format!("written for {name}: carried as it is, but Quartermaster's nodes run AL2023, whose nodeadm reads a NodeConfig, a shell script or MIME multi-part; rewrite it for AL2023"),
            );
        }
    }
    out.user_data = with_kubelet_config(user_data, kubelet_config, &f.at("kubelet"), notes);
    out.metadata_options =
        metadata_options(f.take("metadataOptions"), &f.at("metadataOptions"), notes);
    if f.boolean("detailedMonitoring", notes) == Some(true) {
        notes.lost(
            &f.at("detailedMonitoring"),
            "Quartermaster launches with EC2's basic (5-minute) monitoring; enable detailed monitoring on the instances another way (e.g. an EventBridge rule on launch) if dashboards need 1-minute metrics",
        );
    }
    if let Some(public) = f.boolean("associatePublicIPAddress", notes) {
        notes.lost(
            &f.at("associatePublicIPAddress"),
            format!("Quartermaster leaves the public address to the subnet (its MapPublicIpOnLaunch); select subnets that {} public addresses", if public { "assign" } else { "do not assign" }),
        );
    }
    if f.take("ipPrefixCount").is_some() {
        notes.lost(
            &f.at("ipPrefixCount"),
            "Quartermaster does not assign IPv4 prefixes at launch; the VPC CNI's prefix delegation (ENABLE_PREFIX_DELEGATION) assigns them on the node",
        );
    }
    if let Some(e) = f.take("enclaveOptions") {
        let path = f.at("enclaveOptions");
        let mut ef = Fields::of(e, &path, notes);
        if ef.boolean("enabled", notes) == Some(true) {
            notes.lost(
                &join(&path, "enabled"),
                "Quartermaster does not launch Nitro Enclave instances",
            );
        }
        ef.finish(notes);
    }
    if f.take("context").is_some() {
        notes.lost(
            &f.at("context"),
            "Quartermaster passes no CreateFleet context (a reserved field AWS sets up for some accounts); ask AWS what it stands for in yours",
        );
    }
    f.finish(notes);
    out
}

fn ami_terms(v: Option<&Value>, path: &str, notes: &mut Notes) -> Vec<AmiSelectorTerm> {
    let default = || {
        vec![AmiSelectorTerm {
            alias: Some("al2023@latest".into()),
            ..AmiSelectorTerm::default()
        }]
    };
    let Some(v) = v else {
        notes.lost(
            path,
            "missing (Karpenter requires it): the class boots al2023@latest",
        );
        return default();
    };
    let Value::Array(terms) = v else {
        notes.lost(
            path,
            format!(
                "expected a list, found {}: the class boots al2023@latest",
                describe(v)
            ),
        );
        return default();
    };
    let out: Vec<AmiSelectorTerm> = terms
        .iter()
        .enumerate()
        .filter_map(|(i, t)| ami_term(t, &index(path, i), notes))
        .collect();
    if out.is_empty() {
        notes.info(
            path,
            "no term could be carried: the class boots al2023@latest, Quartermaster's default",
        );
        return default();
    }
    out
}

fn ami_term(v: &Value, path: &str, notes: &mut Notes) -> Option<AmiSelectorTerm> {
    let mut f = Fields::of(v, path, notes);
    let term = AmiSelectorTerm {
        alias: f.string("alias", notes),
        id: f.string("id", notes),
        name: f.string("name", notes),
        owner: f.string("owner", notes),
        tags: f.string_map("tags", notes),
    };
    if f.string("ssmParameter", notes).is_some() {
        notes.lost(
            &f.at("ssmParameter"),
            "Quartermaster selects images by alias, id, name or tags, not by SSM parameter: look the parameter up (aws ssm get-parameter) and select the image by id, or use alias al2023@latest for the EKS-optimized images",
        );
        f.finish(notes);
        return None;
    }
    f.finish(notes);
    if let Some(alias) = &term.alias {
        if let Err(why) = AmiAlias::parse(alias) {
            notes.lost(
                &join(path, "alias"),
                format!("{why}: Quartermaster boots the EKS-optimized AL2023 images only; the term is left out"),
            );
            return None;
        }
    }
    Some(term)
}

fn selector_terms(list: Option<&Vec<Value>>, path: &str, notes: &mut Notes) -> Vec<SelectorTerm> {
    let Some(list) = list else {
        notes.lost(path, "missing (Karpenter requires it)");
        return Vec::new();
    };
    list.iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let path = index(path, i);
            let mut f = Fields::of(t, &path, notes);
            let term = SelectorTerm {
                id: f.string("id", notes),
                tags: f.string_map("tags", notes),
            };
            let name = f.string("name", notes);
            f.finish(notes);
            if let Some(name) = name {
                notes.lost(
                    &join(&path, "name"),
                    format!("Quartermaster selects by id or tags, not by name: look up {name:?}'s id (for a security group: aws ec2 describe-security-groups --filters Name=group-name,Values={name}) or tag it; the term is left out"),
                );
                return None;
            }
            Some(term)
        })
        .collect()
}

fn reservation_terms(
    list: Option<&Vec<Value>>,
    path: &str,
    notes: &mut Notes,
) -> Vec<CapacityReservationSelectorTerm> {
    list.into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, t)| {
            let path = index(path, i);
            let mut f = Fields::of(t, &path, notes);
            let term = CapacityReservationSelectorTerm {
                id: f.string("id", notes),
                tags: f.string_map("tags", notes),
                price_per_hour: None,
            };
            if f.string("ownerID", notes).is_some() {
                notes.lost(
                    &f.at("ownerID"),
                    "Quartermaster matches reservations by id or tags in any account it can see, not by owner: tag the owner's reservations and select them by tag",
                );
            }
            if let Some(c) = f.string("instanceMatchCriteria", notes) {
                notes.lost(
                    &f.at("instanceMatchCriteria"),
                    format!("Quartermaster selects reservations by id or tags, not by match criteria ({c}): tag the reservations to use and select them by tag"),
                );
            }
            f.finish(notes);
            if term.id.is_none() && term.tags.is_empty() {
                notes.lost(&path, "neither an id nor tags are left: the term is left out");
                return None;
            }
            Some(term)
        })
        .collect()
}

fn tags(f: &mut Fields<'_>, notes: &mut Notes) -> std::collections::BTreeMap<String, String> {
    let path = f.at("tags");
    let mut tags = f.string_map("tags", notes);
    tags.retain(|k, _| {
        let ours = k.starts_with(crate::labels::GROUP)
            || k == "Name"
            || k.to_ascii_lowercase().starts_with("aws:")
            || k.starts_with("kubernetes.io/cluster/");
        if ours {
            notes.lost(
                &entry(&path, k),
                "Quartermaster or AWS sets this tag itself (quartermaster.dev/, Name, aws:, kubernetes.io/cluster/ are reserved): left out",
            );
        }
        !ours
    });
    if tags.len() > MAX_EXTRA_TAGS {
        notes.lost(
            &path,
            format!("Quartermaster takes at most {MAX_EXTRA_TAGS} tags ({} given): all are carried and validation refuses the class until some go", tags.len()),
        );
    }
    tags
}

/// Karpenter's kubelet settings that only the kubelet reads (they do not
/// change what fits on a node): carried into the user data as a nodeadm
/// `NodeConfig`, as Karpenter itself passes them on AL2023.
pub const NODE_ONLY_KUBELET: &[&str] = &[
    "clusterDNS",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
];
/// Karpenter's kubelet settings that change what fits on a node, which the
/// planner computes from EKS's defaults: reported, not carried.
pub const ALLOCATABLE_KUBELET: &[&str] = &[
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
];

/// Largest user data our EC2NodeClass takes.
const MAX_USER_DATA: usize = 16384;
/// MIME boundary of user data the conversion composes.
const BOUNDARY: &str = "QUARTERMASTER-CONVERTED";

/// Karpenter's kubelet settings: the node-only ones to carry (as a
/// `spec.kubelet.config` map), the others reported.
fn kubelet(v: &Value, path: &str, notes: &mut Notes) -> Map<String, Value> {
    let Value::Object(m) = v else {
        notes.lost(path, format!("expected a mapping, found {}", describe(v)));
        return Map::new();
    };
    let mut carried = Map::new();
    for (k, value) in m {
        if NODE_ONLY_KUBELET.contains(&k.as_str()) {
            carried.insert(k.clone(), value.clone());
        } else if ALLOCATABLE_KUBELET.contains(&k.as_str()) {
            notes.lost(
                &join(path, k),
                format!("Quartermaster's EC2NodeClass has no kubelet settings, and its planner computes what fits on a node with EKS's defaults (max pods from the ENI limits, kube-reserved by the EKS formula, no system-reserved, eviction at 100Mi): a nodeadm NodeConfig in userData (spec.kubelet.config.{k}) would change the kubelet but not what the planner expects; leave it out or keep the difference small"),
            );
        } else {
            notes.lost(
                &join(path, k),
                "not a kubelet setting this conversion knows: left out; if the kubelet has it, set it in userData with a nodeadm NodeConfig (spec.kubelet.config)",
            );
        }
    }
    carried
}

/// The class's user data with the carried kubelet settings appended as a
/// nodeadm `NodeConfig` part (after the user's own parts, so that the
/// `kubelet` field wins over a `NodeConfig` the user data already has, as
/// in Karpenter). Each carried setting gets a note.
fn with_kubelet_config(
    user_data: Option<String>,
    config: Map<String, Value>,
    kubelet_path: &str,
    notes: &mut Notes,
) -> Option<String> {
    if config.is_empty() {
        return user_data;
    }
    let node_config = serde_json::json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"kubelet": {"config": config}},
    });
    let yaml = serde_norway::to_string(&node_config).unwrap_or_default();
    let part = |kind: &str, body: &str, boundary: &str| {
        format!(
            "--{boundary}\nContent-Type: {kind}\n\n{}\n",
            body.trim_end()
        )
    };
    let composed = match &user_data {
        None => Some(yaml.clone()),
        Some(data) => match user_data_mime_boundary(data) {
            Some(b) => data.rfind(&format!("--{b}--")).map(|end| {
                let mut out = data.clone();
                out.insert_str(end, &part("application/node.eks.aws", &yaml, &b));
                out
            }),
            None => {
                let kind = if data.contains("node.eks.aws/") {
                    "application/node.eks.aws"
                } else {
                    "text/x-shellscript; charset=\"us-ascii\""
                };
                Some(format!(
                    "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n{}{}--{BOUNDARY}--\n",
                    part(kind, data, BOUNDARY),
                    part("application/node.eks.aws", &yaml, BOUNDARY)
                ))
            }
        },
    };
    let problem = match &composed {
        None => Some("the user data is MIME multi-part without its closing boundary, so no part could be added".to_string()),
        Some(c) if c.len() > MAX_USER_DATA => Some(format!(
            "with it the user data would pass Quartermaster's {MAX_USER_DATA}-byte limit"
        )),
        Some(_) => None,
    };
    for k in config.keys() {
        let path = join(kubelet_path, k);
        match &problem {
            None => notes.info(
                &path,
                format!("carried in userData as a nodeadm NodeConfig (spec.kubelet.config.{k}), merged before Quartermaster's own, as Karpenter passes it on AL2023"),
            ),
            Some(why) => notes.lost(
                &path,
                format!("{why}: left out; add a NodeConfig with spec.kubelet.config.{k} to userData by hand"),
            ),
        }
    }
    match problem {
        None => composed,
        Some(_) => user_data,
    }
}

fn block_device(v: &Value, path: &str, notes: &mut Notes) -> Option<BlockDeviceMapping> {
    let mut f = Fields::of(v, path, notes);
    let device_name = f.string("deviceName", notes);
    let root_volume = f.boolean("rootVolume", notes).unwrap_or(false);
    let ebs_path = f.at("ebs");
    let ebs = f.take("ebs");
    f.finish(notes);
    let Some(device_name) = device_name else {
        notes.lost(
            path,
            "no deviceName (e.g. /dev/xvda, the AL2023 root device): the mapping is left out",
        );
        return None;
    };
    let Some(ebs) = ebs else {
        notes.lost(&ebs_path, "missing: the mapping is left out");
        return None;
    };
    let mut e = Fields::of(ebs, &ebs_path, notes);
    let size = e.string("volumeSize", notes);
    let volume_type = e.string("volumeType", notes);
    let iops = e.integer("iops", notes);
    let throughput = e.integer("throughput", notes);
    let encrypted = e.boolean("encrypted", notes);
    let kms_key_id = e.string("kmsKeyID", notes);
    let delete_on_termination = e.boolean("deleteOnTermination", notes).unwrap_or(true);
    let snapshot_id = e.string("snapshotID", notes);
    if e.take("volumeInitializationRate").is_some() {
        notes.lost(
            &e.at("volumeInitializationRate"),
            "Quartermaster does not set a volume initialization rate: the snapshot's blocks load at EBS's default rate",
        );
    }
    let size_path = e.at("volumeSize");
    e.finish(notes);
    let Some(size) = size else {
        notes.lost(
            &size_path,
            "missing: Quartermaster needs the size (volumeSizeGiB) even with a snapshot; set it to the snapshot's size or more. The mapping is left out",
        );
        return None;
    };
    let gib = volume_size_gib(&size, &size_path, notes)?;
    if volume_type.is_none() {
        notes.info(
            &join(&ebs_path, "volumeType"),
            "unset: Quartermaster makes it gp3 (Karpenter left the type to EC2)",
        );
    }
    if encrypted.is_none() {
        notes.info(
            &join(&ebs_path, "encrypted"),
            "unset: Quartermaster encrypts it (Karpenter left it to the account's EBS default)",
        );
    }
    let small = |n: Option<i64>, field: &str, notes: &mut Notes| {
        n.and_then(|n| {
            i32::try_from(n)
                .map_err(|_| notes.lost(&join(&ebs_path, field), format!("{n} is out of range")))
                .ok()
        })
    };
    Some(BlockDeviceMapping {
        device_name,
        root_volume,
        ebs: BlockDevice {
            volume_size_gib: gib,
            volume_type: volume_type.unwrap_or_else(|| "gp3".into()),
            iops: small(iops, "iops", notes),
            throughput: small(throughput, "throughput", notes),
            encrypted: encrypted.unwrap_or(true),
            kms_key_id,
            delete_on_termination,
            snapshot_id,
        },
    })
}

/// Karpenter's `volumeSize` quantity as whole GiB the way Karpenter
/// launches it: the bytes divided by 2^30, rounded up (`500Gi` is 500,
/// `100G` is 94).
fn volume_size_gib(size: &str, path: &str, notes: &mut Notes) -> Option<i32> {
    let bytes = match parse_quantity(size) {
        Ok(b) if b > 0.0 => b,
        Ok(_) => {
            notes.lost(
                path,
                format!("{size:?} is not a positive size: the mapping is left out"),
            );
            return None;
        }
        Err(e) => {
            notes.lost(path, format!("{e}: the mapping is left out"));
            return None;
        }
    };
    let gib = (bytes / f64::from(1u32 << 30)).ceil();
    if gib > f64::from(i32::MAX) {
        notes.lost(
            path,
            format!("{size:?} is too large: the mapping is left out"),
        );
        return None;
    }
    let gib = gib as i32;
    if !size.ends_with("Gi") && !size.ends_with("Ti") {
        notes.info(
            path,
            format!(
                "{size} is {gib} GiB rounded up, the size Karpenter launches: volumeSizeGiB: {gib}"
            ),
        );
    }
    Some(gib)
}

fn metadata_options(v: Option<&Value>, path: &str, notes: &mut Notes) -> MetadataOptions {
    let mut out = MetadataOptions {
        http_put_response_hop_limit: KARPENTER_HOP_LIMIT,
        ..MetadataOptions::default()
    };
    let hop_note = |notes: &mut Notes| {
        notes.info(
            &join(path, "httpPutResponseHopLimit"),
            format!("unset: Karpenter's default {KARPENTER_HOP_LIMIT} written out, so pods still cannot reach the instance metadata service (Quartermaster's own default is 2)"),
        )
    };
    let Some(v) = v else {
        hop_note(notes);
        return out;
    };
    let mut f = Fields::of(v, path, notes);
    let enabled_or_disabled = |f: &mut Fields<'_>, key: &str, notes: &mut Notes| {
        let s = f.string(key, notes)?;
        if s == "enabled" || s == "disabled" {
            Some(s)
        } else {
            notes.lost(
                &f.at(key),
                format!("{s:?} is neither enabled nor disabled: the default applies"),
            );
            None
        }
    };
    if let Some(e) = enabled_or_disabled(&mut f, "httpEndpoint", notes) {
        if e == "disabled" {
            notes.lost(
                &f.at("httpEndpoint"),
                "nodeadm reads the instance metadata service to join the node: Quartermaster keeps it enabled",
            );
        }
    }
    if let Some(v6) = enabled_or_disabled(&mut f, "httpProtocolIPv6", notes) {
        out.http_protocol_ipv6 = v6;
    }
    let hop_path = f.at("httpPutResponseHopLimit");
    match f.take("httpPutResponseHopLimit") {
        Some(h) => {
            if let Some(h) = as_integer(h, &hop_path, notes) {
                match i32::try_from(h) {
                    Ok(h) if (1..=64).contains(&h) => out.http_put_response_hop_limit = h,
                    _ => notes.lost(
                        &hop_path,
                        format!("{h} is not within 1..=64: Karpenter's default 1 applies"),
                    ),
                }
            }
        }
        None => hop_note(notes),
    }
    if let Some(t) = f.string("httpTokens", notes) {
        match t.as_str() {
            "required" | "optional" => out.http_tokens = t,
            _ => notes.lost(
                &f.at("httpTokens"),
                format!("{t:?} is neither required nor optional: required applies"),
            ),
        }
    }
    f.finish(notes);
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::{lost, one};
    use super::super::NoteKind;
    use super::*;
    use crate::api::nodeclass::node_class_problems;

    const BASE: &str = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: gpu}\nspec:\n  role: KarpenterNodeRole-prod\n  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}, {id: subnet-0123456789abcdef0}]\n  securityGroupSelectorTerms: [{id: sg-0123456789abcdef0}]\n";

    #[test]
    fn a_typical_al2023_gpu_class_carries_over() {
        let yaml = format!(
            "{BASE}  amiFamily: AL2023\n  amiSelectorTerms: [{{alias: al2023@v20250715}}]\n  tags: {{team: ml}}\n  instanceStorePolicy: RAID0\n  userData: |\n    #!/bin/bash\n    echo hi\n  blockDeviceMappings:\n    - deviceName: /dev/xvda\n      rootVolume: true\n      ebs: {{volumeSize: 500Gi, volumeType: gp3, iops: 6000, throughput: 500, encrypted: true, kmsKeyID: alias/ebs, deleteOnTermination: false}}\n  metadataOptions: {{httpEndpoint: enabled, httpProtocolIPv6: disabled, httpPutResponseHopLimit: 2, httpTokens: required}}\n  capacityReservationSelectorTerms: [{{id: cr-0123456789abcdef0}}, {{tags: {{team: ml}}}}]\n  detailedMonitoring: false\n"
        );
        let (c, notes): (EC2NodeClass, _) = one(&yaml);
        assert!(notes.is_empty(), "{notes:?}");
        let s = &c.spec;
        assert_eq!(
            s.ami_selector_terms[0].alias.as_deref(),
            Some("al2023@v20250715")
        );
        assert_eq!(s.subnet_selector_terms.len(), 2);
        assert_eq!(
            s.security_group_selector_terms[0].id.as_deref(),
            Some("sg-0123456789abcdef0")
        );
        assert_eq!(s.role.as_deref(), Some("KarpenterNodeRole-prod"));
        let b = &s.block_device_mappings[0];
        assert_eq!((b.device_name.as_str(), b.root_volume), ("/dev/xvda", true));
        assert_eq!(b.ebs.volume_size_gib, 500);
        assert_eq!((b.ebs.iops, b.ebs.throughput), (Some(6000), Some(500)));
        assert!(!b.ebs.delete_on_termination);
        assert_eq!(b.ebs.kms_key_id.as_deref(), Some("alias/ebs"));
        assert_eq!(s.instance_store_policy, Some(InstanceStorePolicy::Raid0));
        assert!(s.user_data.as_deref().unwrap().contains("echo hi"));
        assert_eq!(s.metadata_options.http_put_response_hop_limit, 2);
        assert_eq!(s.capacity_reservation_selector_terms.len(), 2);
        assert!(
            node_class_problems(s).is_empty(),
            "{:?}",
            node_class_problems(s)
        );
    }

    #[test]
    fn volume_sizes_become_whole_gib_as_karpenter_launches_them() {
        let mut notes = Notes::default();
        let gib = |s: &str, notes: &mut Notes| volume_size_gib(s, "v", notes);
        assert_eq!(gib("500Gi", &mut notes), Some(500));
        assert_eq!(gib("1Ti", &mut notes), Some(1024));
        assert!(notes.0.is_empty());
        assert_eq!(gib("100G", &mut notes), Some(94), "1e11 bytes is 93.1 GiB");
        assert_eq!(gib("1T", &mut notes), Some(932));
        assert_eq!(notes.0.len(), 2);
        assert!(notes.0.iter().all(|n| n.kind == NoteKind::Info));
        assert_eq!(gib("lots", &mut notes), None);
        assert_eq!(gib("0Gi", &mut notes), None);
        assert_eq!(notes.0.len(), 4);
    }

    #[test]
    fn karpenter_defaults_that_differ_are_written_out() {
        let yaml = format!("{BASE}  amiSelectorTerms: [{{alias: al2023@latest}}]\n  blockDeviceMappings: [{{deviceName: /dev/xvda, ebs: {{volumeSize: 100Gi}}}}]\n");
        let (c, notes): (EC2NodeClass, _) = one(&yaml);
        assert_eq!(c.spec.metadata_options.http_put_response_hop_limit, 1);
        let b = &c.spec.block_device_mappings[0].ebs;
        assert_eq!((b.volume_type.as_str(), b.encrypted), ("gp3", true));
        assert_eq!(
            notes,
            [
                (
                    "spec.blockDeviceMappings[0].ebs.volumeType".to_string(),
                    NoteKind::Info
                ),
                (
                    "spec.blockDeviceMappings[0].ebs.encrypted".to_string(),
                    NoteKind::Info
                ),
                (
                    "spec.metadataOptions.httpPutResponseHopLimit".to_string(),
                    NoteKind::Info
                ),
            ]
        );
    }

    #[test]
    fn other_image_families_and_their_user_data_are_reported() {
        let yaml = format!("{BASE}  amiSelectorTerms: [{{alias: bottlerocket@latest}}]\n  userData: |\n    [settings.kubernetes]\n");
        let (c, notes): (EC2NodeClass, _) = one(&yaml);
        assert_eq!(
            c.spec.ami_selector_terms[0].alias.as_deref(),
            Some("al2023@latest")
        );
        assert_eq!(
            lost(&notes),
            ["spec.amiSelectorTerms[0].alias", "spec.userData"]
        );
        let yaml = format!("{BASE}  amiFamily: Custom\n  amiSelectorTerms: [{{name: my-al2023-*, owner: self}}, {{ssmParameter: /my/ami}}]\n");
        let (c, notes): (EC2NodeClass, _) = one(&yaml);
        assert_eq!(c.spec.ami_selector_terms.len(), 1);
        assert_eq!(c.spec.ami_selector_terms[0].owner.as_deref(), Some("self"));
        assert_eq!(
            lost(&notes),
            ["spec.amiFamily", "spec.amiSelectorTerms[1].ssmParameter"]
        );
    }

    #[test]
    fn what_our_class_lacks_is_reported_field_by_field() {
        let yaml = format!(
            "{BASE}  amiSelectorTerms: [{{alias: al2023@latest}}]\n  securityGroupSelectorTerms: [{{name: nodes}}]\n  kubelet: {{maxPods: 110, clusterDNS: [10.0.0.10]}}\n  tags: {{Name: node, team: ml}}\n  capacityReservationSelectorTerms: [{{instanceMatchCriteria: open}}, {{tags: {{a: b}}, ownerID: \"123456789012\"}}]\n  detailedMonitoring: true\n  associatePublicIPAddress: false\n  ipPrefixCount: 1\n  enclaveOptions: {{enabled: true}}\n  context: x\n  metadataOptions: {{httpEndpoint: disabled, httpPutResponseHopLimit: 1}}\n  blockDeviceMappings: [{{deviceName: /dev/xvdb, ebs: {{snapshotID: snap-0123456789abcdef0}}}}]\n  instanceStorePolicy: RAID1\n  extra: 1\n"
        );
        let yaml = yaml.replace(
            "  securityGroupSelectorTerms: [{id: sg-0123456789abcdef0}]\n",
            "",
        );
        let (c, notes): (EC2NodeClass, _) = one(&yaml);
        assert!(notes.contains(&("spec.kubelet.clusterDNS".into(), NoteKind::Info)));
        assert!(c.spec.user_data.unwrap().contains("clusterDNS"));
        assert_eq!(c.spec.tags.len(), 1);
        assert!(c.spec.block_device_mappings.is_empty());
        assert_eq!(c.spec.capacity_reservation_selector_terms.len(), 1);
        assert_eq!(
            lost(&notes),
            [
                "spec.securityGroupSelectorTerms[0].name",
                "spec.capacityReservationSelectorTerms[0].instanceMatchCriteria",
                "spec.capacityReservationSelectorTerms[0]",
                "spec.capacityReservationSelectorTerms[1].ownerID",
                "spec.tags[Name]",
                "spec.kubelet.maxPods",
                "spec.blockDeviceMappings[0].ebs.volumeSize",
                "spec.instanceStorePolicy",
                "spec.metadataOptions.httpEndpoint",
                "spec.detailedMonitoring",
                "spec.associatePublicIPAddress",
                "spec.ipPrefixCount",
                "spec.enclaveOptions.enabled",
                "spec.context",
                "spec.extra",
            ]
        );
    }

    #[test]
    fn node_only_kubelet_settings_travel_in_the_user_data_as_a_node_config() {
        let config: Map<String, Value> = serde_json::from_str(
            r#"{"clusterDNS": ["169.254.20.10"], "imageGCHighThresholdPercent": 85}"#,
        )
        .unwrap();
        let node_config = |text: &str| {
            let at = text.find("apiVersion: node.eks.aws/v1alpha1").unwrap();
            let doc: Value =
                serde_norway::from_str(text[at..].split("\n--").next().unwrap()).unwrap();
            doc["spec"]["kubelet"]["config"].clone()
        };
        let mut notes = Notes::default();
        let alone = with_kubelet_config(None, config.clone(), "k", &mut notes).unwrap();
        assert_eq!(node_config(&alone), Value::Object(config.clone()));
        assert_eq!(notes.0.len(), 2);
        assert!(notes.0.iter().all(|n| n.kind == NoteKind::Info));

        let script = "#!/bin/bash\necho hi\n".to_string();
        let both = with_kubelet_config(Some(script), config.clone(), "k", &mut notes).unwrap();
        assert_eq!(user_data_mime_boundary(&both).as_deref(), Some(BOUNDARY));
        let shell = both.find("echo hi").unwrap();
        assert!(shell < both.find("kind: NodeConfig").unwrap(), "{both}");
        assert!(both.contains("Content-Type: text/x-shellscript"));
        assert!(both.trim_end().ends_with(&format!("--{BOUNDARY}--")));
        assert_eq!(node_config(&both), Value::Object(config.clone()));

        let mime = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XX\"\n\n--XX\nContent-Type: text/x-shellscript\n\necho two\n--XX--\n";
        let added =
            with_kubelet_config(Some(mime.into()), config.clone(), "k", &mut notes).unwrap();
        assert_eq!(added.matches("--XX\n").count(), 2, "{added}");
        assert!(added.trim_end().ends_with("--XX--"));
        assert_eq!(node_config(&added), Value::Object(config.clone()));

        let mut notes = Notes::default();
        let open = "Content-Type: multipart/mixed; boundary=\"YY\"\n\n--YY\n\necho\n";
        let kept = with_kubelet_config(Some(open.into()), config, "k", &mut notes);
        assert_eq!(kept.as_deref(), Some(open));
        assert_eq!(notes.0.len(), 2);
        assert!(notes.0.iter().all(|n| n.kind == NoteKind::NotCarried));
    }
}
