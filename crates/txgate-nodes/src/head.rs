//! The agreed head: the block number reads tagged `latest` mean.
//!
//! Rule: the agreed head is the highest block number that a quorum, a
//! strict majority, of the in-nodes has reached: with the in-nodes' heads
//! sorted high to low, the one at position `n / 2` (0-based) of `n`. It is
//! monotonic: each update keeps the highest value seen, so it never goes
//! down for clients, only [`AgreedHead::reset`] lowers it. With one node
//! in (the first to come in after a start, or the last one left), that
//! node alone is the quorum.
//!
//! Why: the proxy rewrites `latest` to this number and sends such reads
//! only to nodes at or above it ([`crate::Group::eligible`]). A client then
//! never sees `latest` go backwards between two calls answered by
//! different nodes (one read at block 100, the next at 99), and a node
//! behind the majority does not answer for `latest`. A majority rather
//! than the highest head: one node ahead (or one that reports a head it
//! does not have) does not drag every read to itself.
//!
//! Consequence: when the nodes at the agreed head leave (they go out, or a
//! reorg or a restart puts every node below it), reads tagged `latest` find
//! no node until one reaches the agreed head again, which on a live chain
//! is a block or two; the caller answers "no healthy upstream" meanwhile. A
//! chain that will not come back to that height (a node set replaced by one
//! on an older snapshot) needs [`AgreedHead::reset`], through
//! [`crate::Group::reset_head`].

/// The highest head a strict majority of `heads` has reached: the value at
/// position `n / 2` of the heads sorted high to low; `None` when there are
/// none.
pub fn quorum_head(heads: impl IntoIterator<Item = u64>) -> Option<u64> {
    let mut heads: Vec<u64> = heads.into_iter().collect();
    if heads.is_empty() {
        return None;
    }
    let at = heads.len() / 2;
    let (_, value, _) = heads.select_nth_unstable_by(at, |a, b| b.cmp(a));
    Some(*value)
}

/// The agreed head, monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AgreedHead {
    value: Option<u64>,
}

impl AgreedHead {
    /// No head agreed yet.
    pub fn new() -> AgreedHead {
        AgreedHead::default()
    }

    /// The agreed head; `None` until a quorum has first reported one.
    pub fn get(self) -> Option<u64> {
        self.value
    }

    /// Raises the agreed head to the quorum head of the in-nodes' `heads`,
    /// never lowers it; true when it changed.
    pub fn update(&mut self, heads: impl IntoIterator<Item = u64>) -> bool {
        let next = self.value.max(quorum_head(heads));
        let changed = next != self.value;
        self.value = next;
        changed
    }

    /// Forgets the past values: the agreed head becomes the quorum head of
    /// `heads`, lower or not; true when it changed.
    pub fn reset(&mut self, heads: impl IntoIterator<Item = u64>) -> bool {
        let next = quorum_head(heads);
        let changed = next != self.value;
        self.value = next;
        changed
    }

    /// Whether a node with `head` may answer reads at the agreed head:
    /// its head is at or above it (any head while none is agreed).
    pub fn admits(self, head: u64) -> bool {
        self.value.is_none_or(|agreed| head >= agreed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_is_a_strict_majority() {
        assert_eq!(quorum_head([]), None);
        assert_eq!(quorum_head([7]), Some(7));
        // Two nodes: both must have it.
        assert_eq!(quorum_head([10, 9]), Some(9));
        assert_eq!(quorum_head([10, 9, 8]), Some(9));
        assert_eq!(quorum_head([10, 10, 9, 8]), Some(9));
        assert_eq!(quorum_head([10, 10, 10, 8]), Some(10));
        assert_eq!(quorum_head([1, 100, 5, 50, 20]), Some(20));
    }

    #[test]
    fn quorum_head_reached_by_a_majority_in_every_order() {
        // Property: for small sets, the result is the highest h that more
        // than half of the heads reach.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..2_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = (seed % 7) as usize + 1;
            let heads: Vec<u64> = (0..n).map(|k| (seed >> (k * 4)) % 6).collect();
            let got = quorum_head(heads.iter().copied()).unwrap_or_default();
            let reached = |h: u64| heads.iter().filter(|&&x| x >= h).count() * 2 > n;
            assert!(reached(got), "{heads:?} {got}");
            assert!(!reached(got + 1), "{heads:?} {got}");
        }
    }

    #[test]
    fn monotonic_until_reset() {
        let mut agreed = AgreedHead::new();
        assert!(agreed.admits(0));
        assert!(!agreed.update([]));
        assert!(agreed.update([10, 10, 9]));
        assert_eq!(agreed.get(), Some(10));
        // The quorum falls back: the agreed head does not.
        assert!(!agreed.update([8, 8, 12]));
        assert_eq!(agreed.get(), Some(10));
        assert!(!agreed.update([]));
        assert_eq!(agreed.get(), Some(10));
        assert!(agreed.admits(10) && agreed.admits(12) && !agreed.admits(9));
        assert!(agreed.update([11, 11]));
        assert_eq!(agreed.get(), Some(11));
        assert!(agreed.reset([8, 8, 12]));
        assert_eq!(agreed.get(), Some(8));
        assert!(agreed.reset([]));
        assert_eq!(agreed.get(), None);
    }
}
