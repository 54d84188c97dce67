//! The EC2 provider against moto server (launch, retry after a crash,
//! terminate, garbage collection), and against replayed EC2 answers for
//! what moto cannot fake (insufficient capacity, throttling).
//!
//! What moto 5.2.5 does differently from EC2, and how the tests adapt (the
//! provider's code is written for EC2):
//! - `CreateFleet` ignores `ClientToken`: the crash-retry test relies on the
//!   provider's describe-before-launch, which is what a crash after EC2
//!   made the instance visible exercises anyway.
//! - `CreateFleet` tags instances but not volumes (`ResourceType=volume` is
//!   dropped), so volume tags are not checked here.
//! - moto refuses parameters under `/aws/`, so the EKS image parameters
//!   are put under a root of the test's own and the resolver is pointed at
//!   it ([`Resolver::with_parameter_root`]); moto keeps any image ID (AMI
//!   validation is off by default), which the tests check.
//! - The launch template's security groups, instance profile and block
//!   devices are not applied to fleet instances; the tests check them in the
//!   launch template moto stores instead.

use crate::support;

use aws_sdk_ec2::types::{InstanceAttributeName, InstanceLifecycleType};
use quartermaster::api::labels as l;
use quartermaster::api::nodeclass::EC2NodeClassSpec;
use quartermaster::catalog::CapacityType;
use quartermaster::cloud::aws::ec2::{AwsCloud, ImageVariant, NodeClass, Settings};
use quartermaster::cloud::aws::nodeclass::reasons;
use quartermaster::cloud::{self, CloudProvider, Error, InstanceState, NodeTemplate};
use quartermaster::core::{ClaimRequest, OfferingKey};
use std::collections::HashMap;
use std::sync::Arc;
use support::aws_world::{claim, image_of, template, World, ZONES};
use support::moto::unique;

fn tag_of<'a>(i: &'a aws_sdk_ec2::types::Instance, key: &str) -> Option<&'a str> {
    i.tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

fn id_of(provider_id: &str) -> String {
    cloud::instance_id_of(provider_id).to_string()
}

#[tokio::test]
async fn each_launch_gets_the_eks_image_its_architecture_and_accelerator_need() {
    // The images of the alias follow the instance type: an x86_64 NVIDIA
    // image on g6, arm64 NVIDIA on g5g (read from the
    // planner's arch label), Neuron on trn1, the standard arm64 image on a
    // Graviton CPU type (read from its name).
    let w = World::new().await;
    let aws = w.cloud().await;
    let cases = [
        (
            "img-g6",
            "g6.xlarge",
            vec![(l::ARCH, "amd64"), (l::GPU_NAME, "l4")],
            "x86_64/nvidia",
        ),
        (
            "img-g5g",
            "g5g.xlarge",
            vec![(l::ARCH, "arm64"), (l::GPU_NAME, "t4g")],
            "arm64/nvidia",
        ),
        ("img-trn1", "trn1.2xlarge", vec![], "x86_64/neuron"),
        ("img-m7g", "m7g.large", vec![], "arm64/standard"),
    ];
    for (name, instance_type, labels, variant) in cases {
        let mut t = template();
        t.labels
            .insert(l::INSTANCE_TYPE.into(), instance_type.into());
        for (k, v) in labels {
            t.labels.insert(k.into(), v.into());
        }
        let c = claim(name, instance_type, "use1-az4", CapacityType::OnDemand);
        aws.launch(&c, &t, chrono::Utc::now()).await.unwrap();
        let found = w.instances_of(name).await;
        assert_eq!(found.len(), 1, "{name}");
        assert_eq!(
            found[0].image_id(),
            Some(format!("ami-{}", variant.replace('/', "-")).as_str()),
            "{name}"
        );
        // What drift compares a claim against is the image it was launched
        // with, and the class's hash.
        let spec = quartermaster::api::NodeClaimSpec {
            node_pool: c.nodepool.clone(),
            instance_type: instance_type.into(),
            zone: "use1-az4".into(),
            capacity_type: CapacityType::OnDemand,
            price_per_hour: 1.0,
            resources: Default::default(),
            labels: t.labels.clone(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            termination_grace_period: None,
            expire_after: None,
        };
        let stamp = aws.launch_stamp(&spec).expect("the pool has a ready class");
        assert_eq!(Some(stamp.image.as_str()), found[0].image_id(), "{name}");
        assert_eq!(stamp.hash.len(), 16);
    }
}

#[tokio::test]
async fn a_node_class_resolves_one_image_per_variant_its_subnets_groups_and_profile() {
    let w = World::new().await;
    let r = w.resolve(&w.node_class_spec()).await;
    let amis = r.amis.clone().unwrap();
    let got: Vec<(String, String, String)> = amis
        .iter()
        .map(|a| (a.architecture.clone(), a.accelerator.clone(), a.id.clone()))
        .collect();
    let mut want: Vec<(String, String, String)> = ImageVariant::ALL
        .iter()
        .map(|v| {
            (
                v.arch.as_str().to_string(),
                v.driver.as_str().to_string(),
                image_of(*v),
            )
        })
        .collect();
    want.sort();
    assert_eq!(got, want);
    let subnets = r.subnets.clone().unwrap();
    let mut ids: Vec<&str> = subnets.iter().map(|s| s.id.as_str()).collect();
    ids.sort();
    let mut own: Vec<&str> = w.subnets.iter().map(String::as_str).collect();
    own.sort();
    assert_eq!(ids, own);
    for s in &subnets {
        let (_, zone_id) = ZONES.iter().find(|(name, _)| *name == s.zone).unwrap();
        assert_eq!(s.zone_id, *zone_id, "{s:?}");
        assert!(s.available_ip_address_count > 200, "{s:?}");
    }
    let groups = r.security_groups.clone().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].id, w.security_group);
    assert_eq!(r.instance_profile, Ok(w.instance_profile.clone()));
    assert_eq!(r.first_problem(), None);

    // A dated alias reads that release's parameters: none exist here.
    let mut dated = w.node_class_spec();
    dated.ami_selector_terms[0].alias = Some("al2023@v20250101".into());
    let r = w.resolve(&dated).await;
    let p = r.amis.unwrap_err();
    assert_eq!(p.reason, reasons::AMIS_NOT_FOUND, "{p:?}");
    assert!(w
        .resolver()
        .parameter("1.33", &quartermaster::api::nodeclass::AmiAlias::parse("al2023@v20250101").unwrap(), ImageVariant::ALL[1])
        .ends_with("/1.33/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.33-v20250101/image_id"));
}

#[tokio::test]
async fn a_custom_image_term_serves_every_accelerator_of_its_architecture() {
    // moto's stock images stand in for one of ours.
    let w = World::new().await;
    let stock = w.ec2.describe_images().send().await.unwrap();
    let image = stock
        .images()
        .iter()
        .find(|i| {
            i.image_id().is_some_and(|id| id.len() >= 12)
                && i.architecture().map(|a| a.as_str()) == Some("x86_64")
        })
        .expect("a stock x86_64 image");
    let id = image.image_id().unwrap().to_string();
    let mut spec = w.node_class_spec();
    spec.ami_selector_terms = vec![serde_norway::from_str(&format!("id: {id}")).unwrap()];
    let r = w.resolve(&spec).await;
    let amis = r.amis.clone().unwrap();
    assert_eq!(amis.len(), 1, "{amis:?}");
    assert_eq!(
        (
            amis[0].id.as_str(),
            amis[0].architecture.as_str(),
            amis[0].accelerator.as_str()
        ),
        (id.as_str(), "x86_64", "any")
    );
    let class = r.node_class("custom", &spec).unwrap();
    let none = std::collections::BTreeMap::new();
    assert_eq!(
        class.image_for(ImageVariant::of("p5.48xlarge", &none)),
        Some(id.as_str())
    );
    assert_eq!(class.image_for(ImageVariant::of("g5g.xlarge", &none)), None);
    // An image that does not exist resolves to none, with the reason.
    spec.ami_selector_terms = vec![serde_norway::from_str("id: ami-00000000000dead00").unwrap()];
    let p = w.resolve(&spec).await.amis.unwrap_err();
    assert_eq!(p.reason, reasons::AMIS_NOT_FOUND, "{p:?}");
}

