//! Write fencing: only the lease holder writes. Leadership can end while a
//! round is in flight (the renew deadline passes by a timer in
//! [`super::leader`]); every write that starts after that is refused here, at
//! the two seams every effect goes through, whatever code path issued it:
//! - [`layer`]: a [`kube::Client`] whose service refuses every
//!   mutating request (anything but GET/HEAD/OPTIONS) while the flag is off;
//! - [`Fenced`]: a [`CloudProvider`] that refuses `launch`, `terminate`,
//!   `reboot` and `collect_unused_resources` while the flag is off, and forwards
//!   every other method (they only read). Every method of the trait is
//!   forwarded: a default left in place would silently answer for the
//!   provider (a test checks the list against the trait).
//!
//! Each refusal counts in `quartermaster_actions_dropped_not_leader`. The
//! leader election itself uses an unfenced client (it writes the Lease to
//! become leader).

use crate::cloud::{self, CloudProvider, Instance, NodeTemplate};
use crate::core::{ClaimRequest, Time};
use crate::metrics::Metrics;
use http::{Method, Request};
use kube::client::Body;
use std::sync::Arc;
use tokio::sync::watch;

/// The error a fenced kube request fails with (`kube::Error::Service`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write was attempted while this replica does not lead. Not
    /// retryable here: the new leader decides again.
    #[error("not the leader: refused {method} {path}")]
    NotLeader {
        /// The request's method.
        method: Method,
        /// The request's path.
        path: String,
    },
}

/// Whether a request changes state on the API server.
pub fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The fence as a `tower` filter predicate: passes reads always, writes
/// only while `leader` is `true`.
pub fn predicate(
    leader: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> impl FnMut(Request<Body>) -> Result<Request<Body>, Error> + Clone + Send + 'static {
    move |request: Request<Body>| {
        if is_write(request.method()) && !*leader.borrow() {
            metrics.actions_dropped.inc();
            let path = request.uri().path().to_string();
            tracing::warn!(method = %request.method(), %path, "not leader: write refused");
            return Err(Error::NotLeader {
                method: request.method().clone(),
                path,
            });
        }
        Ok(request)
    }
}

