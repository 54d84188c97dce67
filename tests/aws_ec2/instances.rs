use super::*;

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
