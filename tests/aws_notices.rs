//! The interruption-notice consumer against moto: EventBridge rules built
//! from `deploy/aws/interruption-queue.yaml` route real-shaped EC2 and AWS
//! Health events to an SQS queue; the consumer turns them into
//! `InstanceNotice`s, deletes a message only once the controller reported its
//! notices recorded (or foreign), delivers again one the controller could not
//! act on yet, counts and deletes what it cannot use, and acts once on a
//! message delivered twice. Also: the template passes `cfn-lint` (installed
//! with moto[server]).

use crate::support;

use aws_sdk_sqs::types::QueueAttributeName;
use quartermaster::cloud::aws::notices::{
    queue_url, run_consumer, ConsumerConfig, Error, NoticeConsumer, PollSummary,
};
use quartermaster::cloud::{InstanceNotice, NoticeAcks, NoticeKind, NoticeOutcome};
use quartermaster::metrics::{MessageLabels, Metrics};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::moto::{unique, Moto};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

fn template_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/aws/interruption-queue.yaml")
}

/// `(logical id, event pattern as JSON)` of every EventBridge rule in the
/// CloudFormation template.
fn template_rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(template_path()).expect("the template is readable");
    let doc: serde_json::Value = serde_norway::from_str(&text).expect("the template is YAML");
    let resources = doc["Resources"].as_object().expect("Resources is a map");
    resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Events::Rule")
        .map(|(id, r)| (id.clone(), r["Properties"]["EventPattern"].to_string()))
        .collect()
}

/// A queue of its own on the shared server, and its URL and ARN.
async fn queue(sqs: &aws_sdk_sqs::Client) -> (String, String) {
    queue_with_visibility(sqs, 30).await
}

/// [`queue`] whose messages come back `seconds` after a receive that did
/// not delete them.
async fn queue_with_visibility(sqs: &aws_sdk_sqs::Client, seconds: u32) -> (String, String) {
    let url = sqs
        .create_queue()
        .queue_name(unique("qm-notices"))
        .attributes(QueueAttributeName::VisibilityTimeout, seconds.to_string())
        .send()
        .await
        .expect("create_queue")
        .queue_url
        .expect("a queue URL");
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("get_queue_attributes")
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .expect("a queue ARN");
    (url, arn)
}

