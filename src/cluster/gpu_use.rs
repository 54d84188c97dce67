//! GPU use as NVIDIA's DCGM exporter reports it, read from a
//! Prometheus-compatible API over a window (`avg_over_time`,
//! `max_over_time`): per GPU, per pod (the exporter's pod labels) and per
//! node. Pure: the driver runs the [`queries`] and hands the answers to
//! [`assemble`]; nothing here does I/O. Series without the labels that say
//! which GPU they are, and absurd values (a utilisation of 140%, negative
//! memory, NaN), are left out and counted in [`Problems`]: no decision is
//! taken on them. The rules are in `docs/gpu-use.md`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// A point in time (the core's `Time`; `cluster` sits below `core`).
type Time = chrono::DateTime<chrono::Utc>;
use std::time::Duration;

/// One series' value, as a Prometheus-compatible API answers an instant
/// query: its labels and a number.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The series' labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// A sample with these labels.
    pub fn new(labels: &[(&str, &str)], value: f64) -> Sample {
        Sample {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
        }
    }
}

/// A DCGM exporter field read over the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// `DCGM_FI_DEV_GPU_UTIL`, percent, averaged over the window.
    Util,
    /// `DCGM_FI_DEV_FB_USED`, MiB, its peak over the window.
    FbUsed,
    /// `DCGM_FI_DEV_FB_FREE`, MiB, its least over the window (with the
    /// peak used: the GPU's memory).
    FbFree,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, a ratio, averaged (profiling
    /// metrics; absent where the exporter does not collect them).
    EngineActive,
    /// `DCGM_FI_DEV_XID_ERRORS`, the last XID error, its greatest over the
    /// window (0: none).
    Xid,
}

impl Field {
    /// Every field, in query order.
    pub const ALL: [Field; 5] = [
        Field::Util,
        Field::FbUsed,
        Field::FbFree,
        Field::EngineActive,
        Field::Xid,
    ];

    /// The exporter's metric name.
    pub fn metric(self) -> &'static str {
        match self {
            Field::Util => "DCGM_FI_DEV_GPU_UTIL",
            Field::FbUsed => "DCGM_FI_DEV_FB_USED",
            Field::FbFree => "DCGM_FI_DEV_FB_FREE",
            Field::EngineActive => "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            Field::Xid => "DCGM_FI_DEV_XID_ERRORS",
        }
    }

    /// Whether a value is possible for the field.
    fn sane(self, v: f64) -> bool {
        v.is_finite()
            && match self {
                Field::Util => (0.0..=100.0).contains(&v),
                // No GPU has a petabyte of memory.
                Field::FbUsed | Field::FbFree => (0.0..=1e9).contains(&v),
                Field::EngineActive => (0.0..=1.0).contains(&v),
                Field::Xid => (0.0..=1000.0).contains(&v) && v.fract() == 0.0,
            }
    }
}

/// The PromQL of `field` over `window`: `avg_over_time` for utilisation
/// and engine activity, `max_over_time` for memory used and XIDs,
/// `min_over_time` for memory free.
///
/// Only the labels read come back (a fleet's answer is a tenth the size),
/// and only utilisation's answer carries the pod, model and instance type:
/// the other fields carry just which GPU they are ([`IDENTITY_LABELS`]),
/// which halves their answers. XIDs come back only where there was one
/// (`> 0`): a healthy fleet answers nothing.
pub fn query(field: Field, window: Duration) -> String {
    let (outer, f) = match field {
        Field::Util | Field::EngineActive => ("avg", "avg_over_time"),
        Field::FbUsed | Field::Xid => ("max", "max_over_time"),
        Field::FbFree => ("min", "min_over_time"),
    };
    let mut labels = IDENTITY_LABELS.to_vec();
    if field == Field::Util {
        labels.extend_from_slice(ATTRIBUTION_LABELS);
    }
    let only_errors = if field == Field::Xid { " > 0" } else { "" };
    format!(
        "{outer} by ({}) ({f}({}[{}s])){only_errors}",
        labels.join(","),
        field.metric(),
        window.as_secs().max(1)
    )
}