#[tokio::test]
async fn a_missing_subnet_tag_a_malformed_alias_or_an_unknown_role_gets_a_reason_and_no_launch() {
    let w = World::new().await;
    let mut no_subnet = w.node_class_spec();
    no_subnet.subnet_selector_terms[0]
        .tags
        .insert("test/missing".into(), "yes".into());
    let mut bad_alias = w.node_class_spec();
    bad_alias.ami_selector_terms[0].alias = Some("al2023@newest".into());
    let mut no_role = w.node_class_spec();
    no_role.role = Some(unique("nobody"));
    let mut no_profile = w.node_class_spec();
    no_profile.role = None;
    no_profile.instance_profile = Some(unique("nothing"));
    let cases = [
        (no_subnet, reasons::SUBNETS_NOT_FOUND, "test/missing"),
        (bad_alias, reasons::INVALID_SPEC, "al2023@newest"),
        (no_role, reasons::ROLE_NOT_FOUND, "nobody"),
        (no_profile, reasons::INSTANCE_PROFILE_NOT_FOUND, "nothing"),
    ];
    let aws = AwsCloud::new(w.ec2.clone(), w.settings(&w.cluster)).unwrap();
    for (spec, reason, named) in cases {
        let r = w.resolve(&spec).await;
        let p = r.first_problem().cloned().expect("a problem");
        assert_eq!(p.reason, reason, "{p:?}");
        assert!(p.message.contains(named), "{p:?}");
        assert_eq!(r.node_class("broken", &spec), None);
    }
    // A pool whose class did not resolve has none, and does not launch.
    let c = claim("unready", "g6.xlarge", "use1-az4", CapacityType::OnDemand);
    let err = aws
        .launch(&c, &template(), chrono::Utc::now())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::NotReady { reason, .. } if reason.contains("EC2NodeClass of NodePool train")),
        "{err:?}"
    );
    assert!(w.instances_of("unready").await.is_empty());
}

