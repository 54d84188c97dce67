//! The catalog's vocabulary: instance types, accelerators, offerings, prices
//! and interruption buckets. Plain data; loading lives in the sibling modules.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Spot, on-demand or reserved: how an offering is bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(schemars::JsonSchema)]
pub enum CapacityType {
    /// Spare EC2 capacity at a discount, reclaimable with a two-minute notice.
    Spot,
    /// Regular capacity at the list price.
    OnDemand,
    /// Capacity already bought: an on-demand capacity reservation or an EC2
    /// Capacity Block for ML ([`Reservation`]), limited to its available
    /// count and, for a block, to its window.
    Reserved,
}

impl CapacityType {
    /// The value used in labels, CRDs and CLI output (`spot`, `on-demand`,
    /// `reserved`).
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::Spot => "spot",
            CapacityType::OnDemand => "on-demand",
            CapacityType::Reserved => "reserved",
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for CapacityType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "spot" => Ok(CapacityType::Spot),
            "on-demand" => Ok(CapacityType::OnDemand),
            "reserved" => Ok(CapacityType::Reserved),
            other => Err(format!(
                "unknown capacity type {other:?} (expected spot, on-demand or reserved)"
            )),
        }
    }
}

/// CPU architecture as EC2 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Architecture {
    /// `x86_64` (Kubernetes label value `amd64`).
    X86_64,
    /// `arm64` (Kubernetes label value `arm64`).
    Arm64,
}

impl Architecture {
    /// The value of the `kubernetes.io/arch` label.
    pub fn kubernetes_label(self) -> &'static str {
        match self {
            Architecture::X86_64 => "amd64",
            Architecture::Arm64 => "arm64",
        }
    }
}

/// Which kind of accelerator device an instance carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AcceleratorKind {
    /// A GPU (NVIDIA, AMD) or Gaudi device, reported by EC2 under `GpuInfo`.
    Gpu,
    /// An AWS Inferentia or Trainium device, reported under `NeuronInfo`.
    Neuron,
}

/// The accelerators of one instance type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accelerator {
    /// GPU or Neuron.
    pub kind: AcceleratorKind,
    /// e.g. `NVIDIA`, `AWS`, `Habana`.
    pub manufacturer: String,
    /// e.g. `A100`, `H100`, `Trainium2`, as EC2 reports it.
    pub model: String,
    /// Devices per instance.
    pub count: u32,
    /// Device memory of one device, MiB, as EC2 reports it.
    pub memory_mib_per_device: u64,
    /// NeuronCores per device (Neuron only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neuron_cores_per_device: Option<u32>,
}

/// One EC2 instance type and the facts decisions read about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceType {
    /// e.g. `p4d.24xlarge`.
    pub name: String,
    /// e.g. `p4d`.
    pub family: String,
    /// Default vCPUs.
    pub vcpu: u32,
    /// Host memory, MiB.
    pub memory_mib: u64,
    /// CPU architecture.
    pub architecture: Architecture,
    /// Accelerators, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<Accelerator>,
    /// Whether the type supports Elastic Fabric Adapter.
    pub efa_supported: bool,
    /// EFA interfaces the type can attach (0 without EFA).
    pub max_efa_interfaces: u32,
    /// Most ENIs the type can attach (feeds EKS's max-pods formula).
    pub max_network_interfaces: u32,
    /// GPU interconnect (NVLink / NVSwitch) where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_interconnect: Option<String>,
    /// Baseline network bandwidth, Mbps, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_baseline_mbps: Option<u64>,
    /// Local instance storage, GB, if the type has any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_storage_gb: Option<u64>,
    /// Whether the local instance storage is NVMe (EC2's `NvmeSupport`
    /// other than `unsupported`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub local_storage_nvme: bool,
    /// CPU manufacturer as EC2 reports it (`Intel`, `AMD`, `AWS`), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_manufacturer: Option<String>,
    /// Hypervisor (`nitro`, `xen`); `None` for bare metal or unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypervisor: Option<String>,
}

