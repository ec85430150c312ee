//! The command line: config file, environment overrides, check-config.

use std::process::Command;

use crate::support::TempFile;

fn txgate(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_txgate"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run txgate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn shipped_config_checks() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/txgate.toml");
    let (code, out, err) = txgate(&["check-config", "--config", path], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("configuration ok"));
    assert!(out.contains("http://127.0.0.1:8546"));
    assert!(
        out.contains("(250 for eth_sendRawTransactionSync, upstream wait 65000 ms)"),
        "{out}"
    );
    assert!(
        out.contains(
            "conditional   max cost 1000; targets 2; callers open (signatures checked when \
             present); rate 5000 lookups/s, per caller no limit"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "\n  websocket     on, upstream ws://127.0.0.1:8546/, 32 subscriptions per \
             connection (10000 in all), 5242880-byte messages\n"
        ),
        "{out}"
    );
}

/// `[websocket]` is shown by `check-config`, after the redis line, and
/// switched and pointed by its flag and environment variable.
#[test]
fn check_config_shows_websocket() {
    let config = TempFile::new(
        "[upstream]\nurl = \"http://127.0.0.1:7001/rpc\"\n\
         [websocket]\nmax_subscriptions_per_connection = 4\n",
    );
    let (code, out, err) = txgate(&["check-config", "--config", config.arg()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "  websocket     on, upstream ws://127.0.0.1:7001/rpc, 4 subscriptions per \
             connection (10000 in all), 5242880-byte messages"
        ),
        "{out}"
    );
    let redis = out.find("  redis ").expect("redis line");
    let websocket = out.find("  websocket ").expect("websocket line");
    assert!(redis < websocket, "{out}");
    let (code, out, err) = txgate(
        &["check-config", "--config", config.arg()],
        &[("TXGATE_WEBSOCKET_UPSTREAM", "ws://10.0.0.2:8547/ws")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("upstream ws://10.0.0.2:8547/ws,"), "{out}");
    let (code, out, err) = txgate(
        &["check-config", "--websocket", "false"],
        &[("TXGATE_WEBSOCKET", "true")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  websocket     off\n"), "{out}");
    let (code, out, err) = txgate(&["check-config"], &[("TXGATE_WEBSOCKET", "false")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  websocket     off\n"), "{out}");
}

/// TLS is shown by `check-config` and its files are read there as the
/// daemon reads them: a missing or mismatched file is refused naming the
/// setting, before anything listens.
#[test]
fn check_config_reads_the_tls_files() {
    let (code, out, err) = txgate(&["check-config"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  tls           off"), "{out}");
    let ca = crate::tls_pki::Ca::new();
    let dir = crate::tls_pki::TempDir::new("cli-tls");
    let (cert, key) = ca.leaf(&["localhost"], 30).write(&dir, "server");
    let (code, out, err) = txgate(
        &["check-config", "--upstream", "https://node.internal/rpc"],
        &[("TXGATE_TLS_CERT", &cert), ("TXGATE_TLS_KEY", &key)],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("  tls           on, certificate {cert}")),
        "{out}"
    );
    assert!(
        out.contains("groups X25519MLKEM768, X25519, secp256r1 (the client's choice among them)"),
        "{out}"
    );
    assert!(
        out.contains("  upstream      https://node.internal/rpc (TLS, CA the system's roots)"),
        "{out}"
    );
    // A key that is not the certificate's; a file that is not there; a CA
    // file that holds no certificate.
    let (_, other_key) = ca.leaf(&["localhost"], 30).write(&dir, "other");
    for (args, key_name) in [
        (
            vec!["--tls-cert", cert.as_str(), "--tls-key", other_key.as_str()],
            "server.tls.key_path",
        ),
        (
            vec!["--tls-cert", "/nonexistent.pem", "--tls-key", key.as_str()],
            "server.tls.cert_chain_path",
        ),
        (vec!["--tls-cert", cert.as_str()], "server.tls.key_path"),
        (
            vec!["--upstream", "https://node", "--upstream-ca", key.as_str()],
            "upstream.tls.ca_path",
        ),
    ] {
        let mut all = vec!["check-config"];
        all.extend(args);
        let (code, out, err) = txgate(&all, &[]);
        assert_eq!(code, 2, "{all:?}: {out}{err}");
        assert!(err.contains(key_name), "{all:?}: {err}");
        assert!(!out.contains("configuration ok"), "{out}");
    }
}

#[test]
fn unknown_key_is_an_error_naming_it() {
    let config = TempFile::new("[upstream]\nurl = \"http://127.0.0.1:1\"\ntimeout = 5\n");
    let (code, _, err) = txgate(&["check-config", "--config", config.arg()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("timeout"), "{err}");
}

#[test]
fn bad_value_is_an_error_naming_the_key() {
    let config = TempFile::new("[admission]\nmax_in_flight = \"lots\"\n");
    let (code, _, err) = txgate(&["check-config", "--config", config.arg()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("admission.max_in_flight"), "{err}");
    let (code, _, err) = txgate(&["check-config", "--upstream", "ftp://node"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("upstream.url"), "{err}");
}

#[test]
fn environment_overrides_file_and_flags_override_environment() {
    let config = TempFile::new(
        "[server]\nlisten = \"127.0.0.1:7000\"\n[upstream]\nurl = \"http://127.0.0.1:7001\"\n",
    );
    let (code, out, err) = txgate(
        &["check-config", "--config", config.arg()],
        &[
            ("TXGATE_LISTEN", "127.0.0.1:7100"),
            ("TXGATE_UPSTREAM", "http://127.0.0.1:7101"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("127.0.0.1:7100") && out.contains("http://127.0.0.1:7101"),
        "{out}"
    );
    let (code, out, _) = txgate(
        &[
            "check-config",
            "--config",
            config.arg(),
            "--listen",
            "127.0.0.1:7200",
        ],
        &[("TXGATE_LISTEN", "127.0.0.1:7100")],
    );
    assert_eq!(code, 0);
    assert!(out.contains("127.0.0.1:7200"), "{out}");
}

#[test]
fn bad_flag_value_is_refused() {
    let (code, _, err) = txgate(&["check-config", "--log-format", "xml"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("log-format") || err.contains("xml"), "{err}");
}

/// Defect: `check-config` said "configuration ok" for an upstream URL the
/// daemon could not use, and the daemon then logged an error and exited 0
/// at once, so a supervisor with restart-on-failure never restarted it.
#[test]
fn a_bad_upstream_port_is_refused_before_listening() {
    let url = "http://127.0.0.1:notaport";
    let (code, out, err) = txgate(&["check-config", "--upstream", url], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(!out.contains("configuration ok"), "{out}");
    assert!(err.contains("upstream.url") && err.contains(url), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let (code, _, err) = txgate(
        &[
            "--upstream",
            url,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ],
        &[],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("upstream.url") && err.contains(url), "{err}");
    assert!(!err.contains("listening"), "{err}");
}

/// Every setting that cannot work is refused by `check-config` and the
/// daemon alike, with exit 2 and the setting named.
#[test]
fn settings_that_cannot_work_are_refused_by_check_config() {
    for (args, key) in [
        (&["--upstream", "http://127.0.0.1:0"][..], "upstream.url"),
        (&["--upstream", "http://:8545"][..], "upstream.url"),
        (&["--sidecar", "http://127.0.0.1:99999"][..], "sidecar.url"),
        (&["--log-level", "txgate=loud=yes"][..], "log.level"),
        (
            &["--websocket-upstream", "http://127.0.0.1:8546"][..],
            "websocket.upstream_url",
        ),
        (
            &["--ban-snapshot", "/nonexistent-dir/bans.bin"][..],
            "screen.snapshot_path",
        ),
    ] {
        refused_by_check_config_and_daemon(args, key, "127.0.0.1:0");
    }
}

/// `check-config` with `args` exits 2 naming `key`, and so does the daemon,
/// before listening (its admin listener at `admin`).
fn refused_by_check_config_and_daemon(args: &[&str], key: &str, admin: &str) {
    let mut check = vec!["check-config"];
    check.extend_from_slice(args);
    let (code, _, err) = txgate(&check, &[]);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(err.contains(key), "{args:?}: {err}");
    let mut daemon = vec![
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        admin,
        "--log-format",
        "json",
    ];
    daemon.extend_from_slice(args);
    let (code, _, err) = txgate(&daemon, &[]);
    assert_eq!(code, 2, "daemon {args:?}: {err}");
    assert!(
        err.contains(key) && !err.contains("listening"),
        "daemon {args:?}: {err}"
    );
}

/// Defect: the ShouldForward verdict cache was fixed at 100,000 entries in
/// the code; its size is a setting with the others now.
#[test]
fn the_verdict_cache_size_is_a_setting() {
    let config = TempFile::new("[sidecar]\nmax_verdicts = 5000\n");
    let (code, _, err) = txgate(&["check-config", "--config", config.arg()], &[]);
    assert_eq!(code, 0, "{err}");
    let config = TempFile::new("[sidecar]\nmax_verdicts = 0\n");
    let (code, _, err) = txgate(&["check-config", "--config", config.arg()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("sidecar.max_verdicts"), "{err}");
}

/// The Aeges listener and the sidecar sources are shown by `check-config`;
/// the report token never is, only whether it is set.
#[test]
fn check_config_shows_aeges_and_sources_but_never_the_token() {
    let config = TempFile::new(
        "[[sidecar.sources]]\nurl = \"http://127.0.0.1:50051\"\nprotocol = \"rpcproxy.v1\"\n\
         should_forward = true\n\
         [[sidecar.sources]]\nurl = \"http://127.0.0.1:50052\"\n\
         protocol = \"sidecar.transport.v1\"\n",
    );
    let (code, out, err) = txgate(
        &[
            "check-config",
            "--config",
            config.arg(),
            "--aeges-listen",
            "127.0.0.1:9546",
        ],
        &[("TXGATE_AEGES_REPORT_TOKEN", "hunter2-token")],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("http://127.0.0.1:50051 rpcproxy.v1 should_forward")
            && out.contains("http://127.0.0.1:50052 sidecar.transport.v1"),
        "{out}"
    );
    assert!(
        out.contains("127.0.0.1:9546") && out.contains("token set"),
        "{out}"
    );
    assert!(
        !out.contains("hunter2") && !err.contains("hunter2"),
        "{out}{err}"
    );
    let (code, out, err) = txgate(&["check-config"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("aeges         off"), "{out}");
}

/// The Aeges and sidecar-source settings that cannot work are refused by
/// `check-config` and the daemon alike, naming the setting.
#[test]
fn aeges_and_source_settings_that_cannot_work_are_refused() {
    let should_forward = TempFile::new("[sidecar]\nshould_forward = true\n");
    let transport = TempFile::new(
        "[[sidecar.sources]]\nurl = \"http://127.0.0.1:50052\"\n\
         protocol = \"sidecar.transport.v1\"\nshould_forward = true\n",
    );
    for (args, key) in [
        (&["--aeges-listen", "anywhere"][..], "aeges.listen"),
        (&["--aeges-listen", "127.0.0.1:9545"][..], "aeges.listen"),
        (
            &["--aeges-report-token", "two words"][..],
            "aeges.report_token",
        ),
        (
            &["--config", should_forward.arg()][..],
            "sidecar.should_forward",
        ),
        (
            &["--config", transport.arg()][..],
            "sidecar.sources[0].should_forward",
        ),
    ] {
        // The admin address the aeges listener is refused to share; the
        // daemon refuses before binding anything.
        refused_by_check_config_and_daemon(args, key, "127.0.0.1:9545");
    }
}
