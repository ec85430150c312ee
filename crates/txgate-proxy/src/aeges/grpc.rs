//! gRPC unary calls over hyper's HTTP/2: one length-prefixed message in,
//! one out, the status in trailers.
//!
//! Written here rather than taken from tonic's server because every
//! refusal must carry the code the pool plugin and the operator expect
//! (a message over the cap is `INVALID_ARGUMENT`, refused from its 5-byte
//! prefix before its body is read, and counted; tonic answers
//! `OUT_OF_RANGE` after the fact, and `INTERNAL` for a message that does
//! not decode) and because one call is a handful of bytes each way:
//! HTTP/2 itself (hyper, h2) and protobuf (prost) come from crates. A
//! tonic client talks to it in the tests and the load bench.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use hyper::body::{Body, Frame, SizeHint};

use crate::metrics::verify::Framing;

/// gRPC status codes txgate answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Code {
    /// Answered.
    Ok = 0,
    /// A bad request: no verdict.
    InvalidArgument = 3,
    /// The caller reset the call.
    Cancelled = 1,
    /// The request's body did not arrive in time.
    DeadlineExceeded = 4,
    /// The peer may not ask.
    PermissionDenied = 7,
    /// Over the cap of calls in flight.
    ResourceExhausted = 8,
    /// Another method, or a compressed message.
    Unimplemented = 12,
}

impl Code {
    fn header(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Code::Ok => "0",
            Code::Cancelled => "1",
            Code::InvalidArgument => "3",
            Code::DeadlineExceeded => "4",
            Code::PermissionDenied => "7",
            Code::ResourceExhausted => "8",
            Code::Unimplemented => "12",
        })
    }
}

/// A unary gRPC response body: at most one data frame, then trailers.
#[derive(Debug)]
pub struct GrpcBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

fn grpc_response(body: GrpcBody) -> Response<GrpcBody> {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

/// The answer to a call: `message` framed, status OK in the trailers.
pub fn ok(message: &[u8]) -> Response<GrpcBody> {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert("grpc-status", Code::Ok.header());
    grpc_response(GrpcBody {
        data: Some(framed.into()),
        trailers: Some(trailers),
    })
}

/// A refusal: "trailers-only", the status and a short message in the
/// headers, no body.
pub fn status(code: Code, message: &'static str) -> Response<GrpcBody> {
    let mut response = grpc_response(GrpcBody {
        data: None,
        trailers: None,
    });
    let headers = response.headers_mut();
    headers.insert("grpc-status", code.header());
    // Static, printable ASCII with no `%`: valid as it is in
    // `grpc-message`'s percent-encoding.
    headers.insert("grpc-message", HeaderValue::from_static(message));
    if code == Code::Unimplemented {
        headers.insert("grpc-accept-encoding", HeaderValue::from_static("identity"));
    }
    response
}

/// A plain HTTP answer for a request that is not gRPC at all.
pub fn http_status(status: StatusCode) -> Response<GrpcBody> {
    let mut response = Response::new(GrpcBody {
        data: None,
        trailers: None,
    });
    *response.status_mut() = status;
    response
}

/// Why a request's message could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// Refused: see [`Framing`].
    Framing(Framing),
    /// Its body took longer than the timeout.
    Timeout,
    /// The body could not be read: the caller reset the call, or the
    /// connection broke.
    Body,
}

/// Reads the one message of a unary call: the 5-byte prefix first, so a
/// message over `max` is refused before its body is read; then exactly
/// the declared length, and the end of the stream. A message that arrives
/// in one frame (the usual case) is not copied.
pub async fn read_message<B>(body: B, max: usize, timeout: Duration) -> Result<Bytes, ReadError>
where
    B: Body<Data = Bytes>,
{
    tokio::time::timeout(timeout, read(body, max))
        .await
        .unwrap_or(Err(ReadError::Timeout))
}

