//! Pre-warm windows (`spec.prewarm` of a NodePool): when a window is warming
//! or open, what capacity it asks for (as placeholder pods the planner can
//! place), when its state next changes, and whether it protects the pool's
//! nodes from consolidation. Also the launch-to-ready latency tracker that
//! sets how far ahead of a window we start launching. Owns timing and
//! demand; launching the placeholders' nodes is the planner's job.
//!
//! A window with start times `s` (its cron `schedule`, evaluated in its
//! `timeZone`, so `0 8 * * 1-5` in `Europe/Berlin` is 08:00 Berlin time in
//! winter and in summer), `duration` `d` and lead time `lead` is
//!
//! * **warming** from `s - lead` to `s`: capacity is being launched so that
//!   it is Ready when the window opens;
//! * **open** from `s` to `s + d`.
//!
//! Start times that fall into a daylight-saving gap (02:30 on the night
//! clocks spring forward) do not occur that day; a start in the repeated hour
//! in autumn occurs twice (once per pass, as the `cron` crate counts them). See
//! `docs/lifecycle-timing.md` for lead times and the placeholder split.

use super::time::{after, before, sooner};
use super::{ManagedNode, Time};
use crate::api::labels as l;
use crate::api::nodepool::{LIMIT_COST_PER_HOUR, LIMIT_NODES};
use crate::api::{selected_instance_types, DurationError, NodePool, PrewarmWindow, ScheduleError};
use crate::catalog::{CapacityType, Catalog};
use crate::cluster::requirements::{NodeAffinity, Operator, Requirement, Toleration};
use crate::cluster::resources::CPU;
use crate::cluster::{Pod, Resources};
use chrono::TimeZone;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

/// Errors of this module: a window that cannot be read. Not retryable (the
/// NodePool must be fixed; `quartermaster validate` reports the same).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The window's `schedule` or `timeZone` is invalid.
    #[error("NodePool {pool}, pre-warm window {window}: {source}")]
    Schedule {
        /// NodePool.
        pool: String,
        /// Window name.
        window: String,
        /// What is wrong.
        source: ScheduleError,
    },
    /// The window's `duration` is invalid.
    #[error("NodePool {pool}, pre-warm window {window}: duration: {source}")]
    Duration {
        /// NodePool.
        pool: String,
        /// Window name.
        window: String,
        /// What is wrong.
        source: DurationError,
    },
    /// The window's `capacity` is not a list of resource quantities.
    #[error("NodePool {pool}, pre-warm window {window}: capacity: {reason}")]
    Capacity {
        /// NodePool.
        pool: String,
        /// Window name.
        window: String,
        /// What is wrong.
        reason: String,
    },
}

/// This module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a window is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Between `start - lead` and `start`: launching ahead of the opening.
    Warming,
    /// Between `start` and `end`.
    Open,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Warming => "warming",
            Phase::Open => "open",
        })
    }
}

/// One occurrence of a window that is warming or open at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveWindow {
    /// Window name.
    pub window: String,
    /// Warming or open.
    pub phase: Phase,
    /// `start - lead`.
    pub warm_from: Time,
    /// When this occurrence opens (or opened).
    pub start: Time,
    /// When it closes (`start + duration`). Occurrences that overlap (a
    /// duration longer than the schedule's period) are reported one at a
    /// time: at `end` the next one is already open.
    pub end: Time,
}

/// The windows of the pool that are open at `now` (warming ones excluded).
///
/// # Errors
///
/// [`Error`] for the first window with an invalid schedule, zone or duration.
pub fn active_windows(pool: &NodePool, now: Time) -> Result<Vec<ActiveWindow>> {
    windows_to_start(pool, now, Duration::ZERO)
}

/// The windows of the pool that are warming or open at `now`, with lead time
/// `lead` (see [`LaunchLatency::lead_for_pool`]): those whose capacity
/// should be launched or held now.
///
/// # Errors
///
/// [`Error`] for the first window with an invalid schedule, zone or duration.
pub fn windows_to_start(pool: &NodePool, now: Time, lead: Duration) -> Result<Vec<ActiveWindow>> {
    let mut out = Vec::new();
    for w in &pool.spec.prewarm {
        let t = Timing::of(pool, w)?;
        if let Some(start) = t.current_start(now, lead) {
            out.push(ActiveWindow {
                window: w.name.clone(),
                phase: if start <= now {
                    Phase::Open
                } else {
                    Phase::Warming
                },
                warm_from: before(start, lead),
                start,
                end: after(start, t.duration),
            });
        }
    }
    Ok(out)
}