/// The labels that say which GPU a series is: its node and its index or
/// UUID (the [`Assembler`]'s key).
const IDENTITY_LABELS: &[&str] = &[
    "Hostname",
    "node",
    "kubernetes_node",
    "nodename",
    "gpu",
    "UUID",
];

/// The labels utilisation's query keeps besides [`IDENTITY_LABELS`]: which
/// pod, which model and type.
const ATTRIBUTION_LABELS: &[&str] = &[
    "modelName",
    "namespace",
    "pod",
    "exported_namespace",
    "exported_pod",
    "instance_type",
    "node_kubernetes_io_instance_type",
    "label_node_kubernetes_io_instance_type",
];

/// Every query of one window, with its field.
pub fn queries(window: Duration) -> Vec<(Field, String)> {
    Field::ALL.iter().map(|f| (*f, query(*f, window))).collect()
}

/// A pod, by namespace and name (the namespace shared across a reading's
/// pods).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Box<str>,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One GPU over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuUse {
    /// Its node (the exporter's `Hostname`). Names repeated across a
    /// fleet's GPUs (node, index, model, type) are shared, not copied: a
    /// reading of 40,000 GPUs stays a few MB.
    pub node: Arc<str>,
    /// Its index on the node (`gpu`), else its `UUID`.
    pub gpu: Arc<str>,
    /// `modelName`, e.g. `NVIDIA A100-SXM4-80GB` (may be empty).
    pub model: Arc<str>,
    /// The pod the exporter attributes it to, if any (utilisation's series
    /// say; see [`query`]).
    pub pod: Option<PodRef>,
    /// The node's instance type, where the series carry it (a relabelled
    /// `node.kubernetes.io/instance-type`).
    pub instance_type: Option<Arc<str>>,
    /// Mean utilisation over the window, 0..=1; `None` when not known.
    pub util: Option<f64>,
    /// Mean graphics engine activity, 0..=1, where collected.
    pub engine_active: Option<f64>,
    /// Peak framebuffer memory used, MiB.
    pub fb_used_peak_mib: Option<f64>,
    /// The GPU's memory (used + free), MiB.
    pub fb_total_mib: Option<f64>,
    /// The greatest XID error code seen in the window (none: 0 or absent).
    pub xid: Option<u32>,
}

impl GpuUse {
    /// Its utilisation for decisions: engine activity where collected
    /// (what the SMs did), else the coarser `GPU_UTIL` (busy at all).
    pub fn busy(&self) -> Option<f64> {
        self.engine_active.or(self.util)
    }
}

/// What a read could not use.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Problems {
    /// Series without a node or GPU label.
    pub missing_labels: usize,
    /// Values out of their field's range (or not numbers).
    pub absurd: usize,
    /// A few examples of either, for the log and the condition.
    pub examples: Vec<String>,
}

impl Problems {
    fn note(&mut self, what: String) {
        if self.examples.len() < 5 {
            self.examples.push(what);
        }
    }

    /// Whether anything was left out.
    pub fn any(&self) -> bool {
        self.missing_labels > 0 || self.absurd > 0
    }
}

/// One window's reading of the fleet's GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// When it was read (the end of the window).
    pub at: Option<Time>,
    /// The window.
    pub window: Duration,
    /// Each GPU seen, sorted by node and GPU.
    pub gpus: Vec<GpuUse>,
    /// What was left out.
    pub problems: Problems,
}

/// A series' labels as the [`Assembler`] reads them: a [`Sample`]'s map,
/// or a reader's buffer reused from one series to the next so that a
/// fleet's answer is read without a map per series.
pub trait Labels {
    /// The value of label `key`, if the series has it.
    fn get(&self, key: &str) -> Option<&str>;
    /// The labels, for a problem's example.
    fn describe(&self) -> String;
}

impl Labels for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

/// The first of these labels the series has (non-empty).
fn label<'a>(s: &'a dyn Labels, keys: &[&str]) -> Option<&'a str> {
    keys.iter().filter_map(|k| s.get(k)).find(|v| !v.is_empty())
}

