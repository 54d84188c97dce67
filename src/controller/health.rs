//! The controller's HTTP endpoints (axum): `/metrics` in OpenMetrics text
//! on the metrics address, `/healthz` (the loop makes progress: it finished
//! a round or woke up within the stall timeout, see [`Liveness`]) and
//! `/readyz` (every reflector has synced) on the health address. The two addresses
//! may be the same, in which case one listener serves all three paths.
//! Every replica serves them, leader or not: a standby is ready to take over.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The content type of `/metrics` (OpenMetrics 1.0 text).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Errors of the HTTP endpoints.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound (in use, not local, no permission);
    /// not retryable.
    #[error("failed to listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A server stopped with an I/O error.
    #[error("the HTTP server on {addr} failed: {source}")]
    Serve {
        /// The address it listened on.
        addr: SocketAddr,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The routes of the metrics address.
pub fn metrics_router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry)
}

/// What `/healthz` checks: the loop made progress within `stall_after`. A
/// loop stuck in a round (a planner past its limits, a hung call) fails
/// the liveness probe, and the kubelet restarts the controller.
#[derive(Clone, Debug)]
pub struct Liveness {
    /// The loop's progress.
    pub progress: crate::metrics::Progress,
    /// Longest time without progress that is still healthy; longer than
    /// the loop's tick, which it may sleep when nothing happens.
    pub stall_after: Duration,
}

/// What the health routes read.
#[derive(Clone)]
struct Probes {
    ready: Arc<AtomicBool>,
    liveness: Liveness,
}

/// The routes of the health address.
pub fn health_router(ready: Arc<AtomicBool>, liveness: Liveness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Probes { ready, liveness })
}

async fn healthz(State(probes): State<Probes>) -> axum::response::Response {
    liveness_response(&probes.liveness).into_response()
}

/// `/healthz`'s answer: 200 while the loop made progress within the stall
/// timeout, 503 saying for how long it has not.
pub fn liveness_response(liveness: &Liveness) -> (StatusCode, String) {
    let since = liveness.progress.since();
    if since <= liveness.stall_after {
        (StatusCode::OK, "ok\n".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the controller loop has made no progress for {}s (stall timeout {}s)\n",
                since.as_secs(),
                liveness.stall_after.as_secs()
            ),
        )
    }
}

async fn metrics(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        crate::metrics::encode(&registry),
    )
}

async fn readyz(State(probes): State<Probes>) -> impl IntoResponse {
    if probes.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the caches to sync\n",
        )
    }
}

/// The running endpoints: where they listen, and their tasks.
pub struct Endpoints {
    metrics_addr: SocketAddr,
    health_addr: SocketAddr,
    tasks: JoinSet<Result<()>>,
}

