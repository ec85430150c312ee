//! Where one HTTP/1.1 message ends: headers, then a `Content-Length` body.

/// What the front of a buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A whole message of this many bytes.
    Whole(usize),
    /// Not yet a whole message.
    Partial,
    /// Not a message this hop forwards (chunked, headers over 16 KiB, a
    /// body over 1 MiB, or a `Content-Length` that is not one number).
    Refused,
}

const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 1 << 20;

/// The first message in `buf`, if it is whole.
pub(crate) fn frame(buf: &[u8]) -> Frame {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD {
            Frame::Refused
        } else {
            Frame::Partial
        };
    };
    let head = &buf[..end];
    let mut body: Option<usize> = None;
    for line in head.split(|&b| b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.eq_ignore_ascii_case(b"content-length") {
            let digits = value.trim_ascii();
            let n = std::str::from_utf8(digits)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|n| *n <= MAX_BODY);
            match (n, body) {
                (Some(n), None) => body = Some(n),
                (Some(n), Some(before)) if n == before => {}
                _ => return Frame::Refused,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Frame::Refused;
        }
    }
    let whole = end + 4 + body.unwrap_or(0);
    if buf.len() >= whole {
        Frame::Whole(whole)
    } else {
        Frame::Partial
    }
}

/// Moves every whole message at the front of `from` to the end of `to`
/// and says how many; `None` when `from` holds a message this hop refuses.
pub(crate) fn take_whole(from: &mut Vec<u8>, to: &mut Vec<u8>) -> Option<usize> {
    let (mut taken, mut messages) = (0, 0);
    loop {
        match frame(&from[taken..]) {
            Frame::Whole(n) => {
                taken += n;
                messages += 1;
            }
            Frame::Partial => break,
            Frame::Refused => return None,
        }
    }
    to.extend_from_slice(&from[..taken]);
    from.drain(..taken);
    Some(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_by_content_length() {
        let m = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(frame(m), Frame::Whole(m.len()));
        assert_eq!(frame(&m[..m.len() - 1]), Frame::Partial);
        let mut from = [&m[..], &m[..], &m[..5]].concat();
        let mut to = Vec::new();
        assert_eq!(take_whole(&mut from, &mut to), Some(2));
        assert_eq!(to.len(), 2 * m.len());
        assert_eq!(from, &m[..5]);
        assert_eq!(
            frame(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            Frame::Whole(38)
        );
        assert_eq!(
            frame(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Frame::Refused
        );
        let huge = b"POST / HTTP/1.1\r\nContent-Length: 18446744073709551600\r\n\r\n";
        assert_eq!(frame(huge), Frame::Refused);
        assert_eq!(
            frame(b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n"),
            Frame::Refused
        );
        let twice = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab";
        assert_eq!(frame(twice), Frame::Refused);
    }
}
