//! The servers of the run: nginx (a static responder, the same over TLS,
//! and a TLS proxy in front of it) and txgate instances with a config of
//! their own.

use std::path::Path;

use txgate_benches::procs::{HttpClient, Nginx, wait_get};
use txgate_benches::start::{Scratch, Txgate, arg, nginx};

use crate::pki::Pki;

/// nginx: a static responder (cleartext `static_port`: `eth_chainId`'s
/// answer on `/`, 1 MiB on `/big`), the same with TLS on
/// `static_tls_port` (the https:// upstream), and a TLS proxy on
/// `proxy_port` in front of the cleartext one (the baseline); returned
/// once the responder answers.
pub(crate) async fn nginx_tls(
    client: &HttpClient,
    scratch: &Scratch,
    pki: &Pki,
    ports: (u16, u16, u16),
) -> Nginx {
    let (static_port, static_tls_port, proxy_port) = ports;
    let d = scratch.path().display();
    scratch.write("big.json", &big_answer());
    let (cert, key) = (pki.cert.display(), pki.key.display());
    let answer = r#"{"jsonrpc":"2.0","id":1,"result":"0x7a69"}"#;
    let responder = format!(
        "default_type application/json;\n\
         location = /big {{ error_page 405 =200 /big.json; return 405; }}\n\
         location = /big.json {{ root {d}; }}\n\
         location / {{ return 200 '{answer}'; }}\n"
    );
    let http = format!(
        "keepalive_requests 1000000;\n\
         ssl_certificate {cert};\n  ssl_certificate_key {key};\n\
         ssl_protocols TLSv1.2 TLSv1.3;\n  ssl_ecdh_curve X25519:prime256v1;\n\
         ssl_session_tickets off;\n  ssl_session_cache off;\n\
         upstream responder {{ server 127.0.0.1:{static_port}; keepalive 64; }}\n\
         server {{ listen 127.0.0.1:{static_port}; {responder} }}\n\
         server {{ listen 127.0.0.1:{static_tls_port} ssl; {responder} }}\n\
         server {{ listen 127.0.0.1:{proxy_port} ssl; location / {{ proxy_pass http://responder;\n\
           proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }}\n"
    );
    let responder_url = format!("http://127.0.0.1:{static_port}");
    nginx(client, scratch.path(), "2", &http, &responder_url).await
}

/// A JSON-RPC answer of 1 MiB: a result string of hex.
fn big_answer() -> String {
    let prefix = r#"{"jsonrpc":"2.0","id":1,"result":"0x"#;
    let fill = (1 << 20) - prefix.len() - 2;
    format!("{prefix}{}\"}}", "ab".repeat(fill / 2))
}

/// txgate (`bin`) in front of `upstream`, its config `toml` written as
/// `<name>.toml` (TLS on its client port when it holds `[server.tls]`
/// keys); returned once its admin listener answers.
pub(crate) async fn txgate(
    client: &HttpClient,
    bin: &Path,
    scratch: &Scratch,
    name: &str,
    upstream: &str,
    toml: &str,
) -> Txgate {
    let config = scratch.write(&format!("{name}.toml"), toml);
    let txgate = Txgate::spawn(bin, upstream, &["-c", arg(&config), "--log-level", "warn"]);
    wait_get(client, &format!("{}/healthz", txgate.admin())).await;
    txgate
}
