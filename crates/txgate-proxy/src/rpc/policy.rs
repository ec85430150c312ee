//! Method policy: an allow-list or a deny-list of method names.

use txgate_config::PolicyMode;

/// Decides whether a method may pass. Patterns are exact names or prefixes
/// ending in `*`; a check is a hash lookup plus a few `starts_with`.
#[derive(Debug, Clone)]
pub struct MethodPolicy {
    mode: PolicyMode,
    exact: std::collections::HashSet<String>,
    prefixes: Vec<String>,
}

impl MethodPolicy {
    /// Builds the policy from the configured mode and patterns.
    pub fn new(mode: PolicyMode, patterns: &[String]) -> Self {
        let mut exact = std::collections::HashSet::new();
        let mut prefixes = Vec::new();
        for p in patterns {
            match p.strip_suffix('*') {
                Some(prefix) => prefixes.push(prefix.to_string()),
                None => {
                    exact.insert(p.clone());
                }
            }
        }
        MethodPolicy {
            mode,
            exact,
            prefixes,
        }
    }

    fn listed(&self, method: &str) -> bool {
        self.exact.contains(method) || self.prefixes.iter().any(|p| method.starts_with(p.as_str()))
    }

    /// Whether `method` may be forwarded.
    pub fn allows(&self, method: &str) -> bool {
        match self.mode {
            PolicyMode::Allow => self.listed(method),
            PolicyMode::Deny => !self.listed(method),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn default_deny_list() {
        let defaults: Vec<String> = txgate_config::DEFAULT_DENIED_METHODS
            .iter()
            .map(|s| s.to_string())
            .collect();
        let p = MethodPolicy::new(PolicyMode::Deny, &defaults);
        for m in [
            "admin_peers",
            "debug_traceTransaction",
            "personal_sign",
            "miner_start",
            "engine_newPayloadV3",
        ] {
            assert!(!p.allows(m), "{m}");
        }
        for m in [
            "eth_call",
            "eth_sendRawTransaction",
            "net_version",
            "administer",
            "debugger",
        ] {
            assert!(p.allows(m), "{m}");
        }
    }

    #[test]
    fn allow_list() {
        let p = MethodPolicy::new(PolicyMode::Allow, &patterns(&["eth_*", "net_version"]));
        assert!(p.allows("eth_call"));
        assert!(p.allows("net_version"));
        assert!(!p.allows("net_peerCount"));
        assert!(!p.allows("web3_clientVersion"));
        let everything = MethodPolicy::new(PolicyMode::Allow, &patterns(&["*"]));
        assert!(everything.allows("anything_at_all"));
    }
}
