//! Resource arithmetic: Kubernetes quantities parsed into integers in
//! canonical units (CPU in millicores, memory and storage in bytes, everything
//! else in whole units), and resource lists that add, subtract and compare.

use std::borrow::Cow;
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

/// A resource name: the well-known ones are not allocated.
type Name = Cow<'static, str>;

/// Resource names common enough to be worth not allocating: every pod has
/// some of them, and a controller's index holds a list per pod and node.
const WELL_KNOWN: [&str; 9] = [
    CPU,
    MEMORY,
    PODS,
    EPHEMERAL_STORAGE,
    crate::api::labels::RESOURCE_GPU,
    crate::api::labels::RESOURCE_GPU_SHARED,
    crate::api::labels::RESOURCE_NEURON,
    crate::api::labels::RESOURCE_NEURONCORE,
    crate::api::labels::RESOURCE_EFA,
];

fn name_of(resource: &str) -> Name {
    WELL_KNOWN
        .iter()
        .find(|k| **k == resource)
        .map_or_else(|| Cow::Owned(resource.to_string()), |k| Cow::Borrowed(*k))
}

/// True when two resource names are equal; the well-known ones are the same
/// `&'static str`, which is checked first.
fn same_name(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

/// A list of resources in canonical units. Absent means zero.
///
/// Kept as a vector sorted by name without zero amounts (a pod asks for a
/// handful of resources: a map's node and a string per name cost several
/// times more). It compares, orders, hashes and iterates as a map from
/// name to amount would: by name, then amount.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resources(Vec<(Name, i64)>);

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Map<'a>(&'a Resources);
        impl fmt::Debug for Map<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.iter()).finish()
            }
        }
        f.debug_tuple("Resources").field(&Map(self)).finish()
    }
}

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

    fn position(&self, name: &str) -> Result<usize, usize> {
        // A well-known name is the same `&'static str` in every list: asked
        // with one (as the planner's loops do, with names read from other
        // lists), it is found by address without comparing strings.
        if let Some(i) = self
            .0
            .iter()
            .position(|(k, _)| std::ptr::eq(k.as_ref(), name))
        {
            return Ok(i);
        }
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(name))
    }

    /// Sets one resource (zero removes it).
    pub fn set(&mut self, name: &str, value: i64) {
        match (self.position(name), value) {
            (Ok(i), 0) => {
                self.0.remove(i);
            }
            // No new name when the resource is already there: add and sub
            // run in the simulator's inner loops.
            (Ok(i), _) => self.0[i].1 = value,
            (Err(_), 0) => {}
            (Err(i), _) => self.0.insert(i, (name_of(name), value)),
        }
    }

    /// The amount of one resource (0 when absent).
    pub fn get(&self, name: &str) -> i64 {
        self.position(name).map_or(0, |i| self.0[i].1)
    }

    /// Resources with a non-zero amount, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), *v))
    }

    /// True when every amount is zero.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds `other` in place (saturating: amounts come from pods, and the
    /// sum of a tenant's huge requests must not overflow).
    pub fn add(&mut self, other: &Resources) {
        for (k, v) in other.iter() {
            let n = self.get(k).saturating_add(v);
            self.set(k, n);
        }
    }

    /// Subtracts `other` in place (amounts may go negative: overcommitted;
    /// saturating like [`Resources::add`]).
    pub fn sub(&mut self, other: &Resources) {
        for (k, v) in other.iter() {
            let n = self.get(k).saturating_sub(v);
            self.set(k, n);
        }
    }

    /// `self` minus `other`.
    pub fn minus(&self, other: &Resources) -> Resources {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// `self` with every negative amount (overcommitted) raised to zero.
    pub fn at_least_zero(mut self) -> Resources {
        // Zero amounts are not stored: keeping the positive ones is it.
        self.0.retain(|(_, v)| *v > 0);
        self
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

    /// `self` times `n` (saturating).
    pub fn times(&self, n: i64) -> Resources {
        if n == 0 {
            return Resources::new();
        }
        Resources(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_mul(n)))
                .collect(),
        )
    }

    /// Each of `self`'s resources with its amount in `self` and in `other`
    /// (0 when `other` lacks it), in name order: what `other.get(k)` per
    /// name would give, in one walk of both sorted lists. Fitting a request
    /// into a node runs in the planner's and the simulator's inner loops,
    /// and most names there are the same well-known `&'static str`, so the
    /// names' addresses are compared before their bytes.
    fn against<'a, 'b>(
        &'a self,
        other: &'b Resources,
    ) -> impl Iterator<Item = (&'a str, i64, i64)> + use<'a, 'b> {
        let mut rest = other.0.as_slice();
        self.0.iter().map(move |(k, v)| {
            let k = k.as_ref();
            loop {
                match rest.first() {
                    Some((o, ov)) if same_name(o, k) => {
                        rest = &rest[1..];
                        return (k, *v, *ov);
                    }
                    Some((o, _)) if o.as_ref() < k => rest = &rest[1..],
                    _ => return (k, *v, 0),
                }
            }
        })
    }

    /// True when a request of `self` fits in `capacity` (every requested
    /// resource, including ones `capacity` lacks, is within it).
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.against(capacity).all(|(_, v, c)| v <= c)
    }

    /// The first requested resource that exceeds `capacity`, if any.
    pub fn first_shortfall<'a>(&'a self, capacity: &Resources) -> Option<&'a str> {
        self.against(capacity)
            .find(|(_, v, c)| v > c)
            .map(|(k, _, _)| k)
    }

    /// GPUs in the list: whole GPUs count one each, a MIG instance `Ng.*`
    /// counts N/7 of a GPU, whether the device plugin's (`nvidia.com/gpu`,
    /// `nvidia.com/mig-*`) or the DRA driver's (`gpu.nvidia.com/gpu`,
    /// `gpu.nvidia.com/mig-*`). Time-sliced shares (`nvidia.com/gpu.shared`)
    /// are not counted: how big a share is depends on the pool's replicas,
    /// which the list does not know.
    pub fn gpus(&self) -> f64 {
        self.iter()
            .map(|(k, v)| v as f64 * gpu_fraction(k).unwrap_or(0.0))
            .sum()
    }

    /// What counts against a limit on `key`: its amount, and for a device
    /// plugin's resource the same devices offered through their DRA driver
    /// (a limit on `nvidia.com/gpu` counts `gpu.nvidia.com/gpu` too; MIG
    /// profiles, Neuron devices and EFA interfaces likewise).
    pub fn limited(&self, key: &str) -> i64 {
        use crate::api::labels as l;
        use crate::catalog::devices::{resource_name, EFA_DRIVER, NEURON_DRIVER, NVIDIA_DRIVER};
        let dra = if key == l::RESOURCE_GPU {
            Some(resource_name(NVIDIA_DRIVER, "gpu"))
        } else if let Some(profile) = key.strip_prefix(l::RESOURCE_MIG_PREFIX) {
            Some(resource_name(NVIDIA_DRIVER, &format!("mig-{profile}")))
        } else if key == l::RESOURCE_NEURON {
            Some(resource_name(NEURON_DRIVER, "neuron"))
        } else if key == l::RESOURCE_EFA {
            Some(resource_name(EFA_DRIVER, "efa"))
        } else {
            None
        };
        self.get(key)
            .saturating_add(dra.map_or(0, |d| self.get(&d)))
    }

    /// Accelerator devices in the list (GPUs, time-sliced shares, MIG
    /// instances, Neuron devices; the device plugin's or a DRA driver's),
    /// one each: the packing order's first key.
    pub fn accelerator_devices(&self) -> i64 {
        use crate::api::labels as l;
        self.iter()
            .filter(|(k, _)| {
                gpu_fraction(k).is_some()
                    || *k == l::RESOURCE_GPU_SHARED
                    || *k == l::RESOURCE_NEURON
                    || k.starts_with(crate::catalog::devices::NEURON_DRIVER)
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// How many copies of `self` fit in `capacity` (`u32::MAX` for an empty
    /// request).
    pub fn copies_in(&self, capacity: &Resources) -> u32 {
        self.against(capacity)
            .filter(|(_, v, _)| *v > 0)
            .map(|(_, v, c)| (c.max(0) / v).min(u32::MAX as i64) as u32)
            .min()
            .unwrap_or(u32::MAX)
    }
}

/// The share of a GPU one unit of resource `k` is, if it is a GPU or a MIG
/// instance (see [`Resources::gpus`]).
fn gpu_fraction(k: &str) -> Option<f64> {
    use crate::api::labels as l;
    use crate::catalog::devices::NVIDIA_DRIVER;
    let dra = k
        .strip_prefix(NVIDIA_DRIVER)
        .and_then(|r| r.strip_prefix('/'));
    if k == l::RESOURCE_GPU || dra == Some("gpu") {
        return Some(1.0);
    }
    let profile = k
        .strip_prefix(l::RESOURCE_MIG_PREFIX)
        .or_else(|| dra.and_then(|r| r.strip_prefix("mig-")))?;
    let slices: f64 = profile
        .split('g')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1.0);
    Some(slices / 7.0)
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
    fn huge_requests_add_up_without_overflow() {
        let huge = Resources::parse([("memory", "9E"), ("cpu", "9E")]).unwrap();
        assert_eq!(huge.get(CPU), i64::MAX, "9E cores in millicores saturates");
        let mut used = Resources::new();
        for _ in 0..3 {
            used.add(&huge);
        }
        assert_eq!(used.get("memory"), i64::MAX);
        let mut free = Resources::new().with("memory", 1);
        free.sub(&used);
        free.sub(&used);
        assert_eq!(free.get("memory"), i64::MIN);
        assert_eq!(huge.times(4).get("memory"), i64::MAX);
        assert!(!huge.fits_in(&Resources::new().with("memory", 1 << 40)));
    }

    #[test]
    fn overcommitted_amounts_are_raised_to_zero_and_the_rest_kept() {
        let used = Resources::new().with(CPU, 3000).with("memory", 10);
        let free = Resources::new()
            .with(CPU, 2000)
            .with("memory", 50)
            .minus(&used)
            .at_least_zero();
        assert_eq!(free.get(CPU), 0);
        assert_eq!(free.get("memory"), 40);
        assert_eq!(free.iter().count(), 1);
    }

    /// The map from name to amount that `Resources` stood for before it
    /// became a sorted vector, as the model it must still agree with.
    type Model = std::collections::BTreeMap<String, i64>;

    fn random_pair(rng: &mut impl rand::Rng) -> (Resources, Model) {
        // Well-known names and others, in no particular order.
        const NAMES: [&str; 6] = [
            "pods",
            "nvidia.com/mig-1g.10gb",
            CPU,
            "nvidia.com/gpu",
            MEMORY,
            "example.com/dongle",
        ];
        let (mut r, mut m) = (Resources::new(), Model::new());
        for _ in 0..rng.random_range(0..10) {
            let name = NAMES[rng.random_range(0..NAMES.len())];
            let value = rng.random_range(-2..3);
            r.set(name, value);
            if value == 0 {
                m.remove(name);
            } else {
                m.insert(name.to_string(), value);
            }
        }
        (r, m)
    }

    fn hash_of(v: &impl std::hash::Hash) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
        BuildHasherDefault::<DefaultHasher>::default().hash_one(v)
    }

    #[test]
    fn iterates_compares_orders_and_hashes_as_a_map_of_names_to_amounts() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        for _ in 0..2000 {
            let (a, ma) = random_pair(&mut rng);
            let (b, mb) = random_pair(&mut rng);
            let listed: Vec<(String, i64)> = a.iter().map(|(k, v)| (k.to_string(), v)).collect();
            assert_eq!(listed, ma.clone().into_iter().collect::<Vec<_>>());
            assert_eq!(a.is_empty(), ma.is_empty());
            assert_eq!(
                a.get("nvidia.com/gpu"),
                ma.get("nvidia.com/gpu").copied().unwrap_or(0)
            );
            assert_eq!(a == b, ma == mb, "{a:?} {b:?}");
            assert_eq!(a.cmp(&b), ma.cmp(&mb), "{a:?} {b:?}");
            assert_eq!(hash_of(&a), hash_of(&ma), "{a:?}");
            assert_eq!(format!("{a:?}"), format!("Resources({ma:?})"));
            let sum = a.plus(&b);
            for (k, v) in sum.iter() {
                assert_eq!(v, a.get(k) + b.get(k));
            }
            assert!(sum.iter().all(|(_, v)| v != 0), "no zero amounts: {sum:?}");
        }
    }

    #[test]
    fn fitting_a_request_agrees_with_the_model_amount_by_amount() {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
        let amount = |m: &Model, k: &str| m.get(k).copied().unwrap_or(0);
        let (mut fitting, mut short) = (0, 0);
        for _ in 0..4000 {
            let (a, ma) = random_pair(&mut rng);
            let (b, mb) = random_pair(&mut rng);
            let fits = ma.iter().all(|(k, v)| *v <= amount(&mb, k));
            assert_eq!(a.fits_in(&b), fits, "{a:?} in {b:?}");
            let shortfall = ma.iter().find(|(k, v)| **v > amount(&mb, k));
            assert_eq!(
                a.first_shortfall(&b),
                shortfall.map(|(k, _)| k.as_str()),
                "{a:?} in {b:?}"
            );
            let copies = ma
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| (amount(&mb, k).max(0) / v) as u32)
                .min()
                .unwrap_or(u32::MAX);
            assert_eq!(a.copies_in(&b), copies, "{a:?} in {b:?}");
            if fits {
                fitting += 1;
            } else {
                short += 1;
            }
        }
        // Both answers were asked about, many times.
        assert!(fitting > 100 && short > 100, "{fitting} {short}");
    }

    #[test]
    fn gpus_count_the_same_through_the_device_plugin_and_dra() {
        let plugin = Resources::new()
            .with("nvidia.com/gpu", 2)
            .with("nvidia.com/mig-3g.40gb", 1);
        let dra = Resources::new()
            .with("gpu.nvidia.com/gpu", 2)
            .with("gpu.nvidia.com/mig-3g.40gb", 1);
        assert!((plugin.gpus() - (2.0 + 3.0 / 7.0)).abs() < 1e-9);
        assert_eq!(plugin.gpus(), dra.gpus());
        assert_eq!(plugin.accelerator_devices(), 3);
        assert_eq!(dra.accelerator_devices(), 3);
        let neuron = Resources::new()
            .with("aws.amazon.com/neuron", 4)
            .with("neuron.aws.com/neuron", 4)
            .with("dra.net/efa", 1);
        assert_eq!(neuron.accelerator_devices(), 8);
        assert_eq!(neuron.gpus(), 0.0);
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