async fn read<B>(body: B, max: usize) -> Result<Bytes, ReadError>
where
    B: Body<Data = Bytes>,
{
    use http_body_util::BodyExt;
    let refuse = |f| Err(ReadError::Framing(f));
    let mut body = std::pin::pin!(body);
    let mut got = BytesMut::new();
    let mut single: Option<Bytes> = None;
    let mut declared: Option<usize> = None;
    loop {
        let frame = match body.frame().await {
            None => break,
            Some(Err(_)) => return Err(ReadError::Body),
            Some(Ok(frame)) => frame,
        };
        let Ok(data) = frame.into_data() else {
            // Request trailers carry nothing for a unary call.
            continue;
        };
        if data.is_empty() {
            continue;
        }
        // Keep the first frame as it is; copy only when a second comes.
        match single.take() {
            None if got.is_empty() => single = Some(data),
            None => got.extend_from_slice(&data),
            Some(first) => {
                // Room for the whole message when its length is known.
                let want = declared.map_or(0, |len| 5 + len);
                got.reserve(want.max(first.len() + data.len()));
                got.extend_from_slice(&first);
                got.extend_from_slice(&data);
            }
        }
        let have = single.as_ref().map_or(got.len(), Bytes::len);
        if declared.is_none() && have >= 5 {
            let head = single.as_deref().unwrap_or(&got[..]);
            if head[0] != 0 {
                return refuse(if head[0] == 1 {
                    Framing::Compressed
                } else {
                    Framing::Frame
                });
            }
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > max {
                return refuse(Framing::TooLarge);
            }
            declared = Some(len);
            // Room for exactly the message, never a doubling past it.
            if single.is_none() {
                got.reserve((5 + len).saturating_sub(got.len()));
            }
        }
        if let Some(len) = declared
            && have > 5 + len
        {
            // A second message: a unary call has one.
            return refuse(Framing::Frame);
        }
    }
    let Some(len) = declared else {
        return refuse(Framing::Frame);
    };
    let mut all = match single {
        Some(bytes) => bytes,
        None => got.freeze(),
    };
    if all.len() != 5 + len {
        return refuse(Framing::Frame);
    }
    all.advance(5);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn body(frames: Vec<Vec<u8>>) -> impl Body<Data = Bytes> {
        StreamBody::new(futures_util::stream::iter(frames.into_iter().map(|f| {
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(f)))
        })))
    }

    fn framed(message: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&(message.len() as u32).to_be_bytes());
        out.extend_from_slice(message);
        out
    }

    async fn read_all(frames: Vec<Vec<u8>>, max: usize) -> Result<Bytes, ReadError> {
        read_message(body(frames), max, Duration::from_secs(1)).await
    }

    #[tokio::test]
    async fn a_message_in_one_frame_or_many() {
        let message = b"hello pool".to_vec();
        let whole = framed(&message);
        assert_eq!(
            read_all(vec![whole.clone()], 64).await.as_deref(),
            Ok(&message[..])
        );
        // Split everywhere, the prefix included.
        for cut in 1..whole.len() {
            let frames = vec![whole[..cut].to_vec(), Vec::new(), whole[cut..].to_vec()];
            assert_eq!(
                read_all(frames, 64).await.as_deref(),
                Ok(&message[..]),
                "{cut}"
            );
        }
        // An empty message (all defaults) is a message.
        assert_eq!(
            read_all(vec![framed(&[])], 64).await.as_deref(),
            Ok(&[][..])
        );
    }

    #[tokio::test]
    async fn bad_framing_is_refused_with_its_reason() {
        let f = |r| Err(ReadError::Framing(r));
        // Over the cap: refused from the prefix, the rest never read.
        let mut big = vec![0, 0, 0, 1, 0];
        big.extend_from_slice(&[7; 10]);
        assert_eq!(read_all(vec![big], 255).await, f(Framing::TooLarge));
        let mut compressed = framed(b"abc");
        compressed[0] = 1;
        assert_eq!(read_all(vec![compressed], 64).await, f(Framing::Compressed));
        let mut flag = framed(b"abc");
        flag[0] = 9;
        assert_eq!(read_all(vec![flag], 64).await, f(Framing::Frame));
        // Short of the declared length, a short prefix, nothing at all,
        // two messages.
        let whole = framed(b"abcdef");
        assert_eq!(
            read_all(vec![whole[..8].to_vec()], 64).await,
            f(Framing::Frame)
        );
        assert_eq!(read_all(vec![vec![0, 0, 0]], 64).await, f(Framing::Frame));
        assert_eq!(read_all(Vec::new(), 64).await, f(Framing::Frame));
        let mut two = framed(b"ab");
        two.extend_from_slice(&framed(b"cd"));
        assert_eq!(read_all(vec![two], 64).await, f(Framing::Frame));
    }

    #[tokio::test]
    async fn a_body_that_never_ends_times_out() {
        let pending = StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, std::convert::Infallible>,
        >());
        let read = read_message(pending, 64, Duration::from_millis(50)).await;
        assert_eq!(read, Err(ReadError::Timeout));
    }

    #[tokio::test]
    async fn answers_are_framed_with_the_status_in_trailers() {
        let response = ok(b"\x08\x2a");
        assert_eq!(response.headers()[CONTENT_TYPE], "application/grpc");
        let collected = response
            .into_body()
            .collect()
            .await
            .unwrap_or_else(|e| match e {});
        let trailers = collected.trailers().cloned().unwrap_or_default();
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(&collected.to_bytes()[..], b"\x00\x00\x00\x00\x02\x08\x2a");
        let refused = status(Code::InvalidArgument, "hash must be 32 bytes");
        assert_eq!(refused.status(), StatusCode::OK);
        assert_eq!(refused.headers()["grpc-status"], "3");
        assert_eq!(refused.headers()["grpc-message"], "hash must be 32 bytes");
        assert!(refused.body().is_end_stream());
    }
}
