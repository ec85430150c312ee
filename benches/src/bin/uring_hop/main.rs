//! io_uring measured, not argued (issue 41, item 2): the pass-through hop
//! of HTTP/1.1 keep-alive JSON-RPC calls, written twice with the same
//! logic, once on epoll (tokio, as txgate's workers are) and once on
//! io_uring, so that passthrough.py can set them beside txgate and nginx in
//! the same rounds and read what io_uring alone changes in the CPU per call.
//!
//! Both hops are the same minimal proxy: each client connection gets one
//! kept-alive connection to the node (made when the client connects); a
//! request is forwarded once it is complete (headers and `Content-Length`
//! body), byte for byte, and so is the node's answer. No header is
//! rewritten, nothing is parsed beyond the framing, no screening: the
//! floor under any proxy's per-call work on each I/O model.
//!
//! * `--io epoll`: one current-thread tokio runtime per thread, each with a
//!   `SO_REUSEPORT` listener; a connection's task reads, writes, reads and
//!   writes (`recvfrom`/`writev` through epoll readiness).
//! * `--io uring`: one ring per thread (no SQPOLL: it would spend one of two
//!   cores), each with a `SO_REUSEPORT` listener; multishot accept,
//!   multishot receive into a ring of provided buffers, and every send of a
//!   loop turn submitted with the next wait, one `io_uring_enter` per turn.
//! * `--io uring-defer`: the same with `IORING_SETUP_DEFER_TASKRUN`.
//!
//! This is a prototype kept as a bench, not a part of txgate: PERFORMANCE.md
//! ("io_uring, measured") holds the decision and its figures.
//!
//! `target/release/uring_hop --io uring --listen 127.0.0.1:P --upstream
//! 127.0.0.1:Q [--threads 2]`. Loopback only; it runs until stopped.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use clap::{Parser, ValueEnum};

mod epoll;
mod framing;
#[allow(unsafe_code)]
mod uring;

#[derive(Clone, Copy, ValueEnum)]
enum Io {
    Epoll,
    Uring,
    /// io_uring with `IORING_SETUP_DEFER_TASKRUN`: completions are run
    /// only when the thread waits for them, not by interrupting it.
    UringDefer,
}

/// A minimal HTTP/1.1 pass-through hop on epoll or io_uring.
#[derive(Parser)]
struct Args {
    /// The I/O model.
    #[arg(long, value_enum)]
    io: Io,
    /// Where clients connect.
    #[arg(long)]
    listen: SocketAddr,
    /// The node.
    #[arg(long)]
    upstream: SocketAddr,
    /// Threads, each with a listener of its own (default: the CPUs allowed).
    #[arg(long)]
    threads: Option<usize>,
}

/// A listener that shares its port with the other threads' listeners.
fn listener(addr: SocketAddr) -> std::net::TcpListener {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None).unwrap();
    socket.set_reuse_address(true).unwrap();
    socket.set_reuse_port(true).unwrap();
    socket.bind(&addr.into()).unwrap();
    socket.listen(1024).unwrap();
    socket.into()
}

fn main() {
    let a = Args::parse();
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let listener = listener(a.listen);
            let (io, upstream) = (a.io, a.upstream);
            std::thread::spawn(move || match io {
                Io::Epoll => epoll::serve(listener, upstream),
                Io::Uring => uring::serve(listener, upstream, false),
                Io::UringDefer => uring::serve(listener, upstream, true),
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
