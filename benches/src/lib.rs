//! Benchmarks live in benches/ and load/.
