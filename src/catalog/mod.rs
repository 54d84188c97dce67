//! The catalog: instance types, accelerators and offerings (type x zone x
//! capacity type) with prices and interruption rates. The default catalog is
//! embedded from `pricing-data/` (see [`embedded`] for the rules that turn
//! those files into offerings); [`import`] regenerates `pricing-data/` from the
//! reference data; the AWS refresh (in `cloud::aws`) produces the same
//! structures. No I/O here beyond parsing text handed in or embedded.
//! Every spot offering carries its pool's [`PoolMarket`] from the catalog's
//! [`MarketModel`] (calibrated by default, see [`market`]).

pub mod devices;
pub mod embedded;
pub mod import;
mod labels;
pub mod market;
pub mod mig;
pub mod pricing_data;
pub mod topology;
mod types;
mod zones;

pub use devices::{DeviceData, DeviceTemplate, GpuLayout};
pub use embedded::EMBEDDED;
pub use labels::{gfd_product, gpu_short_name, instance_type_labels, INSTANCE_TYPE_KEYS};
pub use market::{MarketModel, MarketParams, PoolFacts, PoolMarket};
pub use pricing_data::{PricingFiles, ReferenceFiles};
pub use types::*;
pub use zones::{default_name as default_zone_name, ZoneNames};

use std::collections::{BTreeMap, HashMap};

/// What can go wrong while reading catalog data. No variant is retryable:
/// the data is fixed text, so the same input fails the same way.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file is not well-formed JSON or CSV, or a row does not have the
    /// expected shape (missing column, a number that does not parse).
    #[error("cannot parse {file} line {line}: {message}")]
    Parse {
        /// File name, e.g. `on-demand.csv`.
        file: &'static str,
        /// 1-based line of the offending row.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A well-formed entry breaks a rule: unknown instance type, duplicate
    /// key, value out of range.
    #[error("invalid entry in {file} at {entry}: {message}")]
    Invalid {
        /// File name, e.g. `zones.csv`.
        file: &'static str,
        /// Where: `line 12` for CSV, a key path such as
        /// `us-east-1/p4d.24xlarge` for keyed JSON.
        entry: String,
        /// What is wrong.
        message: String,
    },
}

/// The catalog's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Instance types and the offerings that sell them.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    instance_types: BTreeMap<String, InstanceType>,
    /// Each instance type's [`instance_type_labels`], computed once: the
    /// planner labels every offering of every type in every plan.
    /// Shared, so that every offering's labels can hold them uncopied.
    type_labels: HashMap<String, std::sync::Arc<BTreeMap<String, String>>>,
    offerings: Vec<Offering>,
    /// Where each region's offerings are in `offerings`, and each of its
    /// instance types', in order; made when first asked (a launch and a
    /// plan ask it; a scan of every region's offerings was a tenth of a
    /// trace replay). Shared by clones, kept by [`Catalog::with_reservations`]
    /// while the offerings it covers stay, dropped otherwise.
    positions: std::sync::Arc<std::sync::OnceLock<Positions>>,
    market: MarketModel,
    /// Every reservation handed to [`Catalog::with_reservations`], usable or
    /// not (a node in a block that is ending still needs its end time).
    reservations: Vec<Reservation>,
    /// Which catalog this is, as far as its spot markets go: a new number
    /// for each catalog built and each market model applied, so a reader
    /// that caches per pool ([`crate::core::cadence`]) knows when a price
    /// refresh or a new model made its cache stale.
    revision: u64,
    /// What the DRA drivers publish per type ([`devices`]); `None`: the
    /// embedded data.
    devices: Option<std::sync::Arc<DeviceData>>,
    /// The names the account gives the zones ([`ZoneNames`]): what nodes
    /// carry in `topology.kubernetes.io/zone`.
    zone_names: ZoneNames,
}

/// A map with a fixed-seed hasher: looked up, never iterated.
type Fast<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// A region's offerings' positions in [`Catalog::offerings`], by instance
/// type, and those of reserved capacity, each in the catalog's order.
#[derive(Debug, Clone, Default)]
struct RegionPositions {
    all: Vec<usize>,
    by_type: Fast<String, Vec<usize>>,
    reserved: Vec<usize>,
}

/// The positions of the first `covers` offerings by region; those after
/// them (a simulation's reservations, added on every step) are scanned.
#[derive(Debug, Clone, Default)]
struct Positions {
    covers: usize,
    regions: Fast<String, RegionPositions>,
}

