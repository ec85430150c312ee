//! [`HttpUrl`]: the one parser of the endpoints txgate connects to
//! (`upstream.url`, `sidecar.url`, `websocket.upstream_url`).
//!
//! It accepts exactly what txgate's clients can use, so that
//! `txgate check-config` and the daemon agree on every URL:
//!
//! * scheme `http://` only ([`HttpUrl::parse`], the sidecars), `http://`
//!   or `https://` ([`HttpUrl::parse_upstream`], the node), or `ws://` or
//!   `wss://` ([`HttpUrl::parse_ws`]) (the scheme is case-insensitive);
//! * a non-empty host: a host name (letters, digits, `-`, `.`, `_`, `~`),
//!   an IPv4 address (a host of digits and dots must be one), or an IPv6
//!   address in brackets (`[::1]`, no zone id);
//! * an optional port, `1..=65535` (80 when absent, 443 over TLS);
//! * no user-info (`user@host`): txgate sends no credentials;
//! * an optional path, printable ASCII without spaces (`/` when absent). A
//!   query (`?key=...`) is allowed and kept in the path: it is sent as part
//!   of the request target. A fragment (`#...`) is refused: it is never sent
//!   to a server, so it can only be a mistake.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An `http://` (or `https://`, `ws://`, `wss://`) endpoint, parsed once
/// by [`HttpUrl::parse`] (or [`HttpUrl::parse_upstream`],
/// [`HttpUrl::parse_ws`]). Of the scheme only whether it is TLS is kept:
/// the caller knows which family it asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    host: String,
    port: u16,
    authority: String,
    path: String,
    tls: bool,
}

/// A scheme txgate accepts.
struct Scheme {
    prefix: &'static str,
    tls: bool,
}

const HTTP: Scheme = Scheme {
    prefix: "http://",
    tls: false,
};
const HTTPS: Scheme = Scheme {
    prefix: "https://",
    tls: true,
};
const WS: Scheme = Scheme {
    prefix: "ws://",
    tls: false,
};
const WSS: Scheme = Scheme {
    prefix: "wss://",
    tls: true,
};

impl HttpUrl {
    /// Parses an `http://` `url`; the error says what is wrong and quotes
    /// `url`.
    pub fn parse(url: &str) -> Result<HttpUrl, String> {
        parse_with(url, &[&HTTP], "cleartext HTTP")
    }

    /// Parses an `http://` or `https://` `url` (the node) by the same
    /// rules as [`HttpUrl::parse`].
    pub fn parse_upstream(url: &str) -> Result<HttpUrl, String> {
        parse_with(url, &[&HTTP, &HTTPS], "HTTP or HTTPS")
    }

    /// Parses a `ws://` or `wss://` `url` by the same rules as
    /// [`HttpUrl::parse`]; the error says what is wrong and quotes `url`.
    pub fn parse_ws(url: &str) -> Result<HttpUrl, String> {
        parse_with(url, &[&WS, &WSS], "WebSocket")
    }

    /// Whether the scheme is `https://` or `wss://`.
    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// Host to connect to: a host name, an IPv4 address, or an IPv6 address
    /// without its brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// TCP port (80 when the URL names none, 443 over TLS).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host[:port]` as written in the URL, for the `Host` header.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// Request target: the path (and query) as written, `/` when absent.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// [`HttpUrl::parse`] for one of `schemes` (`speaks` names them for the
/// error).
fn parse_with(url: &str, schemes: &[&Scheme], speaks: &str) -> Result<HttpUrl, String> {
    let found = schemes.iter().find(|scheme| {
        url.get(..scheme.prefix.len())
            .is_some_and(|given| given.eq_ignore_ascii_case(scheme.prefix))
    });
    let Some(scheme) = found else {
        let prefixes: Vec<&str> = schemes.iter().map(|s| s.prefix).collect();
        return Err(format!(
            "`{url}` must start with {} (txgate speaks {speaks} here)",
            prefixes.join(" or ")
        ));
    };
    let rest = &url[scheme.prefix.len()..];
    let default_port = if scheme.tls { 443 } else { 80 };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    if authority.contains('@') {
        return Err(format!(
            "`{url}` has user-info (`user@`), which txgate does not send"
        ));
    }
    let (host, port) =
        split_authority(authority, default_port).map_err(|e| format!("`{url}`: {e}"))?;
    if tail.contains('#') {
        return Err(format!(
            "`{url}` has a fragment (`#...`), which is never sent to a server"
        ));
    }
    let path = match tail {
        "" => "/".to_string(),
        query if query.starts_with('?') => format!("/{query}"),
        path => path.to_string(),
    };
    if !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "`{url}`: the path must be printable ASCII with no spaces or control characters"
        ));
    }
    Ok(HttpUrl {
        host,
        port,
        authority: authority.to_string(),
        path,
        tls: scheme.tls,
    })
}

