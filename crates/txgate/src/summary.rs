//! What `check-config` prints, and the start-up line's parts: each
//! setting as an operator reads it, from the parsed settings (never the
//! password of a URL, never a token).

use txgate_config::{Config, Settings, ShouldForwardScope};

/// The `check-config` report.
pub(crate) fn print(settings: &Settings) {
    println!("configuration ok");
    println!("  listen        {}", settings.server.listen);
    println!("  tls           {}", tls_line(settings));
    println!("  clients       {}", client_identity(settings));
    println!("  upstream      {}", upstream_line(settings));
    println!(
        "  admin         {} (ban endpoints: {})",
        settings.admin.listen,
        if settings.admin.token_file.is_some() {
            "bearer token"
        } else {
            "loopback only"
        }
    );
    println!(
        "  max_in_flight {} ({} for eth_sendRawTransactionSync, upstream wait {} ms)",
        settings.admission.max_in_flight,
        settings.admission.effective_max_sync_in_flight(),
        settings.upstream.sync_call_timeout.as_millis()
    );
    println!(
        "  policy        {:?} {:?}",
        settings.rpc.policy, settings.rpc.methods
    );
    println!("  screening     {}", screening_mode(settings));
    let sources = sidecar_sources(settings);
    if sources.is_empty() {
        println!("  sidecar       none");
    }
    for (n, source) in sources.iter().enumerate() {
        let label = if n == 0 { "sidecar" } else { "" };
        println!("  {label:<13} {source}");
    }
    println!("  aeges         {}", aeges_listener(settings));
    println!("  conditional   {}", conditional_checks(settings));
    println!("  redis         {}", redis_link(settings));
    println!("  websocket     {}", websocket_link(settings));
}

pub(crate) fn screening_mode(config: &Config) -> &'static str {
    match (config.screen.enabled, config.screen.monitor_only) {
        (false, _) => "off",
        (true, true) => "monitor-only",
        (true, false) => "on",
    }
}

/// The sidecar sources, one line each: URL, protocol, and whether it is
/// asked ShouldForward, about what.
pub(crate) fn sidecar_sources(settings: &Settings) -> Vec<String> {
    let sidecar = &settings.sidecar;
    let scope = match sidecar.should_forward_scope {
        ShouldForwardScope::Hot => format!(
            " should_forward (new fingerprints on calls an invalidation named within {} ms)",
            sidecar.hot_window.as_millis()
        ),
        ShouldForwardScope::All => " should_forward (every new fingerprint)".to_string(),
    };
    settings
        .sources()
        .iter()
        .map(|source| {
            format!(
                "http://{} {}{}",
                source.url.authority(),
                source.protocol,
                if source.should_forward { &scope } else { "" }
            )
        })
        .collect()
}

/// Who the clients are: the TCP peer, or, from trusted proxies, the PROXY
/// protocol source and the forwarding header.
pub(crate) fn client_identity(settings: &Settings) -> String {
    let server = &settings.server;
    let trusted = &settings.trusted_proxies();
    if trusted.is_empty() {
        return "the TCP peer (no trusted proxies)".to_string();
    }
    let trusted: Vec<String> = trusted.iter().map(ToString::to_string).collect();
    format!(
        "from trusted proxies [{}]: PROXY protocol {:?}, header {:?}",
        trusted.join(", "),
        server.proxy_protocol,
        server.forwarded_header
    )
}

/// What `eth_sendRawTransactionConditional` is checked against.
fn conditional_checks(config: &Config) -> String {
    let c = &config.conditional;
    if !c.enabled {
        return "off (every call refused: endpoint disabled)".to_string();
    }
    let per_sec = |rate: u32| {
        if rate == 0 {
            "no limit".to_string()
        } else {
            format!("{rate} lookups/s")
        }
    };
    format!(
        "max cost {}; targets {}; callers {}; rate {}{}, per caller {}",
        c.max_cost,
        if c.targets.is_empty() {
            "any".to_string()
        } else {
            c.targets.len().to_string()
        },
        if c.callers.is_empty() {
            "open (signatures checked when present)".to_string()
        } else {
            format!("{} listed (signature required)", c.callers.len())
        },
        per_sec(c.rate_per_sec),
        if config.redis.enabled() && c.rate_per_sec > 0 {
            " for the fleet"
        } else {
            ""
        },
        per_sec(c.caller_rate_per_sec)
    )
}

