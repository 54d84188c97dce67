//! EC2NodeClass reconciliation (`--cloud aws`): on a timer, every class is
//! resolved against AWS ([`Resolver`]), its status written (by the leader,
//! only when it changed), and each NodePool handed the resolved class it
//! references ([`NodeClasses`]), which launches then use. A pool whose class
//! is missing or not `Ready` gets none, so it launches nothing, and a
//! Warning Event on the pool says why (once per change of reason). The
//! status and the pool-to-class mapping are pure functions, tested here.

use super::events::{node_pool_ref, Events};
use super::kube_api::KubeApi;
use super::status::condition;
use crate::api::nodeclass::conditions as c;
use crate::api::{EC2NodeClass, EC2NodeClassStatus, NodePool};
use crate::cloud::aws::ec2::{NodeClass, NodeClasses};
use crate::cloud::aws::nodeclass::{Problem, Resolved, Resolver};
use crate::core::Time;
use kube::ResourceExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Reason of a `True` condition.
pub const RESOLVED: &str = "Resolved";
/// Reason of `Ready=False` when a part did not resolve: the part's own
/// reason is on its condition and repeated in the message.
pub const NOT_RESOLVED: &str = "NotResolved";

/// The status of a class from what resolving it found: the resolved parts,
/// one condition per part and `Ready` (all of them), each `False` with its
/// reason and message. Transition times are kept from `previous` while a
/// condition's status does not change.
pub fn node_class_status(
    resolved: &Resolved,
    previous: Option<&EC2NodeClassStatus>,
    generation: Option<i64>,
    now: Time,
) -> EC2NodeClassStatus {
    let old = previous
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let part = |type_: &str, problem: Option<&Problem>| match problem {
        None => condition(old, type_, true, RESOLVED, "", generation, now),
        Some(p) => condition(old, type_, false, p.reason, &p.message, generation, now),
    };
    let ready = match resolved.first_problem() {
        None => condition(old, c::READY, true, RESOLVED, "", generation, now),
        Some(p) => condition(
            old,
            c::READY,
            false,
            NOT_RESOLVED,
            &format!("{}: {}", p.reason, p.message),
            generation,
            now,
        ),
    };
    EC2NodeClassStatus {
        conditions: vec![
            ready,
            part(c::AMIS_READY, resolved.amis.as_ref().err()),
            part(c::SUBNETS_READY, resolved.subnets.as_ref().err()),
            part(
                c::SECURITY_GROUPS_READY,
                resolved.security_groups.as_ref().err(),
            ),
            part(
                c::INSTANCE_PROFILE_READY,
                resolved.instance_profile.as_ref().err(),
            ),
        ],
        amis: resolved.amis.clone().unwrap_or_default(),
        subnets: resolved.subnets.clone().unwrap_or_default(),
        security_groups: resolved.security_groups.clone().unwrap_or_default(),
        instance_profile: resolved.instance_profile.clone().ok(),
    }
}

/// Reason of `CapacityReservationsReady=False`: some selector term found
/// nothing usable (matches nothing, names a reservation that does not exist
/// or has ended); the message lists them.
pub const RESERVATIONS_UNUSABLE: &str = "CapacityReservationsUnusable";

/// The `CapacityReservationsReady` condition of a class with `terms`
/// reservation selector terms, from what the last discovery found
/// (`findings`: the terms' problems, [`NodeClasses::reservation_findings`]).
/// `None` when the class has no terms or was not asked about yet.
pub fn reservations_condition(
    terms: usize,
    findings: Option<&[String]>,
    previous: Option<&EC2NodeClassStatus>,
    generation: Option<i64>,
    now: Time,
) -> Option<crate::api::Condition> {
    let findings = findings.filter(|_| terms > 0)?;
    let old = previous
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let type_ = c::CAPACITY_RESERVATIONS_READY;
    Some(match findings {
        [] => condition(old, type_, true, RESOLVED, "", generation, now),
        problems => condition(
            old,
            type_,
            false,
            RESERVATIONS_UNUSABLE,
            &problems.join("; "),
            generation,
            now,
        ),
    })
}

/// The `SecurityGroupsAllowEFA` condition of a class some pool asking for
/// EFA uses (`uses_efa`), from whether its security groups allow EFA's
/// traffic; `None` for a class no such pool uses.
pub fn efa_condition(
    uses_efa: bool,
    resolved: &Resolved,
    previous: Option<&EC2NodeClassStatus>,
    generation: Option<i64>,
    now: Time,
) -> Option<crate::api::Condition> {
    if !uses_efa {
        return None;
    }
    let old = previous
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let type_ = c::SECURITY_GROUPS_ALLOW_EFA;
    Some(match &resolved.efa_rule {
        Ok(()) => condition(old, type_, true, RESOLVED, "", generation, now),
        Err(p) => condition(old, type_, false, p.reason, &p.message, generation, now),
    })
}

