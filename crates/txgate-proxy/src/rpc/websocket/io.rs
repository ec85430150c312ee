//! A session's sockets, read and written from the session's own task: no
//! writer task, channel or lock between a message and its socket.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// One WebSocket and whether frames wait in its buffer.
pub(super) struct Socket<S> {
    ws: WebSocketStream<S>,
    /// Frames written since the last complete flush.
    dirty: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Socket<S> {
    pub(super) fn new(ws: WebSocketStream<S>) -> Socket<S> {
        Socket { ws, dirty: false }
    }

    /// Frames `message`: sent at once if the socket takes it, else held in
    /// the socket's buffer (up to its codec's `max_write_buffer_size`:
    /// beyond it, [`WsError::WriteBufferFull`]) and flushed by [`io`] when
    /// the socket is writable.
    pub(super) fn send(&mut self, message: Message) -> Result<(), WsError> {
        Pin::new(&mut self.ws).start_send(message)?;
        self.dirty = true;
        Ok(())
    }

    /// Whether nothing waits in the buffer (the last flush is done).
    pub(super) fn flushed(&self) -> bool {
        !self.dirty
    }

    /// Writes what waits, the reply to a peer's close frame included.
    pub(super) async fn flush(&mut self) -> Result<(), WsError> {
        futures_util::SinkExt::flush(&mut self.ws).await
    }

    /// Sends a close frame and flushes.
    pub(super) async fn close(&mut self, frame: Option<CloseFrame>) -> Result<(), WsError> {
        self.ws.close(frame).await
    }
}

/// Drives one socket: flushes what waits in its buffer, and resolves with
/// its next message when `reading`.
pub(super) fn io<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut Socket<S>,
    reading: bool,
) -> impl Future<Output = Option<Result<Message, WsError>>> + '_ {
    poll_fn(move |cx| socket.poll_io(cx, reading))
}

impl<S: AsyncRead + AsyncWrite + Unpin> Socket<S> {
    /// [`io`]'s one turn.
    pub(super) fn poll_io(
        &mut self,
        cx: &mut std::task::Context<'_>,
        reading: bool,
    ) -> Poll<Option<Result<Message, WsError>>> {
        if self.dirty {
            match Pin::new(&mut self.ws).poll_flush(cx) {
                Poll::Ready(Ok(())) => self.dirty = false,
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Pending => {}
            }
        }
        if reading {
            Pin::new(&mut self.ws).poll_next(cx)
        } else {
            Poll::Pending
        }
    }
}

/// What [`io_or_flushed`] saw.
pub(super) enum Turn {
    /// The socket's next message (as [`io`] yields it).
    Message(Option<Result<Message, WsError>>),
    /// Everything buffered was written.
    Flushed,
}

/// As [`io`] (reading always), but also resolves once a pending flush
/// completes: a writer that holds its queue back until the socket has
/// taken what it was given learns when to give it more.
pub(super) fn io_or_flushed<S: AsyncRead + AsyncWrite + Unpin>(
    socket: &mut Socket<S>,
) -> impl Future<Output = Turn> + '_ {
    poll_fn(move |cx| {
        if socket.dirty {
            match Pin::new(&mut socket.ws).poll_flush(cx) {
                Poll::Ready(Ok(())) => {
                    socket.dirty = false;
                    return Poll::Ready(Turn::Flushed);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Turn::Message(Some(Err(e)))),
                Poll::Pending => {}
            }
        }
        Pin::new(&mut socket.ws).poll_next(cx).map(Turn::Message)
    })
}
