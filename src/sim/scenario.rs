//! Scenario files: what to simulate (region, NodePools as the CRD's own YAML,
//! workload sources, strategies, length, seed, cloud behaviour). Parsing and
//! checking are pure; the caller reads the file.

use super::workload::{BurstSpec, InferenceSpec, TraceSpec, TrainingSpec};
use crate::api::{validate_node_pool, NodePool};
use crate::catalog::market::trace::{SpotTrace, TraceKind};
use crate::catalog::{CapacityType, Catalog, MarketModel};
use crate::cloud::simulated::{
    MarketTuning, PriceChange, PriceTarget, SimulatedCloudConfig, Storm as CloudStorm, TraceReplay,
};
use crate::core::OfferingKey;
use crate::core::Time;
use chrono::Duration as Span;
use schemars::JsonSchema;
use serde::Deserialize;

/// A scenario that cannot run, with every problem found.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not valid YAML, or a field of the wrong shape.
    #[error("scenario: {0}")]
    Parse(String),
    /// Valid YAML that describes something impossible.
    #[error("scenario is invalid:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

/// A strategy to compare.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deserialize,
    serde::Serialize,
    JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyName {
    /// The decision core as it is (MIP, risk-aware, checkpoints).
    Quartermaster,
    /// The Karpenter-style greedy baseline, spot when cheaper.
    Greedy,
    /// The greedy baseline choosing offerings as Karpenter does: spot when
    /// any is cheaper than on-demand, price-capacity-optimized among the
    /// spot pools (`plan::Strategy::Karpenter`). Not run unless asked for.
    Karpenter,
    /// Never spot.
    OnDemand,
    /// A fixed node group sized for the peak (min = max).
    Static,
}

impl std::str::FromStr for StrategyName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
            format!("unknown strategy {s:?} (quartermaster, greedy, karpenter, on-demand, static)")
        })
    }
}

/// One workload source.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum WorkloadSource {
    /// Training jobs.
    Training(TrainingSpec),
    /// An inference deployment with a daily curve.
    Inference(InferenceSpec),
    /// Office-hour bursts.
    Burst(BurstSpec),
    /// A trace file.
    Trace(TraceSpec),
}

impl WorkloadSource {
    /// Its `gpuUse`, if it says one.
    pub fn gpu_use(&self) -> Option<&super::workload::GpuUseSpec> {
        match self {
            WorkloadSource::Training(t) => t.gpu_use.as_ref(),
            WorkloadSource::Inference(s) => s.gpu_use.as_ref(),
            WorkloadSource::Burst(b) => b.gpu_use.as_ref(),
            WorkloadSource::Trace(t) => t.gpu_use.as_ref(),
        }
    }

    /// Its `dra`, if it asks its devices through DRA claims.
    pub fn dra(&self) -> Option<&super::dra::DraSpec> {
        match self {
            WorkloadSource::Training(t) => t.dra.as_ref(),
            WorkloadSource::Inference(s) => s.dra.as_ref(),
            WorkloadSource::Burst(b) => b.dra.as_ref(),
            WorkloadSource::Trace(t) => t.dra.as_ref(),
        }
    }

    /// Its kind as the scenario names it (`training`, ...).
    fn kind(&self) -> &'static str {
        match self {
            WorkloadSource::Training(_) => "training",
            WorkloadSource::Inference(_) => "inference",
            WorkloadSource::Burst(_) => "burst",
            WorkloadSource::Trace(_) => "trace",
        }
    }
}

/// `cloud.faults:` node faults (`cloud::simulated::FaultModel`); present,
/// every GPU node may fail. Defaults from Meta's Llama 3 report
/// (`docs/simulated-cloud.md`).
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultsSpec {
    /// Faults per GPU-hour of a Ready node (default: Llama 3's, 419 in 54
    /// days on 16,384 GPUs).
    #[serde(default = "llama3_rate")]
    pub rate_per_gpu_hour: f64,
    /// The share of faults a reboot fixes, 0..=1 (default 0.2).
    #[serde(default = "reboot_fixes")]
    pub reboot_fixes: f64,
    /// How long a reboot takes (Go duration); absent: the node's family's
    /// boot from running to Ready.
    #[serde(default)]
    pub reboot_duration: Option<String>,
}

fn llama3_rate() -> f64 {
    crate::cloud::simulated::LLAMA3_FAULTS_PER_GPU_HOUR
}

fn reboot_fixes() -> f64 {
    crate::cloud::simulated::DEFAULT_REBOOT_FIXES
}

