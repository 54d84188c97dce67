//! The discrete-event engine: one strategy over one workload in virtual time.
//! Each step jumps to the next event (a job arriving or finishing, a cloud
//! event, a checkpoint being written, a core deadline, a sample; after a
//! round that did nothing, not to a boot milestone short of Ready or a
//! price move, which no round reads), plays the
//! kube-scheduler (binding waiting pods to Ready nodes with room, gangs
//! whole), fills the core's [`World`] (with the nodes' revision, so that the
//! core keeps what it read of nodes that did not change: `nodes`), runs
//! [`Core::decide`] and applies the actions to the simulated cloud and the
//! jobs. No decision is made here.

use super::jobs::{Finishes, JobRun, Phase};
use super::result::{LogEvent, Sample, StrategyResult, Unfinished};
use super::scenario::{Scenario, StrategyName};
use super::static_groups;
use super::workload::SimJob;
use crate::api::labels as l;
use crate::api::nodepool::CAPACITY_TYPE_KEYS;
use crate::api::NodePool;
use crate::catalog::{CapacityType, Catalog};
use crate::cloud::simulated::{CloudEvent, SimulatedCloud};
use crate::cluster::{FastSet, Operator, Pod, Requirement, Resources};
use crate::core::drift::Stamp;
use crate::core::prewarm;
use crate::core::{
    Action, BoundPod, ClaimRequest, Config, Core, DisruptionReason, ManagedNode, Notice,
    OfferingKey, Time, World,
};
use crate::plan::{pack, Strategy};
use chrono::Duration as Span;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::sync::Arc;

mod dra;
mod faults;
mod nodes;
#[cfg(test)]
mod tests;
mod waiting;

use nodes::Nodes;
use waiting::Waiting;

/// Seconds between time-series samples.
pub const SAMPLE_EVERY_S: i64 = 300;

/// The label of a `static` node group's nodes, which its jobs require.
pub const STATIC_GROUP: &str = "sim.quartermaster.dev/static-group";

/// A run that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The simulated cloud rejects the scenario's cloud settings.
    #[error("cloud settings: {0}")]
    Cloud(String),
}

/// What the engine keeps beside each node: the jobs on it and its GPUs.
#[derive(Debug, Clone, Default)]
struct NodeExtra {
    jobs: BTreeSet<usize>,
    gpus: f64,
    /// How many images had been released when it was launched.
    image: usize,
    /// Faulty since then (`faults`).
    broken_since: Option<Time>,
    /// Being rebooted.
    rebooting: bool,
    /// Its allocatable GPUs before a fault withdrew the free ones.
    gpu_allocatable: i64,
}

/// One strategy's run.
pub struct Engine<'a> {
    catalog: &'a Catalog,
    region: &'a str,
    strategy: StrategyName,
    pools: Vec<NodePool>,
    core: Core,
    cloud: SimulatedCloud,
    jobs: Vec<JobRun>,
    by_name: BTreeMap<String, usize>,
    /// The jobs of each gang (pod group), by group name.
    gangs: BTreeMap<String, Vec<usize>>,
    arrivals: usize,
    finishes: Finishes,
    acks: BinaryHeap<Reverse<(Time, usize)>>,
    /// The jobs waiting for a node, and their pods.
    waiting: Waiting,
    /// Whether a bind could place anything new: a pod started waiting, a
    /// node became Ready or room was freed since the last bind.
    bind_dirty: bool,
    /// The waiting jobs that fit no node at the last bind, and the nodes'
    /// revision that bind left. Binding only takes room, so such a job
    /// fits only a node changed since ([`ManagedNode::pods_revision`] at
    /// least that revision): most binds follow a job that finished on one
    /// node, and the jobs waiting for nodes to boot need not read the room
    /// of every other node again. Single pods only, without claims, caps or
    /// blocks: a gang's first fit is not monotone in the room, a claim's
    /// devices are booked outside the nodes, and a capped pod may be passed
    /// over by the first fit of another pod of its shape.
    unplaced: (u64, FastSet<usize>),
    /// Whether the core's last round acted. Its next round may act on what
    /// this one did (delete a node once its pods are gone), so the engine
    /// then wakes at the next event of any kind; after a round that did
    /// nothing, boot milestones and price moves wake no round
    /// ([`SimulatedCloud::next_notable_event_time`]).
    acted: bool,
    /// Tests: the core is given no revision of the nodes (it reads every
    /// node on every round) and binding forgets which jobs fit nowhere, to
    /// compare with the run that knows both.
    #[cfg(test)]
    blind: bool,
    /// Tests: waiting jobs a bind passed over as fitting nowhere still.
    #[cfg(test)]
    passed_over: std::rc::Rc<std::cell::Cell<usize>>,
    nodes: Nodes,
    now: Time,
    start: Time,
    end: Time,
    result: StrategyResult,
    next_sample: Time,
    windows_seen: BTreeSet<(String, String, Time)>,
    static_mode: bool,
    /// Interruptions and evictions of running jobs so far (for the samples).
    interruptions_so_far: u32,
    /// GPU-hours lost so far (for the samples).
    lost_gpu_hours_so_far: f64,
    /// Gangs waiting for their ProvisioningRequest.
    requests: super::provisioning::Requests,
    /// The scenario's reservations (`cloud.reservations`).
    reservations: Vec<crate::catalog::Reservation>,
    /// The catalog the core sees while reservations exist: `catalog` with
    /// what they have left now ([`super::reservations::core_catalog`]).
    reserved: Option<Catalog>,
    /// How close to its end a reservation stops taking launches.
    reservation_lead: std::time::Duration,
    /// USD paid up front for the reservations.
    upfront: f64,
    /// When new node images are released (`cloud.imageReleases`), in order.
    image_releases: Vec<Time>,
    /// How many of them have been released.
    images_released: usize,
    /// Each node's books, for where the bill went.
    books: super::bill::Books,
    /// Gang starts whose members all ran in one network block, and gang
    /// starts on nodes that all report a network topology.
    gang_blocks: (u32, u32),
    /// The scenario's CapacityBuffers.
    buffers: Vec<crate::core::buffers::Buffer>,
    /// Per scheduled buffer window seen open (buffer, window start): whether
    /// every chunk was held at every step it was open.
    buffer_windows: BTreeMap<(String, Time), bool>,
    /// Jobs a fault stopped that stay bound to their nodes (`faults`).
    stalled: BTreeMap<usize, faults::Stall>,
    /// What right-sizing job `i` saves an hour on an instance type.
    right_sizes: BTreeMap<(usize, String), f64>,
    /// The ResourceSlices the nodes' DRA drivers published (`dra`).
    dra: crate::cluster::dra::Objects,
}

