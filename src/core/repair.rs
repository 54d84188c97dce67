//! Repair: what to do about unhealthy nodes, as a pure function of the
//! health signals the drivers hand in ([`Health`]: the node's conditions,
//! and XID errors read from DCGM written as the conditions the EKS node
//! monitoring agent would set) and the pools' repair policies
//! (`spec.repair`). A node whose condition has matched a rule for the
//! rule's toleration is rebooted (after its checkpointing pods were asked
//! to checkpoint, while they still run) or replaced; a rebooted node still
//! or again unhealthy `rebootTimeout` after the reboot, or unhealthy again
//! within [`REBOOT_MEMORY`] of it, is replaced. Replacing is
//! consolidation's removal path (`consolidation::unhealthy`): a new node
//! first where the pool can stage one, then the checkpoint-first drain.
//!
//! What holds a repair: `quartermaster.dev/do-not-repair` on the node
//! (always); `do-not-disrupt` on the node or a pod while the node still
//! works (it is `Ready`); the pool's disruption budgets for `Unhealthy`;
//! and the breaker, when more of the pool's nodes than `maxUnhealthy` are
//! unhealthy at once (a correlated fault is not fixed by replacing the
//! fleet). Cordoned nodes and nodes another decision owns (interruption,
//! consolidation) are left alone. The rules are in `docs/repair.md`.

use super::pool_index::{PoolIndex, Repeated};
use super::time::after;
use super::{Action, Time, World};
use crate::api::{BudgetReason, RepairAction};
use regex::Regex;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How long a reboot by repair is remembered: a node unhealthy again
/// within it is replaced rather than rebooted again.
pub const REBOOT_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// One health signal about a node: one of its conditions as the node
/// reports it (or, for XID errors DCGM saw, as the node monitoring agent
/// would report it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    /// Condition type (`Ready`, `AcceleratedHardwareReady`, ...).
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The condition's reason (may be empty).
    pub reason: String,
    /// When the condition last changed status (`lastTransitionTime`).
    pub since: Time,
}

impl Signal {
    /// A signal.
    pub fn new(type_: &str, status: &str, reason: &str, since: Time) -> Signal {
        Signal {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            since,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.type_, self.status)?;
        if !self.reason.is_empty() {
            write!(f, " ({})", self.reason)?;
        }
        Ok(())
    }
}

/// The XID errors the EKS node monitoring agent treats as fatal (it sets
/// `AcceleratedHardwareReady=False` with reason `NvidiaXID<n>Error` for
/// them; other XIDs, such as 13, 31, 43 or 94, are the application's and
/// only an Event): its `WellKnownXidCodes`, as of 2026
/// (`aws/eks-node-monitoring-agent`, `monitors/nvidia/dcgm`).
pub const FATAL_XIDS: &[u32] = &[
    46, 48, 54, 62, 63, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 142, 143, 151, 155, 156, 158,
];

/// The signal the node monitoring agent would set for XID `xid` seen since
/// `since` on one of a node's GPUs, for the XIDs it treats as fatal.
pub fn xid_signal(xid: u32, since: Time) -> Option<Signal> {
    FATAL_XIDS.contains(&xid).then(|| {
        Signal::new(
            crate::api::nodepool::ACCELERATED_HARDWARE_READY,
            "False",
            &format!("NvidiaXID{xid}Error"),
            since,
        )
    })
}

/// What is known of a node's health, filled by the driver.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// The node's conditions, and the XID errors DCGM saw as conditions.
    pub signals: Vec<Signal>,
    /// The node (or its NodeClaim) carries `quartermaster.dev/do-not-repair`.
    pub do_not_repair: bool,
    /// When repair last rebooted the node (the NodeClaim's `Rebooted`
    /// condition), so that a restarted controller remembers it.
    pub rebooted_at: Option<Time>,
}

impl Health {
    /// Whether the node still works: its kubelet reports `Ready=True`.
    /// Then `do-not-disrupt` holds a repair and running pods are asked to
    /// checkpoint first.
    pub fn works(&self) -> bool {
        self.signals
            .iter()
            .any(|s| s.type_ == "Ready" && s.status == "True")
    }
}

/// Why an eligible repair was not started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hold {
    /// The node carries `quartermaster.dev/do-not-repair`.
    DoNotRepair,
    /// More of the pool's nodes than `maxUnhealthy` are unhealthy.
    Breaker,
    /// The node still works and it, or one of its pods, is
    /// `do-not-disrupt`.
    DoNotDisrupt,
    /// The pool's disruption budgets allow no more for `Unhealthy`.
    Budget,
}

impl Hold {
    /// The machine name (`do_not_repair`, `breaker`, `do_not_disrupt`,
    /// `budget`), for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Hold::DoNotRepair => "do_not_repair",
            Hold::Breaker => "breaker",
            Hold::DoNotDisrupt => "do_not_disrupt",
            Hold::Budget => "budget",
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Hold::DoNotRepair => "the node is marked quartermaster.dev/do-not-repair",
            Hold::Breaker => "too many of the pool's nodes are unhealthy at once (maxUnhealthy)",
            Hold::DoNotDisrupt => "the node still works and it or a pod is do-not-disrupt",
            Hold::Budget => "the pool's disruption budgets allow no repair now",
        })
    }
}

