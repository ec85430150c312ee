//! The hop on epoll: tokio's current-thread runtime, one task per client.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::framing::take_whole;

pub(crate) fn serve(listener: std::net::TcpListener, upstream: SocketAddr) {
    listener.set_nonblocking(true).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = TcpListener::from_std(listener).unwrap();
        loop {
            // An accept error (out of descriptors, say) ends no thread.
            let Ok((client, _)) = listener.accept().await else {
                tokio::task::yield_now().await;
                continue;
            };
            tokio::task::spawn_local(async move {
                let _ = client.set_nodelay(true);
                let Ok(node) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = node.set_nodelay(true);
                relay(client, node).await;
            });
        }
    });
}

/// Whole requests to the node, whole answers back, until either side ends.
async fn relay(mut client: TcpStream, mut node: TcpStream) {
    let (mut req, mut resp, mut out) = (Vec::new(), Vec::new(), Vec::new());
    let mut chunk = vec![0u8; 4096];
    loop {
        // A whole request (or several, pipelined) from the client.
        let mut asked = 0;
        while asked == 0 {
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => req.extend_from_slice(&chunk[..n]),
            }
            let Some(n) = take_whole(&mut req, &mut out) else {
                return;
            };
            asked = n;
        }
        if node.write_all(&out).await.is_err() {
            return;
        }
        out.clear();
        // As many whole answers as requests sent.
        let mut answered = 0;
        while answered < asked {
            match node.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => resp.extend_from_slice(&chunk[..n]),
            }
            let Some(n) = take_whole(&mut resp, &mut out) else {
                return;
            };
            answered += n;
        }
        if client.write_all(&out).await.is_err() {
            return;
        }
        out.clear();
    }
}
