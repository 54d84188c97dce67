//! EC2 faults, through moto behind a faulting proxy
//! ([`crate::support::faulty_aws`]): launches under throttling (a third of
//! every call), a timeout, a 5xx and a lost `CreateFleet` answer end with
//! one instance per claim once garbage collection ran (the lost answer's
//! double is collected); a node class whose image, subnet and instance
//! profile lookups are throttled keeps its pools launching; an instance's
//! network topology is read through the SDK (moto lacks the call: the proxy
//! answers it) and a throttled read is an error to retry, not an empty one.

use crate::support::aws_world::{claim, template, World};
use crate::support::faulty_aws::{Kind, Pick, Proxy, Rule, HOLD};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::{Credentials, SharedCredentialsProvider};
use quartermaster::catalog::CapacityType;
use quartermaster::cloud::aws::ec2::AwsCloud;
use quartermaster::cloud::aws::nodeclass::Resolver;
use quartermaster::cloud::{self, CloudProvider};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// SDK configuration through `proxy`: short attempts (a held call times
/// out), quick retries, test credentials.
fn through(proxy: &Proxy) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(proxy.endpoint())
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "moto",
        )))
        .http_client(quartermaster::cloud::aws::http_client())
        .retry_config(
            aws_config::retry::RetryConfig::standard()
                .with_max_attempts(3)
                .with_initial_backoff(Duration::from_millis(10))
                .with_max_backoff(Duration::from_millis(50)),
        )
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(HOLD / 3)
                .operation_timeout(Duration::from_secs(20))
                .build(),
        )
        .build()
}

#[tokio::test]
async fn launches_under_throttling_timeouts_5xx_and_a_lost_answer_end_with_one_instance_per_claim()
{
    let world = World::new().await;
    let proxy = Proxy::start(world.moto.endpoint()).await;
    let sdk = through(&proxy);
    let spec = world.node_class_spec();
    // The class resolves straight from moto; the launches go through the
    // proxy.
    let class = world
        .resolve(&spec)
        .await
        .node_class("default", &spec)
        .expect("the class resolves");
    let aws = AwsCloud::new(
        aws_sdk_ec2::Client::new(&sdk),
        world.settings(&world.cluster),
    )
    .unwrap();
    aws.set_node_classes(HashMap::from([("train".to_string(), Arc::new(class))]));
    // The lost answer first (moto launches, the client sees a 503 and
    // retries: a double), then a held DescribeInstances (a timeout), a
    // 5xx, and a third of every call throttled.
    proxy.add(Rule::new(
        "CreateFleet",
        Kind::LostAnswer,
        Pick::Calls(vec![1]),
    ));
    proxy.add(Rule::new(
        "DescribeInstances",
        Kind::Timeout,
        Pick::Calls(vec![1]),
    ));
    proxy.add(Rule::new(
        "CreateLaunchTemplate",
        Kind::ServerError,
        Pick::Calls(vec![1]),
    ));
    proxy.add(Rule::new("*", Kind::Throttle, Pick::Every(3)));
    let names: Vec<String> = (0..8).map(|i| format!("{}-{i}", world.cluster)).collect();
    let mut recorded: BTreeMap<String, String> = BTreeMap::new();
    let now = chrono::Utc::now();
    for name in &names {
        // As the lifecycle does: again after each failure (its backoff's
        // waits left out), until the launch is answered.
        let mut tries = 0;
        let instance = loop {
            tries += 1;
            match aws
                .launch(
                    &claim(name, "g5.xlarge", "use1-az4", CapacityType::OnDemand),
                    &template(),
                    now,
                )
                .await
            {
                Ok(i) => break i,
                Err(e) => {
                    assert!(e.is_retryable(), "{name}: {e}");
                    assert!(tries < 30, "{name}: {e}");
                }
            }
        };
        recorded.insert(name.clone(), instance.provider_id);
    }
    // Garbage collection, as the controller runs it, until a pass fails
    // nothing (its calls are throttled too).
    let index: cloud::ClaimIndex = recorded
        .iter()
        .map(|(c, p)| (c.clone(), Some(p.clone())))
        .collect();
    let later = now + chrono::TimeDelta::hours(1);
    let mut doubles = 0;
    for _ in 0..20 {
        match cloud::collect_garbage(&aws, &index, later, chrono::TimeDelta::minutes(5)).await {
            Ok((done, failed)) => {
                doubles += done.len();
                if failed.is_empty() {
                    break;
                }
            }
            Err(e) => assert!(e.is_retryable(), "{e}"),
        }
    }
    assert!(doubles >= 1, "the lost answer's double was collected");
    // What moto holds: exactly the recorded instance of each claim alive.
    proxy.clear();
    let direct = AwsCloud::new(world.ec2.clone(), world.settings(&world.cluster)).unwrap();
    let mut alive: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in direct.instances().await.unwrap() {
        if i.state.is_alive() {
            alive.entry(i.claim).or_default().push(i.provider_id);
        }
    }
    let expected: BTreeMap<String, Vec<String>> = recorded
        .iter()
        .map(|(c, p)| (c.clone(), vec![p.clone()]))
        .collect();
    assert_eq!(alive, expected, "one instance per claim, none leaked");
    let injected = proxy.injected();
    for kind in ["throttled", "timeout", "5xx", "lost answer"] {
        assert!(
            injected.get(kind).is_some_and(|n| *n > 0),
            "{kind}: {injected:?}"
        );
    }
    println!(
        "EC2 faults injected over {} calls, by kind: {injected:?}; doubles collected: {doubles}",
        proxy.all_calls()
    );
}