#[tokio::test]
async fn the_efa_rule_is_missing_until_the_group_allows_all_traffic_from_itself() {
    let w = World::new().await;
    // A new group has the default egress rule only.
    let r = w.resolve(&w.node_class_spec()).await;
    let p = r.efa_rule.unwrap_err();
    assert_eq!(p.reason, reasons::EFA_RULE_MISSING, "{p:?}");
    assert!(p.message.contains(&w.security_group), "{p:?}");
    assert!(
        p.message.contains("inbound from") && !p.message.contains("outbound"),
        "{p:?}"
    );
    w.ec2
        .authorize_security_group_ingress()
        .group_id(&w.security_group)
        .ip_permissions(
            aws_sdk_ec2::types::IpPermission::builder()
                .ip_protocol("-1")
                .user_id_group_pairs(
                    aws_sdk_ec2::types::UserIdGroupPair::builder()
                        .group_id(&w.security_group)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let r = w.resolve(&w.node_class_spec()).await;
    assert_eq!(r.efa_rule, Ok(()));
}

#[tokio::test]
async fn the_reconciler_writes_each_class_status_and_hands_pools_only_ready_classes() {
    use quartermaster::controller::events::Events;
    use quartermaster::controller::kube_api::KubeApi;
    use quartermaster::controller::nodeclasses::Reconciler;
    use serde_json::{json, Value};
    use std::sync::Mutex;
    use support::api_server::Recorder;

    let w = World::new().await;
    let mut broken = w.node_class_spec();
    broken.role = Some(unique("nobody"));
    let list = |kind: &str, items: Vec<Value>| {
        json!({"apiVersion": "quartermaster.dev/v1alpha1", "kind": format!("{kind}List"),
               "metadata": {"resourceVersion": "1"}, "items": items})
    };
    let class = |name: &str, spec: &EC2NodeClassSpec| {
        json!({"apiVersion": "quartermaster.dev/v1alpha1", "kind": "EC2NodeClass",
               "metadata": {"name": name, "generation": 1}, "spec": spec})
    };
    let pool = |name: &str, class: &str| {
        json!({"apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodePool",
               "metadata": {"name": name, "uid": format!("uid-{name}")},
               "spec": {"template": {"spec": {"efa": name == "train", "nodeClassRef":
                   {"group": "quartermaster.dev", "kind": "EC2NodeClass", "name": class}}}}})
    };
    let mut gpu_spec = w.node_class_spec();
    gpu_spec.capacity_reservation_selector_terms =
        serde_json::from_value(json!([{"tags": {"team": "nobody"}}])).unwrap();
    let classes = list(
        "EC2NodeClass",
        vec![class("gpu", &gpu_spec), class("broken", &broken)],
    );
    let pools = list(
        "NodePool",
        vec![pool("train", "gpu"), pool("infer", "broken")],
    );
    let writes: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let seen = writes.clone();
    let (client, _recorder) = Recorder::start(move |served, body| {
        if served.method == "GET" && served.path.ends_with("/ec2nodeclasses") {
            return (200, classes.clone());
        }
        if served.method == "GET" && served.path.ends_with("/nodepools") {
            return (200, pools.clone());
        }
        seen.lock()
            .unwrap()
            .push((served.path.clone(), body.clone()));
        (200, body.clone())
    });
    let aws = AwsCloud::new(w.ec2.clone(), w.settings(&w.cluster)).unwrap();
    let mut reconciler = Reconciler::new(
        KubeApi::new(client.clone()),
        Events::new(client, None),
        w.resolver(),
        aws.node_classes(),
    );
    // What the reservations task found at its last discovery.
    let nothing =
        "capacityReservationSelectorTerms[0]: matches no active or scheduled capacity reservation";
    aws.node_classes()
        .set_reservation_findings([("gpu".to_string(), vec![nothing.to_string()])].into());
    reconciler.round(true, chrono::Utc::now()).await.unwrap();

    let writes = writes.lock().unwrap().clone();
    let status_of = |name: &str| {
        writes
            .iter()
            .find(|(path, _)| path.ends_with(&format!("/ec2nodeclasses/{name}/status")))
            .map(|(_, body)| body["status"].clone())
            .unwrap_or_else(|| panic!("no status written for {name}: {writes:#?}"))
    };
    let condition = |status: &Value, type_: &str| {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
    };
    let ready = |status: &Value| condition(status, "Ready").unwrap();
    let gpu = status_of("gpu");
    assert_eq!(ready(&gpu)["status"], "True", "{gpu:#}");
    // A selector that finds nothing is in its own condition: the class
    // still launches spot and on-demand.
    let reservations = condition(&gpu, "CapacityReservationsReady")
        .unwrap_or_else(|| panic!("no CapacityReservationsReady: {gpu:#}"));
    assert_eq!(reservations["status"], "False");
    assert_eq!(reservations["reason"], "CapacityReservationsUnusable");
    assert_eq!(reservations["message"], nothing);
    // The pool asking for EFA uses this class: its group lacks the rule.
    let efa = condition(&gpu, "SecurityGroupsAllowEFA")
        .unwrap_or_else(|| panic!("no SecurityGroupsAllowEFA: {gpu:#}"));
    assert_eq!(efa["status"], "False");
    assert_eq!(efa["reason"], "EFASecurityGroupRuleMissing");
    assert_eq!(
        gpu["amis"].as_array().unwrap().len(),
        ImageVariant::ALL.len()
    );
    assert_eq!(gpu["subnets"].as_array().unwrap().len(), 2);
    assert_eq!(gpu["instanceProfile"], w.instance_profile.as_str());
    let bad = status_of("broken");
    assert_eq!(ready(&bad)["status"], "False");
    // No pool asking for EFA uses it, and it has no reservation terms.
    assert!(
        condition(&bad, "SecurityGroupsAllowEFA").is_none(),
        "{bad:#}"
    );
    assert!(
        condition(&bad, "CapacityReservationsReady").is_none(),
        "{bad:#}"
    );
    let message = ready(&bad)["message"].as_str().unwrap().to_string();
    assert!(message.starts_with("RoleNotFound: role"), "{message}");
    let event = writes
        .iter()
        .find(|(path, body)| path.contains("/events") && body["reason"] == "NodeClassNotReady")
        .map(|(_, body)| body.clone())
        .unwrap_or_else(|| panic!("no NodeClassNotReady Event: {writes:#?}"));
    assert_eq!(event["regarding"]["name"], "infer");
    assert!(event["note"]
        .as_str()
        .unwrap()
        .contains("EC2NodeClass broken is not Ready"));

    // The ready pool launches with its class; the other launches nothing.
    assert_eq!(aws.node_class("train").unwrap().name, "gpu");
    assert!(aws.node_class("infer").is_none());
    assert_eq!(aws.pool_problem("train"), None);
    let why = aws.pool_problem("infer").unwrap_or_default();
    assert!(
        why.contains("EC2NodeClass broken is not Ready: RoleNotFound"),
        "{why}"
    );
    let mut c = claim("infer-1", "g6.xlarge", "use1-az4", CapacityType::OnDemand);
    c.nodepool = "infer".into();
    assert!(matches!(
        aws.launch(&c, &template(), chrono::Utc::now()).await,
        Err(Error::NotReady { .. })
    ));
}

#[tokio::test]
async fn a_spot_launch_creates_one_tagged_instance_with_the_nodes_bootstrap() {
    let w = World::new().await;
    let aws = w.cloud().await;
    let c = claim("gpu-a", "g5.xlarge", "use1-az4", CapacityType::Spot);
    let launched = aws
        .launch(&c, &template(), chrono::Utc::now())
        .await
        .unwrap();

    assert_eq!(launched.claim, "gpu-a");
    assert_eq!(launched.offering, c.offering);
    assert!(
        launched.provider_id.starts_with("aws:///us-east-1d/i-"),
        "{}",
        launched.provider_id
    );
    let found = w.instances_of("gpu-a").await;
    assert_eq!(found.len(), 1);
    let i = &found[0];
    assert_eq!(i.instance_id(), Some(id_of(&launched.provider_id).as_str()));
    assert_eq!(i.instance_type().map(|t| t.as_str()), Some("g5.xlarge"));
    assert_eq!(
        i.placement().and_then(|p| p.availability_zone()),
        Some("us-east-1d")
    );
    assert_eq!(i.subnet_id(), Some(w.subnets[1].as_str()));
    assert_eq!(i.instance_lifecycle(), Some(&InstanceLifecycleType::Spot));
    assert_eq!(tag_of(i, l::TAG_CLUSTER), Some(w.cluster.as_str()));
    assert_eq!(tag_of(i, l::NODEPOOL), Some("train"));
    assert_eq!(tag_of(i, l::TAG_NODECLAIM), Some("gpu-a"));
    assert_eq!(tag_of(i, "team"), Some("ml"));
    assert_eq!(i.image_id(), Some("ami-x86_64-nvidia"));
    assert_eq!(tag_of(i, "quartermaster.dev/ec2nodeclass"), Some("gpu"));

    let attr = w
        .ec2
        .describe_instance_attribute()
        .instance_id(i.instance_id().unwrap())
        .attribute(InstanceAttributeName::UserData)
        .send()
        .await
        .unwrap();
    let encoded = attr.user_data().and_then(|u| u.value()).unwrap();
    let user_data = String::from_utf8(aws_smithy_types::base64::decode(encoded).unwrap()).unwrap();
    assert!(
        user_data.contains("--node-labels=quartermaster.dev/capacity-type=spot,quartermaster.dev/nodepool=train,team=ml"),
        "{user_data}"
    );
    assert!(
        user_data.contains("--register-with-taints=nvidia.com/gpu=present:NoSchedule,quartermaster.dev/unregistered:NoExecute"),
        "{user_data}"
    );
    assert!(
        !user_data.contains(l::INSTANCE_TYPE),
        "a fallback may change the type: {user_data}"
    );
    assert!(user_data.contains(&format!("name: {}", w.cluster)));

    // The launch template holds what moto does not apply to fleet instances.
    let templates = w.launch_templates().await;
    assert_eq!(templates.len(), 1);
    let name = templates[0].launch_template_name().unwrap();
    assert!(
        name.starts_with(&format!("quartermaster/{}/", w.cluster)),
        "{name}"
    );
    let versions = w
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(name)
        .versions("$Latest")
        .send()
        .await
        .unwrap();
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    let imds = data.metadata_options().unwrap();
    assert_eq!(imds.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(imds.http_put_response_hop_limit(), Some(2));
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some(w.instance_profile.as_str())
    );
    assert_eq!(data.security_group_ids(), [w.security_group.as_str()]);
    let root = &data.block_device_mappings()[0];
    assert_eq!(root.ebs().and_then(|e| e.volume_size()), Some(200));

    // What describe reports matches, with EC2's launch time.
    let described = aws.describe("gpu-a").await.unwrap().unwrap();
    assert_eq!(described.provider_id, launched.provider_id);
    assert_eq!(described.offering, c.offering);
    assert_eq!(described.price_per_hour, 0.42);
    assert!(described.state.is_alive());
    assert!(
        (chrono::Utc::now() - described.launched_at)
            .num_minutes()
            .abs()
            < 5
    );
}

#[tokio::test]
async fn an_on_demand_launch_is_not_spot_and_lands_in_the_planned_zone() {
    let w = World::new().await;
    let aws = w.cloud().await;
    let c = claim("od-a", "m5.large", "use1-az6", CapacityType::OnDemand);
    let launched = aws
        .launch(&c, &template(), chrono::Utc::now())
        .await
        .unwrap();
    assert!(launched.provider_id.starts_with("aws:///us-east-1a/"));
    let found = w.instances_of("od-a").await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].instance_lifecycle(), None);
    assert_eq!(found[0].subnet_id(), Some(w.subnets[0].as_str()));
    assert_eq!(
        aws.describe("od-a").await.unwrap().unwrap().offering,
        c.offering
    );
}

#[tokio::test]
async fn a_launch_retried_after_a_crash_returns_the_same_instance() {
    let w = World::new().await;
    let c = claim("gpu-retry", "g5.xlarge", "use1-az4", CapacityType::Spot);
    let first = w
        .cloud()
        .await
        .launch(&c, &template(), chrono::Utc::now())
        .await
        .unwrap();
    // A new provider value, as after a controller restart.
    let again = w
        .cloud()
        .await
        .launch(&c, &template(), chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(again.provider_id, first.provider_id);
    assert_eq!(w.instances_of("gpu-retry").await.len(), 1);

    // The same claim name with an offering it was not launched as is refused.
    let moved = claim("gpu-retry", "g5.xlarge", "use1-az6", CapacityType::Spot);
    let err = w
        .cloud()
        .await
        .launch(&moved, &template(), chrono::Utc::now())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Other(_)), "{err:?}");
    assert_eq!(w.instances_of("gpu-retry").await.len(), 1);
}

