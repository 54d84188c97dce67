//! Interning for the controller's index: values that many pods repeat
//! (namespaces, node names, the planner's view of one workload's pods) are
//! kept once and shared through an [`Arc`], so that 100,000 pods of a few
//! thousand workloads hold a few thousand copies, not 100,000. Values no
//! pod holds any more are dropped as the set grows ([`Interner::sweep`]).
//!
//! Owns no policy: what is interned is the index's choice
//! (`controller::snapshot`).

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

/// The size below which an interner never sweeps.
const MIN_SWEEP: usize = 1024;

/// A set of shared values: [`Interner::intern`] returns the copy already
/// held when there is one.
#[derive(Debug)]
pub struct Interner<T: ?Sized> {
    set: HashSet<Arc<T>>,
    /// The set's size at which the next sweep runs: twice its size after
    /// the last one, so sweeping costs O(1) per value interned.
    next_sweep: usize,
}

impl<T: ?Sized> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            set: HashSet::new(),
            next_sweep: MIN_SWEEP,
        }
    }
}

impl<T: ?Sized + Hash + Eq> Interner<T> {
    /// The shared copy of `value`: the one held if an equal value is
    /// held, else `value` itself, now held.
    pub fn intern<Q: Borrow<T>>(&mut self, value: Q) -> Arc<T>
    where
        Arc<T>: From<Q>,
    {
        if let Some(held) = self.set.get(value.borrow()) {
            return held.clone();
        }
        let shared = Arc::from(value);
        self.set.insert(shared.clone());
        if self.set.len() >= self.next_sweep {
            self.sweep();
        }
        shared
    }

    /// Drops the values nothing but the interner holds.
    pub fn sweep(&mut self) {
        // A count of one is the set's own reference: nobody else can take
        // a new one without `&mut self`.
        self.set.retain(|v| Arc::strong_count(v) > 1);
        self.next_sweep = (2 * self.set.len()).max(MIN_SWEEP);
    }

    /// How many distinct values are held.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether no value is held.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_share_one_copy() {
        let mut names: Interner<str> = Interner::default();
        let a = names.intern("team-1");
        let b = names.intern(String::from("team-1").as_str());
        let c = names.intern("team-2");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!((&*a, &*c), ("team-1", "team-2"));
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn a_sweep_drops_only_values_nobody_holds() {
        let mut names: Interner<str> = Interner::default();
        let kept = names.intern("kept");
        drop(names.intern("dropped"));
        names.sweep();
        assert_eq!(names.len(), 1);
        assert!(Arc::ptr_eq(&kept, &names.intern("kept")));
    }

    #[test]
    fn the_set_sweeps_itself_as_it_grows() {
        let mut numbers: Interner<u64> = Interner::default();
        let held: Vec<Arc<u64>> = (0..10).map(|i| numbers.intern(i)).collect();
        for i in 10..10 * MIN_SWEEP as u64 {
            numbers.intern(i);
        }
        assert!(
            numbers.len() < 2 * MIN_SWEEP,
            "{} values held",
            numbers.len()
        );
        for (i, h) in held.iter().enumerate() {
            assert!(Arc::ptr_eq(h, &numbers.intern(i as u64)));
        }
    }
}