/// Messages left in the queue, visible or in flight.
async fn messages_left(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("get_queue_attributes")
        .attributes
        .unwrap_or_default();
    [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .map(|k| {
        attrs
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    })
    .sum()
}

fn consumer(moto: &Moto, url: &str, acks: &NoticeAcks) -> NoticeConsumer {
    let config = ConsumerConfig {
        wait_time: Duration::from_secs(1),
        error_backoff: Duration::from_millis(100),
        retry_after: Duration::ZERO,
        ..ConsumerConfig::new(url)
    };
    NoticeConsumer::new(
        aws_sdk_sqs::Client::new(&moto.sdk_config()),
        config,
        acks.clone(),
    )
}

/// Polls until `messages` messages were handled (or 30 s pass), summing
/// the polls.
async fn poll_until(
    consumer: &mut NoticeConsumer,
    tx: &mpsc::Sender<InstanceNotice>,
    metrics: &Metrics,
    messages: usize,
) -> PollSummary {
    let until = Instant::now() + Duration::from_secs(30);
    let mut total = PollSummary::default();
    while total.messages() < messages && Instant::now() < until {
        let s = consumer.poll_once(tx, metrics).await.expect("poll_once");
        total.accepted += s.accepted;
        total.duplicate += s.duplicate;
        total.malformed += s.malformed;
        total.unknown += s.unknown;
        total.notices += s.notices;
    }
    total
}

fn drain(rx: &mut mpsc::Receiver<InstanceNotice>) -> Vec<InstanceNotice> {
    let mut out = Vec::new();
    while let Ok(n) = rx.try_recv() {
        out.push(n);
    }
    out
}

fn count(metrics: &Metrics, outcome: &str) -> u64 {
    metrics
        .notice_messages
        .get_or_create(&MessageLabels {
            outcome: outcome.into(),
        })
        .get()
}

/// A spot interruption warning as EventBridge delivers it to SQS (the EC2
/// user guide's example, with our own event and instance IDs).
fn spot_event_body(event_id: &str, instance_id: &str) -> String {
    serde_json::json!({
        "version": "0",
        "id": event_id,
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "account": "123456789012",
        "time": "2021-02-18T17:26:21Z",
        "region": "us-east-1",
        "resources": [format!("arn:aws:ec2:us-east-1a:instance/{instance_id}")],
        "detail": {"instance-id": instance_id, "instance-action": "terminate"}
    })
    .to_string()
}

#[tokio::test]
async fn events_routed_by_the_templates_rules_become_notices_and_are_deleted() {
    let moto = Moto::start();
    let config = moto.sdk_config();
    let sqs = aws_sdk_sqs::Client::new(&config);
    let events = aws_sdk_eventbridge::Client::new(&config);
    let (url, arn) = queue(&sqs).await;

    // Test setup adapted to the shared moto server: the rules live on an
    // event bus of this test's own (AWS sends to the default bus), so that
    // other tests' events and rules cannot reach this queue. moto 5.2.5
    // accepts `aws.*` sources in put_events (AWS itself refuses them from
    // callers), which is what lets a test play EC2 and AWS Health here.
    let bus = unique("qm-bus");
    events
        .create_event_bus()
        .name(&bus)
        .send()
        .await
        .expect("create_event_bus");
    let rules = template_rules();
    assert_eq!(rules.len(), 5, "{rules:?}");
    for (id, pattern) in &rules {
        let name = unique(&format!("qm-{id}"));
        events
            .put_rule()
            .name(&name)
            .event_bus_name(&bus)
            .event_pattern(pattern)
            .send()
            .await
            .unwrap_or_else(|e| panic!("put_rule {id}: {e:?}"));
        events
            .put_targets()
            .rule(&name)
            .event_bus_name(&bus)
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("queue")
                    .arn(&arn)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap_or_else(|e| panic!("put_targets {id}: {e:?}"));
    }

    let (spot_id, rebalance_id, retired_id) =
        (unique("i-spot"), unique("i-rebal"), unique("i-ret"));
    let block_id = unique("cr-block");
    let entry = |source: &str, detail_type: &str, resource: &str, detail: serde_json::Value| {
        aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(&bus)
            .source(source)
            .detail_type(detail_type)
            .resources(resource)
            .detail(detail.to_string())
            .build()
    };
    let put = events
        .put_events()
        .entries(entry(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            &format!("arn:aws:ec2:us-east-1a:instance/{spot_id}"),
            serde_json::json!({"instance-id": spot_id, "instance-action": "terminate"}),
        ))
        .entries(entry(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            &format!("arn:aws:ec2:us-east-1:123456789012:instance/{rebalance_id}"),
            serde_json::json!({"instance-id": rebalance_id}),
        ))
        .entries(entry(
            "aws.health",
            "AWS Health Event",
            &retired_id,
            serde_json::json!({
                "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
                "service": "EC2",
                "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
                "eventTypeCategory": "scheduledChange",
                "startTime": "Fri, 27 Jan 2023 06:00:00 GMT",
                "affectedEntities": [{"entityValue": retired_id}]
            }),
        ))
        .entries(entry(
            "aws.ec2",
            "Capacity Block Expiration Warning",
            &format!("arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{block_id}"),
            serde_json::json!({
                "capacity-reservation-id": block_id,
                "end-date": "2024-06-01T11:30:00Z"
            }),
        ))
        // No rule matches a Health issue: it must not reach the queue.
        .entries(entry(
            "aws.health",
            "AWS Health Event",
            &retired_id,
            serde_json::json!({"service": "EC2", "eventTypeCategory": "issue"}),
        ))
        .send()
        .await
        .expect("put_events");
    assert_eq!(put.failed_entry_count, 0, "{put:?}");

    let metrics = Metrics::unregistered();
    let (tx, mut rx) = mpsc::channel(16);
    let acks = NoticeAcks::default();
    let mut consumer = consumer(&moto, &url, &acks);
    let summary = poll_until(&mut consumer, &tx, &metrics, 4).await;
    assert_eq!(
        summary,
        PollSummary {
            accepted: 4,
            notices: 4,
            ..PollSummary::default()
        }
    );
    let notices = drain(&mut rx);
    let find = |id: &str| {
        notices
            .iter()
            .find(|n| n.instance_id == id)
            .unwrap_or_else(|| panic!("no notice for {id} in {notices:?}"))
    };
    let spot = find(&spot_id);
    assert_eq!(
        spot.kind,
        NoticeKind::SpotInterruption {
            deadline: spot.time + chrono::TimeDelta::minutes(2)
        }
    );
    assert_eq!(find(&rebalance_id).kind, NoticeKind::Rebalance);
    use chrono::TimeZone;
    assert_eq!(
        find(&retired_id).kind,
        NoticeKind::ScheduledChange {
            start: Some(chrono::Utc.with_ymd_and_hms(2023, 1, 27, 6, 0, 0).unwrap())
        }
    );
    // A Capacity Block's warning is one notice about the reservation.
    assert_eq!(
        find(&block_id).kind,
        NoticeKind::ReservationEnding {
            end: chrono::Utc.with_ymd_and_hms(2024, 6, 1, 11, 30, 0).unwrap()
        }
    );
    assert_eq!(count(&metrics, "accepted"), 4);
    // Handed over is not recorded: every message is still on the queue.
    assert_eq!(messages_left(&sqs, &url).await, 4);
    assert_eq!(consumer.in_flight(), 4);
    // The controller records three and finds the fourth is not ours: all go.
    acks.push(spot, NoticeOutcome::Recorded);
    acks.push(find(&rebalance_id), NoticeOutcome::Recorded);
    acks.push(find(&block_id), NoticeOutcome::Recorded);
    acks.push(find(&retired_id), NoticeOutcome::Foreign);
    // Nothing else arrived (the Health issue matched no rule), and every
    // settled message is gone from the queue.
    let again = consumer.poll_once(&tx, &metrics).await.expect("poll_once");
    assert_eq!(again.messages(), 0, "{again:?}");
    assert_eq!(consumer.in_flight(), 0);
    assert_eq!(messages_left(&sqs, &url).await, 0);
    assert_eq!(count(&metrics, "recorded"), 3);
    assert_eq!(count(&metrics, "foreign"), 1);
}

#[tokio::test]
async fn malformed_and_unknown_messages_are_counted_and_deleted() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let (url, _) = queue(&sqs).await;
    let unknown = serde_json::json!({
        "version": "0", "id": unique("e-unknown"), "detail-type": "EC2 AMI State Change",
        "source": "aws.ec2", "account": "123456789012", "time": "2024-01-01T00:00:00Z",
        "region": "us-east-1", "resources": [], "detail": {"State": "available"}
    });
    // A Capacity Block warning naming no reservation cannot be acted on.
    let block_without_reservation = serde_json::json!({
        "version": "0", "id": unique("e-block"), "detail-type": "Capacity Block Expiration Warning",
        "source": "aws.ec2", "account": "123456789012", "time": "2024-01-01T00:00:00Z",
        "region": "us-east-1", "resources": [], "detail": {"end-date": "2024-01-01T00:40:00Z"}
    });
    for body in [
        "this is not an event".to_string(),
        r#"{"detail-type": "EC2 Spot Instance Interruption Warning"}"#.to_string(),
        block_without_reservation.to_string(),
        unknown.to_string(),
    ] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
            .await
            .expect("send_message");
    }
    let metrics = Metrics::unregistered();
    let (tx, mut rx) = mpsc::channel(16);
    let mut consumer = consumer(&moto, &url, &NoticeAcks::default());
    let summary = poll_until(&mut consumer, &tx, &metrics, 4).await;
    assert_eq!(
        summary,
        PollSummary {
            malformed: 3,
            unknown: 1,
            ..PollSummary::default()
        }
    );
    assert!(drain(&mut rx).is_empty());
    assert_eq!(count(&metrics, "malformed"), 3);
    assert_eq!(count(&metrics, "unknown"), 1);
    assert_eq!(messages_left(&sqs, &url).await, 0);
}