/// Labels naming the node: the exporter's `Hostname`, then what relabelling
/// commonly writes.
const NODE_LABELS: &[&str] = &["Hostname", "node", "kubernetes_node", "nodename"];
/// Labels naming the instance type, where relabelling copied the node's.
const INSTANCE_TYPE_LABELS: &[&str] = &[
    "instance_type",
    "node_kubernetes_io_instance_type",
    "label_node_kubernetes_io_instance_type",
];

/// The pod of a series, namespace and name: the exporter's `pod` and
/// `namespace`, or `exported_pod` / `exported_namespace` where Prometheus
/// renamed them (scraping without `honor_labels` puts the exporter's own
/// pod there).
fn pod_of(s: &dyn Labels) -> Option<(&str, &str)> {
    match (
        label(s, &["exported_namespace"]),
        label(s, &["exported_pod"]),
    ) {
        (Some(ns), Some(name)) => Some((ns, name)),
        _ => Some((label(s, &["namespace"])?, label(s, &["pod"])?)),
    }
}

/// Joins the answers of one window's queries into one [`GpuUse`] per GPU
/// (by node and GPU index or UUID), leaving out and counting series
/// without those labels and absurd values. See [`Assembler`] to take the
/// answers one query at a time.
pub fn assemble(at: Time, window: Duration, answers: &BTreeMap<Field, Vec<Sample>>) -> Usage {
    let mut a = Assembler::default();
    for (field, samples) in answers {
        a.add(*field, samples.iter().cloned());
    }
    a.finish(at, window)
}

/// Builds a [`Usage`] from one query's answer at a time, so that only one
/// answer is held at once; one series at a time with [`Assembler::add_one`].
#[derive(Debug, Default)]
pub struct Assembler {
    gpus: Vec<GpuUse>,
    /// Each GPU's place in `gpus`, by its (shared) node and GPU names.
    index: HashMap<(Arc<str>, Arc<str>), u32>,
    /// The names seen, each held once.
    names: HashSet<Arc<str>>,
    problems: Problems,
}

impl Assembler {
    /// An assembler with room for `gpus` GPUs (the last reading's count:
    /// a fleet's reading then never grows by doubling).
    pub fn with_capacity(gpus: usize) -> Assembler {
        Assembler {
            gpus: Vec::with_capacity(gpus),
            index: HashMap::with_capacity(gpus),
            ..Assembler::default()
        }
    }

    /// Folds in the answer of `field`'s query.
    pub fn add(&mut self, field: Field, samples: impl IntoIterator<Item = Sample>) {
        for s in samples {
            self.add_one(field, &s.labels, s.value);
        }
    }

    /// The shared copy of `name`.
    fn name(&mut self, name: &str) -> Arc<str> {
        if let Some(n) = self.names.get(name) {
            return n.clone();
        }
        let n: Arc<str> = name.into();
        self.names.insert(n.clone());
        n
    }