/// `host[:port]` or `[ipv6][:port]` into host (unbracketed) and port.
fn split_authority(authority: &str, default_port: u16) -> Result<(String, u16), String> {
    if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((ip, after)) = bracketed.split_once(']') else {
            return Err("`[` opens an IPv6 address that no `]` closes".into());
        };
        if ip.parse::<Ipv6Addr>().is_err() {
            return Err(format!("`[{ip}]` is not an IPv6 address"));
        }
        let port = match after {
            "" => default_port,
            _ => match after.strip_prefix(':') {
                Some(port) => parse_port(port)?,
                None => return Err(format!("`{after}` follows the IPv6 address")),
            },
        };
        return Ok((ip.to_string(), port));
    }
    if authority.matches(':').count() > 1 {
        return Err(format!(
            "`{authority}`: an IPv6 address must be in brackets (`[::1]:8545`)"
        ));
    }
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, parse_port(port)?),
        None => (authority, default_port),
    };
    check_host(host)?;
    Ok((host.to_string(), port))
}

fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("no host before the port".into());
    }
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')))
    {
        return Err(format!(
            "host `{host}` has `{c}`, not allowed in a host name"
        ));
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') && host.parse::<Ipv4Addr>().is_err() {
        return Err(format!("host `{host}` is not an IPv4 address"));
    }
    Ok(())
}

