//! Entry points for the fuzz targets (`crates/txgate-fuzz`) into parts
//! that are private to this crate. Not an API.

use bytes::BytesMut;

use crate::upstream::h1::ResponseReader;

/// Feeds `wire` to the upstream response reader `step` bytes at a time
/// under a body cap of `max_body`, then the end of the connection; checks
/// that a response it returns respects the cap.
pub fn upstream_response(wire: &[u8], step: usize, max_body: usize) {
    let mut reader = ResponseReader::new(max_body);
    let mut buf = BytesMut::new();
    for piece in wire.chunks(step.max(1)) {
        buf.extend_from_slice(piece);
        match reader.advance(&buf, false) {
            Ok(Some(response)) => {
                assert!(response.body.len() <= max_body, "a body over the cap");
                return;
            }
            Ok(None) => {}
            Err(_) => return,
        }
    }
    if let Ok(Some(response)) = reader.advance(&buf, true) {
        assert!(response.body.len() <= max_body, "a body over the cap");
    }
}