#[tokio::test]
async fn a_message_delivered_twice_acts_once() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let (url, _) = queue(&sqs).await;
    let instance_id = unique("i-twice");
    let body = spot_event_body(&unique("e-twice"), &instance_id);
    for _ in 0..2 {
        sqs.send_message()
            .queue_url(&url)
            .message_body(&body)
            .send()
            .await
            .expect("send_message");
    }
    let metrics = Metrics::unregistered();
    let (tx, mut rx) = mpsc::channel(16);
    let acks = NoticeAcks::default();
    let mut consumer = consumer(&moto, &url, &acks);
    let summary = poll_until(&mut consumer, &tx, &metrics, 2).await;
    assert_eq!((summary.accepted, summary.duplicate), (1, 1), "{summary:?}");
    let notices = drain(&mut rx);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].instance_id, instance_id);
    assert_eq!(count(&metrics, "duplicate"), 1);
    // The second copy is gone; the first waits for the controller.
    assert_eq!(messages_left(&sqs, &url).await, 1);
    acks.push(&notices[0], NoticeOutcome::Recorded);
    consumer.settle(&metrics).await;
    assert_eq!(messages_left(&sqs, &url).await, 0);
}

#[tokio::test]
async fn a_notice_the_controller_cannot_act_on_yet_is_delivered_again_not_dropped() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let (url, _) = queue(&sqs).await;
    let instance_id = unique("i-later");
    sqs.send_message()
        .queue_url(&url)
        .message_body(spot_event_body(&unique("e-later"), &instance_id))
        .send()
        .await
        .expect("send_message");
    let metrics = Metrics::unregistered();
    let (tx, mut rx) = mpsc::channel(16);
    let acks = NoticeAcks::default();
    let mut consumer = consumer(&moto, &url, &acks);
    poll_until(&mut consumer, &tx, &metrics, 1).await;
    let first = drain(&mut rx);
    assert_eq!(first.len(), 1);
    // Its claim is not known yet: the message stays, and comes back
    // (`retry_after` is zero here) to be sent again.
    acks.push(&first[0], NoticeOutcome::Retry);
    let again = poll_until(&mut consumer, &tx, &metrics, 1).await;
    assert_eq!(again.accepted, 1, "{again:?}");
    assert_eq!(count(&metrics, "retried"), 1);
    let second = drain(&mut rx);
    assert_eq!(second, first);
    assert_eq!(messages_left(&sqs, &url).await, 1);
    acks.push(&second[0], NoticeOutcome::Recorded);
    consumer.settle(&metrics).await;
    assert_eq!(messages_left(&sqs, &url).await, 0);
}