impl<'a> Engine<'a> {
    /// A run of `strategy` over `jobs` (sorted by submit time).
    ///
    /// # Errors
    /// Cloud settings the simulated cloud refuses.
    pub fn new(
        scenario: &'a Scenario,
        catalog: &'a Arc<Catalog>,
        jobs: &[SimJob],
        strategy: StrategyName,
    ) -> Result<Engine<'a>, Error> {
        let start = scenario.start;
        let end = start + scenario.length();
        let mut pools = scenario.node_pools.clone();
        let mut config = Config::default();
        // Deterministic plans: no time-limited search in the simulator.
        config.planner.max_branch_and_bound_integers = 0;
        // A panic in a replay is a bug to see, not to contain.
        config.contain_panics = false;
        let mut jobs: Vec<JobRun> = jobs.iter().cloned().map(JobRun::new).collect();
        jobs.sort_by(|a, b| (a.job.submit, &a.job.pod.name).cmp(&(b.job.submit, &b.job.pod.name)));
        match strategy {
            StrategyName::Quartermaster => {}
            StrategyName::Greedy | StrategyName::Karpenter => {
                // Karpenter: cheapest fit, no risk model, no checkpoint
                // signals (workloads still checkpoint on their own).
                config.strategy = match strategy {
                    StrategyName::Karpenter => Strategy::Karpenter,
                    _ => Strategy::Greedy,
                };
                config.learn_rates = false;
                config.checkpoint_cadence = false;
                for j in &mut jobs {
                    j.job.pod.checkpoints = false;
                }
            }
            StrategyName::OnDemand | StrategyName::Static => {
                for p in &mut pools {
                    p.spec.capacity_types = vec![CapacityType::OnDemand];
                    p.spec
                        .template
                        .spec
                        .requirements
                        .retain(|r| !CAPACITY_TYPE_KEYS.contains(&r.key.as_str()));
                }
            }
        }
        let cloud_config = scenario.cloud_config().map_err(Error::Cloud)?;
        let specs = &scenario.cloud.reservations;
        let reservations = super::reservations::reservations(specs, &scenario.region, start);
        let cloud_catalog = if reservations.is_empty() {
            catalog.clone()
        } else {
            Arc::new(super::reservations::cloud_catalog(catalog, &reservations))
        };
        let reservation_lead = config.interruption.reservation_lead;
        let cloud = SimulatedCloud::new(cloud_catalog, cloud_config)
            .map_err(|e| Error::Cloud(e.to_string()))?;
        let by_name = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.job.pod.name.clone(), i))
            .collect();
        let mut gangs: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, j) in jobs.iter().enumerate() {
            if let Some(g) = &j.job.pod.group {
                gangs.entry(g.name.clone()).or_default().push(i);
            }
        }
        Ok(Engine {
            catalog,
            region: &scenario.region,
            strategy,
            pools,
            core: Core::new(config),
            cloud,
            result: StrategyResult {
                jobs_total: jobs.len() as u32,
                ..Default::default()
            },
            jobs,
            by_name,
            gangs,
            arrivals: 0,
            finishes: Finishes::default(),
            acks: BinaryHeap::new(),
            waiting: Waiting::default(),
            bind_dirty: true,
            unplaced: (0, FastSet::default()),
            acted: true,
            #[cfg(test)]
            blind: false,
            #[cfg(test)]
            passed_over: Default::default(),
            nodes: Nodes::default(),
            now: start,
            start,
            end,
            next_sample: start,
            windows_seen: BTreeSet::new(),
            static_mode: strategy == StrategyName::Static,
            interruptions_so_far: 0,
            lost_gpu_hours_so_far: 0.0,
            requests: Default::default(),
            upfront: super::reservations::upfront_cost(specs),
            reservations,
            reserved: None,
            reservation_lead,
            image_releases: scenario.image_releases(),
            images_released: 0,
            books: Default::default(),
            gang_blocks: (0, 0),
            buffers: scenario.buffers.iter().map(|b| b.to_buffer()).collect(),
            buffer_windows: BTreeMap::new(),
            stalled: BTreeMap::new(),
            right_sizes: BTreeMap::new(),
            dra: Default::default(),
        })
    }

    /// Runs to the end; `progress` gets the share of simulated time done.
    pub fn run(mut self, progress: &mut dyn FnMut(f64)) -> StrategyResult {
        if self.static_mode {
            self.launch_static();
        }
        let total = (self.end - self.start).num_seconds().max(1) as f64;
        let mut steps: u64 = 0;
        loop {
            self.step();
            steps += 1;
            if steps.is_multiple_of(256) {
                progress((self.now - self.start).num_seconds() as f64 / total);
            }
            if self.now >= self.end {
                break;
            }
            self.now = self.next_time().min(self.end);
        }
        progress(1.0);
        self.finish()
    }

    fn next_time(&mut self) -> Time {
        let mut t = self.next_sample;
        if let Some(j) = self.jobs.get(self.arrivals) {
            t = t.min(j.job.submit);
        }
        if let Some(f) = self.finishes.next(&self.jobs) {
            t = t.min(f);
        }
        if let Some(Reverse((a, _))) = self.acks.peek() {
            t = t.min(*a);
        }
        let cloud = if self.acted {
            self.cloud.next_event_time()
        } else {
            self.cloud.next_notable_event_time()
        };
        if let Some(c) = cloud {
            t = t.min(c);
        }
        if let Some(r) = self.image_releases.get(self.images_released) {
            t = t.min(*r);
        }
        if !self.static_mode {
            let world = self.world();
            if let Some(d) = self.core.next_deadline(&world, self.now) {
                t = t.min(d);
            }
            let lead = |pod: &Pod| self.core.buffer_lead(world.pools, world.catalog, pod);
            if let Some(d) = crate::core::buffers::next_deadline(&self.buffers, self.now, &lead) {
                t = t.min(d);
            }
        }
        if t <= self.now {
            self.now + Span::milliseconds(1)
        } else {
            t
        }
    }

    fn step(&mut self) {
        let now = self.now;
        // Arrivals.
        while self.arrivals < self.jobs.len() && self.jobs[self.arrivals].job.submit <= now {
            let i = self.arrivals;
            let at = self.jobs[i].job.submit;
            self.jobs[i].submit(at);
            self.arrivals += 1;
            if !self.static_mode && self.requests.arrive(i, &self.jobs[i].job.pod) {
                continue;
            }
            self.create(i, at);
        }
        // Finishes.
        while let Some((t, i)) = self.finishes.pop_due(now, &self.jobs) {
            let node = self.running_on(i);
            self.release(i, t);
            let lost_before = self.jobs[i].lost_s;
            self.jobs[i].finish(t);
            let job = &self.jobs[i];
            let lost_s = job.lost_s - lost_before;
            self.lost_gpu_hours_so_far += lost_s / 3600.0 * job.gpus();
            self.book_lost(i, node.as_deref(), lost_s);
            self.result.jobs_completed += 1;
            let name = self.jobs[i].job.pod.name.clone();
            self.result.log.push((t, LogEvent::JobFinished(name)));
        }
        // Checkpoint acknowledgements.
        while let Some(Reverse((t, i))) = self.acks.peek().copied() {
            if t > now {
                break;
            }
            self.acks.pop();
            if let Phase::Running { node, .. } = &self.jobs[i].phase {
                let name = self.jobs[i].job.pod.name.clone();
                if let Some((n, _)) = self.nodes.get_mut(node) {
                    for b in n.pods.iter_mut().filter(|b| b.pod.name == name) {
                        b.checkpoint_completed = Some(t);
                    }
                }
            }
        }
        // Cloud events.
        for event in self.cloud.advance(now) {
            self.on_cloud_event(event);
        }
        self.release_images(now);
        self.bind();
        if !self.static_mode {
            let stand_ins = self.provisioning_step();
            let (placeholders, held) = self.buffers_step();
            let demand: Vec<Pod>;
            let pending = if stand_ins.is_empty() && placeholders.is_empty() {
                self.waiting.pods()
            } else {
                demand = self
                    .waiting
                    .pods()
                    .iter()
                    .cloned()
                    .chain(stand_ins)
                    .chain(placeholders)
                    .collect();
                &demand
            };
            // Nodes holding buffer chunks: the chunks bound to them for
            // this round (do-not-disrupt), as the controller binds them.
            let holding: Vec<ManagedNode>;
            let revision = self.nodes_revision();
            // The copy is not what the revision counts: the core reads it
            // whole (revision 0).
            let nodes = if held.is_empty() {
                (self.nodes.managed(), revision)
            } else {
                let mut copy = self.nodes.managed().to_vec();
                for (n, pod) in held {
                    copy[n].state.used.add(&pod.pod.requests);
                    copy[n].pods.push(pod);
                    // Not the node's own pods: compared, this round.
                    copy[n].pods_revision = 0;
                }
                holding = copy;
                (&holding[..], 0)
            };
            if !self.reservations.is_empty() {
                self.reserved = Some(super::reservations::core_catalog(
                    self.catalog,
                    &self.reservations,
                    self.nodes.managed(),
                    now,
                    self.reservation_lead,
                ));
            }
            let w = world(
                self.reserved.as_ref().unwrap_or(self.catalog),
                self.region,
                &self.pools,
                pending,
                nodes,
            );
            let actions = self.core.decide(&w, now);
            self.acted = !actions.is_empty();
            for a in actions {
                self.apply(a);
            }
            self.bind();
        }
        if now >= self.next_sample {
            self.sample();
            self.next_sample = now + Span::seconds(SAMPLE_EVERY_S);
        }
    }

    /// The job's pod is created: it waits for a node.
    fn create(&mut self, i: usize, at: Time) {
        let name = self.jobs[i].job.pod.name.clone();
        self.result.log.push((at, LogEvent::JobCreated(name)));
        self.wait(i);
    }

    /// Job `i` waits for a node: its pod joins the waiting ones, and the
    /// next bind tries it.
    fn wait(&mut self, i: usize) {
        self.waiting.insert(i, &self.jobs[i].job.pod);
        self.bind_dirty = true;
    }

    /// The ProvisioningRequests of gangs waiting for capacity: their
    /// conditions (logged), their pods created once provisioned (and bound
    /// at once to the room provisioned for them), and their stand-ins,
    /// returned as demand for this round.
    fn provisioning_step(&mut self) -> Vec<Pod> {
        if self.requests.is_empty() {
            return Vec::new();
        }
        let now = self.now;
        let out = self
            .requests
            .step(self.nodes.managed(), &unplaceable_in(&self.core), now);
        for t in out.transitions {
            self.result.log.push((now, LogEvent::Provisioning(t)));
        }
        if !out.release.is_empty() {
            for i in out.release {
                self.create(i, now);
            }
            self.bind();
        }
        out.pending
    }

    /// The scenario's CapacityBuffers this round ([`crate::core::buffers::step`]):
    /// their placeholders to plan and the chunks held on nodes (by node
    /// index). Notes, per open window of a scheduled buffer, whether all its
    /// chunks are held ([`StrategyResult::buffer_windows`]).
    fn buffers_step(&mut self) -> (Vec<Pod>, Vec<(usize, BoundPod)>) {
        if self.buffers.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let now = self.now;
        let unplaceable = unplaceable_in(&self.core);
        let world = self.world();
        let lead = |pod: &Pod| self.core.buffer_lead(world.pools, world.catalog, pod);
        let step = crate::core::buffers::step_with_lead(
            &self.buffers,
            self.nodes.managed(),
            self.waiting.pods(),
            &unplaceable,
            crate::core::batch::DEFAULT_MAX_PODS,
            now,
            &lead,
        );
        for b in &self.buffers {
            let Some(w) = &b.window else { continue };
            let Ok(Some(start)) =
                prewarm::current_start(&b.name, w, now, std::time::Duration::ZERO)
            else {
                continue;
            };
            let wanted = b.replicas.unwrap_or(0).max(0) as usize;
            let prefix = format!("{}.buffer.reserved-", b.name);
            let held = step
                .held
                .iter()
                .filter(|(n, p)| {
                    p.pod.name.starts_with(&prefix) && self.nodes.managed()[*n].ready_at.is_some()
                })
                .count();
            let ok = self
                .buffer_windows
                .entry((b.name.clone(), start))
                .or_insert(true);
            *ok &= held >= wanted;
        }
        (step.pending, step.held)
    }

    /// The nodes' revision as the core's world carries it, so that the
    /// core keeps what it read of them while they stay the same.
    fn nodes_revision(&self) -> u64 {
        #[cfg(test)]
        if self.blind {
            return 0;
        }
        self.nodes.revision()
    }

    /// The world as the core sees it.
    fn world(&self) -> World<'_> {
        world(
            self.reserved.as_ref().unwrap_or(self.catalog),
            self.region,
            &self.pools,
            self.waiting.pods(),
            (self.nodes.managed(), self.nodes_revision()),
        )
    }

    /// Hands a notice to the core with the current world.
    fn notify(&mut self, notice: &Notice, at: Time) {
        let w = world(
            self.reserved.as_ref().unwrap_or(self.catalog),
            self.region,
            &self.pools,
            self.waiting.pods(),
            (self.nodes.managed(), self.nodes_revision()),
        );
        self.core.handle_notice(notice, &w, at);
    }

    fn on_cloud_event(&mut self, event: CloudEvent) {
        match event {
            CloudEvent::Ready { claim, at } => {
                if let Some(book) = self.books.get_mut(&claim) {
                    book.ready(at);
                }
                // A node launched for DRA claims is initialized once its
                // drivers have published its devices; until then no pod
                // binds there, and the core sees it in flight.
                if !self.publish_slices(&claim) {
                    return;
                }
                if let Some((n, _)) = self.nodes.get_mut(&claim) {
                    n.ready_at = Some(at);
                    n.state.in_flight = false;
                    faults::mark_ready(n, at);
                    self.bind_dirty = true;
                    self.core.observe_ready(n);
                }
            }
            CloudEvent::Notice { notice, at } => {
                self.result.log.push((at, LogEvent::Notice(notice.clone())));
                if matches!(notice, Notice::SpotInterruption { .. }) {
                    self.result.spot_notices += 1;
                }
                if !self.static_mode {
                    self.notify(&notice, at);
                }
            }
            CloudEvent::Terminated { claim, at, .. } => self.remove_node(&claim, at),
            CloudEvent::Fault { claim, at } => self.on_fault(&claim, at),
            CloudEvent::Rebooted { claim, at, healthy } => self.on_rebooted(&claim, at, healthy),
            CloudEvent::Running { .. }
            | CloudEvent::Registered { .. }
            | CloudEvent::PriceChanged { .. } => {}
        }
    }

    fn remove_node(&mut self, claim: &str, at: Time) {
        if let Some(book) = self.books.get_mut(claim) {
            book.gone(at);
        }
        self.dra.remove_slices_of(claim);
        if let Some((node, extra)) = self.nodes.remove(claim) {
            self.result
                .log
                .push((at, LogEvent::NodeGone(claim.to_string())));
            let jobs: Vec<usize> = extra.jobs.iter().copied().collect();
            self.node_gone(&jobs, extra.broken_since, extra.gpus, at);
            for i in jobs {
                self.stop_job(i, at);
            }
            let alive = (at - node.launched_at).num_seconds().max(0) as f64 / 3600.0;
            self.result.provisioned_gpu_hours += alive * extra.gpus;
        }
    }

    /// Stops a running job (its node is gone, or it was evicted): it loses
    /// the work since its last checkpoint and waits again. A gang stops
    /// whole: distributed training cannot go on without a member, so every
    /// other running member leaves its node and loses its work too.
    fn stop_job(&mut self, i: usize, at: Time) {
        self.stop_jobs(i, at, false);
    }

    /// [`Engine::stop_job`]; with `stall`, the stopped jobs stay bound to
    /// their nodes without progress (a node fault: `faults`) instead of
    /// waiting again. Returns the GPU-hours of work they lost.
    fn stop_jobs(&mut self, i: usize, at: Time, stall: bool) -> f64 {
        let mut lost_gpu_hours = 0.0;
        let mut stopping = vec![i];
        while let Some(k) = stopping.pop() {
            let Phase::Running {
                since, ref node, ..
            } = self.jobs[k].phase
            else {
                continue;
            };
            let stopped = LogEvent::JobStopped {
                job: self.jobs[k].job.pod.name.clone(),
                node: node.clone(),
            };
            self.result.log.push((at, stopped));
            let node = node.clone();
            if !stall {
                self.detach(k);
            }
            self.ran(k, &node, since, at);
            let lost_before = self.jobs[k].lost_s;
            self.jobs[k].stop(at);
            let lost_s = self.jobs[k].lost_s - lost_before;
            self.book_lost(k, Some(&node), lost_s);
            let job = &mut self.jobs[k];
            self.interruptions_so_far += 1;
            self.lost_gpu_hours_so_far += lost_s / 3600.0 * job.gpus();
            lost_gpu_hours += lost_s / 3600.0 * job.gpus();
            // The workload's expected run time is what is left of it (what
            // the planner's risk and deadline rules read).
            job.job.pod.expected_runtime_s = Some((job.job.work_s - job.saved_s).max(0.0));
            if stall {
                self.stalled.insert(k, faults::Stall { node, since: at });
            } else {
                self.wait(k);
            }
            if let Some(g) = &self.jobs[k].job.pod.group {
                stopping.extend(self.gangs.get(&g.name).into_iter().flatten().copied());
            }
        }
        lost_gpu_hours
    }

    /// Frees a job's room on its node (it finished or left).
    fn release(&mut self, i: usize, at: Time) {
        if let Phase::Running { since, node, .. } = &self.jobs[i].phase {
            let (since, node) = (*since, node.clone());
            self.ran(i, &node, since, at);
            self.detach(i);
        }
    }

    /// The claim job `i` runs on, if it runs.
    fn running_on(&self, i: usize) -> Option<String> {
        match &self.jobs[i].phase {
            Phase::Running { node, .. } => Some(node.clone()),
            _ => None,
        }
    }

    /// Job `i`'s share of node `claim` (see [`super::bill::NodeBook::share`]).
    fn share_of(&mut self, i: usize, claim: &str) -> Option<(f64, &mut super::bill::NodeBook)> {
        let gpus = self.jobs[i].gpus();
        let requests = &self.jobs[i].job.pod.requests;
        let book = self.books.get_mut(claim)?;
        Some((book.share(gpus, requests), book))
    }

    /// Job `i` ran on node `claim` from `since` to `at`: its GPU-hours, and
    /// its share of the node held in the node's books.
    fn ran(&mut self, i: usize, claim: &str, since: Time, at: Time) {
        let held_s = (at - since).num_seconds().max(0) as f64;
        self.result.gpu_hours += held_s / 3600.0 * self.jobs[i].gpus();
        self.result.right_size_saving += self.right_size_saving(i, claim, held_s / 3600.0);
        if let Some((share, book)) = self.share_of(i, claim) {
            book.held(share, held_s);
        }
    }

    /// Job `i` lost `seconds` of work done on node `claim`.
    fn book_lost(&mut self, i: usize, claim: Option<&str>, seconds: f64) {
        if let Some((share, book)) = claim.and_then(|c| self.share_of(i, c)) {
            book.lost(share, seconds);
        }
    }

    /// Takes a running job's pod off its node's books, if it is still there.
    fn detach(&mut self, i: usize) {
        if let Phase::Running { node, .. } = &self.jobs[i].phase {
            if let Some((n, extra)) = self.nodes.get_mut(node) {
                if extra.jobs.remove(&i) {
                    let name = &self.jobs[i].job.pod.name;
                    n.pods.retain(|b| &b.pod.name != name);
                    n.state.used.sub(&dra::held(&self.jobs[i].job.pod));
                    self.bind_dirty = true;
                }
            }
        }
    }

    fn apply(&mut self, action: Action) {
        let now = self.now;
        self.result
            .log
            .push((now, LogEvent::Action(action.clone())));
        match action {
            Action::Launch(req) => self.launch(req),
            Action::Cordon { claim, reason } => {
                match reason {
                    DisruptionReason::Drifted => self.result.drift_replacements += 1,
                    DisruptionReason::Expired => self.result.expired_replacements += 1,
                    DisruptionReason::Unhealthy => self.result.repair_replacements += 1,
                    _ => {}
                }
                if let Some((n, _)) = self.nodes.get_mut(&claim) {
                    n.state.unschedulable = true;
                    n.disrupted = true;
                }
            }
            Action::Uncordon { claim } => {
                if let Some((n, _)) = self.nodes.get_mut(&claim) {
                    n.state.unschedulable = false;
                    n.disrupted = false;
                }
            }
            Action::RequestCheckpoint { pod, .. } => {
                if let Some(&i) = self.by_name.get(&pod) {
                    let lost_before = self.jobs[i].lost_s;
                    if let Some(ack) = self.jobs[i].request_checkpoint(now) {
                        self.acks.push(Reverse((ack, i)));
                    }
                    // The pause puts its finish later, and counts as lost.
                    let lost_s = self.jobs[i].lost_s - lost_before;
                    let node = self.running_on(i);
                    self.book_lost(i, node.as_deref(), lost_s);
                    let job = &self.jobs[i];
                    self.lost_gpu_hours_so_far += lost_s / 3600.0 * job.gpus();
                    if let Some(t) = job.finish_time() {
                        self.finishes.push(t, i);
                    }
                }
            }
            Action::Evict { pod, claim } => {
                if let Some(&i) = self.by_name.get(&pod) {
                    if self.stalled.get(&i).is_some_and(|s| s.node == claim) {
                        self.release_stalled(i, now);
                    } else if matches!(&self.jobs[i].phase, Phase::Running { node, .. } if *node == claim)
                    {
                        self.stop_job(i, now);
                    }
                }
            }
            Action::Delete { claim, .. } => {
                let _ = self.cloud.terminate(&claim, now);
                self.remove_node(&claim, now);
            }
            Action::Reboot { claim, .. } => self.reboot(&claim),
        }
    }

    fn launch(&mut self, req: ClaimRequest) {
        self.launch_into(req, None);
    }

    /// Launches `req`, into the cluster placement group `group` when given
    /// (a static node group of one-block gangs), else into its pool's group
    /// of its zone when its node asks for one (EFA, one-block gangs).
    fn launch_into(&mut self, req: ClaimRequest, group: Option<String>) {
        let now = self.now;
        let node = {
            let catalog = self.reserved.as_ref().unwrap_or(self.catalog);
            let world = world(
                catalog,
                self.region,
                &self.pools,
                self.waiting.pods(),
                (self.nodes.managed(), self.nodes_revision()),
            );
            ManagedNode::launched(&req, &world, now)
        };
        // Into the pool's cluster placement group of the zone, as the EC2
        // provider launches EFA nodes and one-block gangs.
        let placed = node
            .as_ref()
            .is_some_and(|n| crate::cloud::in_placement_group(&n.state.labels));
        let group =
            group.or_else(|| placed.then(|| crate::cloud::simulated::placement_group_of(&req)));
        let launched = match &group {
            Some(group) => self.cloud.launch_placed(&req, group, now),
            None => self.cloud.launch(&req, now),
        };
        match launched {
            Ok(_) => {
                if let Some(node) = node {
                    let gpus = self
                        .catalog
                        .instance_type(&req.offering.instance_type)
                        .and_then(|t| t.accelerator.as_ref())
                        .map_or(0.0, |a| a.count as f64);
                    self.result.nodes_launched += 1;
                    let book = super::bill::NodeBook::new(
                        self.catalog,
                        self.region,
                        &req.offering,
                        req.price_per_hour,
                        gpus,
                        &node.state.allocatable,
                        now,
                    );
                    self.books.open(&req.claim, book);
                    self.nodes.insert(
                        node,
                        NodeExtra {
                            jobs: BTreeSet::new(),
                            gpus,
                            image: self.images_released,
                            ..Default::default()
                        },
                    );
                }
            }
            Err(e) => {
                // A capacity error re-plans without that offering; other
                // errors (an offering the region does not sell) leave the
                // pods pending for the next batch.
                if let (Some(notice), false) = (e.notice(), self.static_mode) {
                    self.notify(&notice, now);
                }
            }
        }
    }

    /// Releases the images due by `now`: every node launched before the
    /// latest release is drifted (as the controller finds it: what it was
    /// launched with against what its class resolves to now).
    fn release_images(&mut self, now: Time) {
        let before = self.images_released;
        while self
            .image_releases
            .get(self.images_released)
            .is_some_and(|t| *t <= now)
        {
            self.images_released += 1;
        }
        if self.images_released == before {
            return;
        }
        let stamp = |generation: usize| Stamp {
            image: Some(format!("ami-sim-{generation}")),
            ..Stamp::default()
        };
        let current = stamp(self.images_released);
        for (n, extra) in self.nodes.iter_mut() {
            n.drifted = crate::core::drift::detect(&stamp(extra.image), &current);
        }
    }

    /// Plays the kube-scheduler: waiting pods, largest first, go to the first
    /// Ready, schedulable node with room; a gang binds whole or not at all.
    fn bind(&mut self) {
        // Nothing changed since the last bind: it would place nothing.
        if self.waiting.is_empty() || !self.bind_dirty {
            return;
        }
        self.bind_dirty = false;
        let ready: Vec<usize> = (0..self.nodes.managed().len())
            .filter(|&k| self.serves(k) && !self.nodes.managed()[k].state.unschedulable)
            .collect();
        if ready.is_empty() {
            return;
        }
        let states: Vec<&crate::cluster::NodeState> = ready
            .iter()
            .map(|&k| &self.nodes.managed()[k].state)
            .collect();
        // Only the waiting pods: cloning every job's pod on each step made a
        // long run quadratic in its number of jobs.
        let waiting: Vec<usize> = self.waiting.jobs().to_vec();
        // Pods with DRA claims bind with their claims' devices, where a
        // node has them free (`dra`); the rest as they are.
        let forms: Vec<Option<std::borrow::Cow<'_, Pod>>> =
            self.waiting.pods().iter().map(dra::bound_form).collect();
        // A job that fit nowhere at the last bind is tried again only where
        // a node it may fit changed since (`unplaced`).
        #[cfg(test)]
        if self.blind {
            self.unplaced.1.clear();
        }
        let (since, unplaced) = (self.unplaced.0, std::mem::take(&mut self.unplaced.1));
        // Asked once here, by position: `may_take` runs for every node a
        // scan passes.
        let fresh: Vec<bool> = ready
            .iter()
            .map(|&k| self.nodes.managed()[k].pods_revision >= since)
            .collect();
        let changed: Vec<usize> = (0..ready.len()).filter(|&n| fresh[n]).collect();
        let remembered: Vec<bool> = waiting.iter().map(|i| unplaced.contains(i)).collect();
        let (which, passed): (Vec<usize>, Vec<usize>) = (0..forms.len())
            .filter(|&k| forms[k].is_some())
            .partition(|&k| {
                !remembered[k]
                    || changed
                        .iter()
                        .any(|&n| pack::takes_now(&self.waiting.pods()[k], states[n]))
            });
        #[cfg(test)]
        self.passed_over.set(self.passed_over.get() + passed.len());
        let owned: Vec<Pod>;
        let pods: &[Pod] = if forms
            .iter()
            .all(|f| matches!(f, Some(std::borrow::Cow::Borrowed(_))))
        {
            self.waiting.pods()
        } else {
            owned = forms
                .iter()
                .zip(self.waiting.pods())
                .map(|(f, p)| f.as_deref().unwrap_or(p).clone())
                .collect();
            &owned
        };
        let may_take = |k: usize, n: usize| !remembered[k] || fresh[n];
        let (placed, left) = pack::place_on_existing_where(pods, &which, &states, may_take);
        let monotone = |p: &Pod| {
            p.group.is_none()
                && p.resource_claims.is_empty()
                && p.per_node_max.is_none()
                && p.network_block.is_none()
        };
        self.unplaced.1 = left
            .into_iter()
            .filter(|&k| monotone(&pods[k]))
            .chain(passed)
            .map(|k| waiting[k])
            .collect();
        let held: Vec<Resources> = placed
            .iter()
            .map(|&(k, _)| pods[k].requests.clone())
            .collect();
        drop(forms);
        let now = self.now;
        for ((k, n), held) in placed.into_iter().zip(held) {
            let i = waiting[k];
            let slot = ready[n];
            let (node, extra) = self.nodes.at_mut(slot);
            let claim = node.claim.clone();
            extra.jobs.insert(i);
            node.state.used.add(&held);
            node.pods.push(BoundPod {
                pod: self.jobs[i].job.pod.clone(),
                do_not_disrupt: false,
                checkpoint_completed: None,
                started: Some(now),
                pdb: None,
                placeholder: false,
            });
            self.waiting.remove(i);
            if !self.jobs[i].started {
                let family = prewarm::family_of(&node.offering.instance_type);
                let p = self.cloud.config().latency.profile(family);
                self.jobs[i].startup_s = (p.running + p.registered + p.ready).as_secs_f64();
            }
            let started = LogEvent::JobStarted {
                job: self.jobs[i].job.pod.name.clone(),
                node: claim.clone(),
            };
            self.result.log.push((now, started));
            self.jobs[i].start(&claim, now);
            self.record_block(i);
            if let Some(f) = self.jobs[i].finish_time() {
                self.finishes.push(f, i);
            }
        }
        self.unplaced.0 = self.nodes.revision();
    }

    /// When job `i`'s start completes its gang (every member running),
    /// counts the gang's start for [`StrategyResult::gang_blocks`]: in one
    /// network block or not (only when every member's node reports one).
    fn record_block(&mut self, i: usize) {
        let Some(gang) = self.jobs[i].job.pod.group.as_ref().map(|g| g.name.clone()) else {
            return;
        };
        let members = self.gangs.get(&gang).cloned().unwrap_or_default();
        let mut blocks = BTreeSet::new();
        for m in members {
            let Phase::Running { node, .. } = &self.jobs[m].phase else {
                return;
            };
            let block = self
                .cloud
                .describe(node)
                .and_then(|inst| self.cloud.network_nodes(&inst.provider_id).pop());
            match block {
                Some(b) => blocks.insert(b),
                None => return,
            };
        }
        self.gang_blocks.1 += 1;
        if blocks.len() == 1 {
            self.gang_blocks.0 += 1;
        }
    }

    /// `static`: fixed node groups sized for the peak, launched at the start
    /// (cluster-autoscaler node groups with min = max), on-demand. Each job
    /// belongs to the first NodePool that can run it; each pool gets one
    /// group per shape class of its jobs, classes sharing a group where one
    /// offering holds them for no more ([`super::static_groups`]), each of
    /// the instance type and zone that covers its peak for the least.
    fn launch_static(&mut self) {
        let options: Vec<(String, Vec<StaticOption>)> = self
            .pools
            .iter()
            .map(|p| {
                let name = p.metadata.name.clone().unwrap_or_default();
                let options = static_options(p, self.catalog, self.region);
                (name, options)
            })
            .collect();
        let runs = |o: &StaticOption, pod: &Pod| {
            pod.requests.fits_in(&o.room) && pack::compatible(pod, &o.labels, &o.taints)
        };
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); options.len()];
        for (i, j) in self.jobs.iter().enumerate() {
            if let Some(k) = options
                .iter()
                .position(|(_, opts)| opts.iter().any(|o| runs(o, &j.job.pod)))
            {
                members[k].push(i);
            }
        }
        for ((pool_name, opts), mine) in options.iter().zip(members) {
            let spans: Vec<static_groups::Span> = mine
                .iter()
                .map(|&i| {
                    let job = &self.jobs[i].job;
                    static_groups::Span {
                        from: job.submit,
                        to: job.submit + Span::milliseconds((job.work_s * 1000.0) as i64),
                    }
                })
                .collect();
            let prices: Vec<f64> = opts.iter().map(|o| o.price).collect();
            let share = |j: usize, o: usize| {
                let pod = &self.jobs[mine[j]].job.pod;
                runs(&opts[o], pod).then(|| node_share(&pod.requests, &opts[o].room))
            };
            for (g, group) in static_groups::groups(&spans, &prices, &share)
                .iter()
                .enumerate()
            {
                // Each job goes to its own group's nodes, as workloads are
                // pinned to node groups: otherwise one that is Ready first
                // takes the room another group was sized for.
                let name = format!("static-{pool_name}-{g:03}");
                let pin = Requirement::new(STATIC_GROUP, Operator::In, &[name.as_str()]);
                for &j in &group.jobs {
                    let affinity = &mut self.jobs[mine[j]].job.pod.affinity;
                    if affinity.terms.is_empty() {
                        affinity.terms.push(Vec::new());
                    }
                    for term in &mut affinity.terms {
                        term.push(pin.clone());
                    }
                }
                let o = &opts[group.option];
                // A group running gangs that must share one network block
                // is made in one placement group, as an operator would.
                let one_block = group
                    .jobs
                    .iter()
                    .any(|&j| self.jobs[mine[j]].job.pod.network_block.is_some());
                for k in 0..group.nodes {
                    let claim = format!("{name}-{k:05}");
                    self.launch_into(
                        ClaimRequest {
                            cluster_placement: false,
                            claim: claim.clone(),
                            nodepool: pool_name.clone(),
                            offering: o.offering.clone(),
                            price_per_hour: o.price,
                            pods: Vec::new(),
                            prewarm_window: None,
                            reservation: None,
                        },
                        one_block.then(|| name.clone()),
                    );
                    if let Some((node, _)) = self.nodes.get_mut(&claim) {
                        node.state.labels.insert(STATIC_GROUP.into(), name.clone());
                        if one_block {
                            node.state
                                .labels
                                .insert(crate::labels::CLUSTER_PLACEMENT.into(), "true".into());
                        }
                    }
                }
            }
        }
    }

    fn sample(&mut self) {
        let mut s = Sample {
            t_s: (self.now - self.start).num_seconds() as f64,
            pending_pods: self.waiting.len() as u32,
            // Summing every instance ever launched at each sample made long
            // runs quadratic; the total at the end is summed exactly.
            cumulative_cost: self.cloud.cost_so_far_running(self.now),
            interruptions: self.interruptions_so_far,
            lost_gpu_hours: self.lost_gpu_hours_so_far,
            ..Default::default()
        };
        for (n, extra) in self.nodes.iter() {
            s.cost_per_hour += n.price_per_hour;
            match n.offering.capacity_type {
                CapacityType::Spot => s.spot_nodes += 1,
                // Reserved nodes are never reclaimed early: counted with
                // on-demand.
                CapacityType::OnDemand | CapacityType::Reserved => s.on_demand_nodes += 1,
            }
            let family = prewarm::family_of(&n.offering.instance_type).to_string();
            *s.nodes_by_family.entry(family).or_default() += 1;
            s.gpus_provisioned += extra.gpus;
            s.gpus_used += extra.jobs.iter().map(|&i| self.jobs[i].gpus()).sum::<f64>();
        }
        self.result.timeseries.push(s);
        self.sample_idle(SAMPLE_EVERY_S as f64 / 3600.0);
        self.check_prewarm();
    }

    /// Counts pre-warm windows and whether their capacity was Ready at start.
    fn check_prewarm(&mut self) {
        for pool in &self.pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let Ok(windows) = prewarm::active_windows(pool, self.now) else {
                continue;
            };
            for w in windows {
                if w.start > self.now
                    || !self
                        .windows_seen
                        .insert((name.clone(), w.window.clone(), w.start))
                {
                    continue;
                }
                let wanted = pool
                    .spec
                    .prewarm
                    .iter()
                    .find(|p| p.name == w.window)
                    .and_then(|p| p.capacity.get(l::RESOURCE_GPU))
                    .and_then(|q| crate::api::parse_quantity(&q.0).ok())
                    .unwrap_or(0.0);
                let ready: f64 = self
                    .nodes
                    .iter()
                    .filter(|(n, _)| n.nodepool == name && n.ready_at.is_some_and(|r| r <= w.start))
                    .map(|(_, e)| e.gpus)
                    .sum();
                self.result.prewarm_ready.1 += 1;
                if ready >= wanted {
                    self.result.prewarm_ready.0 += 1;
                }
            }
        }
    }

    fn finish(mut self) -> StrategyResult {
        let end = self.end;
        let running: Vec<usize> = (0..self.jobs.len())
            .filter(|&i| matches!(self.jobs[i].phase, Phase::Running { .. }))
            .collect();
        for i in running {
            if let Phase::Running {
                since, ref node, ..
            } = self.jobs[i].phase
            {
                let node = node.clone();
                self.ran(i, &node, since, end);
                let lost_before = self.jobs[i].lost_s;
                self.jobs[i].settle_restart(end);
                let lost_s = self.jobs[i].lost_s - lost_before;
                self.book_lost(i, Some(&node), lost_s);
            }
        }
        for (n, extra) in self.nodes.iter() {
            let alive = (end - n.launched_at).num_seconds().max(0) as f64 / 3600.0;
            self.result.provisioned_gpu_hours += alive * extra.gpus;
        }
        self.settle_faults(end);
        // Reservations are billed up front, used or not.
        self.result.reserved_upfront_cost = self.upfront;
        let cloud_cost = self.cloud.cost_so_far(end);
        self.result.total_cost = cloud_cost + self.upfront;
        let cloud = &self.cloud;
        self.result.cost_by = self.books.split(
            |claim| cloud.cost_of(claim, end).unwrap_or(0.0),
            cloud_cost,
            self.upfront,
            end,
        );
        let mut waits: Vec<f64> = Vec::new();
        for j in &self.jobs {
            let mut w = j.waited_s;
            if let Phase::Waiting { since } = j.phase {
                w += (end - since).num_seconds().max(0) as f64;
            }
            if !matches!(j.phase, Phase::Future) {
                waits.push(w);
            }
            self.result.interruptions += j.interruptions;
            self.result.checkpoints += j.checkpoints;
            self.result.lost_gpu_hours += j.lost_s / 3600.0 * j.gpus();
            self.result
                .lost_gpu_hours_by
                .add_scaled(&j.lost_by, j.gpus() / 3600.0);
            let gang = j.job.pod.group.as_ref().map_or(1, |g| g.min_member);
            let mut by = super::jobs::LostBy::default();
            by.add_scaled(&j.lost_by, j.gpus() / 3600.0);
            self.result
                .lost_by_shape
                .entry(super::result::shape_name(j.gpus(), gang))
                .or_default()
                .add(&super::result::ShapeLoss {
                    jobs: 1,
                    work_gpu_hours: j.job.work_s / 3600.0 * j.gpus(),
                    lost_gpu_hours: j.lost_s / 3600.0 * j.gpus(),
                    lost_gpu_hours_by: by,
                    interruptions: j.interruptions,
                });
        }
        waits.sort_by(f64::total_cmp);
        if !waits.is_empty() {
            self.result.mean_pending_s = waits.iter().sum::<f64>() / waits.len() as f64;
            self.result.p95_pending_s =
                waits[((waits.len() as f64 * 0.95).ceil() as usize).clamp(1, waits.len()) - 1];
        }
        self.result.p95_slowdown = p95_slowdown(&self.jobs, end);
        self.result.gang_blocks = self.gang_blocks;
        self.result.buffer_windows = (
            self.buffer_windows.values().filter(|&&ok| ok).count() as u32,
            self.buffer_windows.len() as u32,
        );
        let reasons = self.unplaceable_reasons();
        for (i, j) in self.jobs.iter().enumerate() {
            let reason = match &j.phase {
                Phase::Waiting { since } if self.stalled.contains_key(&i) => format!(
                    "stalled on {} since {}: a fault stopped it or a member of its gang",
                    self.stalled[&i].node,
                    since.to_rfc3339()
                ),
                Phase::Done { .. } => continue,
                Phase::Future => "submitted after the end of the simulation".to_string(),
                Phase::Running { .. } => format!(
                    "still running at the end ({:.0}% done)",
                    100.0 * j.progress(end) / j.job.work_s.max(1.0)
                ),
                Phase::Waiting { since } => match reasons.get(&j.job.pod.name) {
                    Some(r) => format!("never placed: {r}"),
                    None if j.started => {
                        format!("waiting since {} after losing its node", since.to_rfc3339())
                    }
                    None => format!("waiting for capacity since {}", since.to_rfc3339()),
                },
            };
            self.result.unfinished.push(Unfinished {
                job: j.job.pod.name.clone(),
                reason,
            });
        }
        let _ = self.strategy;
        self.result
    }

    /// The planner's reasons for the pods still waiting at the end.
    fn unplaceable_reasons(&self) -> BTreeMap<String, String> {
        // Without static's pins (no offering carries them): the question
        // is whether any pool could place the pod.
        let pods: Vec<Pod> = self
            .waiting
            .jobs()
            .iter()
            .map(|&i| {
                let mut pod = self.jobs[i].job.pod.clone();
                for term in &mut pod.affinity.terms {
                    term.retain(|r| r.key != STATIC_GROUP);
                }
                pod
            })
            .collect();
        if pods.is_empty() {
            return BTreeMap::new();
        }
        let pools: Vec<crate::cluster::Pool> = self
            .pools
            .iter()
            .filter_map(|p| crate::cluster::Pool::from_api(p, Resources::new()).ok())
            .collect();
        let input = crate::plan::Input::offline(self.catalog, self.region, &pools, &pods);
        crate::plan::plan(&input, Strategy::Greedy, &Default::default(), &|| 0.0)
            .unschedulable
            .into_iter()
            .map(|u| (u.pod, u.reason))
            .collect()
    }
}

