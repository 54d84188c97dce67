//! GPU use against a real Prometheus (Debian's package, on loopback)
//! scraping a fixture DCGM exporter of ours every second
//! (`tests/support/prometheus.rs`):
//! - `quartermaster report gpu` names the fixture's idle and under-used
//!   pods with their right size and saving a month, and its idle node;
//! - the controller's GPU use metrics (per pool, per workload) match the
//!   fixture's series, under-used pods get an Event, and the series the
//!   fixture gets wrong (no Hostname, a utilisation of 250%) are left out
//!   and counted.

use crate::support;

use quartermaster::catalog::Catalog;
use quartermaster::controller::gpu_use::{spawn_reader, GpuUseSettings, GpuUseState};
use quartermaster::controller::snapshot::WorldParts;
use quartermaster::core::{ClaimRequest, ManagedNode, OfferingKey, World};
use quartermaster::metrics::gpu_use::{PoolGpuLabels, ReadLabels, WorkloadGpuLabels};
use quartermaster::metrics::Metrics;
use quartermaster::plan::rightsize::HOURS_PER_MONTH;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::api_server::{echo, Recorder};
use support::prometheus::{series, unique, Exporter, Prometheus};

const A10G: &str = "NVIDIA A10G";
const A100: &str = "NVIDIA A100-SXM4-80GB";

/// The fixture's series, its node names starting with `p`:
/// - `{p}-a`: one A10G held by `{ns}/notebook-0`, 2% busy, 1 GiB at peak,
///   its last XID 13 (the application's fault, not the GPU's);
/// - `{p}-b`: eight 80 GB A100s, one held by a serving pod 8% busy with a
///   9 GiB peak, seven by a training pod 90% busy, GPU 3 of them with XID
///   79 (fallen off the bus: fatal, repair replaces the node);
/// - a series without `Hostname`, and a GPU of `{p}-c` 250% busy.
fn fixture(p: &str, ns: &str) -> String {
    let mut s = String::new();
    let a = format!("{p}-a");
    let b = format!("{p}-b");
    let c = format!("{p}-c");
    let notebook = format!("{ns}/notebook-0");
    let serve = format!("{ns}/llm-serve-7d9f8b6c5d-x2k4q");
    let train = format!("{ns}/train-0");
    let gpu = |s: &mut String,
               host: &str,
               i: u32,
               model: &str,
               pod: &str,
               util: f64,
               used: f64,
               total: f64,
               xid: f64| {
        s.push_str(&series(
            "DCGM_FI_DEV_GPU_UTIL",
            host,
            i,
            model,
            Some(pod),
            &[],
            util,
        ));
        s.push_str(&series(
            "DCGM_FI_DEV_FB_USED",
            host,
            i,
            model,
            Some(pod),
            &[],
            used,
        ));
        s.push_str(&series(
            "DCGM_FI_DEV_FB_FREE",
            host,
            i,
            model,
            Some(pod),
            &[],
            total - used,
        ));
        s.push_str(&series(
            "DCGM_FI_DEV_XID_ERRORS",
            host,
            i,
            model,
            Some(pod),
            &[],
            xid,
        ));
    };
    gpu(&mut s, &a, 0, A10G, &notebook, 2.0, 1024.0, 23028.0, 13.0);
    gpu(&mut s, &b, 0, A100, &serve, 8.0, 9216.0, 81920.0, 0.0);
    for i in 1..8 {
        let xid = if i == 3 { 79.0 } else { 0.0 };
        gpu(&mut s, &b, i, A100, &train, 90.0, 60000.0, 81920.0, xid);
    }
    s.push_str(&format!(
        "DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",modelName=\"{A10G}\",namespace=\"{ns}\",pod=\"lost-0\"}} 50\n"
    ));
    s.push_str(&series(
        "DCGM_FI_DEV_GPU_UTIL",
        &c,
        0,
        A10G,
        None,
        &[],
        250.0,
    ));
    s
}

