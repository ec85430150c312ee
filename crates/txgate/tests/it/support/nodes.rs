//! The nodes the end-to-end tests run against: anvil, geth and op-geth,
//! each on a free loopback port and killed by PID when its handle drops;
//! [`Node`] runs one suite against either, picked by [`NodeKind`]
//! (`on_each_node!` makes a test of each), and [`fund`] and [`mine`] do on
//! geth what anvil's own methods do.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hyper::StatusCode;

use super::{
    Eoa, KEY0, Proc, TempDir, eventually, foundry_tool, free_port, receipt, rpc, rpc_json,
    send_raw, workspace_root,
};

/// A running anvil on a free loopback port.
pub struct Anvil {
    pub proc: Proc,
    pub url: String,
}

impl Anvil {
    pub async fn start() -> Anvil {
        Anvil::start_on(free_port()).await
    }

    /// An anvil on `port` (a node restarted where it was).
    pub async fn start_on(port: u16) -> Anvil {
        let child = Command::new(foundry_tool("anvil"))
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--silent",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn anvil");
        let anvil = Anvil {
            proc: Proc { child },
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if answers_chain_id(&anvil.url).await {
                return anvil;
            }
            assert!(
                Instant::now() < deadline,
                "anvil did not come up on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Anvil's ten default accounts (from its default mnemonic): the accounts
/// a [`Geth`] node's genesis funds, so that tests sign as they do on anvil
/// ([`KEY0`] is the first's key).
pub const ANVIL_ACCOUNTS: [&str; 10] = [
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
    "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
    "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
    "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
    "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
    "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
    "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
];

/// The private keys of [`ANVIL_ACCOUNTS`], in the same order (anvil's
/// default mnemonic; [`KEY0`] is the first).
pub const ANVIL_KEYS: [&str; 10] = [
    KEY0,
    "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
    "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
    "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
    "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
    "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
    "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
    "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6",
];

/// Which node a [`Geth`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GethFlavour {
    /// go-ethereum.
    Geth,
    /// op-geth, the OP Stack's execution node.
    OpGeth,
}

impl GethFlavour {
    fn name(self) -> &'static str {
        match self {
            GethFlavour::Geth => "geth",
            GethFlavour::OpGeth => "op-geth",
        }
    }

    /// `$TXGATE_GETH` / `$TXGATE_OP_GETH`, or `.tools/bin/<name>` (linked
    /// by scripts/install-nodes.sh to the pinned build).
    fn binary(self) -> PathBuf {
        let var = match self {
            GethFlavour::Geth => "TXGATE_GETH",
            GethFlavour::OpGeth => "TXGATE_OP_GETH",
        };
        let path = std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join(".tools/bin").join(self.name()));
        assert!(
            path.exists(),
            "{} not found: run scripts/install-nodes.sh (or set {var})",
            path.display()
        );
        path
    }
}

/// Whether the node at `url` answers `eth_chainId` with 200 within a
/// second: it is up.
async fn answers_chain_id(url: &str) -> bool {
    let probe = rpc(
        url,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#,
    );
    matches!(
        tokio::time::timeout(Duration::from_secs(1), probe).await,
        Ok(Ok((StatusCode::OK, _, _)))
    )
}

/// A running `geth --dev` (or op-geth) on a free loopback port that serves
/// HTTP and WebSocket alike (as anvil's does, so that txgate derives the
/// WebSocket upstream from the HTTP one), killed on drop with its data
/// directory removed.
///
/// Its chain is the node's own developer genesis (`--dev dumpgenesis`: the
/// forks mainnet runs on at block 0, the one in development left off) with
/// anvil's chain id (31337, so that
/// [`Eoa::sign`] and cast sign for it as for anvil; its network id too) and
/// anvil's ten default
/// accounts funded with 10,000 ether each, written by `geth init` into a
/// fresh data directory that `--dev` then runs. Blocks are sealed when a
/// transaction is pending (`--dev.period 0`) unless `extra` says otherwise.
pub struct Geth {
    pub proc: Proc,
    /// The HTTP endpoint.
    pub url: String,
    /// The WebSocket endpoint (the same port).
    pub ws_url: String,
    datadir: TempDir,
}

impl Geth {
    /// A geth dev node.
    pub async fn start() -> Geth {
        Geth::start_with(GethFlavour::Geth, &[]).await
    }

    /// An op-geth dev node serving `eth_sendRawTransactionConditional`, its
    /// cost rate limit raised so that it never waits.
    pub async fn op_geth() -> Geth {
        Geth::start_with(
            GethFlavour::OpGeth,
            &[
                "--rollup.sequencertxconditionalenabled",
                "--rollup.sequencertxconditionalcostratelimit",
                "1000000000",
            ],
        )
        .await
    }