impl Endpoints {
    /// Binds the metrics and health addresses (one listener when they are
    /// equal and name a fixed port) and serves until `shutdown` is
    /// cancelled.
    ///
    /// # Errors
    /// [`Error::Bind`] when an address cannot be bound.
    pub async fn start(
        metrics_addr: SocketAddr,
        health_addr: SocketAddr,
        registry: Arc<Registry>,
        ready: Arc<AtomicBool>,
        liveness: Liveness,
        shutdown: CancellationToken,
    ) -> Result<Endpoints> {
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { addr, source })
        };
        let mut tasks = JoinSet::new();
        let metrics_routes = metrics_router(registry);
        let health_routes = health_router(ready, liveness);
        let (metrics_local, health_local) =
            if metrics_addr == health_addr && metrics_addr.port() != 0 {
                let listener = bind(metrics_addr).await?;
                let local = local_addr(&listener, metrics_addr)?;
                tasks.spawn(serve(
                    listener,
                    local,
                    metrics_routes.merge(health_routes),
                    shutdown,
                ));
                (local, local)
            } else {
                let metrics_listener = bind(metrics_addr).await?;
                let health_listener = bind(health_addr).await?;
                let m = local_addr(&metrics_listener, metrics_addr)?;
                let h = local_addr(&health_listener, health_addr)?;
                tasks.spawn(serve(metrics_listener, m, metrics_routes, shutdown.clone()));
                tasks.spawn(serve(health_listener, h, health_routes, shutdown));
                (m, h)
            };
        tracing::info!(metrics = %metrics_local, health = %health_local, "serving metrics and health");
        Ok(Endpoints {
            metrics_addr: metrics_local,
            health_addr: health_local,
            tasks,
        })
    }

    /// Where `/metrics` is served (the bound port when 0 was asked for).
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Where `/healthz` and `/readyz` are served.
    pub fn health_addr(&self) -> SocketAddr {
        self.health_addr
    }

    /// Waits for the servers to stop (after the shutdown token).
    ///
    /// # Errors
    /// The first server that failed.
    pub async fn join(mut self) -> Result<()> {
        while let Some(done) = self.tasks.join_next().await {
            match done {
                Ok(result) => result?,
                Err(e) => tracing::error!(error = %e, "an HTTP server task failed"),
            }
        }
        Ok(())
    }
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr> {
    listener
        .local_addr()
        .map_err(|source| Error::Bind { addr, source })
}

