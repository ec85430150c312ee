use txgate_config::{Config, Settings};

use super::*;

/// Two sequencers known to op-conductor as `seq-a` and `seq-b`, a
/// replica between them, following the conductors at `urls` (a TOML
/// value).
fn settings(urls: &str) -> Settings {
    let text = format!(
        r#"
[upstream]
conductor_url = {urls}

[[upstream.nodes]]
name = "a"
url = "http://127.0.0.1:1"
role = "sequencer"
conductor_id = "seq-a"

[[upstream.nodes]]
name = "r"
url = "http://127.0.0.1:2"
role = "replica"

[[upstream.nodes]]
name = "b"
url = "http://127.0.0.1:3"
role = "sequencer"
conductor_id = "seq-b"
"#
    );
    Settings::new(Config::from_toml(&text).unwrap()).unwrap()
}

#[test]
fn a_leaders_id_maps_to_its_sequencers_index() {
    let ids = Ids::new(settings("\"http://conductor:8547\"").nodes());
    assert_eq!(ids.index("seq-a"), Some(0));
    assert_eq!(ids.index("seq-b"), Some(2));
    // Raft IDs are compared as written; no node is `r`'s.
    for other in ["SEQ-A", "seq-a ", "", "r", "N/A (Leader overridden)"] {
        assert_eq!(ids.index(other), None, "{other:?}");
    }
    assert_eq!(Ids::default().index("seq-a"), None);
}

#[test]
fn the_answer_is_read_as_op_conductor_sends_it() {
    // As op-conductor writes it (go-ethereum's encoder ends it with a
    // newline).
    let leader = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"id\":\"seq-b\",\"addr\":\"10.0.0.2:50050\",\"suffrage\":0}}\n";
    assert_eq!(read(leader).as_deref(), Some("seq-b"));
    // An election under way: raft knows no leader, and says so with
    // empty strings.
    let none = br#"{"jsonrpc":"2.0","id":1,"result":{"id":"","addr":"","suffrage":0}}"#;
    assert_eq!(read(none).as_deref(), Some(""));
    // A leader overridden by hand.
    let overridden = br#"{"jsonrpc":"2.0","id":1,"result":{"id":"N/A (Leader overridden)","addr":"N/A","suffrage":0}}"#;
    assert_eq!(read(overridden).as_deref(), Some("N/A (Leader overridden)"));
    for bad in [
        &br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method conductor_leaderWithID does not exist/is not available"}}"#[..],
        br#"{"jsonrpc":"2.0","id":1,"result":null}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":true}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"addr":"10.0.0.2:50050"}}"#,
        br#"{"jsonrpc":"2.0","id":1,"result":{"id":7}}"#,
        br#"[{"jsonrpc":"2.0","id":1,"result":{"id":"seq-a"}}]"#,
        b"<html>bad gateway</html>",
        b"",
    ] {
        assert_eq!(read(bad), None, "{}", String::from_utf8_lossy(bad));
    }
}

/// A conductor on loopback that answers every call with `answer` (read
/// on each call), closing the connection after it.
async fn conductor(answer: Arc<Mutex<String>>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = answer.lock().unwrap().clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut chunk = [0u8; 1024];
                // The whole request: its head, then ASK as the body.
                while !request.ends_with(ASK) {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&chunk[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    url
}

fn leads(id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"id":"{id}","addr":"h:50050","suffrage":0}}}}"#)
}

/// The group of `settings` and its conductor, as the proxy builds them.
fn build(settings: &Settings) -> (GroupState, Option<Conductor>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let state = GroupState::new(settings.nodes(), &settings.upstream, &[], metrics.clone());
    let conductor = Conductor::new(
        settings.nodes(),
        &settings.upstream,
        &settings.admission,
        &state,
        metrics.clone(),
    )
    .unwrap();
    (state, conductor, metrics)
}

#[tokio::test]
async fn the_last_known_leader_stays_until_another_is_named() {
    let answer = Arc::new(Mutex::new(leads("")));
    let live = conductor(answer.clone()).await;
    // Nothing listens on the first URL: refused, then the second asked.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (state, conductor, metrics) = build(&settings(&format!(r#"["{dead}", "{live}"]"#)));
    let conductor = conductor.unwrap();
    let leader = || state.snapshot().leader();
    let gauge = |node: &str| metrics.nodes.leader(node).get();
    let round = || conductor.follow(&state, Duration::from_secs(2));

    // None named yet: no node takes submissions.
    assert_eq!(leader(), Some(NONE_YET));
    round().await;
    assert_eq!(leader(), Some(NONE_YET));
    assert_eq!((gauge("a"), gauge("b")), (0, 0));

    *answer.lock().unwrap() = leads("seq-b");
    round().await;
    assert_eq!(leader(), Some(2));
    assert_eq!((gauge("a"), gauge("b")), (0, 1));
    // The conductor that answered is asked first from now on.
    assert_eq!(conductor.lock().first, 1);

    // An election, an unknown ID, an error object, garbage: b stays.
    for said in [
        leads(""),
        leads("seq-c"),
        r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}}"#.to_string(),
        "not json".to_string(),
    ] {
        *answer.lock().unwrap() = said.clone();
        round().await;
        assert_eq!(leader(), Some(2), "{said}");
        assert_eq!((gauge("a"), gauge("b")), (0, 1), "{said}");
    }

    *answer.lock().unwrap() = leads("seq-a");
    round().await;
    assert_eq!(leader(), Some(0));
    assert_eq!((gauge("a"), gauge("b")), (1, 0));
    let text = String::from_utf8(metrics.render()).unwrap();
    for reason in ["call", "answer", "no_leader", "unknown_id"] {
        let series = format!("txgate_upstream_conductor_errors_total{{reason=\"{reason}\"}} ");
        assert!(text.contains(&series), "{reason}: {text}");
    }
}

#[tokio::test]
async fn no_conductor_configured_is_no_conductor() {
    let (state, conductor, _) = build(&Settings::new(Config::default()).unwrap());
    assert!(conductor.is_none());
    assert_eq!(state.snapshot().leader(), None);
}