#[tokio::test]
async fn a_node_class_whose_lookups_are_throttled_keeps_its_pools_launching() {
    use crate::support::fake_api::FakeApi;
    use quartermaster::cloud::aws::ec2::NodeClasses;
    use quartermaster::controller::events::Events;
    use quartermaster::controller::kube_api::KubeApi;
    use quartermaster::controller::nodeclasses::Reconciler;

    let world = World::new().await;
    let proxy = Proxy::start(world.moto.endpoint()).await;
    let sdk = through(&proxy);
    let api = FakeApi::new();
    {
        let mut s = api.state.lock().unwrap();
        s.put(
            "apis/quartermaster.dev/v1alpha1/ec2nodeclasses",
            serde_json::json!({
                "apiVersion": "quartermaster.dev/v1alpha1", "kind": "EC2NodeClass",
                "metadata": {"name": "default", "generation": 1},
                "spec": serde_json::to_value(world.node_class_spec()).unwrap()
            }),
        );
        s.put(super::harness::POOLS, super::harness::pool());
    }
    let client = api.client();
    let classes = NodeClasses::default();
    let mut reconciler = Reconciler::new(
        KubeApi::new(client.clone()),
        Events::new(client, None),
        Resolver::new(&sdk, Some("1.33".into())).with_parameter_root(&world.parameter_root),
        classes.clone(),
    );
    let now = chrono::Utc::now();
    reconciler.round(true, now).await.unwrap();
    assert!(classes.get("gpu").is_some(), "{:?}", classes.problem("gpu"));
    // Every image, subnet, security group and instance profile lookup is
    // throttled now (past the SDK's retries).
    for action in [
        "GetParameters",
        "DescribeSubnets",
        "DescribeSecurityGroups",
        "GetInstanceProfile",
        "GetRole",
    ] {
        proxy.add(Rule::new(action, Kind::Throttle, Pick::All));
    }
    let later = now + chrono::TimeDelta::minutes(1);
    reconciler.round(true, later).await.unwrap();
    assert!(
        classes.get("gpu").is_some(),
        "the pool still launches: {:?}",
        classes.problem("gpu")
    );
    assert!(classes.problem("gpu").is_none());
    println!("node class lookups throttled: {:?}", proxy.injected());
    assert!(proxy.injected().get("throttled").is_some_and(|n| *n > 0));
}

#[tokio::test]
async fn a_training_instances_network_topology_is_read_and_a_throttled_read_is_retried() {
    let world = World::new().await;
    let proxy = Proxy::start(world.moto.endpoint()).await;
    let aws = AwsCloud::new(
        aws_sdk_ec2::Client::new(&through(&proxy)),
        world.settings(&world.cluster),
    )
    .unwrap();
    proxy.answer(
        "DescribeInstanceTopology",
        r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstanceTopologyResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>topology</requestId>
  <instanceSet>
    <item>
      <instanceId>i-0123456789abcdef0</instanceId>
      <instanceType>p5.48xlarge</instanceType>
      <networkNodeSet>
        <item>nn-1111111111example</item>
        <item>nn-2222222222example</item>
        <item>nn-3333333333example</item>
      </networkNodeSet>
      <availabilityZone>us-east-1a</availabilityZone>
      <zoneId>use1-az1</zoneId>
    </item>
  </instanceSet>
</DescribeInstanceTopologyResponse>"#,
    );
    let instance = |instance_type: &str| cloud::Instance {
        claim: "train-a".into(),
        provider_id: "aws:///use1-az1/i-0123456789abcdef0".into(),
        offering: quartermaster::core::OfferingKey {
            instance_type: instance_type.into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::OnDemand,
        },
        price_per_hour: 0.0,
        launched_at: chrono::Utc::now(),
        state: cloud::InstanceState::Running,
    };
    let nodes = aws
        .network_nodes("train-a", &instance("p5.48xlarge"))
        .await
        .expect("the topology");
    assert_eq!(
        nodes,
        [
            "nn-1111111111example",
            "nn-2222222222example",
            "nn-3333333333example"
        ]
    );
    // A type EC2 reports no topology for costs no call.
    let calls = proxy.calls("DescribeInstanceTopology");
    assert_eq!(
        aws.network_nodes("infer-a", &instance("g5.xlarge"))
            .await
            .unwrap(),
        [] as [&str; 0]
    );
    assert_eq!(proxy.calls("DescribeInstanceTopology"), calls);
    // Throttled past the SDK's retries: an error the registration step
    // retries, never "no topology".
    proxy.add(Rule::new(
        "DescribeInstanceTopology",
        Kind::Throttle,
        Pick::All,
    ));
    let err = aws
        .network_nodes("train-a", &instance("p5.48xlarge"))
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err}");
}