#[tokio::test]
async fn a_consumer_that_dies_before_the_record_leaves_the_notice_to_its_successor() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let (url, _) = queue_with_visibility(&sqs, 1).await;
    let instance_id = unique("i-crash");
    sqs.send_message()
        .queue_url(&url)
        .message_body(spot_event_body(&unique("e-crash"), &instance_id))
        .send()
        .await
        .expect("send_message");
    let metrics = Metrics::unregistered();
    let (tx, mut rx) = mpsc::channel(16);
    let mut dying = consumer(&moto, &url, &NoticeAcks::default());
    poll_until(&mut dying, &tx, &metrics, 1).await;
    assert_eq!(drain(&mut rx).len(), 1);
    // The process dies before the controller recorded anything.
    drop(dying);
    let acks = NoticeAcks::default();
    let mut next = consumer(&moto, &url, &acks);
    poll_until(&mut next, &tx, &metrics, 1).await;
    let notices = drain(&mut rx);
    assert_eq!(notices.len(), 1, "the successor gets the notice again");
    assert_eq!(notices[0].instance_id, instance_id);
    acks.push(&notices[0], NoticeOutcome::Recorded);
    next.settle(&metrics).await;
    assert_eq!(messages_left(&sqs, &url).await, 0);
}

#[tokio::test]
async fn a_closed_channel_stops_the_consumer_and_leaves_the_message_queued() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let (url, _) = queue(&sqs).await;
    let body = spot_event_body(&unique("e-closed"), &unique("i-closed"));
    sqs.send_message()
        .queue_url(&url)
        .message_body(body)
        .send()
        .await
        .expect("send_message");
    let metrics = Metrics::unregistered();
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let mut consumer = consumer(&moto, &url, &NoticeAcks::default());
    let until = Instant::now() + Duration::from_secs(30);
    let result = loop {
        match consumer.poll_once(&tx, &metrics).await {
            Ok(s) if s.messages() == 0 && Instant::now() < until => continue,
            other => break other,
        }
    };
    assert!(matches!(result, Err(Error::ChannelClosed)), "{result:?}");
    assert_eq!(messages_left(&sqs, &url).await, 1);
}