    /// A `flavour` dev node with `extra` flags after the launcher's own.
    pub async fn start_with(flavour: GethFlavour, extra: &[&str]) -> Geth {
        let binary = flavour.binary();
        let datadir = TempDir::new(flavour.name());
        let genesis = datadir.path.join("genesis.json");
        std::fs::write(&genesis, dev_genesis(&binary).to_string()).expect("write genesis");
        let init = Command::new(&binary)
            .arg("init")
            .arg("--datadir")
            .arg(&datadir.path)
            .arg(&genesis)
            .output()
            .expect("spawn geth init");
        assert!(
            init.status.success(),
            "{} init failed: {}",
            flavour.name(),
            String::from_utf8_lossy(&init.stderr)
        );

        let port = free_port();
        let log_path = datadir.path.join("node.log");
        let log = std::fs::File::create(&log_path).expect("node log");
        let apis = "eth,net,web3,txpool";
        let child = Command::new(&binary)
            .arg("--dev")
            .arg("--datadir")
            .arg(&datadir.path)
            .args(["--ipcdisable", "--nodiscover", "--maxpeers", "0"])
            // The network id anvil answers `net_version` with (`--dev`'s
            // own is 1337), so a suite's answers agree on both nodes.
            .args(["--networkid", "31337"])
            .args(["--http", "--http.addr", "127.0.0.1", "--http.api", apis])
            .args(["--http.port", &port.to_string()])
            .args(["--ws", "--ws.addr", "127.0.0.1", "--ws.api", apis])
            .args(["--ws.port", &port.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", flavour.name()));
        let mut node = Geth {
            proc: Proc { child },
            url: format!("http://127.0.0.1:{port}"),
            ws_url: format!("ws://127.0.0.1:{port}"),
            datadir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if answers_chain_id(&node.url).await {
                return node;
            }
            let exited = node.proc.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() >= deadline {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                panic!(
                    "{} did not come up on port {port} ({}):\n{}",
                    flavour.name(),
                    exited.map_or("still running".to_string(), |s| s.to_string()),
                    tail.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The node's log so far (its stderr), for a failing test to show.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.datadir.path.join("node.log")).unwrap_or_default()
    }
}

/// `binary --dev dumpgenesis` with anvil's chain id and accounts.
fn dev_genesis(binary: &std::path::Path) -> serde_json::Value {
    let out = Command::new(binary)
        .args(["--dev", "dumpgenesis"])
        .output()
        .expect("spawn geth dumpgenesis");
    assert!(
        out.status.success(),
        "dumpgenesis failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut genesis: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("dumpgenesis printed JSON");
    let config = genesis["config"].as_object_mut().expect("genesis config");
    config.insert("chainId".into(), 31337.into());
    // The forks mainnet runs, no further: `--dev` also turns on the fork in
    // development (geth 1.17's Bogota, whose storage writes cost several
    // times Osaka's), which no production chain runs.
    config.retain(|key, _| {
        !key.ends_with("Time")
            || ["shanghaiTime", "cancunTime", "pragueTime", "osakaTime"].contains(&key.as_str())
    });
    let alloc = genesis["alloc"].as_object_mut().expect("genesis alloc");
    for account in ANVIL_ACCOUNTS {
        // 10,000 ether, as anvil gives.
        alloc.insert(
            account.to_string(),
            serde_json::json!({"balance": "0x21e19e0c9bab2400000"}),
        );
    }
    // A billion ether for [`fund`].
    alloc.insert(
        format!("{}", Eoa::from_key(FUNDER).address),
        serde_json::json!({"balance": "0x33b2e3c9fd0803ce8000000"}),
    );
    genesis
}

/// The node an end-to-end suite runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// anvil, the development node (the default of every suite).
    Anvil,
    /// `geth --dev` (see [`Geth`]), the node sequencers run.
    Geth,
}

/// A running node of either kind, as a suite that runs on both uses it.
pub struct Node {
    pub proc: Proc,
    /// The HTTP endpoint (its WebSocket is on the same port, on both
    /// kinds).
    pub url: String,
    /// geth's data directory, removed on drop.
    _datadir: Option<TempDir>,
}

impl Node {
    /// A fresh node of `kind` on a free port, with anvil's ten accounts.
    pub async fn start(kind: NodeKind) -> Node {
        match kind {
            NodeKind::Anvil => {
                let Anvil { proc, url } = Anvil::start().await;
                Node {
                    proc,
                    url,
                    _datadir: None,
                }
            }
            NodeKind::Geth => {
                let Geth {
                    proc, url, datadir, ..
                } = Geth::start().await;
                Node {
                    proc,
                    url,
                    _datadir: Some(datadir),
                }
            }
        }
    }
}

/// Makes each named `async fn name(kind: NodeKind)` a module of two tests,
/// `name::anvil` and `name::geth`, each a multi-threaded tokio test: one
/// suite, proved against the development node and the node sequencers run.
macro_rules! on_each_node {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread")]
                async fn anvil() {
                    super::$name($crate::support::NodeKind::Anvil).await
                }

                #[tokio::test(flavor = "multi_thread")]
                async fn geth() {
                    super::$name($crate::support::NodeKind::Geth).await
                }
            }
        )*
    };
}
pub(crate) use on_each_node;

/// The key geth's [`fund`] and [`mine`] send from: an account of
/// [`Geth`]'s genesis (a billion ether) that no test signs with.
const FUNDER: &str = "0x000000000000000000000000000000000000000000000000000000000000f00d";

/// One funding at a time in this process: each takes its nonces from the
/// node's pending count, which two at once on one node would share.
static FUNDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether the node at `url` is anvil (its `web3_clientVersion` says so);
/// otherwise it is a geth.
async fn is_anvil(url: &str) -> bool {
    let (_, version) = rpc_json(
        url,
        r#"{"jsonrpc":"2.0","id":1,"method":"web3_clientVersion","params":[]}"#,
    )
    .await;
    version["result"]
        .as_str()
        .is_some_and(|v| v.starts_with("anvil"))
}

/// Gives every address 100 ether: on anvil by `anvil_setBalance`, in one
/// batch; on geth by a transfer to each from [`FUNDER`], sent in one batch
/// and waited for until every one is mined.
pub async fn fund(url: &str, addresses: &[alloy_primitives::Address]) {
    const HUNDRED_ETHER: u128 = 100_000_000_000_000_000_000;
    if is_anvil(url).await {
        let calls: Vec<serde_json::Value> = addresses
            .iter()
            .enumerate()
            .map(|(i, a)| {
                serde_json::json!({"jsonrpc": "2.0", "id": i, "method": "anvil_setBalance",
                    "params": [format!("{a}"), format!("{HUNDRED_ETHER:#x}")]})
            })
            .collect();
        let (status, body) = rpc_json(url, &serde_json::Value::Array(calls).to_string()).await;
        assert_eq!(status, StatusCode::OK);
        for answer in body.as_array().expect("batch answer") {
            assert!(answer.get("error").is_none(), "{answer}");
        }
        return;
    }
    let transfers: Vec<(alloy_primitives::Address, u128)> =
        addresses.iter().map(|a| (*a, HUNDRED_ETHER)).collect();
    transfer_from_funder(url, &transfers).await;
}

/// Has the node seal a block: `evm_mine` on anvil; on geth (which seals
/// when a transaction is pending) a transfer of nothing from [`FUNDER`] to
/// itself, waited for until it is mined.
pub async fn mine(url: &str) {
    if is_anvil(url).await {
        let (_, answer) = rpc_json(
            url,
            r#"{"jsonrpc":"2.0","id":1,"method":"evm_mine","params":[]}"#,
        )
        .await;
        assert!(answer.get("error").is_none(), "evm_mine: {answer}");
        return;
    }
    let funder = Eoa::from_key(FUNDER);
    transfer_from_funder(url, &[(funder.address, 0)]).await;
}

/// Sends each `(to, wei)` from [`FUNDER`] on geth in one batch, with
/// consecutive nonces from its pending count, and waits for every receipt.
async fn transfer_from_funder(url: &str, transfers: &[(alloy_primitives::Address, u128)]) {
    let _one_at_a_time = FUNDING.lock().await;
    let funder = Eoa::from_key(FUNDER);
    let (_, count) = rpc_json(
        url,
        &serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getTransactionCount",
            "params": [format!("{}", funder.address), "pending"]})
        .to_string(),
    )
    .await;
    let first = u64::from_str_radix(
        count["result"]
            .as_str()
            .expect("a pending count")
            .trim_start_matches("0x"),
        16,
    )
    .expect("a hex count");
    let mut hashes = Vec::with_capacity(transfers.len());
    for (i, (to, wei)) in transfers.iter().enumerate() {
        let raw = funder.sign(first + i as u64, *to, &[], *wei, 1_000_000_000);
        let answer = send_raw(url, &raw).await;
        assert_eq!(answer.0, StatusCode::OK, "{}", answer.1);
        let hash = answer.1["result"]
            .as_str()
            .unwrap_or_else(|| panic!("funding refused: {}", answer.1))
            .to_string();
        hashes.push(hash);
    }
    for hash in hashes {
        let mined = receipt(url, &hash, Duration::from_secs(20)).await;
        assert_eq!(mined["status"], "0x1", "{mined}");
    }
    // A receipt is readable as soon as its block is on the chain, a moment
    // before geth's pool has taken that block in: until then the pool still
    // holds the transfers and judges the funded accounts by their old
    // balances ("insufficient funds"). Done when the pool has let go of them.
    let held = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "txpool_contentFrom",
        "params": [format!("{}", funder.address)]})
    .to_string();
    let last = std::sync::Mutex::new(serde_json::Value::Null);
    let settled = eventually(Duration::from_secs(10), || async {
        let (_, answer) = rpc_json(url, &held).await;
        *last.lock().unwrap() = answer.clone();
        let empty = |part: &str| {
            answer["result"][part]
                .as_object()
                .is_some_and(|txs| txs.is_empty())
        };
        empty("pending") && empty("queued")
    })
    .await;
    assert!(
        settled,
        "geth's pool still holds the funder's transfers: {}",
        last.lock().unwrap()
    );
}