/// Whether consolidation must leave the pool's nodes alone: some window is
/// warming or open.
///
/// # Errors
///
/// [`Error`] for the first window with an invalid schedule, zone or duration.
pub fn protects(pool: &NodePool, now: Time, lead: Duration) -> Result<bool> {
    Ok(!windows_to_start(pool, now, lead)?.is_empty())
}

/// The next instant after `now` at which a window of the pool starts
/// warming, opens or closes; `None` when the pool has no window that will
/// ever do so. The state may be unchanged then (overlapping windows); it is
/// a time to decide again, not a promise of change.
///
/// # Errors
///
/// [`Error`] for the first window with an invalid schedule, zone or duration.
pub fn next_deadline(pool: &NodePool, now: Time, lead: Duration) -> Result<Option<Time>> {
    let mut next: Option<Time> = None;
    let mut consider = |t: Time| {
        if t > now {
            sooner(&mut next, t);
        }
    };
    for w in &pool.spec.prewarm {
        if let Some(t) = Timing::of(pool, w)?.next_change(now, lead) {
            consider(t);
        }
    }
    Ok(next)
}

/// [`next_deadline`] of one window read on its own (a scheduled
/// CapacityBuffer's); `owner` names it in errors.
///
/// # Errors
///
/// [`Error::Schedule`] or [`Error::Duration`] when its schedule, zone or
/// duration does not read.
pub fn window_deadline(
    owner: &str,
    w: &PrewarmWindow,
    now: Time,
    lead: Duration,
) -> Result<Option<Time>> {
    Ok(Timing::parse(owner, w)?.next_change(now, lead))
}

/// The start of the occurrence of `w` that is warming or open at `now`
/// with lead time `lead`, if any: the window read on its own, outside a
/// pool (a scheduled CapacityBuffer's, `core::buffers`); its `capacity`
/// is not read. `owner` names it in errors.
///
/// # Errors
///
/// [`Error::Schedule`] or [`Error::Duration`] when its schedule, zone or
/// duration does not read.
pub fn current_start(
    owner: &str,
    w: &PrewarmWindow,
    now: Time,
    lead: Duration,
) -> Result<Option<Time>> {
    Ok(Timing::parse(owner, w)?.current_start(now, lead))
}

/// A window's schedule, zone and duration, parsed.
struct Timing {
    schedule: cron::Schedule,
    zone: chrono_tz::Tz,
    duration: Duration,
}

impl Timing {
    /// The next instant after `now` the window starts warming, opens or
    /// closes.
    fn next_change(&self, now: Time, lead: Duration) -> Option<Time> {
        let mut next: Option<Time> = None;
        let mut consider = |t: Time| {
            if t > now {
                sooner(&mut next, t);
            }
        };
        if let Some(start) = self.current_start(now, lead) {
            consider(start);
            consider(after(start, self.duration));
        }
        if let Some(s) = self.first_start_after(after(now, lead)) {
            consider(before(s, lead));
        }
        next
    }

    fn of(pool: &NodePool, w: &PrewarmWindow) -> Result<Timing> {
        Timing::parse(pool_name(pool), w)
    }

    /// The window's timing; `owner` names it in errors.
    fn parse(owner: &str, w: &PrewarmWindow) -> Result<Timing> {
        let sched_err = |source| Error::Schedule {
            pool: owner.to_string(),
            window: w.name.clone(),
            source,
        };
        Ok(Timing {
            schedule: w.parse_schedule().map_err(sched_err)?,
            zone: w.parse_time_zone().map_err(sched_err)?,
            duration: w.parse_duration().map_err(|source| Error::Duration {
                pool: owner.to_string(),
                window: w.name.clone(),
                source,
            })?,
        })
    }

    /// The earliest start `s` with `now - duration < s <= now + lead`: the
    /// occurrence that is warming or open at `now`, if any.
    fn current_start(&self, now: Time, lead: Duration) -> Option<Time> {
        self.first_start_after(before(now, self.duration))
            .filter(|s| *s <= after(now, lead))
    }

    fn first_start_after(&self, t: Time) -> Option<Time> {
        first_start_after(&self.schedule, &self.zone, t)
    }
}

