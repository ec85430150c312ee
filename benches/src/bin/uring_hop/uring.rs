//! The hop on io_uring: one ring per thread, multishot accept, multishot
//! receive into provided buffers, sends queued as they are produced and
//! submitted together with the loop's next wait.
//!
//! Every buffer the kernel reads into or writes from outlives its
//! operation: received bytes land in the thread's provided-buffer ring
//! (allocated once, freed never: the thread runs until the process ends),
//! and a send's bytes are a connection's `Vec` that is not touched until
//! that send completes; a connection's slot, with its sockets and buffers,
//! is freed only once no operation of its own is in flight.

use std::alloc::{Layout, alloc_zeroed};
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::{BufRingEntry, Fd};
use io_uring::{IoUring, cqueue, opcode, squeue};

use crate::framing::take_whole;

/// Provided buffers per thread, and the bytes of each.
const BUFFERS: u16 = 1024;
const BUFFER_BYTES: usize = 4096;
/// The buffer group every receive of a thread draws from.
const GROUP: u16 = 0;

// What an operation was: the low byte of its user data; the slot above.
const ACCEPT: u64 = 0;
const CLIENT_RECV: u64 = 1;
const NODE_RECV: u64 = 2;
const CLIENT_SEND: u64 = 3;
const NODE_SEND: u64 = 4;

fn token(kind: u64, slot: usize) -> u64 {
    kind | ((slot as u64) << 8)
}

/// One side of a connection: its socket, its received bytes not yet
/// whole, and the bytes it is sent (the one send in flight) and will be.
struct Side {
    socket: TcpStream,
    received: Vec<u8>,
    sending: Vec<u8>,
    sent: usize,
    in_flight: bool,
    queued: Vec<u8>,
    receiving: bool,
    /// Its peer sent a FIN.
    eof: bool,
    /// Shut for writing: the other side's FIN passed on.
    shut: bool,
}

impl Side {
    fn new(socket: TcpStream) -> Self {
        Self {
            socket,
            received: Vec::new(),
            sending: Vec::new(),
            sent: 0,
            in_flight: false,
            queued: Vec::new(),
            receiving: false,
            eof: false,
            shut: false,
        }
    }
    /// Nothing in flight and nothing left to send.
    fn idle(&self) -> bool {
        !self.in_flight && self.sent == self.sending.len() && self.queued.is_empty()
    }
    fn fd(&self) -> Fd {
        Fd(self.socket.as_raw_fd())
    }
}

struct Conn {
    client: Side,
    node: Side,
    closing: bool,
}

impl Conn {
    fn ops(&self) -> usize {
        [
            self.client.receiving,
            self.node.receiving,
            self.client.in_flight,
            self.node.in_flight,
        ]
        .iter()
        .filter(|b| **b)
        .count()
    }

    /// The side an operation of `kind` (a receive or a send) works on.
    fn side_mut(&mut self, kind: u64) -> &mut Side {
        if kind == CLIENT_RECV || kind == CLIENT_SEND {
            &mut self.client
        } else {
            &mut self.node
        }
    }
}

/// The thread's provided buffers: a ring of `BUFFERS` entries the kernel
/// takes from, and the memory they point at.
struct Provided {
    ring: *mut BufRingEntry,
    memory: *mut u8,
    tail: u16,
}

impl Provided {
    fn new(uring: &IoUring) -> io::Result<Self> {
        let ring_layout = Layout::from_size_align(BUFFERS as usize * 16, 4096).unwrap();
        let memory_layout = Layout::from_size_align(BUFFERS as usize * BUFFER_BYTES, 4096).unwrap();
        // SAFETY: both layouts have a non-zero size; the memory is never
        // freed, so the kernel's view of it stays valid for the thread.
        let (ring, memory) = unsafe {
            (
                alloc_zeroed(ring_layout).cast::<BufRingEntry>(),
                alloc_zeroed(memory_layout),
            )
        };
        assert!(!ring.is_null() && !memory.is_null(), "out of memory");
        // SAFETY: `ring` is page-aligned, `BUFFERS` entries long, zeroed,
        // and lives as long as the ring.
        unsafe {
            uring
                .submitter()
                .register_buf_ring_with_flags(ring as u64, BUFFERS, GROUP, 0)?;
        }
        let mut provided = Self {
            ring,
            memory,
            tail: 0,
        };
        for bid in 0..BUFFERS {
            provided.give_back(bid);
        }
        provided.publish();
        Ok(provided)
    }