#[tokio::test]
async fn a_zone_without_a_selected_subnet_is_not_launched_in() {
    let w = World::new().await;
    let c = claim("nowhere", "g5.xlarge", "use1-az2", CapacityType::Spot);
    let err = w
        .cloud()
        .await
        .launch(&c, &template(), chrono::Utc::now())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Other(m) if m.contains("no subnet") && m.contains("use1-az2")),
        "{err:?}"
    );
    assert!(w.instances_of("nowhere").await.is_empty());
}

#[tokio::test]
async fn a_planned_zone_without_a_subnet_launches_in_the_first_fallback_that_has_one() {
    let w = World::new().await;
    let c = claim("gpu-fb", "g5.xlarge", "use1-az2", CapacityType::Spot);
    let fallback = |zone: &str, capacity_type| OfferingKey {
        instance_type: "g5.xlarge".into(),
        zone: zone.into(),
        capacity_type,
    };
    let template = NodeTemplate {
        fallbacks: vec![
            // Another market is never mixed into a fleet.
            fallback("use1-az6", CapacityType::OnDemand),
            fallback("use1-az3", CapacityType::Spot),
            fallback("use1-az4", CapacityType::Spot),
        ],
        ..template()
    };
    let launched = w
        .cloud()
        .await
        .launch(&c, &template, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(launched.offering, fallback("use1-az4", CapacityType::Spot));
    assert!(launched.provider_id.starts_with("aws:///us-east-1d/"));
    let found = w.instances_of("gpu-fb").await;
    assert_eq!(found.len(), 1);
    assert_eq!(
        found[0].instance_lifecycle(),
        Some(&InstanceLifecycleType::Spot)
    );
    // Retried with the same fallbacks, the instance is found, not relaunched.
    let again = w
        .cloud()
        .await
        .launch(&c, &template, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(again.provider_id, launched.provider_id);
}

#[tokio::test]
async fn terminate_acts_on_the_claims_instance_only_and_twice_is_fine() {
    let w = World::new().await;
    let aws = w.cloud().await;
    let now = chrono::Utc::now();
    let a = aws
        .launch(
            &claim("t-a", "g5.xlarge", "use1-az4", CapacityType::Spot),
            &template(),
            now,
        )
        .await
        .unwrap();
    let b = aws
        .launch(
            &claim("t-b", "g5.xlarge", "use1-az6", CapacityType::OnDemand),
            &template(),
            now,
        )
        .await
        .unwrap();

    // Same node class and content: one launch template, also for a
    // provider that did not create it (another replica, or after a restart).
    w.cloud()
        .await
        .launch(
            &claim("t-c", "g5.xlarge", "use1-az4", CapacityType::Spot),
            &template(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(w.launch_templates().await.len(), 1);

    let gone = aws.terminate("t-a", now).await.unwrap();
    assert_eq!(gone.provider_id, a.provider_id);
    assert!(!gone.state.is_alive(), "{:?}", gone.state);
    assert!(["shutting-down", "terminated"]
        .contains(&w.state_of(&id_of(&a.provider_id)).await.as_str()));
    assert_eq!(w.state_of(&id_of(&b.provider_id)).await, "running");

    let again = aws.terminate("t-a", now).await.unwrap();
    assert_eq!(again.provider_id, a.provider_id);
    assert!(!again.state.is_alive());
    assert_eq!(
        aws.terminate("never-launched", now).await.unwrap_err(),
        Error::NotFound {
            claim: "never-launched".into()
        }
    );
    let mut listed: Vec<String> = aws
        .instances()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state.is_alive())
        .map(|i| i.claim)
        .collect();
    listed.sort();
    assert_eq!(listed, ["t-b", "t-c"]);
}

#[tokio::test]
async fn reboot_acts_on_the_claims_running_instance_which_stays_running() {
    let w = World::new().await;
    let aws = w.cloud().await;
    let now = chrono::Utc::now();
    let a = aws
        .launch(
            &claim("r-a", "g5.xlarge", "use1-az4", CapacityType::OnDemand),
            &template(),
            now,
        )
        .await
        .unwrap();
    let rebooted = aws.reboot("r-a", now).await.unwrap();
    assert_eq!(rebooted.provider_id, a.provider_id);
    assert_eq!(w.state_of(&id_of(&a.provider_id)).await, "running");
    // Nothing to reboot for a claim without a running instance.
    aws.terminate("r-a", now).await.unwrap();
    for claim in ["r-a", "never-launched"] {
        assert_eq!(
            aws.reboot(claim, now).await.unwrap_err(),
            Error::NotFound {
                claim: claim.into()
            }
        );
    }
}

#[tokio::test]
async fn garbage_collection_terminates_only_our_old_unclaimed_instances() {
    let w = World::new().await;
    let aws = w.cloud().await;
    let now = chrono::Utc::now();
    let spot = |name: &str| claim(name, "g5.xlarge", "use1-az4", CapacityType::Spot);
    let orphan = aws.launch(&spot("orphan"), &template(), now).await.unwrap();
    let kept = aws.launch(&spot("kept"), &template(), now).await.unwrap();
    // Someone stopped one that lost its claim: it keeps its volumes and
    // addresses for ever unless collected.
    let stopped = aws
        .launch(&spot("stopped"), &template(), now)
        .await
        .unwrap();
    w.ec2
        .stop_instances()
        .instance_ids(id_of(&stopped.provider_id))
        .send()
        .await
        .unwrap();
    // Another cluster's instance on the same subnets, with its own tags.
    let other_cluster = w.cloud_of(&format!("{}-other", w.cluster)).await;
    let foreign = other_cluster
        .launch(&spot("foreign"), &template(), now)
        .await
        .unwrap();
    // An instance someone launched by hand, without our tags.
    let manual = w
        .ec2
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .subnet_id(&w.subnets[1])
        .send()
        .await
        .unwrap();
    let manual = manual.instances()[0].instance_id().unwrap().to_string();

    let claims: cloud::ClaimIndex = [("kept".to_string(), None)].into_iter().collect();
    let grace = chrono::TimeDelta::minutes(2);
    // Inside the grace period nothing goes: the claim may be being written.
    let (done, failed) = cloud::collect_garbage(&aws, &claims, chrono::Utc::now(), grace)
        .await
        .unwrap();
    assert!(done.is_empty() && failed.is_empty(), "{done:?} {failed:?}");

    let later = chrono::Utc::now() + chrono::TimeDelta::minutes(10);
    let (done, failed) = cloud::collect_garbage(&aws, &claims, later, grace)
        .await
        .unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let mut collected: Vec<&str> = done.iter().map(|i| i.provider_id.as_str()).collect();
    collected.sort();
    let mut expected = [orphan.provider_id.as_str(), stopped.provider_id.as_str()];
    expected.sort();
    assert_eq!(collected, expected);
    assert!(done.iter().all(|i| i.state == InstanceState::ShuttingDown));
    assert!(["shutting-down", "terminated"]
        .contains(&w.state_of(&id_of(&stopped.provider_id)).await.as_str()));

    assert!(["shutting-down", "terminated"]
        .contains(&w.state_of(&id_of(&orphan.provider_id)).await.as_str()));
    assert_eq!(w.state_of(&id_of(&kept.provider_id)).await, "running");
    assert_eq!(w.state_of(&id_of(&foreign.provider_id)).await, "running");
    assert_eq!(w.state_of(&manual).await, "running");
}

#[tokio::test]
async fn launch_templates_no_live_instance_uses_are_deleted_after_the_grace_period() {
    let w = World::new().await;
    let aws = w.cloud().await;
    let now = chrono::Utc::now();
    let spot = |name: &str| claim(name, "g5.xlarge", "use1-az4", CapacityType::Spot);
    let mut vision = template();
    vision.labels.insert("team".into(), "vision".into());
    aws.launch(&spot("kept"), &template(), now).await.unwrap();
    aws.launch(&spot("gone"), &vision, now).await.unwrap();
    // Another cluster's template (same content, its own tags) is not ours.
    let other = w.cloud_of(&format!("{}-other", w.cluster)).await;
    other.launch(&spot("foreign"), &vision, now).await.unwrap();
    aws.terminate("gone", now).await.unwrap();
    assert_eq!(w.launch_templates().await.len(), 2);
    let kept_template = tag_of(
        &w.instances_of("kept").await[0],
        "quartermaster.dev/launch-template",
    )
    .expect("instances carry their launch template's name")
    .to_string();

    let claims: cloud::ClaimIndex = [("kept".to_string(), None)].into_iter().collect();
    let grace = chrono::TimeDelta::minutes(2);
    // Inside the grace period nothing goes: a launch may be about to use it.
    let (_, failed) = cloud::collect_garbage(&aws, &claims, now, grace)
        .await
        .unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(w.launch_templates().await.len(), 2);

    let later = now + chrono::TimeDelta::minutes(10);
    let (_, failed) = cloud::collect_garbage(&aws, &claims, later, grace)
        .await
        .unwrap();
    assert!(failed.is_empty(), "{failed:?}");
    let left: Vec<String> = w
        .launch_templates()
        .await
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_string))
        .collect();
    assert_eq!(left, [kept_template]);
    let foreign = other.collect_launch_templates(now, grace).await.unwrap();
    assert_eq!(foreign, (vec![], vec![]), "the other cluster's is young");
    let (foreign, _) = other.collect_launch_templates(later, grace).await.unwrap();
    assert!(foreign.is_empty(), "its instance still runs: {foreign:?}");

    // A claim that needs the deleted template again gets it back.
    let again = aws.launch(&spot("again"), &vision, later).await.unwrap();
    assert_eq!(w.state_of(&id_of(&again.provider_id)).await, "running");
    assert_eq!(w.launch_templates().await.len(), 2);
}

mod replay {
    //! Recorded-shape EC2 answers replayed through the real SDK: the paths
    //! moto cannot fake. A launch makes six calls: DescribeInstances (the
    //! claim's existing instance), DescribeAvailabilityZones,
    //! DescribeSubnets, DescribeSecurityGroups, CreateLaunchTemplate,
    //! CreateFleet.

    use super::*;
    use aws_sdk_ec2::config::retry::RetryConfig;
    use aws_sdk_ec2::config::{BehaviorVersion, Credentials, Region};
    use aws_smithy_http_client::test_util::{ReplayEvent, StaticReplayClient};
    use aws_smithy_types::body::SdkBody;
    use std::time::Duration;

    const NS: &str = "http://ec2.amazonaws.com/doc/2016-11-15/";

    fn ok(body: String) -> http::Response<SdkBody> {
        http::Response::builder()
            .status(200)
            .header("content-type", "text/xml;charset=UTF-8")
            .body(SdkBody::from(body))
            .unwrap()
    }

    fn event(response: http::Response<SdkBody>) -> ReplayEvent {
        let request = http::Request::builder()
            .uri("http://127.0.0.1:1/")
            .body(SdkBody::empty())
            .unwrap();
        ReplayEvent::new(request, response)
    }

    fn no_instances() -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="{NS}">
    <requestId>8f7724cf-496f-496e-8fe3-ef2f0a7e1d11</requestId>
    <reservationSet/>
</DescribeInstancesResponse>"#
        )))
    }

    fn zones() -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeAvailabilityZonesResponse xmlns="{NS}">
    <requestId>e23c5a54-a29c-43ee-8b55-0c13c6d8c5e0</requestId>
    <availabilityZoneInfo>
        <item>
            <optInStatus>opt-in-not-required</optInStatus>
            <zoneName>us-east-1d</zoneName>
            <zoneId>use1-az4</zoneId>
            <zoneState>available</zoneState>
            <regionName>us-east-1</regionName>
            <zoneType>availability-zone</zoneType>
            <networkBorderGroup>us-east-1</networkBorderGroup>
            <groupName>us-east-1-zg-1</groupName>
        </item>
    </availabilityZoneInfo>