async fn serve(
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
    shutdown: CancellationToken,
) -> Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(|source| Error::Serve { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn liveness(metrics: &Metrics) -> Liveness {
        Liveness {
            progress: metrics.progress.clone(),
            stall_after: Duration::from_secs(120),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_once_the_loop_made_no_progress_for_the_stall_timeout() {
        let live = liveness(&Metrics::unregistered());
        assert_eq!(liveness_response(&live).0, StatusCode::OK);
        tokio::time::advance(Duration::from_secs(100)).await;
        assert_eq!(liveness_response(&live).0, StatusCode::OK);
        // A round that hangs: no beat for longer than the stall timeout.
        tokio::time::advance(Duration::from_secs(21)).await;
        let (code, body) = liveness_response(&live);
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("no progress for 121s"), "{body}");
        // The loop moves again.
        live.progress.beat();
        assert_eq!(liveness_response(&live).0, StatusCode::OK);
    }

    /// A plain HTTP/1.1 GET: the status code, the content type and the body.
    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("a response head");
        let code = head.split(' ').nth(1).unwrap().parse().unwrap();
        let content_type = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_default();
        (code, content_type, body.to_string())
    }

    async fn start(
        metrics_addr: &str,
        health_addr: &str,
    ) -> (Endpoints, Arc<Metrics>, Arc<AtomicBool>, CancellationToken) {
        let mut registry = Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        let ready = Arc::new(AtomicBool::new(false));
        let shutdown = CancellationToken::new();
        let endpoints = Endpoints::start(
            metrics_addr.parse().unwrap(),
            health_addr.parse().unwrap(),
            Arc::new(registry),
            ready.clone(),
            liveness(&metrics),
            shutdown.clone(),
        )
        .await
        .unwrap();
        (endpoints, metrics, ready, shutdown)
    }

    #[tokio::test]
    async fn readyz_turns_200_once_the_loop_is_ready_and_metrics_are_openmetrics() {
        let (endpoints, metrics, ready, shutdown) = start("127.0.0.1:0", "127.0.0.1:0").await;
        let (m, h) = (endpoints.metrics_addr(), endpoints.health_addr());
        assert_ne!(m, h, "separate listeners");

        assert_eq!(get(h, "/healthz").await.0, 200);
        let (code, _, body) = get(h, "/readyz").await;
        assert_eq!(code, 503, "{body}");
        ready.store(true, Ordering::Release);
        assert_eq!(get(h, "/readyz").await.0, 200);

        metrics.pending_pods.set(7);
        metrics.leader.set(1);
        let (code, content_type, body) = get(m, "/metrics").await;
        assert_eq!(code, 200);
        assert_eq!(content_type, OPENMETRICS_CONTENT_TYPE);
        assert!(body.contains("quartermaster_pending_pods 7\n"), "{body}");
        assert!(body.contains("quartermaster_leader 1\n"), "{body}");
        assert!(body.ends_with("# EOF\n"));

        // Each address serves only its own paths.
        assert_eq!(get(h, "/metrics").await.0, 404);
        assert_eq!(get(m, "/readyz").await.0, 404);

        shutdown.cancel();
        endpoints.join().await.unwrap();
        assert!(tokio::net::TcpStream::connect(h).await.is_err(), "stopped");
    }

    #[tokio::test]
    async fn one_address_serves_metrics_and_health_together() {
        // Find a free port, then ask for it twice.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let (endpoints, _, _, shutdown) = start(&addr, &addr).await;
        assert_eq!(endpoints.metrics_addr(), endpoints.health_addr());
        let a = endpoints.metrics_addr();
        assert_eq!(get(a, "/metrics").await.0, 200);
        assert_eq!(get(a, "/healthz").await.0, 200);
        assert_eq!(get(a, "/readyz").await.0, 503);
        shutdown.cancel();
        endpoints.join().await.unwrap();
    }

    #[tokio::test]
    async fn an_address_in_use_is_a_clear_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let err = Endpoints::start(
            addr,
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Registry::default()),
            Arc::new(AtomicBool::new(false)),
            liveness(&Metrics::unregistered()),
            CancellationToken::new(),
        )
        .await
        .err()
        .expect("an error")
        .to_string();
        assert!(err.contains(&addr.to_string()), "{err}");
    }

    /// Every series name in a dashboard query (`quartermaster_...`).
    fn queried_series(board: &serde_json::Value, out: &mut Vec<String>) {
        match board {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr" | "definition", serde_json::Value::String(q)) => {
                            let mut rest = q.as_str();
                            while let Some(at) = rest.find("quartermaster_") {
                                let name: String = rest[at..]
                                    .chars()
                                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                                    .collect();
                                rest = &rest[at + name.len()..];
                                out.push(name);
                            }
                        }
                        _ => queried_series(value, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| queried_series(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_dashboard_queries_only_served_metrics_and_shows_every_one() {
        let text = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/grafana/quartermaster.json"
        ));
        let board: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
        let mut queried = Vec::new();
        queried_series(&board, &mut queried);

        // The series /metrics can serve, from the families' TYPE lines.
        // Label families print nothing until they have a child: give each one.
        use crate::metrics::*;
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        let node = NodeLabels {
            nodepool: "p".into(),
            instance_type: "t".into(),
            capacity_type: "spot".into(),
        };
        let pool = PoolLabels {
            nodepool: "p".into(),
        };
        m.nodes.get_or_create(&node).set(1);
        m.gpus.get_or_create(&node).set(1);
        m.cost_per_hour.get_or_create(&pool).set(1.0);
        m.prewarm_nodes.get_or_create(&pool).set(1);
        m.interruptions
            .get_or_create(&InterruptionLabels {
                nodepool: "p".into(),
                kind: "rebalance".into(),
            })
            .inc();
        m.launch_failures
            .get_or_create(&LaunchFailureLabels {
                nodepool: "p".into(),
                reason: "r".into(),
            })
            .inc();
        m.notice_messages
            .get_or_create(&MessageLabels {
                outcome: "accepted".into(),
            })
            .inc();
        m.drift_replacements
            .get_or_create(&crate::metrics::PoolLabels {
                nodepool: "p".into(),
            })
            .inc();
        m.pricing_fallback
            .get_or_create(&PricingLabels {
                source: "spot".into(),
            })
            .set(1);
        m.provisioning_requests
            .get_or_create(&ProvisioningLabels {
                condition: "Provisioned".into(),
                status: "True".into(),
                reason: "CapacityIsProvisioned".into(),
            })
            .inc();
        m.capacity_buffer_replicas
            .get_or_create(&BufferLabels {
                buffer: "ml/warm".into(),
                state: "held".into(),
            })
            .set(1);
        // Repair and GPU use.
        let pool_health = crate::metrics::health::PoolHealthLabels {
            nodepool: "p".into(),
        };
        m.health
            .repairs
            .get_or_create(&crate::metrics::health::RepairLabels {
                nodepool: "p".into(),
                condition: "AcceleratedHardwareReady".into(),
                action: "reboot".into(),
            })
            .inc();
        m.health.reboot_failures.get_or_create(&pool_health).inc();
        m.health
            .held
            .get_or_create(&crate::metrics::health::HeldLabels {
                nodepool: "p".into(),
                reason: "breaker".into(),
            })
            .set(1);
        m.health.unhealthy_nodes.get_or_create(&pool_health).set(1);
        m.health.breaker_open.get_or_create(&pool_health).set(1);
        let gpu_pool = crate::metrics::gpu_use::PoolGpuLabels {
            nodepool: "p".into(),
        };
        let g = &m.gpu_use;
        g.utilization.get_or_create(&gpu_pool).set(0.5);
        g.measured.get_or_create(&gpu_pool).set(8);
        g.idle_hours.get_or_create(&gpu_pool).inc_by(0.5);
        g.workload_utilization
            .get_or_create(&crate::metrics::gpu_use::WorkloadGpuLabels {
                namespace: "ml".into(),
                workload: "train".into(),
            })
            .set(0.2);
        g.read_ok.set(1);
        let read = crate::metrics::gpu_use::ReadLabels {
            reason: "timeout".into(),
        };
        g.read_failures.get_or_create(&read).inc();
        g.series_dropped.get_or_create(&read).inc();
        m.decision_failures
            .get_or_create(&StepLabels {
                step: "provisioning".into(),
            })
            .inc();
        m.actions_failed
            .get_or_create(&ActionLabels {
                action: "evict".into(),
            })
            .inc();
        // The series ported from Karpenter's.
        let k = &m.karpenter;
        let claim: crate::api::NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"nodePool": "p", "instanceType": "t", "zone": "z",
                     "capacityType": "spot", "pricePerHour": 1.0}
        }))
        .unwrap();
        let request = crate::controller::snapshot::request_of(&claim);
        let reason = crate::core::DisruptionReason::Drifted;
        k.created(&request, &[]);
        k.terminated(&claim);
        k.disrupted("p", crate::catalog::CapacityType::Spot, reason);
        k.decided(&[crate::core::DisruptionDecision {
            reason,
            claims: vec!["c".into()],
            replacements: vec![],
        }]);
        let pool = crate::api::NodePool::new("p", Default::default());
        let mut with_limit = pool.clone();
        with_limit.spec.limits.insert(
            "nodes".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
        );
        k.set_pools([(&with_limit, &crate::cluster::Resources::new(), 1, 1.0)]);
        let encoded = crate::metrics::encode(&registry);
        let mut families = Vec::new();
        let mut served = std::collections::BTreeSet::new();
        for line in encoded.lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else {
                continue;
            };
            let (name, kind) = rest.split_once(' ').unwrap();
            let suffixes: &[&str] = match kind {
                "counter" => &["_total", "_created"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                _ => &[""],
            };
            served.extend(suffixes.iter().map(|s| format!("{name}{s}")));
            families.push(name.to_string());
        }
        assert!(families.len() >= 22, "{encoded}");

        for name in &queried {
            assert!(
                served.contains(name),
                "the dashboard queries {name}, which /metrics does not serve"
            );
        }
        for family in &families {
            assert!(
                queried.iter().any(|q| q.starts_with(family.as_str())),
                "no panel shows {family}"
            );
        }
    }
}
