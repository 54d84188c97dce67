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
        lt.contains("LaunchTemplateData.Placement.GroupName=quartermaster-replay-train-use1-az4"),
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
