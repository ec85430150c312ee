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
