//! Kubernetes API faults through a claim's life: the claim's creation
//! answered 500, a status write 409 (stale), the node's patches 500, the
//! checkpoint annotation 500, evictions 429 (a PDB), the claim's deletion
//! 503; and a watch answered 410 Gone. The controller must get through
//! all of it: every failed action is issued again until it is done.

use super::harness::{interrupted_life, Cloud, Harness};
use crate::support::fake_api::{FakeApi, Fault};
use http::Method;

#[tokio::test]
async fn a_claims_life_with_a_notice_gets_through_409_429_and_5xx_answers() {
    let api = FakeApi::new();
    {
        let mut s = api.state.lock().unwrap();
        s.faults = vec![
            Fault::new(Method::POST, "/nodeclaims", 500, 1),
            Fault::new(Method::PATCH, "/nodeclaims/", 409, 1),
            Fault::new(Method::PATCH, "/api/v1/nodes/", 500, 2),
            Fault::new(Method::PATCH, "/api/v1/namespaces/ml/pods/", 500, 1),
            Fault::new(Method::POST, "/eviction", 429, 2),
            Fault::new(Method::DELETE, "/nodeclaims/", 503, 1),
            Fault::new(Method::PATCH, "/nodepools/", 502, 1),
        ];
    }
    let cloud = Cloud::new(&api);
    let mut h = Harness::new(api, cloud);
    assert!(
        interrupted_life(&mut h, 150).await,
        "the life did not complete: {}",
        h.dump()
    );
    h.check_invariants(1, "API faults");
    let s = h.api.state.lock().unwrap();
    let left: Vec<_> = s.faults.iter().filter(|f| f.times > 0).collect();
    assert!(left.is_empty(), "faults never reached: {left:?}");
    println!("API faults injected, by status code: {:?}", s.injected);
    // The blocked evictions were tried again, and the pod evicted once.
    assert_eq!(
        s.evictions.iter().filter(|p| *p == "ml/train-0").count(),
        1,
        "{:?}",
        s.evictions
    );
}

#[tokio::test]
async fn watches_answered_410_gone_list_again_and_the_loop_goes_on() {
    use crate::support::fake_api::wall_clock;
    use crate::support::fake_http::HttpApi;
    use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
    use quartermaster::controller::kube_api::KubeApi;
    use quartermaster::controller::run::{run_watching, Context};
    use quartermaster::metrics::Metrics;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::sync::{mpsc, watch};
    use tokio_util::sync::CancellationToken;

    let api = FakeApi::new();
    {
        let mut s = api.state.lock().unwrap();
        s.clock = wall_clock;
        s.put(super::harness::POOLS, super::harness::pool());
        s.put(super::harness::PODS, super::harness::pending_pod("train-0"));
        // Every watch of pods and of claims is answered 410 Gone at first,
        // as after a watch cache compaction.
        for (path, times) in [("/pods", 3), ("/nodeclaims", 2)] {
            s.faults.push(Fault {
                method: Some(Method::GET),
                path: path.into(),
                watch: true,
                code: 410,
                skip: 0,
                times,
            });
        }
    }
    let server = HttpApi::start(api.clone()).await;
    let config = kube::Config::new(server.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let (_leader_tx, leader) = watch::channel(true);
    let (_catalog_tx, catalog) = watch::channel(super::harness::catalog());
    let (_notices_tx, notices) = mpsc::channel(8);
    let cloud = SimulatedCloud::new(
        super::harness::catalog(),
        SimulatedCloudConfig::new(7, super::harness::REGION, chrono::Utc::now()),
    )
    .unwrap();
    let ctx = Context {
        api: KubeApi::new(client.clone()),
        cloud: Arc::new(Mutex::new(cloud)),
        metrics: Arc::new(Metrics::unregistered()),
        catalog,
        leader,
        ready: Arc::new(AtomicBool::new(false)),
        notices,
        notice_acks: Default::default(),
        simulated_nodes: true,
    };
    let mut settings = super::harness::settings();
    settings.core.batch_idle = Duration::from_millis(200);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run_watching(ctx, settings, client, shutdown.clone()));
    let mut claimed = false;
    for _ in 0..600 {
        claimed = !api
            .state
            .lock()
            .unwrap()
            .list(super::harness::CLAIMS)
            .is_empty();
        let injected = api.state.lock().unwrap().injected.get(&410).copied();
        if claimed && injected == Some(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let injected = api.state.lock().unwrap().injected.clone();
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    assert_eq!(injected.get(&410), Some(&5), "{injected:?}");
    assert!(
        claimed,
        "the pending pod got no claim after its watch was Gone"
    );
    println!("watch faults injected, by status code: {injected:?}");
}