/// Starts the fixture for `p` and waits until Prometheus has scraped its
/// series twice.
fn scraped(prom: &Prometheus, p: &str, ns: &str) -> Exporter {
    let exporter = Exporter::start(prom, fixture(p, ns));
    let twice = |selector: String, n| {
        prom.wait_for_series(&format!("count_over_time({selector}[1m]) >= 2"), n);
    };
    twice(format!("DCGM_FI_DEV_FB_FREE{{Hostname=~\"{p}-.*\"}}"), 9);
    twice(format!("DCGM_FI_DEV_GPU_UTIL{{namespace=\"{ns}\"}}"), 10);
    exporter
}

fn catalog() -> Catalog {
    Catalog::embedded().unwrap()
}

/// USD a month of one GPU of `instance_type` on demand in us-east-1.
fn gpu_month(c: &Catalog, instance_type: &str) -> f64 {
    let gpus = c
        .instance_type(instance_type)
        .unwrap()
        .accelerator
        .as_ref()
        .unwrap()
        .count;
    c.on_demand_price("us-east-1", instance_type).unwrap() / f64::from(gpus) * HOURS_PER_MONTH
}

#[test]
fn report_gpu_names_the_idle_and_underused_pods_with_their_right_size_and_saving() {
    let prom = Prometheus::start();
    let (p, ns) = (unique("rep"), unique("ns"));
    let _exporter = scraped(&prom, &p, &ns);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .args([
            "report",
            "gpu",
            "--prometheus-url",
            prom.url(),
            "--window",
            "1m",
            "--output",
            "json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mine = |list: &str| -> Vec<Value> {
        report[list]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["node"].as_str().unwrap().starts_with(&p))
            .cloned()
            .collect()
    };
    let pods = mine("pods");
    let names: Vec<&str> = pods.iter().map(|p| p["pod"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            format!("{ns}/llm-serve-7d9f8b6c5d-x2k4q"),
            format!("{ns}/notebook-0")
        ],
        "the largest saving first; the busy trainer is not listed"
    );
    let c = catalog();
    // The serving pod: 8% of an 80 GB A100 (a p4de, the type with eight of
    // them), 9 GiB at peak: MIG 1g.20gb, a seventh of the GPU.
    let serve = &pods[0];
    assert_eq!(serve["instance_type"], "p4de.24xlarge");
    assert_eq!(serve["right_size"], "MIG 1g.20gb (nvidia.com/mig-1g.20gb)");
    let month = gpu_month(&c, "p4de.24xlarge");
    assert!((serve["monthly_now"].as_f64().unwrap() - month).abs() < 0.01);
    assert!((serve["monthly_saving"].as_f64().unwrap() - month * 6.0 / 7.0).abs() < 0.01);
    assert!((serve["busy"].as_f64().unwrap() - 0.08).abs() < 1e-9);
    // The notebook: 2% of an A10G with 1 GiB: an eighth of it, time-sliced.
    let notebook = &pods[1];
    assert_eq!(notebook["instance_type"], "g5.xlarge");
    assert!(notebook["right_size"]
        .as_str()
        .unwrap()
        .starts_with("1/8 of a GPU"));
    let month = gpu_month(&c, "g5.xlarge");
    assert!((notebook["monthly_saving"].as_f64().unwrap() - month * 7.0 / 8.0).abs() < 0.01);
    // The notebook's node is idle; the A100 node is not.
    let idle = mine("idle_nodes");
    assert_eq!(idle.len(), 1, "{idle:?}");
    assert_eq!(idle[0]["node"], format!("{p}-a"));
    assert!((idle[0]["monthly_cost"].as_f64().unwrap() - month).abs() < 0.01);
    // The series the fixture got wrong were left out, and said so.
    assert!(String::from_utf8_lossy(&out.stderr).contains("left out"));
}

