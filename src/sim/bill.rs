//! Where a strategy's bill went: each node's cost split over the time it
//! booted, the capacity its pods held for work they kept or later lost,
//! and the capacity nobody held. Set beside the lower bound (which prices
//! only kept work, at the cheapest share a pool allows), the parts say what
//! "vs bound" is made of: idle nodes, boot time, lost work, the on-demand
//! premium, and dearer offerings than the bound's.

use super::result::CostBy;
use crate::catalog::{CapacityType, Catalog};
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::Resources;
use crate::core::Time;
use std::collections::BTreeMap;

/// One node's books, from its launch to its end.
#[derive(Debug, Clone)]
pub struct NodeBook {
    launched: Time,
    ready: Option<Time>,
    gone: Option<Time>,
    /// Seconds of the whole node its pods held: each pod's run time on it
    /// times its share of the node.
    held_s: f64,
    /// Of `held_s`, the part whose work was lost (re-done after a stop,
    /// restarts, checkpoint pauses).
    lost_s: f64,
    /// On an on-demand node, the part of its price above the same type's
    /// spot price in its zone (the region's cheapest spot price if the zone
    /// sells none); 0 on spot and reserved nodes.
    premium: f64,
    /// GPUs of the node (a pod's share is its GPUs over these), or 0 for a
    /// node without GPUs, where a pod's share is the larger of its CPU over
    /// `cpu_milli` and its memory over `memory`.
    gpus: f64,
    cpu_milli: f64,
    memory: f64,
}

impl NodeBook {
    /// The books of a node launched at `at` on `offering` at
    /// `price_per_hour` with `gpus` GPUs and `allocatable` CPU and memory.
    pub fn new(
        catalog: &Catalog,
        region: &str,
        offering: &crate::core::OfferingKey,
        price_per_hour: f64,
        gpus: f64,
        allocatable: &Resources,
        at: Time,
    ) -> NodeBook {
        let premium = if offering.capacity_type == CapacityType::OnDemand && price_per_hour > 0.0 {
            let in_zone = catalog
                .offerings_of(region, &offering.instance_type)
                .find(|o| o.capacity_type == CapacityType::Spot && o.zone_id == offering.zone)
                .map(|o| o.price_per_hour);
            in_zone
                .or_else(|| {
                    catalog
                        .cheapest_spot(region, &offering.instance_type)
                        .map(|o| o.price_per_hour)
                })
                .map_or(0.0, |spot| (1.0 - spot / price_per_hour).clamp(0.0, 1.0))
        } else {
            0.0
        };
        NodeBook::blank(at, premium, gpus, allocatable)
    }

    /// The books of a node launched at `at`, with nothing held yet.
    fn blank(at: Time, premium: f64, gpus: f64, allocatable: &Resources) -> NodeBook {
        NodeBook {
            launched: at,
            ready: None,
            gone: None,
            held_s: 0.0,
            lost_s: 0.0,
            premium,
            gpus,
            cpu_milli: allocatable.get(CPU) as f64,
            memory: allocatable.get(MEMORY) as f64,
        }
    }

    /// The node became Ready.
    pub fn ready(&mut self, at: Time) {
        self.ready.get_or_insert(at);
    }

    /// The node is gone (terminated or reclaimed).
    pub fn gone(&mut self, at: Time) {
        self.gone.get_or_insert(at);
    }

    /// A pod's share of this node: its `gpus` of the node's GPUs, or on a
    /// node without GPUs the larger of its parts of the node's CPU and
    /// memory (a memory-heavy pod fills a node its CPU would not); at most
    /// 1.
    pub fn share(&self, gpus: f64, requests: &Resources) -> f64 {
        let part = |asked: i64, room: f64| if room > 0.0 { asked as f64 / room } else { 0.0 };
        let share = if self.gpus > 0.0 {
            gpus / self.gpus
        } else {
            part(requests.get(CPU), self.cpu_milli).max(part(requests.get(MEMORY), self.memory))
        };
        share.clamp(0.0, 1.0)
    }

    /// A pod of `share` held the node for `seconds`.
    pub fn held(&mut self, share: f64, seconds: f64) {
        self.held_s += share * seconds.max(0.0);
    }

    /// A pod of `share` lost `seconds` of work done on this node.
    pub fn lost(&mut self, share: f64, seconds: f64) {
        self.lost_s += share * seconds.max(0.0);
    }

    /// Adds this node's bill `cost`, in USD, to `by`, up to `end`: booting
    /// from launch to Ready; then the held capacity (lost work, the
    /// on-demand premium on kept work, and the kept work at spot prices);
    /// the rest idle.
    fn add_to(&self, by: &mut CostBy, cost: f64, end: Time) {
        let secs = |from: Time, to: Time| (to - from).num_milliseconds().max(0) as f64 / 1000.0;
        let gone = self.gone.unwrap_or(end).min(end);
        let life = secs(self.launched, gone);
        if life <= 0.0 {
            by.idle += cost;
            return;
        }
        let boot = secs(self.launched, self.ready.unwrap_or(gone).min(gone));
        let up = life - boot;
        let held = self.held_s.min(up);
        let lost = self.lost_s.min(held);
        let per_s = cost / life;
        let kept = per_s * (held - lost);
        by.booting += per_s * boot;
        by.lost_work += per_s * lost;
        by.on_demand_premium += kept * self.premium;
        by.work += kept * (1.0 - self.premium);
        by.idle += per_s * (up - held);
    }
}