/// The first time strictly after `t` at which `schedule` fires, evaluated on
/// the wall clock of `zone`.
///
/// The `cron` crate searches by local wall-clock fields, which trips over
/// autumn's repeated hour twice: it can hand back the earlier of two
/// ambiguous times even when that precedes `t` (skipped here), and from a
/// `t` inside the first pass of the hour it misses the second pass. A second
/// search from an hour before `t` finds that one; the earlier result wins.
pub(crate) fn first_start_after<Z: TimeZone>(
    schedule: &cron::Schedule,
    zone: &Z,
    t: Time,
) -> Option<Time> {
    let search = |from: Time| {
        schedule
            .after(&from.with_timezone(zone))
            .take(8)
            .map(|s| s.with_timezone(&chrono::Utc))
            .find(|s| *s > t)
    };
    let an_hour_earlier = before(t, Duration::from_secs(3600));
    [search(t), search(an_hour_earlier)]
        .into_iter()
        .flatten()
        .min()
}

fn pool_name(pool: &NodePool) -> &str {
    pool.metadata.name.as_deref().unwrap_or("")
}

/// Prefix of placeholder pod names: `prewarm/<pool>/<window>/<i>`.
pub const PLACEHOLDER_PREFIX: &str = "prewarm/";

/// Label on placeholder pods naming their window.
pub const WINDOW_LABEL: &str = "quartermaster.dev/prewarm-window";

/// Most placeholder pods one window turns into; beyond it, each pod asks for
/// more than one unit.
pub const MAX_PLACEHOLDERS_PER_WINDOW: u32 = 1024;

/// Whether a pod name is a pre-warm placeholder's.
pub fn is_placeholder(pod: &str) -> bool {
    pod.starts_with(PLACEHOLDER_PREFIX)
}

/// Whether `pool`'s windows may be held on spot capacity: unless the pool
/// may launch on-demand nodes. A window holds capacity for work that is
/// about to arrive, and a spot node reclaimed minutes before the window
/// opens leaves it short while its replacement boots (`inference-prewarm`
/// with serving replicas on spot missed the start of 3 windows in 6 weeks
/// that way). Reserved capacity alone is no such fallback (a reservation
/// can be used up), so a pool of spot and reserved capacity still holds its
/// windows on either.
pub fn holds_on_spot(pool: &NodePool) -> bool {
    !pool
        .spec
        .allowed_capacity_types()
        .contains(&CapacityType::OnDemand)
}

/// The window's `capacity` as placeholder pods the planner can place,
/// named `prewarm/<pool>/<window>/<i>`, pinned to the pool (a
/// `quartermaster.dev/nodepool In [pool]` requirement), off spot when the
/// pool may launch on-demand ([`holds_on_spot`]), and tolerating its taints.
///
/// The split: one pod per accelerator unit (`nvidia.com/gpu: 16` is 16 pods
/// of one GPU; the largest count among GPU, MIG, Neuron and NeuronCore
/// resources sets the pod count), or one pod per CPU core when no
/// accelerator is named, at most [`MAX_PLACEHOLDERS_PER_WINDOW`]. Every
/// resource is divided as evenly as possible over the pods (remainders go to
/// the first pods), so the pods add up to exactly `capacity` and the planner
/// is free to choose how many nodes of which size hold them. Quantities are
/// in the units pods request: with time slicing, `nvidia.com/gpu.shared`
/// shares; with MIG, the `nvidia.com/mig-<profile>` resource.
///
/// # Errors
///
/// [`Error::Capacity`] when a quantity is malformed or the list names a
/// limit (`nodes`, `costPerHour`).
pub fn placeholder_pods(pool: &NodePool, window: &PrewarmWindow) -> Result<Vec<Pod>> {
    Ok(split(pool, &window.name, &capacity_of(pool, window)?))
}

/// The placeholder pods of every window warming or open at `now`. Windows
/// that overlap ask for "at least" their capacity each, so together they ask
/// for the per-resource maximum, not the sum: each window (in spec order)
/// contributes only what exceeds the windows before it.
///
/// # Errors
///
/// [`Error`] for the first window that cannot be read.
pub fn demand(pool: &NodePool, now: Time, lead: Duration) -> Result<Vec<Pod>> {
    let warming = windows_to_start(pool, now, lead)?;
    let mut held = Resources::new();
    let mut pods = Vec::new();
    for w in &pool.spec.prewarm {
        if !warming.iter().any(|a| a.window == w.name) {
            continue;
        }
        let capacity = capacity_of(pool, w)?;
        let mut extra = Resources::new();
        for (r, v) in capacity.iter() {
            extra.set(r, (v - held.get(r)).max(0));
        }
        held = held.max_with(&capacity);
        pods.extend(split(pool, &w.name, &extra));
    }
    Ok(pods)
}

