use super::*;

const HTTP: &[u8] = b"POST / HTTP/1.1\r\nhost: x\r\n\r\n";

fn v2(command: u8, family: u8, addresses: &[u8], tlvs: &[u8]) -> Vec<u8> {
    let mut h = V2_SIGNATURE.to_vec();
    h.push(0x20 | command);
    h.push(family);
    h.extend(((addresses.len() + tlvs.len()) as u16).to_be_bytes());
    h.extend(addresses);
    h.extend(tlvs);
    h
}

fn v2_ipv4() -> Vec<u8> {
    // 203.0.113.7:4711 -> 10.0.0.1:8545
    v2(
        0x1,
        0x11,
        &[203, 0, 113, 7, 10, 0, 0, 1, 0x12, 0x67, 0x21, 0x61],
        &[],
    )
}

fn with_http(header: &[u8]) -> Vec<u8> {
    let mut b = header.to_vec();
    b.extend(HTTP);
    b
}

/// Every split of the header (and the request behind it) waits for more
/// until the header is whole, then gives the same answer.
fn every_split(header: &[u8]) -> Header {
    let bytes = with_http(header);
    for cut in 0..header.len() {
        assert_eq!(parse(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
    let whole = parse(&bytes[..header.len()]).unwrap().unwrap();
    for cut in header.len()..=bytes.len() {
        assert_eq!(parse(&bytes[..cut]), Ok(Some(whole)), "cut at {cut}");
    }
    assert_eq!(whole.len, header.len());
    whole
}

fn addr(s: &str) -> Option<SocketAddr> {
    Some(s.parse().unwrap())
}

#[test]
fn v1_tcp4_tcp6_and_unknown_split_anywhere() {
    let h = every_split(b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 8545\r\n");
    assert_eq!(
        (h.version, h.source),
        (Version::V1, addr("203.0.113.7:4711"))
    );
    let h = every_split(b"PROXY TCP6 2001:db8::7 fd00::1 4711 8545\r\n");
    assert_eq!(h.source, addr("[2001:db8::7]:4711"));
    let h = every_split(b"PROXY UNKNOWN\r\n");
    assert_eq!(h.source, None);
}

#[test]
fn v2_ipv4_ipv6_local_unspecified_and_tlvs_split_anywhere() {
    let h = every_split(&v2_ipv4());
    assert_eq!(
        (h.version, h.source),
        (Version::V2, addr("203.0.113.7:4711"))
    );

    let mut six = [0u8; 36];
    six[..16].copy_from_slice(
        &"2001:db8::7"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    six[32..34].copy_from_slice(&4711u16.to_be_bytes());
    let h = every_split(&v2(0x1, 0x21, &six, &[]));
    assert_eq!(h.source, addr("[2001:db8::7]:4711"));

    // A balancer's own health check: LOCAL, the peer speaks for itself.
    let h = every_split(&v2(0x0, 0x00, &[], &[]));
    assert_eq!(h.source, None);
    let h = every_split(&v2(0x0, 0x11, &[0; 12], &[]));
    assert_eq!(h.source, None);
    // PROXY with an unspecified family.
    assert_eq!(every_split(&v2(0x1, 0x00, &[], &[])).source, None);

    // TLVs: an AWS-style endpoint id (0xEA) and a NOOP.
    let tlvs = [
        0xEA, 0x00, 0x05, 1, b'v', b'p', b'c', b'e', 0x04, 0x00, 0x01, 0x00,
    ];
    let h = every_split(&v2(0x1, 0x11, &v2_ipv4()[16..], &tlvs));
    assert_eq!(h.source, addr("203.0.113.7:4711"));
}

#[test]
fn no_header_is_missing_as_soon_as_the_bytes_diverge() {
    assert_eq!(parse(HTTP), Err(Malformed::Missing));
    assert_eq!(parse(b"PO"), Err(Malformed::Missing));
    assert_eq!(
        parse(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        Err(Malformed::Missing)
    );
    assert_eq!(parse(b"PRI"), Err(Malformed::Missing));
    assert_eq!(parse(b"\r\n\r\n\0\r\nQUIX"), Err(Malformed::Missing));
    assert_eq!(parse(b"GET"), Err(Malformed::Missing));
    assert_eq!(starts_header(b"P"), None);
    assert_eq!(starts_header(b"PROXY"), None);
    assert_eq!(starts_header(b"PROXY "), Some(true));
    assert_eq!(starts_header(b"\r\n\r\n"), None);
    assert_eq!(starts_header(V2_SIGNATURE), Some(true));
    assert_eq!(starts_header(b"POST"), Some(false));
}

#[test]
fn malformed_v1_is_refused() {
    for bad in [
        &b"PROXY TCP4 203.0.113.7\r\n"[..],
        b"PROXY TCP5 203.0.113.7 10.0.0.1 4711 8545\r\n",
        b"PROXY TCP4 203.0.113.999 10.0.0.1 4711 8545\r\n",
        b"PROXY TCP4 203.0.113.7 10.0.0.1 99999 8545\r\n",
        b"PROXY TCP4 2001:db8::7 10.0.0.1 4711 8545\r\n",
        b"PROXY TCP4 203.0.113.7 10.0.0.1 4711 8545\rX",
        b"PROXY \xff\xfe\r\n",
    ] {
        assert_eq!(
            parse(&with_http(bad)),
            Err(Malformed::Invalid(Version::V1)),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    let mut long = b"PROXY TCP4 ".to_vec();
    long.resize(MAX_V1_BYTES, b'1');
    assert_eq!(parse(&long), Err(Malformed::TooLong));
    long.extend(b"\r\n");
    assert_eq!(parse(&long), Err(Malformed::TooLong));
}

#[test]
fn malformed_v2_is_refused_without_waiting_for_the_rest() {
    let good = v2_ipv4();
    // Version 3, command 2, family 4, protocol 3: known at 16 bytes.
    for (at, byte) in [(12, 0x31), (12, 0x22), (13, 0x41), (13, 0x14)] {
        let mut bad = good.clone();
        bad[at] = byte;
        assert_eq!(
            parse(&bad[..16]),
            Err(Malformed::Invalid(Version::V2)),
            "byte {at} = {byte:#x}"
        );
    }
    // IPv4 family with room for less than its addresses.
    assert_eq!(
        parse(&v2(0x1, 0x11, &[1, 2, 3, 4], &[])[..16]),
        Err(Malformed::Invalid(Version::V2))
    );
    // A TLV that runs past the header.
    let bad = v2(0x1, 0x11, &good[16..], &[0x04, 0x00, 0x09, 0]);
    assert_eq!(parse(&bad), Err(Malformed::Invalid(Version::V2)));
    // An announced length beyond what txgate reads: refused at once.
    let mut huge = good.clone();
    huge[14..16].copy_from_slice(&60_000u16.to_be_bytes());
    assert_eq!(parse(&huge[..16]), Err(Malformed::TooLong));
}

#[test]
fn labels() {
    assert_eq!(Malformed::Missing.reason(), "missing");
    assert_eq!(Malformed::TooLong.reason(), "too_long");
    assert_eq!(Malformed::Invalid(Version::V2).reason(), "invalid_v2");
}
