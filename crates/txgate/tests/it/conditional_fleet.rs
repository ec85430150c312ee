//! The conditional calls' rate of lookups held for a fleet through a real
//! redis-server: two instances, one rate.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::conditional::{call, conditional_calls, entry_point};
use crate::fleet_redis::{RedisServer, all_links, allowed};
use crate::support::{
    Eoa, RecordingUpstream, TempFile, Txgate, eventually, free_port, metric, post,
};

/// 10 lookups a second with a burst of 10 for the whole fleet (and the
/// whole of it for each instance while Redis is away, so only the fleet
/// sync can hold the bound); calls of
/// cost 1 sent to two instances in turn, 40 a second for 3 s: the fleet
/// admits what one bucket allows (plus at most one sync interval's
/// overshoot per extra instance), not twice that; and not much less.
#[tokio::test(flavor = "multi_thread")]
async fn two_instances_share_one_rate_of_lookups() {
    let node = RecordingUpstream::start().await;
    let redis = RedisServer::start(free_port());
    // Redis' timeout is set far above a sync's time on a loaded machine:
    // a sync that merely ran late would count as an error and take the
    // link down, which the test does not claim about.
    let config = TempFile::new(&format!(
        "[conditional]\nrate_per_sec = 10\nburst = 10\n\
         [redis]\nurl = \"{}\"\nsync_interval_ms = 20\ntimeout_ms = 2000\nlocal_share = 1.0\n",
        redis.url()
    ));
    let fleet: Vec<Txgate> = (0..2)
        .map(|_| Txgate::start(&node.url, &["-c", config.arg()]))
        .collect();
    let admins: Vec<SocketAddr> = fleet
        .iter()
        .map(|t| t.admin_url.trim_start_matches("http://").parse().unwrap())
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || all_links(&admins, "up")).await,
        "every instance syncs with Redis"
    );
    let raw = Eoa::new(801).sign(0, entry_point(), &[1, 2, 3, 4], 0, 1_000_000_000);
    let body = call(json!(1), &raw, json!({"blockNumberMax": "0xffff"}));

    const SENT: u32 = 120;
    let (mut ok, mut limited) = (0usize, 0usize);
    let every = Duration::from_millis(25);
    let mut sent_at = Vec::new();
    let start = Instant::now();
    for i in 0..SENT {
        let url = &fleet[i as usize % 2].url;
        sent_at.push(start.elapsed());
        let (status, _, bytes) = post(url, Some("application/json"), body.clone())
            .await
            .unwrap();
        match status.as_u16() {
            200 => ok += 1,
            429 => limited += 1,
            other => panic!("{other}: {}", String::from_utf8_lossy(&bytes)),
        }
        tokio::time::sleep((start + every * (i + 1)).saturating_duration_since(Instant::now()))
            .await;
    }
    let secs = start.elapsed().as_secs_f64();
    // One bucket: burst + rate × time; one more instance may overshoot by
    // its burst and one sync interval's rate before the fleet's debt
    // reaches it. And not much less than the rate, or than one bucket
    // admits of what was offered (past its burst) when a loaded machine
    // sent fewer calls, or sent them unevenly.
    let most = allowed(10, 10.0, secs) + 10 + 1;
    let offered = one_bucket(&sent_at, 10.0, 10.0).saturating_sub(10) as f64;
    let least = ((10.0 * secs).min(offered) * 0.8) as usize;
    assert!(
        (least..=most).contains(&ok),
        "{ok} admitted in {secs:.2} s (fleet bucket allows {least}..={most}), {limited} limited"
    );
    assert_eq!(ok + limited, SENT as usize);
    assert_eq!(conditional_calls(&node).len(), ok);
    // Held by the fleet, not by each instance alone: with local_share 1.0
    // two instances on their own would admit twice the bucket, so the
    // bound above fails unless the link was up the whole run.
    for t in &fleet {
        let m = t.metrics().await;
        assert!(metric(&m, "txgate_redis_syncs_total{result=\"ok\"}") > 0.0);
        assert_eq!(
            metric(&m, "txgate_redis_syncs_total{result=\"error\"}"),
            0.0
        );
        assert_eq!(metric(&m, "txgate_redis_up"), 1.0);
    }
}

/// How many of the calls sent at `times` (from the start) one bucket of
/// `rate` a second with a burst of `burst` admits (GCRA, as txgate's
/// buckets count).
fn one_bucket(times: &[Duration], rate: f64, burst: f64) -> usize {
    let (interval, tolerance) = (1.0 / rate, burst / rate);
    let mut tat = 0.0f64;
    times
        .iter()
        .filter(|t| {
            let t = t.as_secs_f64();
            let next = tat.max(t) + interval;
            // A hair of slack for the float sums of intervals.
            let fits = next - t <= tolerance + 1e-9;
            if fits {
                tat = next;
            }
            fits
        })
        .count()
}