fn capacity_of(pool: &NodePool, w: &PrewarmWindow) -> Result<Resources> {
    let err = |reason: String| Error::Capacity {
        pool: pool_name(pool).to_string(),
        window: w.name.clone(),
        reason,
    };
    if let Some(k) = w
        .capacity
        .keys()
        .find(|k| *k == LIMIT_NODES || *k == LIMIT_COST_PER_HOUR)
    {
        return Err(err(format!("{k} is a limit, not a resource to hold")));
    }
    Resources::parse(w.capacity.iter().map(|(k, q)| (k.as_str(), q.0.as_str())))
        .map_err(|e| err(e.to_string()))
}

fn is_accelerator(resource: &str) -> bool {
    resource == l::RESOURCE_GPU
        || resource == l::RESOURCE_GPU_SHARED
        || resource == l::RESOURCE_NEURON
        || resource == l::RESOURCE_NEURONCORE
        || resource.starts_with(l::RESOURCE_MIG_PREFIX)
}

fn split(pool: &NodePool, window: &str, capacity: &Resources) -> Vec<Pod> {
    if capacity.is_empty() {
        return Vec::new();
    }
    let accelerators = capacity
        .iter()
        .filter(|(r, _)| is_accelerator(r))
        .map(|(_, v)| v)
        .max();
    let units = accelerators.unwrap_or_else(|| (capacity.get(CPU) + 999) / 1000);
    let n = units.clamp(1, i64::from(MAX_PLACEHOLDERS_PER_WINDOW));
    let name = pool_name(pool);
    let mut term = vec![Requirement::new(l::NODEPOOL, Operator::In, &[name])];
    if !holds_on_spot(pool) {
        term.push(Requirement::new(
            l::CAPACITY_TYPE,
            Operator::NotIn,
            &[CapacityType::Spot.as_str()],
        ));
    }
    let affinity = NodeAffinity { terms: vec![term] };
    let tolerations: Vec<Toleration> = pool
        .spec
        .template
        .spec
        .taints
        .iter()
        .map(|t| Toleration {
            key: t.key.clone(),
            exists: false,
            value: t.value.clone().unwrap_or_default(),
            effect: Some(t.effect),
        })
        .collect();
    (0..n)
        .map(|i| {
            let mut requests = Resources::new();
            for (r, total) in capacity.iter() {
                let share = total.max(0) / n + i64::from(i < total.max(0) % n);
                requests.set(r, share);
            }
            let mut pod = Pod::new(
                &format!("{PLACEHOLDER_PREFIX}{name}/{window}/{i}"),
                requests,
            );
            pod.affinity = affinity.clone();
            pod.tolerations = tolerations.clone();
            pod.labels
                .insert(WINDOW_LABEL.to_string(), window.to_string());
            pod
        })
        .collect()
}

/// Observations before [`LaunchLatency::p90`] trusts them over the default.
pub const MIN_OBSERVATIONS: usize = 5;
/// Observations kept per family (the most recent), so the estimate follows
/// AMI and driver changes.
pub const MAX_OBSERVATIONS: usize = 50;

/// Our estimate of launch-to-ready time (instance boot, GPU or Neuron
/// driver, device plugin advertising the devices) for an instance family,
/// used until enough launches were observed. Estimates, not measured data:
/// 4 min for g4dn/g5/g6/g6e, 8 min for p4d/p4de, 10 min for p5/p5e/p5en,
/// 6 min for trn1/trn1n/trn2/inf2, 5 min for anything else.
pub fn default_launch_latency(family: &str) -> Duration {
    let minutes = match family {
        "g4dn" | "g5" | "g6" | "g6e" => 4,
        "p4d" | "p4de" => 8,
        "p5" | "p5e" | "p5en" => 10,
        "trn1" | "trn1n" | "trn2" | "inf2" => 6,
        _ => 5,
    };
    Duration::from_secs(minutes * 60)
}

/// The family of an EC2 instance type (`p4d.24xlarge` is `p4d`).
pub fn family_of(instance_type: &str) -> &str {
    instance_type
        .split_once('.')
        .map_or(instance_type, |(f, _)| f)
}

/// Observed launch-to-ready times per instance family, for pre-warm lead
/// times.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchLatency {
    samples: BTreeMap<String, VecDeque<Duration>>,
    /// The p90 of each family with enough samples, kept as they come:
    /// the lead time is read on every decision, samples arrive once per
    /// launch.
    p90s: BTreeMap<String, Duration>,
}

impl LaunchLatency {
    /// No observations.
    pub fn new() -> LaunchLatency {
        LaunchLatency::default()
    }

