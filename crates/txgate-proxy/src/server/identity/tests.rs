//! Client identity over real loopback sockets: clients connect from
//! 127.0.0.2 and 127.0.0.3, the balancer's address in each test.

use std::net::SocketAddr;

use http::HeaderMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};

use super::*;
use crate::metrics::Metrics;

const HTTP: &[u8] = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}";

fn edge(trusted: &[&str], mode: ProxyProtocol, header: ForwardedHeader) -> (Edge, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let server = ServerConfig {
        trusted_proxies: trusted.iter().map(|s| s.to_string()).collect(),
        proxy_protocol: mode,
        forwarded_header: header,
        header_read_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    };
    server.validate().unwrap();
    let trusted = server.trusted_proxies().unwrap();
    (Edge::new(&server, trusted, metrics.clone()), metrics)
}

fn v2_header(source: [u8; 4], port: u16) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([0x21, 0x11, 0, 12]);
    h.extend(source);
    h.extend([127, 0, 0, 1]);
    h.extend(port.to_be_bytes());
    h.extend(8545u16.to_be_bytes());
    h
}

/// Connects from `from` and sends `chunks` with a pause between them (each
/// its own TCP segment), then reads until the server closes.
async fn client(
    to: SocketAddr,
    from: &str,
    chunks: Vec<Vec<u8>>,
) -> tokio::task::JoinHandle<Vec<u8>> {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.set_nodelay(true).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    tokio::spawn(async move {
        for chunk in chunks {
            if stream.write_all(&chunk).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut got)).await;
        got
    })
}

/// Opens one connection sent as `chunks` from `from` through `edge`; the
/// bytes HTTP would read after the header, if the connection is kept.
async fn open(edge: &Edge, from: &str, chunks: Vec<Vec<u8>>) -> Option<(Connection, Vec<u8>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let writer = client(listener.local_addr().unwrap(), from, chunks).await;
    let (stream, peer) = listener.accept().await.unwrap();
    let opened = edge.open(stream, peer).await;
    let result = match opened {
        Some((mut io, connection)) => {
            let mut rest = vec![0; HTTP.len()];
            let mut n = 0;
            while n < HTTP.len() {
                match tokio::time::timeout(Duration::from_secs(2), io.read(&mut rest[n..])).await {
                    Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                    Ok(Ok(k)) => n += k,
                }
            }
            rest.truncate(n);
            Some((connection, rest))
        }
        None => None,
    };
    writer.abort();
    result
}

fn bytes_each(data: &[u8]) -> Vec<Vec<u8>> {
    data.iter().map(|b| vec![*b]).collect()
}

fn count(metrics: &Metrics, series: &str) -> u64 {
    let text = String::from_utf8(metrics.render()).unwrap();
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |v| v.parse::<f64>().unwrap() as u64)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn a_v2_header_split_byte_by_byte_names_the_client_and_http_follows_untouched() {
    let (edge, metrics) = edge(&["127.0.0.2"], ProxyProtocol::V2, ForwardedHeader::None);
    let mut data = v2_header([203, 0, 113, 7], 4711);
    data.extend(HTTP);
    let (connection, rest) = open(&edge, "127.0.0.2", bytes_each(&data)).await.unwrap();
    assert_eq!(connection.source, ip("203.0.113.7"));
    assert_eq!(connection.peer, ip("127.0.0.2"));
    assert_eq!(rest, HTTP);
    assert_eq!(
        count(&metrics, "txgate_proxy_protocol_total{result=\"v2\"}"),
        1
    );
    let client = edge.client(connection, &HeaderMap::new());
    assert_eq!(
        client,
        Client {
            ip: ip("203.0.113.7"),
            peer: ip("127.0.0.2")
        }
    );
}

#[tokio::test]
async fn a_v1_header_in_one_segment_with_the_request() {
    let (edge, metrics) = edge(&["127.0.0.0/8"], ProxyProtocol::V1, ForwardedHeader::None);
    let mut data = b"PROXY TCP4 198.51.100.4 127.0.0.1 5555 8545\r\n".to_vec();
    data.extend(HTTP);
    let (connection, rest) = open(&edge, "127.0.0.2", vec![data]).await.unwrap();
    assert_eq!(connection.source, ip("198.51.100.4"));
    assert_eq!(rest, HTTP);
    assert_eq!(
        count(&metrics, "txgate_proxy_protocol_total{result=\"v1\"}"),
        1
    );
}