fn world<'w>(
    catalog: &'w Catalog,
    region: &'w str,
    pools: &'w [NodePool],
    pending: &'w [Pod],
    (nodes, nodes_revision): (&'w [ManagedNode], u64),
) -> World<'w> {
    World {
        catalog,
        region,
        pools,
        pending,
        nodes,
        nodes_revision,
        pdbs: &[],
    }
}

/// Why the core's last plan found no place for a pod, by pod name.
fn unplaceable_in(core: &Core) -> impl Fn(&str) -> Option<String> + '_ {
    |p: &str| {
        core.last_plan()
            .and_then(|r| r.unschedulable.iter().find(|u| u.pod == p))
            .map(|u| u.reason.clone())
    }
}

/// An on-demand offering a `static` node group could use, as its nodes
/// would be.
struct StaticOption {
    offering: OfferingKey,
    price: f64,
    room: Resources,
    labels: crate::cluster::Labels,
    taints: Vec<crate::cluster::Taint>,
}

/// The on-demand offerings `pool` may launch in `region` (CPU types too: a
/// CPU pool's static group holds its CPU-only jobs).
fn static_options(pool: &NodePool, catalog: &Catalog, region: &str) -> Vec<StaticOption> {
    let Ok(shape) = crate::cluster::Pool::from_api(pool, Resources::new()) else {
        return Vec::new();
    };
    let selected = crate::api::validate::selected_instance_types(&pool.spec, catalog);
    catalog
        .offerings_in(region)
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .filter_map(|o| {
            let it = selected.iter().find(|t| t.name == o.instance_type)?;
            let mut labels =
                crate::cluster::shape::node_labels(it, o, catalog.zone_names(), &shape.name);
            labels.extend(shape.labels.clone());
            Some(StaticOption {
                offering: OfferingKey {
                    instance_type: o.instance_type.clone(),
                    zone: o.zone_id.clone(),
                    capacity_type: CapacityType::OnDemand,
                },
                price: o.price_per_hour,
                room: crate::cluster::shape::allocatable(it, &shape.sharing),
                labels,
                taints: shape.taints.clone(),
            })
        })
        .collect()
}