#[tokio::test]
async fn run_consumer_delivers_notices_and_stops_when_cancelled() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let (url, _) = queue(&sqs).await;
    let instance_id = unique("i-run");
    sqs.send_message()
        .queue_url(&url)
        .message_body(spot_event_body(&unique("e-run"), &instance_id))
        .send()
        .await
        .expect("send_message");
    let metrics = std::sync::Arc::new(Metrics::unregistered());
    let (tx, mut rx) = mpsc::channel(4);
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (consumer, metrics, cancel) = (
            consumer(&moto, &url, &NoticeAcks::default()),
            metrics.clone(),
            cancel.clone(),
        );
        async move { run_consumer(consumer, tx, &metrics, cancel).await }
    });
    let notice = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a notice within 30 s")
        .expect("the consumer is running");
    assert_eq!(notice.instance_id, instance_id);
    cancel.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the consumer stops within 10 s of the cancel")
        .expect("the task does not panic");
    assert!(stopped.is_ok(), "{stopped:?}");
}

/// The `cfn-lint` that moto[server] installs beside `moto_server`.
#[tokio::test]
async fn a_queue_given_by_name_is_found_by_its_url() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let name = unique("qm-named");
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await
        .expect("create_queue")
        .queue_url
        .expect("a queue URL");
    assert_eq!(queue_url(&sqs, &name).await.unwrap(), url);
    assert_eq!(queue_url(&sqs, &url).await.unwrap(), url, "a URL as it is");
    let err = queue_url(&sqs, "qm-no-such-queue")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("qm-no-such-queue"), "{err}");
}

fn cfn_lint() -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/moto-server");
    let out = std::process::Command::new(script)
        .arg("bin")
        .output()
        .expect("scripts/moto-server runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let moto_server = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    moto_server.with_file_name("cfn-lint")
}

#[test]
fn the_cloudformation_template_passes_cfn_lint_and_a_broken_copy_does_not() {
    let lint = cfn_lint();
    let run = |path: &std::path::Path| {
        std::process::Command::new(&lint)
            .arg(path)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", lint.display()))
    };
    let ok = run(&template_path());
    assert!(
        ok.status.success(),
        "cfn-lint: {}{}",
        String::from_utf8_lossy(&ok.stdout),
        String::from_utf8_lossy(&ok.stderr)
    );
    // The check can fail: SQS keeps messages at least 60 s.
    let text = std::fs::read_to_string(template_path()).unwrap();
    assert!(text.contains("MessageRetentionPeriod: 300"));
    let broken = std::env::temp_dir().join(format!("{}.yaml", unique("qm-broken-template")));
    std::fs::write(
        &broken,
        text.replace("MessageRetentionPeriod: 300", "MessageRetentionPeriod: 30"),
    )
    .unwrap();
    let bad = run(&broken);
    let _ = std::fs::remove_file(&broken);
    assert!(!bad.status.success(), "cfn-lint accepted a 30 s retention");
}

/// AWS Health scheduling the retirement of one of our instances, as
/// EventBridge delivers it to SQS.
fn retirement_body(event_id: &str, instance_id: &str, start: &str) -> String {
    serde_json::json!({
        "version": "0",
        "id": event_id,
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "account": "123456789012",
        "time": "2026-01-05T06:00:00Z",
        "region": "us-east-1",
        "resources": [instance_id],
        "detail": {
            "eventArn": "arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "startTime": start,
            "affectedEntities": [{"entityValue": instance_id}]
        }
    })
    .to_string()
}

/// A claim whose instance is `instance_id`, registered as node `ip-1`.
fn claim_view(instance_id: &str) -> quartermaster::controller::snapshot::ClaimView {
    use quartermaster::api::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
    use quartermaster::controller::snapshot::{ClaimView, NodeInfo};
    let mut claim = NodeClaim::new(
        "gpu-1",
        NodeClaimSpec {
            node_pool: "gpu".into(),
            instance_type: "p5.48xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: quartermaster::catalog::CapacityType::OnDemand,
            price_per_hour: 98.0,
            resources: Default::default(),
            labels: Default::default(),
            taints: vec![],
            startup_taints: vec![],
            termination_grace_period: None,
            expire_after: None,
        },
    );
    claim.status = Some(NodeClaimStatus {
        provider_id: Some(format!("aws:///use1-az1/{instance_id}")),
        node_name: Some("ip-1".into()),
        ..Default::default()
    });
    ClaimView {
        claim,
        node: Some(NodeInfo {
            name: "ip-1".into(),
            provider_id: Some(format!("aws:///use1-az1/{instance_id}")),
            labels: Default::default(),
            taints: vec![],
            unschedulable: false,
            ready: true,
            allocatable: Default::default(),
            do_not_disrupt: false,
            do_not_repair: false,
            conditions: vec![],
            resource_version: Some("7".into()),
        }),
        pods: vec![],
    }
}

