use super::*;

#[test]
fn submissions_are_never_resent() {
    for m in [
        "eth_sendRawTransaction",
        "eth_sendRawTransactionConditional",
        "eth_sendRawTransactionSync",
        "eth_sendBundle",
        "mev_sendBundle",
        "eth_cancelBundle",
    ] {
        assert!(is_submission(m), "{m}");
    }
    for m in [
        "eth_call",
        "eth_getBalance",
        "eth_blockNumber",
        "eth_callBundle",
    ] {
        assert!(!is_submission(m), "{m}");
    }
}

/// A node that accepts each connection and resets it at once: a write of
/// a large body fails on an open connection (as when a node refuses a
/// body over its own cap and closes while it is being written).
async fn resetting_node() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let _ = socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO));
            drop(conn);
        }
    });
    url
}

/// One call whose write fails on an open connection to each sequencer
/// does not take them both out: a reset counts like any broken connection
/// (five in a row), not like a node that cannot be reached. It used to
/// take each node out at once, so one client's oversized body emptied the
/// role.
#[tokio::test]
async fn a_write_failing_on_an_open_connection_takes_no_node_out() {
    use txgate_config::{Config, Settings};
    let (a, b) = (resetting_node().await, resetting_node().await);
    let text = format!(
        "[[upstream.nodes]]\nname = \"a\"\nurl = \"{a}\"\nrole = \"sequencer\"\n\
         [[upstream.nodes]]\nname = \"b\"\nurl = \"{b}\"\nrole = \"sequencer\"\n"
    );
    let settings = Settings::new(Config::from_toml(&text).unwrap()).unwrap();
    let config = settings.config();
    let metrics = Arc::new(Metrics::new());
    let state = Arc::new(GroupState::new(
        settings.nodes(),
        &config.upstream,
        &[],
        metrics.clone(),
    ));
    let ok = txgate_nodes::Probe::Ok {
        chain_id: 1,
        head: 10,
        syncing: false,
    };
    for _ in 0..config.upstream.recover_after.max(1) {
        state.probe(0, ok);
        state.probe(1, ok);
    }
    assert!(state.snapshot().is_in(0) && state.snapshot().is_in(1));
    let nodes = Nodes::new(
        settings.nodes(),
        &config.upstream,
        &config.admission,
        metrics,
        state.clone(),
    )
    .unwrap();
    // Larger than any socket buffer: the write cannot complete before the
    // reset arrives.
    let body = Bytes::from(vec![b' '; 16 << 20]);
    let answer = nodes
        .call(
            Role::Sequencer,
            false,
            false,
            body,
            Some(Duration::from_secs(10)),
        )
        .await;
    assert!(
        matches!(answer, Err(CallError::Upstream(UpstreamFailure::Io))),
        "the write's failure, not 'no healthy upstream': {answer:?}"
    );
    let snapshot = state.snapshot();
    assert!(
        snapshot.is_in(0) && snapshot.is_in(1),
        "a failed write took a node out: {:?}",
        state.states()
    );
}
