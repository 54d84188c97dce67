use super::*;

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
