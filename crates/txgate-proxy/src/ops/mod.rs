//! The operator's side: the admin listener ([`admin`]: metrics, health,
//! readiness, ban inspection and control), the upstream health probe and
//! readiness state ([`health`]), the metrics registry ([`metrics`]), the
//! ban snapshot on disk ([`snapshot`]) and token comparison (`secret`).

pub mod admin;
pub mod health;
pub mod metrics;
pub(crate) mod secret;
pub mod snapshot;