impl FaultsSpec {
    /// Every problem of the fields.
    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let r = self.rate_per_gpu_hour;
        if !(r.is_finite() && r >= 0.0) {
            out.push(format!(
                "cloud.faults.ratePerGpuHour: {r} must be a number >= 0"
            ));
        }
        let f = self.reboot_fixes;
        if !(0.0..=1.0).contains(&f) {
            out.push(format!(
                "cloud.faults.rebootFixes: {f} is a share of the faults and must be in [0, 1]"
            ));
        }
        if let Some(Err(e)) = self.reboot_duration.as_deref().map(bounded_duration) {
            out.push(format!("cloud.faults.rebootDuration: {e}"));
        }
        out
    }
}

/// A period in which spot interruptions come faster.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Storm {
    /// Offset from the start (Go duration).
    pub after: String,
    /// How long it lasts.
    pub duration: String,
    /// Rate multiplier.
    pub multiplier: f64,
}

/// A new price for some offerings from a point in the run on.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceChangeSpec {
    /// Offset from the start (Go duration).
    pub after: String,
    /// Instance type whose price changes.
    pub instance_type: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
    /// Zone ID; absent: every zone.
    #[serde(default)]
    pub zone: Option<String>,
    /// USD per hour from then on.
    pub price_per_hour: f64,
}

/// A new node image released from a point in the run on: every node's
/// EC2NodeClass resolves to it (as a new release behind `al2023@latest`),
/// so the nodes launched before drift and are replaced.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageReleaseSpec {
    /// Offset from the start (Go duration).
    pub after: String,
}

/// How the simulated cloud behaves beyond the catalog's figures.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudSpec {
    /// Offerings that always fail for lack of capacity: `TYPE/ZONE/CAPACITY`.
    #[serde(default)]
    pub insufficient_capacity: Vec<String>,
    /// Interruption storms.
    #[serde(default)]
    pub storms: Vec<Storm>,
    /// Price changes during the run.
    #[serde(default)]
    pub price_changes: Vec<PriceChangeSpec>,
    /// If set (Go duration), every spot interruption is preceded by a
    /// rebalance recommendation this long before its notice.
    #[serde(default)]
    pub rebalance_lead: Option<String>,
    /// Which spot market draws reclaims: `calibrated` (default: fitted
    /// from measured traces, `docs/market.md`) or `advisor` (the old
    /// constant rate from the Spot Instance Advisor bucket).
    #[serde(default)]
    pub market: MarketName,
    /// Adjustments of the calibrated market in every spot pool.
    #[serde(default)]
    pub market_tuning: MarketTuningSpec,
    /// SkyPilot traces replayed onto pools.
    #[serde(default)]
    pub spot_traces: Vec<SpotTraceSpec>,
    /// Capacity reservations and Capacity Blocks the run may use (pools
    /// that allow the `reserved` capacity type).
    #[serde(default)]
    pub reservations: Vec<super::reservations::ReservationSpec>,
    /// New node images released during the run (drift, `core::drift`).
    #[serde(default)]
    pub image_releases: Vec<ImageReleaseSpec>,
    /// Node faults (absent: none).
    #[serde(default)]
    pub faults: Option<FaultsSpec>,
}

/// `market:` of a scenario.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MarketName {
    /// Fitted from measured traces (the default).
    #[default]
    Calibrated,
    /// The Spot Instance Advisor bucket as a constant rate.
    Advisor,
}

/// `marketTuning:` of a scenario: values replacing the calibrated model's
/// in every spot pool.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MarketTuningSpec {
    /// Factor on every pool's hazard.
    #[serde(default)]
    pub hazard_multiplier: Option<f64>,
    /// Probability that a reclaim also takes each other running instance.
    #[serde(default)]
    pub co_reclaim_probability: Option<f64>,
    /// Probability that a reclaim closes the pool.
    #[serde(default)]
    pub closure_probability: Option<f64>,
    /// Median closure (Go duration).
    #[serde(default)]
    pub closure_median: Option<String>,
    /// Probability that a launch succeeds outside closures.
    #[serde(default)]
    pub obtainability: Option<f64>,
}

/// One pool a replayed trace drives.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TracePool {
    /// Instance type.
    pub instance_type: String,
    /// Zone ID.
    pub zone: String,
}

/// A SkyPilot trace replayed onto pools.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpotTraceSpec {
    /// The trace file, relative to the scenario file.
    pub path: String,
    /// `preemption` (running counts: drops reclaim) or `availability`
    /// (launch probes: zeros close the pool).
    pub kind: TraceKind,
    /// Spot pools it drives.
    pub pools: Vec<TracePool>,
    /// How much of the trace's beginning to skip (Go duration).
    #[serde(default)]
    pub offset: Option<String>,
    /// The parsed trace, once [`crate::sim::load_spot_traces`] read it.
    #[serde(skip)]
    pub loaded: Option<SpotTrace>,
}

