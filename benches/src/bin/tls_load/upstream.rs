//! Table 4, HTTPS upstream: kept cleartext connections calling txgate
//! with an https:// upstream and with an http:// one; calls/s and the CPU
//! of txgate and of nginx per call.

use std::time::{Duration, Instant};

use txgate_benches::procs::{client, post, tree_cpu_ms};
use txgate_benches::stats::median;

use crate::wire::CHAIN_ID;

/// `clients` kept cleartext connections calling `port` for `duration`:
/// calls/s, and the CPU of txgate and of nginx per call, µs.
async fn throughput(
    port: u16,
    clients: usize,
    duration: Duration,
    (txgate, nginx): (u32, u32),
) -> Rate {
    let url = format!("http://127.0.0.1:{port}");
    let http = client(clients);
    let deadline = Instant::now() + duration;
    let cpu_before = (tree_cpu_ms(txgate), tree_cpu_ms(nginx));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (http, url) = (http.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let (status, _) = post(&http, &url, CHAIN_ID.to_string()).await.unwrap();
                assert_eq!(status, 200);
                done += 1;
            }
            done
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    let per_call = |now: f64, before: f64| (now - before) * 1000.0 / total as f64;
    Rate {
        per_sec: total as f64 / duration.as_secs_f64(),
        txgate_us: per_call(tree_cpu_ms(txgate), cpu_before.0),
        nginx_us: per_call(tree_cpu_ms(nginx), cpu_before.1),
    }
}

/// Calls/s and CPU per call.
#[derive(Clone, Copy)]
struct Rate {
    per_sec: f64,
    txgate_us: f64,
    nginx_us: f64,
}

/// Runs and prints the HTTPS-upstream table: `reps` repetitions of
/// `clients` connections for `duration` to txgate with an https://
/// upstream (`to_https`: its port and process) and with an http:// one
/// (`to_http`), nginx (`nginx_pid`) answering both.
pub(crate) async fn table(
    to_https: (u16, u32),
    to_http: (u16, u32),
    nginx_pid: u32,
    clients: usize,
    duration: Duration,
    reps: usize,
) {
    let (mut https, mut http) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        // Alternate which goes first.
        let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            if which == 0 {
                let pids = (to_https.1, nginx_pid);
                https.push(throughput(to_https.0, clients, duration, pids).await);
            } else {
                let pids = (to_http.1, nginx_pid);
                http.push(throughput(to_http.0, clients, duration, pids).await);
            }
        }
        let (s, p) = (https[rep], http[rep]);
        println!(
            "  upstream rep {}: https {:.0} calls/s (CPU/call txgate {:.1} us, nginx {:.1} us), \
             http {:.0} calls/s (txgate {:.1} us, nginx {:.1} us)",
            rep + 1,
            s.per_sec,
            s.txgate_us,
            s.nginx_us,
            p.per_sec,
            p.txgate_us,
            p.nginx_us
        );
    }
    let ratio = |f: fn(&Rate) -> f64| {
        median(
            &https
                .iter()
                .zip(&http)
                .map(|(s, p)| f(s) / f(p))
                .collect::<Vec<_>>(),
        )
    };
    let col = |v: &[Rate], f: fn(&Rate) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    println!(
        "\n| upstream | calls/s | txgate CPU per call | nginx CPU per call |\n|---|---|---|---|\n\
         | https:// | {:.0} | {:.1} µs | {:.1} µs |\n| http:// | {:.0} | {:.1} µs | {:.1} µs |\n\
         https/http calls/s (median of per-rep ratios): {:.2}x (target >= 0.9x); \
         txgate CPU per call https/http: {:.2}x",
        col(&https, |r| r.per_sec),
        col(&https, |r| r.txgate_us),
        col(&https, |r| r.nginx_us),
        col(&http, |r| r.per_sec),
        col(&http, |r| r.txgate_us),
        col(&http, |r| r.nginx_us),
        ratio(|r| r.per_sec),
        ratio(|r| r.txgate_us)
    );
}