</DescribeAvailabilityZonesResponse>"#
        )))
    }

    fn subnets() -> ReplayEvent {
        subnets_with("subnet-0bb1c79de3EXAMPLE", 251)
    }

    /// `DescribeSubnets` answering one subnet in `use1-az4`.
    fn subnets_with(id: &str, free: u32) -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeSubnetsResponse xmlns="{NS}">
    <requestId>a5266c3e-2b7a-4434-971e-317b6EXAMPLE</requestId>
    <subnetSet>
        <item>
            <subnetId>{id}</subnetId>
            <subnetArn>arn:aws:ec2:us-east-1:111122223333:subnet/{id}</subnetArn>
            <state>available</state>
            <ownerId>111122223333</ownerId>
            <vpcId>vpc-0ee975135dEXAMPLE</vpcId>
            <cidrBlock>10.0.2.0/24</cidrBlock>
            <availableIpAddressCount>{free}</availableIpAddressCount>
            <availabilityZone>us-east-1d</availabilityZone>
            <availabilityZoneId>use1-az4</availabilityZoneId>
            <defaultForAz>false</defaultForAz>
            <mapPublicIpOnLaunch>false</mapPublicIpOnLaunch>
            <tagSet>
                <item><key>test/discovery</key><value>replay</value></item>
            </tagSet>
        </item>
    </subnetSet>
</DescribeSubnetsResponse>"#
        )))
    }

    fn security_groups() -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeSecurityGroupsResponse xmlns="{NS}">
    <requestId>edb7c570-be05-4192-bd1b-EXAMPLE</requestId>
    <securityGroupInfo>
        <item>
            <ownerId>111122223333</ownerId>
            <groupId>sg-0c5e4d2f1aEXAMPLE</groupId>
            <groupName>nodes</groupName>
            <groupDescription>nodes</groupDescription>
            <vpcId>vpc-0ee975135dEXAMPLE</vpcId>
            <ipPermissions/>
            <ipPermissionsEgress/>
        </item>
    </securityGroupInfo>
</DescribeSecurityGroupsResponse>"#
        )))
    }

    fn template_created() -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<CreateLaunchTemplateResponse xmlns="{NS}">
    <requestId>39f9d1b5-4f84-4f11-8c0c-EXAMPLE</requestId>
    <launchTemplate>
        <createTime>2026-01-01T00:00:00.000Z</createTime>
        <createdBy>arn:aws:sts::111122223333:assumed-role/quartermaster/controller</createdBy>
        <defaultVersionNumber>1</defaultVersionNumber>
        <latestVersionNumber>1</latestVersionNumber>
        <launchTemplateId>lt-0a20c965061fEXAMPLE</launchTemplateId>
        <launchTemplateName>quartermaster/replay/0123456789abcdef</launchTemplateName>
    </launchTemplate>
