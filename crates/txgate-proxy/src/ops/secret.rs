//! Comparing secrets (tokens) without a timing or length signal.

/// Compares the keccak256 of both, in time independent of where they
/// differ and of their lengths.
pub(crate) fn equal(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (
        alloy_primitives::keccak256(a),
        alloy_primitives::keccak256(b),
    );
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}
