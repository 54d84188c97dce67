//! CEL device selectors: compiled once each ([`Selectors`]), evaluated
//! against device templates as the scheduler evaluates them against the
//! devices of a ResourceSlice, with the Kubernetes CEL libraries DRA
//! selectors use (`quantity`, `semver`, strings, lists: `kube-cel`). The
//! input is the object `device` with `driver`, `attributes` and
//! `capacity` grouped by domain, and `allowMultipleAllocations`.
//!
//! An attribute set only on the node (a UUID, a driver version) is not in
//! a template: a selector that names one is [`Outcome::Unknown`], decided
//! neither way (the claim is not planned on that type, and the reason says
//! why), never guessed.

use crate::catalog::devices::{Attribute, AttributeValue, DeviceTemplate};
use cel::objects::{Key, Map, Value};
use kube_cel::KubeCelExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// A compiled selector.
#[derive(Debug, Clone)]
pub struct Selector {
    /// The expression as written.
    pub expression: String,
    program: Arc<cel::Program>,
}

/// Functions and macros a selector may call: standard CEL and the
/// Kubernetes libraries (the names `cel` and `kube-cel` register).
const FUNCTIONS: &[&str] = &[
    // Macros and standard functions.
    "has",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "max",
    "min",
    "duration",
    "timestamp",
    "optional.none",
    "optional.of",
    "optional.ofNonZeroValue",
    "value",
    "hasValue",
    "or",
    "orValue",
    // Kubernetes: quantity.
    "quantity",
    "isQuantity",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "sign",
    "add",
    "sub",
    "compareTo",
    "isGreaterThan",
    "isLessThan",
    // Kubernetes: semver.
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    // Kubernetes: strings and lists.
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "reverse",
    "strings.quote",
    "format",
    "isSorted",
    "sum",
    "distinct",
    "flatten",
    "first",
    "last",
    "slice",
    "sort",
    "lists.range",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    // Kubernetes: regex, math.
    "find",
    "findAll",
    "math.greatest",
    "math.least",
    "math.abs",
    "math.ceil",
    "math.floor",
    "math.round",
    "math.trunc",
    "math.sign",
    "math.isInf",
    "math.isNaN",
    "math.isFinite",
];

/// Compiles a selector.
///
/// # Errors
/// The expression does not parse, names a variable other than `device`,
/// or calls a function the environment does not have.
pub fn compile(expression: &str) -> Result<Selector, String> {
    let program = cel::Program::compile(expression)
        .map_err(|e| format!("does not compile: {}", e.to_string().replace('\n', "; ")))?;
    let refs = program.references();
    let mut vars: Vec<&str> = refs.variables();
    vars.retain(|v| *v != "device");
    vars.sort_unstable();
    if let Some(v) = vars.first() {
        return Err(format!(
            "does not compile: undeclared reference to {v:?} (a device selector sees only `device`)"
        ));
    }
    let mut unknown: Vec<&str> = refs
        .functions()
        .into_iter()
        // Operators (`_==_`, `_[_]`, `!_`) are the language's own.
        .filter(|f| f.starts_with(|c: char| c.is_ascii_alphabetic()))
        .filter(|f| !FUNCTIONS.contains(f))
        .collect();
    unknown.sort_unstable();
    if let Some(f) = unknown.first() {
        return Err(format!("does not compile: unknown function {f}"));
    }
    Ok(Selector {
        expression: expression.to_string(),
        program: Arc::new(program),
    })
}

/// Selectors compiled once each, by expression.
#[derive(Debug, Default)]
pub struct Selectors {
    compiled: HashMap<String, Result<Selector, String>>,
}

impl Selectors {
    /// The compiled selector of `expression` (compiled on first use).
    ///
    /// # Errors
    /// Why it does not compile (see [`compile`]).
    pub fn get(&mut self, expression: &str) -> Result<Selector, String> {
        self.compiled
            .entry(expression.to_string())
            .or_insert_with(|| compile(expression))
            .clone()
    }
}

/// What a selector says of a device template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every device of the template is selected.
    True,
    /// None is.
    False,
    /// It depends on an attribute set only on the node (named).
    Unknown(String),
    /// Evaluating failed (the scheduler aborts the claim's allocation on a
    /// runtime error): the message.
    Error(String),
}