</CreateLaunchTemplateResponse>"#
        )))
    }

    const OVERRIDES: &str = r#"<launchTemplateAndOverrides>
                <launchTemplateSpecification>
                    <launchTemplateId>lt-0a20c965061fEXAMPLE</launchTemplateId>
                    <version>1</version>
                </launchTemplateSpecification>
                <overrides>
                    <instanceType>g5.xlarge</instanceType>
                    <subnetId>subnet-0bb1c79de3EXAMPLE</subnetId>
                    <priority>0.0</priority>
                </overrides>
            </launchTemplateAndOverrides>"#;

    fn fleet_without_capacity() -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<CreateFleetResponse xmlns="{NS}">
    <requestId>b0c1b9e4-3f9e-4d2b-8d5a-EXAMPLE</requestId>
    <fleetId>fleet-12a34b55-67cd-8ef9-ba9b-9208dEXAMPLE</fleetId>
    <errorSet>
        <item>
            {OVERRIDES}
            <lifecycle>spot</lifecycle>
            <errorCode>InsufficientInstanceCapacity</errorCode>
            <errorMessage>We currently do not have sufficient g5.xlarge capacity in the Availability Zone you requested (us-east-1d). Our system will be working on provisioning additional capacity. You can currently get g5.xlarge capacity by not specifying an Availability Zone in your request or choosing us-east-1a, us-east-1b, us-east-1c.</errorMessage>
        </item>
    </errorSet>
    <fleetInstanceSet/>
</CreateFleetResponse>"#
        )))
    }

    fn fleet_launched() -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<CreateFleetResponse xmlns="{NS}">
    <requestId>7c1f8e5a-2d6b-4b1e-9a1e-EXAMPLE</requestId>
    <fleetId>fleet-34b56c77-89ef-0ab1-cd2e-3f4a5EXAMPLE</fleetId>
    <errorSet/>
    <fleetInstanceSet>
        <item>
            {OVERRIDES}
            <lifecycle>spot</lifecycle>
            <instanceIds>
                <item>i-0123456789abcdef0</item>
            </instanceIds>
            <instanceType>g5.xlarge</instanceType>
        </item>
    </fleetInstanceSet>
</CreateFleetResponse>"#
        )))
    }

    fn throttled() -> ReplayEvent {
        event(
            http::Response::builder()
                .status(503)
                .body(SdkBody::from(
                    r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>d1b2c3e4-5f6a-7b8c-9d0e-EXAMPLE</RequestID></Response>"#,
                ))
                .unwrap(),
        )
    }

    /// Events before the `CreateFleet` of a first launch.
    fn before_fleet() -> Vec<ReplayEvent> {
        vec![
            no_instances(),
            zones(),
            subnets(),
            security_groups(),
            template_created(),
        ]
    }

    /// A provider on `events`, with three attempts and millisecond backoff
    /// so that retries do not slow the test down.
    fn cloud(events: Vec<ReplayEvent>) -> (AwsCloud, StaticReplayClient) {
        cloud_with(events, "")
    }

    /// [`cloud`] with `class_extra` (YAML lines) added to the resolved node
    /// class of pool `train`.
    fn cloud_with(events: Vec<ReplayEvent>, class_extra: &str) -> (AwsCloud, StaticReplayClient) {
        let http = StaticReplayClient::new(events);
        let config = aws_sdk_ec2::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url("http://127.0.0.1:1")
            .credentials_provider(Credentials::new("test", "test", None, None, "replay"))
            .http_client(http.clone())
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(3)
                    .with_initial_backoff(Duration::from_millis(1))
                    .with_max_backoff(Duration::from_millis(5)),
            )
            .build();
        let settings = Settings::from_yaml(
            r#"
clusterName: replay
clusterEndpoint: https://example.eks.amazonaws.com
certificateAuthority: Q0EgYnVuZGxl
serviceCidr: 10.100.0.0/16
"#,
        )
        .unwrap();
        let aws = AwsCloud::new(aws_sdk_ec2::Client::from_conf(config), settings).unwrap();
        let class: NodeClass = serde_norway::from_str(
            &(r#"
name: replay
images: [{ id: ami-0123456789abcdef0, architecture: x86_64, accelerator: any }]
subnetSelectorTerms: [{ tags: { test/discovery: replay } }]
securityGroupSelectorTerms: [{ tags: { test/discovery: replay } }]
instanceProfile: nodes
"#
            .to_string()
                + class_extra),
        )
        .unwrap();
        aws.set_node_classes(HashMap::from([("train".to_string(), Arc::new(class))]));
        (aws, http)
    }

    fn spot_claim() -> ClaimRequest {
        claim("gpu-r", "g5.xlarge", "use1-az4", CapacityType::Spot)
    }

    fn bodies_of(http: &StaticReplayClient, action: &str) -> Vec<String> {
        http.actual_requests()
            .filter_map(|r| r.body().bytes())
            .map(|b| String::from_utf8_lossy(b).to_string())
            .filter(|b| b.contains(&format!("Action={action}&")))
            .collect()
    }

    #[tokio::test]
    async fn a_fleet_error_of_insufficient_capacity_names_the_offering() {
        let mut events = before_fleet();
        events.push(fleet_without_capacity());
        let (aws, http) = cloud(events);
        let err = aws
            .launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .unwrap_err();
        assert_eq!(
            err,
            Error::InsufficientCapacity {
                claim: "gpu-r".into(),
                offering: spot_claim().offering,
                code: "InsufficientInstanceCapacity".into(),
            }
        );
        assert_eq!(
            err.notice(),
            Some(quartermaster::core::Notice::InsufficientCapacity {
                offering: spot_claim().offering
            })
        );
        // One fleet request, not retried: capacity errors are the core's.
        assert_eq!(bodies_of(&http, "CreateFleet").len(), 1);
    }

    #[tokio::test]
    async fn a_throttled_fleet_request_is_retried_once_with_the_same_client_token() {
        let mut events = before_fleet();
        events.push(throttled());
        events.push(fleet_launched());
        let (aws, http) = cloud(events);
        let launched = aws
            .launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .unwrap();
        assert_eq!(
            launched.provider_id,
            "aws:///us-east-1d/i-0123456789abcdef0"
        );
        assert_eq!(launched.offering, spot_claim().offering);
        assert_eq!(http.actual_requests().count(), 7);
        let fleets = bodies_of(&http, "CreateFleet");
        assert_eq!(fleets.len(), 2);
        assert!(client_token(&fleets[0]).is_some_and(|t| t.len() == "ClientToken=".len() + 64));
        assert_eq!(client_token(&fleets[0]), client_token(&fleets[1]));
        assert!(fleets[0].contains("Type=instant"), "{}", fleets[0]);
        assert!(
            fleets[0].contains("SpotOptions.AllocationStrategy=capacity-optimized-prioritized"),
            "{}",
            fleets[0]
        );
    }

    fn client_token(body: &str) -> Option<String> {
        body.split('&')
            .find(|p| p.starts_with("ClientToken="))
            .map(str::to_string)
    }

    #[tokio::test]
    async fn a_launch_retried_in_another_subnet_keeps_its_client_token() {
        let mut events = before_fleet();
        events.extend([throttled(), throttled(), throttled()]);
        // The retry finds the zone's subnets changed: another one has the
        // most free addresses now (the first launch may have taken some).
        // The token stays: had the first launch gone through unseen, EC2
        // returns it (or refuses the other subnet), never a second instance.
        events.extend([
            no_instances(),
            subnets_with("subnet-0ccc1c79de3EXAMPLE", 4000),
            security_groups(),
            template_created(),
            fleet_launched(),
        ]);
        let (aws, http) = cloud(events);
        // Nothing reused between the two launches (the retry comes after
        // the describes' reuse time).
        let aws = aws.with_describe_ttl(Duration::ZERO);
        let err = aws
            .launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .unwrap_err();
        assert!(err.is_retryable(), "{err:?}");
        aws.launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .unwrap();
        let fleets = bodies_of(&http, "CreateFleet");
        assert_eq!(fleets.len(), 4);
        assert!(
            fleets[3].contains("subnet-0ccc1c79de3EXAMPLE"),
            "{}",
            fleets[3]
        );
        assert_eq!(client_token(&fleets[0]), client_token(&fleets[2]));
        assert_eq!(client_token(&fleets[0]), client_token(&fleets[3]));
    }

    #[tokio::test]
    async fn a_launch_retried_soon_reuses_what_it_described() {
        let mut events = before_fleet();
        events.extend([throttled(), throttled(), throttled()]);
        // Within the reuse time the retry makes no DescribeInstances,
        // DescribeSubnets or DescribeSecurityGroups of its own.
        events.extend([template_created(), fleet_launched()]);
        let (aws, http) = cloud(events);
        assert!(aws
            .launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .is_err());
        aws.launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .unwrap();
        for action in [
            "DescribeInstances",
            "DescribeSubnets",
            "DescribeSecurityGroups",
        ] {
            assert_eq!(bodies_of(&http, action).len(), 1, "{action}");
        }
    }

    #[tokio::test]
    async fn a_token_used_before_with_other_subnets_is_not_ready_until_its_instance_shows() {
        let mut events = before_fleet();
        events.push(event(
            http::Response::builder()
                .status(400)
                .body(SdkBody::from(
                    r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>IdempotentParameterMismatch</Code><Message>The client token you have provided is associated with a resource that is already deleted or has other parameters.</Message></Error></Errors><RequestID>d1b2c3e4-5f6a-7b8c-9d0e-EXAMPLE</RequestID></Response>"#,
                ))
                .unwrap(),
        ));
        let (aws, _) = cloud(events);
        let err = aws
            .launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::NotReady { reason, .. } if reason.contains("IdempotentParameterMismatch")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn throttling_past_the_retry_budget_is_not_ready_with_the_code() {
        let mut events = before_fleet();
        events.extend([throttled(), throttled(), throttled()]);
        let (aws, http) = cloud(events);
        let err = aws
            .launch(&spot_claim(), &template(), chrono::Utc::now())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::NotReady { reason, .. } if reason.contains("RequestLimitExceeded")),
            "{err:?}"
        );
        assert!(err.is_retryable());
        assert_eq!(bodies_of(&http, "CreateFleet").len(), 3);
    }

    /// `DescribeCapacityReservations` answering `items` (each an `<item>`).
    fn reservations(items: &[String]) -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeCapacityReservationsResponse xmlns="{NS}">
    <requestId>0d4b6a1c-8e0f-4c5e-9d7b-EXAMPLE</requestId>
    <capacityReservationSet>{}</capacityReservationSet>
