//! txgate's process allocator: jemalloc, with transparent huge pages.
//!
//! Linking this crate (`use txgate_alloc as _;`) makes jemalloc the global
//! allocator and sets its `thp:always` option: jemalloc asks the kernel for
//! transparent huge pages (`madvise(MADV_HUGEPAGE)`) on the memory it maps.
//! The daemon links it, and so do the benches that measure the screening
//! tables, so that they measure what the daemon runs.
//!
//! Why huge pages: at a million bans the screening state is about 160 MB of
//! hash tables and bloom counters, touched at random. With 4 KiB pages
//! nearly every probe also misses the TLB and walks the page tables; with
//! 2 MiB pages the whole state is about 80 TLB entries. Applying 1000
//! invalidations at 1M bans took 1.39 ms with 4 KiB pages and 1.13 ms with
//! huge pages, the same binary in interleaved rounds (PERFORMANCE.md,
//! "Invalidations at scale"). The cost is memory rounded up to 2 MiB where
//! the allocator has touched a region: about 10 MB more resident at idle on
//! two cores, more with more threads (jemalloc keeps up to four arenas per
//! core, each growing by 2 MiB at least).
//!
//! The kernel decides in the end. In its `madvise` mode (the common
//! default) this option is what turns huge pages on; in `always` mode the
//! kernel gives them anyway; in `never` mode nothing can. An operator who
//! wants 4 KiB pages sets `_RJEM_MALLOC_CONF=thp:never` in txgate's
//! environment (jemalloc then marks its memory `MADV_NOHUGEPAGE`, which
//! holds in the kernel's `always` mode too): the environment is read after
//! this built-in setting and overrides it.

#![cfg(not(target_env = "msvc"))]

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's built-in options, as a C string.
const CONF: &[u8; 11] = b"thp:always\0";

/// jemalloc reads its options from this symbol (its `malloc_conf`, under
/// the prefix tikv-jemalloc-sys builds it with) when it starts, before the
/// environment's `_RJEM_MALLOC_CONF`. jemalloc declares it weak; this
/// definition takes its place. A reference to a byte array is one pointer,
/// the `const char *` jemalloc reads.
#[allow(unsafe_code, non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static malloc_conf: &[u8; 11] = CONF;

/// The transparent huge page mode jemalloc runs with (`opt.thp`):
/// `always` unless the environment overrode it, `not supported` when the
/// kernel has no transparent huge pages. `None` if it cannot be read.
#[must_use]
pub fn thp_mode() -> Option<String> {
    // SAFETY: `opt.thp` is a `const char *` option, which is what
    // `read_str` reads; jemalloc keeps the string for the process's life.
    #[allow(unsafe_code)]
    let mode = unsafe { tikv_jemalloc_ctl::raw::read_str(b"opt.thp\0") }.ok()?;
    let mode = mode.strip_suffix(b"\0").unwrap_or(mode);
    Some(String::from_utf8_lossy(mode).into_owned())
}

/// The kernel's transparent huge page mode for this process's memory, from
/// `/sys/kernel/mm/transparent_hugepage/enabled`: `always`, `madvise` or
/// `never`. `None` where the file is absent or unreadable.
#[must_use]
pub fn system_thp_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident anonymous memory on huge pages, from smaps_rollup; `None`
    /// where the kernel does not report it.
    fn anon_huge_bytes() -> Option<u64> {
        let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
        text.lines()
            .find_map(|l| l.strip_prefix("AnonHugePages:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    }

    #[test]
    fn jemalloc_runs_with_the_built_in_option() {
        // The test harness runs without `_RJEM_MALLOC_CONF` unless someone
        // set it; then the built-in option is not what runs.
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        // jemalloc says "not supported" where it cannot read the kernel's
        // mode (a kernel without THP); anywhere else the option is read
        // back as set. An ignored symbol would read "default".
        let expected = match system_thp_mode() {
            Some(_) => "always",
            None => "not supported",
        };
        assert_eq!(thp_mode().as_deref(), Some(expected));
    }

    #[test]
    fn a_large_table_lands_on_huge_pages_when_the_kernel_allows_them() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        let system = system_thp_mode();
        let Some(before) = anon_huge_bytes() else {
            return;
        };
        // 64 MiB, touched page by page, as a table being filled is.
        let mut table = vec![0u8; 64 << 20];
        for i in (0..table.len()).step_by(4096) {
            table[i] = 1;
        }
        let during = anon_huge_bytes().unwrap_or(0);
        std::hint::black_box(&table);
        // Huge pages come at fault time in `always` and `madvise` modes
        // when the kernel has free 2 MiB blocks; a freshly started machine
        // with memory to spare has plenty. Half the table is the bar, not
        // all of it: its ends need not be 2 MiB aligned. In `never` mode, or
        // without THP, there is nothing to see; in `always` mode this holds
        // without the option too, so `madvise` is where it tests it.
        if matches!(system.as_deref(), Some("always" | "madvise")) {
            assert!(
                during.saturating_sub(before) >= 32 << 20,
                "64 MiB touched, huge pages {before} -> {during} bytes (kernel mode {system:?})"
            );
        }
    }

    #[test]
    fn the_kernel_mode_is_read_from_its_brackets() {
        // On a kernel with THP the file reads like "always [madvise] never".
        if let Some(mode) = system_thp_mode() {
            assert!(
                ["always", "madvise", "never"].contains(&mode.as_str()),
                "{mode}"
            );
        }
    }
}
