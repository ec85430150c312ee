//! What a caller may use, checked before anything costly: the global
//! in-flight cap ([`admission`]).

pub mod admission;