/// The evaluation environment: values built once and outcomes by
/// selector and template (the CEL context with the Kubernetes libraries is
/// made when a selector is first evaluated: it cannot be shared between
/// threads, and an environment is kept across the controller's rounds).
#[derive(Default)]
pub struct Env {
    /// `quantity(...)` and `semver(...)` values by their text.
    values: HashMap<String, Value>,
    /// Outcomes by (expression, template).
    outcomes: HashMap<(String, u64), Outcome>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("outcomes", &self.outcomes.len())
            .finish()
    }
}

fn hash_of(t: &DeviceTemplate) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    // Count and source do not change what a selector sees.
    BuildHasherDefault::<DefaultHasher>::default().hash_one((&t.driver, &t.attributes, &t.capacity))
}

impl Env {
    /// A fresh environment.
    pub fn new() -> Env {
        Env::default()
    }

    /// A value made by a one-call program (`quantity('80Gi')`), once.
    fn made(&mut self, root: &cel::Context, call: String) -> Result<Value, String> {
        if let Some(v) = self.values.get(&call) {
            return Ok(v.clone());
        }
        let v = cel::Program::compile(&call)
            .map_err(|e| e.to_string())?
            .execute(root)
            .map_err(|e| format!("{call}: {e}"))?;
        self.values.insert(call, v.clone());
        Ok(v)
    }

    fn attribute_value(
        &mut self,
        root: &cel::Context,
        v: &AttributeValue,
    ) -> Result<Value, String> {
        Ok(match v {
            AttributeValue::Bool(b) => Value::Bool(*b),
            AttributeValue::Int(i) => Value::Int(*i),
            AttributeValue::String(s) => Value::String(Arc::new(s.clone())),
            AttributeValue::Version { version } => {
                self.made(root, format!("semver('{version}')"))?
            }
        })
    }

    /// The `device` object of a template (run-time attributes left out).
    fn device(&mut self, root: &cel::Context, t: &DeviceTemplate) -> Result<Value, String> {
        let mut attributes: HashMap<Key, HashMap<Key, Value>> = HashMap::new();
        for (name, a) in &t.attributes {
            let Attribute::Known(v) = a else { continue };
            let (domain, id) = split(name, &t.driver);
            let v = self.attribute_value(root, v)?;
            attributes
                .entry(key(domain))
                .or_default()
                .insert(key(id), v);
        }
        let mut capacity: HashMap<Key, HashMap<Key, Value>> = HashMap::new();
        for (name, q) in &t.capacity {
            let (domain, id) = split(name, &t.driver);
            let v = self.made(root, format!("quantity('{q}')"))?;
            capacity.entry(key(domain)).or_default().insert(key(id), v);
        }
        let nested = |m: HashMap<Key, HashMap<Key, Value>>| -> Value {
            Value::Map(Map {
                map: Arc::new(
                    m.into_iter()
                        .map(|(k, v)| (k, Value::Map(Map { map: Arc::new(v) })))
                        .collect(),
                ),
            })
        };
        let mut device: HashMap<Key, Value> = HashMap::new();
        device.insert(key("driver"), Value::String(Arc::new(t.driver.clone())));
        device.insert(key("attributes"), nested(attributes));
        device.insert(key("capacity"), nested(capacity));
        device.insert(key("allowMultipleAllocations"), Value::Bool(false));
        Ok(Value::Map(Map {
            map: Arc::new(device),
        }))
    }

    /// What `selector` says of the devices of `t` (evaluated once per
    /// distinct template).
    pub fn eval(&mut self, selector: &Selector, t: &DeviceTemplate) -> Outcome {
        let k = (selector.expression.clone(), hash_of(t));
        if let Some(o) = self.outcomes.get(&k) {
            return o.clone();
        }
        let o = self.eval_fresh(selector, t);
        self.outcomes.insert(k, o.clone());
        o
    }

