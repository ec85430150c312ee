//! A minimal HTTP/1.1 response reader for the upstream client: head with
//! `httparse`, body framed by `Content-Length`, chunked encoding, or the end
//! of the connection. Incremental: each read feeds it more bytes and
//! nothing is parsed twice.

use bytes::{Bytes, BytesMut};
use http::StatusCode;

/// A complete upstream response.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: StatusCode,
    pub(crate) body: Bytes,
    /// The connection may carry another request.
    pub(crate) keep_alive: bool,
}

/// Why a response could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// Not HTTP/1.x, or broken framing.
    Malformed,
    /// Body over the cap.
    TooLarge,
    /// The connection ended before the response did.
    Truncated,
}

#[derive(Debug)]
enum Framing {
    Length(usize),
    Chunked { chunk: Chunk, body: BytesMut },
    UntilEof,
}

#[derive(Debug, Clone, Copy)]
enum Chunk {
    Size,
    Data(usize),
    DataEnd,
    Trailers,
}

#[derive(Debug)]
struct Head {
    status: StatusCode,
    keep_alive: bool,
    /// Where the body starts in the buffer.
    start: usize,
    /// Parse position in the buffer (chunked).
    pos: usize,
    framing: Framing,
}

/// Reads one response from bytes fed to it.
#[derive(Debug)]
pub(crate) struct ResponseReader {
    max_body: usize,
    head: Option<Head>,
}

const MAX_HEADERS: usize = 64;

impl ResponseReader {
    pub(crate) fn new(max_body: usize) -> Self {
        ResponseReader {
            max_body,
            head: None,
        }
    }

    /// Whether any part of a response has been parsed.
    pub(crate) fn started(&self) -> bool {
        self.head.is_some()
    }

    /// Advances over `buf` (all bytes read so far); `eof` once the peer
    /// closed. Returns the response once complete.
    pub(crate) fn advance(
        &mut self,
        buf: &BytesMut,
        eof: bool,
    ) -> Result<Option<Response>, ReadError> {
        if self.head.is_none() {
            match parse_head(buf, self.max_body)? {
                Some(head) => self.head = Some(head),
                None if eof => return Err(ReadError::Truncated),
                None => return Ok(None),
            }
        }
        let max_body = self.max_body;
        let Some(head) = self.head.as_mut() else {
            return Ok(None);
        };
        // Every byte after the head counts against the cap, framing
        // included (chunk-size lines, extensions, trailers): an upstream
        // cannot make txgate read without bound. The head has its own cap.
        // A content-length body is bounded by its declared length, checked
        // with the head; what follows it is not read.
        if !matches!(head.framing, Framing::Length(_)) && buf.len() - head.start > max_body {
            return Err(ReadError::TooLarge);
        }
        match &mut head.framing {
            Framing::Length(len) => {
                let end = head.start + *len;
                if buf.len() >= end {
                    let keep_alive = head.keep_alive && buf.len() == end;
                    let body = Bytes::copy_from_slice(&buf[head.start..end]);
                    return Ok(Some(Response {
                        status: head.status,
                        body,
                        keep_alive,
                    }));
                }
                if eof {
                    return Err(ReadError::Truncated);
                }
                Ok(None)
            }
            Framing::UntilEof => {
                if buf.len() - head.start > max_body {
                    return Err(ReadError::TooLarge);
                }
                if eof {
                    let body = Bytes::copy_from_slice(&buf[head.start..]);
                    return Ok(Some(Response {
                        status: head.status,
                        body,
                        keep_alive: false,
                    }));
                }
                Ok(None)
            }
            Framing::Chunked { chunk, body } => {
                loop {
                    let rest = &buf[head.pos..];
                    match *chunk {
                        Chunk::Size => match httparse::parse_chunk_size(rest) {
                            Ok(httparse::Status::Complete((used, size))) => {
                                head.pos += used;
                                let size =
                                    usize::try_from(size).map_err(|_| ReadError::TooLarge)?;
                                if size == 0 {
                                    *chunk = Chunk::Trailers;
                                } else if body.len().saturating_add(size) > max_body {
                                    return Err(ReadError::TooLarge);
                                } else {
                                    *chunk = Chunk::Data(size);
                                }
                            }
                            Ok(httparse::Status::Partial) => break,
                            Err(_) => return Err(ReadError::Malformed),
                        },
                        Chunk::Data(left) => {
                            let take = left.min(rest.len());
                            body.extend_from_slice(&rest[..take]);
                            head.pos += take;
                            if take < left {
                                *chunk = Chunk::Data(left - take);
                                break;
                            }
                            *chunk = Chunk::DataEnd;
                        }
                        Chunk::DataEnd => {
                            if rest.len() < 2 {
                                break;
                            }
                            if &rest[..2] != b"\r\n" {
                                return Err(ReadError::Malformed);
                            }
                            head.pos += 2;
                            *chunk = Chunk::Size;
                        }
                        Chunk::Trailers => {
                            let Some(line) = rest.windows(2).position(|w| w == b"\r\n") else {
                                break;
                            };
                            head.pos += line + 2;
                            if line == 0 {
                                let keep_alive = head.keep_alive && head.pos == buf.len();
                                let body = std::mem::take(body).freeze();
                                return Ok(Some(Response {
                                    status: head.status,
                                    body,
                                    keep_alive,
                                }));
                            }
                        }
                    }
                }
                if eof {
                    Err(ReadError::Truncated)
                } else {
                    Ok(None)
                }
            }
        }
    }
}