#[cfg(test)]
impl InstanceType {
    /// A bare x86_64 instance type for tests: the family is the part of the
    /// name before the dot; no accelerator, no EFA, 4 network interfaces.
    pub(crate) fn bare(name: &str, vcpu: u32, memory_mib: u64) -> InstanceType {
        InstanceType {
            name: name.into(),
            family: name.split('.').next().unwrap_or_default().into(),
            vcpu,
            memory_mib,
            architecture: Architecture::X86_64,
            accelerator: None,
            efa_supported: false,
            max_efa_interfaces: 0,
            max_network_interfaces: 4,
            gpu_interconnect: None,
            network_baseline_mbps: None,
            local_storage_gb: None,
            local_storage_nvme: false,
            cpu_manufacturer: None,
            hypervisor: None,
        }
    }

    /// The same type with `count` NVIDIA `model` GPUs of
    /// `memory_mib_per_device` each.
    pub(crate) fn with_gpus(self, model: &str, count: u32, memory_mib_per_device: u64) -> Self {
        InstanceType {
            accelerator: Some(Accelerator {
                kind: AcceleratorKind::Gpu,
                manufacturer: "NVIDIA".into(),
                model: model.into(),
                count,
                memory_mib_per_device,
                neuron_cores_per_device: None,
            }),
            ..self
        }
    }
}

/// Where an offering's price comes from, so that derived figures are never
/// mistaken for observed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PriceSource {
    /// The on-demand list price.
    OnDemand,
    /// A spot price observed in this zone (the per-zone snapshot).
    SpotObserved,
    /// A spot price observed in this zone before a known on-demand price
    /// change, rescaled by `current on-demand / on-demand at the snapshot` so
    /// that the observed per-zone discount is kept.
    SpotRescaled,
    /// No observation in this zone: `on-demand x (1 - savings% / 100)` from the
    /// Spot Instance Advisor.
    SpotDerived,
    /// Reserved capacity: already paid, so the marginal price is what the
    /// node class states for it (0 unless told otherwise).
    Reserved,
}

/// Which kind of reserved capacity a [`Reservation`] is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ReservationKind {
    /// An on-demand capacity reservation (EC2 reservation type `default`):
    /// open-ended unless it has an end date.
    #[serde(rename = "capacity-reservation")]
    OnDemand,
    /// An EC2 Capacity Block for ML: a fixed window with a hard end, after
    /// which EC2 reclaims the instances.
    CapacityBlock,
}

impl ReservationKind {
    /// The name used in CLI output and docs.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationKind::OnDemand => "capacity-reservation",
            ReservationKind::CapacityBlock => "capacity-block",
        }
    }
}

/// Reserved capacity the account holds for one instance type in one zone:
/// an on-demand capacity reservation or a Capacity Block for ML, as
/// discovered (EC2 `DescribeCapacityReservations`) or as a scenario states
/// it. The catalog turns each usable one into a [`CapacityType::Reserved`]
/// offering (see `Catalog::with_reservations`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// EC2 capacity reservation ID (`cr-0123...`); the node's
    /// `quartermaster.dev/capacity-reservation-id` label.
    pub id: String,
    /// Reservation or block.
    pub kind: ReservationKind,
    /// Instance type it holds.
    pub instance_type: String,
    /// Region.
    pub region: String,
    /// Zone ID.
    pub zone_id: String,
    /// Instances it holds in all.
    pub total: u32,
    /// Instances that can still be launched into it.
    pub available: u32,
    /// When it becomes usable (a block's start); `None`: already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub start: Option<chrono::DateTime<chrono::Utc>>,
    /// When it ends (a block's end, or a reservation's end date); `None`:
    /// open-ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub end: Option<chrono::DateTime<chrono::Utc>>,
    /// USD per instance-hour the planner charges for it: 0 (already paid) by
    /// default, or the price the node class states.
    #[serde(default)]
    pub price_per_hour: f64,
}

impl Reservation {
    /// The reserved offering that sells it, priced at its stated price.
    pub fn offering(&self) -> Offering {
        Offering {
            instance_type: self.instance_type.clone(),
            region: self.region.clone(),
            zone_id: self.zone_id.clone(),
            capacity_type: CapacityType::Reserved,
            price_per_hour: self.price_per_hour,
            price_source: PriceSource::Reserved,
            interruption_bucket: None,
            market: None,
            reservation: Some(self.clone()),
        }
    }