/// How long a class's last complete resolution stands in for parts that
/// AWS could not be asked about (throttled, unreachable, a 5xx).
pub const LAST_KNOWN_GOOD_FOR: Duration = Duration::from_secs(30 * 60);

/// A class's last resolution in which every part resolved, with its spec
/// and when.
#[derive(Debug, Clone)]
pub struct LastGood {
    /// The spec it was resolved from.
    pub spec: crate::api::EC2NodeClassSpec,
    /// What it found.
    pub resolved: Resolved,
    /// When.
    pub at: Time,
}

/// `fresh`, with each part that failed only because AWS could not be asked
/// (reason [`crate::cloud::aws::nodeclass::reasons::AWS_ERROR`]) taken from
/// `last` instead, when `last` was resolved from the same spec at most
/// `limit` before `now`. One throttled `DescribeImages`, `GetParameters` or
/// IAM call then does not make the class NotReady and its pools launch
/// nothing; a part AWS answered (an image not found, a spec problem) is
/// never overridden, and an old resolution is not used for ever. Returns
/// the parts used and how many came from `last`.
pub fn with_last_known_good(
    fresh: Resolved,
    last: Option<&LastGood>,
    spec: &crate::api::EC2NodeClassSpec,
    now: Time,
    limit: Duration,
) -> (Resolved, usize) {
    let usable =
        last.filter(|l| l.spec == *spec && (now - l.at).to_std().is_ok_and(|age| age <= limit));
    let Some(last) = usable else {
        return (fresh, 0);
    };
    let mut used = 0;
    fn pick<T: Clone>(
        part: Result<T, Problem>,
        old: &Result<T, Problem>,
        used: &mut usize,
    ) -> Result<T, Problem> {
        match (&part, old) {
            (Err(p), Ok(v)) if p.reason == crate::cloud::aws::nodeclass::reasons::AWS_ERROR => {
                *used += 1;
                Ok(v.clone())
            }
            _ => part,
        }
    }
    let old = &last.resolved;
    let resolved = Resolved {
        amis: pick(fresh.amis, &old.amis, &mut used),
        subnets: pick(fresh.subnets, &old.subnets, &mut used),
        security_groups: pick(fresh.security_groups, &old.security_groups, &mut used),
        instance_profile: pick(fresh.instance_profile, &old.instance_profile, &mut used),
        efa_rule: pick(fresh.efa_rule, &old.efa_rule, &mut used),
    };
    (resolved, used)
}

/// Each pool's class, and why the others have none.
#[derive(Debug, Default)]
pub struct PoolClasses {
    /// Pool name to its ready class.
    pub classes: HashMap<String, Arc<NodeClass>>,
    /// Pool name to why it launches nothing.
    pub not_ready: BTreeMap<String, String>,
}

/// Which resolved class each pool launches with: the one its
/// `nodeClassRef` (or `default`) names, when that class is ready; `why`
/// holds each class's problem when it is not.
pub fn pool_classes(
    pools: &[NodePool],
    ready: &HashMap<String, Arc<NodeClass>>,
    why: &HashMap<String, String>,
) -> PoolClasses {
    let mut out = PoolClasses::default();
    for pool in pools {
        let class = pool.spec.template.spec.node_class_name();
        match ready.get(class) {
            Some(c) => {
                out.classes.insert(pool.name_any(), c.clone());
            }
            None => {
                let reason = match why.get(class) {
                    Some(w) => format!("EC2NodeClass {class} is not Ready: {w}"),
                    None => format!("EC2NodeClass {class} does not exist"),
                };
                out.not_ready.insert(pool.name_any(), reason);
            }
        }
    }
    out
}

/// Resolves node classes and hands them to the provider.
pub struct Reconciler {
    api: KubeApi,
    events: Events,
    resolver: Resolver,
    classes: NodeClasses,
    /// Why each pool launched nothing at the last round (to publish an
    /// Event only when the reason changes).
    reported: BTreeMap<String, String>,
    /// Each class's last complete resolution ([`with_last_known_good`]).
    last_good: HashMap<String, LastGood>,
}