/// A scenario file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// Name shown in reports.
    pub name: String,
    /// What the scenario shows.
    #[serde(default)]
    pub description: String,
    /// Region whose offerings to use.
    #[serde(default = "default_region")]
    pub region: String,
    /// Start of the simulated period (RFC 3339).
    #[schemars(with = "String")]
    pub start: Time,
    /// Length of the simulated period (Go duration, e.g. `168h`).
    pub duration: String,
    /// Seed of every random choice.
    #[serde(default)]
    pub seed: u64,
    /// Strategies to compare (default: all four).
    #[serde(default = "all_strategies")]
    pub strategies: Vec<StrategyName>,
    /// NodePools, as the CRD's YAML.
    #[schemars(schema_with = "node_pools_schema")]
    pub node_pools: Vec<NodePool>,
    /// Workload sources.
    pub workloads: Vec<WorkloadSource>,
    /// Simulated cloud behaviour.
    #[serde(default)]
    pub cloud: CloudSpec,
    /// The simulated account's zone names, name to zone ID
    /// (`us-east-1a: use1-az6`): what nodes carry in
    /// `topology.kubernetes.io/zone`. Empty: the default rule (zone ID
    /// `<short>-azN` is named the region's N-th letter). Every zone field
    /// of a scenario (`cloud.*.zone`, reservations) is a zone ID.
    #[serde(default)]
    pub zone_names: std::collections::BTreeMap<String, String>,
    /// CapacityBuffers, as the controller serves them
    /// ([`crate::core::buffers`]): spare capacity for copies of a GPU pod,
    /// optionally only in a scheduled window.
    #[serde(default)]
    pub buffers: Vec<BufferSpec>,
}

/// A CapacityBuffer of a scenario: `replicas` chunks of a pod asking for
/// `gpus` GPUs (4 CPUs and 32 GiB each, tolerating the GPU taint, as
/// training pods do), wanted always or only in a window (`schedule`,
/// `timeZone`, `duration`: the buffer-schedule annotations).
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BufferSpec {
    /// Its name (the namespace is `buffers`).
    pub name: String,
    /// GPUs of one chunk.
    pub gpus: u32,
    /// Chunks.
    pub replicas: u32,
    /// Cron schedule of its window; absent: always wanted.
    #[serde(default)]
    pub schedule: Option<String>,
    /// Time zone of `schedule`.
    #[serde(default = "utc")]
    pub time_zone: String,
    /// How long the window stays open (Go duration); required with a
    /// schedule.
    #[serde(default)]
    pub duration: Option<String>,
    /// Node labels its chunks select (the template's `nodeSelector`), e.g.
    /// `karpenter.sh/capacity-type: on-demand`.
    #[serde(default)]
    pub node_selector: std::collections::BTreeMap<String, String>,
    /// CPU of one chunk (a quantity); absent: 4 per GPU.
    #[serde(default)]
    pub cpu: Option<String>,
    /// Memory of one chunk (a quantity); absent: 32Gi per GPU.
    #[serde(default)]
    pub memory: Option<String>,
}

fn utc() -> String {
    "UTC".into()
}

impl BufferSpec {
    /// The buffer as the core reads it.
    pub fn to_buffer(&self) -> crate::core::buffers::Buffer {
        let mut pod = super::workload::gpu_pod(&format!("buffers/{}", self.name), self.gpus);
        pod.holds_work = false;
        let sized = [("cpu", &self.cpu), ("memory", &self.memory)];
        for (resource, quantity) in sized {
            let Some(q) = quantity else { continue };
            match crate::cluster::Resources::parse([(resource, q.as_str())]) {
                Ok(r) => pod.requests.set(resource, r.get(resource)),
                Err(e) => {
                    return crate::core::buffers::Buffer {
                        name: format!("buffers/{}", self.name),
                        pod: Err(crate::core::buffers::Problem::spec(format!(
                            "{resource}: {e}"
                        ))),
                        replicas: Some(i64::from(self.replicas)),
                        share: None,
                        limits: None,
                        window: None,
                        refill: Default::default(),
                    }
                }
            }
        }
        if !self.node_selector.is_empty() {
            pod.affinity.terms = vec![self
                .node_selector
                .iter()
                .map(|(k, v)| {
                    crate::cluster::Requirement::new(k, crate::cluster::Operator::In, &[v.as_str()])
                })
                .collect()];
        }
        crate::core::buffers::Buffer {
            name: format!("buffers/{}", self.name),
            pod: Ok(pod),
            replicas: Some(i64::from(self.replicas)),
            share: None,
            limits: None,
            window: self
                .schedule
                .as_ref()
                .map(|schedule| crate::api::PrewarmWindow {
                    name: self.name.clone(),
                    schedule: schedule.clone(),
                    time_zone: self.time_zone.clone(),
                    duration: self.duration.clone().unwrap_or_default(),
                    capacity: Default::default(),
                }),
            refill: Default::default(),
        }
    }
}