    fn eval_fresh(&mut self, selector: &Selector, t: &DeviceTemplate) -> Outcome {
        if let Some(name) = run_time_reference(&selector.expression, t) {
            return Outcome::Unknown(name);
        }
        let root = cel::Context::default().with_all();
        let device = match self.device(&root, t) {
            Ok(d) => d,
            Err(e) => return Outcome::Error(e),
        };
        let mut ctx = root.new_inner_scope();
        ctx.add_variable_from_value("device", device);
        match selector.program.execute(&ctx) {
            Ok(Value::Bool(true)) => Outcome::True,
            Ok(Value::Bool(false)) => Outcome::False,
            Ok(other) => Outcome::Error(format!("evaluates to {other:?}, not a bool")),
            Err(e) => Outcome::Error(e.to_string()),
        }
    }
}

fn key(s: &str) -> Key {
    Key::String(Arc::new(s.to_string()))
}

/// `(domain, id)` of a qualified attribute name.
fn split<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.rsplit_once('/').unwrap_or((driver, name))
}

/// The run-time attribute of `t` that `expression` names, if any: its id
/// as a field (`.driverVersion`) or a key (`['driverVersion']`).
fn run_time_reference(expression: &str, t: &DeviceTemplate) -> Option<String> {
    let names: BTreeSet<&str> = t
        .attributes
        .iter()
        .filter(|(_, a)| matches!(a, Attribute::RunTime { .. }))
        .map(|(n, _)| n.as_str())
        .collect();
    names.into_iter().find_map(|name| {
        let (_, id) = split(name, &t.driver);
        let named = [format!(".{id}"), format!("'{id}'"), format!("\"{id}\"")]
            .iter()
            .any(|p| {
                expression.match_indices(p.as_str()).any(|(i, _)| {
                    // `.uuid` but not `.uuidPrefix`.
                    !expression[i + p.len()..]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
            });
        named.then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, DeviceData};

    fn template(name: &str) -> DeviceTemplate {
        let c = Catalog::embedded().unwrap();
        DeviceData::embedded()
            .templates(
                c.instance_type(name).unwrap(),
                crate::catalog::GpuLayout::Whole,
            )
            .remove(0)
    }

    fn eval(expr: &str, t: &DeviceTemplate) -> Outcome {
        Env::new().eval(&compile(expr).unwrap(), t)
    }

    #[test]
    fn selectors_see_attributes_capacities_versions_and_quantities_as_the_scheduler_does() {
        let h100 = template("p5.48xlarge");
        let a10g = template("g5.xlarge");
        let class = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'";
        assert_eq!(eval(class, &h100), Outcome::True);
        let name = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'";
        assert_eq!(eval(name, &h100), Outcome::True);
        assert_eq!(eval(name, &a10g), Outcome::False);
        let big = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0";
        assert_eq!(eval(big, &h100), Outcome::True);
        assert_eq!(eval(big, &a10g), Outcome::False);
        let hopper = "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.9.0'))";
        assert_eq!(eval(hopper, &h100), Outcome::True);
        assert_eq!(eval(hopper, &a10g), Outcome::False);
        let strings =
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('h100')";
        assert_eq!(eval(strings, &h100), Outcome::True);
    }

    #[test]
    fn a_selector_on_an_attribute_set_on_the_node_is_unknown_not_guessed() {
        let h100 = template("p5.48xlarge");
        let o = eval(
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
            &h100,
        );
        assert_eq!(o, Outcome::Unknown("gpu.nvidia.com/driverVersion".into()));
        // A missing attribute is an error, as it is for the scheduler.
        let o = eval("device.attributes['gpu.nvidia.com'].colour == 'red'", &h100);
        assert!(matches!(o, Outcome::Error(_)), "{o:?}");
    }

    #[test]
    fn the_environment_and_compiled_selectors_can_be_kept_across_threads() {
        fn send<T: Send + Sync>() {}
        send::<Env>();
        send::<Selectors>();
        send::<crate::cluster::dra::Resolver>();
    }

    #[test]
    fn a_selector_that_does_not_compile_says_why() {
        assert!(compile("device.attributes[")
            .unwrap_err()
            .contains("does not compile"));
        let e = compile("devise.driver == 'x'").unwrap_err();
        assert!(e.contains("\"devise\""), "{e}");
        let e = compile("device.driver.shout() == 'X'").unwrap_err();
        assert!(e.contains("unknown function shout"), "{e}");
        let mut s = Selectors::default();
        assert!(s.get("device.driver == 'a'").is_ok());
        assert!(s.get("device.driver == 'a'").is_ok(), "compiled once, kept");
    }
}
