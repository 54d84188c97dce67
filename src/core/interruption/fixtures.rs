//! Fixtures shared by the tests of the decision modules: nodes, pods,
//! pools and worlds, with builder steps.

use super::super::{BoundPod, ManagedNode, OfferingKey, Pdb, Time, World};
use crate::api::{NodePool, NodePoolSpec};
use crate::catalog::{CapacityType, Catalog};
use crate::cluster::resources::{CPU, PODS};
use crate::cluster::{NodeState, Pod, Resources};

/// The region of every fixture.
pub const REGION: &str = "us-east-1";

/// `s` seconds after the fixtures' epoch.
pub fn t(s: i64) -> Time {
    chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).expect("in range")
}

/// A ready on-demand `g5.xlarge` in `use1-az1` of pool `gpu`, $1/h, with
/// 4 CPUs, 1 GPU and no pods.
pub fn node(claim: &str) -> ManagedNode {
    ManagedNode {
        claim: claim.into(),
        nodepool: "gpu".into(),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::OnDemand,
        },
        price_per_hour: 1.0,
        launched_at: t(-7200),
        ready_at: Some(t(-7000)),
        state: NodeState {
            name: claim.into(),
            nodepool: Some("gpu".into()),
            instance_type: Some("g5.xlarge".into()),
            zone: "use1-az1".into(),
            capacity_type: Some(CapacityType::OnDemand),
            labels: Default::default(),
            taints: Vec::new(),
            allocatable: Resources::new()
                .with(CPU, 4000)
                .with(crate::api::labels::RESOURCE_GPU, 1)
                .with(PODS, 110),
            used: Resources::new(),
            price_per_hour: 1.0,
            in_flight: false,
            unschedulable: false,
            capped: Default::default(),
        },
        pods: Vec::new(),
        pods_revision: 0,
        do_not_disrupt: false,
        drifted: None,
        disrupted: false,
        expire_after: None,
        termination_grace: None,
        health: Default::default(),
        gpu_idle_since: None,
    }
}

/// Builder steps on a [`ManagedNode`].
pub trait NodeExt: Sized {
    /// Bought on spot.
    fn spot(self) -> Self;
    /// Of that pool.
    fn pool(self, name: &str) -> Self;
    /// That instance type in that zone at that price.
    fn offering(self, instance_type: &str, zone: &str, price: f64) -> Self;
    /// With these pods (what they request is used).
    fn pods(self, pods: impl IntoIterator<Item = BoundPod>) -> Self;
    /// Carrying `quartermaster.dev/do-not-disrupt`.
    fn do_not_disrupt(self) -> Self;
    /// Launched but not ready yet.
    fn not_ready(self) -> Self;
    /// Cordoned (by someone: `kubectl cordon`).
    fn cordoned(self) -> Self;
    /// Cordoned and tainted `quartermaster.dev/disrupted` by us.
    fn disrupted(self) -> Self;
}

impl NodeExt for ManagedNode {
    fn spot(mut self) -> Self {
        self.offering.capacity_type = CapacityType::Spot;
        self.state.capacity_type = Some(CapacityType::Spot);
        self
    }
    fn pool(mut self, name: &str) -> Self {
        self.nodepool = name.into();
        self.state.nodepool = Some(name.into());
        self
    }
    fn offering(mut self, instance_type: &str, zone: &str, price: f64) -> Self {
        self.offering.instance_type = instance_type.into();
        self.offering.zone = zone.into();
        self.state.instance_type = Some(instance_type.into());
        self.state.zone = zone.into();
        self.price_per_hour = price;
        self.state.price_per_hour = price;
        self
    }
    fn pods(mut self, pods: impl IntoIterator<Item = BoundPod>) -> Self {
        self.pods = pods.into_iter().collect();
        self.state.used = Resources::new();
        for p in &self.pods {
            self.state.used.add(&p.pod.requests);
        }
        self
    }
    fn do_not_disrupt(mut self) -> Self {
        self.do_not_disrupt = true;
        self
    }
    fn not_ready(mut self) -> Self {
        self.ready_at = None;
        self.state.in_flight = true;
        self
    }
    fn cordoned(mut self) -> Self {
        self.state.unschedulable = true;
        self
    }
    fn disrupted(mut self) -> Self {
        self.disrupted = true;
        self.cordoned()
    }
}