/// A repair started this round.
#[derive(Debug, Clone, PartialEq)]
pub struct RepairDecision {
    /// The node's claim.
    pub claim: String,
    /// Its pool.
    pub nodepool: String,
    /// The condition that made it unhealthy.
    pub condition: Signal,
    /// Reboot or replace.
    pub action: RepairAction,
    /// A replacement because a reboot did not help (or was recent).
    pub escalated: bool,
}

/// An eligible repair held this round, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// The node's claim.
    pub claim: String,
    /// Its pool.
    pub nodepool: String,
    /// The condition that made it unhealthy.
    pub condition: Signal,
    /// Why nothing was done.
    pub why: Hold,
}

/// A pool's health at the last round, for status and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolHealth {
    /// The pool's ready nodes.
    pub nodes: u32,
    /// Those matching one of its repair rules (whatever the toleration).
    pub unhealthy: u32,
    /// The breaker's threshold: `maxUnhealthy` of `nodes`.
    pub max_unhealthy: u32,
}

impl PoolHealth {
    /// Whether the breaker holds the pool's repairs.
    pub fn breaker_open(&self) -> bool {
        self.unhealthy > self.max_unhealthy
    }
}

/// A node consolidation is to replace for repair.
#[derive(Debug, Clone, PartialEq)]
pub struct Replacement {
    /// The node's claim.
    pub claim: String,
    /// The node still works: its pods run and may checkpoint, and
    /// `do-not-disrupt` pods are waited for; otherwise they are not.
    pub works: bool,
}

/// A pool's repair rules, compiled.
#[derive(Debug)]
struct Rules {
    rules: Vec<Rule>,
    max_unhealthy: crate::api::BudgetNodes,
    reboot_timeout: Duration,
}

#[derive(Debug)]
struct Rule {
    type_: String,
    status: &'static str,
    pattern: Option<Regex>,
    toleration: Duration,
    action: RepairAction,
}

impl Rule {
    /// Whether the rule is about the signal's condition type and status.
    fn about(&self, s: &Signal) -> bool {
        // The status first: a healthy node's `True` differs from a rule's
        // `False` or `Unknown` in length, without comparing bytes.
        self.status == s.status && self.type_ == s.type_
    }

    /// Whether its reason pattern matches the signal's reason; `None`: it
    /// has no pattern (any reason).
    fn matched(&self, s: &Signal) -> Option<bool> {
        self.pattern.as_ref().map(|p| p.is_match(&s.reason))
    }
}

/// What the rules make of one node now.
#[derive(Debug, Clone)]
struct Finding {
    signal: Signal,
    action: RepairAction,
    eligible_at: Time,
}

impl Rules {
    /// A pool's rules from its repair settings; a rule that does not read
    /// (a pattern that is not a regular expression, a bad duration) is
    /// left out, as validation reports it.
    fn of(r: &crate::api::Repair) -> Rules {
        let rules = r
            .conditions
            .iter()
            .filter_map(|c| {
                let pattern = match &c.reason_pattern {
                    Some(p) => Some(Regex::new(p).ok()?),
                    None => None,
                };
                Some(Rule {
                    type_: c.type_.clone(),
                    status: c.status.as_str(),
                    pattern,
                    toleration: c.toleration().ok()?,
                    action: c.action,
                })
            })
            .collect();
        Rules {
            rules,
            max_unhealthy: r
                .max_unhealthy_nodes()
                .unwrap_or(crate::api::BudgetNodes::Percent(20)),
            reboot_timeout: r
                .reboot_timeout_duration()
                .unwrap_or(Duration::from_secs(15 * 60)),
        }
    }

    /// The rules that apply to a signal: those of its type and status whose
    /// pattern matches its reason, else those of its type and status
    /// without a pattern.
    fn applying<'r>(&'r self, s: &Signal) -> Vec<&'r Rule> {
        let same: Vec<&Rule> = self.rules.iter().filter(|r| r.about(s)).collect();
        let specific: Vec<&Rule> = same
            .iter()
            .copied()
            .filter(|r| r.matched(s) == Some(true))
            .collect();
        if specific.is_empty() {
            same.into_iter()
                .filter(|r| r.matched(s).is_none())
                .collect()
        } else {
            specific
        }
    }

    /// Whether any rule applies to the signal ([`Rules::applying`] is not
    /// empty), without gathering them: asked of every node's signals on
    /// every round.
    fn applies(&self, s: &Signal) -> bool {
        // Some rule of the same type and status matches by its pattern, or
        // has none: exactly when `applying` returns one or the other set.
        self.rules
            .iter()
            .any(|r| r.about(s) && r.matched(s) != Some(false))
    }

    /// The finding for the node: among its signals that rules apply to,
    /// an eligible one (a replacement before a reboot, then the earliest),
    /// else the one that becomes eligible first.
    fn assess(&self, health: &Health, now: Time) -> Option<Finding> {
        let mut best: Option<Finding> = None;
        for s in &health.signals {
            for r in self.applying(s) {
                let f = Finding {
                    signal: s.clone(),
                    action: r.action,
                    eligible_at: after(s.since, r.toleration),
                };
                let rank = |f: &Finding| {
                    let eligible = f.eligible_at <= now;
                    (
                        !eligible,
                        eligible && f.action != RepairAction::Replace,
                        f.eligible_at,
                    )
                };
                if best.as_ref().is_none_or(|b| rank(&f) < rank(b)) {
                    best = Some(f);
                }
            }
        }
        best
    }
}