/// The fence as a layer for a kube client stack:
/// `ClientBuilder::new(service, ns).with_layer(&fence::layer(leader, metrics)).build()`
/// gives a client that refuses writes while `leader` is `false`.
pub fn layer(
    leader: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> tower::filter::FilterLayer<
    impl FnMut(Request<Body>) -> Result<Request<Body>, Error> + Clone + Send + 'static,
> {
    tower::filter::FilterLayer::new(predicate(leader, metrics))
}

/// A cloud whose writes (`launch`, `terminate`, `reboot`,
/// `collect_unused_resources`) are refused with [`cloud::Error::NotReady`] while this replica does not
/// lead; every other method is the inner cloud's.
pub struct Fenced<C> {
    inner: C,
    leader: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
}

impl<C> Fenced<C> {
    /// Fences `inner` with the leadership flag `leader`.
    pub fn new(inner: C, leader: watch::Receiver<bool>, metrics: Arc<Metrics>) -> Fenced<C> {
        Fenced {
            inner,
            leader,
            metrics,
        }
    }

    /// The fenced cloud (for reads and tests).
    pub fn inner(&self) -> &C {
        &self.inner
    }

    fn check(&self, claim: &str, what: &str) -> cloud::Result<()> {
        if *self.leader.borrow() {
            return Ok(());
        }
        self.metrics.actions_dropped.inc();
        tracing::warn!(%claim, what, "not leader: cloud write refused");
        Err(cloud::Error::NotReady {
            claim: claim.to_string(),
            reason: format!("not the leader: {what} refused"),
        })
    }
}

impl<C: CloudProvider + Send + Sync> CloudProvider for Fenced<C> {
    async fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> cloud::Result<Instance> {
        self.check(&claim.claim, "launch")?;
        self.inner.launch(claim, template, now).await
    }

    async fn terminate(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.check(claim, "terminate")?;
        self.inner.terminate(claim, now).await
    }

    async fn reboot(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.check(claim, "reboot")?;
        self.inner.reboot(claim, now).await
    }

    async fn terminate_instance(&self, instance: &Instance, now: Time) -> cloud::Result<()> {
        self.check(&instance.claim, "terminate")?;
        self.inner.terminate_instance(instance, now).await
    }

    async fn describe(&self, claim: &str) -> cloud::Result<Option<Instance>> {
        self.inner.describe(claim).await
    }

    async fn instances(&self) -> cloud::Result<Vec<Instance>> {
        self.inner.instances().await
    }

    async fn network_nodes(&self, claim: &str, instance: &Instance) -> cloud::Result<Vec<String>> {
        self.inner.network_nodes(claim, instance).await
    }

    fn pool_requirements(&self, nodepool: &str) -> Vec<crate::api::Requirement> {
        self.inner.pool_requirements(nodepool)
    }

    fn pool_problem(&self, nodepool: &str) -> Option<String> {
        self.inner.pool_problem(nodepool)
    }

    fn launch_stamp(
        &self,
        claim: &crate::api::NodeClaimSpec,
    ) -> Option<crate::core::drift::ClassStamp> {
        self.inner.launch_stamp(claim)
    }

    async fn collect_unused_resources(
        &self,
        now: Time,
        grace: chrono::TimeDelta,
    ) -> cloud::Result<(Vec<String>, Vec<cloud::Error>)> {
        self.check("unused resources", "garbage collection")?;
        self.inner.collect_unused_resources(now, grace).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CapacityType;
    use crate::core::drift::ClassStamp;
    use crate::core::OfferingKey;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A cloud that counts the writes reaching it and answers every method
    /// with something no trait default gives, so that a method `Fenced`
    /// leaves to its default shows.
    #[derive(Default)]
    struct Counting {
        writes: AtomicUsize,
    }

    fn instance() -> Instance {
        Instance {
            claim: "gpu-abc".into(),
            provider_id: "aws:///use1-az1/i-0abc".into(),
            offering: request().offering,
            price_per_hour: 0.4,
            launched_at: chrono::DateTime::UNIX_EPOCH,
            state: cloud::InstanceState::Running,
        }
    }

    impl CloudProvider for Counting {
        async fn launch(
            &self,
            _: &ClaimRequest,
            _: &NodeTemplate,
            _: Time,
        ) -> cloud::Result<Instance> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(instance())
        }
        async fn terminate(&self, _: &str, _: Time) -> cloud::Result<Instance> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(instance())
        }
        async fn reboot(&self, _: &str, _: Time) -> cloud::Result<Instance> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok(instance())
        }
        async fn describe(&self, _: &str) -> cloud::Result<Option<Instance>> {
            Ok(Some(instance()))
        }
        async fn instances(&self) -> cloud::Result<Vec<Instance>> {
            Ok(vec![instance()])
        }
        fn pool_requirements(&self, nodepool: &str) -> Vec<crate::api::Requirement> {
            vec![crate::api::Requirement::new(
                "pool",
                crate::api::Operator::In,
                &[nodepool],
            )]
        }
        fn launch_stamp(&self, claim: &crate::api::NodeClaimSpec) -> Option<ClassStamp> {
            Some(ClassStamp {
                hash: claim.node_pool.clone(),
                image: "ami-1".into(),
            })
        }
        fn pool_problem(&self, nodepool: &str) -> Option<String> {
            Some(format!("{nodepool} has no class"))
        }
        async fn collect_unused_resources(
            &self,
            _: Time,
            _: chrono::TimeDelta,
        ) -> cloud::Result<(Vec<String>, Vec<cloud::Error>)> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Ok((vec!["lt-1".into()], Vec::new()))
        }
    }

    fn request() -> ClaimRequest {
        ClaimRequest {
            claim: "gpu-abc".into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
            },
            price_per_hour: 0.4,
            pods: Vec::new(),
            prewarm_window: None,
            reservation: None,
        }
    }

    fn spec() -> crate::api::NodeClaimSpec {
        crate::api::NodeClaimSpec {
            node_pool: "gpu".into(),
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 0.4,
            resources: Default::default(),
            labels: Default::default(),
            taints: vec![],
            startup_taints: vec![],
            termination_grace_period: None,
            expire_after: None,
        }
    }

    /// A fenced [`Counting`] cloud and the sender of its leadership flag.
    fn fenced(leading: bool) -> (Fenced<Counting>, watch::Sender<bool>, Arc<Metrics>) {
        let (tx, rx) = watch::channel(leading);
        let metrics = Arc::new(Metrics::unregistered());
        (
            Fenced::new(Counting::default(), rx, metrics.clone()),
            tx,
            metrics,
        )
    }

    #[tokio::test]
    async fn cloud_writes_pass_while_leading_and_are_refused_after() {
        let (cloud, tx, metrics) = fenced(true);
        let now = chrono::Utc::now();
        let template = NodeTemplate::default();
        assert_eq!(
            cloud.launch(&request(), &template, now).await.unwrap(),
            instance()
        );
        assert_eq!(cloud.inner().writes.load(Ordering::SeqCst), 1);

        tx.send_replace(false);
        let launch = cloud.launch(&request(), &template, now).await;
        let terminate = cloud.terminate("gpu-abc", now).await;
        let reboot = cloud.reboot("gpu-abc", now).await;
        let collect = cloud
            .collect_unused_resources(now, chrono::TimeDelta::zero())
            .await;
        for refused in [
            launch.map(|_| ()),
            terminate.map(|_| ()),
            reboot.map(|_| ()),
            collect.map(|_| ()),
        ] {
            let err = refused.expect_err("refused");
            assert!(err.to_string().contains("not the leader"), "{err}");
        }
        assert_eq!(
            cloud.inner().writes.load(Ordering::SeqCst),
            1,
            "no write reached the cloud"
        );
        assert_eq!(metrics.actions_dropped.get(), 4);
        assert_eq!(
            cloud.describe("gpu-abc").await.unwrap(),
            Some(instance()),
            "reads pass"
        );
    }

    #[tokio::test]
    async fn terminate_reaches_the_inner_cloud_while_leading() {
        let (cloud, _tx, _) = fenced(true);
        let done = cloud.terminate("gpu-abc", chrono::Utc::now()).await;
        assert_eq!(done.unwrap(), instance());
        assert_eq!(cloud.inner().writes.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn describe_and_instances_are_the_inner_clouds_even_when_not_leading() {
        let (cloud, _tx, _) = fenced(false);
        assert_eq!(cloud.describe("gpu-abc").await.unwrap(), Some(instance()));
        assert_eq!(cloud.instances().await.unwrap(), [instance()]);
    }

    #[test]
    fn pool_requirements_are_the_inner_clouds() {
        let (cloud, _tx, _) = fenced(false);
        assert_eq!(
            cloud.pool_requirements("gpu"),
            cloud.inner().pool_requirements("gpu")
        );
        assert_eq!(cloud.pool_requirements("gpu").len(), 1);
    }

    #[test]
    fn pool_problem_is_the_inner_clouds() {
        let (cloud, _tx, _) = fenced(false);
        assert_eq!(
            cloud.pool_problem("gpu").as_deref(),
            Some("gpu has no class")
        );
    }

    #[test]
    fn launch_stamp_is_the_inner_clouds_so_drift_is_detected_behind_the_fence() {
        let (cloud, _tx, _) = fenced(false);
        assert_eq!(
            cloud.launch_stamp(&spec()),
            Some(ClassStamp {
                hash: "gpu".into(),
                image: "ami-1".into()
            })
        );
    }

    #[tokio::test]
    async fn unused_resources_are_collected_by_the_inner_cloud_while_leading() {
        let (cloud, _tx, _) = fenced(true);
        let (deleted, failed) = cloud
            .collect_unused_resources(chrono::Utc::now(), chrono::TimeDelta::zero())
            .await
            .unwrap();
        assert_eq!(deleted, ["lt-1"]);
        assert!(failed.is_empty());
    }

    /// The names of the `fn`s in the block of `source` that opens with
    /// `header` (up to its closing brace at the start of a line).
    fn methods_in(source: &str, header: &str) -> std::collections::BTreeSet<String> {
        let start = source.find(header).expect("the block is there");
        let block = &source[start..];
        let end = block.find("\n}").expect("the block closes");
        block[..end]
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                let l = l.strip_prefix("async ").unwrap_or(l);
                let name = l.strip_prefix("fn ")?;
                Some(name[..name.find(['(', '<'])?].to_string())
            })
            .collect()
    }

    #[test]
    fn fenced_implements_every_method_of_the_cloud_provider_trait() {
        let trait_methods =
            methods_in(include_str!("../cloud/mod.rs"), "pub trait CloudProvider {");
        let forwarded = methods_in(
            include_str!("fence.rs"),
            "impl<C: CloudProvider + Send + Sync> CloudProvider for Fenced<C> {",
        );
        assert!(trait_methods.len() >= 8, "{trait_methods:?}");
        assert_eq!(
            forwarded, trait_methods,
            "a CloudProvider method Fenced leaves to the trait's default answers for every provider in production"
        );
    }
}
