//! txgate's process allocator: jemalloc, and its transparent huge page
//! mode.
//!
//! Linking this crate (`use txgate_alloc as _;`) makes jemalloc the global
//! allocator. The daemon links it, and so do the benches that measure the
//! screening tables, so that they measure what the daemon runs.
//!
//! Huge pages are an operator's choice, off by default (on a kernel in the
//! common `madvise` mode; a kernel in `always` mode gives them anyway
//! unless `_RJEM_MALLOC_CONF=thp:never` is set): with
//! `_RJEM_MALLOC_CONF=thp:always` in txgate's environment, jemalloc asks the
//! kernel for transparent huge pages (`madvise(MADV_HUGEPAGE)`) on all the
//! memory it maps. At a million bans the screening state is about 160 MB
//! of hash tables and bloom counters, touched at random; on 2 MiB pages it
//! needs about 80 TLB entries instead of forty thousand, and applying 1000
//! invalidations at 1M bans took 0.81× the time (1.13 against 1.39 ms, the
//! same binary in interleaved rounds). They are not the default because
//! of what they do to resident memory: 10 MB more at idle, and in the
//! 30-minute soak RSS stepped up by 2 MiB at a time past the soak's bound
//! on growth (+5.75% against 5%), partly outside jemalloc's own count,
//! most likely the kernel's khugepaged filling 2 MiB ranges jemalloc had
//! partly given back (PERFORMANCE.md, "Invalidations at scale";
//! HEURISTICS.md, "Huge pages").

#![cfg(not(target_env = "msvc"))]

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The transparent huge page mode jemalloc runs with (`opt.thp`):
/// `default` (the kernel's choice) unless the environment set it, `not
/// supported` when the kernel has no transparent huge pages. `None` if it
/// cannot be read.
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

    /// Set in the child process of
    /// `opting_in_puts_a_large_table_on_huge_pages`.
    const CHILD: &str = "TXGATE_ALLOC_TEST_CHILD";

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
    fn jemalloc_leaves_huge_pages_to_the_kernel_unless_asked() {
        if std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        // jemalloc says "not supported" where it cannot read the kernel's
        // mode (a kernel without THP); anywhere else it leaves the pages to
        // the kernel.
        let expected = match system_thp_mode() {
            Some(_) => "default",
            None => "not supported",
        };
        assert_eq!(thp_mode().as_deref(), Some(expected));
    }

    #[test]
    fn opting_in_puts_a_large_table_on_huge_pages() {
        if std::env::var_os(CHILD).is_some() || std::env::var_os("_RJEM_MALLOC_CONF").is_some() {
            return;
        }
        // jemalloc reads its environment once, at start: the opted-in
        // process is a child, this test binary again, running only the
        // half below.
        let exe = std::env::current_exe().expect("test binary");
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "tests::child_touches_a_large_table",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD, "1")
            .env("_RJEM_MALLOC_CONF", "thp:always")
            .output()
            .expect("child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The opted-in half of `opting_in_puts_a_large_table_on_huge_pages`;
    /// outside that child it returns at once.
    #[test]
    fn child_touches_a_large_table() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        let system = system_thp_mode();
        let expected = if system.is_some() {
            "always"
        } else {
            "not supported"
        };
        assert_eq!(thp_mode().as_deref(), Some(expected));
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
