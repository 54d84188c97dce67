//! Resource arithmetic: Kubernetes quantities parsed into integers in
//! canonical units (CPU in millicores, memory and storage in bytes, everything
//! else in whole units), and resource lists that add, subtract and compare.

use std::collections::BTreeMap;
use std::fmt;

/// Kubernetes resource name of CPU.
pub const CPU: &str = "cpu";
/// Kubernetes resource name of memory.
pub const MEMORY: &str = "memory";
/// Kubernetes resource name of local ephemeral storage.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Kubernetes resource name of the pod slots on a node.
pub const PODS: &str = "pods";

pub use crate::api::{parse_quantity, QuantityError};

/// Converts a quantity of the named resource into its canonical integer unit:
/// millicores for `cpu`, whole units (bytes, devices) otherwise, rounding up
/// as the kubelet does.
///
/// # Errors
/// When the text is not a quantity.
pub fn canonical(resource: &str, quantity: &str) -> Result<i64, QuantityError> {
    let v = parse_quantity(quantity)?;
    let scaled = if resource == CPU { v * 1000.0 } else { v };
    // Round up, but forgive float noise such as 0.1 * 1000 = 100.00000000000001.
    Ok((scaled - 1e-6).ceil() as i64)
}

/// A list of resources in canonical units. Absent means zero.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resources(BTreeMap<String, i64>);

impl Resources {
    /// No resources.
    pub fn new() -> Resources {
        Resources::default()
    }

    /// Parses a Kubernetes resource list (name -> quantity string).
    ///
    /// # Errors
    /// Names the first resource whose quantity is not valid.
    pub fn parse<'a>(
        list: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Resources, QuantityError> {
        let mut r = Resources::new();
        for (name, q) in list {
            let v = canonical(name, q).map_err(|e| QuantityError(format!("{name}={}", e.0)))?;
            r.set(name, v);
        }
        Ok(r)
    }

    /// Builder-style setter.
    pub fn with(mut self, name: &str, value: i64) -> Resources {
        self.set(name, value);
        self
    }

    /// Sets one resource (zero removes it).
    pub fn set(&mut self, name: &str, value: i64) {
        if value == 0 {
            self.0.remove(name);
        } else if let Some(v) = self.0.get_mut(name) {
            // No new key string when the resource is already there: add and
            // sub run in the simulator's inner loops.
            *v = value;
        } else {
            self.0.insert(name.to_string(), value);
        }
    }

    /// The amount of one resource (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Resources with a non-zero amount.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// True when every amount is zero.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `other` in place.
    pub fn add(&mut self, other: &Resources) {
        for (k, v) in other.iter() {
            let n = self.get(k) + v;
            self.set(k, n);
        }
    }

    /// Subtracts `other` in place (amounts may go negative: overcommitted).
    pub fn sub(&mut self, other: &Resources) {
        for (k, v) in other.iter() {
            let n = self.get(k) - v;
            self.set(k, n);
        }
    }

    /// `self` minus `other`.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// `self` plus `other`.
    pub fn plus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.add(other);
        r
    }

    /// Element-wise maximum (how init containers combine with the rest).
    pub fn max_with(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        for (k, v) in other.iter() {
            if v > r.get(k) {
                r.set(k, v);
            }
        }
        r
    }

    /// `self` times `n`.
    pub fn times(&self, n: i64) -> Resources {
        Resources(
            self.0
                .iter()
                .filter(|_| n != 0)
                .map(|(k, v)| (k.clone(), v * n))
                .collect(),
        )
    }

    /// True when a request of `self` fits in `capacity` (every requested
    /// resource, including ones `capacity` lacks, is within it).
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.iter().all(|(k, v)| v <= capacity.get(k))
    }

    /// The first requested resource that exceeds `capacity`, if any.
    pub fn first_shortfall<'a>(&'a self, capacity: &Resources) -> Option<&'a str> {
        self.iter()
            .find(|(k, v)| *v > capacity.get(k))
            .map(|(k, _)| k)
    }

    /// GPUs in the list: whole GPUs count one each, a MIG instance `Ng.*`
    /// counts N/7 of a GPU. Time-sliced shares (`nvidia.com/gpu.shared`)
    /// are not counted: how big a share is depends on the pool's replicas,
    /// which the list does not know.
    pub fn gpus(&self) -> f64 {
        use crate::api::labels as l;
        self.iter()
            .map(|(k, v)| {
                if k == l::RESOURCE_GPU {
                    v as f64
                } else if let Some(profile) = k.strip_prefix(l::RESOURCE_MIG_PREFIX) {
                    let slices: f64 = profile
                        .split('g')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(1.0);
                    v as f64 * slices / 7.0
                } else {
                    0.0
                }
            })
            .sum()
    }

    /// How many copies of `self` fit in `capacity` (`u32::MAX` for an empty
    /// request).
    pub fn copies_in(&self, capacity: &Resources) -> u32 {
        self.iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| (capacity.get(k).max(0) / v).min(u32::MAX as i64) as u32)
            .min()
            .unwrap_or(u32::MAX)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in self.iter() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            match k {
                CPU => write!(f, "cpu={}m", v)?,
                MEMORY | EPHEMERAL_STORAGE => write!(f, "{k}={}Mi", v / (1 << 20))?,
                _ => write!(f, "{k}={v}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_units_are_millicores_for_cpu_and_whole_units_otherwise() {
        assert_eq!(canonical("cpu", "500m").unwrap(), 500);
        assert_eq!(canonical("cpu", "2").unwrap(), 2000);
        assert_eq!(canonical("cpu", "0.1").unwrap(), 100);
        assert_eq!(canonical("memory", "4Gi").unwrap(), 4 << 30);
        assert_eq!(canonical("memory", "100M").unwrap(), 100_000_000);
        assert_eq!(canonical("memory", "1e3").unwrap(), 1000);
        assert_eq!(canonical("nvidia.com/gpu", "8").unwrap(), 8);
        assert!(canonical("cpu", "lots").is_err());
        assert!(canonical("cpu", "4Qi").is_err());
        assert!(canonical("cpu", "").is_err());
    }

    #[test]
    fn counts_how_many_copies_fit_by_the_scarcest_resource() {
        let pod = Resources::new().with(CPU, 1000).with("nvidia.com/gpu", 2);
        let node = Resources::new().with(CPU, 7000).with("nvidia.com/gpu", 8);
        assert_eq!(pod.copies_in(&node), 4);
        assert!(pod.fits_in(&node));
        let cpu_only = Resources::new().with(CPU, 7000);
        assert_eq!(pod.copies_in(&cpu_only), 0);
        assert_eq!(pod.first_shortfall(&cpu_only), Some("nvidia.com/gpu"));
    }

    #[test]
    fn arithmetic_drops_zero_entries() {
        let a = Resources::new().with(CPU, 1000);
        let b = a.minus(&a);
        assert!(b.is_empty());
        assert_eq!(a.times(3).get(CPU), 3000);
        assert_eq!(a.max_with(&Resources::new().with(CPU, 1500)).get(CPU), 1500);
    }
}
