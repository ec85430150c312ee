//! The token a request to the Aeges listener carries, found the three ways
//! a caller that only has a URL can send it: a `token` query parameter,
//! Basic auth from the URL's user-info (user or password may be the
//! token), or an `Authorization: Bearer` header. Compared in constant
//! time.

use base64::Engine;
use http::Request;
use http::header::AUTHORIZATION;

/// Whether the request carries `token`: the first `token=` of the query,
/// Basic (user or password), or Bearer.
pub(crate) fn authorized<B>(req: &Request<B>, token: &str) -> bool {
    let from_query = req.uri().query().is_some_and(|q| {
        q.split('&')
            .find_map(|pair| pair.strip_prefix("token="))
            .is_some_and(|v| crate::ops::secret::equal(v.as_bytes(), token.as_bytes()))
    });
    if from_query {
        return true;
    }
    let Some(header) = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    if let Some(bearer) = header.strip_prefix("Bearer ") {
        return crate::ops::secret::equal(bearer.trim().as_bytes(), token.as_bytes());
    }
    if let Some(basic) = header.strip_prefix("Basic ") {
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) else {
            return false;
        };
        let (user, password) = match decoded.iter().position(|&b| b == b':') {
            Some(i) => (&decoded[..i], &decoded[i + 1..]),
            None => (&decoded[..], &[][..]),
        };
        return crate::ops::secret::equal(user, token.as_bytes())
            | crate::ops::secret::equal(password, token.as_bytes());
    }
    false
}