/// A reboot under way: checkpoints asked, then the reboot.
#[derive(Debug, Clone)]
struct Reboot {
    condition: Signal,
    /// Pods asked to checkpoint, with when.
    requested: BTreeMap<String, Time>,
    /// Until when they are waited for.
    until: Time,
    /// When the reboot was issued.
    rebooted_at: Option<Time>,
    /// The node was looked at once its `rebootTimeout` was over.
    checked: bool,
}

/// What repair reads besides the world: which nodes other decisions own.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// Nodes under interruption handling or being removed by
    /// consolidation: left to them, and counted against the budgets.
    pub busy: &'a dyn Fn(&str) -> bool,
}

/// Repair's state: reboots under way and remembered, and what the last
/// round decided and held.
#[derive(Debug, Clone, Default)]
pub struct Repairs {
    reboots: BTreeMap<String, Reboot>,
    decided: Vec<RepairDecision>,
    held: Vec<Held>,
    pools: BTreeMap<String, PoolHealth>,
    next: Option<Time>,
    last_now: Option<Time>,
    /// The rules compiled in the last round, by the repair settings they
    /// came from: the same settings give the same rules, so a round
    /// compiles only settings that changed (compiling every pool's on every
    /// round was a measurable share of long simulations).
    compiled: Vec<(crate::api::Repair, Arc<Rules>)>,
    /// Each node's pool, kept while the nodes and the pools' names stay the
    /// same.
    pool_of: PoolIndex,
    /// What the rules made of the nodes' signals at a generation of
    /// `pool_of`.
    signals: Signals,
}

/// Per pool, its nodes, those Ready, and those Ready with a signal a rule of
/// the pool applies to.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    all: u32,
    ready: u32,
    unhealthy: u32,
}

/// What the rules make of every node's signals, for one generation of the
/// nodes' [`PoolIndex`] and the rules of each pool: it changes only with
/// them.
#[derive(Debug, Clone, Default)]
struct Signals {
    generation: u64,
    rules: Vec<Arc<Rules>>,
    /// By node: Ready, with a signal a rule of its pool applies to (a node
    /// without one has nothing to assess).
    sick: Vec<bool>,
    /// By pool.
    counts: Vec<Counts>,
}

impl Signals {
    /// Read from `world`'s nodes, each of pool `pool_of` (by position),
    /// with `rules` by pool.
    fn of(
        world: &World,
        pool_of: &[Option<usize>],
        rules: &[Arc<Rules>],
        generation: u64,
    ) -> Signals {
        let mut counts = vec![Counts::default(); world.pools.len()];
        let mut sick = vec![false; world.nodes.len()];
        for (k, (n, i)) in world.nodes.iter().zip(pool_of).enumerate() {
            let Some(i) = *i else { continue };
            let c = &mut counts[i];
            c.all += 1;
            if n.ready_at.is_some() {
                c.ready += 1;
                if n.health.signals.iter().any(|s| rules[i].applies(s)) {
                    c.unhealthy += 1;
                    sick[k] = true;
                }
            }
        }
        Signals {
            generation,
            rules: rules.to_vec(),
            sick,
            counts,
        }
    }
}

impl Repairs {
    /// Nothing under way.
    pub fn new() -> Repairs {
        Repairs::default()
    }

    /// The repairs started by the last [`Repairs::decide`].
    pub fn decisions(&self) -> &[RepairDecision] {
        &self.decided
    }

    /// The eligible repairs the last [`Repairs::decide`] held, and why.
    pub fn held(&self) -> &[Held] {
        &self.held
    }

    /// Each pool's health at the last [`Repairs::decide`].
    pub fn pools(&self) -> &BTreeMap<String, PoolHealth> {
        &self.pools
    }

    /// Whether a reboot of the node is under way (checkpoints asked, or
    /// rebooted less than its pool's `rebootTimeout` ago as of the last
    /// round): other decisions leave it alone.
    pub fn is_rebooting(&self, claim: &str) -> bool {
        self.reboots.get(claim).is_some_and(|r| {
            r.rebooted_at.is_none() || self.last_now.is_some_and(|now| now < r.until)
        })
    }

    /// The next time [`Repairs::decide`] may act without any change in the
    /// world: a toleration running out, a checkpoint wait ending, a
    /// rebooted node's `rebootTimeout`.
    pub fn next_deadline(&self) -> Option<Time> {
        self.next
    }