</DescribeCapacityReservationsResponse>"#,
            items.join("")
        )))
    }

    /// One capacity reservation as EC2 documents it: `kind` is
    /// `capacity-block` or `default`, `state` e.g. `active` or `expired`.
    fn reservation_item(id: &str, kind: &str, state: &str, available: u32) -> String {
        format!(
            r#"<item>
            <capacityReservationId>{id}</capacityReservationId>
            <ownerId>111122223333</ownerId>
            <capacityReservationArn>arn:aws:ec2:us-east-1:111122223333:capacity-reservation/{id}</capacityReservationArn>
            <availabilityZoneId>use1-az4</availabilityZoneId>
            <instanceType>p5.48xlarge</instanceType>
            <instancePlatform>Linux/UNIX</instancePlatform>
            <availabilityZone>us-east-1d</availabilityZone>
            <tenancy>default</tenancy>
            <totalInstanceCount>4</totalInstanceCount>
            <availableInstanceCount>{available}</availableInstanceCount>
            <ebsOptimized>true</ebsOptimized>
            <ephemeralStorage>false</ephemeralStorage>
            <state>{state}</state>
            <startDate>2026-03-01T11:30:00.000Z</startDate>
            <endDate>2026-03-08T11:30:00.000Z</endDate>
            <endDateType>limited</endDateType>
            <instanceMatchCriteria>targeted</instanceMatchCriteria>
            <createDate>2026-02-20T10:00:00.000Z</createDate>
            <reservationType>{kind}</reservationType>
            <tagSet><item><key>team</key><value>ml</value></item></tagSet>
        </item>"#
        )
    }

    #[tokio::test]
    async fn reservation_selectors_find_active_blocks_and_name_the_terms_that_find_nothing() {
        let events = vec![
            reservations(&[reservation_item("cr-0aaa", "capacity-block", "active", 3)]),
            zones(),
            reservations(&[reservation_item("cr-0bbb", "capacity-block", "expired", 0)]),
            reservations(&[]),
        ];
        let (aws, http) = cloud_with(
            events,
            "capacityReservationSelectorTerms:\n  - { tags: { team: ml }, pricePerHour: 2.5 }\n  - { id: cr-0bbb }\n  - { tags: { team: nobody } }\n",
        );
        let found = aws.capacity_reservations().await.unwrap();
        assert_eq!(found.reservations.len(), 1, "{found:?}");
        let r = &found.reservations[0];
        assert_eq!(
            (r.id.as_str(), r.zone_id.as_str(), r.instance_type.as_str()),
            ("cr-0aaa", "use1-az4", "p5.48xlarge")
        );
        assert_eq!((r.total, r.available, r.price_per_hour), (4, 3, 2.5));
        assert_eq!(
            r.kind,
            quartermaster::catalog::ReservationKind::CapacityBlock
        );
        assert_eq!(r.end.unwrap().to_rfc3339(), "2026-03-08T11:30:00+00:00");
        assert_eq!(
            found.problems,
            [
                "EC2NodeClass/replay.capacityReservationSelectorTerms[1]: capacity reservation cr-0bbb ended at 2026-03-08 11:30:00 UTC",
                "EC2NodeClass/replay.capacityReservationSelectorTerms[2]: matches no active or scheduled capacity reservation",
            ]
        );
        // The same problems by class, for the class's status.
        assert_eq!(
            found.by_class["replay"],
            [
                "capacityReservationSelectorTerms[1]: capacity reservation cr-0bbb ended at 2026-03-08 11:30:00 UTC",
                "capacityReservationSelectorTerms[2]: matches no active or scheduled capacity reservation",
            ]
        );
        let asked = bodies_of(&http, "DescribeCapacityReservations");
        assert!(
            asked[0].contains("Filter.1.Name=tag%3Ateam"),
            "{}",
            asked[0]
        );
        assert!(asked[0].contains("Value.1=active"), "{}", asked[0]);
        assert!(
            asked[1].contains("CapacityReservationId.1=cr-0bbb"),
            "{}",
            asked[1]
        );
    }

    #[tokio::test]
    async fn the_reservations_task_hands_each_classs_findings_to_the_node_classes_for_status() {
        let events = vec![reservations(&[]), zones()];
        let (aws, _http) = cloud_with(
            events,
            "capacityReservationSelectorTerms:\n  - { tags: { team: nobody } }\n",
        );
        let classes = aws.node_classes();
        assert_eq!(
            classes.reservation_findings("replay"),
            None,
            "not asked yet"
        );
        let base = Arc::new(quartermaster::catalog::Catalog::default());
        let (_prices_tx, prices_rx) = tokio::sync::watch::channel(base.clone());
        let (catalog_tx, mut catalog_rx) = tokio::sync::watch::channel(base);
        let cancel = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(
            quartermaster::cloud::aws::ec2::reservations::keep_catalog_reserved(
                aws,
                prices_rx,
                catalog_tx,
                Duration::from_secs(3600),
                Duration::from_secs(2400),
                cancel.clone(),
            ),
        );
        catalog_rx
            .changed()
            .await
            .expect("a catalog after the first discovery");
        cancel.cancel();
        task.await.unwrap();
        assert_eq!(
            classes.reservation_findings("replay").unwrap(),
            ["capacityReservationSelectorTerms[0]: matches no active or scheduled capacity reservation"]
        );
        assert_eq!(classes.reservation_findings("other"), None);
    }

    #[tokio::test]
    async fn a_capacity_block_launch_targets_its_reservation_in_the_capacity_block_market() {
        let mut events = before_fleet();
        events.push(fleet_launched());
        let (aws, http) = cloud(events);
        let mut reserved = claim("gpu-cb", "g5.xlarge", "use1-az4", CapacityType::Reserved);
        reserved.reservation = Some("cr-0aaa".into());
        let mut t = template();
        t.labels.insert(l::CAPACITY_TYPE.into(), "reserved".into());
        t.labels
            .insert(l::CAPACITY_RESERVATION_KIND.into(), "capacity-block".into());
        aws.launch(&reserved, &t, chrono::Utc::now()).await.unwrap();
        let lt = &bodies_of(&http, "CreateLaunchTemplate")[0];
        assert!(
            lt.contains("LaunchTemplateData.CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId=cr-0aaa"),
            "{lt}"
        );
        assert!(
            lt.contains("LaunchTemplateData.InstanceMarketOptions.MarketType=capacity-block"),
            "{lt}"
        );
        let fleet = &bodies_of(&http, "CreateFleet")[0];
        assert!(
            fleet.contains("TargetCapacitySpecification.DefaultTargetCapacityType=capacity-block"),
            "{fleet}"
        );
    }

    fn placement_group_created() -> ReplayEvent {
        event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<CreatePlacementGroupResponse xmlns="{NS}">
    <requestId>d4904fd9-82c2-4ea5-adfe-a9cc3EXAMPLE</requestId>
    <placementGroup>
        <groupName>quartermaster-replay-train-use1-az4</groupName>
        <state>available</state>
        <strategy>cluster</strategy>
        <groupId>pg-0123456789EXAMPLE</groupId>
    </placementGroup>
</CreatePlacementGroupResponse>"#
        )))
    }

    /// The answers to a launch with 4 EFA interfaces (the placement group
    /// is ensured between the security groups and the template), and its
    /// template.
    fn efa_launch() -> (Vec<ReplayEvent>, NodeTemplate) {
        let mut events = before_fleet();
        events.insert(4, placement_group_created());
        events.push(fleet_launched());
        let mut t = template();
        t.labels.insert(l::EFA_INTERFACES.into(), "4".into());
        (events, t)
    }

    /// Launches the spot claim with `t` (and a fallback to another zone)
    /// over `events`; checks that it went into the pool's placement group
    /// of its zone, its template naming the group and its fleet holding no
    /// other zone; returns the CreatePlacementGroup, CreateLaunchTemplate
    /// and CreateFleet bodies.
    async fn launched_into_group(events: Vec<ReplayEvent>, mut t: NodeTemplate) -> [String; 3] {
        let (aws, http) = cloud(events);
        t.fallbacks = vec![OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az6".into(),
            capacity_type: CapacityType::Spot,
        }];
        aws.launch(&spot_claim(), &t, chrono::Utc::now())
            .await
            .unwrap();
        let group = bodies_of(&http, "CreatePlacementGroup").remove(0);
        assert!(
            group.contains("GroupName=quartermaster-replay-train-use1-az4"),
            "{group}"
        );
        let lt = bodies_of(&http, "CreateLaunchTemplate").remove(0);
        assert!(
            lt.contains(
                "LaunchTemplateData.Placement.GroupName=quartermaster-replay-train-use1-az4"
            ),
            "{lt}"
        );
        // One zone only: the group's.
        let fleet = bodies_of(&http, "CreateFleet").remove(0);
        assert!(!fleet.contains("Overrides.2"), "{fleet}");
        [group, lt, fleet]
    }

    #[tokio::test]
    async fn an_efa_launch_goes_into_its_pools_tagged_placement_group_with_every_efa_interface() {
        let (events, t) = efa_launch();
        let [group, lt, fleet] = launched_into_group(events, t).await;
        assert!(group.contains("Strategy=cluster"), "{group}");
        assert!(group.contains("ResourceType=placement-group"), "{group}");
        assert!(group.contains("Value=replay"), "{group}");
        assert!(
            lt.contains("NetworkInterface.4.InterfaceType=efa-only"),
            "{lt}"
        );
        assert!(!lt.contains("LaunchTemplateData.SecurityGroupId"), "{lt}");
        assert!(
            fleet.contains("quartermaster.dev%2Fplacement-group"),
            "{fleet}"
        );
    }

    #[tokio::test]
    async fn a_one_block_gang_launch_goes_into_its_pools_placement_group_without_efa() {
        let (events, mut t) = efa_launch();
        t.labels.remove(l::EFA_INTERFACES);
        t.labels.insert(l::CLUSTER_PLACEMENT.into(), "true".into());
        let [_, lt, _] = launched_into_group(events, t).await;
        assert!(!lt.contains("efa"), "no EFA interfaces asked: {lt}");
    }

    #[tokio::test]
    async fn garbage_collection_deletes_the_placement_groups_no_instance_is_in_once_it_made_efa_launches(
    ) {
        let groups = event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribePlacementGroupsResponse xmlns="{NS}">
    <requestId>d4904fd9-82c2-4ea5-adfe-a9cc3EXAMPLE</requestId>
    <placementGroupSet>
        <item><groupName>quartermaster-replay-train-use1-az4</groupName><state>available</state><strategy>cluster</strategy><groupId>pg-1</groupId></item>
        <item><groupName>quartermaster-replay-train-use1-az6</groupName><state>available</state><strategy>cluster</strategy><groupId>pg-2</groupId></item>
    </placementGroupSet>
</DescribePlacementGroupsResponse>"#
        )));
        let no_templates = event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeLaunchTemplatesResponse xmlns="{NS}">
    <requestId>1afa6e44-eb38-4229-8db6-d5eaEXAMPLE</requestId>
    <launchTemplates/>
