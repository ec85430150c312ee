//! Where reports go: a configured URL made into the report URL (its path
//! replaced by `/report`, the query kept) and its user-info into an
//! `Authorization: Basic` header, percent-decoded as reqwest does.

use http::{HeaderValue, Uri};

/// Where reports go: the URL with its path replaced by `/report`, and its
/// user-info as an `Authorization: Basic` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `http://host[:port]/report[?query]`, without user-info.
    pub(crate) uri: Uri,
    /// `Basic base64(user:password)`, when the URL has user-info.
    pub(crate) authorization: Option<HeaderValue>,
}

impl Target {
    /// The report URL from a configured URL (see the module doc).
    pub(crate) fn parse(url: &str) -> Result<Target, String> {
        let url = url.trim();
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| format!("{url:?}: not an absolute URL"))?;
        if !scheme.eq_ignore_ascii_case("http") {
            return Err(format!(
                "{scheme}: only http:// report URLs are supported (no TLS)"
            ));
        }
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let tail = tail.split('#').next().unwrap_or_default();
        let query = tail
            .split_once('?')
            .map(|(_, q)| q)
            .filter(|q| !q.is_empty());
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(format!("{url:?}: no host"));
        }
        let mut uri = format!("http://{host}/report");
        if let Some(query) = query {
            uri.push('?');
            uri.push_str(query);
        }
        let uri: Uri = uri.parse().map_err(|e| format!("{url:?}: {e}"))?;
        let authorization = userinfo
            .map(|userinfo| {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let mut credentials = percent_decode(user);
                credentials.push(b':');
                credentials.extend(percent_decode(password));
                let mut value = HeaderValue::try_from(format!("Basic {}", base64(&credentials)))
                    .map_err(|e| e.to_string())?;
                value.set_sensitive(true);
                Ok::<_, String>(value)
            })
            .transpose()?;
        Ok(Target { uri, authorization })
    }

    /// The report URL as it may be logged: without the query (it may hold
    /// a token); credentials never are in [`Target::uri`].
    pub(crate) fn redacted(&self) -> String {
        let authority = self.uri.authority().map(|a| a.as_str()).unwrap_or("");
        let query = if self.uri.query().is_some() {
            "?…"
        } else {
            ""
        };
        format!("http://{authority}{}{query}", self.uri.path())
    }
}

/// `%XX` sequences decoded; a `%` not followed by two hex digits is kept.
fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            )
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// Standard base64, padded (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> shift & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_becomes_report_and_the_query_is_kept() {
        for (url, want) in [
            ("http://127.0.0.1:9000", "http://127.0.0.1:9000/report"),
            ("http://127.0.0.1:9000/", "http://127.0.0.1:9000/report"),
            ("http://h:1/a/b/c", "http://h:1/report"),
            (
                "http://h:1/ingest?token=abc&x=1",
                "http://h:1/report?token=abc&x=1",
            ),
            ("http://h:1?token=abc", "http://h:1/report?token=abc"),
            ("http://h:1/x?token=abc#frag", "http://h:1/report?token=abc"),
            ("HTTP://h:1/x?", "http://h:1/report"),
        ] {
            let target = Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(target.uri.to_string(), want, "{url}");
            assert_eq!(target.authorization, None, "{url}");
        }
    }

    #[test]
    fn user_info_becomes_basic_auth_and_leaves_the_url() {
        let target = Target::parse("http://user:pass@h:1/x?token=abc").expect("parses");
        assert_eq!(target.uri.to_string(), "http://h:1/report?token=abc");
        let auth = target.authorization.expect("basic auth");
        assert!(auth.is_sensitive());
        // base64("user:pass")
        assert_eq!(auth, "Basic dXNlcjpwYXNz");
        // Percent-decoded, as reqwest does; no password is "user:".
        let target = Target::parse("http://us%40er:p%3Ass@h:1").expect("parses");
        assert_eq!(
            target.authorization.expect("auth"),
            format!("Basic {}", base64(b"us@er:p:ss"))
        );
        let target = Target::parse("http://user@h:1").expect("parses");
        assert_eq!(
            target.authorization.as_ref().expect("auth"),
            "Basic dXNlcjo="
        );
        assert_eq!(target.redacted(), "http://h:1/report");
        let target = Target::parse("http://u:p@h:1/?token=secret").expect("parses");
        assert_eq!(target.redacted(), "http://h:1/report?…");
    }

    #[test]
    fn only_http_urls() {
        for url in ["https://h/report", "h:1", "http:///x", "ftp://h/"] {
            assert!(Target::parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input}");
        }
        assert_eq!(percent_decode("a%2Fb%zz%4"), b"a/b%zz%4");
    }
}