#[tokio::test]
async fn a_required_header_refuses_untrusted_missing_malformed_late_and_wrong_version() {
    let (edge, metrics) = edge(&["127.0.0.2"], ProxyProtocol::V2, ForwardedHeader::None);
    // An untrusted peer, even with a valid header.
    let mut data = v2_header([203, 0, 113, 7], 4711);
    data.extend(HTTP);
    assert!(open(&edge, "127.0.0.3", vec![data]).await.is_none());
    assert_eq!(
        count(
            &metrics,
            "txgate_proxy_protocol_total{result=\"untrusted\"}"
        ),
        1
    );
    // Plain HTTP from the balancer.
    assert!(
        open(&edge, "127.0.0.2", vec![HTTP.to_vec()])
            .await
            .is_none()
    );
    assert_eq!(
        count(&metrics, "txgate_proxy_protocol_total{result=\"missing\"}"),
        1
    );
    // Version 3.
    let mut bad = v2_header([203, 0, 113, 7], 4711);
    bad[12] = 0x31;
    assert!(open(&edge, "127.0.0.2", vec![bad]).await.is_none());
    assert_eq!(
        count(
            &metrics,
            "txgate_proxy_protocol_total{result=\"invalid_v2\"}"
        ),
        1
    );
    // Half a header, then nothing: the header-read timeout (300 ms).
    let half = v2_header([203, 0, 113, 7], 4711)[..20].to_vec();
    assert!(open(&edge, "127.0.0.2", vec![half]).await.is_none());
    assert_eq!(
        count(&metrics, "txgate_proxy_protocol_total{result=\"timeout\"}"),
        1
    );
    // A v1 header on a v2 listener.
    let v1 = b"PROXY TCP4 198.51.100.4 127.0.0.1 5555 8545\r\n".to_vec();
    assert!(open(&edge, "127.0.0.2", vec![v1]).await.is_none());
    assert_eq!(
        count(
            &metrics,
            "txgate_proxy_protocol_total{result=\"wrong_version\"}"
        ),
        1
    );
}