fn parse_head(buf: &[u8], max_body: usize) -> Result<Option<Head>, ReadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let start = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > 64 * 1024 {
                return Err(ReadError::Malformed);
            }
            return Ok(None);
        }
        Err(_) => return Err(ReadError::Malformed),
    };
    let code = response.code.ok_or(ReadError::Malformed)?;
    let status = StatusCode::from_u16(code).map_err(|_| ReadError::Malformed)?;
    let mut keep_alive = response.version == Some(1);
    let mut length = None;
    let mut chunked = false;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).map_err(|_| ReadError::Malformed)?;
            let len: usize = text.trim().parse().map_err(|_| ReadError::Malformed)?;
            if length.is_some_and(|l| l != len) {
                return Err(ReadError::Malformed);
            }
            length = Some(len);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = h.value.eq_ignore_ascii_case(b"chunked")
                || h.value.to_ascii_lowercase().ends_with(b"chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            let value = h.value.to_ascii_lowercase();
            if value.windows(5).any(|w| w == b"close") {
                keep_alive = false;
            } else if value.windows(10).any(|w| w == b"keep-alive") {
                keep_alive = true;
            }
        }
    }
    // 1xx answers carry no body and precede the real one; txgate never
    // sends `Expect`, so one here is a protocol error.
    if status.is_informational() {
        return Err(ReadError::Malformed);
    }
    let framing = if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        Framing::Length(0)
    } else if chunked {
        Framing::Chunked {
            chunk: Chunk::Size,
            body: BytesMut::new(),
        }
    } else if let Some(len) = length {
        if len > max_body {
            return Err(ReadError::TooLarge);
        }
        Framing::Length(len)
    } else {
        keep_alive = false;
        Framing::UntilEof
    };
    Ok(Some(Head {
        status,
        keep_alive,
        start,
        pos: start,
        framing,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes.
    fn read(wire: &[u8], step: usize, max: usize) -> Result<Response, ReadError> {
        let mut reader = ResponseReader::new(max);
        let mut buf = BytesMut::new();
        for piece in wire.chunks(step) {
            buf.extend_from_slice(piece);
            if let Some(r) = reader.advance(&buf, false)? {
                return Ok(r);
            }
        }
        reader.advance(&buf, true)?.ok_or(ReadError::Truncated)
    }

    #[test]
    fn content_length_in_any_split() {
        let wire =
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello";
        for step in 1..wire.len() {
            let r = read(wire, step, 100).unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(&r.body[..], b"hello");
            assert!(r.keep_alive);
        }
    }

    #[test]
    fn chunked_with_extensions_and_trailers() {
        let wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4;x=y\r\nabcd\r\n3\r\nefg\r\n0\r\nX-T: 1\r\n\r\n";
        for step in 1..wire.len() {
            let r = read(wire, step, 100).unwrap();
            assert_eq!(&r.body[..], b"abcdefg", "step {step}");
            assert!(r.keep_alive);
        }
    }

    #[test]
    fn close_delimited_and_connection_close() {
        let r = read(b"HTTP/1.1 502 Bad Gateway\r\n\r\n<html>oops</html>", 7, 100).unwrap();
        assert_eq!(r.status, 502);
        assert_eq!(&r.body[..], b"<html>oops</html>");
        assert!(!r.keep_alive);
        let r = read(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
            100,
            100,
        )
        .unwrap();
        assert!(!r.keep_alive);
        let r = read(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 100, 100).unwrap();
        assert!(!r.keep_alive);
    }

    #[test]
    fn caps_and_errors() {
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n", 100, 100).unwrap_err(),
            ReadError::TooLarge
        );
        assert_eq!(
            read(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nff\r\n",
                100,
                100
            )
            .unwrap_err(),
            ReadError::TooLarge
        );
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", 100, 100).unwrap_err(),
            ReadError::Truncated
        );
        assert_eq!(read(b"", 1, 100).unwrap_err(), ReadError::Truncated);
        assert_eq!(
            read(b"SSH-2.0-OpenSSH\r\n\r\n", 100, 100).unwrap_err(),
            ReadError::Malformed
        );
        assert_eq!(
            read(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                100,
                100
            )
            .unwrap_err(),
            ReadError::Malformed
        );
        assert_eq!(
            read(
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
                100,
                100
            )
            .unwrap_err(),
            ReadError::Malformed
        );
    }

    /// Defect: only body bytes counted against the response cap, so chunk
    /// extensions, chunk-size lines and trailers could be sent without
    /// bound.
    #[test]
    fn response_cap_counts_every_byte_read() {
        let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        // A chunk-size line that never ends (an endless extension).
        let mut wire = head.clone();
        wire.extend_from_slice(b"1;");
        wire.extend(std::iter::repeat_n(b'x', 1000));
        assert_eq!(read(&wire, 64, 100).unwrap_err(), ReadError::TooLarge);
        // Trailers that never end.
        let mut wire = head.clone();
        wire.extend_from_slice(b"0\r\n");
        for _ in 0..100 {
            wire.extend_from_slice(b"X-Pad: yyyyyyyy\r\n");
        }
        assert_eq!(read(&wire, 64, 100).unwrap_err(), ReadError::TooLarge);
        // Many one-byte chunks: 50 body bytes, 300 bytes on the wire.
        let mut wire = head;
        for _ in 0..50 {
            wire.extend_from_slice(b"1\r\na\r\n");
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(read(&wire, 64, 100).unwrap_err(), ReadError::TooLarge);
        assert_eq!(read(&wire, 64, 400).unwrap().body.len(), 50);
    }

    #[test]
    fn extra_bytes_after_the_response_forbid_reuse() {
        let r = read(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokGARBAGE",
            1000,
            100,
        )
        .unwrap();
        assert_eq!(&r.body[..], b"ok");
        assert!(!r.keep_alive);
    }
}