/// The fleet's Redis (never its password) and what it shares; "off".
fn redis_link(config: &Config) -> String {
    let redis = &config.redis;
    if !redis.enabled() {
        return "off (per-client limits are per instance)".to_string();
    }
    format!(
        "{} shares the per-client limits and conditional rates, sync every {} ms; {}% of each limit per instance while down",
        redis.redacted_url(),
        redis.sync_interval.as_millis(),
        (redis.local_share * 100.0).round()
    )
}

/// TLS on the client port: the files, versions and groups; "off".
fn tls_line(config: &Config) -> String {
    let tls = &config.server.tls;
    if !tls.enabled() {
        return "off (cleartext HTTP and WebSocket)".to_string();
    }
    let reread = match tls.reload_interval {
        None => "reread on SIGHUP only".to_string(),
        Some(every) => format!("reread every {} ms and on SIGHUP", every.as_millis()),
    };
    format!(
        "on, certificate {} ({reread}), TLS {}, groups {} (the client's choice among them), tickets {}",
        tls.cert_chain_path,
        if tls.allows_tls12() {
            "1.3 and 1.2"
        } else {
            "1.3 only"
        },
        tls.groups.join(", "),
        if tls.session_tickets { "on" } else { "off" }
    )
}

/// A node group's nodes by name and role, a sequencer's raft ID when
/// op-conductor's leader is followed, and how many conductors are asked
/// (never a URL, which may carry an API key); `None` for the one-node
/// short form.
pub(crate) fn node_names(settings: &Settings) -> Option<String> {
    let nodes = settings.nodes();
    (!nodes.is_short_form()).then(|| {
        let names = nodes
            .nodes()
            .iter()
            .map(|n| match &n.conductor_id {
                Some(id) => format!("{} ({}, conductor_id {id})", n.name, n.role.as_str()),
                None => format!("{} ({})", n.name, n.role.as_str()),
            })
            .collect::<Vec<_>>()
            .join(", ");
        match nodes.conductors().len() {
            0 => names,
            1 => format!("{names}; submissions follow op-conductor's leader"),
            n => format!("{names}; submissions follow op-conductor's leader (asked of {n} URLs)"),
        }
    })
}

/// The node, and for https:// what it is trusted by.
fn upstream_line(settings: &Settings) -> String {
    if let Some(names) = node_names(settings) {
        return format!("group: {names}");
    }
    let up = &settings.upstream;
    match settings.upstream_url().is_tls() {
        true => format!(
            "{} (TLS, CA {}{})",
            up.url,
            if up.tls.ca_path.is_empty() {
                "the system's roots"
            } else {
                &up.tls.ca_path
            },
            if up.tls.has_client_cert() {
                ", client certificate"
            } else {
                ""
            }
        ),
        false => up.url.clone(),
    }
}

/// WebSocket: the node's endpoint and the main limits; "off".
fn websocket_link(settings: &Settings) -> String {
    let ws = &settings.websocket;
    if !ws.enabled {
        return "off".to_string();
    }
    let url = &settings.websocket_url();
    let upstream = format!(
        "{}://{}{}",
        if url.is_tls() { "wss" } else { "ws" },
        url.authority(),
        url.path()
    );
    format!(
        "on, upstream {upstream}, {} subscriptions per connection ({} in all), {}-byte messages",
        ws.max_subscriptions_per_connection, ws.max_subscriptions, ws.max_message_bytes
    )
}

/// The Aeges listener: its address, whether a token is set (never the
/// token) and the allowed networks; "off" without one.
pub(crate) fn aeges_listener(settings: &Settings) -> String {
    let aeges = &settings.aeges;
    let Some(listen) = settings.aeges_listen() else {
        return "off".to_string();
    };
    let nets = |nets: &[txgate_config::IpNet]| {
        nets.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let token = |token: &str| if token.is_empty() { "none" } else { "set" };
    let proxyd = match settings.aeges_proxyd_allow() {
        [] => "off".to_string(),
        allow => format!(
            "POST /proxyd/validate token {} allow [{}], {} tx/s per source",
            token(&aeges.proxyd_token),
            nets(allow),
            aeges.proxyd_txs_per_sec
        ),
    };
    format!(
        "{listen} reports: token {} allow [{}]; pool questions: allow [{}]; proxyd's hook: {proxyd}",
        token(&aeges.report_token),
        nets(settings.aeges_report_allow()),
        nets(settings.aeges_verify_allow()),
    )
}
