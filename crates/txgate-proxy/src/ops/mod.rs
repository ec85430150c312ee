//! The operator's side: the admin listener ([`admin`]: metrics, health,
//! readiness), the upstream health probe and readiness state ([`health`]),
//! the metrics registry ([`metrics`]) and the ban snapshot on disk
//! ([`snapshot`]).

pub mod admin;
pub mod health;
pub mod metrics;
pub mod snapshot;
