//! The engine's nodes: one sorted slice the core's [`World`](crate::core::World)
//! borrows, and a revision that changes with every change to it.
//!
//! The fields are private so that nothing changes a node without a new
//! revision: the core keeps what it worked out from the nodes while
//! [`World::nodes_revision`](crate::core::World::nodes_revision) stays the
//! same, and a change made behind the revision's back would leave it reading
//! a stale cluster.

use super::NodeExtra;
use crate::core::ManagedNode;

/// The nodes alive, sorted by claim, as one slice the core's world borrows
/// (cloning every node and its pods twice a step made long runs slow), with
/// the engine's own bookkeeping in a parallel vector.
#[derive(Debug, Default)]
pub(super) struct Nodes {
    managed: Vec<ManagedNode>,
    extra: Vec<NodeExtra>,
    /// The last revision given out: to a node as its
    /// [`ManagedNode::pods_revision`], or to the whole slice.
    revision: u64,
}

impl Nodes {
    /// The nodes, sorted by claim.
    pub(super) fn managed(&self) -> &[ManagedNode] {
        &self.managed
    }

    /// The engine's books, beside [`Nodes::managed`].
    pub(super) fn extra(&self) -> &[NodeExtra] {
        &self.extra
    }

    /// Changes whenever any node is added, removed or changed (never 0,
    /// which tells the core it does not know).
    pub(super) fn revision(&self) -> u64 {
        self.revision + 1
    }

    /// Where `claim` is (or would go).
    pub(super) fn find(&self, claim: &str) -> Result<usize, usize> {
        self.managed
            .binary_search_by(|n| n.claim.as_str().cmp(claim))
    }

    /// The node and its books, to change: its pods may change, so its
    /// revision does.
    pub(super) fn get_mut(&mut self, claim: &str) -> Option<(&mut ManagedNode, &mut NodeExtra)> {
        let i = self.find(claim).ok()?;
        Some(self.at_mut(i))
    }

    /// The `i`-th node and its books, to change, with a new revision.
    pub(super) fn at_mut(&mut self, i: usize) -> (&mut ManagedNode, &mut NodeExtra) {
        self.touch(i);
        (&mut self.managed[i], &mut self.extra[i])
    }

    /// Every node, to change: all get a new revision.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (&mut ManagedNode, &mut NodeExtra)> {
        for i in 0..self.managed.len() {
            self.touch(i);
        }
        self.managed.iter_mut().zip(&mut self.extra)
    }

    /// Gives the `i`-th node a new [`ManagedNode::pods_revision`] (and the
    /// slice a new revision).
    fn touch(&mut self, i: usize) {
        self.revision += 1;
        self.managed[i].pods_revision = self.revision;
    }

    /// Adds the node, or replaces the one of its claim.
    pub(super) fn insert(&mut self, node: ManagedNode, extra: NodeExtra) {
        let i = match self.find(&node.claim) {
            Ok(i) => {
                self.managed[i] = node;
                self.extra[i] = extra;
                i
            }
            Err(i) => {
                self.managed.insert(i, node);
                self.extra.insert(i, extra);
                i
            }
        };
        self.touch(i);
    }

    /// Takes the node of `claim` out.
    pub(super) fn remove(&mut self, claim: &str) -> Option<(ManagedNode, NodeExtra)> {
        let i = self.find(claim).ok()?;
        self.revision += 1;
        Some((self.managed.remove(i), self.extra.remove(i)))
    }

    /// The nodes with their books.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&ManagedNode, &NodeExtra)> {
        self.managed.iter().zip(&self.extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::interruption::fixtures::node;

    #[test]
    fn every_way_of_changing_the_nodes_gives_a_new_revision() {
        let mut nodes = Nodes::default();
        let mut seen = vec![nodes.revision()];
        let mut changed = |nodes: &Nodes| {
            let r = nodes.revision();
            assert!(!seen.contains(&r), "revision {r} given out twice");
            seen.push(r);
        };
        nodes.insert(node("b"), NodeExtra::default());
        changed(&nodes);
        nodes.insert(node("a"), NodeExtra::default());
        changed(&nodes);
        assert_eq!(
            nodes
                .managed()
                .iter()
                .map(|n| n.claim.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        let _ = nodes.get_mut("a");
        changed(&nodes);
        let _ = nodes.at_mut(1);
        changed(&nodes);
        nodes.iter_mut().for_each(|_| {});
        changed(&nodes);
        assert!(nodes.remove("a").is_some());
        changed(&nodes);
        // Reading changes nothing; neither does a claim that is not there.
        let before = nodes.revision();
        let _ = (nodes.iter().count(), nodes.find("b"), nodes.get_mut("zz"));
        assert!(nodes.remove("zz").is_none());
        assert_eq!(nodes.revision(), before);
    }
}