</DescribeLaunchTemplatesResponse>"#
        )));
        let one_instance_in_az4 = event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="{NS}">
    <requestId>8f7724cf-496f-496e-8fe3-ef2f0a7e1d11</requestId>
    <reservationSet>
        <item>
            <reservationId>r-1</reservationId>
            <ownerId>111122223333</ownerId>
            <instancesSet>
                <item>
                    <instanceId>i-0123456789abcdef0</instanceId>
                    <tagSet>
                        <item><key>quartermaster.dev/placement-group</key><value>quartermaster-replay-train-use1-az4</value></item>
                    </tagSet>
                </item>
            </instancesSet>
        </item>
    </reservationSet>
</DescribeInstancesResponse>"#
        )));
        let deleted = event(ok(format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<DeletePlacementGroupResponse xmlns="{NS}">
    <requestId>d4904fd9-82c2-4ea5-adfe-a9cc3EXAMPLE</requestId>
    <return>true</return>
</DeletePlacementGroupResponse>"#
        )));
        // An EFA launch first: a process that made none does not look.
        let (mut events, t) = efa_launch();
        events.extend([no_templates, groups, one_instance_in_az4, deleted]);
        let (aws, http) = cloud(events);
        let launched_at = chrono::Utc::now();
        aws.launch(&spot_claim(), &t, launched_at).await.unwrap();
        let (gone, failed) = aws
            .collect_unused_resources(
                launched_at + chrono::TimeDelta::hours(1),
                chrono::TimeDelta::minutes(5),
            )
            .await
            .unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(gone, ["quartermaster-replay-train-use1-az6"]);
        let asked = &bodies_of(&http, "DescribePlacementGroups")[0];
        assert!(
            asked.contains("tag%3Aquartermaster.dev%2Fcluster"),
            "{asked}"
        );
        let delete = &bodies_of(&http, "DeletePlacementGroup")[0];
        assert!(
            delete.contains("GroupName=quartermaster-replay-train-use1-az6"),
            "{delete}"
        );
    }
}