    /// Why the reservation cannot take a launch at `now` if it is to keep
    /// the node at least `lead` before its end, or `None` when it can: not
    /// started, ended (or ending within `lead`), or full.
    pub fn unusable_at(
        &self,
        now: chrono::DateTime<chrono::Utc>,
        lead: chrono::TimeDelta,
    ) -> Option<String> {
        if let Some(start) = self.start.filter(|s| *s > now) {
            return Some(format!("{} starts at {start}", self.id));
        }
        if let Some(end) = self.end.filter(|e| *e <= now + lead) {
            return Some(if end <= now {
                format!("{} ended at {end}", self.id)
            } else {
                format!("{} ends at {end}, within the drain lead time", self.id)
            });
        }
        (self.available == 0).then(|| format!("{} has no available instances", self.id))
    }
}

/// The Spot Instance Advisor's interruption-frequency bucket, 0..=4
/// (`<5%`, `5-10%`, `10-15%`, `15-20%`, `>20%` of instances interrupted per
/// month).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InterruptionBucket(pub u8);

/// Hours in the advisor's month (365 x 24 / 12).
pub const HOURS_PER_MONTH: f64 = 730.0;

impl InterruptionBucket {
    /// The highest bucket, used where the advisor has no figure.
    pub const WORST: InterruptionBucket = InterruptionBucket(4);

    /// The advisor's label for the bucket.
    pub fn label(self) -> &'static str {
        match self.0 {
            0 => "<5%",
            1 => "5-10%",
            2 => "10-15%",
            3 => "15-20%",
            _ => ">20%",
        }
    }

    /// The monthly interruption probability taken as representative of the
    /// bucket: the middle of its range (2.5%, 7.5%, 12.5%, 17.5%), and 30% for
    /// the open-ended `>20%` bucket (a deliberately pessimistic choice).
    pub fn monthly_probability(self) -> f64 {
        match self.0 {
            0 => 0.025,
            1 => 0.075,
            2 => 0.125,
            3 => 0.175,
            _ => 0.30,
        }
    }

    /// The advisor's band for the bucket: the share of instances
    /// interrupted in a month, from and to (`>20%` runs to 1).
    pub fn monthly_band(self) -> (f64, f64) {
        match self.0 {
            0 => (0.0, 0.05),
            1 => (0.05, 0.10),
            2 => (0.10, 0.15),
            3 => (0.15, 0.20),
            _ => (0.20, 1.0),
        }
    }

    /// Hourly interruption rate, assuming interruptions arrive as a Poisson
    /// process: a monthly probability `p` of at least one interruption means
    /// `1 - exp(-rate x 730 h) = p`, so `rate = -ln(1 - p) / 730` per hour.
    pub fn rate_per_hour(self) -> f64 {
        -(1.0 - self.monthly_probability()).ln() / HOURS_PER_MONTH
    }
}

impl fmt::Display for InterruptionBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.0, self.label())
    }
}

/// One place an instance type can be bought: region x zone x capacity type,
/// with its price and, for spot, its interruption risk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offering {
    /// Instance type name.
    pub instance_type: String,
    /// e.g. `us-east-1`.
    pub region: String,
    /// The availability zone ID (`use1-az4`); zone IDs are the same in every
    /// account, zone names are not.
    pub zone_id: String,
    /// Spot, on-demand or reserved.
    pub capacity_type: CapacityType,
    /// USD per instance-hour.
    pub price_per_hour: f64,
    /// Where the price comes from.
    pub price_source: PriceSource,
    /// Advisor bucket (spot only; `None` when the advisor has no entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruption_bucket: Option<InterruptionBucket>,
    /// The pool's spot market (spot only), set by the catalog from its
    /// [`MarketModel`](super::MarketModel); `None` for on-demand and for
    /// offerings built outside a catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub market: Option<super::PoolMarket>,
    /// The reservation it sells (reserved only): its ID, available count and
    /// window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<Reservation>,
}

