//! Networks in the config: CIDR lists such as `aeges.report_allow` and
//! `server.trusted_proxies`.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::ConfigError;

/// Each entry of `key` parsed by [`parse_net`]; an error names the entry.
pub(crate) fn nets(key: &'static str, entries: &[String]) -> Result<Vec<IpNet>, ConfigError> {
    entries
        .iter()
        .enumerate()
        .map(|(n, entry)| {
            parse_net(entry).ok_or_else(|| {
                ConfigError::new(
                    key,
                    format!(
                        "entry {n}, `{entry}`, is neither a CIDR (`10.0.0.0/8`, \
                         `fd00::/8`) nor an IP address"
                    ),
                )
            })
        })
        .collect()
}

/// A CIDR, or a bare address as a network of that address alone.
fn parse_net(s: &str) -> Option<IpNet> {
    match s.parse::<IpNet>() {
        Ok(net) => Some(net.trunc()),
        Err(_) => s.parse::<IpAddr>().ok().map(IpNet::from),
    }
}
