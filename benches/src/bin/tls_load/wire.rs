//! HTTP/1.1 by hand over TCP or TLS: the servers' answers read to their
//! end, nothing of a client library in what is measured.

use std::net::{IpAddr, SocketAddr};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};

/// The call every table makes.
pub(crate) const CHAIN_ID: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;

/// A TCP connection from `source` (a loopback address of its own).
pub(crate) async fn tcp(source: IpAddr, port: u16) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(source, 0)).unwrap();
    let stream = socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A POST of [`CHAIN_ID`] to `path`, the connection kept or closed after.
pub(crate) fn request(path: &str, keep: bool) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: {}\r\n\r\n{CHAIN_ID}",
        CHAIN_ID.len(),
        if keep { "keep-alive" } else { "close" }
    )
    .into_bytes()
}

/// Reads one HTTP/1.1 answer with a content-length (the servers here
/// always send one); returns its body length.
pub(crate) async fn read_answer<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> usize {
    buf.clear();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "answer: {head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .expect("content-length");
            while buf.len() < end + 4 + len {
                let n = stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "closed mid-answer");
                buf.extend_from_slice(&chunk[..n]);
            }
            return len;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the answer");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