    /// Folds in one series of `field`'s answer.
    pub fn add_one(&mut self, field: Field, labels: &dyn Labels, value: f64) {
        let (Some(node), Some(gpu)) = (label(labels, NODE_LABELS), label(labels, &["gpu", "UUID"]))
        else {
            self.problems.missing_labels += 1;
            self.problems.note(format!(
                "{} series without Hostname or gpu: {}",
                field.metric(),
                labels.describe()
            ));
            return;
        };
        let key = (self.name(node), self.name(gpu));
        let i = match self.index.get(&key) {
            Some(&i) => i as usize,
            None => {
                let model = self.name("");
                self.gpus.push(GpuUse {
                    node: key.0.clone(),
                    gpu: key.1.clone(),
                    model,
                    pod: None,
                    instance_type: None,
                    util: None,
                    engine_active: None,
                    fb_used_peak_mib: None,
                    fb_total_mib: None,
                    xid: None,
                });
                // A fleet has fewer than 4 billion GPUs.
                self.index.insert(key, (self.gpus.len() - 1) as u32);
                self.gpus.len() - 1
            }
        };
        if self.gpus[i].model.is_empty() {
            if let Some(m) = label(labels, &["modelName"]) {
                self.gpus[i].model = self.name(m);
            }
        }
        if self.gpus[i].pod.is_none() {
            if let Some((namespace, name)) = pod_of(labels) {
                self.gpus[i].pod = Some(PodRef {
                    namespace: self.name(namespace),
                    name: name.into(),
                });
            }
        }
        if self.gpus[i].instance_type.is_none() {
            if let Some(t) = label(labels, INSTANCE_TYPE_LABELS) {
                self.gpus[i].instance_type = Some(self.name(t));
            }
        }
        if !field.sane(value) {
            self.problems.absurd += 1;
            self.problems
                .note(format!("{} = {value} on {node} GPU {gpu}", field.metric()));
            return;
        }
        let g = &mut self.gpus[i];
        match field {
            Field::Util => g.util = Some(value / 100.0),
            Field::EngineActive => g.engine_active = Some(value),
            Field::FbUsed => g.fb_used_peak_mib = Some(value),
            Field::FbFree => g.fb_total_mib = Some(value),
            Field::Xid => g.xid = (value > 0.0).then_some(value as u32),
        }
    }

    /// Whether no GPU was seen yet.
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    /// The usage of the window ending at `at`.
    pub fn finish(self, at: Time, window: Duration) -> Usage {
        let mut gpus = self.gpus;
        drop(self.index);
        gpus.sort_unstable_by(|a, b| (&a.node, &a.gpu).cmp(&(&b.node, &b.gpu)));
        // Free memory is only the total once the peak used is known.
        for g in &mut gpus {
            g.fb_total_mib = match (g.fb_used_peak_mib, g.fb_total_mib) {
                (Some(used), Some(free)) => Some(used + free),
                _ => None,
            };
        }
        Usage {
            at: Some(at),
            window,
            gpus,
            problems: self.problems,
        }
    }
}

/// A pod's GPUs over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct PodUse {
    /// The pod.
    pub pod: PodRef,
    /// Its workload ([`workload_of`]).
    pub workload: String,
    /// Its node.
    pub node: String,
    /// The GPU model.
    pub model: String,
    /// The node's instance type, where known.
    pub instance_type: Option<String>,
    /// GPUs it holds.
    pub gpus: u32,
    /// Mean use over them, 0..=1 (engine activity where collected); `None`
    /// when no GPU of it reported one.
    pub busy: Option<f64>,
    /// Peak memory used on its busiest GPU, MiB.
    pub fb_peak_mib: Option<f64>,
    /// One GPU's memory, MiB.
    pub fb_total_mib: Option<f64>,
}

/// A node's GPUs over the window.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeUse {
    /// The node.
    pub node: String,
    /// The GPU model.
    pub model: String,
    /// Its instance type, where known.
    pub instance_type: Option<String>,
    /// GPUs reporting.
    pub gpus: u32,
    /// GPUs that reported a use.
    pub measured: u32,
    /// Mean use over the measured ones, 0..=1.
    pub busy: Option<f64>,
    /// The busiest GPU's use.
    pub busiest: Option<f64>,
    /// Pods on its GPUs.
    pub pods: u32,
}

impl Usage {
    /// The pods the exporter attributes GPUs to, with their use, sorted.
    pub fn pods(&self) -> Vec<PodUse> {
        let mut by: BTreeMap<&PodRef, Vec<&GpuUse>> = BTreeMap::new();
        for g in &self.gpus {
            if let Some(p) = &g.pod {
                by.entry(p).or_default().push(g);
            }
        }
        by.into_iter()
            .map(|(pod, gs)| {
                let busy: Vec<f64> = gs.iter().filter_map(|g| g.busy()).collect();
                PodUse {
                    pod: pod.clone(),
                    workload: workload_of(&pod.name),
                    node: gs[0].node.to_string(),
                    model: gs[0].model.to_string(),
                    instance_type: gs
                        .iter()
                        .find_map(|g| g.instance_type.as_deref().map(str::to_string)),
                    gpus: gs.len() as u32,
                    busy: mean(&busy),
                    fb_peak_mib: gs
                        .iter()
                        .filter_map(|g| g.fb_used_peak_mib)
                        .reduce(f64::max),
                    fb_total_mib: gs.iter().find_map(|g| g.fb_total_mib),
                }
            })
            .collect()
    }