    /// The bytes of buffer `bid`.
    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < BUFFERS && len <= BUFFER_BYTES);
        // SAFETY: `bid` names one of the `BUFFERS` buffers of
        // `BUFFER_BYTES` each; the kernel wrote `len` bytes into it and
        // hands it back to the thread until `give_back`.
        unsafe { std::slice::from_raw_parts(self.memory.add(bid as usize * BUFFER_BYTES), len) }
    }

    /// Buffer `bid` is the kernel's again (seen once `publish` runs).
    fn give_back(&mut self, bid: u16) {
        let slot = self.tail & (BUFFERS - 1);
        // SAFETY: `slot` < `BUFFERS`, inside the ring; the kernel reads
        // entries only up to the published tail, which does not cover it.
        let entry = unsafe { &mut *self.ring.add(slot as usize) };
        // SAFETY: as in `bytes`.
        entry.set_addr(unsafe { self.memory.add(bid as usize * BUFFER_BYTES) } as u64);
        entry.set_len(BUFFER_BYTES as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail is a u16 inside the ring's first entry, shared
        // with the kernel, which reads it atomically.
        let tail = unsafe { &*BufRingEntry::tail(self.ring).cast::<AtomicU16>() };
        tail.store(self.tail, Ordering::Release);
    }
}

/// The ring, its connections, and the pushes of one loop turn.
struct Hop {
    uring: IoUring,
    provided: Provided,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    upstream: SocketAddr,
}