fn parse_port(port: &str) -> Result<u16, String> {
    // `u16::from_str` also takes a leading `+`, a URL port does not.
    match port.parse::<u16>() {
        Ok(p) if p != 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(format!("port `{port}` must be a number from 1 to 65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(url: &str) -> (String, u16, String, String) {
        let u = HttpUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        (
            u.host().to_string(),
            u.port(),
            u.authority().to_string(),
            u.path().to_string(),
        )
    }

    #[test]
    fn accepted_forms() {
        let s = |x: &str| x.to_string();
        assert_eq!(
            ok("http://127.0.0.1:8546"),
            (s("127.0.0.1"), 8546, s("127.0.0.1:8546"), s("/"))
        );
        assert_eq!(
            ok("http://node.internal/rpc/v1"),
            (s("node.internal"), 80, s("node.internal"), s("/rpc/v1"))
        );
        assert_eq!(
            ok("http://[::1]:9000/x"),
            (s("::1"), 9000, s("[::1]:9000"), s("/x"))
        );
        assert_eq!(ok("http://[::1]"), (s("::1"), 80, s("[::1]"), s("/")));
        assert_eq!(ok("HTTP://h:65535/"), (s("h"), 65535, s("h:65535"), s("/")));
        assert_eq!(
            ok("http://h/rpc?key=a"),
            (s("h"), 80, s("h"), s("/rpc?key=a"))
        );
        assert_eq!(ok("http://h?key=a"), (s("h"), 80, s("h"), s("/?key=a")));
        assert_eq!(
            ok("http://my_node-1.local~x"),
            (s("my_node-1.local~x"), 80, s("my_node-1.local~x"), s("/"))
        );
    }

    #[test]
    fn refused_forms_quote_the_url() {
        for (url, why) in [
            ("https://x", "http://"),
            ("ftp://x", "http://"),
            ("wss://x", "http://"),
            ("127.0.0.1:8545", "http://"),
            ("", "http://"),
            ("http://", "no host"),
            ("http:///x", "no host"),
            ("http://?x", "no host"),
            ("http://:80", "no host"),
            ("http://127.0.0.1:notaport", "port `notaport`"),
            ("http://h:0", "port `0`"),
            ("http://h:65536", "port `65536`"),
            ("http://h:+80", "port `+80`"),
            ("http://h:", "port ``"),
            ("http://h:1:2", "brackets"),
            ("http://::1", "brackets"),
            ("http://[::1", "`]`"),
            ("http://[nope]:1", "IPv6"),
            ("http://[::1]x", "follows"),
            ("http://[fe80::1%25eth0]:1", "IPv6"),
            ("http://user@h:1", "user-info"),
            ("http://user:pw@h", "user-info"),
            ("http://h:1/a b", "path"),
            ("http://h/a\tb", "path"),
            ("http://h/\u{e9}", "path"),
            ("http://h/x#frag", "fragment"),
            ("http://h#frag", "fragment"),
            ("http://h b", "host `h b`"),
            ("http://h%41", "host"),
            ("http://999.1.1.1", "IPv4"),
            ("http://1.2.3", "IPv4"),
        ] {
            let e = HttpUrl::parse(url).expect_err(url);
            assert!(e.contains(&format!("`{url}`")), "{url}: {e}");
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn ws_urls_follow_the_same_rules() {
        let s = |x: &str| x.to_string();
        let ws = |url: &str| {
            let u = HttpUrl::parse_ws(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            (
                u.host().to_string(),
                u.port(),
                u.authority().to_string(),
                u.path().to_string(),
            )
        };
        assert_eq!(
            ws("ws://127.0.0.1:8546"),
            (s("127.0.0.1"), 8546, s("127.0.0.1:8546"), s("/"))
        );
        assert_eq!(
            ws("WS://node.internal/ws?key=a"),
            (s("node.internal"), 80, s("node.internal"), s("/ws?key=a"))
        );
        assert_eq!(
            ws("ws://[::1]:9000/x"),
            (s("::1"), 9000, s("[::1]:9000"), s("/x"))
        );
        // Every refusal of an http:// URL refuses its ws:// twin, for the
        // same reason.
        for (url, why) in [
            ("ws://", "no host"),
            ("ws://h:0", "port `0`"),
            ("ws://h:1:2", "brackets"),
            ("ws://user@h:1", "user-info"),
            ("ws://h:1/a b", "path"),
            ("ws://h#frag", "fragment"),
            ("ws://999.1.1.1", "IPv4"),
        ] {
            let e = HttpUrl::parse_ws(url).expect_err(url);
            assert!(
                e.contains(&format!("`{url}`")) && e.contains(why),
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn each_parser_takes_its_own_scheme_only() {
        for url in ["http://h:1", "https://h:1", "h:1", ""] {
            let e = HttpUrl::parse_ws(url).expect_err(url);
            assert!(e.contains(&format!("`{url}`")), "{url}: {e}");
            assert!(e.contains("must start with ws:// or wss://"), "{url}: {e}");
        }
        for url in ["ws://h:1", "wss://h:1", "https://h:1"] {
            let e = HttpUrl::parse(url).expect_err(url);
            assert!(e.contains("must start with http://"), "{url}: {e}");
            assert!(e.contains("cleartext HTTP"), "{url}: {e}");
        }
        for url in ["ws://h:1", "ftp://h"] {
            let e = HttpUrl::parse_upstream(url).expect_err(url);
            assert!(e.contains("http:// or https://"), "{url}: {e}");
        }
    }

    #[test]
    fn tls_schemes_default_to_port_443() {
        let u = HttpUrl::parse_upstream("HTTPS://node.example/rpc").unwrap();
        assert!(u.is_tls());
        assert_eq!(
            (u.host(), u.port(), u.authority()),
            ("node.example", 443, "node.example")
        );
        let u = HttpUrl::parse_upstream("https://[::1]:8443").unwrap();
        assert_eq!((u.host(), u.port(), u.is_tls()), ("::1", 8443, true));
        let u = HttpUrl::parse_upstream("http://node").unwrap();
        assert_eq!((u.port(), u.is_tls()), (80, false));
        let u = HttpUrl::parse_ws("wss://node/ws").unwrap();
        assert_eq!((u.port(), u.is_tls()), (443, true));
        assert!(!HttpUrl::parse_ws("ws://node").unwrap().is_tls());
    }
}