    /// The nodes with GPUs reporting, with their use, sorted.
    pub fn nodes(&self) -> Vec<NodeUse> {
        let mut by: BTreeMap<&str, Vec<&GpuUse>> = BTreeMap::new();
        for g in &self.gpus {
            by.entry(&g.node).or_default().push(g);
        }
        by.into_iter()
            .map(|(node, gs)| {
                let busy: Vec<f64> = gs.iter().filter_map(|g| g.busy()).collect();
                let mut pods: Vec<&PodRef> = gs.iter().filter_map(|g| g.pod.as_ref()).collect();
                pods.sort();
                pods.dedup();
                NodeUse {
                    node: node.to_string(),
                    model: gs[0].model.to_string(),
                    instance_type: gs
                        .iter()
                        .find_map(|g| g.instance_type.as_deref().map(str::to_string)),
                    gpus: gs.len() as u32,
                    measured: busy.len() as u32,
                    busy: mean(&busy),
                    busiest: busy.iter().copied().reduce(f64::max),
                    pods: pods.len() as u32,
                }
            })
            .collect()
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The workload a pod belongs to, from its name as Kubernetes' controllers
/// make them: a Deployment's `<name>-<template hash>-<5 characters>`, a
/// Job's or DaemonSet's `<name>-<5 characters>`, a StatefulSet's or
/// indexed Job's `<name>-<ordinal>`. A bare pod is its own workload.
pub fn workload_of(pod: &str) -> String {
    let random = |s: &str| {
        s.len() == 5
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    let hash = |s: &str| {
        (6..=10).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && s.bytes().any(|b| b.is_ascii_digit())
    };
    let mut parts: Vec<&str> = pod.split('-').collect();
    if parts.len() >= 3 && random(parts[parts.len() - 1]) && hash(parts[parts.len() - 2]) {
        parts.truncate(parts.len() - 2);
    } else if parts.len() >= 2 {
        let last = parts[parts.len() - 1];
        if random(last) || (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit())) {
            parts.pop();
        }
    }
    parts.join("-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Time {
        chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    fn gpu(node: &str, gpu: &str, pod: Option<&str>, v: f64) -> Sample {
        let mut labels = vec![
            ("Hostname", node),
            ("gpu", gpu),
            ("modelName", "NVIDIA A100-SXM4-80GB"),
        ];
        if let Some(p) = pod {
            labels.push(("namespace", "ml"));
            labels.push(("pod", p));
        }
        Sample::new(&labels, v)
    }

    #[test]
    fn queries_average_use_and_take_the_peak_of_memory_and_xids_over_the_window() {
        let w = Duration::from_secs(3600);
        let all = format!(
            "by ({},{})",
            IDENTITY_LABELS.join(","),
            ATTRIBUTION_LABELS.join(",")
        );
        let gpu = "by (Hostname,node,kubernetes_node,nodename,gpu,UUID)";
        assert_eq!(
            query(Field::Util, w),
            format!("avg {all} (avg_over_time(DCGM_FI_DEV_GPU_UTIL[3600s]))")
        );
        assert_eq!(
            query(Field::FbUsed, w),
            format!("max {gpu} (max_over_time(DCGM_FI_DEV_FB_USED[3600s]))")
        );
        assert_eq!(
            query(Field::FbFree, w),
            format!("min {gpu} (min_over_time(DCGM_FI_DEV_FB_FREE[3600s]))")
        );
        assert_eq!(
            query(Field::Xid, w),
            format!("max {gpu} (max_over_time(DCGM_FI_DEV_XID_ERRORS[3600s])) > 0"),
            "only the GPUs with an error come back"
        );
        assert_eq!(queries(w).len(), 5);
    }

    #[test]
    fn a_window_joins_the_fields_per_gpu_and_sums_memory() {
        let answers = BTreeMap::from([
            (
                Field::Util,
                vec![
                    gpu("n1", "0", Some("train-0"), 12.0),
                    gpu("n1", "1", None, 0.0),
                ],
            ),
            (Field::FbUsed, vec![gpu("n1", "0", Some("train-0"), 8192.0)]),
            (
                Field::FbFree,
                vec![gpu("n1", "0", Some("train-0"), 73728.0)],
            ),
            (
                Field::EngineActive,
                vec![gpu("n1", "0", Some("train-0"), 0.05)],
            ),
            (
                Field::Xid,
                vec![gpu("n1", "1", None, 79.0), gpu("n1", "0", None, 0.0)],
            ),
        ]);
        let u = assemble(at(), Duration::from_secs(3600), &answers);
        assert!(!u.problems.any());
        assert_eq!(u.gpus.len(), 2);
        let g0 = &u.gpus[0];
        assert_eq!(g0.util, Some(0.12));
        assert_eq!(g0.busy(), Some(0.05), "engine activity where collected");
        assert_eq!(g0.fb_total_mib, Some(81920.0));
        assert_eq!(g0.xid, None);
        assert_eq!(u.gpus[1].xid, Some(79));
        assert_eq!(u.gpus[1].busy(), Some(0.0));
        let pods = u.pods();
        assert_eq!(pods.len(), 1);
        assert_eq!(pods[0].pod.to_string(), "ml/train-0");
        assert_eq!(pods[0].fb_peak_mib, Some(8192.0));
        let nodes = u.nodes();
        assert_eq!(nodes[0].gpus, 2);
        assert_eq!(nodes[0].busy, Some(0.025));
        assert_eq!(nodes[0].pods, 1);
    }

    #[test]
    fn series_without_their_gpu_labels_and_absurd_values_are_left_out_and_counted() {
        let answers = BTreeMap::from([(
            Field::Util,
            vec![
                Sample::new(&[("gpu", "0")], 50.0),
                gpu("n1", "0", None, 140.0),
                gpu("n1", "1", None, f64::NAN),
                gpu("n1", "2", None, -3.0),
                gpu("n1", "3", None, 40.0),
            ],
        )]);
        let u = assemble(at(), Duration::from_secs(60), &answers);
        assert_eq!(u.problems.missing_labels, 1);
        assert_eq!(u.problems.absurd, 3);
        assert!(u.problems.any());
        assert!(!u.problems.examples.is_empty());
        let known: Vec<(&str, Option<f64>)> = u.gpus.iter().map(|g| (&*g.gpu, g.util)).collect();
        assert_eq!(
            known,
            [("0", None), ("1", None), ("2", None), ("3", Some(0.4))],
            "no value is made up for the absurd ones"
        );
        assert_eq!(u.nodes()[0].measured, 1);
    }

    #[test]
    fn the_exporters_pod_labels_win_over_prometheus_own() {
        let s = Sample::new(
            &[
                ("Hostname", "n1"),
                ("gpu", "0"),
                ("namespace", "gpu-operator"),
                ("pod", "dcgm-exporter-abcde"),
                ("exported_namespace", "ml"),
                ("exported_pod", "train-0"),
            ],
            1.0,
        );
        let u = assemble(
            at(),
            Duration::from_secs(60),
            &BTreeMap::from([(Field::Util, vec![s])]),
        );
        assert_eq!(u.gpus[0].pod.as_ref().unwrap().to_string(), "ml/train-0");
    }

    #[test]
    fn workloads_come_from_the_names_controllers_give_their_pods() {
        assert_eq!(workload_of("llm-serve-7d9f8b6c5d-x2k4q"), "llm-serve");
        assert_eq!(workload_of("train-job-abcde"), "train-job");
        assert_eq!(workload_of("trainer-3"), "trainer");
        assert_eq!(workload_of("notebook"), "notebook");
        assert_eq!(workload_of("a-b"), "a-b");
    }
}