    /// One round: reboots (checkpoints first), and the nodes to replace,
    /// which the caller hands to consolidation.
    pub fn decide(
        &mut self,
        world: &World,
        now: Time,
        ctx: &Context,
    ) -> (Vec<Action>, Vec<Replacement>) {
        self.decided.clear();
        self.held.clear();
        self.pools.clear();
        self.last_now = Some(now);
        let mut next: Vec<Time> = Vec::new();
        self.reboots.retain(|claim, r| {
            world.nodes.iter().any(|n| &n.claim == claim)
                && r.rebooted_at.is_none_or(|t| now < after(t, REBOOT_MEMORY))
        });
        // Moved from the last round's, compiled only where new: nothing is
        // cloned or compiled on a round whose pools are as they were.
        let mut last = std::mem::take(&mut self.compiled);
        let compiled = &mut self.compiled;
        let rules: Vec<Arc<Rules>> = world
            .pools
            .iter()
            .map(|p| {
                let spec = &p.spec.repair;
                if let Some((_, r)) = compiled.iter().find(|(s, _)| s == spec) {
                    return r.clone();
                }
                let entry = match last.iter().position(|(s, _)| s == spec) {
                    Some(i) => last.swap_remove(i),
                    None => (spec.clone(), Arc::new(Rules::of(spec))),
                };
                let r = entry.1.clone();
                compiled.push(entry);
                r
            })
            .collect();
        let names: Vec<&str> = world
            .pools
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or_default())
            .collect();
        // Each node's pool, by the last pool of its name (pools' names are
        // unique; were they not, the last of a name is the one its rules and
        // budget come from, as a map by name would keep). One pass over the
        // nodes counts what the breaker and the budgets read: this runs on
        // every round, over every node.
        let mut index = std::mem::take(&mut self.pool_of);
        index.update(world, Repeated::Last);
        let pool_of = index.nodes();
        // What the rules make of each node's signals, kept while the nodes,
        // the pools and their rules are the same (reading every node's
        // signals on every round was most of this step).
        let known = self.signals.generation == index.generation()
            && self.signals.rules.len() == rules.len()
            && self
                .signals
                .rules
                .iter()
                .zip(&rules)
                .all(|(a, b)| Arc::ptr_eq(a, b));
        if !known {
            self.signals = Signals::of(world, pool_of, &rules, index.generation());
        }
        let Signals { sick, counts, .. } = &self.signals;
        let mut disrupting = vec![0u32; names.len()];
        for (n, i) in world.nodes.iter().zip(pool_of) {
            let Some(i) = *i else { continue };
            if n.state.unschedulable || (ctx.busy)(&n.claim) || self.is_rebooting(&n.claim) {
                disrupting[i] += 1;
            }
        }
        // The breaker and the budgets, per pool.
        let mut allowed: Vec<u32> = vec![0; names.len()];
        for (i, pool) in world.pools.iter().enumerate() {
            let (name, c) = (names[i], counts[i]);
            let last = names.iter().rposition(|p| *p == name).unwrap_or(i);
            let r = &rules[last];
            self.pools.insert(
                name.to_string(),
                PoolHealth {
                    nodes: c.ready,
                    unhealthy: c.unhealthy,
                    max_unhealthy: r.max_unhealthy.allowed(c.ready),
                },
            );
            allowed[last] = super::budgets::allowed_disruptions_for(
                pool,
                BudgetReason::Unhealthy,
                c.all,
                disrupting[i],
                now,
            )
            .unwrap_or(0);
        }

        let mut out = Vec::new();
        let mut replace = Vec::new();
        for (k, (n, i)) in world.nodes.iter().zip(pool_of).enumerate() {
            let Some(i) = *i else {
                continue;
            };
            // No rule applies and no reboot is under way: `assess` finds
            // nothing (most nodes, on most rounds).
            if !sick[k] && !self.reboots.contains_key(&n.claim) {
                continue;
            }
            let pool_name = names[i];
            let r = &rules[i];
            if n.ready_at.is_none()
                || n.state.in_flight
                || n.state.unschedulable
                || n.disrupted
                || (ctx.busy)(&n.claim)
            {
                continue;
            }
            let works = n.health.works();
            // A reboot under way; once its `rebootTimeout` is over, a node
            // still unhealthy by any rule (whatever its toleration) is
            // replaced at once.
            let mut forced = false;
            if let Some(rb) = self.reboots.get_mut(&n.claim) {
                match rb.rebooted_at {
                    None => {
                        let acked = |p: &super::BoundPod| {
                            rb.requested.get(&p.pod.name).is_some_and(|asked| {
                                p.checkpoint_completed.is_some_and(|d| d >= *asked)
                            })
                        };
                        let waiting = n
                            .pods
                            .iter()
                            .any(|p| rb.requested.contains_key(&p.pod.name) && !acked(p));
                        if waiting && now < rb.until {
                            next.push(rb.until);
                            continue;
                        }
                        rb.rebooted_at = Some(now);
                        rb.until = after(now, r.reboot_timeout);
                        next.push(rb.until);
                        out.push(Action::Reboot {
                            claim: n.claim.clone(),
                            condition: rb.condition.to_string(),
                        });
                        continue;
                    }
                    Some(_) if now < rb.until => {
                        next.push(rb.until);
                        continue;
                    }
                    Some(_) if !rb.checked => {
                        rb.checked = true;
                        forced = true;
                    }
                    Some(_) => {}
                }
            }
            let last_reboot = self
                .reboots
                .get(&n.claim)
                .and_then(|rb| rb.rebooted_at)
                .max(n.health.rebooted_at)
                .filter(|t| now < after(*t, REBOOT_MEMORY));
            let finding = match r.assess(&n.health, now) {
                Some(f) if forced => Finding {
                    eligible_at: now,
                    action: RepairAction::Replace,
                    ..f
                },
                Some(f) => f,
                None => continue,
            };
            if finding.eligible_at > now {
                next.push(finding.eligible_at);
                continue;
            }
            let escalated =
                forced || finding.action == RepairAction::Reboot && last_reboot.is_some();
            let action = if escalated {
                RepairAction::Replace
            } else {
                finding.action
            };
            let do_not_disrupt = n.do_not_disrupt || n.pods.iter().any(|p| p.do_not_disrupt);
            let budget = &mut allowed[i];
            let hold = if n.health.do_not_repair {
                Some(Hold::DoNotRepair)
            } else if self.pools[pool_name].breaker_open() {
                Some(Hold::Breaker)
            } else if works && do_not_disrupt {
                Some(Hold::DoNotDisrupt)
            } else if *budget == 0 {
                Some(Hold::Budget)
            } else {
                None
            };
            if let Some(why) = hold {
                self.held.push(Held {
                    claim: n.claim.clone(),
                    nodepool: n.nodepool.clone(),
                    condition: finding.signal,
                    why,
                });
                continue;
            }
            *budget -= 1;
            self.decided.push(RepairDecision {
                claim: n.claim.clone(),
                nodepool: n.nodepool.clone(),
                condition: finding.signal.clone(),
                action,
                escalated,
            });
            match action {
                RepairAction::Replace => {
                    self.reboots.remove(&n.claim);
                    replace.push(Replacement {
                        claim: n.claim.clone(),
                        works,
                    });
                }
                RepairAction::Reboot => {
                    let mut rb = Reboot {
                        condition: finding.signal,
                        requested: BTreeMap::new(),
                        until: now,
                        rebooted_at: None,
                        checked: false,
                    };
                    if works {
                        rb.until = super::consolidation::ask_to_checkpoint(
                            world,
                            n,
                            now,
                            &mut rb.requested,
                            &mut out,
                        );
                    }
                    if rb.requested.is_empty() {
                        rb.rebooted_at = Some(now);
                        rb.until = after(now, r.reboot_timeout);
                        out.push(Action::Reboot {
                            claim: n.claim.clone(),
                            condition: rb.condition.to_string(),
                        });
                    }
                    next.push(rb.until);
                    self.reboots.insert(n.claim.clone(), rb);
                }
            }
        }
        self.next = next.into_iter().filter(|t| *t > now).min();
        self.pool_of = index;
        (out, replace)
    }
}

