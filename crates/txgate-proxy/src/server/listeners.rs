//! The listening sockets, bound before the proxy starts so that bind errors
//! are reported at once and tests can ask for port 0.

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpSocket;

/// Listening sockets, bound before the proxy starts so that bind errors are
/// reported at once and tests can ask for port 0.
#[derive(Debug)]
pub struct Listeners {
    pub(crate) rpc: Vec<std::net::TcpListener>,
    pub(crate) admin: std::net::TcpListener,
}

impl Listeners {
    /// Binds `workers` client sockets on one address with `SO_REUSEPORT`
    /// (the kernel spreads connections across them) and the admin socket.
    /// Must run inside a tokio runtime.
    pub fn bind(rpc: SocketAddr, admin: SocketAddr, workers: usize) -> io::Result<Listeners> {
        let mut sockets = Vec::with_capacity(workers);
        let mut addr = rpc;
        for _ in 0..workers.max(1) {
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            socket.set_reuseaddr(true)?;
            socket.set_reuseport(true)?;
            socket.set_nodelay(true)?;
            socket.bind(addr)?;
            let listener = socket.listen(4096)?;
            // Port 0: the other workers join the port the first one got.
            addr = listener.local_addr()?;
            sockets.push(listener.into_std()?);
        }
        let admin = std::net::TcpListener::bind(admin)?;
        admin.set_nonblocking(true)?;
        Ok(Listeners {
            rpc: sockets,
            admin,
        })
    }

    /// The client-facing address.
    pub fn rpc_addr(&self) -> io::Result<SocketAddr> {
        self.rpc
            .first()
            .ok_or_else(|| io::Error::other("no listener"))?
            .local_addr()
    }

    /// The admin address.
    pub fn admin_addr(&self) -> io::Result<SocketAddr> {
        self.admin.local_addr()
    }
}