/// Every node's books, by claim.
#[derive(Debug, Default)]
pub struct Books(BTreeMap<String, NodeBook>);

impl Books {
    /// Opens the books of a node.
    pub fn open(&mut self, claim: &str, book: NodeBook) {
        self.0.insert(claim.to_string(), book);
    }

    /// The books of a node, if it was opened.
    pub fn get_mut(&mut self, claim: &str) -> Option<&mut NodeBook> {
        self.0.get_mut(claim)
    }

    /// The bill split up to `end`: each node's cost from `cost_of`, and
    /// whatever of `total` no book covers (instances the engine kept no
    /// node for) counted idle, so the parts sum to `total` plus `upfront`.
    pub fn split(
        &self,
        cost_of: impl Fn(&str) -> f64,
        total: f64,
        upfront: f64,
        end: Time,
    ) -> CostBy {
        let mut by = CostBy {
            reserved_upfront: upfront,
            ..CostBy::default()
        };
        let mut covered = 0.0;
        for (claim, book) in &self.0 {
            let cost = cost_of(claim);
            covered += cost;
            book.add_to(&mut by, cost, end);
        }
        by.idle += (total - covered).max(0.0);
        by
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(min: i64) -> Time {
        chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap() + chrono::Duration::minutes(min)
    }

    const GIB: i64 = 1 << 30;

    fn book(gpus: f64, premium: f64) -> NodeBook {
        NodeBook::blank(t(0), premium, gpus, &room(8000, 32))
    }

    fn room(cpu_milli: i64, memory_gib: i64) -> Resources {
        Resources::new()
            .with(CPU, cpu_milli)
            .with(MEMORY, memory_gib * GIB)
    }

    #[test]
    fn a_nodes_bill_splits_by_time_booting_held_lost_and_idle() {
        // 100 minutes at $6/h = $10: 10 booting, then one of two GPUs held
        // for 60 minutes of which 12 were lost, the rest idle.
        let mut b = book(2.0, 0.0);
        b.ready(t(10));
        let share = b.share(1.0, &room(8000, 32));
        assert_eq!(share, 0.5, "GPUs decide on a GPU node");
        b.held(share, 3600.0);
        b.lost(share, 720.0);
        b.gone(t(100));
        let mut by = CostBy::default();
        b.add_to(&mut by, 10.0, t(200));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(by.booting, 1.0), "{by:?}");
        // 30 node-minutes held, 6 of them lost.
        assert!(close(by.lost_work, 10.0 * 6.0 / 100.0), "{by:?}");
        assert!(close(by.work, 10.0 * 24.0 / 100.0), "{by:?}");
        assert!(close(by.idle, 10.0 * 60.0 / 100.0), "{by:?}");
        assert!(close(by.total(), 10.0), "{by:?}");
    }

    #[test]
    fn on_demand_work_carries_the_premium_over_spot_and_cpu_nodes_share_by_cpu() {
        let mut b = book(0.0, 0.6);
        b.ready(t(0));
        assert_eq!(b.share(0.0, &room(2000, 8)), 0.25);
        assert_eq!(
            b.share(0.0, &room(2000, 24)),
            0.75,
            "a memory-heavy pod holds its memory's part"
        );
        let share = b.share(0.0, &room(8000, 1));
        assert_eq!(share, 1.0, "a pod asking the whole CPU holds the node");
        b.held(share, 3600.0);
        let mut by = CostBy::default();
        b.add_to(&mut by, 5.0, t(60));
        assert!((by.on_demand_premium - 3.0).abs() < 1e-9, "{by:?}");
        assert!((by.work - 2.0).abs() < 1e-9, "{by:?}");
        assert_eq!(by.idle, 0.0);
    }

    #[test]
    fn a_node_never_ready_only_booted_and_what_no_book_covers_is_idle() {
        let mut books = Books::default();
        let mut b = book(1.0, 0.0);
        b.gone(t(6));
        books.open("a", b);
        let by = books.split(|_| 0.5, 2.0, 3.0, t(60));
        assert!((by.booting - 0.5).abs() < 1e-9, "{by:?}");
        assert!((by.idle - 1.5).abs() < 1e-9, "{by:?}");
        assert_eq!(by.reserved_upfront, 3.0);
        assert!((by.total() - 5.0).abs() < 1e-9);
    }

    #[test]
    fn the_premium_is_the_part_of_the_on_demand_price_above_spot_in_the_zone() {
        let catalog = Catalog::embedded().unwrap();
        let spot = catalog.cheapest_spot("us-east-1", "g5.xlarge").unwrap();
        let od = catalog.on_demand_price("us-east-1", "g5.xlarge").unwrap();
        let key = crate::core::OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: spot.zone_id.clone(),
            capacity_type: CapacityType::OnDemand,
        };
        let b = NodeBook::new(&catalog, "us-east-1", &key, od, 1.0, &room(4000, 16), t(0));
        assert!((b.premium - (1.0 - spot.price_per_hour / od)).abs() < 1e-12);
        assert!(b.premium > 0.0);
        let on_spot = crate::core::OfferingKey {
            capacity_type: CapacityType::Spot,
            ..key
        };
        let b = NodeBook::new(
            &catalog,
            "us-east-1",
            &on_spot,
            spot.price_per_hour,
            1.0,
            &room(4000, 16),
            t(0),
        );
        assert_eq!(b.premium, 0.0);
    }
}