#[cfg(test)]
mod tests {
    use super::super::interruption::fixtures::*;
    use super::super::ManagedNode;
    use super::*;
    use crate::api::{Budget, NodePool, NodePoolSpec, RepairCondition};

    const ACCEL: &str = crate::api::nodepool::ACCELERATED_HARDWARE_READY;

    /// A node of pool `gpu` that is `Ready` (or, since t(500), not: too
    /// recently for its own rule) and carries `signals`.
    fn sick(claim: &str, ready: bool, signals: &[Signal]) -> ManagedNode {
        let mut n = node(claim);
        let ready = if ready {
            Signal::new("Ready", "True", "", t(-7000))
        } else {
            Signal::new("Ready", "False", "KubeletNotReady", t(500))
        };
        n.health.signals.push(ready);
        n.health.signals.extend(signals.iter().cloned());
        n
    }

    /// `AcceleratedHardwareReady=False` with that reason since `at`.
    fn gpu_fault(reason: &str, at: i64) -> Signal {
        Signal::new(ACCEL, "False", reason, t(at))
    }

    fn pool(edit: impl FnOnce(&mut NodePoolSpec)) -> Vec<NodePool> {
        vec![pool_with("gpu", |s| {
            // A budget that never holds, unless a test sets one.
            s.disruption.budgets = vec![Budget {
                nodes: "100%".into(),
                ..Budget::default()
            }];
            edit(s);
        })]
    }

    fn step(r: &mut Repairs, f: &Fixture, at: i64) -> (Vec<Action>, Vec<Replacement>) {
        r.decide(&f.world(), t(at), &Context { busy: &|_| false })
    }