    /// Records one launch of `family` that became Ready. Call it once per
    /// node; a `ready_at` before `launched_at` is ignored.
    pub fn observe(&mut self, family: &str, launched_at: Time, ready_at: Time) {
        let Ok(d) = (ready_at - launched_at).to_std() else {
            return;
        };
        let s = self.samples.entry(family.to_string()).or_default();
        if s.len() == MAX_OBSERVATIONS {
            s.pop_front();
        }
        s.push_back(d);
        if s.len() >= MIN_OBSERVATIONS {
            let mut sorted: Vec<Duration> = s.iter().copied().collect();
            sorted.sort_unstable();
            let rank = (sorted.len() * 9).div_ceil(10);
            self.p90s.insert(family.to_string(), sorted[rank - 1]);
        }
    }

    /// Records a node's launch once it is Ready (nothing before).
    pub fn observe_node(&mut self, node: &ManagedNode) {
        if let Some(ready) = node.ready_at {
            self.observe(
                family_of(&node.offering.instance_type),
                node.launched_at,
                ready,
            );
        }
    }

    /// Observations kept for `family`.
    pub fn observations(&self, family: &str) -> usize {
        self.samples.get(family).map_or(0, VecDeque::len)
    }

    /// The 90th percentile (nearest rank) of the family's observed
    /// launch-to-ready times, or [`default_launch_latency`] with fewer than
    /// [`MIN_OBSERVATIONS`].
    pub fn p90(&self, family: &str) -> Duration {
        self.p90s
            .get(family)
            .copied()
            .unwrap_or_else(|| default_launch_latency(family))
    }

