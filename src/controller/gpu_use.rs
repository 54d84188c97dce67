//! GPU use for the loop (`docs/gpu-use.md`): a reader task reads the DCGM
//! exporter's series from Prometheus every interval, off the round (a slow
//! or unreachable Prometheus never holds a round: the round takes the last
//! reading there is); [`GpuUseState`] turns each fresh reading into the
//! world's inputs (XIDs the node monitoring agent treats as fatal become
//! its `AcceleratedHardwareReady` signal, nodes whose GPUs are all idle get
//! their idle-since), into metrics (utilisation per pool and per workload,
//! idle GPU-hours), Events on under-used pods, and the NodePools'
//! `GPUUseKnown` condition. A failed or stale read decides nothing: no
//! XID, no idle node, the condition `False` with why.

use super::events::{self, Events};
use super::prometheus::{self, Prometheus};
use super::snapshot::WorldParts;
use crate::cluster::gpu_use::{PodRef, Usage};
use crate::core::{repair, Time};
use crate::metrics::gpu_use::{PoolGpuLabels, ReadLabels, WorkloadGpuLabels};
use crate::metrics::Metrics;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The NodePool condition that says whether GPU use is known.
pub const CONDITION: &str = "GPUUseKnown";

/// How GPU use is read and judged.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuUseSettings {
    /// The Prometheus-compatible API (`http://host:port`).
    pub url: String,
    /// The window each read covers (and a pod must be under-used for).
    pub window: Duration,
    /// How often to read.
    pub interval: Duration,
    /// Longest one query may take.
    pub timeout: Duration,
    /// A pod whose GPUs are busier than this on average is not under-used
    /// (0.30: the users' guides' 30%).
    pub underused_below: f64,
    /// A GPU busy less than this is idle (idle GPU-hours, idle nodes).
    pub idle_below: f64,
}

impl Default for GpuUseSettings {
    fn default() -> Self {
        GpuUseSettings {
            url: String::new(),
            window: Duration::from_secs(3600),
            interval: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
            underused_below: crate::plan::rightsize::UNDERUSED_BELOW,
            idle_below: crate::plan::rightsize::IDLE_BELOW,
        }
    }
}

/// One read: when, and what came of it.
#[derive(Debug, Clone)]
pub struct Reading {
    /// When the read was made (the end of its window).
    pub at: Time,
    /// The usage, or why there is none.
    pub usage: Result<Usage, prometheus::Error>,
}

