//! The socket under a request, for the responses that set their own
//! socket options.
//!
//! The server notes each connection's socket as it is accepted
//! ([`remember_socket`], plain TCP or TLS over it); a handler finds it
//! with `HttpRequest::conn_data::<ConnectionSocket>()`. A request that
//! came some other way (the tests' in-memory service) has none, and its
//! response goes out with the socket's defaults.
//!
//! An event stream over HTTP/1.1 bounds its socket's send buffer
//! ([`ConnectionSocket::limit_send_buffer`]): the kernel would otherwise
//! grow it up to `net.ipv4.tcp_wmem`'s maximum (4 MiB by default) for a
//! watcher that reads slowly, each stream's backlog a private copy in
//! kernel memory, where the feed's tail already holds it once for all.

use std::any::Any;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use actix_tls::accept::rustls_0_23::TlsStream;
use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;

/// The socket a connection came on. Valid while the connection lasts,
/// and so for as long as a handler of one of its requests runs.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionSocket(RawFd);

/// Notes a new connection's socket in its extensions (for
/// `HttpServer::on_connect`).
pub fn remember_socket(connection: &dyn Any, data: &mut Extensions) {
    let fd = if let Some(tcp) = connection.downcast_ref::<TcpStream>() {
        tcp.as_raw_fd()
    } else if let Some(tls) = connection.downcast_ref::<TlsStream<TcpStream>>() {
        tls.get_ref().0.as_raw_fd()
    } else {
        return;
    };
    data.insert(ConnectionSocket(fd));
}

impl ConnectionSocket {
    /// Sets the socket's send buffer to `bytes` (Linux keeps twice that,
    /// half of it for its own bookkeeping), which also stops the kernel
    /// growing it.
    ///
    /// # Errors
    ///
    /// The system's, if it refuses the option.
    pub fn limit_send_buffer(self, bytes: usize) -> io::Result<()> {
        let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        let length = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>())
            .unwrap_or_else(|_| unreachable!("an int's size fits a socklen_t"));
        // SAFETY: the descriptor is the connection's own socket, open
        // while the connection lasts (see `ConnectionSocket`); the option's
        // value is a live `c_int` of the length given.
        let set = unsafe {
            libc::setsockopt(
                self.0,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                std::ptr::from_ref(&value).cast(),
                length,
            )
        };
        if set == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