impl Reconciler {
    /// A reconciler writing through `api` and `events`, resolving with
    /// `resolver`, feeding `classes` (the provider's handle).
    pub fn new(api: KubeApi, events: Events, resolver: Resolver, classes: NodeClasses) -> Self {
        Reconciler {
            api,
            events,
            resolver,
            classes,
            reported: BTreeMap::new(),
            last_good: HashMap::new(),
        }
    }

    /// One round: list classes and pools, resolve every class, write the
    /// statuses that changed (`leading` only), hand the ready classes to
    /// the provider and report pools that have none.
    ///
    /// # Errors
    /// A failed list (the provider keeps the classes of the last round);
    /// a failed status write is logged and retried next round.
    pub async fn round(&mut self, leading: bool, now: Time) -> kube::Result<()> {
        let classes: Vec<EC2NodeClass> = self.api.list_node_classes().await?;
        let pools: Vec<NodePool> = self.api.list_node_pools().await?;
        self.last_good
            .retain(|name, _| classes.iter().any(|c| c.name_any() == *name));
        let mut ready = HashMap::new();
        let mut why = HashMap::new();
        for class in &classes {
            let name = class.name_any();
            let fresh = self.resolver.resolve(&class.spec).await;
            let (resolved, stale) = with_last_known_good(
                fresh,
                self.last_good.get(&name),
                &class.spec,
                now,
                LAST_KNOWN_GOOD_FOR,
            );
            if stale > 0 {
                tracing::warn!(class = name, parts = stale, "AWS could not be asked about part of the EC2NodeClass; its last resolution stands in");
            } else if resolved.first_problem().is_none() {
                self.last_good.insert(
                    name.clone(),
                    LastGood {
                        spec: class.spec.clone(),
                        resolved: resolved.clone(),
                        at: now,
                    },
                );
            }
            let mut status = node_class_status(
                &resolved,
                class.status.as_ref(),
                class.metadata.generation,
                now,
            );
            let uses_efa = pools.iter().any(|p| {
                let template = &p.spec.template.spec;
                template.efa && template.node_class_name() == name
            });
            status.conditions.extend(efa_condition(
                uses_efa,
                &resolved,
                class.status.as_ref(),
                class.metadata.generation,
                now,
            ));
            status.conditions.extend(reservations_condition(
                class.spec.capacity_reservation_selector_terms.len(),
                self.classes.reservation_findings(&name).as_deref(),
                class.status.as_ref(),
                class.metadata.generation,
                now,
            ));
            match resolved.node_class(&name, &class.spec) {
                Some(launch) => {
                    ready.insert(name.clone(), Arc::new(launch));
                }
                None => {
                    if let Some(p) = resolved.first_problem() {
                        why.insert(name.clone(), format!("{}: {}", p.reason, p.message));
                    }
                }
            }
            if leading && class.status.as_ref() != Some(&status) {
                if let Err(error) = self.api.patch_node_class_status(&name, &status).await {
                    tracing::warn!(class = name, %error, "failed to write EC2NodeClass status");
                }
            }
        }
        let mapped = pool_classes(&pools, &ready, &why);
        self.classes
            .set_with_problems(mapped.classes, mapped.not_ready.clone());
        for (pool, reason) in &mapped.not_ready {
            if leading && self.reported.get(pool) != Some(reason) {
                let uid = pools
                    .iter()
                    .find(|p| p.name_any() == *pool)
                    .and_then(|p| p.uid());
                self.events
                    .node_class_not_ready(&node_pool_ref(pool, uid.as_deref()), reason)
                    .await;
                tracing::warn!(pool, reason, "NodePool launches nothing");
            }
        }
        self.reported = mapped.not_ready;
        Ok(())
    }