    /// The lead time for capacity of any of `families`: the largest p90, so
    /// that the slowest family the planner might pick is still Ready in
    /// time; the "others" default for no family.
    pub fn lead<I>(&self, families: I) -> Duration
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        families
            .into_iter()
            .map(|f| self.p90(f.as_ref()))
            .max()
            .unwrap_or_else(|| default_launch_latency(""))
    }

    /// The lead time for the pool: [`lead`](Self::lead) over the families of
    /// the catalog's instance types its requirements select.
    pub fn lead_for_pool(&self, pool: &NodePool, catalog: &Catalog) -> Duration {
        self.lead(
            selected_instance_types(&pool.spec, catalog)
                .into_iter()
                .map(|it| it.family.as_str()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Taint, TaintEffect};
    use chrono::Utc;
    use chrono_tz::Europe::Berlin;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn window(name: &str, schedule: &str, tz: &str, duration: &str, gpus: &str) -> PrewarmWindow {
        PrewarmWindow {
            name: name.into(),
            schedule: schedule.into(),
            time_zone: tz.into(),
            duration: duration.into(),
            capacity: [(l::RESOURCE_GPU.to_string(), Quantity(gpus.into()))].into(),
        }
    }

    fn pool(windows: Vec<PrewarmWindow>) -> NodePool {
        let mut p = NodePool::new("train", Default::default());
        p.spec.prewarm = windows;
        p
    }

    fn office_hours() -> NodePool {
        pool(vec![window(
            "office",
            "0 8 * * 1-5",
            "Europe/Berlin",
            "10h",
            "16",
        )])
    }

    fn berlin(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> Time {
        Berlin
            .with_ymd_and_hms(y, mo, d, h, mi, 0)
            .single()
            .unwrap()
            .with_timezone(&Utc)
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> Time {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    const TEN_MIN: Duration = Duration::from_secs(600);

    #[test]
    fn a_weekday_window_is_warming_five_minutes_before_eight_on_monday() {
        // 2026-03-23 is a Monday; Berlin is on CET (UTC+1).
        let now = berlin(2026, 3, 23, 7, 55);
        let w = windows_to_start(&office_hours(), now, TEN_MIN).unwrap();
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].phase, Phase::Warming);
        assert_eq!(w[0].start, utc(2026, 3, 23, 7, 0));
        assert_eq!(w[0].warm_from, utc(2026, 3, 23, 6, 50));
        assert_eq!(w[0].end, utc(2026, 3, 23, 17, 0));
        assert!(protects(&office_hours(), now, TEN_MIN).unwrap());
        assert!(active_windows(&office_hours(), now).unwrap().is_empty());
        assert_eq!(
            next_deadline(&office_hours(), now, TEN_MIN).unwrap(),
            Some(utc(2026, 3, 23, 7, 0))
        );
    }

    #[test]
    fn the_window_is_not_warming_on_saturday_morning() {
        let now = berlin(2026, 3, 28, 7, 55);
        assert!(windows_to_start(&office_hours(), now, TEN_MIN)
            .unwrap()
            .is_empty());
        assert!(!protects(&office_hours(), now, TEN_MIN).unwrap());
        // Next: Monday 07:50 Berlin, the first day of summer time (UTC+2).
        assert_eq!(
            next_deadline(&office_hours(), now, TEN_MIN).unwrap(),
            Some(utc(2026, 3, 30, 5, 50))
        );
    }

    #[test]
    fn the_window_is_open_at_noon_and_over_at_half_past_six() {
        let noon = berlin(2026, 3, 23, 12, 0);
        let open = active_windows(&office_hours(), noon).unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].phase, Phase::Open);
        assert_eq!(
            next_deadline(&office_hours(), noon, TEN_MIN).unwrap(),
            Some(utc(2026, 3, 23, 17, 0))
        );
        let evening = berlin(2026, 3, 23, 18, 30);
        assert!(windows_to_start(&office_hours(), evening, TEN_MIN)
            .unwrap()
            .is_empty());
        assert_eq!(
            next_deadline(&office_hours(), evening, TEN_MIN).unwrap(),
            Some(berlin(2026, 3, 24, 7, 50))
        );
    }

    #[test]
    fn the_window_keeps_eight_o_clock_local_across_daylight_saving_changes() {
        // Summer time starts Sunday 2026-03-29: Monday 08:00 is 06:00 UTC.
        let w = windows_to_start(&office_hours(), utc(2026, 3, 30, 5, 55), TEN_MIN).unwrap();
        assert_eq!(w[0].start, utc(2026, 3, 30, 6, 0));
        assert_eq!(w[0].end, utc(2026, 3, 30, 16, 0));
        // At 06:55 UTC, an hour before the winter opening time, it is open.
        let open = active_windows(&office_hours(), utc(2026, 3, 30, 6, 55)).unwrap();
        assert_eq!(open[0].phase, Phase::Open);
        // Winter time returns Sunday 2026-10-25: Monday 08:00 is 07:00 UTC.
        let w = windows_to_start(&office_hours(), utc(2026, 10, 26, 6, 55), TEN_MIN).unwrap();
        assert_eq!(w[0].start, utc(2026, 10, 26, 7, 0));
        assert!(
            windows_to_start(&office_hours(), utc(2026, 10, 26, 5, 55), TEN_MIN)
                .unwrap()
                .is_empty(),
            "06:55 local is not yet warming"
        );
    }

    #[test]
    fn starts_in_the_spring_gap_are_skipped_and_in_the_autumn_repeat_occur_twice() {
        let s = crate::api::parse_cron("30 2 * * *").unwrap();
        let next = |t| first_start_after(&s, &Berlin, t);
        // 2026-03-29: 02:00 -> 03:00 local, so 02:30 does not exist that day.
        assert_eq!(next(utc(2026, 3, 28, 23, 0)), Some(utc(2026, 3, 30, 0, 30)));
        // 2026-10-25: 03:00 -> 02:00 local; 02:30 CEST, then 02:30 CET.
        assert_eq!(
            next(utc(2026, 10, 24, 23, 0)),
            Some(utc(2026, 10, 25, 0, 30))
        );
        assert_eq!(
            next(utc(2026, 10, 25, 0, 30)),
            Some(utc(2026, 10, 25, 1, 30))
        );
        assert_eq!(
            next(utc(2026, 10, 25, 1, 0)),
            Some(utc(2026, 10, 25, 1, 30))
        );
        assert_eq!(
            next(utc(2026, 10, 25, 1, 30)),
            Some(utc(2026, 10, 26, 1, 30))
        );
    }

    #[test]
    fn a_window_longer_than_its_period_stays_open_from_one_occurrence_to_the_next() {
        let p = pool(vec![window("always", "@daily", "UTC", "25h", "1")]);
        let now = utc(2026, 5, 1, 0, 30);
        let w = active_windows(&p, now).unwrap();
        assert_eq!(w.len(), 1);
        // The earliest occurrence still open is yesterday's, until 01:00.
        assert_eq!(w[0].start, utc(2026, 4, 30, 0, 0));
        assert_eq!(w[0].end, utc(2026, 5, 1, 1, 0));
        assert!(protects(&p, utc(2026, 5, 1, 1, 0), Duration::ZERO).unwrap());
    }

    #[test]
    fn a_bad_schedule_zone_or_duration_is_an_error_naming_the_window() {
        let now = utc(2026, 3, 23, 7, 0);
        for (w, needle) in [
            (window("w", "0 8 * *", "UTC", "1h", "1"), "5 fields"),
            (
                window("w", "0 8 * * 1-5", "Europe/Berlinn", "1h", "1"),
                "time zone",
            ),
            (
                window("w", "0 8 * * 1-5", "UTC", "ten hours", "1"),
                "duration",
            ),
        ] {
            let p = pool(vec![w]);
            let e = windows_to_start(&p, now, TEN_MIN).unwrap_err().to_string();
            assert!(e.contains("train") && e.contains("window w"), "{e}");
            assert!(e.contains(needle), "{e}");
            assert!(next_deadline(&p, now, TEN_MIN).is_err());
            assert!(protects(&p, now, TEN_MIN).is_err());
        }
    }

    #[test]
    fn sixteen_gpus_become_sixteen_one_gpu_pods_pinned_to_the_pool() {
        let mut p = office_hours();
        p.spec.template.spec.taints =
            vec![Taint::new("nvidia.com/gpu", "", TaintEffect::NoSchedule)];
        let mut w = p.spec.prewarm[0].clone();
        w.capacity.insert("cpu".into(), Quantity("40".into()));
        let pods = placeholder_pods(&p, &w).unwrap();
        assert_eq!(pods.len(), 16);
        assert_eq!(pods[0].name, "prewarm/train/office/0");
        assert_eq!(pods[15].name, "prewarm/train/office/15");
        assert!(pods.iter().all(|p| is_placeholder(&p.name)));
        assert!(pods.iter().all(|p| p.requests.get(l::RESOURCE_GPU) == 1));
        // 40 cores over 16 pods: 2500m each, exactly.
        assert!(pods.iter().all(|p| p.requests.get(CPU) == 2_500));
        let taints = [crate::cluster::Taint::new(
            "nvidia.com/gpu",
            "",
            TaintEffect::NoSchedule,
        )];
        assert!(crate::cluster::requirements::untolerated(&taints, &pods[0].tolerations).is_none());
        let on_pool: crate::cluster::Labels =
            [(l::NODEPOOL.to_string(), "train".to_string())].into();
        let elsewhere: crate::cluster::Labels =
            [(l::NODEPOOL.to_string(), "infer".to_string())].into();
        assert!(pods[0].affinity.matches(&on_pool));
        assert!(!pods[0].affinity.matches(&elsewhere));
    }

    #[test]
    fn uneven_resources_are_spread_with_remainders_on_the_first_pods() {
        let p = office_hours();
        let mut w = window("w", "@daily", "UTC", "1h", "3");
        w.capacity.insert("memory".into(), Quantity("10".into()));
        let pods = placeholder_pods(&p, &w).unwrap();
        let mem: Vec<i64> = pods.iter().map(|p| p.requests.get("memory")).collect();
        assert_eq!(mem, [4, 3, 3]);
        let cpu_only = PrewarmWindow {
            capacity: [("cpu".to_string(), Quantity("2500m".into()))].into(),
            ..w.clone()
        };
        let pods = placeholder_pods(&p, &cpu_only).unwrap();
        let cpu: Vec<i64> = pods.iter().map(|p| p.requests.get(CPU)).collect();
        assert_eq!(cpu, [834, 833, 833], "one pod per started core");
        let bad = PrewarmWindow {
            capacity: [("nodes".to_string(), Quantity("2".into()))].into(),
            ..w
        };
        assert!(matches!(
            placeholder_pods(&p, &bad),
            Err(Error::Capacity { .. })
        ));
    }

    #[test]
    fn overlapping_windows_ask_for_the_maximum_not_the_sum() {
        let p = pool(vec![
            window("day", "0 8 * * *", "UTC", "10h", "16"),
            window("peak", "0 12 * * *", "UTC", "2h", "24"),
        ]);
        let morning = demand(&p, utc(2026, 3, 23, 9, 0), TEN_MIN).unwrap();
        assert_eq!(morning.len(), 16);
        let peak = demand(&p, utc(2026, 3, 23, 12, 30), TEN_MIN).unwrap();
        assert_eq!(peak.len(), 24);
        assert_eq!(peak[16].name, "prewarm/train/peak/0");
        let night = demand(&p, utc(2026, 3, 23, 23, 0), TEN_MIN).unwrap();
        assert!(night.is_empty());
    }

    #[test]
    fn p90_uses_observations_once_there_are_five() {
        let mut l = LaunchLatency::new();
        let t0 = utc(2026, 3, 23, 7, 0);
        assert_eq!(l.p90("p5"), Duration::from_secs(600));
        for m in [3, 2, 4, 1] {
            l.observe("g5", t0, t0 + chrono::TimeDelta::minutes(m));
        }
        assert_eq!(l.p90("g5"), Duration::from_secs(240), "four: the default");
        for m in [6, 5, 7, 10, 8, 9] {
            l.observe("g5", t0, t0 + chrono::TimeDelta::minutes(m));
        }
        // 1..=10 minutes: nearest rank ceil(0.9 x 10) = 9th = 9 min.
        assert_eq!(l.observations("g5"), 10);
        assert_eq!(l.p90("g5"), Duration::from_secs(540));
        l.observe("g5", t0, t0 - chrono::TimeDelta::minutes(1));
        assert_eq!(l.observations("g5"), 10, "ready before launch is ignored");
        assert_eq!(l.lead(["g5", "p4d"]), Duration::from_secs(540));
        assert_eq!(l.lead(["g5", "p5"]), Duration::from_secs(600));
        assert_eq!(l.lead(Vec::<&str>::new()), Duration::from_secs(300));
    }

    #[test]
    fn default_latencies_follow_the_family_table() {
        assert_eq!(family_of("p4de.24xlarge"), "p4de");
        assert_eq!(family_of("weird"), "weird");
        let minutes = |f: &str| default_launch_latency(f).as_secs() / 60;
        assert_eq!(
            ["g6e", "p4de", "p5en", "trn2", "c7i"].map(minutes),
            [4, 8, 10, 6, 5]
        );
    }

    #[test]
    fn the_pool_lead_is_the_slowest_selected_family_and_nodes_count_once_ready() {
        use crate::api::{Operator as Op, Requirement as Req};
        use crate::catalog::{CapacityType, InstanceType};
        let it = |name: &str| InstanceType::bare(name, 8, 32_768);
        let catalog = Catalog::from_parts([it("g5.2xlarge"), it("p4d.24xlarge")], []);
        let mut l = LaunchLatency::new();
        let mut p = office_hours();
        assert_eq!(l.lead_for_pool(&p, &catalog), Duration::from_secs(480));
        p.spec.template.spec.requirements = vec![Req::new(l::INSTANCE_FAMILY, Op::In, &["g5"])];
        assert_eq!(l.lead_for_pool(&p, &catalog), Duration::from_secs(240));

        let t0 = utc(2026, 3, 23, 7, 0);
        let mut node = ManagedNode {
            claim: "train-abc".into(),
            nodepool: "train".into(),
            offering: crate::core::OfferingKey {
                instance_type: "g5.2xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
            },
            price_per_hour: 0.5,
            launched_at: t0,
            ready_at: None,
            state: crate::cluster::NodeState {
                name: "train-abc".into(),
                nodepool: Some("train".into()),
                instance_type: Some("g5.2xlarge".into()),
                zone: "use1-az1".into(),
                capacity_type: Some(CapacityType::Spot),
                labels: Default::default(),
                taints: Vec::new(),
                allocatable: Resources::new(),
                used: Resources::new(),
                price_per_hour: 0.5,
                in_flight: true,
                unschedulable: false,
                capped: Default::default(),
            },
            pods: Vec::new(),
            pods_revision: 0,
            do_not_disrupt: false,
            drifted: None,
            disrupted: false,
            health: Default::default(),
            gpu_idle_since: None,
            expire_after: None,
            termination_grace: None,
        };
        l.observe_node(&node);
        assert_eq!(l.observations("g5"), 0, "not Ready yet");
        node.ready_at = Some(t0 + chrono::TimeDelta::minutes(12));
        for _ in 0..MIN_OBSERVATIONS {
            l.observe_node(&node);
        }
        assert_eq!(l.lead_for_pool(&p, &catalog), Duration::from_secs(720));
    }

    #[test]
    fn only_the_most_recent_observations_are_kept() {
        let mut l = LaunchLatency::new();
        let t0 = utc(2026, 3, 23, 7, 0);
        for _ in 0..MAX_OBSERVATIONS {
            l.observe("p4d", t0, t0 + chrono::TimeDelta::minutes(30));
        }
        for _ in 0..MAX_OBSERVATIONS {
            l.observe("p4d", t0, t0 + chrono::TimeDelta::minutes(7));
        }
        assert_eq!(l.observations("p4d"), MAX_OBSERVATIONS);
        assert_eq!(l.p90("p4d"), Duration::from_secs(420));
    }
}
