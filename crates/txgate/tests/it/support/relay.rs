//! A TCP relay in front of a node (its WebSocket endpoint, for the
//! lanes' tests): each connection can be stalled, watched and cut.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A TCP relay in front of the node whose connections the test can stall
/// (the node's bytes held back), watch (bytes sent to the node) and cut,
/// one by one, in accept order.
pub(crate) struct Relay {
    pub(crate) url: String,
    conns: std::sync::Arc<std::sync::Mutex<Vec<RelayConn>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
pub(crate) struct RelayConn {
    pub(crate) stall: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Bytes relayed to the node.
    pub(crate) up: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The last bytes relayed to the node.
    pub(crate) tail: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// The connection is over (either side ended it, or the test cut it).
    pub(crate) ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(crate) cut: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl Relay {
    pub(crate) async fn start(node: &str) -> Relay {
        let node = node.trim_start_matches("http://").to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let list = conns.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(&node).await else {
                    continue;
                };
                let conn = RelayConn {
                    stall: Default::default(),
                    up: Default::default(),
                    tail: Default::default(),
                    ended: Default::default(),
                    cut: std::sync::Arc::new(tokio::sync::watch::channel(false).0),
                };
                list.lock().unwrap().push(conn.clone());
                tokio::spawn(relay_pair(client, upstream, conn));
            }
        });
        Relay { url, conns, task }
    }

    pub(crate) fn conn(&self, n: usize) -> RelayConn {
        self.conns.lock().unwrap()[n].clone()
    }

    pub(crate) fn count(&self) -> usize {
        self.conns.lock().unwrap().len()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
        for conn in self.conns.lock().unwrap().iter() {
            conn.cut.send_replace(true);
        }
    }
}

async fn relay_pair(client: TcpStream, upstream: TcpStream, conn: RelayConn) {
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    let (client_read, client_write) = client.into_split();
    let (node_read, node_write) = upstream.into_split();
    let never = AtomicBool::new(false);
    let uncounted = AtomicUsize::new(0);
    let untold = std::sync::Mutex::new(Vec::new());
    let mut cut = conn.cut.subscribe();
    tokio::select! {
        () = pump(client_read, node_write, &never, &conn.up, &conn.tail) => {}
        () = pump(node_read, client_write, &conn.stall, &uncounted, &untold) => {}
        _ = cut.wait_for(|cut| *cut) => {}
    }
    conn.ended.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Copies `from` to `to` until either ends, holding each read back while
/// `stall` is set, counting what was written in `count` and keeping its
/// last 64 bytes in `tail`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stall: &std::sync::atomic::AtomicBool,
    count: &std::sync::atomic::AtomicUsize,
    tail: &std::sync::Mutex<Vec<u8>>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while stall.load(SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        count.fetch_add(n, SeqCst);
        let mut tail = tail.lock().unwrap();
        tail.extend_from_slice(&buf[..n]);
        let excess = tail.len().saturating_sub(64);
        tail.drain(..excess);
    }
}
