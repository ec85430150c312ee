//! The operator's side: the admin listener ([`admin`]: metrics, health,
//! readiness, ban inspection and control), the upstream health probe and
//! readiness state ([`health`]), the ban snapshot on disk ([`snapshot`])
//! and token comparison (`secret`). The metrics registry is the ground
//! floor every stage counts on ([`crate::metrics`]).

pub mod admin;
pub mod health;
pub(crate) mod secret;
pub mod snapshot;
