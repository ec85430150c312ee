//! WebSocket over a group of real nodes (issue 38, item 5): three anvils,
//! one the sequencer and two replicas, told apart by a marker balance
//! (1 wei on the first replica, 2 on the second, 3 on the sequencer).
//!
//! - a session reads from one replica, every read (on its own socket or
//!   the worker's lane); sessions spread over both replicas;
//! - a submission on the socket reaches only the sequencer, and so does a
//!   `newPendingTransactions` subscription (its notifications are the
//!   sequencer's transactions, which no replica ever sees), and its
//!   unsubscribe;
//! - a session whose replica is frozen (taken out by the probes) is closed
//!   with 1012 and a reason, once what it owes is answered; one whose
//!   replica is killed under a subscription, with 1011; the client that
//!   connects again reads from a replica still in, or from the sequencer
//!   when no replica is in;
//! - with no sequencer in, a submission on the socket is answered at once
//!   (-32603 `no healthy upstream`) and the socket stays open.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::node_group::{MARKER, by_hash, group, group_with};
use crate::support::{Eoa, fund, get, metric};
use crate::websocket::{Socket, call, connect};

/// The marker's balance read on `socket`: which node answered.
async fn marker(socket: &mut Socket, id: u64) -> u64 {
    let request = json!({"jsonrpc": "2.0", "id": id, "method": "eth_getBalance",
        "params": [format!("{MARKER}"), "latest"]});
    let answer = call(socket, &request, &mut Vec::new()).await;
    let hex = answer["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
}

/// Reads until the socket closes: its close code and reason.
async fn closed(socket: &mut Socket) -> (CloseCode, String) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, socket.next())
            .await
            .expect("closed within 15 s")
        {
            Some(Ok(Message::Close(Some(frame)))) => {
                return (frame.code, frame.reason.to_string());
            }
            Some(Ok(Message::Close(None))) => panic!("closed without a close frame"),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("closed without a close frame: {e}"),
            None => panic!("ended without a close frame"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reads_from_one_replica_and_submits_to_the_sequencer() {
    let g = group().await;
    // Each session reads from one replica, whatever the call travels on
    // (eth_getBalance may take the lane, eth_getBlockByNumber its own
    // socket); sessions spread over both.
    let mut homes = BTreeSet::new();
    let mut sockets = Vec::new();
    for _ in 0..8 {
        let mut socket = connect(&g.txgate.url).await;
        let home = marker(&mut socket, 1).await;
        for id in 2..6 {
            assert_eq!(marker(&mut socket, id).await, home, "a read left home");
        }
        let block = json!({"jsonrpc": "2.0", "id": 9, "method": "eth_getBlockByNumber",
            "params": ["latest", false]});
        let answer = call(&mut socket, &block, &mut Vec::new()).await;
        assert!(answer["result"]["number"].is_string(), "{answer}");
        assert!(home == 1 || home == 2, "read from the sequencer: {home}");
        homes.insert(home);
        sockets.push(socket);
    }
    assert_eq!(homes.len(), 2, "sessions did not spread: {homes:?}");
    // Each replica's sessions are counted by name; none is the sequencer's.
    let (_, _, body) = get(&format!("{}/metrics", g.txgate.admin_url)).await;
    let text = String::from_utf8(body.to_vec()).unwrap();
    let homed = |node: &str| {
        metric(
            &text,
            &format!(r#"txgate_ws_sessions_by_node{{node="{node}"}}"#),
        )
    };
    assert_eq!(homed("r1") + homed("r2"), 8.0, "{text}");
    assert!(homed("r1") >= 1.0 && homed("r2") >= 1.0, "{text}");
    assert_eq!(homed("seq"), 0.0, "{text}");

    // A submission on the socket reaches the sequencer only.
    let socket = &mut sockets[0];
    let sender = Eoa::new(0x3a);
    fund(&g.sequencer.url, &[sender.address]).await;
    let raw = sender.sign(0, Address::repeat_byte(0x11), &[], 1, 1_000_000_000);
    let submit = json!({"jsonrpc": "2.0", "id": "tx", "method": "eth_sendRawTransaction",
        "params": [raw]});
    let answer = call(socket, &submit, &mut Vec::new()).await;
    let hash = answer["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(by_hash(&g.sequencer, hash).await.is_object());
    for replica in &g.replicas {
        assert!(by_hash(replica, hash).await.is_null(), "a replica got it");
    }
    g.submission_logged(hash, "seq", "accepted").await;
    // One the node refuses (its nonce is spent) is logged with its error.
    let answer = call(socket, &submit, &mut Vec::new()).await;
    assert!(answer["error"].is_object(), "{answer}");
    g.submission_logged(hash, "seq", "node_error").await;

    // A newPendingTransactions subscription is the sequencer's: it sees
    // the next transaction sent to the sequencer, which no replica holds.
    let subscribe = json!({"jsonrpc": "2.0", "id": "sub", "method": "eth_subscribe",
        "params": ["newPendingTransactions"]});
    let mut seen = Vec::new();
    let answer = call(socket, &subscribe, &mut seen).await;
    let subscription = answer["result"].clone();
    assert!(subscription.is_string(), "{answer}");
    let raw = sender.sign(1, Address::repeat_byte(0x11), &[], 1, 1_000_000_000);
    let submit = json!({"jsonrpc": "2.0", "id": "tx2", "method": "eth_sendRawTransaction",
        "params": [raw]});
    let answer = call(socket, &submit, &mut seen).await;
    let hash = answer["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_string();
    let notified = |m: &Value| {
        m["method"] == "eth_subscription"
            && m["params"]["subscription"] == subscription
            && m["params"]["result"] == hash.as_str()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.iter().any(notified) {
        assert!(Instant::now() < deadline, "no notification: {seen:?}");
        seen.push(crate::websocket::next_json(socket).await);
    }
    // Its unsubscribe goes to the node that holds it (the replica would
    // answer false).
    let unsubscribe = json!({"jsonrpc": "2.0", "id": "unsub", "method": "eth_unsubscribe",
        "params": [subscription]});
    let answer = call(socket, &unsubscribe, &mut seen).await;
    assert_eq!(answer["result"], true, "{answer}");
    // Reads on the same socket still come from its replica.
    let home = marker(socket, 10).await;
    assert!(home == 1 || home == 2, "{home}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_replica_goes_out_or_dies_is_closed_saying_why() {
    let mut g = group_with("call_timeout_ms = 1500\nfail_after = 2").await;
    // Frozen: the probes take it out, and its sessions are closed with
    // 1012 (reconnect) once they owe nothing.
    let mut socket = connect(&g.txgate.url).await;
    let home = marker(&mut socket, 1).await;
    let (frozen, other) = match home {
        1 => (0, 1),
        _ => (1, 0),
    };
    let subscribe = json!({"jsonrpc": "2.0", "id": "sub", "method": "eth_subscribe",
        "params": ["newHeads"]});
    let answer = call(&mut socket, &subscribe, &mut Vec::new()).await;
    assert!(answer["result"].is_string(), "{answer}");
    g.replicas[frozen].proc.signal(libc::SIGSTOP);
    // (Left frozen: back in, it could be chosen again below.)
    let (code, reason) = closed(&mut socket).await;
    assert_eq!(code, CloseCode::Restart, "{reason}");
    assert!(reason.contains("out of service"), "{reason}");
    g.wait_in(if frozen == 0 { "r1" } else { "r2" }, false)
        .await;

    // Connecting again reads from the replica still in.
    let mut socket = connect(&g.txgate.url).await;
    let home = marker(&mut socket, 2).await;
    assert_eq!(home, other as u64 + 1, "home is the frozen replica");
    let answer = call(&mut socket, &subscribe, &mut Vec::new()).await;
    assert!(answer["result"].is_string(), "{answer}");

    // Killed under a subscription: its socket fails, the session closes
    // with 1011 and says so.
    g.replicas[other].proc.kill();
    let (code, reason) = closed(&mut socket).await;
    assert_eq!(code, CloseCode::Error, "{reason}");
    assert!(reason.contains("upstream"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_sequencer_a_submission_is_answered_at_once_and_the_socket_stays() {
    let mut g = group().await;
    let mut socket = connect(&g.txgate.url).await;
    let home = marker(&mut socket, 1).await;
    g.sequencer.proc.kill();
    g.wait_in("seq", false).await;
    let sender = Eoa::new(0x3b);
    let raw = sender.sign(0, Address::repeat_byte(0x11), &[], 1, 1_000_000_000);
    let submit = json!({"jsonrpc": "2.0", "id": "tx", "method": "eth_sendRawTransaction",
        "params": [raw]});
    let started = Instant::now();
    let answer = call(&mut socket, &submit, &mut Vec::new()).await;
    assert!(started.elapsed() < Duration::from_secs(2), "not at once");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(
        answer["error"]["message"], "no healthy upstream",
        "{answer}"
    );
    // The socket is still there, reading from its replica.
    assert_eq!(marker(&mut socket, 2).await, home);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_replica_in_a_new_session_reads_from_the_sequencer() {
    let mut g = group().await;
    let mut socket = connect(&g.txgate.url).await;
    assert!(matches!(marker(&mut socket, 1).await, 1 | 2));
    for replica in &mut g.replicas {
        replica.proc.kill();
    }
    g.wait_in("r1", false).await;
    g.wait_in("r2", false).await;
    // Its replica gone, the old session closes; a new one reads from the
    // sequencer, as an HTTP read falls back to it.
    let (code, reason) = closed(&mut socket).await;
    assert!(
        code == CloseCode::Error || code == CloseCode::Restart,
        "{code:?} {reason}"
    );
    let mut socket = connect(&g.txgate.url).await;
    assert_eq!(marker(&mut socket, 2).await, 3);
}
