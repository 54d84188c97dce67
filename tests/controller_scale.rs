//! The controller binary against the loopback fake API server that the
//! `controller_scale` benchmark uses, at a size CI can afford: it lists and
//! watches about a thousand objects (the pods in pages, as the watcher asks
//! for 500 at a time), and a burst of pending GPU pods gets
//! NodeClaims (each pod's `Nominated` Event names a claim the server
//! created) holding at least the GPUs the pods ask for. This keeps the
//! benchmark's server and workload honest.

use crate::support;

use std::path::Path;
use std::time::Duration;
use support::scale::{self, Size};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_launches_node_claims_for_a_burst_of_pending_gpu_pods() {
    let size = Size {
        nodes: 20,
        pods: 1200,
        burst: 25,
    };
    let measured = scale::run(
        Path::new(env!("CARGO_BIN_EXE_quartermaster")),
        size,
        &["--batch-idle", "500ms"],
        // How long to wait for the burst's claims before calling it lost:
        // a give-up point, not a latency target (other tests of the suite
        // share the two cores with this debug build).
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(measured.uncovered, 0, "{measured:?}");
    assert_eq!(measured.latencies.len(), size.burst);
    assert!(measured.claims > 0, "{measured:?}");
    let asked: u64 = (0..size.burst)
        .map(|i| {
            scale::pending_pod(i)["spec"]["containers"][0]["resources"]["requests"]
                ["nvidia.com/gpu"]
                .as_str()
                .and_then(|g| g.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    assert!(
        measured.claimed_gpus >= asked,
        "claims hold {} GPUs for {asked} asked: {measured:?}",
        measured.claimed_gpus
    );
}