/// A revision no catalog had before (see [`Catalog::revision`]).
fn next_revision() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Catalog {
    /// A catalog from its parts (tests and the AWS refresh build one this way).
    /// Offerings whose instance type is unknown are dropped; spot offerings
    /// get their market from the default (calibrated) [`MarketModel`],
    /// whatever they carried.
    pub fn from_parts(
        instance_types: impl IntoIterator<Item = InstanceType>,
        offerings: impl IntoIterator<Item = Offering>,
    ) -> Catalog {
        let instance_types: BTreeMap<String, InstanceType> = instance_types
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        let offerings = offerings
            .into_iter()
            .filter(|o| instance_types.contains_key(&o.instance_type))
            .collect();
        let type_labels = instance_types
            .values()
            .map(|t| (t.name.clone(), std::sync::Arc::new(instance_type_labels(t))))
            .collect();
        Catalog {
            instance_types,
            type_labels,
            offerings,
            positions: Default::default(),
            market: MarketModel::default(),
            reservations: Vec::new(),
            revision: next_revision(),
            devices: None,
            zone_names: ZoneNames::default(),
        }
        .with_market(MarketModel::default())
    }

    /// The same catalog with the account's zone names ([`ZoneNames`]) in
    /// place of the ones it had (by default, none: the default rule).
    pub fn with_zone_names(mut self, zone_names: ZoneNames) -> Catalog {
        self.zone_names = zone_names;
        self
    }

    /// The account's zone names.
    pub fn zone_names(&self) -> &ZoneNames {
        &self.zone_names
    }

    /// The name of zone `zone_id` of `region` ([`ZoneNames::name_of`]).
    pub fn zone_name(&self, region: &str, zone_id: &str) -> String {
        self.zone_names.name_of(region, zone_id)
    }

    /// The zone ID that zone name `name` names in `region`, among the
    /// region's zones ([`ZoneNames::id_of`]).
    pub fn zone_id_of(&self, region: &str, name: &str) -> Option<String> {
        self.zone_names.id_of(region, name, self.zones(region))
    }

    /// The same catalog priced with another market model: every spot
    /// offering's [`Offering::market`] is recomputed from it.
    pub fn with_market(mut self, model: MarketModel) -> Catalog {
        let on_demand: HashMap<(String, String), f64> = self
            .offerings
            .iter()
            .filter(|o| o.capacity_type == CapacityType::OnDemand)
            .map(|o| {
                (
                    (o.region.clone(), o.instance_type.clone()),
                    o.price_per_hour,
                )
            })
            .collect();
        for o in &mut self.offerings {
            o.market = match o.capacity_type {
                CapacityType::OnDemand | CapacityType::Reserved => None,
                CapacityType::Spot => {
                    let od = on_demand.get(&(o.region.clone(), o.instance_type.clone()));
                    let facts = PoolFacts {
                        family: self
                            .instance_types
                            .get(&o.instance_type)
                            .map_or("", |t| t.family.as_str()),
                        bucket: o.interruption_bucket,
                        spot_discount: od
                            .filter(|od| **od > 0.0)
                            .map(|od| 1.0 - o.price_per_hour / od),
                    };
                    Some(model.pool(&o.instance_type, &o.zone_id, &facts))
                }
            };
        }
        self.market = model;
        self.revision = next_revision();
        self
    }

    /// The same catalog with each offering priced at `price(offering)`
    /// (spot markets recomputed): the simulator's lower bound prices each
    /// offering at the lowest a scenario's price changes take it to.
    pub fn repriced(mut self, price: impl Fn(&Offering) -> f64) -> Catalog {
        for o in &mut self.offerings {
            o.price_per_hour = price(o);
        }
        let market = self.market.clone();
        self.with_market(market)
    }

    /// This catalog's revision: equal for a catalog and its clones, new for
    /// every catalog built or repriced since, so the spot markets of two
    /// catalogs with the same revision are the same.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The same catalog selling `reservations` as reserved offerings, in
    /// place of any it sold before: one offering per reservation that can
    /// take a launch at `now` and keep it at least `lead` before its end
    /// ([`Reservation::unusable_at`]) and whose instance type the catalog
    /// knows, priced at the reservation's stated price (0: already paid).
    pub fn with_reservations(
        mut self,
        reservations: &[Reservation],
        now: chrono::DateTime<chrono::Utc>,
        lead: chrono::TimeDelta,
    ) -> Catalog {
        // A built index stays while every offering it covers does (reserved
        // ones come after the others, as this method adds them); clones
        // share it. One not built yet is not shared: this catalog's
        // offerings are no longer its clones'.
        let keep = self.positions.get().is_some_and(|p| {
            !self.offerings[..p.covers]
                .iter()
                .any(|o| o.capacity_type == CapacityType::Reserved)
        });
        if !keep {
            self.positions = Default::default();
        }
        self.offerings
            .retain(|o| o.capacity_type != CapacityType::Reserved);
        self.reservations = reservations.to_vec();
        for r in reservations {
            if r.unusable_at(now, lead).is_some()
                || !self.instance_types.contains_key(&r.instance_type)
            {
                continue;
            }
            self.offerings.push(r.offering());
        }
        self
    }

    /// Every reservation the catalog was given, usable now or not.
    pub fn reservations(&self) -> &[Reservation] {
        &self.reservations
    }

    /// The reservation of that ID, usable now or not.
    pub fn reservation(&self, id: &str) -> Option<&Reservation> {
        self.reservations.iter().find(|r| r.id == id)
    }

    /// The market model the catalog prices spot risk with.
    pub fn market_model(&self) -> &MarketModel {
        &self.market
    }

    /// The spot market of pool `(instance_type, zone)`: the spot
    /// offering's, or, where the catalog sells no spot there, the model's
    /// figure for a pool it knows nothing about (worst bucket, no discount).
    pub fn market(&self, instance_type: &str, zone: &str) -> PoolMarket {
        let spot = self.offerings.iter().find(|o| {
            o.capacity_type == CapacityType::Spot
                && o.instance_type == instance_type
                && o.zone_id == zone
        });
        match spot.and_then(|o| o.market.clone()) {
            Some(m) => m,
            None => {
                let family = self
                    .instance_types
                    .get(instance_type)
                    .map_or("", |t| t.family.as_str());
                let facts = PoolFacts {
                    family,
                    bucket: None,
                    spot_discount: None,
                };
                self.market.pool(instance_type, zone, &facts)
            }
        }
    }

    /// The same catalog with `extra` device data laid over the embedded
    /// data (a cluster's additions: [`DeviceData::merged`]).
    /// It is a new revision: what was matched against the old templates is
    /// matched again.
    pub fn with_devices(mut self, extra: &DeviceData) -> Catalog {
        self.devices = Some(std::sync::Arc::new(DeviceData::embedded().merged(extra)));
        self.revision = next_revision();
        self
    }

    /// The same catalog with the device data `other` has (its cluster's
    /// additions, if any): a catalog rebuilt from another, with new prices,
    /// keeps what the cluster said of its devices.
    pub fn with_devices_of(mut self, other: &Catalog) -> Catalog {
        self.devices = other.devices.clone();
        self
    }

    /// The device data the catalog's templates are made of.
    pub fn device_data(&self) -> std::sync::Arc<DeviceData> {
        self.devices.clone().unwrap_or_else(DeviceData::embedded)
    }

    /// The devices the DRA drivers would publish on a node of `it`, its
    /// GPUs laid out as `layout` says (whole, partitioned into a MIG
    /// profile, or shared: [`DeviceData::templates`]).
    pub fn device_templates(
        &self,
        it: &InstanceType,
        layout: devices::GpuLayout<'_>,
    ) -> Vec<DeviceTemplate> {
        match &self.devices {
            Some(d) => d.templates(it, layout),
            None => DeviceData::embedded().templates(it, layout),
        }
    }

    /// The instance type of that name.
    pub fn instance_type(&self, name: &str) -> Option<&InstanceType> {
        self.instance_types.get(name)
    }

    /// The labels a node of instance type `name` carries because of its
    /// type ([`instance_type_labels`]), if the catalog knows the type.
    pub fn type_labels(&self, name: &str) -> Option<&std::sync::Arc<BTreeMap<String, String>>> {
        self.type_labels.get(name)
    }

    /// Every instance type, by name.
    pub fn instance_types(&self) -> impl Iterator<Item = &InstanceType> {
        self.instance_types.values()
    }

    /// Every offering in every region.
    pub fn offerings(&self) -> &[Offering] {
        &self.offerings
    }

    /// The offerings of one region.
    pub fn offerings_in<'a>(
        &'a self,
        region: &str,
    ) -> impl Iterator<Item = &'a Offering> + use<'a> {
        let at = self
            .region_positions(region)
            .map_or(&[][..], |r| r.all.as_slice());
        self.found(at, &|o| o.region == region)
    }

    /// The offerings at positions `at` of the index, then those after what
    /// the index covers that `keep` keeps (most often none): in the
    /// catalog's order.
    fn found<'a>(
        &'a self,
        at: &'a [usize],
        keep: &dyn Fn(&Offering) -> bool,
    ) -> impl Iterator<Item = &'a Offering> + use<'a> {
        let rest: Vec<usize> = (self.positions().covers..self.offerings.len())
            .filter(|&i| keep(&self.offerings[i]))
            .collect();
        at.iter().copied().chain(rest).map(|i| &self.offerings[i])
    }

    /// The index of one region's offerings, if it has any.
    fn region_positions(&self, region: &str) -> Option<&RegionPositions> {
        self.positions().regions.get(region)
    }

    /// [`Catalog::positions`], made on first use.
    fn positions(&self) -> &Positions {
        self.positions.get_or_init(|| {
            let mut out = Positions {
                covers: self.offerings.len(),
                regions: Fast::default(),
            };
            for (i, o) in self.offerings.iter().enumerate() {
                let r = match out.regions.get_mut(&o.region) {
                    Some(r) => r,
                    None => out.regions.entry(o.region.clone()).or_default(),
                };
                r.all.push(i);
                if o.reservation.is_some() {
                    r.reserved.push(i);
                }
                match r.by_type.get_mut(&o.instance_type) {
                    Some(t) => t.push(i),
                    None => {
                        r.by_type.insert(o.instance_type.clone(), vec![i]);
                    }
                }
            }
            out
        })
    }

    /// The reserved offerings in one region (capacity reservations and
    /// blocks), in the catalog's order. Every plan asks this, so they are
    /// indexed: few of the region's offerings are reserved.
    pub fn reserved_offerings_in<'a>(
        &'a self,
        region: &str,
    ) -> impl Iterator<Item = &'a Offering> + use<'a> {
        let at = self
            .region_positions(region)
            .map_or(&[][..], |r| r.reserved.as_slice());
        self.found(at, &|o| o.reservation.is_some() && o.region == region)
    }

    /// The offerings of one instance type in one region (every zone, both
    /// capacity types).
    pub fn offerings_of<'a>(
        &'a self,
        region: &str,
        instance_type: &str,
    ) -> impl Iterator<Item = &'a Offering> + use<'a> {
        let at = self
            .region_positions(region)
            .and_then(|r| r.by_type.get(instance_type))
            .map_or(&[][..], Vec::as_slice);
        self.found(at, &|o| {
            o.region == region && o.instance_type == instance_type
        })
    }

    /// The cheapest offering of a type in a region for one capacity type; on
    /// a tie, the first zone in zone-ID order.
    pub fn cheapest_offering(
        &self,
        region: &str,
        instance_type: &str,
        capacity_type: CapacityType,
    ) -> Option<&Offering> {
        self.offerings_of(region, instance_type)
            .filter(|o| o.capacity_type == capacity_type)
            .min_by(|a, b| {
                a.price_per_hour
                    .total_cmp(&b.price_per_hour)
                    .then_with(|| a.zone_id.cmp(&b.zone_id))
            })
    }

    /// The cheapest spot offering of a type in a region, if it has any.
    pub fn cheapest_spot(&self, region: &str, instance_type: &str) -> Option<&Offering> {
        self.cheapest_offering(region, instance_type, CapacityType::Spot)
    }

    /// The on-demand price of a type in a region (the same in every zone), if
    /// it is sold on demand there.
    pub fn on_demand_price(&self, region: &str, instance_type: &str) -> Option<f64> {
        self.cheapest_offering(region, instance_type, CapacityType::OnDemand)
            .map(|o| o.price_per_hour)
    }

    /// Instance types with at least one offering in the region, by name.
    pub fn instance_types_in(&self, region: &str) -> Vec<&InstanceType> {
        let mut names: Vec<&str> = self
            .offerings_in(region)
            .map(|o| o.instance_type.as_str())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|n| self.instance_types.get(n))
            .collect()
    }

    /// Regions that have at least one offering, sorted.
    pub fn regions(&self) -> Vec<&str> {
        let mut r: Vec<&str> = self.offerings.iter().map(|o| o.region.as_str()).collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    /// Zone IDs of a region that have at least one offering, sorted.
    pub fn zones<'a>(&'a self, region: &'a str) -> Vec<&'a str> {
        let mut z: Vec<&str> = self
            .offerings_in(region)
            .map(|o| o.zone_id.as_str())
            .collect();
        z.sort_unstable();
        z.dedup();
        z
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`Catalog::offerings_in`] and [`Catalog::offerings_of`] answer
    /// from their index, as a scan of every offering would.
    fn scanned<'a>(c: &'a Catalog, region: &str, ty: Option<&str>) -> Vec<&'a Offering> {
        c.offerings()
            .iter()
            .filter(|o| o.region == region && ty.is_none_or(|t| o.instance_type == t))
            .collect()
    }

    #[test]
    fn the_offerings_of_a_region_type_or_reservation_are_the_scans_in_order_and_follow_reservations(
    ) {
        let c = Catalog::embedded().unwrap();
        let regions = c.regions();
        assert!(regions.len() > 1, "{regions:?}");
        for region in regions.iter().take(3) {
            let all: Vec<&Offering> = c.offerings_in(region).collect();
            assert!(!all.is_empty());
            assert_eq!(all, scanned(&c, region, None));
            for ty in ["g5.xlarge", "p5.48xlarge", "no-such.type"] {
                let of: Vec<&Offering> = c.offerings_of(region, ty).collect();
                assert_eq!(of, scanned(&c, region, Some(ty)), "{region} {ty}");
            }
        }
        assert_eq!(c.offerings_in("no-such-region").count(), 0);
        // A reservation's offering is found once the catalog sells it.
        let now = chrono::DateTime::from_timestamp(1_780_000_000, 0).unwrap();
        let block = Reservation {
            id: "cr-1".into(),
            kind: ReservationKind::CapacityBlock,
            instance_type: "p5.48xlarge".into(),
            region: "us-east-1".into(),
            zone_id: "use1-az1".into(),
            total: 2,
            available: 2,
            start: None,
            end: Some(now + chrono::TimeDelta::days(2)),
            price_per_hour: 0.0,
        };
        let lead = chrono::TimeDelta::hours(1);
        let p5 = |c: &Catalog| {
            let of: Vec<Offering> = c
                .offerings_of("us-east-1", "p5.48xlarge")
                .cloned()
                .collect();
            let scan: Vec<Offering> = scanned(c, "us-east-1", Some("p5.48xlarge"))
                .into_iter()
                .cloned()
                .collect();
            assert_eq!(of, scan);
            let all: Vec<&Offering> = c.offerings_in("us-east-1").collect();
            assert_eq!(all, scanned(c, "us-east-1", None));
            let reserved_in: Vec<&Offering> = c.reserved_offerings_in("us-east-1").collect();
            let reserved_scan: Vec<&Offering> = scanned(c, "us-east-1", None)
                .into_iter()
                .filter(|o| o.reservation.is_some())
                .collect();
            assert_eq!(reserved_in, reserved_scan);
            let reserved = of
                .iter()
                .filter(|o| o.capacity_type == CapacityType::Reserved)
                .count();
            assert_eq!(reserved, reserved_in.len());
            (of.len(), reserved)
        };
        let (before, none) = p5(&c);
        assert_eq!(none, 0);
        // Built on `c`, shared with its clone, kept by the reservations.
        let base = c.clone();
        let r = c.with_reservations(std::slice::from_ref(&block), now, lead);
        assert_eq!(p5(&r), (before + 1, 1));
        assert_eq!(p5(&base), (before, 0));
        assert_eq!(p5(&r.with_reservations(&[], now, lead)), (before, 0));
        // Built with a reservation in it, then without: rebuilt.
        let fresh =
            Catalog::embedded()
                .unwrap()
                .with_reservations(std::slice::from_ref(&block), now, lead);
        assert_eq!(p5(&fresh), (before + 1, 1));
        let renewed = fresh.clone().with_reservations(&[block], now, lead);
        assert_eq!(p5(&renewed), (before + 1, 1));
        assert_eq!(p5(&fresh.with_reservations(&[], now, lead)), (before, 0));
    }
}