impl Offering {
    /// Expected interruptions per instance-hour, the one-number summary of
    /// the pool's market ([`PoolMarket::mean_rate_per_hour`](super::PoolMarket::mean_rate_per_hour):
    /// one over the mean lifetime of a slot kept filled). 0 for on-demand and
    /// reserved.
    /// For spot, the calibrated market's rate in a catalog's offerings (the
    /// default; `docs/market.md`); the advisor bucket's rate
    /// ([`InterruptionBucket::rate_per_hour`], the worst bucket without a
    /// figure) for an offering without a market.
    pub fn interruption_rate_per_hour(&self) -> f64 {
        match (self.capacity_type, &self.market) {
            (CapacityType::OnDemand | CapacityType::Reserved, _) => 0.0,
            (CapacityType::Spot, Some(m)) => m.mean_rate_per_hour(),
            (CapacityType::Spot, None) => self
                .interruption_bucket
                .unwrap_or(InterruptionBucket::WORST)
                .rate_per_hour(),
        }
    }

    /// Reclaims a new node of this offering expects over its first `hours`:
    /// its market's cumulative hazard from age 0 (heavy-tailed lifetimes
    /// make the first hours the riskiest), or [`Offering::interruption_rate_per_hour`]
    /// times `hours` without a market. 0 for on-demand and reserved. What
    /// the planner charges a pod for, before it has learned the pool
    /// (`plan::candidates::Candidate::expected_interruptions`).
    pub fn expected_interruptions(&self, hours: f64) -> f64 {
        let hours = hours.max(0.0);
        match (self.capacity_type, &self.market) {
            (CapacityType::Spot, Some(m)) => m.expected_interruptions(0.0, hours),
            _ => self.interruption_rate_per_hour() * hours,
        }
    }

    /// The spot hazard the planner uses, in the two numbers people read
    /// beside the advisor's bucket; `None` for on-demand and reserved.
    pub fn hazard(&self) -> Option<Hazard> {
        if self.capacity_type != CapacityType::Spot {
            return None;
        }
        let rate = self.interruption_rate_per_hour();
        Some(Hazard {
            mean_life_hours: if rate > 0.0 {
                1.0 / rate
            } else {
                f64::INFINITY
            },
            first_hour_reclaim_probability: 1.0 - (-self.expected_interruptions(1.0)).exp(),
        })
    }
}

/// A spot offering's hazard as the planner prices it ([`Offering::hazard`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hazard {
    /// Mean life of a new node, hours (one over
    /// [`Offering::interruption_rate_per_hour`]; infinite when it never
    /// dies).
    pub mean_life_hours: f64,
    /// Probability that a new node is reclaimed within its first hour:
    /// `1 - exp(-H(1 h))` of the market's cumulative hazard `H`.
    pub first_hour_reclaim_probability: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUCKETS: [InterruptionBucket; 5] = [
        InterruptionBucket(0),
        InterruptionBucket(1),
        InterruptionBucket(2),
        InterruptionBucket(3),
        InterruptionBucket(4),
    ];

    #[test]
    fn rate_per_hour_is_minus_log_of_survival_over_hours_per_month() {
        for b in BUCKETS {
            let p = b.monthly_probability();
            let expected = -(1.0 - p).ln() / 730.0;
            assert!((b.rate_per_hour() - expected).abs() < 1e-15, "{b}");
            // The Poisson model reproduces the monthly probability.
            let monthly = 1.0 - (-b.rate_per_hour() * HOURS_PER_MONTH).exp();
            assert!((monthly - p).abs() < 1e-12, "{b}");
        }
    }

    #[test]
    fn rate_per_hour_increases_with_the_bucket() {
        for pair in BUCKETS.windows(2) {
            assert!(
                pair[0].rate_per_hour() < pair[1].rate_per_hour(),
                "{pair:?}"
            );
        }
    }

    #[test]
    fn spot_without_a_bucket_is_charged_the_worst_rate_and_on_demand_none() {
        let spot = Offering {
            instance_type: "p4d.24xlarge".into(),
            region: "us-east-1".into(),
            zone_id: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 1.0,
            price_source: PriceSource::SpotDerived,
            interruption_bucket: None,
            market: None,
            reservation: None,
        };
        assert_eq!(
            spot.interruption_rate_per_hour(),
            InterruptionBucket::WORST.rate_per_hour()
        );
        let on_demand = Offering {
            capacity_type: CapacityType::OnDemand,
            ..spot
        };
        assert_eq!(on_demand.interruption_rate_per_hour(), 0.0);
    }
}
