//! The dashboard and the alert rules proved against a real Prometheus
//! (Debian's package): it scrapes txgate (and the example sidecar's
//! health) while the demo's story plays, evaluates the shipped rules, and
//! then every dashboard query and every rule expression runs through its
//! HTTP API. Any error, any query of the dashboard or recording rule that
//! returns no series, any metric selector (alerts included) that matches
//! no series, or any label an expression groups or matches on that no
//! series of its metrics carries, fails the test: a metric or label
//! renamed in the code can never leave a panel empty or a rule silent.
//! `promtool check config` runs on the configuration used.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::credible::{TIP, poke};
use crate::fleet_redis::RedisServer;
use crate::support::{
    Anvil, Eoa, Proc, Sidecar, TempFile, Txgate, accepted, eventually, free_port, fund, get,
    send_raw,
};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// A Prometheus server on a free loopback port, with its own storage.
struct Prometheus {
    _proc: Proc,
    url: String,
    _dir: TempDir,
    /// The instant (Unix seconds) queries are evaluated at; none: now.
    at: std::cell::Cell<Option<f64>>,
}

/// A directory removed at drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("txgate-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Prometheus {
    /// Scrapes `txgate` (job `txgate`, as the rules expect) and `sidecar`
    /// every second, evaluating the shipped rules every second.
    async fn start(txgate: &str, sidecar: &str) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let config = dir.0.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n\
                 \x20 - job_name: txgate\n    static_configs:\n      - targets: ['{txgate}']\n\
                 \x20 - job_name: example-sidecar\n    \
                 static_configs:\n      - targets: ['{sidecar}']\n",
                rules = repo("deploy/prometheus/txgate-rules.yml").display(),
            ),
        )
        .expect("write prometheus.yml");
        let check = Command::new("promtool")
            .args(["check", "config"])
            .arg(&config)
            .output()
            .expect("promtool (Debian package prometheus; scripts/install-test-tools.sh)");
        assert!(
            check.status.success(),
            "promtool check config: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus; scripts/install-test-tools.sh)");
        let prometheus = Prometheus {
            _proc: Proc::new(child),
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
            at: std::cell::Cell::new(None),
        };
        let ready = eventually(Duration::from_secs(30), || async {
            crate::support::try_get(&format!("{}/-/ready", prometheus.url))
                .await
                .is_ok_and(|(status, _, _)| status == 200)
        })
        .await;
        assert!(ready, "prometheus did not become ready");
        prometheus
    }

    /// `GET /api/v1/<path>?query=<expr>`: the `data` of a success, or the
    /// error.
    async fn api(&self, path: &str, query: Option<&str>) -> Result<Value, String> {
        let url = match (query, self.at.get()) {
            (Some(q), Some(at)) => {
                format!(
                    "{}/api/v1/{path}?query={}&time={at:.3}",
                    self.url,
                    encode(q)
                )
            }
            (Some(q), None) => format!("{}/api/v1/{path}?query={}", self.url, encode(q)),
            (None, _) => format!("{}/api/v1/{path}", self.url),
        };
        let (_, _, body) = get(&url).await;
        let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        if v["status"] != "success" {
            return Err(format!("{}: {}", v["errorType"], v["error"]));
        }
        Ok(v["data"].clone())
    }

    /// The raw samples of each series of `metric` from the last ten
    /// seconds, oldest first: its labels, and each sample's timestamp
    /// (Unix seconds) and value as Prometheus writes it.
    async fn samples(&self, metric: &str) -> Vec<(Value, Vec<(f64, String)>)> {
        let series = self
            .query(&format!("{metric}[10s]"))
            .await
            .unwrap_or_default();
        series
            .iter()
            .map(|s| {
                let values = s["values"].as_array().cloned().unwrap_or_default();
                let values = values
                    .iter()
                    .filter_map(|v| Some((v[0].as_f64()?, v[1].as_str()?.to_owned())))
                    .collect();
                (s["metric"].clone(), values)
            })
            .collect()
    }

    /// When each rule group was last evaluated (Unix seconds), from
    /// Prometheus's own metrics.
    async fn rule_groups_evaluated(&self) -> Vec<f64> {
        let Ok((_, _, body)) = crate::support::try_get(&format!("{}/metrics", self.url)).await
        else {
            return Vec::new();
        };
        String::from_utf8_lossy(&body)
            .lines()
            .filter(|l| l.starts_with("prometheus_rule_group_last_evaluation_timestamp_seconds{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect()
    }

    /// The series (or scalar) an expression returns now.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.api("query", Some(expr)).await?;
        match data["resultType"].as_str() {
            Some("vector" | "matrix") => Ok(data["result"].as_array().cloned().unwrap_or_default()),
            _ => Ok(vec![data["result"].clone()]),
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The dashboard's variables as a test substitutes them: every instance,
/// and windows that hold several scrapes.
fn substitute(expr: &str) -> String {
    expr.replace("${__rate_interval}", "15s")
        .replace("$__rate_interval", "15s")
        .replace("${__interval}", "5s")
        .replace("$__interval", "5s")
        .replace("${__range}", "1m")
        .replace("$__range", "1m")
        .replace("${instance}", ".+")
        .replace("$instance", ".+")
}

/// The metric selectors of an expression: `txgate_…` names and recorded
/// series (`level:txgate_…:op`), and `up`, each with its matchers.
fn selectors(expr: &str) -> Vec<String> {
    let bytes = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'"' {
            // Skip a string literal.
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || b"_:".contains(&bytes[i]))
            {
                i += 1;
            }
            let name = &expr[start..i];
            let metric = name.starts_with("txgate_") || name.contains(":txgate_") || name == "up";
            let mut j = i;
            while j < bytes.len() && bytes[j] == b' ' {
                j += 1;
            }
            if !metric || bytes.get(j) == Some(&b'(') {
                continue;
            }
            let mut selector = name.to_string();
            if bytes.get(j) == Some(&b'{') {
                let end = expr[j..].find('}').map_or(expr.len(), |k| j + k + 1);
                selector.push_str(&expr[j..end]);
                i = end;
            }
            out.push(selector);
            continue;
        }
        i += 1;
    }
    out.sort();
    out.dedup();
    out
}

/// The labels an expression groups or matches on.
fn grouping_labels(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for keyword in [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ] {
        let mut rest = expr;
        while let Some(at) = find_word(rest, keyword) {
            let after = rest[at + keyword.len()..].trim_start();
            if let Some(list) = after.strip_prefix('(')
                && let Some(end) = list.find(')')
            {
                out.extend(
                    list[..end]
                        .split(',')
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_owned),
                );
            }
            rest = &rest[at + keyword.len()..];
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The first position of `word` as a whole word outside string literals.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut in_string = false;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'"' {
            in_string = !in_string;
        }
        if in_string || !text[i..].starts_with(word) {
            continue;
        }
        let before = i.checked_sub(1).map(|p| bytes[p]);
        let after = bytes.get(i + word.len()).copied();
        let edge = |c: Option<u8>| c.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == b'_'));
        if edge(before) && edge(after) {
            return Some(i);
        }
    }
    None
}

