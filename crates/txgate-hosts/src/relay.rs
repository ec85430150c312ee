//! A TCP relay that holds every byte for a fixed time in each direction:
//! latency between hosts on kernels without netem.
//!
//! Each accepted connection gets its own connection to the target and two
//! pumps, one a direction. A pump's reader stamps each chunk it reads with
//! the moment it is due (read time plus the delay) and hands it to the
//! pump's writer, which sleeps until then and writes it: the delay holds
//! for every byte whatever the rate, and bytes keep their order. An end of
//! stream travels the same way (the far side's write half is shut when it
//! is due), and at most a few chunks wait in between, so a sender still
//! feels the receiver's backpressure. Threads, not a runtime: the relay runs beside whatever runtime
//! its user has, and its connections are few (a fleet's links to Redis).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A delaying TCP relay from its listening address to one target; stopped
/// (every connection through it closed) on drop.
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Listens on `listen` (port 0: any free one) and relays each
    /// connection to `target`, every byte held `one_way` in each direction.
    pub fn start(listen: SocketAddr, target: SocketAddr, one_way: Duration) -> io::Result<Relay> {
        let listener = TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (stop, open) = (stop.clone(), open.clone());
            std::thread::Builder::new()
                .name("relay-accept".into())
                .spawn(move || accept_loop(&listener, target, one_way, &stop, &open))?
        };
        Ok(Relay {
            addr,
            stop,
            open,
            accept: Some(accept),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for stream in self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    target: SocketAddr,
    one_way: Duration,
    stop: &AtomicBool,
    open: &Arc<Mutex<Vec<TcpStream>>>,
) {
    while !stop.load(Ordering::Relaxed) {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(_) => {
                // Nothing to accept (or a transient error): look again soon.
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
        };
        // Connected on a thread of its own: a slow target holds neither
        // the next accept nor a stop.
        let open = open.clone();
        let _ = std::thread::Builder::new()
            .name("relay-connect".into())
            .spawn(move || relay(client, target, one_way, &open));
    }
}

/// Connects `client` to `target` through two delaying pumps.
fn relay(
    client: TcpStream,
    target: SocketAddr,
    one_way: Duration,
    open: &Mutex<Vec<TcpStream>>,
) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&target, Duration::from_secs(2))?;
    for stream in [&client, &server] {
        stream.set_nodelay(true)?;
    }
    {
        let mut open = open.lock().unwrap_or_else(PoisonError::into_inner);
        // Connections closed since are dropped from the list (a peer's
        // address is gone once both ends closed).
        open.retain(|s| s.peer_addr().is_ok());
        open.push(client.try_clone()?);
        open.push(server.try_clone()?);
    }
    pump(client.try_clone()?, server.try_clone()?, one_way)?;
    pump(server, client, one_way)
}

/// A chunk read, or the end of the stream, and when it is due at the far side.
type Due = (Instant, Option<Vec<u8>>);

/// Chunks read but not yet due, per direction: beyond them the reader
/// waits, and the sender feels TCP's backpressure as it would without the
/// relay (up to 1 MiB held).
const HELD_CHUNKS: usize = 16;

/// Bytes from `from` to `to`, each held `delay`.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) -> io::Result<()> {
    let (tx, rx) = mpsc::sync_channel::<Due>(HELD_CHUNKS);
    std::thread::Builder::new()
        .name("relay-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let read = from.read(&mut buf);
                let due = Instant::now() + delay;
                let chunk = match read {
                    Ok(0) | Err(_) => None,
                    Ok(n) => Some(buf[..n].to_vec()),
                };
                let end = chunk.is_none();
                if tx.send((due, chunk)).is_err() || end {
                    break;
                }
            }
        })?;
    std::thread::Builder::new()
        .name("relay-write".into())
        .spawn(move || {
            for (due, chunk) in rx {
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                match chunk {
                    Some(bytes) if to.write_all(&bytes).is_ok() => {}
                    _ => break,
                }
            }
            // The end of the stream (or a write that failed): the far
            // side's write half is shut, and the reader of this direction
            // ends once its side closes.
            let _ = to.shutdown(Shutdown::Write);
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// An echo server on loopback; its address.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut read = stream.try_clone().unwrap();
                    let mut write = stream;
                    let _ = io::copy(&mut read, &mut write);
                });
            }
        });
        addr
    }

    #[test]
    fn every_byte_is_held_the_delay_each_way_and_keeps_its_order() {
        let one_way = Duration::from_millis(40);
        let relay = Relay::start("127.0.0.1:0".parse().unwrap(), echo(), one_way).unwrap();
        let mut stream = TcpStream::connect(relay.addr()).unwrap();
        stream.set_nodelay(true).unwrap();
        for round in 0..3u8 {
            let sent = Instant::now();
            let message: Vec<u8> = (0..200u8).map(|b| b.wrapping_add(round)).collect();
            stream.write_all(&message).unwrap();
            let mut back = vec![0u8; message.len()];
            stream.read_exact(&mut back).unwrap();
            let took = sent.elapsed();
            assert_eq!(back, message);
            assert!(took >= 2 * one_way, "a round trip took {took:?}");
            assert!(took < 2 * one_way + Duration::from_millis(500), "{took:?}");
        }
    }

    #[test]
    fn an_end_of_stream_travels_through_and_drop_closes_what_is_open() {
        let relay = Relay::start(
            "127.0.0.1:0".parse().unwrap(),
            echo(),
            Duration::from_millis(5),
        )
        .unwrap();
        let mut stream = TcpStream::connect(relay.addr()).unwrap();
        stream.write_all(b"bye").unwrap();
        stream.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        stream.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"bye");

        let mut open = TcpStream::connect(relay.addr()).unwrap();
        open.write_all(b"x").unwrap();
        let mut one = [0u8; 1];
        open.read_exact(&mut one).unwrap();
        drop(relay);
        open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        assert!(matches!(open.read_to_end(&mut rest), Ok(0) | Err(_)));
    }
}
