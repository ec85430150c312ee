//! The allocator: jemalloc (set up in `txgate-alloc`; huge pages with
//! `_RJEM_MALLOC_CONF=thp:always`), and what it holds as metrics.
//!
//! jemalloc, not the C library's allocator: it gives freed pages back to the
//! system after a few seconds (its decay), where glibc's arenas kept what an
//! invalidation storm's short-lived buffers had used (see the soak in
//! RELIABILITY.md).
//!
//! `txgate_allocator_bytes{kind}` is read from jemalloc's statistics at each
//! scrape, so that resident memory can be told apart from what the program
//! holds: `allocated` (bytes the program holds), `active` (pages holding
//! them), `resident` (pages the allocator has resident, its metadata
//! included), `mapped`, `retained` (address space kept for reuse, not
//! resident) and `metadata`. A growing `resident` over a flat `allocated`
//! is the allocator; a growing `allocated` is the program.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts, Registry};
use tikv_jemalloc_ctl::{epoch, stats};

/// Reads one of jemalloc's statistics.
type Read = fn() -> tikv_jemalloc_ctl::Result<usize>;

/// The statistics read at each scrape.
const KINDS: [(&str, Read); 6] = [
    ("allocated", stats::allocated::read),
    ("active", stats::active::read),
    ("resident", stats::resident::read),
    ("mapped", stats::mapped::read),
    ("retained", stats::retained::read),
    ("metadata", stats::metadata::read),
];

/// A collector that reads jemalloc's statistics when gathered.
struct AllocatorStats {
    bytes: IntGaugeVec,
}

impl Collector for AllocatorStats {
    fn desc(&self) -> Vec<&Desc> {
        self.bytes.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // jemalloc caches its statistics until the epoch advances. A
        // statistic that cannot be read keeps its last value.
        if epoch::advance().is_ok() {
            for (kind, read) in KINDS {
                if let Ok(bytes) = read() {
                    self.bytes
                        .with_label_values(&[kind])
                        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
                }
            }
        }
        self.bytes.collect()
    }
}

/// Adds `txgate_allocator_bytes{kind}` to `registry`. A registry that
/// refuses it (a name taken) only loses the series; txgate runs on.
///
/// Logs the huge page modes once: jemalloc's and the kernel's.
pub(crate) fn register(registry: &Registry) {
    tracing::info!(
        huge_pages = txgate_alloc::thp_mode().as_deref().unwrap_or("unknown"),
        kernel = txgate_alloc::system_thp_mode()
            .as_deref()
            .unwrap_or("unknown"),
        "allocator: jemalloc"
    );
    let opts = Opts::new(
        "allocator_bytes",
        "Bytes the memory allocator (jemalloc) reports, by kind: allocated (held by txgate), \
         active, resident, mapped, retained (kept for reuse, not resident), metadata",
    );
    let Ok(bytes) = IntGaugeVec::new(opts, &["kind"]) else {
        return;
    };
    if let Err(e) = registry.register(Box::new(AllocatorStats { bytes })) {
        tracing::warn!(error = %e, "allocator metrics not registered");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_read_and_allocated_follows_what_is_held() {
        let registry = Registry::new_custom(Some("txgate".into()), None).unwrap();
        register(&registry);
        let allocated = |registry: &Registry| -> i64 {
            let families = registry.gather();
            let family = families
                .iter()
                .find(|f| f.name() == "txgate_allocator_bytes")
                .expect("registered");
            assert_eq!(family.get_metric().len(), KINDS.len());
            family
                .get_metric()
                .iter()
                .find(|m| m.get_label()[0].value() == "allocated")
                .map(|m| m.get_gauge().get_value() as i64)
                .expect("allocated")
        };
        let before = allocated(&registry);
        let held = vec![1u8; 64 << 20];
        let during = allocated(&registry);
        assert!(
            during - before >= 60 << 20,
            "64 MiB held: allocated {before} -> {during}"
        );
        drop(held);
        assert!(allocated(&registry) < during - (60 << 20));
    }
}
