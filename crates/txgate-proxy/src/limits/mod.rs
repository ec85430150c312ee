//! What a caller may use, checked before anything costly: per-client
//! rates by API key or client IP ([`clients`]), then the global in-flight
//! cap ([`admission`]), both decided before the body is read. With a
//! fleet's Redis, [`sync`] keeps the per-client rates fleet-wide in the
//! background, through the [`crate::fleet`] link. `pacing` holds the
//! refusals of a client that keeps being refused.

pub mod admission;
pub mod clients;
pub(crate) mod pacing;
pub mod sync;
