use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

#[test]
fn content_types() {
    let ok = [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/json-rpc",
    ];
    for v in ok {
        assert!(
            is_json_content_type(Some(&HeaderValue::from_static(v))),
            "{v}"
        );
    }
    for v in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/jsonx",
        "",
    ] {
        assert!(
            !is_json_content_type(Some(&HeaderValue::from_static(v))),
            "{v}"
        );
    }
    assert!(!is_json_content_type(None));
}

/// The URL is parsed by the config crate (its tests cover the forms);
/// the client writes the request head from it once.
#[test]
fn the_request_head_comes_from_the_parsed_url() {
    let metrics = Arc::new(Metrics::new());
    let config = txgate_config::Config::default();
    let url = HttpUrl::parse_upstream("http://[::1]:9000/rpc/v1").unwrap();
    let u = Upstream::new(&url, &config.upstream, &config.admission, metrics).unwrap();
    assert!(
        String::from_utf8_lossy(&u.inner.head)
            .starts_with("POST /rpc/v1 HTTP/1.1\r\nhost: [::1]:9000\r\n")
    );
    assert!(HttpUrl::parse_upstream("http://h:notaport").is_err());
}

/// What the test node does with the n-th request it reads (from 1).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Then {
    /// Answers, and keeps the connection.
    Answer,
    /// Answers, then closes the connection (a node's idle close, early).
    AnswerAndClose,
    /// Reads it whole and closes without a byte of answer.
    Vanish,
}

/// A node on loopback that reads requests one after another, on one
/// connection after another, and does with the n-th what `script(n)`
/// says; the count of requests it read whole.
async fn node(script: fn(usize) -> Then) -> (HttpUrl, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url =
        HttpUrl::parse_upstream(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut buf = Vec::new();
            'requests: loop {
                // One request: its head, then its body.
                let (head_end, length) = loop {
                    let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length: usize = text
                            .split("\r\n")
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        break (end + 4, length);
                    }
                    let mut chunk = [0u8; 4096];
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => break 'requests,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                };
                while buf.len() < head_end + length {
                    let mut chunk = [0u8; 4096];
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => break 'requests,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                buf.drain(..head_end + length);
                let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 36\r\n\r\n{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{n:2}}}"
                );
                match script(n) {
                    Then::Answer => {
                        conn.write_all(answer.as_bytes()).await.unwrap();
                    }
                    Then::AnswerAndClose => {
                        conn.write_all(answer.as_bytes()).await.unwrap();
                        break;
                    }
                    Then::Vanish => break,
                }
            }
        }
    });
    (url, seen)
}

fn client(url: &HttpUrl) -> Upstream {
    let config = txgate_config::Config::default();
    Upstream::new(
        url,
        &config.upstream,
        &config.admission,
        Arc::new(Metrics::new()),
    )
    .unwrap()
}

const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[]}"#;

/// A request written whole on a pooled connection that then closed with
/// no answer may have been taken by the node: a submission (no resend)
/// fails, written, and is not written again; a read is asked again on a
/// fresh connection.
#[tokio::test]
async fn a_submission_written_whole_is_never_written_again() {
    use std::sync::atomic::Ordering;
    let (url, seen) = node(|n| match n {
        2 | 4 => Then::Vanish,
        _ => Then::Answer,
    })
    .await;
    let up = client(&url);
    let body = Bytes::from_static(CALL);
    assert!(up.exchange(body.clone(), None, false).await.is_ok());
    // Second request, on the pooled connection: taken, then no answer.
    let failed = up.exchange(body.clone(), None, false).await.unwrap_err();
    assert_eq!(failed.failure, UpstreamFailure::Io);
    assert!(failed.written, "it reached the node whole");
    assert_eq!(seen.load(Ordering::SeqCst), 2, "written once, not twice");
    // A read: on a fresh connection (3), then on it again (4: no answer),
    // then once more on a fresh one (5).
    assert!(up.exchange(body.clone(), None, true).await.is_ok());
    let reply = up.exchange(body, None, true).await.unwrap();
    assert!(reply.body.ends_with(b" 5}"), "{:?}", reply.body);
    assert_eq!(seen.load(Ordering::SeqCst), 5);
}

/// A pooled connection the node has already closed (its idle timeout) is
/// not used for a submission: the submission goes on a fresh one and is
/// answered, where writing it on the closed one would have failed it.
#[tokio::test]
async fn a_submission_skips_a_pooled_connection_the_node_closed() {
    use std::sync::atomic::Ordering;
    let (url, seen) = node(|n| match n {
        1 => Then::AnswerAndClose,
        _ => Then::Answer,
    })
    .await;
    let up = client(&url);
    let body = Bytes::from_static(CALL);
    assert!(up.exchange(body.clone(), None, false).await.is_ok());
    // The node's FIN reaches the poller while the connection idles.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reply = up.exchange(body, None, false).await.unwrap();
    assert!(reply.body.ends_with(b" 2}"), "{:?}", reply.body);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}