/// `nodePools`: a list of NodePools, each checked against the CRD's own
/// schema, as `validate` checks them.
fn node_pools_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let pool = crate::api::read::node_pool_schema().clone();
    serde_json::from_value(serde_json::json!({"type": "array", "items": pool})).unwrap_or_default()
}

/// The schema scenario files are checked against.
pub fn schema() -> &'static serde_json::Value {
    static S: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    S.get_or_init(crate::api::read::schema_of::<Scenario>)
}

fn default_region() -> String {
    "us-east-1".into()
}

fn all_strategies() -> Vec<StrategyName> {
    vec![
        StrategyName::Quartermaster,
        StrategyName::Greedy,
        StrategyName::OnDemand,
        StrategyName::Static,
    ]
}

impl CloudSpec {
    /// Every problem of the market fields.
    fn market_problems(&self, catalog: &Catalog, region: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let t = &self.market_tuning;
        if let Some(m) = t
            .hazard_multiplier
            .filter(|m| !(m.is_finite() && *m >= 0.0))
        {
            problems.push(format!(
                "cloud.marketTuning.hazardMultiplier: {m} must be >= 0"
            ));
        }
        let probabilities = [
            ("coReclaimProbability", t.co_reclaim_probability),
            ("closureProbability", t.closure_probability),
            ("obtainability", t.obtainability),
        ];
        for (field, p) in probabilities {
            if let Some(p) = p.filter(|p| !(0.0..=1.0).contains(p)) {
                problems.push(format!("cloud.marketTuning.{field}: {p} is not in [0, 1]"));
            }
        }
        if let Some(Err(e)) = t.closure_median.as_deref().map(crate::api::parse_duration) {
            problems.push(format!("cloud.marketTuning.closureMedian: {e}"));
        }
        for (i, tr) in self.spot_traces.iter().enumerate() {
            if let Some(Err(e)) = tr.offset.as_deref().map(crate::api::parse_duration) {
                problems.push(format!("cloud.spotTraces[{i}].offset: {e}"));
            }
            if tr.pools.is_empty() {
                problems.push(format!(
                    "cloud.spotTraces[{i}].pools: at least one pool is needed"
                ));
            }
            if let Some(folder) = TraceKind::from_path(&tr.path).filter(|k| *k != tr.kind) {
                problems.push(format!(
                    "cloud.spotTraces[{i}].kind: {} given, but {} is in a folder named \
                     {folder}: say `kind: {folder}` if that is what it holds",
                    tr.kind, tr.path
                ));
            }
            for (j, p) in tr.pools.iter().enumerate() {
                let sold = catalog.offerings_in(region).any(|o| {
                    o.capacity_type == crate::catalog::CapacityType::Spot
                        && o.instance_type == p.instance_type
                        && o.zone_id == p.zone
                });
                if !sold {
                    problems.push(format!(
                        "cloud.spotTraces[{i}].pools[{j}]: {} spot in {} is not sold in {region}",
                        p.instance_type, p.zone
                    ));
                }
            }
        }
        problems
    }
}

