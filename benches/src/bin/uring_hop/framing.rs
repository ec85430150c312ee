//! Where one HTTP/1.1 message ends: headers, then a `Content-Length` body.

/// What the front of a buffer holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A whole message of this many bytes.
    Whole(usize),
    /// Not yet a whole message.
    Partial,
    /// Not a message this hop forwards (chunked, or headers over 16 KiB).
    Refused,
}

const MAX_HEAD: usize = 16 * 1024;

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
    let mut body = 0usize;
    for line in head.split(|&b| b == b'\n').skip(1) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.eq_ignore_ascii_case(b"content-length") {
            let digits = value.trim_ascii();
            match std::str::from_utf8(digits)
                .ok()
                .and_then(|s| s.parse().ok())
            {
                Some(n) => body = n,
                None => return Frame::Refused,
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Frame::Refused;
        }
    }
    let whole = end + 4 + body;
    if buf.len() >= whole {
        Frame::Whole(whole)
    } else {
        Frame::Partial
    }
}

/// Moves every whole message at the front of `from` to the end of `to`;
/// `false` when `from` holds a message this hop refuses.
pub(crate) fn take_whole(from: &mut Vec<u8>, to: &mut Vec<u8>) -> bool {
    let mut taken = 0;
    loop {
        match frame(&from[taken..]) {
            Frame::Whole(n) => taken += n,
            Frame::Partial => break,
            Frame::Refused => return false,
        }
    }
    to.extend_from_slice(&from[..taken]);
    from.drain(..taken);
    true
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
        assert!(take_whole(&mut from, &mut to));
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
    }
}