#[tokio::test]
async fn a_scheduled_retirement_is_recorded_on_its_claim_before_its_message_is_deleted() {
    use http::Method;
    use quartermaster::controller::interruptions::{NoticeHandler, SCHEDULED_REASON};
    use quartermaster::controller::kube_api::KubeApi;
    use quartermaster::core::Notice;
    use support::api_server::Scenario;

    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let (url, _) = queue(&sqs).await;
    let instance_id = unique("i-retire");
    sqs.send_message()
        .queue_url(&url)
        .message_body(retirement_body(
            &unique("e-retire"),
            &instance_id,
            "Thu, 08 Jan 2026 06:00:00 GMT",
        ))
        .send()
        .await
        .expect("send_message");
    let start = "2026-01-08T06:00:00Z"
        .parse::<quartermaster::core::Time>()
        .unwrap();
    let metrics = Metrics::unregistered();
    let (tx, mut rx) = mpsc::channel(16);
    let acks = NoticeAcks::default();
    let mut consumer = consumer(&moto, &url, &acks);
    poll_until(&mut consumer, &tx, &metrics, 1).await;
    let notices = drain(&mut rx);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(
        notices[0].kind,
        NoticeKind::ScheduledChange { start: Some(start) }
    );
    let views = [claim_view(&instance_id)];
    let now = "2026-01-05T06:00:05Z".parse().unwrap();
    let mut handler = NoticeHandler::new();

    // A replica that does not lead records nothing: the message stays
    // (and comes back: `retry_after` is zero here).
    let (client, verifier) = Scenario::new().run();
    let handled = handler
        .handle(&notices[0], &views, &KubeApi::new(client), false, now)
        .await;
    verifier.finish().await;
    assert_eq!(handled.outcome, NoticeOutcome::Retry);
    assert!(handled.notices.is_empty());
    acks.push(&notices[0], handled.outcome);
    poll_until(&mut consumer, &tx, &metrics, 1).await;
    let again = drain(&mut rx);
    assert_eq!(again, notices);
    assert_eq!(messages_left(&sqs, &url).await, 1);

    // The leader writes the claim's condition, then cordons the node; only
    // then is the notice told to the core and the message let go.
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            "/apis/quartermaster.dev/v1alpha1/nodeclaims/gpu-1/status",
            |b| {
                let c = &b["status"]["conditions"][0];
                assert_eq!(c["type"], "Interrupted");
                assert_eq!(c["reason"], SCHEDULED_REASON);
                assert!(
                    c["message"]
                        .as_str()
                        .unwrap()
                        .ends_with("2026-01-08T06:00:00Z"),
                    "{c}"
                );
            },
        )
        .respond(200, serde_json::to_value(&views[0].claim).unwrap())
        .expect(Method::PATCH, "/api/v1/nodes/ip-1", |b| {
            assert!(b.to_string().contains("quartermaster.dev/disrupted"), "{b}");
        })
        .respond(
            200,
            serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-1"}}),
        )
        .run();
    let handled = handler
        .handle(&again[0], &views, &KubeApi::new(client), true, now)
        .await;
    verifier.finish().await;
    assert_eq!(handled.outcome, NoticeOutcome::Recorded);
    assert_eq!(
        handled.notices,
        [Notice::ScheduledChange {
            claim: "gpu-1".into(),
            start: Some(start)
        }]
    );
    assert_eq!(handled.counted, [("gpu".to_string(), "scheduled-change")]);
    acks.push(&again[0], handled.outcome);
    consumer.settle(&metrics).await;
    assert_eq!(messages_left(&sqs, &url).await, 0);
}