/// A ready g5 node of pool `gpu` named `name` (its claim too).
fn node(c: &Catalog, pools: &[quartermaster::api::NodePool], name: &str) -> ManagedNode {
    let world = World {
        nodes_revision: 0,
        catalog: c,
        region: "us-east-1",
        pools,
        pending: &[],
        nodes: &[],
        pdbs: &[],
    };
    let req = ClaimRequest {
        cluster_placement: false,
        claim: name.into(),
        nodepool: "gpu".into(),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az4".into(),
            capacity_type: quartermaster::catalog::CapacityType::OnDemand,
        },
        price_per_hour: 1.0,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let mut n = ManagedNode::launched(&req, &world, chrono::Utc::now()).expect("a g5 node");
    n.state.name = name.into();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_gpu_use_metrics_and_events_match_the_fixtures_series() {
    let prom = Prometheus::start();
    let (p, ns) = (unique("ctl"), unique("ns"));
    let _exporter = tokio::task::block_in_place(|| scraped(&prom, &p, &ns));
    let c = catalog();
    let pools = [quartermaster::api::NodePool::new("gpu", Default::default())];
    let nodes = vec![
        node(&c, &pools, &format!("{p}-a")),
        node(&c, &pools, &format!("{p}-b")),
    ];
    let settings = GpuUseSettings {
        url: prom.url().to_string(),
        window: Duration::from_secs(60),
        interval: Duration::from_secs(1),
        ..GpuUseSettings::default()
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let readings = spawn_reader(&settings, shutdown.clone()).unwrap();
    let mut state = GpuUseState::new(settings, readings.clone());
    let metrics = Metrics::unregistered();
    let posted: Arc<Mutex<Vec<Value>>> = Arc::default();
    let seen = posted.clone();
    let (client, _server) = Recorder::start(move |served, body| {
        if served.method == "POST" && served.path.ends_with("/events") {
            seen.lock().unwrap().push(body.clone());
        }
        echo(body)
    });
    let events = quartermaster::controller::events::Events::new(client, None);
    let mut readings = readings;
    readings.changed().await.unwrap();
    let mut parts = WorldParts {
        pools: pools.to_vec(),
        nodes,
        ..WorldParts::default()
    };
    state
        .round(&mut parts, &metrics, Some(&events), chrono::Utc::now())
        .await;
    shutdown.cancel();

    let m = &metrics.gpu_use;
    assert_eq!(m.read_ok.get(), 1);
    let gpu = PoolGpuLabels {
        nodepool: "gpu".into(),
    };
    // Nine GPUs of the pool's two nodes: 2%, 8% and seven at 90%.
    assert_eq!(m.measured.get_or_create(&gpu).get(), 9);
    let want = (0.02 + 0.08 + 7.0 * 0.9) / 9.0;
    let got = m.utilization.get_or_create(&gpu).get();
    assert!((got - want).abs() < 1e-9, "{got} != {want}");
    let workload = |w: &str| {
        m.workload_utilization
            .get_or_create(&WorkloadGpuLabels {
                namespace: ns.clone(),
                workload: w.into(),
            })
            .get()
    };
    assert!((workload("llm-serve") - 0.08).abs() < 1e-9);
    assert!((workload("notebook") - 0.02).abs() < 1e-9);
    assert!((workload("train") - 0.9).abs() < 1e-9);
    // The notebook's node is idle: its idle-since is in the world.
    assert!(parts.nodes[0].gpu_idle_since.is_some());
    assert!(parts.nodes[1].gpu_idle_since.is_none());
    // XID 79 on the A100 node is a repair signal as the node monitoring
    // agent would set it; XID 13 on the A10G node is the application's.
    let signals = |n: &ManagedNode| {
        n.health
            .signals
            .iter()
            .map(|s| (s.type_.clone(), s.status.clone(), s.reason.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(signals(&parts.nodes[0]), []);
    assert_eq!(
        signals(&parts.nodes[1]),
        [(
            "AcceleratedHardwareReady".to_string(),
            "False".to_string(),
            "NvidiaXID79Error".to_string()
        )]
    );
    // An Event on each under-used pod of ours, none on the trainer.
    let mut regarding: Vec<String> = posted
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "GPUUnderused" && e["regarding"]["namespace"] == json!(ns))
        .map(|e| e["regarding"]["name"].as_str().unwrap().to_string())
        .collect();
    regarding.sort();
    assert_eq!(regarding, ["llm-serve-7d9f8b6c5d-x2k4q", "notebook-0"]);
    // The bad series were left out and counted.
    for reason in ["missing_labels", "absurd"] {
        let n = m
            .series_dropped
            .get_or_create(&ReadLabels {
                reason: reason.into(),
            })
            .get();
        assert!(n >= 1, "{reason}: {n}");
    }
}
