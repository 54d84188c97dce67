//! Each node's NodePool, by position, kept while the nodes and the pools'
//! names stay the same.
//!
//! Repair and consolidation ask every node's pool on every round, and
//! consolidation asked it three times a round. Finding it by name among the
//! pools was several percent of a long replay's time; a round whose nodes
//! and pools are as they were now reads the answer, and a round whose nodes
//! changed works it out once for each of the two.

use super::World;

/// Which pool of a name a node belongs to, were names ever repeated (the
/// API keeps them unique; the two callers differ only there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Repeated {
    /// The first of the name, as a search of the pools finds it
    /// (`interruption::pool_of`).
    #[default]
    First,
    /// The last of the name, as a map by name keeps it.
    Last,
}

/// Each node's pool (an index into [`World::pools`]) as worked out at a
/// [`World::nodes_revision`], for the pools' names (and [`Repeated`]) it was
/// worked out with.
#[derive(Debug, Clone, Default)]
pub struct PoolIndex {
    repeated: Repeated,
    revision: u64,
    names: Vec<String>,
    of: Vec<Option<usize>>,
    /// Counts the times `of` was worked out.
    generation: u64,
}

impl PoolIndex {
    /// Brings [`PoolIndex::nodes`] up to `world`: worked out again only if
    /// the nodes, the pools' names or `repeated` changed since the last
    /// call.
    pub fn update(&mut self, world: &World, repeated: Repeated) {
        let names = || {
            world
                .pools
                .iter()
                .map(|p| p.metadata.name.as_deref().unwrap_or_default())
        };
        let known = world.same_nodes_as(self.revision)
            && self.repeated == repeated
            && self.names.iter().map(String::as_str).eq(names());
        if !known {
            let now: Vec<&str> = names().collect();
            let find = |pool: &str| match repeated {
                Repeated::First => now.iter().position(|p| *p == pool),
                Repeated::Last => now.iter().rposition(|p| *p == pool),
            };
            self.of = world.nodes.iter().map(|n| find(&n.nodepool)).collect();
            self.names = now.iter().map(|n| n.to_string()).collect();
            self.revision = world.nodes_revision;
            self.repeated = repeated;
            self.generation += 1;
        }
    }

    /// Each node's pool as of the last [`PoolIndex::update`], in the
    /// nodes' order: an index into the world's pools (`None`: no pool of
    /// its name; the first or the last of a repeated name, as asked).
    pub fn nodes(&self) -> &[Option<usize>] {
        &self.of
    }

    /// Changes whenever [`PoolIndex::update`] works the index out again, and
    /// only then: what was derived from the same nodes and pools at the same
    /// generation still holds.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::interruption::fixtures::*;

    /// [`PoolIndex::update`], then [`PoolIndex::nodes`].
    fn of(index: &mut PoolIndex, world: &World, repeated: Repeated) -> Vec<Option<usize>> {
        index.update(world, repeated);
        index.nodes().to_vec()
    }

    #[test]
    fn each_node_gets_its_pool_until_the_nodes_or_the_pools_change() {
        let mut f = Fixture::new([node("a"), node("b")]);
        f.nodes[0].nodepool = "gpu".into();
        f.nodes[1].nodepool = "other".into();
        let mut index = PoolIndex::default();
        let w = World {
            nodes_revision: 7,
            ..f.world()
        };
        assert_eq!(of(&mut index, &w, Repeated::First), [Some(0), None]);
        let generation = index.generation();
        // The same revision: kept. (The node below changed behind the
        // revision's back, which a driver never does, to show it is not
        // looked at again.)
        let mut renamed = f.nodes.clone();
        renamed[0].nodepool = "other".into();
        let same = World {
            nodes: &renamed,
            ..w
        };
        assert_eq!(of(&mut index, &same, Repeated::First), [Some(0), None]);
        assert_eq!(index.generation(), generation);
        // A new revision, or none (0, the controller): worked out again.
        let changed = World {
            nodes_revision: 8,
            ..same
        };
        assert_eq!(of(&mut index, &changed, Repeated::First), [None, None]);
        assert_ne!(index.generation(), generation);
        let unknown = World {
            nodes_revision: 0,
            ..w
        };
        assert_eq!(of(&mut index, &unknown, Repeated::First), [Some(0), None]);
        // The same revision but a pool renamed: worked out again.
        let again = World {
            nodes_revision: 9,
            ..w
        };
        assert_eq!(of(&mut index, &again, Repeated::First), [Some(0), None]);
        let mut pools = f.pools.clone();
        pools[0].metadata.name = Some("other".into());
        let renamed_pool = World {
            pools: &pools,
            ..again
        };
        assert_eq!(
            of(&mut index, &renamed_pool, Repeated::First),
            [None, Some(0)]
        );
    }

    #[test]
    fn a_repeated_name_gives_the_first_or_the_last_pool_as_asked() {
        let mut f = Fixture::new([node("a")]);
        f.nodes[0].nodepool = "gpu".into();
        let twin = f.pools[0].clone();
        f.pools.push(twin);
        let w = World {
            nodes_revision: 3,
            ..f.world()
        };
        let mut index = PoolIndex::default();
        assert_eq!(of(&mut index, &w, Repeated::First), [Some(0)]);
        // The same revision, asked the other way: worked out again.
        assert_eq!(of(&mut index, &w, Repeated::Last), [Some(1)]);
    }
}
