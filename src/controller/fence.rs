//! Write fencing: only the lease holder writes. Leadership can end while a
//! round is in flight (the renew deadline passes by a timer in
//! [`super::leader`]); every write that starts after that is refused here, at
//! the two seams every effect goes through, whatever code path issued it:
//! - [`layer`]: a [`kube::Client`] whose service refuses every
//!   mutating request (anything but GET/HEAD/OPTIONS) while the flag is off;
//! - [`Fenced`]: a [`CloudProvider`] that refuses `launch`, `terminate`,
//!   `reboot` and resource collection while the flag is off (`describe`,
//!   `instances` and the launch stamps only read), and forwards every
//!   other method to the cloud it fences.
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

/// A cloud whose writes (`launch`, `terminate`, `reboot`, resource
/// collection) are refused with
/// [`cloud::Error::NotReady`] while this replica does not lead.
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

    async fn describe(&self, claim: &str) -> cloud::Result<Option<Instance>> {
        self.inner.describe(claim).await
    }

    async fn instances(&self) -> cloud::Result<Vec<Instance>> {
        self.inner.instances().await
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
        self.check("", "resource collection")?;
        self.inner.collect_unused_resources(now, grace).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CapacityType;
    use crate::core::OfferingKey;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A cloud that counts the writes reaching it.
    #[derive(Default)]
    struct Counting {
        writes: AtomicUsize,
    }

    impl CloudProvider for Counting {
        async fn launch(
            &self,
            claim: &ClaimRequest,
            _: &NodeTemplate,
            _: Time,
        ) -> cloud::Result<Instance> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Err(cloud::Error::NotFound {
                claim: claim.claim.clone(),
            })
        }
        async fn terminate(&self, claim: &str, _: Time) -> cloud::Result<Instance> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Err(cloud::Error::NotFound {
                claim: claim.into(),
            })
        }
        async fn reboot(&self, claim: &str, _: Time) -> cloud::Result<Instance> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Err(cloud::Error::NotFound {
                claim: claim.into(),
            })
        }
        async fn describe(&self, _: &str) -> cloud::Result<Option<Instance>> {
            Ok(None)
        }
        async fn instances(&self) -> cloud::Result<Vec<Instance>> {
            Ok(Vec::new())
        }
        fn launch_stamp(
            &self,
            _: &crate::api::NodeClaimSpec,
        ) -> Option<crate::core::drift::ClassStamp> {
            Some(crate::core::drift::ClassStamp {
                hash: "class".into(),
                image: "ami-1".into(),
            })
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

    #[tokio::test]
    async fn cloud_writes_pass_while_leading_and_are_refused_after() {
        let (tx, rx) = watch::channel(true);
        let metrics = Arc::new(Metrics::unregistered());
        let cloud = Fenced::new(Counting::default(), rx, metrics.clone());
        let now = chrono::Utc::now();
        let template = NodeTemplate::default();
        let _ = cloud.launch(&request(), &template, now).await;
        assert_eq!(cloud.inner().writes.load(Ordering::SeqCst), 1);

        // Every method reaches the cloud it fences while leading: drift
        // reads the launch stamps, garbage collection collects.
        let spec: crate::api::NodeClaimSpec = serde_json::from_value(
            serde_json::json!({"nodePool": "gpu", "instanceType": "g5.xlarge",
                "zone": "use1-az1", "capacityType": "spot", "pricePerHour": 0.4}),
        )
        .unwrap();
        assert_eq!(cloud.launch_stamp(&spec).unwrap().image, "ami-1");
        let grace = chrono::TimeDelta::minutes(5);
        assert_eq!(
            cloud.collect_unused_resources(now, grace).await.unwrap().0,
            ["lt-1"]
        );
        assert_eq!(cloud.inner().writes.load(Ordering::SeqCst), 2);

        tx.send_replace(false);
        let launch = cloud.launch(&request(), &template, now).await;
        let terminate = cloud.terminate("gpu-abc", now).await;
        let reboot = cloud.reboot("gpu-abc", now).await;
        let collect = cloud.collect_unused_resources(now, grace).await;
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
            2,
            "no write reached the cloud"
        );
        assert_eq!(metrics.actions_dropped.get(), 4);
        assert!(
            cloud.describe("gpu-abc").await.unwrap().is_none(),
            "reads pass"
        );
    }
}
