//! `deploy/aws/iam-policy.json` is least privilege where it matters: nothing
//! that terminates, deletes or re-tags an existing resource is allowed
//! without a condition on our cluster tag, nothing is created untagged, and
//! every call the controller makes is allowed.

use serde_json::Value;

const POLICY: &str = include_str!("../deploy/aws/iam-policy.json");
const CLUSTER_TAG: &str = "quartermaster.dev/cluster";

/// Actions that change or destroy resources that already exist.
const MODIFYING: &[&str] = &[
    "ec2:TerminateInstances",
    "ec2:StopInstances",
    "ec2:RebootInstances",
    "ec2:ModifyInstanceAttribute",
    "ec2:DeleteLaunchTemplate",
    "ec2:DeletePlacementGroup",
    "ec2:DeleteTags",
    "ec2:CreateTags",
    "ec2:DetachVolume",
];

/// Actions that create resources.
const CREATING: &[&str] = &[
    "ec2:RunInstances",
    "ec2:CreateFleet",
    "ec2:CreateLaunchTemplate",
    "ec2:CreatePlacementGroup",
];

/// Every call the EC2, node class, EKS discovery, pricing and notice code
/// makes.
const USED: &[&str] = &[
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTopology",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribePlacementGroups",
    "ec2:CreatePlacementGroup",
    "ec2:DeletePlacementGroup",
    "ec2:CreateLaunchTemplate",
    "ec2:DescribeLaunchTemplates",
    "ec2:DeleteLaunchTemplate",
    "ec2:CreateFleet",
    "ec2:RunInstances",
    "ec2:CreateTags",
    "ec2:TerminateInstances",
    "ec2:RebootInstances",
    "ec2:DescribeImages",
    "ssm:GetParameters",
    "iam:GetInstanceProfile",
    "iam:ListInstanceProfilesForRole",
    "iam:PassRole",
    "eks:DescribeCluster",
    "pricing:GetProducts",
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:GetQueueAttributes",
];

/// IAM's action wildcard match (`*`, `?`), case-insensitive.
fn matches(pattern: &str, action: &str) -> bool {
    fn go(p: &[u8], a: &[u8]) -> bool {
        match (p.first(), a.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], a) || (!a.is_empty() && go(p, &a[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &a[1..]),
            (Some(x), Some(y)) if x.eq_ignore_ascii_case(y) => go(&p[1..], &a[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), action.as_bytes())
}

fn strings(v: &Value) -> Vec<&str> {
    match v {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    }
}

fn allows(statement: &Value, action: &str) -> bool {
    statement["Effect"] == "Allow"
        && strings(&statement["Action"])
            .iter()
            .any(|p| matches(p, action))
}

/// The value the statement's conditions require for `key` under
/// `StringEquals`, if any.
fn requires<'a>(statement: &'a Value, key: &str) -> Vec<&'a str> {
    statement["Condition"]["StringEquals"]
        .get(key)
        .map(strings)
        .unwrap_or_default()
}

/// What is wrong with a policy, one line per problem.
fn problems(policy: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(statements) = policy["Statement"].as_array() else {
        return vec!["no Statement array".into()];
    };
    let resource_tag = format!("aws:ResourceTag/{CLUSTER_TAG}");
    let request_tag = format!("aws:RequestTag/{CLUSTER_TAG}");
    for (i, s) in statements.iter().enumerate() {
        let sid = s["Sid"].as_str().unwrap_or("?");
        if s["Effect"] == "Allow"
            && (s.get("NotAction").is_some() || s.get("NotResource").is_some())
        {
            out.push(format!("{i} {sid}: Allow with NotAction/NotResource"));
        }
        let own_resource = requires(s, &resource_tag) == ["${CLUSTER_NAME}"];
        let own_request = requires(s, &request_tag) == ["${CLUSTER_NAME}"];
        for action in MODIFYING {
            if !allows(s, action) {
                continue;
            }
            let tagging_at_creation = *action == "ec2:CreateTags"
                && own_request
                && !requires(s, "ec2:CreateAction").is_empty();
            if !own_resource && !tagging_at_creation {
                out.push(format!(
                    "{i} {sid}: {action} without our cluster tag condition"
                ));
            }
        }
        for action in CREATING {
            if !allows(s, action) {
                continue;
            }
            let resources = strings(&s["Resource"]);
            let creates_ours = resources.iter().any(|r| {
                [
                    "instance/",
                    "fleet/",
                    "volume/",
                    "launch-template/",
                    "network-interface/",
                    "placement-group/",
                ]
                .iter()
                .any(|kind| r.contains(kind))
                    || *r == "*"
            });
            if creates_ours && !own_request && !own_resource {
                out.push(format!("{i} {sid}: {action} creates untagged resources"));
            }
        }
        if allows(s, "iam:PassRole") && strings(&s["Resource"]).contains(&"*") {
            out.push(format!("{i} {sid}: iam:PassRole on every role"));
        }
    }
    for action in USED {
        if !statements.iter().any(|s| allows(s, action)) {
            out.push(format!("{action} is used but not allowed"));
        }
    }
    out
}