#[tokio::test]
async fn a_refused_connection_is_closed_not_left_hanging() {
    let (edge, _) = edge(&["127.0.0.2"], ProxyProtocol::V2, ForwardedHeader::None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let reader = client(
        listener.local_addr().unwrap(),
        "127.0.0.2",
        vec![HTTP.to_vec()],
    )
    .await;
    let (stream, peer) = listener.accept().await.unwrap();
    assert!(edge.open(stream, peer).await.is_none());
    // The client reads end-of-stream well before its 5 s limit.
    let started = std::time::Instant::now();
    let got = reader.await.unwrap();
    assert!(got.is_empty());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn optional_takes_a_header_or_plain_http_and_never_reads_an_untrusted_header() {
    let (edge, metrics) = edge(
        &["127.0.0.2"],
        ProxyProtocol::Optional,
        ForwardedHeader::None,
    );
    let (connection, rest) = open(&edge, "127.0.0.2", bytes_each(HTTP)).await.unwrap();
    assert_eq!(
        (connection.source, rest.as_slice()),
        (ip("127.0.0.2"), HTTP)
    );
    assert_eq!(
        count(&metrics, "txgate_proxy_protocol_total{result=\"absent\"}"),
        1
    );

    let mut data = v2_header([203, 0, 113, 7], 4711);
    data.extend(HTTP);
    let (connection, _) = open(&edge, "127.0.0.2", vec![data.clone()]).await.unwrap();
    assert_eq!(connection.source, ip("203.0.113.7"));
    // From an untrusted peer the header is not read: HTTP sees it (and
    // will answer 400), the client is the peer.
    let (connection, rest) = open(&edge, "127.0.0.3", vec![data.clone()]).await.unwrap();
    assert_eq!(connection.source, ip("127.0.0.3"));
    assert_eq!(rest, data[..HTTP.len()]);
}

#[tokio::test]
async fn a_local_header_leaves_the_balancer_as_the_client() {
    let (edge, metrics) = edge(&["127.0.0.2"], ProxyProtocol::V2, ForwardedHeader::None);
    let mut data = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00".to_vec();
    data.extend(HTTP);
    let (connection, rest) = open(&edge, "127.0.0.2", vec![data]).await.unwrap();
    assert_eq!(connection.source, ip("127.0.0.2"));
    assert_eq!(rest, HTTP);
    assert_eq!(
        count(&metrics, "txgate_proxy_protocol_total{result=\"local\"}"),
        1
    );
}

fn headers(name: &str, values: &[&str]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for v in values {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    map
}

#[tokio::test]
async fn forwarding_headers_are_read_from_trusted_peers_only() {
    let (edge, metrics) = edge(
        &["127.0.0.2"],
        ProxyProtocol::Off,
        ForwardedHeader::XForwardedFor,
    );
    let trusted = open(&edge, "127.0.0.2", vec![HTTP.to_vec()])
        .await
        .unwrap()
        .0;
    let untrusted = open(&edge, "127.0.0.3", vec![HTTP.to_vec()])
        .await
        .unwrap()
        .0;
    let forged = headers("x-forwarded-for", &["6.6.6.6, 203.0.113.7"]);
    assert_eq!(edge.client(trusted, &forged).ip, ip("203.0.113.7"));
    assert_eq!(edge.client(untrusted, &forged).ip, ip("127.0.0.3"));
    // The other header is not read: a client could forge it.
    let other = headers("forwarded", &["for=203.0.113.9"]);
    assert_eq!(edge.client(trusted, &other).ip, ip("127.0.0.2"));
    assert_eq!(
        count(
            &metrics,
            "txgate_client_identity_total{source=\"forwarded_header\"}"
        ),
        1
    );
    assert_eq!(
        count(&metrics, "txgate_client_identity_total{source=\"peer\"}"),
        2
    );

    let (edge, _) = self::edge(
        &["127.0.0.2"],
        ProxyProtocol::Off,
        ForwardedHeader::Forwarded,
    );
    let trusted = open(&edge, "127.0.0.2", vec![HTTP.to_vec()])
        .await
        .unwrap()
        .0;
    assert_eq!(edge.client(trusted, &other).ip, ip("203.0.113.9"));
    assert_eq!(edge.client(trusted, &forged).ip, ip("127.0.0.2"));
}

#[tokio::test]
async fn a_proxy_header_source_that_is_itself_trusted_hands_over_to_the_forwarding_header() {
    // A CDN (10.0.0.0/8, trusted) in front of the balancer (127.0.0.2).
    let (edge, _) = edge(
        &["127.0.0.2", "10.0.0.0/8"],
        ProxyProtocol::V2,
        ForwardedHeader::XForwardedFor,
    );
    let mut data = v2_header([10, 1, 2, 3], 4711);
    data.extend(HTTP);
    let (cdn, _) = open(&edge, "127.0.0.2", vec![data]).await.unwrap();
    let xff = headers("x-forwarded-for", &["6.6.6.6, 203.0.113.7"]);
    assert_eq!(edge.client(cdn, &xff).ip, ip("203.0.113.7"));
    // A real client named by the header: its own headers are not read.
    let mut data = v2_header([198, 51, 100, 4], 4711);
    data.extend(HTTP);
    let (direct, _) = open(&edge, "127.0.0.2", vec![data]).await.unwrap();
    assert_eq!(edge.client(direct, &xff).ip, ip("198.51.100.4"));
}

/// The first bytes are awaited within the header timeout, the PROXY
/// header's time included (one deadline for both): silence after the
/// header, or half the h2c preface and then silence, closes the
/// connection (counted); a request sent a byte at a time is recognised
/// and handed on whole.
///
/// On tokio's paused clock, so that the deadline is measured without the
/// machine's stalls: the clock jumps to the next timer only when every
/// task waits, after the loopback bytes already written have been read
/// (the client's 5 ms pauses are timers too, so the deadline cannot pass
/// while it is still sending).
#[tokio::test(start_paused = true)]
async fn first_bytes_are_awaited_within_the_one_header_deadline() {
    let (edge, metrics) = edge(&["127.0.0.2"], ProxyProtocol::V2, ForwardedHeader::None);
    let header = v2_header([203, 0, 113, 7], 4000);
    let started = tokio::time::Instant::now();
    assert!(
        open(&edge, "127.0.0.2", vec![header.clone()])
            .await
            .is_none()
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_millis(550),
        "{elapsed:?} for one 300 ms deadline"
    );
    let half_preface = vec![header.clone(), b"PRI * HTTP/2.0\r\n".to_vec()];
    assert!(open(&edge, "127.0.0.2", half_preface).await.is_none());
    assert_eq!(count(&metrics, "txgate_connections_silent_closed_total"), 2);
    let mut trickle = vec![header];
    trickle.extend(bytes_each(HTTP));
    let (_, rest) = open(&edge, "127.0.0.2", trickle).await.expect("kept");
    assert_eq!(rest, HTTP);
}