    fn reboots(actions: &[Action]) -> Vec<&str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Reboot { claim, .. } => Some(claim.as_str()),
                _ => None,
            })
            .collect()
    }

    fn replaced(orders: &[Replacement]) -> Vec<&str> {
        orders.iter().map(|o| o.claim.as_str()).collect()
    }

    #[test]
    fn a_gpu_fault_past_its_toleration_reboots_the_node_and_not_before() {
        let mut f = Fixture::new([sick("n1", true, &[gpu_fault("NvidiaXID79Error", 0)])]);
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        assert_eq!(step(&mut r, &f, 599), (vec![], vec![]));
        assert_eq!(r.next_deadline(), Some(t(600)), "the 10m toleration");
        let (actions, orders) = step(&mut r, &f, 600);
        assert_eq!(
            actions,
            [Action::Reboot {
                claim: "n1".into(),
                condition: "AcceleratedHardwareReady=False (NvidiaXID79Error)".into()
            }]
        );
        assert!(orders.is_empty());
        assert_eq!(r.decisions()[0].action, RepairAction::Reboot);
        assert!(r.is_rebooting("n1"));
        // Issued once; the node is given its rebootTimeout (15m).
        assert_eq!(step(&mut r, &f, 601), (vec![], vec![]));
        assert_eq!(r.next_deadline(), Some(t(600 + 900)));
    }

    #[test]
    fn a_node_still_unhealthy_after_its_reboot_timeout_is_replaced_and_a_recovered_one_is_not() {
        let mut f = Fixture::new([sick("n1", true, &[gpu_fault("NvidiaXID48Error", 0)])]);
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        assert_eq!(reboots(&step(&mut r, &f, 600).0), ["n1"]);
        let (_, orders) = step(&mut r, &f, 1500);
        assert_eq!(replaced(&orders), ["n1"]);
        assert!(r.decisions()[0].escalated);
        assert!(!r.is_rebooting("n1"));
        // The same, recovered by its reboot: nothing more.
        let mut r = Repairs::new();
        step(&mut r, &f, 600);
        f.node_mut("n1").health.signals.retain(|s| s.type_ != ACCEL);
        assert_eq!(step(&mut r, &f, 1500), (vec![], vec![]));
        // Unhealthy again the same day: replaced once its toleration is
        // over, not rebooted again; the reboot is remembered from the
        // claim by a restarted controller too.
        f.node_mut("n1")
            .health
            .signals
            .push(gpu_fault("NvidiaXID48Error", 5000));
        assert_eq!(step(&mut r, &f, 5599), (vec![], vec![]));
        assert_eq!(replaced(&step(&mut r, &f, 5600).1), ["n1"]);
        let mut restarted = Repairs::new();
        f.node_mut("n1").health.rebooted_at = Some(t(600));
        assert_eq!(replaced(&step(&mut restarted, &f, 5600).1), ["n1"]);
        // A day later a fault is rebooted again.
        let mut later = Repairs::new();
        let day = 24 * 3600;
        f.node_mut("n1").health.signals = vec![
            Signal::new("Ready", "True", "", t(0)),
            gpu_fault("NvidiaXID48Error", 600 + day),
        ];
        assert_eq!(reboots(&step(&mut later, &f, 1200 + day).0), ["n1"]);
    }

    #[test]
    fn checkpointing_pods_of_a_working_node_checkpoint_before_the_reboot() {
        let n = sick("n1", true, &[gpu_fault("NvidiaXID79Error", 0)])
            .pods([pod("a").checkpoints(), pod("b")]);
        let mut f = Fixture::new([n]);
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        let (first, _) = step(&mut r, &f, 600);
        assert!(
            matches!(first.as_slice(), [Action::RequestCheckpoint { pod, deadline, .. }] if pod == "a" && *deadline == t(690)),
            "{first:?}"
        );
        assert!(r.is_rebooting("n1"), "other decisions keep off");
        assert_eq!(step(&mut r, &f, 630).0, []);
        f.node_mut("n1").pods[0].checkpoint_completed = Some(t(640));
        assert_eq!(reboots(&step(&mut r, &f, 641).0), ["n1"]);
        // Without an acknowledgement, the grace period ends the wait.
        let mut f2 =
            Fixture::new([sick("n1", true, &[gpu_fault("NvidiaXID79Error", 0)])
                .pods([pod("a").checkpoints()])]);
        f2.pools = pool(|_| {});
        let mut r = Repairs::new();
        step(&mut r, &f2, 600);
        assert_eq!(r.next_deadline(), Some(t(690)));
        assert_eq!(reboots(&step(&mut r, &f2, 690).0), ["n1"]);
        // A node that is not Ready has no running pod to ask.
        let mut f3 =
            Fixture::new([sick("n1", false, &[gpu_fault("NvidiaXID79Error", 0)])
                .pods([pod("a").checkpoints()])]);
        f3.pools = pool(|_| {});
        let mut r = Repairs::new();
        assert_eq!(reboots(&step(&mut r, &f3, 600).0), ["n1"]);
    }

    #[test]
    fn faults_a_reboot_does_not_fix_and_dead_kubelets_are_replaced_at_once() {
        let mut f = Fixture::new([
            sick("fabric", true, &[gpu_fault("NvidiaFabricError", 0)]),
            {
                let mut n = node("gone");
                n.health
                    .signals
                    .push(Signal::new("Ready", "Unknown", "NodeStatusUnknown", t(0)));
                n
            },
            node("well"),
        ]);
        f.pools = pool(|s| s.repair.max_unhealthy = "2".into());
        let mut r = Repairs::new();
        let (actions, orders) = step(&mut r, &f, 600);
        assert!(reboots(&actions).is_empty());
        assert_eq!(replaced(&orders), ["fabric"]);
        assert!(orders[0].works);
        // The kubelet's 30m (fabric is consolidation's by then).
        let busy = |c: &str| c == "fabric";
        let (_, orders) = r.decide(&f.world(), t(1800), &Context { busy: &busy });
        assert_eq!(replaced(&orders), ["gone"]);
        assert!(!orders[0].works);
    }

    #[test]
    fn the_breaker_holds_a_pool_with_more_unhealthy_nodes_than_max_unhealthy() {
        // 10 nodes, 20%: two may be unhealthy; a third opens the breaker.
        let nodes = |bad: usize| {
            (0..10).map(move |i| {
                let claim = format!("n{i}");
                if i < bad {
                    sick(&claim, true, &[gpu_fault("NvidiaXID79Error", 0)])
                } else {
                    sick(&claim, true, &[])
                }
            })
        };
        let mut f = Fixture::new(nodes(3));
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        let (actions, orders) = step(&mut r, &f, 600);
        assert!(actions.is_empty() && orders.is_empty(), "{actions:?}");
        assert_eq!(r.held().len(), 3);
        assert!(r.held().iter().all(|h| h.why == Hold::Breaker));
        assert!(r.pools()["gpu"].breaker_open());
        let mut f = Fixture::new(nodes(2));
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        assert_eq!(reboots(&step(&mut r, &f, 600).0), ["n0", "n1"]);
        assert!(!r.pools()["gpu"].breaker_open());
    }

    #[test]
    fn each_nodes_pool_is_read_again_when_the_nodes_revision_or_the_pools_change() {
        let mut f = Fixture::new([sick("a", true, &[]), sick("b", true, &[])]);
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        fn world(f: &Fixture, revision: u64) -> World<'_> {
            World {
                nodes_revision: revision,
                ..f.world()
            }
        }
        let ctx = Context { busy: &|_| false };
        r.decide(&world(&f, 3), t(0), &ctx);
        assert_eq!(r.pools()["gpu"].nodes, 2);
        // A node gone, under a new revision.
        f.nodes.pop();
        r.decide(&world(&f, 4), t(10), &ctx);
        assert_eq!(r.pools()["gpu"].nodes, 1);
        // Another pool ahead of `gpu`, the same nodes: still `gpu`'s node.
        let mut other = pool(|_| {});
        other[0].metadata.name = Some("cpu".into());
        f.pools.splice(0..0, other);
        r.decide(&world(&f, 4), t(20), &ctx);
        assert_eq!((r.pools()["gpu"].nodes, r.pools()["cpu"].nodes), (1, 0));
        // The node moved to `cpu` (a change of the node: a new revision).
        f.node_mut("a").nodepool = "cpu".into();
        r.decide(&world(&f, 5), t(30), &ctx);
        assert_eq!((r.pools()["gpu"].nodes, r.pools()["cpu"].nodes), (0, 1));
    }

    #[test]
    fn do_not_repair_always_holds_and_do_not_disrupt_only_while_the_node_works() {
        let fault = [gpu_fault("NvidiaXID79Error", 0)];
        let mut marked = sick("n1", true, &fault);
        marked.health.do_not_repair = true;
        let mut f = Fixture::new([marked]);
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        assert_eq!(step(&mut r, &f, 3600), (vec![], vec![]));
        assert_eq!(r.held()[0].why, Hold::DoNotRepair);
        let pinned = |ready: bool| {
            let mut f = Fixture::new([sick("n1", ready, &fault).pods([pod("a").do_not_disrupt()])]);
            f.pools = pool(|_| {});
            let mut r = Repairs::new();
            let out = step(&mut r, &f, 700);
            (out, r.held().to_vec())
        };
        let ((actions, _), held) = pinned(true);
        assert!(actions.is_empty());
        assert_eq!(held[0].why, Hold::DoNotDisrupt);
        let ((actions, _), held) = pinned(false);
        assert_eq!(reboots(&actions), ["n1"]);
        assert!(held.is_empty());
    }

    #[test]
    fn budgets_for_unhealthy_limit_repairs_and_budgets_for_other_reasons_do_not() {
        let fault = [gpu_fault("NvidiaXID79Error", 0)];
        let budget = |reasons: Vec<BudgetReason>| Budget {
            nodes: "0".into(),
            reasons,
            ..Budget::default()
        };
        let run = |b: Budget| {
            let mut f = Fixture::new([sick("n1", true, &fault), sick("n2", true, &[])]);
            f.pools = pool(|s| s.disruption.budgets = vec![b]);
            let mut r = Repairs::new();
            let (actions, _) = step(&mut r, &f, 600);
            (
                reboots(&actions).len(),
                r.held().iter().map(|h| h.why).collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            run(budget(vec![BudgetReason::Unhealthy])),
            (0, vec![Hold::Budget])
        );
        assert_eq!(run(budget(vec![])), (0, vec![Hold::Budget]));
        assert_eq!(run(budget(vec![BudgetReason::Drifted])), (1, vec![]));
    }

    #[test]
    fn a_reason_pattern_rule_wins_over_its_conditions_fallback_and_unknown_conditions_are_ignored()
    {
        let mut f = Fixture::new([
            sick("n1", true, &[gpu_fault("NvidiaXID13Error", 0)]),
            sick(
                "n2",
                true,
                &[Signal::new("SomethingElse", "False", "", t(0))],
            ),
            sick("n3", true, &[gpu_fault("NvidiaXID79Error", 0)]).cordoned(),
        ]);
        f.pools = pool(|s| {
            s.repair.conditions = vec![
                RepairCondition {
                    type_: ACCEL.into(),
                    status: crate::api::ConditionStatus::False,
                    reason_pattern: Some("^NvidiaXID13Error$".into()),
                    toleration_duration: "1h".into(),
                    action: RepairAction::Replace,
                },
                RepairCondition {
                    type_: ACCEL.into(),
                    status: crate::api::ConditionStatus::False,
                    reason_pattern: None,
                    toleration_duration: "1m".into(),
                    action: RepairAction::Reboot,
                },
            ];
            s.repair.max_unhealthy = "100%".into();
        });
        let mut r = Repairs::new();
        // n1's own rule waits an hour; n2's condition has no rule; n3 is
        // cordoned (someone is at it).
        assert_eq!(step(&mut r, &f, 600), (vec![], vec![]));
        assert_eq!(r.next_deadline(), Some(t(3600)));
        assert_eq!(replaced(&step(&mut r, &f, 3600).1), ["n1"]);
        // No rules at all: repair is off.
        f.pools = pool(|s| s.repair.conditions.clear());
        assert_eq!(
            Repairs::new().decide(&f.world(), t(9999), &Context { busy: &|_| false }),
            (vec![], vec![])
        );
    }

    #[test]
    fn rules_follow_their_pools_settings_and_are_compiled_once_per_setting() {
        let mut f = Fixture::new([sick("n1", true, &[gpu_fault("NvidiaXID13Error", 0)])]);
        let replacing = |pattern: &str| {
            pool(|s| {
                s.repair.conditions = vec![RepairCondition {
                    type_: ACCEL.into(),
                    status: crate::api::ConditionStatus::False,
                    reason_pattern: Some(pattern.into()),
                    toleration_duration: "1m".into(),
                    action: RepairAction::Replace,
                }];
                s.repair.max_unhealthy = "100%".into();
            })
        };
        let mut r = Repairs::new();
        f.pools = replacing("^NvidiaXID79Error$");
        assert_eq!(step(&mut r, &f, 600), (vec![], vec![]));
        let first = r.compiled[0].1.clone();
        assert_eq!(step(&mut r, &f, 601), (vec![], vec![]));
        assert!(
            Arc::ptr_eq(&first, &r.compiled[0].1),
            "kept, not compiled again"
        );
        // The pool's rule now matches the node's fault: it is replaced.
        f.pools = replacing("^NvidiaXID13Error$");
        assert_eq!(replaced(&step(&mut r, &f, 602).1), ["n1"]);
        assert_eq!(r.compiled.len(), 1, "the old setting is forgotten");
        assert!(!Arc::ptr_eq(&first, &r.compiled[0].1));
        // Two pools of the same settings share one compiled set.
        let mut two = replacing("^NvidiaXID13Error$");
        two.push(two[0].clone());
        two[1].metadata.name = Some("gpu2".into());
        f.pools = two;
        step(&mut r, &f, 603);
        assert_eq!(r.compiled.len(), 1);
    }

    #[test]
    fn the_quick_check_agrees_with_the_rules_it_would_gather() {
        let rule = |type_: &str, pattern: Option<&str>| RepairCondition {
            type_: type_.into(),
            status: crate::api::ConditionStatus::False,
            reason_pattern: pattern.map(str::to_string),
            toleration_duration: "1m".into(),
            action: RepairAction::Reboot,
        };
        let pools = pool(|s| {
            s.repair.conditions = vec![
                // Only a pattern for the GPU condition: other reasons pass.
                rule(ACCEL, Some("^NvidiaXID(48|79)Error$")),
                // A pattern and a fallback for the network condition.
                rule("NetworkUnavailable", Some("^NoRoute$")),
                rule("NetworkUnavailable", None),
                // A fallback only for Ready.
                rule("Ready", None),
            ];
        });
        let rules = Rules::of(&pools[0].spec.repair);
        let signals = [
            (gpu_fault("NvidiaXID79Error", 0), true),
            (gpu_fault("NvidiaXID13Error", 0), false),
            (Signal::new(ACCEL, "True", "NvidiaXID79Error", t(0)), false),
            (
                Signal::new("NetworkUnavailable", "False", "NoRoute", t(0)),
                true,
            ),
            (
                Signal::new("NetworkUnavailable", "False", "Other", t(0)),
                true,
            ),
            (
                Signal::new("NetworkUnavailable", "True", "NoRoute", t(0)),
                false,
            ),
            (Signal::new("Ready", "False", "KubeletNotReady", t(0)), true),
            (Signal::new("Ready", "Unknown", "", t(0)), false),
            (Signal::new("SomethingElse", "False", "", t(0)), false),
        ];
        for (s, expected) in &signals {
            assert_eq!(rules.applies(s), !rules.applying(s).is_empty(), "{s}");
            assert_eq!(rules.applies(s), *expected, "{s}");
        }
        // The specific rule wins over the fallback where both match.
        let network = &signals[3].0;
        assert_eq!(rules.applying(network).len(), 1);
        assert!(rules.applying(network)[0].pattern.is_some());
    }

    #[test]
    fn fatal_xids_read_as_the_agents_condition_and_application_xids_do_not() {
        assert_eq!(xid_signal(79, t(5)), Some(gpu_fault("NvidiaXID79Error", 5)));
        assert_eq!(xid_signal(13, t(5)), None);
        assert_eq!(xid_signal(0, t(5)), None);
    }

    #[test]
    fn nodes_another_decision_owns_are_left_alone() {
        let mut f = Fixture::new([sick("n1", true, &[gpu_fault("NvidiaXID79Error", 0)])]);
        f.pools = pool(|_| {});
        let mut r = Repairs::new();
        let busy = |c: &str| c == "n1";
        assert_eq!(
            r.decide(&f.world(), t(600), &Context { busy: &busy }),
            (vec![], vec![])
        );
    }
}
