//! The client behind trusted proxies, from `X-Forwarded-For` or RFC 7239
//! `Forwarded`, read right to left.
//!
//! Each proxy appends the address it received the request from, so the
//! list reads, left to right, "what the client claimed … what each hop
//! saw". Only the entries appended by proxies we trust are facts: walking
//! from the right, starting at the TCP peer, every trusted address hands
//! over to the entry on its left; the first address that is not trusted is
//! the client. An entry that is not an address (`unknown`, an obfuscated
//! identifier, garbage) stops the walk at the last address reached, which
//! is a trusted proxy: the call is charged to that proxy rather than to a
//! name anyone could have written.
//!
//! The operator names the one header their proxies write
//! (`server.forwarded_header`): reading both would let a client forge the
//! one its proxy passes through untouched.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv6Addr};

use crate::{TrustedProxies, canonical};

/// Which header the trusted proxies write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client;proto=https, for="[2001:db8::1]:80"`.
    Forwarded,
}

impl Header {
    /// The header's name, lower case.
    pub fn name(self) -> &'static str {
        match self {
            Header::XForwardedFor => "x-forwarded-for",
            Header::Forwarded => "forwarded",
        }
    }
}

/// Hops read at most: a longer list stops at the last address reached
/// (no proxy chain in front of an RPC endpoint is this deep).
pub const MAX_HOPS: usize = 32;

/// Where the walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The client.
    pub ip: IpAddr,
    /// How it was found.
    pub how: How,
}

/// How the client was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The peer is not trusted, or the header is absent: the peer itself.
    Peer,
    /// An entry of the header, the first untrusted one from the right (or
    /// the leftmost, when every entry is a trusted proxy).
    Header,
    /// The walk met an entry that is not an address, or more than
    /// [`MAX_HOPS`] entries, and stopped at the last trusted address.
    Stopped,
}

/// The client of a request whose connection came from `peer` (the TCP
/// peer, or the PROXY protocol source), given the values of the trusted
/// `header` in the order they appear in the request.
pub fn resolve<'a>(
    peer: IpAddr,
    trusted: &TrustedProxies,
    header: Header,
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Found {
    let peer = canonical(peer);
    let mut found = Found {
        ip: peer,
        how: How::Peer,
    };
    if !trusted.contains(peer) {
        return found;
    }
    let mut entries = Entries::default();
    for value in values {
        match header {
            Header::XForwardedFor => {
                for item in value.split(|&b| b == b',') {
                    entries.push(xff_entry(item));
                }
            }
            Header::Forwarded => forwarded_entries(value, &mut entries),
        }
    }
    if entries.len == 0 {
        return found;
    }
    for entry in entries.iter_rev() {
        match entry {
            Some(ip) => {
                found = Found {
                    ip,
                    how: How::Header,
                };
                if !trusted.contains(ip) {
                    return found;
                }
            }
            None => {
                found.how = How::Stopped;
                return found;
            }
        }
    }
    // The rightmost MAX_HOPS are kept: a walk that got past them all stops
    // there rather than trust what was cut.
    if entries.overflowed {
        found.how = How::Stopped;
    }
    found
}

/// The last [`MAX_HOPS`] entries, in a ring: no allocation per request.
#[derive(Default)]
struct Entries {
    ring: [Option<IpAddr>; MAX_HOPS],
    next: usize,
    len: usize,
    overflowed: bool,
}

impl Entries {
    fn push(&mut self, entry: Option<IpAddr>) {
        self.ring[self.next] = entry;
        self.next = (self.next + 1) % MAX_HOPS;
        if self.len == MAX_HOPS {
            self.overflowed = true;
        } else {
            self.len += 1;
        }
    }

    fn iter_rev(&self) -> impl Iterator<Item = Option<IpAddr>> + '_ {
        (1..=self.len).map(move |back| self.ring[(self.next + MAX_HOPS - back) % MAX_HOPS])
    }
}

