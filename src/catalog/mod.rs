//! The catalog: instance types, accelerators and offerings (type x zone x
//! capacity type) with prices and interruption rates. The default catalog is
//! embedded from `pricing-data/`; the AWS refresh (in `cloud::aws`) produces
//! the same structures. No I/O here beyond parsing embedded text.

pub mod mig;
mod types;

pub use types::*;

use std::collections::BTreeMap;

/// Instance types and the offerings that sell them.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    instance_types: BTreeMap<String, InstanceType>,
    offerings: Vec<Offering>,
}

impl Catalog {
    /// A catalog from its parts (tests and the AWS refresh build one this way).
    /// Offerings whose instance type is unknown are dropped.
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
        Catalog {
            instance_types,
            offerings,
        }
    }

    /// The instance type of that name.
    pub fn instance_type(&self, name: &str) -> Option<&InstanceType> {
        self.instance_types.get(name)
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
    pub fn offerings_in<'a>(&'a self, region: &'a str) -> impl Iterator<Item = &'a Offering> {
        self.offerings.iter().filter(move |o| o.region == region)
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
        let mut z: Vec<&str> = self.offerings_in(region).map(|o| o.zone_id.as_str()).collect();
        z.sort_unstable();
        z.dedup();
        z
    }
}
