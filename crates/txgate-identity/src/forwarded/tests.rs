use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn lb() -> TrustedProxies {
    TrustedProxies::new(vec![
        "10.0.0.0/8".parse().unwrap(),
        "fd00::/8".parse().unwrap(),
    ])
}

fn xff(peer: &str, values: &[&str]) -> Found {
    resolve(
        ip(peer),
        &lb(),
        Header::XForwardedFor,
        values.iter().map(|v| v.as_bytes()),
    )
}

fn fwd(peer: &str, values: &[&str]) -> Found {
    resolve(
        ip(peer),
        &lb(),
        Header::Forwarded,
        values.iter().map(|v| v.as_bytes()),
    )
}

fn found(s: &str, how: How) -> Found {
    Found { ip: ip(s), how }
}

#[test]
fn an_untrusted_peer_is_the_client_whatever_it_sends() {
    assert_eq!(
        xff("198.51.100.9", &["203.0.113.7"]),
        found("198.51.100.9", How::Peer)
    );
    assert_eq!(
        fwd("198.51.100.9", &["for=203.0.113.7"]),
        found("198.51.100.9", How::Peer)
    );
    // No trusted networks at all: headers are never read.
    let none = resolve(
        ip("10.0.0.1"),
        &TrustedProxies::default(),
        Header::XForwardedFor,
        [&b"203.0.113.7"[..]],
    );
    assert_eq!(none, found("10.0.0.1", How::Peer));
}

#[test]
fn a_trusted_peer_without_the_header_is_the_client() {
    assert_eq!(xff("10.0.0.1", &[]), found("10.0.0.1", How::Peer));
    assert_eq!(fwd("10.0.0.1", &[]), found("10.0.0.1", How::Peer));
}

#[test]
fn the_rightmost_untrusted_entry_is_the_client_not_the_forged_leftmost() {
    // The client sent "X-Forwarded-For: 6.6.6.6, 7.7.7.7"; the balancer
    // appended the address it saw.
    assert_eq!(
        xff("10.0.0.1", &["6.6.6.6, 7.7.7.7, 203.0.113.7"]),
        found("203.0.113.7", How::Header)
    );
    // Two trusted hops: the edge balancer then an internal one.
    assert_eq!(
        xff("10.0.0.1", &["6.6.6.6, 203.0.113.7, 10.9.9.9"]),
        found("203.0.113.7", How::Header)
    );
    // A forged "trusted" entry left of the real client changes nothing.
    assert_eq!(
        xff("10.0.0.1", &["10.1.1.1, 203.0.113.7"]),
        found("203.0.113.7", How::Header)
    );
}

#[test]
fn several_header_lines_are_one_list_in_order() {
    assert_eq!(
        xff("10.0.0.1", &["6.6.6.6", "203.0.113.7", "10.2.2.2"]),
        found("203.0.113.7", How::Header)
    );
}

#[test]
fn every_entry_trusted_gives_the_leftmost() {
    assert_eq!(
        xff("10.0.0.1", &["10.3.3.3, 10.2.2.2"]),
        found("10.3.3.3", How::Header)
    );
}

#[test]
fn garbage_stops_the_walk_at_the_last_trusted_hop() {
    for bad in ["unknown", "", "1.2.3.999", "[fe80::1", "1.2.3.4:99999", "x"] {
        let header = format!("6.6.6.6, {bad}, 10.2.2.2");
        assert_eq!(
            xff("10.0.0.1", &[&header]),
            found("10.2.2.2", How::Stopped),
            "{bad:?}"
        );
    }
    // Garbage right after the peer: the peer.
    assert_eq!(
        xff("10.0.0.1", &["nonsense"]),
        found("10.0.0.1", How::Stopped)
    );
    // Not UTF-8.
    let r = resolve(
        ip("10.0.0.1"),
        &lb(),
        Header::XForwardedFor,
        [&b"\xff\xfe"[..]],
    );
    assert_eq!(r, found("10.0.0.1", How::Stopped));
}