    /// Rounds every `every` until `stop`; the first at once.
    pub async fn run(
        mut self,
        every: Duration,
        leader: watch::Receiver<bool>,
        stop: CancellationToken,
    ) {
        loop {
            let leading = *leader.borrow();
            if let Err(error) = self.round(leading, chrono::Utc::now()).await {
                tracing::warn!(%error, "resolving EC2NodeClasses failed; retrying");
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::nodeclass::{ResolvedAmi, ResolvedSecurityGroup, ResolvedSubnet};
    use crate::api::NodeClassReference;
    use crate::cloud::aws::nodeclass::reasons;

    fn at(min: i64) -> Time {
        chrono::DateTime::from_timestamp(1_750_000_000 + min * 60, 0).unwrap()
    }

    fn resolved() -> Resolved {
        Resolved {
            amis: Ok(vec![ResolvedAmi {
                id: "ami-1".into(),
                name: None,
                architecture: "x86_64".into(),
                accelerator: "nvidia".into(),
            }]),
            subnets: Ok(vec![ResolvedSubnet {
                id: "subnet-1".into(),
                zone: "us-east-1d".into(),
                zone_id: "use1-az4".into(),
                available_ip_address_count: 250,
            }]),
            security_groups: Ok(vec![ResolvedSecurityGroup {
                id: "sg-1".into(),
                name: None,
            }]),
            instance_profile: Ok("nodes".into()),
            efa_rule: Ok(()),
        }
    }

    fn status_of(s: &EC2NodeClassStatus, type_: &str) -> (String, String, String) {
        let c = s.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn a_throttled_part_is_taken_from_the_last_good_resolution_of_the_same_spec_for_a_while() {
        let spec: crate::api::EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"tier": "private"}}],
            "securityGroupSelectorTerms": [{"tags": {"tier": "nodes"}}],
            "role": "nodes"
        }))
        .unwrap();
        let last = LastGood {
            spec: spec.clone(),
            resolved: resolved(),
            at: at(0),
        };
        let throttled = || {
            let mut r = resolved();
            r.amis = Err(Problem {
                reason: reasons::AWS_ERROR,
                message: "ssm:GetParameters: ThrottlingException: Rate exceeded".into(),
            });
            r
        };
        let limit = LAST_KNOWN_GOOD_FOR;
        let (r, used) = with_last_known_good(throttled(), Some(&last), &spec, at(5), limit);
        assert_eq!(used, 1);
        assert!(r.node_class("gpu", &spec).is_some(), "still Ready: {r:?}");
        // Not without a good resolution, not past the limit, not for
        // another spec.
        let (r, _) = with_last_known_good(throttled(), None, &spec, at(5), limit);
        assert!(r.node_class("gpu", &spec).is_none());
        let late = at(1) + chrono::TimeDelta::from_std(limit).unwrap();
        let (r, used) = with_last_known_good(throttled(), Some(&last), &spec, late, limit);
        assert_eq!(used, 0);
        assert!(r.node_class("gpu", &spec).is_none());
        let mut other = spec.clone();
        other.role = Some("other".into());
        let (_, used) = with_last_known_good(throttled(), Some(&last), &other, at(5), limit);
        assert_eq!(used, 0);
        // What AWS did answer (no such image) is never overridden.
        let mut gone = resolved();
        gone.amis = Err(Problem {
            reason: reasons::AMIS_NOT_FOUND,
            message: "no image".into(),
        });
        let (r, used) = with_last_known_good(gone, Some(&last), &spec, at(5), limit);
        assert_eq!(used, 0);
        assert!(r.amis.is_err());
    }

    #[test]
    fn a_resolved_class_is_ready_and_shows_what_it_found() {
        let s = node_class_status(&resolved(), None, Some(3), at(0));
        assert!(s.is_ready());
        assert_eq!(s.amis[0].id, "ami-1");
        assert_eq!(s.subnets[0].zone_id, "use1-az4");
        assert_eq!(s.instance_profile.as_deref(), Some("nodes"));
        assert!(s.conditions.iter().all(|c| c.status == "True"));
        assert_eq!(s.conditions.len(), 5);
    }

    #[test]
    fn a_missing_subnet_makes_the_class_not_ready_with_the_reason_and_keeps_the_rest() {
        let ok = node_class_status(&resolved(), None, Some(1), at(0));
        let mut r = resolved();
        r.subnets = Err(Problem {
            reason: reasons::SUBNETS_NOT_FOUND,
            message: "no subnet matches subnetSelectorTerms tags {\"tier\": \"gone\"}".into(),
        });
        let s = node_class_status(&r, Some(&ok), Some(2), at(5));
        assert!(!s.is_ready());
        let (status, reason, message) = status_of(&s, c::READY);
        assert_eq!((status.as_str(), reason.as_str()), ("False", NOT_RESOLVED));
        assert!(
            message.starts_with("SubnetsNotFound: no subnet matches"),
            "{message}"
        );
        assert_eq!(
            status_of(&s, c::SUBNETS_READY).1,
            reasons::SUBNETS_NOT_FOUND
        );
        assert_eq!(status_of(&s, c::AMIS_READY).0, "True");
        assert!(s.subnets.is_empty());
        assert_eq!(s.amis.len(), 1);
        // Unchanged conditions keep their transition time; changed ones move.
        let time = |s: &EC2NodeClassStatus, t: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(time(&s, c::AMIS_READY), time(&ok, c::AMIS_READY));
        assert_ne!(time(&s, c::READY), time(&ok, c::READY));
    }

    #[test]
    fn reservation_problems_show_in_their_own_condition_without_unreadying_the_class() {
        let ok = node_class_status(&resolved(), None, Some(1), at(0));
        let found_nothing = [
            "capacityReservationSelectorTerms[0]: matches no active or scheduled capacity reservation".to_string(),
            "capacityReservationSelectorTerms[1]: capacity reservation cr-0bbb ended at 2026-03-08 11:30:00 UTC".to_string(),
        ];
        let cond = reservations_condition(2, Some(&found_nothing), Some(&ok), Some(1), at(1))
            .expect("a class with terms that was asked about");
        assert_eq!(
            (
                cond.type_.as_str(),
                cond.status.as_str(),
                cond.reason.as_str()
            ),
            (
                c::CAPACITY_RESERVATIONS_READY,
                "False",
                RESERVATIONS_UNUSABLE
            )
        );
        assert!(
            cond.message.contains("[0]: matches no active"),
            "{}",
            cond.message
        );
        assert!(
            cond.message.contains("cr-0bbb ended at"),
            "{}",
            cond.message
        );
        // Every term found something: True.
        let fine = reservations_condition(2, Some(&[]), Some(&ok), Some(1), at(2)).unwrap();
        assert_eq!(
            (fine.status.as_str(), fine.reason.as_str()),
            ("True", RESOLVED)
        );
        // No terms, or not asked about yet: no condition.
        assert_eq!(
            reservations_condition(0, Some(&[]), None, Some(1), at(2)),
            None
        );
        assert_eq!(reservations_condition(2, None, None, Some(1), at(2)), None);
        // Ready is about launching at all, which a reservation does not gate.
        assert!(ok.is_ready());
    }

    #[test]
    fn the_efa_rule_is_reported_only_for_a_class_a_pool_asking_for_efa_uses() {
        let mut r = resolved();
        assert_eq!(efa_condition(false, &r, None, Some(1), at(0)), None);
        let ok = efa_condition(true, &r, None, Some(1), at(0)).unwrap();
        assert_eq!(
            (ok.type_.as_str(), ok.status.as_str()),
            (c::SECURITY_GROUPS_ALLOW_EFA, "True")
        );
        r.efa_rule = Err(Problem {
            reason: reasons::EFA_RULE_MISSING,
            message: "security groups sg-1 have no rule ...".into(),
        });
        let missing = efa_condition(true, &r, None, Some(1), at(1)).unwrap();
        assert_eq!(
            (missing.status.as_str(), missing.reason.as_str()),
            ("False", reasons::EFA_RULE_MISSING)
        );
        // Advisory: the class is still Ready.
        assert!(node_class_status(&r, None, Some(1), at(1)).is_ready());
    }

    fn pool(name: &str, class: Option<&str>) -> NodePool {
        let mut p = NodePool::new(name, Default::default());
        p.spec.template.spec.node_class_ref = class.map(NodeClassReference::to);
        p
    }

    #[test]
    fn pools_get_the_ready_class_they_reference_and_the_others_a_reason() {
        let launch = Arc::new(
            resolved()
                .node_class(
                    "gpu",
                    &serde_json::from_value(serde_json::json!({
                        "subnetSelectorTerms": [{ "tags": { "a": "b" } }],
                        "securityGroupSelectorTerms": [{ "tags": { "a": "b" } }],
                        "role": "nodes"
                    }))
                    .unwrap(),
                )
                .unwrap(),
        );
        let ready = HashMap::from([("gpu".to_string(), launch)]);
        let why = HashMap::from([(
            "broken".to_string(),
            "RoleNotFound: role \"nobody\" does not exist".to_string(),
        )]);
        let pools = [
            pool("train", Some("gpu")),
            pool("infer", Some("broken")),
            pool("cpu", None),
        ];
        let m = pool_classes(&pools, &ready, &why);
        assert_eq!(m.classes.keys().collect::<Vec<_>>(), ["train"]);
        assert_eq!(m.classes["train"].instance_profile, "nodes");
        assert_eq!(
            m.not_ready["infer"],
            "EC2NodeClass broken is not Ready: RoleNotFound: role \"nobody\" does not exist"
        );
        assert_eq!(m.not_ready["cpu"], "EC2NodeClass default does not exist");
    }
}