/// Every query of the dashboard: panel targets (rows' panels too) and
/// variable queries.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo("deploy/grafana/txgate.json")).expect("dashboard");
    let d: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut panels: Vec<Value> = d["panels"].as_array().cloned().unwrap_or_default();
    for p in d["panels"].as_array().into_iter().flatten() {
        panels.extend(p["panels"].as_array().cloned().unwrap_or_default());
    }
    let mut out = Vec::new();
    for p in &panels {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = t["expr"].as_str() {
                out.push((
                    format!("panel \"{}\" {}", p["title"], t["refId"]),
                    expr.to_owned(),
                ));
            }
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let query = v["query"]["query"].as_str().or(v["query"].as_str());
        if v["type"] == "query"
            && let Some(q) = query
        {
            out.push((format!("variable {}", v["name"]), q.to_owned()));
        }
    }
    out
}

/// Plays the demo's story through txgate for `for_how_long` and until more
/// than `refusals` copies were refused (the story is about them, however
/// slow the machine; at most a minute): honest calls, an attack that
/// reverts and is invalidated, its copies from fresh senders refused by
/// fingerprint, pass-through reads, a ban lookup. Returns the refusals.
async fn play(txgate: &Txgate, anvil: &Anvil, for_how_long: Duration, refusals: usize) -> usize {
    let bytecode = std::fs::read_to_string(repo("contracts/Guarded.bin")).expect("Guarded.bin");
    let contract = crate::support::deploy(&txgate.url, bytecode.trim());
    let (honest, attacker) = (Eoa::new(301), Eoa::new(302));
    fund(&anvil.url, &[honest.address, attacker.address]).await;
    accepted(&send_raw(&txgate.url, &honest.sign(0, contract, &poke(1), 0, TIP)).await);
    let attack = attacker.sign(0, contract, &poke(13), 0, TIP);
    accepted(&send_raw(&txgate.url, &attack).await);
    let learned = eventually(Duration::from_secs(10), || async {
        let (_, body) = send_raw(&txgate.url, &attack).await;
        body["error"]["data"]["reason"] == "recent_failure"
    })
    .await;
    assert!(learned, "the sidecar's invalidation never reached txgate");
    let chain_id = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    let started = Instant::now();
    let mut refused = 0;
    let mut seed = 10_000;
    while (started.elapsed() < for_how_long || refused <= refusals)
        && started.elapsed() < Duration::from_secs(60)
    {
        seed += 1;
        let copy = Eoa::new(seed).sign(0, contract, &poke(13), 0, 10 * TIP);
        let (_, body) = send_raw(&txgate.url, &copy).await;
        if body["error"]["data"]["reason"] == "denied_fingerprint" {
            refused += 1;
        }
        let _ = crate::support::rpc(&txgate.url, chain_id).await;
        let _ = get(&format!("{}/bans/lookup?raw={copy}", txgate.admin_url)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    refused
}

#[tokio::test(flavor = "multi_thread")]
async fn every_panel_and_rule_has_series_in_a_real_prometheus() {
    let anvil = Anvil::start().await;
    let sidecar_config = crate::support::example_sidecar_config();
    let sidecar = Sidecar::start(&anvil.url, &sidecar_config, 0).await;
    let redis = RedisServer::start(free_port());
    let snapshots = TempDir::new("observability-bans");
    let config = TempFile::new(&format!(
        "[screen]\nsnapshot_path = \"{}\"\nsnapshot_interval_secs = 1\n\
         [limits]\nip = {{ calls_per_sec = 10000, calls_burst = 10000 }}\n\
         [redis]\nurl = \"{}\"\n\
         [aeges]\nlisten = \"127.0.0.1:{}\"\n",
        snapshots.0.join("bans.bin").display(),
        redis.url(),
        free_port()
    ));
    let txgate = Txgate::start(
        &anvil.url,
        &["--config", config.arg(), "--sidecar", &sidecar.grpc_url],
    );
    let target = |url: &str| url.trim_start_matches("http://").to_owned();
    let prometheus =
        Prometheus::start(&target(&txgate.admin_url), &target(&sidecar.admin_url)).await;

    let refused = play(&txgate, &anvil, Duration::from_secs(6), 10).await;
    assert!(refused > 10, "the story refused only {refused} copies");
    // Waited for, not slept: Prometheus has scraped both targets, with
    // success, at least 2 s after the story ended (so every counter of the
    // story is in its data), and then evaluated every rule group; a scrape
    // that failed on a loaded machine (its timeout is the 1 s interval) is
    // waited past, up to a minute. Every query below is then evaluated at
    // that instant, so a later scrape (failed, its series marked stale)
    // cannot change what the story left.
    let after = unix_now() + 2.0;
    let seen = std::cell::RefCell::new(Vec::new());
    let settled = eventually(Duration::from_secs(60), || async {
        let scrapes = prometheus.samples("up").await;
        *seen.borrow_mut() = scrapes.clone();
        // The newest scrape both targets have had (each target is scraped
        // in turn: every scrape of it before its newest one is in).
        let at = scrapes
            .iter()
            .filter_map(|(_, samples)| samples.last().map(|s| s.0))
            .fold(f64::INFINITY, f64::min);
        let scraped = scrapes.len() == 2
            && scrapes.iter().all(|(_, samples)| {
                samples
                    .iter()
                    .rev()
                    .find(|(t, _)| *t <= at)
                    .is_some_and(|(t, value)| *t >= after && value == "1")
            });
        let evaluated = prometheus.rule_groups_evaluated().await;
        let settled = scraped && evaluated.len() >= 2 && evaluated.iter().all(|e| *e >= at);
        if settled {
            prometheus.at.set(Some(at));
        }
        settled
    })
    .await;
    let evaluated = prometheus.rule_groups_evaluated().await;
    assert!(
        settled,
        "no successful scrape of both targets after the story, then an evaluation of every \
         rule group: scrapes {:?}, rule groups evaluated at {evaluated:?}",
        seen.borrow(),
    );

    let mut failures = Vec::new();
    // The rules as Prometheus loaded them: each healthy.
    let rules = prometheus.api("rules", None).await.expect("rules");
    let mut expressions: Vec<(String, String, bool)> = Vec::new();
    for group in rules["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let name = rule["name"].as_str().unwrap_or_default().to_owned();
            if rule["health"] != "ok" {
                failures.push(format!(
                    "rule {name}: health {} {}",
                    rule["health"], rule["lastError"]
                ));
            }
            let query = rule["query"].as_str().unwrap_or_default().to_owned();
            // A recording rule's result must have series; an alert's only
            // when it fires, so its metrics are checked one by one.
            let recording = rule["type"] == "recording";
            expressions.push((format!("{} {name}", rule["type"]), query, recording));
        }
    }
    assert!(
        expressions.iter().filter(|e| !e.2).count() >= 8,
        "the rules file holds fewer alerts than the runbooks name"
    );
    let panels = dashboard_queries();
    assert!(
        panels.len() >= 20,
        "the dashboard has {} queries",
        panels.len()
    );
    for (what, expr) in panels {
        expressions.push((what, expr, true));
    }

    for (what, raw, must_have_series) in &expressions {
        let expr = substitute(raw);
        let expr = expr
            .strip_prefix("label_values(")
            .and_then(|rest| rest.split(',').next())
            .map_or(expr.clone(), str::to_owned);
        match prometheus.query(&expr).await {
            Err(e) => failures.push(format!("{what}: {e}\n    {expr}")),
            Ok(series) if *must_have_series && series.is_empty() => {
                failures.push(format!("{what}: no series\n    {expr}"));
            }
            Ok(_) => {}
        }
        let mut label_sets: Vec<Value> = Vec::new();
        for selector in selectors(&expr) {
            match prometheus.query(&selector).await {
                Err(e) => failures.push(format!("{what}: {selector}: {e}")),
                Ok(series) if series.is_empty() => {
                    failures.push(format!("{what}: {selector} matches no series"));
                }
                Ok(series) => label_sets.extend(series.iter().map(|s| s["metric"].clone())),
            }
        }
        for label in grouping_labels(&expr) {
            if !label_sets.iter().any(|m| !m[&label].is_null()) {
                failures.push(format!(
                    "{what}: no series of its metrics has label `{label}`"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} expressions fail against Prometheus:\n{}",
        failures.len(),
        expressions.len(),
        failures.join("\n")
    );

    // The story is in the data: refusals by fingerprint, a sidecar link up.
    let refusals = prometheus
        .query(
            r#"sum(txgate_screen_decisions_total{decision="refused",reason="denied_fingerprint"})"#,
        )
        .await
        .expect("query");
    let value = refusals[0]["value"][1]
        .as_str()
        .unwrap_or("0")
        .parse::<f64>()
        .unwrap_or(0.0);
    assert!(value >= refused as f64, "{refusals:?}");
    let up = prometheus.query("up").await.expect("up");
    assert_eq!(up.len(), 2, "{up:?}");
    assert!(up.iter().all(|s| s["value"][1] == "1"), "{up:?}");
}

/// Seconds since the Unix epoch, as Prometheus stamps its samples.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

#[test]
fn selectors_and_labels_are_read_from_promql() {
    let expr = r#"histogram_quantile(0.99, sum by (le, stage) (rate(txgate_screen_stage_duration_seconds_bucket{instance=~".+", stage!="probe"}[5m]))) > on (instance) group_left instance:txgate_x:rate5m and up{job="txgate"}"#;
    assert_eq!(
        selectors(expr),
        [
            "instance:txgate_x:rate5m",
            r#"txgate_screen_stage_duration_seconds_bucket{instance=~".+", stage!="probe"}"#,
            r#"up{job="txgate"}"#
        ]
    );
    assert_eq!(grouping_labels(expr), ["instance", "le", "stage"]);
    assert_eq!(
        grouping_labels(r#"txgate_a{x="by (nope)"}"#),
        Vec::<String>::new()
    );
    assert_eq!(
        substitute("rate(txgate_a{instance=~\"$instance\"}[$__rate_interval])"),
        "rate(txgate_a{instance=~\".+\"}[15s])"
    );
}
