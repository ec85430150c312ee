//! End-to-end tests of the txgate binary against real local nodes (anvil;
//! geth and op-geth where a test names them) and real clients (cast,
//! hyper). One binary for the crate.

#![allow(missing_docs, unreachable_pub, clippy::unwrap_used)]

mod bad_input;
mod balancer;
mod bans;
mod bundles;
mod clean_stop;
mod cli;
mod conditional;
mod conditional_callers;
mod conditional_fleet;
mod credible;
mod deploy;
mod fault_servers;
mod faults;
mod faults_sidecar;
mod faults_snapshot;
mod faults_upstream;
mod fleet;
mod fleet_ban_log;
mod fleet_hosts;
mod fleet_hosts_sentinel;
mod fleet_redis;
mod fleet_redis_tls;
mod fleet_sentinel;
mod geth;
mod geth_diff;
mod hostile_http;
mod http_lanes;
mod node_group;
mod node_group_conductor;
mod node_group_ws;
mod observability;
mod op_geth_conditional;
mod pacing;
mod passthrough;
mod pool;
mod proxyd_hook;
mod screening;
mod shutdown_under_load;
mod sidecar_loop;
mod support;
mod sync_calls;
mod tls;
mod tls_pki;
mod websocket;
mod ws_partial_answer;