/// One `X-Forwarded-For` entry: an address, optionally with a port
/// (`1.2.3.4:5`, `[2001:db8::1]:5`, `[2001:db8::1]`), as some proxies
/// write it.
fn xff_entry(item: &[u8]) -> Option<IpAddr> {
    let item = std::str::from_utf8(trim(item)).ok()?;
    node(item)
}

/// A node: `ip`, `ip:port`, `[ipv6]`, `[ipv6]:port`. Anything else
/// (`unknown`, `_hidden`, garbage) is `None`.
fn node(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (inner, tail) = rest.split_once(']')?;
        if !(tail.is_empty() || is_port(tail.strip_prefix(':')?)) {
            return None;
        }
        return inner
            .parse::<Ipv6Addr>()
            .ok()
            .map(|v6| canonical(IpAddr::V6(v6)));
    }
    // IPv4 with a port (a bare IPv6 address has parsed above).
    let (host, port) = s.rsplit_once(':')?;
    if !is_port(port) {
        return None;
    }
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// RFC 7239 allows obfuscated ports (`_abc`) too.
fn is_port(s: &str) -> bool {
    let digits = s.bytes().all(|b| b.is_ascii_digit()) && s.parse::<u16>().is_ok();
    let obfuscated = s.len() > 1
        && s.starts_with('_')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    digits || obfuscated
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// The `for=` of each element of one `Forwarded` value, left to right. An
/// element without `for=` is recorded as not an address (a hop that did
/// not say whom it received from); a value that does not parse at all
/// records one such entry, so the walk stops there.
fn forwarded_entries(value: &[u8], out: &mut Entries) {
    let mut rest = value;
    loop {
        let mut client: Option<Option<IpAddr>> = None;
        // pairs of one element, separated by ';', until ',' or the end
        loop {
            rest = trim_start(rest);
            let Some((name, after)) = token(rest) else {
                out.push(None);
                return;
            };
            let after = trim_start(after);
            let Some(after) = after.strip_prefix(b"=") else {
                out.push(None);
                return;
            };
            let after = trim_start(after);
            let Some((val, after)) = param_value(after) else {
                out.push(None);
                return;
            };
            if name.eq_ignore_ascii_case(b"for") {
                if client.is_some() {
                    // Two `for` in one element: not a list we can read.
                    out.push(None);
                    return;
                }
                client = Some(std::str::from_utf8(&val).ok().and_then(node));
            }
            rest = trim_start(after);
            match rest.first() {
                Some(b';') => rest = &rest[1..],
                Some(b',') | None => break,
                Some(_) => {
                    out.push(None);
                    return;
                }
            }
        }
        out.push(client.flatten());
        match rest.first() {
            Some(b',') => rest = &rest[1..],
            _ => return,
        }
    }
}

fn trim_start(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

/// An RFC 7230 token and what follows it.
fn token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    let end = s.iter().position(|&b| !tchar(b)).unwrap_or(s.len());
    (end > 0).then(|| s.split_at(end))
}

/// A token or a quoted string (unescaped only when it holds escapes), and
/// what follows it.
fn param_value(s: &[u8]) -> Option<(Cow<'_, [u8]>, &[u8])> {
    let Some(quoted) = s.strip_prefix(b"\"") else {
        return token(s).map(|(t, rest)| (Cow::Borrowed(t), rest));
    };
    let end = quoted.iter().position(|&b| b == b'"' || b == b'\\')?;
    if quoted[end] == b'"' {
        return Some((Cow::Borrowed(&quoted[..end]), &quoted[end + 1..]));
    }
    let mut out = quoted[..end].to_vec();
    let mut rest = &quoted[end..];
    loop {
        match rest {
            [b'"', tail @ ..] => return Some((Cow::Owned(out), tail)),
            [b'\\', c, tail @ ..] | [c, tail @ ..] => {
                out.push(*c);
                rest = tail;
            }
            [] => return None,
        }
    }
}

#[cfg(test)]
mod tests;