/// Starts the reader: reads at once, then every `interval`, until
/// `shutdown`; the receiver holds the last reading.
///
/// # Errors
/// [`prometheus::Error::Url`] for a URL that is not `http://`.
pub fn spawn_reader(
    settings: &GpuUseSettings,
    shutdown: CancellationToken,
) -> prometheus::Result<watch::Receiver<Option<Arc<Reading>>>> {
    let prom = Prometheus::new(&settings.url, settings.timeout)?;
    let (tx, rx) = watch::channel(None);
    let (window, interval) = (settings.window, settings.interval);
    tokio::spawn(async move {
        let mut last_gpus = 0;
        loop {
            let at = chrono::Utc::now();
            let usage = prometheus::read_usage(&prom, window, at, last_gpus).await;
            if let Ok(u) = &usage {
                last_gpus = u.gpus.len();
            }
            if tx.send(Some(Arc::new(Reading { at, usage }))).is_err() {
                return;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    });
    Ok(rx)
}

/// The loop's view of GPU use between rounds.
#[derive(Debug)]
pub struct GpuUseState {
    settings: GpuUseSettings,
    readings: watch::Receiver<Option<Arc<Reading>>>,
    /// The reading last taken in, by its time.
    taken: Option<Time>,
    /// When each (node, GPU, XID) was first seen.
    xid_since: HashMap<(Arc<str>, Arc<str>, u32), Time>,
    /// Since when each node's GPUs have all been idle.
    idle_since: HashMap<String, Time>,
    /// Pods already told they under-use their GPUs.
    told: HashSet<PodRef>,
    /// The pools' `GPUUseKnown` condition: status, reason, message.
    condition: Option<(bool, &'static str, String)>,
}

/// What a fresh reading changed, to report.
struct Fresh {
    reading: Arc<Reading>,
    since: Option<Time>,
}

impl GpuUseState {
    /// A state fed by `readings` (see [`spawn_reader`]).
    pub fn new(settings: GpuUseSettings, readings: watch::Receiver<Option<Arc<Reading>>>) -> Self {
        GpuUseState {
            settings,
            readings,
            taken: None,
            xid_since: HashMap::new(),
            idle_since: HashMap::new(),
            told: HashSet::new(),
            condition: None,
        }
    }

    /// The pools' `GPUUseKnown` condition (status, reason, message), once
    /// a read was made.
    pub fn condition(&self) -> Option<(bool, &'static str, &str)> {
        self.condition
            .as_ref()
            .map(|(ok, reason, message)| (*ok, *reason, message.as_str()))
    }

    /// The last reading, if it is fresh (no older than two intervals and a
    /// minute) and succeeded.
    fn usable(&self, now: Time) -> Option<Arc<Reading>> {
        let r = self.readings.borrow().clone()?;
        let horizon = self.settings.interval * 2 + Duration::from_secs(60);
        let fresh = (now - r.at).to_std().map_or(true, |age| age <= horizon);
        (fresh && r.usage.is_ok()).then_some(r)
    }

    /// Takes in the last reading (once per reading) and puts what it says
    /// into the world: the fatal XIDs of each node as signals, and since
    /// when a node's GPUs have all been idle. Returns the new reading to
    /// report, if there is one.
    fn fill(&mut self, parts: &mut WorldParts, now: Time) -> Option<Fresh> {
        let latest = self.readings.borrow().clone();
        let mut fresh = None;
        if let Some(r) = latest.filter(|r| Some(r.at) != self.taken) {
            fresh = Some(Fresh {
                since: self.taken,
                reading: r.clone(),
            });
            self.taken = Some(r.at);
            self.take_in(&r);
        }
        let Some(r) = self.usable(now) else {
            self.idle_since.clear();
            return fresh;
        };
        let Ok(usage) = &r.usage else {
            return fresh;
        };
        let mut xids: HashMap<&str, Vec<repair::Signal>> = HashMap::new();
        for g in &usage.gpus {
            let Some(x) = g.xid else { continue };
            let key = (g.node.clone(), g.gpu.clone(), x);
            let since = self.xid_since.get(&key).copied().unwrap_or(r.at);
            if let Some(s) = repair::xid_signal(x, since) {
                xids.entry(&*g.node).or_default().push(s);
            }
        }
        for n in &mut parts.nodes {
            if let Some(signals) = xids.get(n.state.name.as_str()) {
                for s in signals {
                    // The agent's own condition, where it runs, is the same
                    // fact: not twice.
                    if !n
                        .health
                        .signals
                        .iter()
                        .any(|o| o.type_ == s.type_ && o.reason == s.reason)
                    {
                        n.health.signals.push(s.clone());
                    }
                }
            }
            n.gpu_idle_since = self.idle_since.get(n.state.name.as_str()).copied();
        }
        fresh
    }

    /// Bookkeeping of a new reading: first sightings of XIDs, idle nodes,
    /// the condition.
    fn take_in(&mut self, r: &Reading) {
        let usage = match &r.usage {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(error = %e, "GPU use not read: no decision on GPU use until it is");
                self.condition = Some((
                    false,
                    reason_of(e),
                    format!("{e}; no decision is taken on GPU use"),
                ));
                return;
            }
        };
        let mut seen = HashSet::new();
        for g in &usage.gpus {
            if let Some(x) = g.xid {
                let key = (g.node.clone(), g.gpu.clone(), x);
                self.xid_since.entry(key.clone()).or_insert(r.at);
                seen.insert(key);
            }
        }
        self.xid_since.retain(|k, _| seen.contains(k));
        // A node is idle when every one of its GPUs reported a use under
        // the threshold; since then, counting from the start of the window
        // that showed it.
        let start = r.at - chrono::TimeDelta::from_std(usage.window).unwrap_or_default();
        let mut idle = HashMap::new();
        for n in usage.nodes() {
            let all_idle = n.measured > 0
                && n.measured == n.gpus
                && n.busiest.is_some_and(|b| b < self.settings.idle_below);
            if all_idle {
                let since = self.idle_since.get(&n.node).copied().unwrap_or(start);
                idle.insert(n.node, since);
            }
        }
        self.idle_since = idle;
        let p = &usage.problems;
        self.condition = Some(if usage.gpus.is_empty() {
            (
                false,
                "NoSeries",
                format!("{} has no DCGM exporter series (DCGM_FI_DEV_GPU_UTIL); no decision is taken on GPU use", usage_url(&self.settings)),
            )
        } else if p.any() {
            tracing::warn!(missing_labels = p.missing_labels, absurd = p.absurd, examples = ?p.examples, "DCGM series left out of the GPU use read");
            (
                true,
                "PartialData",
                format!(
                    "{} GPUs read; left out: {} series without Hostname or gpu, {} absurd values (e.g. {})",
                    usage.gpus.len(),
                    p.missing_labels,
                    p.absurd,
                    p.examples.first().map_or("", String::as_str)
                ),
            )
        } else {
            (true, "Read", format!("{} GPUs read", usage.gpus.len()))
        });
    }

    /// Takes the last reading into `parts` and, when it is new, reports it:
    /// metrics (the read's outcome, utilisation per pool and per workload,
    /// idle GPU-hours) and, where `events` are given (the leader), one
    /// Event per newly under-used pod.
    pub async fn round(
        &mut self,
        parts: &mut WorldParts,
        metrics: &Metrics,
        events: Option<&Events>,
        now: Time,
    ) {
        let Some(fresh) = self.fill(parts, now) else {
            return;
        };
        let m = &metrics.gpu_use;
        let usage = match &fresh.reading.usage {
            Ok(u) => u,
            Err(e) => {
                m.read_ok.set(0);
                m.read_failures
                    .get_or_create(&ReadLabels {
                        reason: reason_of(e).to_lowercase(),
                    })
                    .inc();
                return;
            }
        };
        m.read_ok.set(1);
        for (reason, n) in [
            ("missing_labels", usage.problems.missing_labels),
            ("absurd", usage.problems.absurd),
        ] {
            if n > 0 {
                m.series_dropped
                    .get_or_create(&ReadLabels {
                        reason: reason.into(),
                    })
                    .inc_by(n as u64);
            }
        }
        let pool_of: HashMap<&str, &str> = parts
            .nodes
            .iter()
            .map(|n| (n.state.name.as_str(), n.nodepool.as_str()))
            .collect();
        // Per pool: mean use, GPUs measured, idle GPU-hours since the last
        // reading (at most one window).
        let hours = fresh
            .since
            .and_then(|s| (fresh.reading.at - s).to_std().ok())
            .map_or(0.0, |d| d.min(usage.window).as_secs_f64() / 3600.0);
        let mut pools: BTreeMap<&str, (f64, i64, f64)> = BTreeMap::new();
        for g in &usage.gpus {
            let Some(busy) = g.busy() else { continue };
            let e = pools
                .entry(pool_of.get(&*g.node).copied().unwrap_or(""))
                .or_default();
            e.0 += busy;
            e.1 += 1;
            if busy < self.settings.idle_below {
                e.2 += hours;
            }
        }
        m.utilization.clear();
        m.measured.clear();
        for (pool, (sum, n, idle)) in pools {
            let labels = PoolGpuLabels {
                nodepool: pool.to_string(),
            };
            m.utilization.get_or_create(&labels).set(sum / n as f64);
            m.measured.get_or_create(&labels).set(n);
            if idle > 0.0 {
                m.idle_hours.get_or_create(&labels).inc_by(idle);
            }
        }
        m.workload_utilization.clear();
        let pods = usage.pods();
        let mut workloads: BTreeMap<(&str, &str), (f64, u32)> = BTreeMap::new();
        for p in &pods {
            if let Some(b) = p.busy {
                let e = workloads
                    .entry((&*p.pod.namespace, p.workload.as_str()))
                    .or_default();
                e.0 += b * f64::from(p.gpus);
                e.1 += p.gpus;
            }
        }
        for ((namespace, workload), (sum, gpus)) in workloads {
            m.workload_utilization
                .get_or_create(&WorkloadGpuLabels {
                    namespace: namespace.into(),
                    workload: workload.into(),
                })
                .set(sum / f64::from(gpus.max(1)));
        }
        // Under-used pods: once each, until they are busy again.
        let under: Vec<(&PodRef, f64)> = pods
            .iter()
            .filter_map(|p| {
                p.busy
                    .filter(|b| *b < self.settings.underused_below)
                    .map(|b| (&p.pod, b))
            })
            .collect();
        let now_under: HashSet<PodRef> = under.iter().map(|(p, _)| (*p).clone()).collect();
        if let Some(ev) = events {
            for (pod, busy) in &under {
                if self.told.contains(*pod) {
                    continue;
                }
                let note = format!(
                    "its GPUs were {:.0}% busy on average over the last {} (under {:.0}%): see `quartermaster report gpu` for a smaller size",
                    busy * 100.0,
                    human(usage.window),
                    self.settings.underused_below * 100.0
                );
                tracing::info!(pod = %pod, %note, "GPU under-used");
                ev.gpu_underused(&events::pod_ref(&pod.to_string(), None), &note)
                    .await;
            }
            self.told = now_under;
        }
    }
}

/// The reason of the condition for a failed read.
fn reason_of(e: &prometheus::Error) -> &'static str {
    match e {
        prometheus::Error::Url { .. } => "BadURL",
        prometheus::Error::Unreachable { .. } => "Unreachable",
        prometheus::Error::Timeout { .. } => "Timeout",
        prometheus::Error::Status { .. } => "Status",
        prometheus::Error::Answer { .. } => "Answer",
        prometheus::Error::Api { .. } => "Refused",
    }
}

fn usage_url(s: &GpuUseSettings) -> String {
    format!("Prometheus at {}", s.url)
}

/// A window as people write it (`1h`, `90m`, `45s`).
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else if s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::gpu_use::{assemble, Field, Sample};
    use crate::core::ManagedNode;

    fn t(s: i64) -> Time {
        chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap()
    }

    fn sample(node: &str, gpu: &str, pod: &str, v: f64) -> Sample {
        Sample::new(
            &[
                ("Hostname", node),
                ("gpu", gpu),
                ("namespace", "ml"),
                ("pod", pod),
            ],
            v,
        )
    }

    fn reading(at: Time, util: &[(&str, &str, &str, f64)], xid: &[(&str, &str, f64)]) -> Reading {
        let answers = BTreeMap::from([
            (
                Field::Util,
                util.iter()
                    .map(|(n, g, p, v)| sample(n, g, p, *v))
                    .collect(),
            ),
            (
                Field::Xid,
                xid.iter().map(|(n, g, v)| sample(n, g, "x", *v)).collect(),
            ),
        ]);
        Reading {
            at,
            usage: Ok(assemble(at, Duration::from_secs(3600), &answers)),
        }
    }

    fn parts(nodes: &[&str]) -> WorldParts {
        let mut n = crate::core::interruption::fixtures::node("c");
        WorldParts {
            nodes: nodes
                .iter()
                .map(|name| {
                    n.state.name = name.to_string();
                    n.claim = format!("claim-{name}");
                    n.clone()
                })
                .collect::<Vec<ManagedNode>>(),
            ..WorldParts::default()
        }
    }

    #[tokio::test]
    async fn fatal_xids_become_signals_since_first_seen_and_idle_nodes_get_their_idle_since() {
        let (tx, rx) = watch::channel(None);
        let mut s = GpuUseState::new(GpuUseSettings::default(), rx);
        let metrics = Metrics::unregistered();
        tx.send_replace(Some(Arc::new(reading(
            t(3600),
            &[("busy", "0", "a", 90.0), ("idle", "0", "b", 1.0)],
            &[("busy", "0", 79.0), ("idle", "0", 13.0)],
        ))));
        let mut p = parts(&["busy", "idle"]);
        s.round(&mut p, &metrics, None, t(3601)).await;
        let accel = |n: &ManagedNode| {
            n.health
                .signals
                .iter()
                .map(|s| (s.reason.clone(), s.since))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            accel(&p.nodes[0]),
            [("NvidiaXID79Error".to_string(), t(3600))]
        );
        assert!(accel(&p.nodes[1]).is_empty(), "XID 13 is the application's");
        assert_eq!(p.nodes[0].gpu_idle_since, None);
        assert_eq!(p.nodes[1].gpu_idle_since, Some(t(0)), "the window's start");
        assert!(s.condition().unwrap().0);
        let labels = PoolGpuLabels {
            nodepool: "gpu".into(),
        };
        assert!((metrics.gpu_use.utilization.get_or_create(&labels).get() - 0.455).abs() < 1e-9);
        // The next reading: the XID is still there, first seen before.
        tx.send_replace(Some(Arc::new(reading(
            t(3900),
            &[("busy", "0", "a", 90.0), ("idle", "0", "b", 1.0)],
            &[("busy", "0", 79.0)],
        ))));
        let mut p = parts(&["busy", "idle"]);
        s.round(&mut p, &metrics, None, t(3901)).await;
        assert_eq!(
            accel(&p.nodes[0]),
            [("NvidiaXID79Error".to_string(), t(3600))]
        );
        assert_eq!(p.nodes[1].gpu_idle_since, Some(t(0)));
        // Idle GPU-hours: one idle GPU for the 300 s between readings.
        let idle = metrics.gpu_use.idle_hours.get_or_create(&labels).get();
        assert!((idle - 300.0 / 3600.0).abs() < 1e-9, "{idle}");
    }

    #[tokio::test]
    async fn a_failed_or_stale_read_decides_nothing_and_says_why() {
        let (tx, rx) = watch::channel(None);
        let mut s = GpuUseState::new(GpuUseSettings::default(), rx);
        let metrics = Metrics::unregistered();
        tx.send_replace(Some(Arc::new(reading(
            t(3600),
            &[("idle", "0", "b", 1.0)],
            &[("idle", "0", 79.0)],
        ))));
        let mut p = parts(&["idle"]);
        s.round(&mut p, &metrics, None, t(3601)).await;
        assert!(p.nodes[0].gpu_idle_since.is_some());
        // An hour later without a new reading: stale.
        let mut p = parts(&["idle"]);
        s.round(&mut p, &metrics, None, t(7200)).await;
        assert_eq!(p.nodes[0].gpu_idle_since, None);
        assert!(p.nodes[0].health.signals.is_empty());
        // A failed read.
        tx.send_replace(Some(Arc::new(Reading {
            at: t(7300),
            usage: Err(prometheus::Error::Timeout {
                url: "http://p:9090".into(),
                timeout: Duration::from_secs(10),
            }),
        })));
        let mut p = parts(&["idle"]);
        s.round(&mut p, &metrics, None, t(7301)).await;
        assert_eq!(p.nodes[0].gpu_idle_since, None);
        let (ok, reason, message) = s.condition().unwrap();
        assert!(!ok);
        assert_eq!(reason, "Timeout");
        assert!(message.contains("no decision"), "{message}");
        assert_eq!(metrics.gpu_use.read_ok.get(), 0);
        assert_eq!(
            metrics
                .gpu_use
                .read_failures
                .get_or_create(&ReadLabels {
                    reason: "timeout".into()
                })
                .get(),
            1
        );
    }
}