/// Every problem of the trace sources: a window (`from`, `to`) that is not
/// two durations in order, `gpuNames` values that are not GPU names of the
/// catalog.
fn trace_problems(workloads: &[WorkloadSource], catalog: &Catalog) -> Vec<String> {
    let ours = super::gpu_names::catalog_names(catalog);
    let mut problems = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        let WorkloadSource::Trace(t) = w else {
            continue;
        };
        let mut window = Vec::new();
        for (field, d) in [("from", &t.from), ("to", &t.to)] {
            match d.as_deref().map(bounded_duration) {
                Some(Ok(d)) => window.push(d),
                Some(Err(e)) => problems.push(format!("workloads[{i}].trace.{field}: {e}")),
                None => {}
            }
        }
        if let (Some(from), Some(to), [a, b]) = (&t.from, &t.to, &window[..]) {
            if b <= a {
                problems.push(format!(
                    "workloads[{i}].trace.to: {to} is not after from ({from})"
                ));
            }
        }
        for (foreign, name) in &t.gpu_names {
            if !ours.contains(&name.to_ascii_lowercase()) {
                problems.push(format!(
                    "workloads[{i}].trace.gpuNames.{foreign}: {name:?} is not a GPU of the \
                     catalog ({})",
                    ours.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    problems
}

impl Scenario {
    /// Parses and checks a scenario: every NodePool through the same
    /// validation as `quartermaster validate`, the region against the catalog,
    /// durations, strategies.
    ///
    /// # Errors
    /// A parse error, or every problem found.
    pub fn parse(yaml: &str, catalog: &Catalog) -> Result<Scenario, Error> {
        Scenario::read("scenario", yaml, catalog)
    }

    /// [`Scenario::parse`] of the file `file` (its name goes in front of
    /// each problem), through the one strict reader (`api::read`): every
    /// unknown field and wrong type, in the scenario and in its NodePools,
    /// with its line; then everything [`Scenario::check`] finds.
    ///
    /// # Errors
    /// Every problem found.
    pub fn read(file: &str, yaml: &str, catalog: &Catalog) -> Result<Scenario, Error> {
        crate::api::read::single(file, yaml, schema(), |s: &Scenario| s.check(catalog))
            .map_err(|e| Error::Invalid(e.to_string().lines().map(str::to_string).collect()))
    }

    /// Everything wrong with a scenario that its schema cannot say, as
    /// `path: message` texts (empty when it can run).
    pub fn check(&self, catalog: &Catalog) -> Vec<String> {
        let s = self;
        let mut problems = Vec::new();
        if !catalog.regions().contains(&s.region.as_str()) {
            problems.push(format!("region: no offerings in {:?}", s.region));
        }
        match bounded_duration(&s.duration) {
            Ok(d) if d.as_secs() > 0 => {}
            Ok(_) => problems.push("duration: must be positive".into()),
            Err(e) => problems.push(format!("duration: {e}")),
        }
        if s.node_pools.is_empty() {
            problems.push("nodePools: at least one NodePool is needed".into());
        }
        if s.strategies.is_empty() {
            problems.push("strategies: at least one strategy is needed".into());
        }
        if s.workloads.is_empty() {
            problems.push("workloads: at least one workload source is needed".into());
        }
        problems.extend(trace_problems(&s.workloads, catalog));
        problems.extend(super::reservations::problems(
            &s.cloud.reservations,
            catalog,
            &s.region,
        ));
        for (i, pool) in s.node_pools.iter().enumerate() {
            for e in validate_node_pool(pool, catalog) {
                problems.push(format!("nodePools[{i}].{e}"));
            }
        }
        for (i, storm) in s.cloud.storms.iter().enumerate() {
            for (field, v) in [("after", &storm.after), ("duration", &storm.duration)] {
                if let Err(e) = bounded_duration(v) {
                    problems.push(format!("cloud.storms[{i}].{field}: {e}"));
                }
            }
            if !(0.0..=MAX_STORM_MULTIPLIER).contains(&storm.multiplier) {
                problems.push(format!(
                    "cloud.storms[{i}].multiplier: {:?} must be a number from 0 to {MAX_STORM_MULTIPLIER}",
                    storm.multiplier
                ));
            }
        }
        for (i, c) in s.cloud.price_changes.iter().enumerate() {
            if let Err(e) = bounded_duration(&c.after) {
                problems.push(format!("cloud.priceChanges[{i}].after: {e}"));
            }
            if c.capacity_type
                .parse::<crate::catalog::CapacityType>()
                .is_err()
            {
                problems.push(format!(
                    "cloud.priceChanges[{i}].capacityType: {:?} is not spot or on-demand",
                    c.capacity_type
                ));
            }
            if !(c.price_per_hour.is_finite() && c.price_per_hour >= 0.0) {
                problems.push(format!(
                    "cloud.priceChanges[{i}].pricePerHour: must be a number >= 0"
                ));
            }
            let sold = catalog.offerings_in(&s.region).any(|o| {
                o.instance_type == c.instance_type
                    && o.capacity_type.to_string() == c.capacity_type
                    && c.zone.as_ref().is_none_or(|z| *z == o.zone_id)
            });
            if !sold {
                problems.push(format!(
                    "cloud.priceChanges[{i}]: {} {} is not sold in {}{}",
                    c.instance_type,
                    c.capacity_type,
                    s.region,
                    c.zone
                        .as_ref()
                        .map(|z| format!(" zone {z}"))
                        .unwrap_or_default()
                ));
            }
        }
        for (i, r) in s.cloud.image_releases.iter().enumerate() {
            if let Err(e) = bounded_duration(&r.after) {
                problems.push(format!("cloud.imageReleases[{i}].after: {e}"));
            }
        }
        if let Some(lead) = &s.cloud.rebalance_lead {
            if let Err(e) = bounded_duration(lead) {
                problems.push(format!("cloud.rebalanceLead: {e}"));
            }
        }
        problems.extend(s.cloud.market_problems(catalog, &s.region));
        problems.extend(s.cloud.faults.iter().flat_map(FaultsSpec::problems));
        for (i, w) in s.workloads.iter().enumerate() {
            if let Some(u) = w.gpu_use() {
                problems.extend(u.problems(&format!("workloads[{i}].{}.gpuUse", w.kind())));
            }
            if let Some(d) = w.dra() {
                problems.extend(d.problems(&format!("workloads[{i}].{}.dra", w.kind())));
            }
        }
        let zones = catalog.zones(&s.region);
        let mut named = std::collections::BTreeSet::new();
        for (name, id) in &s.zone_names {
            if !zones.contains(&id.as_str()) {
                problems.push(format!(
                    "zoneNames[{name}]: {id:?} is not a zone ID of {} ({})",
                    s.region,
                    zones.join(", ")
                ));
            } else if !named.insert(id) {
                problems.push(format!("zoneNames[{name}]: zone {id} is named twice"));
            }
        }
        problems
    }

    /// `catalog` with the scenario's [`Scenario::zone_names`] for its
    /// region (the same catalog when it names none).
    pub fn catalog_with_zone_names(
        &self,
        catalog: &std::sync::Arc<Catalog>,
    ) -> std::sync::Arc<Catalog> {
        if self.zone_names.is_empty() {
            return catalog.clone();
        }
        let pairs = self
            .zone_names
            .iter()
            .map(|(name, id)| (name.clone(), id.clone()));
        let names = catalog
            .zone_names()
            .clone()
            .with_region(&self.region, pairs);
        std::sync::Arc::new((**catalog).clone().with_zone_names(names))
    }

    /// When the scenario's images are released, in order (releases whose
    /// offset does not parse are left out: [`Scenario::parse`] refuses them).
    pub fn image_releases(&self) -> Vec<Time> {
        let mut at: Vec<Time> = self
            .cloud
            .image_releases
            .iter()
            .filter_map(|r| bounded_duration(&r.after).ok())
            .filter_map(|d| chrono::TimeDelta::from_std(d).ok())
            .map(|d| self.start + d)
            .collect();
        at.sort();
        at
    }

    /// The simulated cloud this scenario describes: storms, price
    /// changes, the rebalance lead, exhausted pools, the market (model,
    /// tuning) and the replayed traces.
    ///
    /// # Errors
    /// A spot trace that was not loaded ([`crate::sim::load_spot_traces`]).
    pub fn cloud_config(&self) -> Result<SimulatedCloudConfig, String> {
        let start = self.start;
        let mut cloud_config = SimulatedCloudConfig::new(self.seed, &self.region, start);
        for s in &self.cloud.storms {
            let after = crate::api::parse_duration(&s.after).unwrap_or_default();
            let length = crate::api::parse_duration(&s.duration).unwrap_or_default();
            let from = start + Span::from_std(after).unwrap_or_default();
            cloud_config
                .interruptions
                .storms
                .push(CloudStorm::everywhere(
                    from,
                    from + Span::from_std(length).unwrap_or_default(),
                    s.multiplier,
                ));
        }
        for c in &self.cloud.price_changes {
            let after = crate::api::parse_duration(&c.after).unwrap_or_default();
            let Ok(capacity_type) = c.capacity_type.parse() else {
                continue;
            };
            let target = match &c.zone {
                Some(zone) => PriceTarget::Offering(OfferingKey {
                    instance_type: c.instance_type.clone(),
                    zone: zone.clone(),
                    capacity_type,
                }),
                None => PriceTarget::InstanceType {
                    instance_type: c.instance_type.clone(),
                    capacity_type,
                },
            };
            cloud_config.price_changes.push(PriceChange {
                at: start + Span::from_std(after).unwrap_or_default(),
                target,
                price_per_hour: c.price_per_hour,
            });
        }
        if let Some(lead) = &self.cloud.rebalance_lead {
            cloud_config.interruptions.rebalance_lead = crate::api::parse_duration(lead).ok();
        }
        for key in &self.cloud.insufficient_capacity {
            let parts: Vec<&str> = key.split('/').collect();
            if let [t, z, c] = parts[..] {
                if let Ok(capacity_type) = c.parse() {
                    cloud_config.capacity.exhausted.insert(OfferingKey {
                        instance_type: t.into(),
                        zone: z.into(),
                        capacity_type,
                    });
                }
            }
        }
        if let Some(f) = &self.cloud.faults {
            cloud_config.faults = crate::cloud::simulated::FaultModel {
                rate_per_gpu_hour: f.rate_per_gpu_hour,
                reboot_fixes: f.reboot_fixes,
                reboot_duration: f
                    .reboot_duration
                    .as_deref()
                    .and_then(|d| crate::api::parse_duration(d).ok()),
            };
        }
        let im = &mut cloud_config.interruptions;
        let t = &self.cloud.market_tuning;
        im.market = match self.cloud.market {
            MarketName::Calibrated => None,
            MarketName::Advisor => Some(MarketModel::Advisor),
        };
        im.rate_multiplier *= t.hazard_multiplier.unwrap_or(1.0);
        im.tuning = MarketTuning {
            co_reclaim_probability: t.co_reclaim_probability,
            closure_probability: t.closure_probability,
            closure_median: t
                .closure_median
                .as_deref()
                .and_then(|d| crate::api::parse_duration(d).ok()),
            obtainability: t.obtainability,
        };
        for (i, tr) in self.cloud.spot_traces.iter().enumerate() {
            let Some(trace) = tr.loaded.clone() else {
                return Err(format!(
                    "cloud.spotTraces[{i}]: {} was not loaded (sim::load_spot_traces)",
                    tr.path
                ));
            };
            im.replays.push(TraceReplay {
                trace,
                pools: tr
                    .pools
                    .iter()
                    .map(|p| OfferingKey {
                        instance_type: p.instance_type.clone(),
                        zone: p.zone.clone(),
                        capacity_type: CapacityType::Spot,
                    })
                    .collect(),
                offset: tr
                    .offset
                    .as_deref()
                    .and_then(|d| crate::api::parse_duration(d).ok())
                    .unwrap_or_default(),
            });
        }
        Ok(cloud_config)
    }

    /// Length of the simulated period.
    pub fn length(&self) -> chrono::Duration {
        let d = crate::api::parse_duration(&self.duration).unwrap_or_default();
        chrono::Duration::from_std(d).unwrap_or_default()
    }
}

/// The longest simulated period (and storm, offset or lead): a leap year.
/// Longer is not a what-if anyone plans for, and far longer overflows the
/// calendar.
pub const MAX_LENGTH: std::time::Duration = std::time::Duration::from_secs(366 * 24 * 3600);

/// The largest storm multiplier: a storm a million times the usual rate
/// reclaims every spot pool within seconds; more only makes the simulated
/// cloud draw events without end (and `1e300` overflows their sum).
pub const MAX_STORM_MULTIPLIER: f64 = 1_000_000.0;

/// A duration field of the scenario, at most [`MAX_LENGTH`].
fn bounded_duration(s: &str) -> Result<std::time::Duration, String> {
    match crate::api::parse_duration(s) {
        Ok(d) if d <= MAX_LENGTH => Ok(d),
        Ok(_) => Err(format!(
            "{s:?} is longer than the simulator's limit of {}h (a leap year)",
            MAX_LENGTH.as_secs() / 3600
        )),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name: small
start: 2026-01-05T00:00:00Z
duration: 24h
seed: 7
strategies: [quartermaster, on-demand]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: train}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, p4d]}]
workloads:
- training: {name: t, jobs: 10, perHour: 2, gpus: [1, 8], runTime: {median: 1h, p90: 4h}, checkpointInterval: 30m}
- inference: {name: s, minReplicas: 1, maxReplicas: 4, peakHour: 14, timeZone: Europe/Berlin}
cloud:
  storms: [{after: 2h, duration: 1h, multiplier: 20}]
"#;

    #[test]
    fn a_scenario_parses_with_its_pools_and_workloads() {
        let catalog = Catalog::embedded().unwrap();
        let s = Scenario::parse(GOOD, &catalog).unwrap();
        assert_eq!(
            s.strategies,
            [StrategyName::Quartermaster, StrategyName::OnDemand]
        );
        assert_eq!(s.node_pools[0].metadata.name.as_deref(), Some("train"));
        assert_eq!(s.workloads.len(), 2);
        assert_eq!(s.length(), chrono::Duration::hours(24));
        assert_eq!(s.region, "us-east-1");
    }

    #[test]
    fn a_scenarios_zone_names_name_the_catalogs_zones_and_bad_ones_are_refused() {
        let catalog = std::sync::Arc::new(Catalog::embedded().unwrap());
        let s = Scenario::parse(
            &format!("{GOOD}zoneNames: {{us-east-1a: use1-az6}}\n"),
            &catalog,
        )
        .unwrap();
        let named = s.catalog_with_zone_names(&catalog);
        assert_eq!(named.zone_name("us-east-1", "use1-az6"), "us-east-1a");
        assert_eq!(catalog.zone_name("us-east-1", "use1-az6"), "us-east-1f");
        let plain = Scenario::parse(GOOD, &catalog).unwrap();
        assert!(std::sync::Arc::ptr_eq(
            &plain.catalog_with_zone_names(&catalog),
            &catalog
        ));
        let e = Scenario::parse(
            &format!("{GOOD}zoneNames: {{us-east-1a: use1-az6, us-east-1b: use1-az6, us-east-1c: mars}}\n"),
            &catalog,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("zoneNames[us-east-1b]: zone use1-az6 is named twice"),
            "{e}"
        );
        assert!(
            e.contains("zoneNames[us-east-1c]: \"mars\" is not a zone ID"),
            "{e}"
        );
    }

    #[test]
    fn price_changes_and_the_rebalance_lead_are_read_and_checked() {
        let catalog = Catalog::embedded().unwrap();
        let with = |cloud: &str| {
            GOOD.replace(
                "cloud:\n  storms: [{after: 2h, duration: 1h, multiplier: 20}]",
                &format!("cloud: {cloud}"),
            )
        };
        let s = Scenario::parse(
            &with(
                "{priceChanges: [{after: 2h, instanceType: g5.xlarge, capacityType: spot, \
                 pricePerHour: 0.5}], rebalanceLead: 10m}",
            ),
            &catalog,
        )
        .unwrap();
        assert_eq!(s.cloud.price_changes[0].instance_type, "g5.xlarge");
        assert_eq!(s.cloud.price_changes[0].zone, None);
        assert_eq!(s.cloud.rebalance_lead.as_deref(), Some("10m"));
        let e = Scenario::parse(
            &with(
                "{priceChanges: [{after: soon, instanceType: zz9.huge, capacityType: cheap, \
                 pricePerHour: -1}], rebalanceLead: never}",
            ),
            &catalog,
        )
        .unwrap_err()
        .to_string();
        for field in [
            "cloud.priceChanges[0].after",
            "cloud.priceChanges[0].capacityType",
            "cloud.priceChanges[0].pricePerHour",
            "cloud.priceChanges[0]: zz9.huge",
            "cloud.rebalanceLead",
        ] {
            assert!(e.contains(field), "{field} missing from: {e}");
        }
    }

    #[test]
    fn every_problem_of_a_bad_scenario_is_reported_with_its_field() {
        let catalog = Catalog::embedded().unwrap();
        let bad = GOOD
            .replace("duration: 24h", "duration: soon")
            .replace("values: [g5, p4d]", "values: [g5, zz9]")
            .replace("multiplier: 20", "multiplier: -1");
        let e = Scenario::parse(&bad, &catalog).unwrap_err().to_string();
        assert!(e.contains("duration:"), "{e}");
        assert!(
            e.contains("nodePools[0].spec.template.spec.requirements[0]"),
            "{e}"
        );
        assert!(e.contains("cloud.storms[0].multiplier"), "{e}");
        let e = Scenario::parse("name: x\nbogus: 1\n", &catalog)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus") || e.contains("missing"), "{e}");
    }

    #[test]
    fn absurd_lengths_and_storms_are_errors_not_aborts() {
        let catalog = Catalog::embedded().unwrap();
        let bad = GOOD
            .replace("duration: 24h", "duration: 3000000000h")
            .replace(
                "cloud:\n  storms: [{after: 2h, duration: 1h, multiplier: 20}]",
                "cloud: {storms: [{after: 9000h, duration: 1h, multiplier: 1e300}], \
                 priceChanges: [{after: 3000000000h, instanceType: g5.xlarge, \
                 capacityType: spot, pricePerHour: 1}]}",
            );
        let e = Scenario::parse(&bad, &catalog).unwrap_err().to_string();
        for field in [
            "duration: \"3000000000h\" is longer than",
            "cloud.storms[0].after: \"9000h\" is longer than",
            "cloud.storms[0].multiplier: 1e300 must be a number from 0 to 1000000",
            "cloud.priceChanges[0].after: \"3000000000h\" is longer than",
        ] {
            assert!(e.contains(field), "{field} missing from: {e}");
        }
    }

    #[test]
    fn trace_gpu_names_must_name_a_gpu_of_the_catalog() {
        let catalog = Catalog::embedded().unwrap();
        let with = |names: &str| {
            GOOD.replace(
                "- inference:",
                &format!("- trace: {{path: t.csv, gpuNames: {names}}}\n- inference:"),
            )
        };
        assert!(Scenario::parse(&with("{G2: t4, A10: a10g}"), &catalog).is_ok());
        let e = Scenario::parse(&with("{G2: k80}"), &catalog)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("workloads[1].trace.gpuNames.G2: \"k80\" is not a GPU of the catalog"),
            "{e}"
        );
        let e = Scenario::parse(&with("{}, from: 36h, to: 24h"), &catalog)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("workloads[1].trace.to: 24h is not after from (36h)"),
            "{e}"
        );
        let e = Scenario::parse(&with("{}, from: soon"), &catalog)
            .unwrap_err()
            .to_string();
        assert!(e.contains("workloads[1].trace.from"), "{e}");
    }
}