/// A pod requesting one CPU, not opted in to checkpoints, without PDB.
pub fn pod(name: &str) -> BoundPod {
    BoundPod {
        pod: Pod::new(name, Resources::new().with(CPU, 1000)),
        do_not_disrupt: false,
        checkpoint_completed: None,
        started: None,
        pdb: None,
        placeholder: false,
    }
}

/// Builder steps on a [`BoundPod`].
pub trait PodExt: Sized {
    /// Opted in to checkpoint signals.
    fn checkpoints(self) -> Self;
    /// Acknowledged a checkpoint at `at`.
    fn acked(self, at: Time) -> Self;
    /// Covered by `World::pdbs[i]`.
    fn pdb(self, i: usize) -> Self;
    /// A pre-warm placeholder.
    fn placeholder(self) -> Self;
    /// Carrying `quartermaster.dev/do-not-disrupt`.
    fn do_not_disrupt(self) -> Self;
    /// Requesting `milli` millicores.
    fn cpu(self, milli: i64) -> Self;
    /// Requesting `n` GPUs.
    fn gpus(self, n: i64) -> Self;
    /// Its checkpoints take `secs` to write
    /// (`quartermaster.dev/checkpoint-duration`).
    fn checkpoint_takes(self, secs: f64) -> Self;
    /// Started on its node at `at` (`status.startTime`).
    fn started(self, at: Time) -> Self;
}

impl PodExt for BoundPod {
    fn checkpoints(mut self) -> Self {
        self.pod.checkpoints = true;
        self
    }
    fn acked(mut self, at: Time) -> Self {
        self.checkpoint_completed = Some(at);
        self
    }
    fn pdb(mut self, i: usize) -> Self {
        self.pdb = Some(i);
        self
    }
    fn placeholder(mut self) -> Self {
        self.placeholder = true;
        self
    }
    fn do_not_disrupt(mut self) -> Self {
        self.do_not_disrupt = true;
        self
    }
    fn cpu(mut self, milli: i64) -> Self {
        self.pod.requests.set(CPU, milli);
        self
    }
    fn gpus(mut self, n: i64) -> Self {
        self.pod.requests.set(crate::api::labels::RESOURCE_GPU, n);
        self
    }
    fn checkpoint_takes(mut self, secs: f64) -> Self {
        self.pod.checkpoint_duration_s = Some(secs);
        self
    }
    fn started(mut self, at: Time) -> Self {
        self.started = Some(at);
        self
    }
}

/// The launches among `actions`.
pub fn launches(actions: &[crate::core::Action]) -> Vec<&crate::core::ClaimRequest> {
    actions
        .iter()
        .filter_map(|a| match a {
            crate::core::Action::Launch(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// A NodePool with the default spec changed by `edit`.
pub fn pool_with(name: &str, edit: impl FnOnce(&mut NodePoolSpec)) -> NodePool {
    let mut spec = NodePoolSpec::default();
    edit(&mut spec);
    NodePool::new(name, spec)
}

/// A PDB allowing `n` disruptions.
pub fn pdb(name: &str, n: u32) -> Pdb {
    Pdb {
        name: name.into(),
        disruptions_allowed: n,
    }
}

/// Owned parts of a [`World`].
pub struct Fixture {
    /// Catalog (empty unless a test fills it).
    pub catalog: Catalog,
    /// Pools (`gpu` with the default spec unless replaced).
    pub pools: Vec<NodePool>,
    /// Nodes.
    pub nodes: Vec<ManagedNode>,
    /// PDBs.
    pub pdbs: Vec<Pdb>,
}

impl Fixture {
    /// These nodes, pool `gpu` with defaults, an empty catalog, no PDBs.
    pub fn new(nodes: impl IntoIterator<Item = ManagedNode>) -> Fixture {
        Fixture {
            catalog: Catalog::default(),
            pools: vec![pool_with("gpu", |_| {})],
            nodes: nodes.into_iter().collect(),
            pdbs: Vec::new(),
        }
    }

    /// The world the decisions read.
    pub fn world(&self) -> World<'_> {
        World {
            nodes_revision: 0,
            catalog: &self.catalog,
            region: REGION,
            pools: &self.pools,
            pending: &[],
            nodes: &self.nodes,
            pdbs: &self.pdbs,
        }
    }

    /// The node of that claim, to change it between steps.
    pub fn node_mut(&mut self, claim: &str) -> &mut ManagedNode {
        self.nodes
            .iter_mut()
            .find(|n| n.claim == claim)
            .expect("fixture node")
    }
}