#[test]
fn the_policy_scopes_every_destructive_action_to_our_cluster_tag() {
    let policy: Value = serde_json::from_str(POLICY).expect("the policy is JSON");
    assert_eq!(policy["Version"], "2012-10-17");
    assert_eq!(problems(&policy), Vec::<String>::new());
}

#[test]
fn an_unscoped_terminate_or_wildcard_is_caught() {
    let mut policy: Value = serde_json::from_str(POLICY).unwrap();
    let statements = policy["Statement"].as_array_mut().unwrap();
    statements.push(serde_json::json!({
        "Sid": "Sloppy", "Effect": "Allow", "Action": "ec2:Terminate*", "Resource": "*"
    }));
    statements.push(serde_json::json!({
        "Sid": "Everything", "Effect": "Allow", "Action": "*", "Resource": "*"
    }));
    let found = problems(&policy);
    assert!(
        found
            .iter()
            .any(|p| p.contains("Sloppy: ec2:TerminateInstances")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("Everything: ec2:TerminateInstances")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("Everything: ec2:RunInstances creates untagged")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("Everything: iam:PassRole on every role")),
        "{found:#?}"
    );
}

const QUEUE_TEMPLATE: &str = include_str!("../deploy/aws/interruption-queue.yaml");

/// Problems of the interruption queue's policy: every statement that lets a
/// service send must be limited (`aws:SourceArn`) to exactly the template's
/// EventBridge rules, or anyone's rule could forge interruption notices.
fn queue_policy_problems(template: &Value) -> Vec<String> {
    let resources = template["Resources"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let rules: std::collections::BTreeSet<String> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Events::Rule")
        .map(|(name, _)| name.clone())
        .collect();
    let mut out = Vec::new();
    if rules.is_empty() {
        out.push("no EventBridge rules".into());
    }
    let policies = resources
        .values()
        .filter(|r| r["Type"] == "AWS::SQS::QueuePolicy");
    let statements = policies
        .flat_map(|p| {
            p["Properties"]["PolicyDocument"]["Statement"]
                .as_array()
                .cloned()
        })
        .flatten();
    let mut senders = 0;
    for s in statements {
        let sid = s["Sid"].as_str().unwrap_or("?").to_string();
        if !allows(&s, "sqs:SendMessage") {
            continue;
        }
        senders += 1;
        let condition = &s["Condition"];
        let sources = ["ArnEquals", "ArnLike"]
            .iter()
            .find_map(|op| condition[op].get("aws:SourceArn"));
        let Some(sources) = sources else {
            out.push(format!(
                "{sid}: sqs:SendMessage without an aws:SourceArn condition"
            ));
            continue;
        };
        let named: std::collections::BTreeSet<String> = sources
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["Fn::GetAtt"][0].as_str().map(str::to_string))
            .collect();
        let arns_only = sources
            .as_array()
            .is_some_and(|a| a.iter().all(|x| x["Fn::GetAtt"][1] == "Arn"));
        if named != rules || !arns_only {
            out.push(format!(
                "{sid}: aws:SourceArn names {named:?}, not the ARNs of the rules {rules:?}"
            ));
        }
    }
    if senders == 0 {
        out.push("no statement lets EventBridge send".into());
    }
    out
}

#[test]
fn only_our_eventbridge_rules_may_send_to_the_interruption_queue() {
    let template: Value = serde_norway::from_str(QUEUE_TEMPLATE).expect("the template is YAML");
    assert_eq!(queue_policy_problems(&template), Vec::<String>::new());

    let mut open = template.clone();
    let statement = &mut open["Resources"]["InterruptionQueuePolicy"]["Properties"]
        ["PolicyDocument"]["Statement"][0];
    statement.as_object_mut().unwrap().remove("Condition");
    let found = queue_policy_problems(&open);
    assert!(
        found.iter().any(|p| p.contains("without an aws:SourceArn")),
        "{found:?}"
    );
}