#[test]
fn entries_with_ports_brackets_and_mapped_ipv4() {
    assert_eq!(
        xff("10.0.0.1", &["203.0.113.7:4711"]),
        found("203.0.113.7", How::Header)
    );
    assert_eq!(
        xff("10.0.0.1", &["[2001:db8::7]:4711"]),
        found("2001:db8::7", How::Header)
    );
    assert_eq!(
        xff("10.0.0.1", &[" 2001:db8::7 "]),
        found("2001:db8::7", How::Header)
    );
    assert_eq!(
        xff("10.0.0.1", &["::ffff:203.0.113.7"]),
        found("203.0.113.7", How::Header)
    );
    // The peer itself seen through an IPv6 socket.
    assert_eq!(
        xff("::ffff:10.0.0.1", &["203.0.113.7"]),
        found("203.0.113.7", How::Header)
    );
    assert_eq!(
        xff("fd00::1", &["203.0.113.7"]),
        found("203.0.113.7", How::Header)
    );
}

#[test]
fn a_list_longer_than_the_cap_is_cut_on_the_left() {
    let mut long = vec!["6.6.6.6".to_string()];
    long.extend((0..MAX_HOPS).map(|i| format!("10.0.0.{i}")));
    // Every kept entry is trusted: the walk stops at the leftmost kept one.
    assert_eq!(
        xff("10.0.0.1", &[&long.join(",")]),
        found("10.0.0.0", How::Stopped)
    );
    // The real client among the kept entries is still found.
    let mut long: Vec<String> = (0..100).map(|i| format!("6.6.{i}.6")).collect();
    long.push("203.0.113.7".into());
    assert_eq!(
        xff("10.0.0.1", &[&long.join(",")]),
        found("203.0.113.7", How::Header)
    );
}

#[test]
fn forwarded_reads_for_right_to_left() {
    assert_eq!(
        fwd("10.0.0.1", &["for=6.6.6.6, for=203.0.113.7;proto=https"]),
        found("203.0.113.7", How::Header)
    );
    assert_eq!(
        fwd(
            "10.0.0.1",
            &[
                "For=\"[2001:db8:cafe::17]:4711\"",
                "for=10.2.2.2;by=10.0.0.1"
            ]
        ),
        found("2001:db8:cafe::17", How::Header)
    );
    // Parameters in any order, spaces around the separators, quoted
    // values with escapes.
    assert_eq!(
        fwd(
            "10.0.0.1",
            &["proto=http ; for = \"203.0.\\113.7\" ; host=x"]
        ),
        found("203.0.113.7", How::Header)
    );
    assert_eq!(
        fwd("10.0.0.1", &["for=\"203.0.113.7:_hidden\""]),
        found("203.0.113.7", How::Header)
    );
    // A port needs quotes (`:` is not a token character).
    assert_eq!(
        fwd("10.0.0.1", &["for=203.0.113.7:80"]),
        found("10.0.0.1", How::Stopped)
    );
}

#[test]
fn forwarded_unknown_obfuscated_or_malformed_stops_at_the_last_trusted_hop() {
    for bad in [
        "for=unknown",
        "for=_gazonk",
        "proto=https",
        "for=\"203.0.113.7",
        "for",
        "for=1.2.3.4;for=5.6.7.8",
        "for=1.2.3.4 junk",
        "=x",
    ] {
        let values = ["for=6.6.6.6", bad, "for=10.2.2.2"];
        assert_eq!(
            fwd("10.0.0.1", &values),
            found("10.2.2.2", How::Stopped),
            "{bad:?}"
        );
    }
}

#[test]
fn a_quoted_comma_is_not_an_element_separator() {
    assert_eq!(
        fwd("10.0.0.1", &["for=203.0.113.7;host=\"a,b\""]),
        found("203.0.113.7", How::Header)
    );
}