/// The part of one node with `room` that a pod with `requests` takes: one
/// over how many such pods the node holds (`requests` must fit).
fn node_share(requests: &Resources, room: &Resources) -> f64 {
    let per_node = requests
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| room.get(k) / v)
        .min()
        .unwrap_or(i64::MAX)
        .max(1);
    1.0 / per_node as f64
}

/// The 95th percentile over jobs of the slowdown: a job's time from arrival
/// to finish over the time it needs on on-demand capacity that is never
/// interrupted, its run time plus the nominal launch-to-Ready of the family
/// it first ran on: `(finish - arrival) / (run time + on-demand startup)`.
/// Jobs still unfinished at `end` that could have finished by then count
/// with `end` as their finish (a lower bound on theirs); jobs that could not
/// have finished do not count. `None` without any job that counts.
fn p95_slowdown(jobs: &[JobRun], end: Time) -> Option<f64> {
    let mut slowdowns: Vec<f64> = jobs
        .iter()
        .filter_map(|j| {
            let ideal = j.job.work_s + j.startup_s;
            let finish = match j.phase {
                Phase::Done { at } => at,
                Phase::Future => return None,
                _ => {
                    let could = j.job.submit + Span::milliseconds((ideal * 1000.0) as i64);
                    if could > end {
                        return None;
                    }
                    end
                }
            };
            let took = (finish - j.job.submit).num_milliseconds() as f64 / 1000.0;
            (ideal > 0.0).then(|| took / ideal)
        })
        .collect();
    if slowdowns.is_empty() {
        return None;
    }
    slowdowns.sort_by(f64::total_cmp);
    let rank = ((slowdowns.len() as f64 * 0.95).ceil() as usize).clamp(1, slowdowns.len());
    Some(slowdowns[rank - 1])
}
