//! Framing of the PROXY protocol header (HAProxy's spec, v1 text and v2
//! binary) at the start of a connection; the fields are parsed by the
//! `ppp` crate once the whole header is here.
//!
//! The header may arrive split across TCP segments: [`parse`] says "more"
//! until it holds the whole header (v1: up to its CRLF; v2: the 16-byte
//! preamble, then the length it announces), and refuses as soon as the
//! bytes cannot become a header, so a bad peer is cut without waiting for
//! bytes that change nothing. A header never takes more than
//! [`MAX_HEADER_BYTES`].

use std::net::{IpAddr, SocketAddr};

use ppp::{v1, v2};

/// The v1 header's signature.
const V1_PREFIX: &[u8] = b"PROXY ";
/// The v2 header's 12-byte signature.
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
/// v1: the longest header the spec allows, CRLF included.
pub const MAX_V1_BYTES: usize = 107;
/// v2: the preamble and the addresses and TLVs txgate will read. The
/// spec allows 64 KiB; load balancers send 28 (IPv4) or 52 (IPv6) bytes
/// plus a few TLVs (an endpoint id, a unique id, TLS facts).
pub const MAX_HEADER_BYTES: usize = 2048;
/// The v2 preamble: signature, version/command, family/protocol, length.
const V2_PREAMBLE: usize = 16;

/// A whole header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Its length: the connection's own bytes start after it.
    pub len: usize,
    /// Which version it was.
    pub version: Version,
    /// The client the balancer received the connection from; `None` for
    /// a connection the balancer opened itself (v2 `LOCAL`, v1 `UNKNOWN`,
    /// an unspecified or UNIX family): its TCP peer speaks for itself.
    pub source: Option<SocketAddr>,
}

/// A PROXY protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Text.
    V1,
    /// Binary.
    V2,
}

/// Why the bytes are not a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// They start like neither signature (a client that sent no header).
    Missing,
    /// Longer than txgate reads ([`MAX_V1_BYTES`], [`MAX_HEADER_BYTES`]).
    TooLong,
    /// A header of that version whose fields do not parse.
    Invalid(Version),
}

impl Malformed {
    /// A metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Malformed::Missing => "missing",
            Malformed::TooLong => "too_long",
            Malformed::Invalid(Version::V1) => "invalid_v1",
            Malformed::Invalid(Version::V2) => "invalid_v2",
        }
    }
}

/// Whether `buf` starts a PROXY header: `Some(true)` it does (or may, as
/// far as the bytes go), `Some(false)` it cannot (plain HTTP), `None` too
/// few bytes to tell. Both HTTP/1.1 methods and the h2 preface diverge
/// from the signatures within three bytes (`PO`, `PRI` against `PROXY`).
pub fn starts_header(buf: &[u8]) -> Option<bool> {
    let could = |sig: &[u8]| {
        let n = buf.len().min(sig.len());
        buf[..n] == sig[..n]
    };
    let v1 = could(V1_PREFIX);
    let v2 = could(V2_SIGNATURE);
    match (v1, v2) {
        (false, false) => Some(false),
        _ if buf.len() >= V1_PREFIX.len() && v1 => Some(true),
        _ if buf.len() >= V2_SIGNATURE.len() && v2 => Some(true),
        _ => None,
    }
}

/// The header at the start of `buf`: `Ok(None)` while more bytes are
/// needed.
pub fn parse(buf: &[u8]) -> Result<Option<Header>, Malformed> {
    match starts_header(buf) {
        Some(false) => Err(Malformed::Missing),
        None => Ok(None),
        Some(true) if buf.starts_with(V1_PREFIX) => parse_v1(buf),
        Some(true) => parse_v2(buf),
    }
}

fn parse_v1(buf: &[u8]) -> Result<Option<Header>, Malformed> {
    let Some(cr) = buf.iter().position(|&b| b == b'\r') else {
        return if buf.len() >= MAX_V1_BYTES {
            Err(Malformed::TooLong)
        } else {
            Ok(None)
        };
    };
    let len = cr + 2;
    if len > MAX_V1_BYTES {
        return Err(Malformed::TooLong);
    }
    if buf.len() < len {
        return Ok(None);
    }
    if buf[cr + 1] != b'\n' {
        return Err(Malformed::Invalid(Version::V1));
    }
    let header = v1::Header::try_from(&buf[..len]).map_err(|_| Malformed::Invalid(Version::V1))?;
    let source = match header.addresses {
        v1::Addresses::Tcp4(a) => {
            Some(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port))
        }
        v1::Addresses::Tcp6(a) => {
            Some(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port))
        }
        v1::Addresses::Unknown => None,
    };
    Ok(Some(Header {
        len,
        version: Version::V1,
        source,
    }))
}

fn parse_v2(buf: &[u8]) -> Result<Option<Header>, Malformed> {
    if buf.len() < V2_PREAMBLE {
        return Ok(None);
    }
    let len = V2_PREAMBLE + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > MAX_HEADER_BYTES {
        return Err(Malformed::TooLong);
    }
    if buf.len() < len {
        // The version, command, family and protocol are known already:
        // refuse now rather than wait for the rest.
        return match v2::Header::try_from(&buf[..len.min(buf.len())]) {
            Err(v2::ParseError::Partial(..)) => Ok(None),
            _ => Err(Malformed::Invalid(Version::V2)),
        };
    }
    let invalid = Malformed::Invalid(Version::V2);
    let header = v2::Header::try_from(&buf[..len]).map_err(|_| invalid)?;
    if header.tlvs().any(|tlv| tlv.is_err()) {
        return Err(invalid);
    }
    let source = match (header.command, header.addresses) {
        (v2::Command::Local, _) => None,
        (v2::Command::Proxy, v2::Addresses::IPv4(a)) => {
            Some(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port))
        }
        (v2::Command::Proxy, v2::Addresses::IPv6(a)) => {
            Some(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port))
        }
        (v2::Command::Proxy, v2::Addresses::Unspecified | v2::Addresses::Unix(_)) => None,
    };
    Ok(Some(Header {
        len,
        version: Version::V2,
        source,
    }))
}

#[cfg(test)]
mod tests;