impl Hop {
    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: every entry pushed names a socket its connection owns
            // and, for sends, a buffer its connection keeps unchanged
            // until the completion (see the module's note).
            if unsafe { self.uring.submission().push(&entry) }.is_ok() {
                return;
            }
            self.uring.submit().expect("io_uring_enter");
        }
    }

    fn arm_accept(&mut self, listener: Fd) {
        let entry = opcode::AcceptMulti::new(listener)
            .flags(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)
            .build()
            .user_data(token(ACCEPT, 0));
        self.push(entry);
    }

    fn arm_recv(&mut self, slot: usize, kind: u64) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let side = conn.side_mut(kind);
        side.receiving = true;
        let entry = opcode::RecvMulti::new(side.fd(), GROUP)
            .build()
            .user_data(token(kind, slot));
        self.push(entry);
    }

    /// Starts the next send of `slot`'s side when none is in flight.
    fn kick(&mut self, slot: usize, kind: u64) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let closing = conn.closing;
        let side = conn.side_mut(kind);
        if side.in_flight || closing {
            return;
        }
        if side.sent == side.sending.len() {
            if side.queued.is_empty() {
                return;
            }
            side.sending.clear();
            std::mem::swap(&mut side.sending, &mut side.queued);
            side.sent = 0;
        }
        side.in_flight = true;
        let rest = &side.sending[side.sent..];
        let entry = opcode::Send::new(side.fd(), rest.as_ptr(), rest.len() as u32)
            .build()
            .user_data(token(kind, slot));
        self.push(entry);
    }

    fn accepted(&mut self, fd: i32) {
        // SAFETY: the kernel made `fd` for this accept; nothing else owns it.
        let client = unsafe { TcpStream::from_raw_fd(fd) };
        let Ok(node) = TcpStream::connect(self.upstream) else {
            return;
        };
        let _ = client.set_nodelay(true);
        let _ = node.set_nodelay(true);
        let _ = node.set_nonblocking(true);
        let conn = Conn {
            client: Side::new(client),
            node: Side::new(node),
            closing: false,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.conns[slot] = Some(conn);
                slot
            }
            None => {
                self.conns.push(Some(conn));
                self.conns.len() - 1
            }
        };
        self.arm_recv(slot, CLIENT_RECV);
        self.arm_recv(slot, NODE_RECV);
    }

    /// Bytes in (or the end of) a receive on one side of `slot`.
    fn received(&mut self, slot: usize, kind: u64, res: i32, flags: u32) {
        let more = cqueue::more(flags);
        let mut ok = res > 0;
        if let Some(bid) = cqueue::buffer_select(flags) {
            let bytes_len = res.max(0) as usize;
            if let Some(conn) = self.conns[slot].as_mut() {
                let (from, to) = if kind == CLIENT_RECV {
                    (&mut conn.client, &mut conn.node)
                } else {
                    (&mut conn.node, &mut conn.client)
                };
                from.received
                    .extend_from_slice(self.provided.bytes(bid, bytes_len));
                ok &= take_whole(&mut from.received, &mut to.queued).is_some();
            }
            self.provided.give_back(bid);
        }
        let send = if kind == CLIENT_RECV {
            NODE_SEND
        } else {
            CLIENT_SEND
        };
        if ok {
            self.kick(slot, send);
        }
        if !more {
            let Some(conn) = self.conns[slot].as_mut() else {
                return;
            };
            let side = conn.side_mut(kind);
            side.receiving = false;
            if res == 0 {
                side.eof = true;
            } else if (ok || res == -libc::ENOBUFS) && !conn.closing {
                // Out of provided buffers, or a multishot the kernel ended
                // while the socket is still good: armed again.
                self.arm_recv(slot, kind);
                return;
            }
        }
        // An error, or bytes this hop refuses to frame: both sides end.
        if (res < 0 && res != -libc::ENOBUFS) || (res > 0 && !ok) {
            self.close(slot);
        }
        self.settle(slot);
    }

    fn sent(&mut self, slot: usize, kind: u64, res: i32) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        let side = conn.side_mut(kind);
        side.in_flight = false;
        if res <= 0 {
            self.close(slot);
            return;
        }
        side.sent += res as usize;
        self.kick(slot, kind);
        self.settle(slot);
    }

    /// A side that has ended (its peer's FIN) gets its peer's last bytes
    /// through: once what it sent is out, the other side is shut for
    /// writing (the FIN passed on); once both sides have ended and nothing
    /// is left to send, the connection closes.
    fn settle(&mut self, slot: usize) {
        let Some(conn) = self.conns[slot].as_mut() else {
            return;
        };
        if !conn.closing {
            let (client_ended, node_ended) = (conn.client.eof, conn.node.eof);
            for (ended, other) in [
                (client_ended, &mut conn.node),
                (node_ended, &mut conn.client),
            ] {
                if ended && other.idle() && !other.shut {
                    other.shut = true;
                    let _ = other.socket.shutdown(std::net::Shutdown::Write);
                }
            }
            let done = conn.client.eof && conn.node.eof && conn.client.idle() && conn.node.idle();
            if done {
                self.close(slot);
                return;
            }
        }
        self.release_if_done(slot);
    }

    /// Ends both sides: their receives end with 0, and the slot is freed
    /// once nothing of its own is in flight.
    fn close(&mut self, slot: usize) {
        if let Some(conn) = self.conns[slot].as_mut()
            && !conn.closing
        {
            conn.closing = true;
            let _ = conn.client.socket.shutdown(std::net::Shutdown::Both);
            let _ = conn.node.socket.shutdown(std::net::Shutdown::Both);
        }
        self.release_if_done(slot);
    }

    fn release_if_done(&mut self, slot: usize) {
        if matches!(&self.conns[slot], Some(c) if c.closing && c.ops() == 0) {
            self.conns[slot] = None;
            self.free.push(slot);
        }
    }
}

pub(crate) fn serve(listener: std::net::TcpListener, upstream: SocketAddr, defer: bool) {
    let mut builder = IoUring::builder();
    builder.setup_single_issuer();
    if defer {
        builder.setup_defer_taskrun();
    } else {
        builder.setup_coop_taskrun();
    }
    let uring = builder.build(4096).expect("io_uring_setup");
    let provided = Provided::new(&uring).expect("register the provided buffers");
    let listener_fd = Fd(listener.into_raw_fd());
    let mut hop = Hop {
        uring,
        provided,
        conns: Vec::new(),
        free: Vec::new(),
        upstream,
    };
    hop.arm_accept(listener_fd);
    let mut done: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
    loop {
        hop.provided.publish();
        match hop.uring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => panic!("io_uring_enter: {e}"),
        }
        done.extend(
            hop.uring
                .completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for (user_data, res, flags) in done.drain(..) {
            let (kind, slot) = (user_data & 0xff, (user_data >> 8) as usize);
            match kind {
                ACCEPT => {
                    if res >= 0 {
                        hop.accepted(res);
                    }
                    if !cqueue::more(flags) {
                        hop.arm_accept(listener_fd);
                    }
                }
                CLIENT_RECV | NODE_RECV => hop.received(slot, kind, res, flags),
                _ => hop.sent(slot, kind, res),
            }
        }
    }
}
