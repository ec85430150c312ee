//! Allocations of 2 MiB and more: each its own mapping, on huge pages.
//!
//! The screening state's big tables (the denied set's shards at a million
//! bans, the bloom's counters, the recent-failure maps) are probed at
//! random, and on 4 KiB pages nearly every probe also misses the TLB. So
//! every allocation of at least [`LARGE`] bytes gets an anonymous mapping of
//! its own, 2 MiB aligned and marked `MADV_HUGEPAGE` (the kernel's
//! `madvise` mode, the common default, then backs it with 2 MiB pages), and
//! is unmapped when freed. A table that grows moves with `mremap`, without
//! a copy. Everything smaller goes to jemalloc, which leaves page sizes to
//! the kernel.
//!
//! Why not jemalloc's `thp:always`: it marks every range jemalloc maps,
//! small allocations' included, and after jemalloc gives part of a range
//! back the kernel's khugepaged fills it again: RSS crept in the soak. A
//! mapping here holds one allocation and nothing else, and a freed one is
//! gone at once.
//!
//! The cost: a mapping and an unmapping per large allocation (a table's
//! growth step, a large answer's buffer), a few microseconds each, against
//! the milliseconds it takes to fill 2 MiB. A table on huge pages is
//! resident 2 MiB at a time once touched; the tables here are filled
//! throughout, so that is what they hold anyway.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Allocations of this size and above are mapped on their own.
pub const LARGE: usize = 2 << 20;

/// The huge page size on x86-64 and arm64 with 4 KiB base pages; with other
/// base pages the mapping is still aligned to it, which does no harm.
const HUGE_PAGE: usize = 2 << 20;

/// Whether new large mappings are marked for huge pages.
static HUGE_PAGES: AtomicBool = AtomicBool::new(true);

/// Bytes held in large mappings (rounded up to whole pages).
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// The base page size, read once.
static PAGE: AtomicUsize = AtomicUsize::new(0);

/// Marks the large mappings made from now on for huge pages (the default)
/// or not. Mappings already made keep what they had.
pub fn set_huge_pages(on: bool) {
    HUGE_PAGES.store(on, Ordering::Relaxed);
}

/// Whether large mappings are marked for huge pages.
#[must_use]
pub fn huge_pages() -> bool {
    HUGE_PAGES.load(Ordering::Relaxed)
}

/// Bytes held in allocations of [`LARGE`] bytes or more (whole pages):
/// outside jemalloc's statistics.
#[must_use]
pub fn large_bytes() -> usize {
    MAPPED.load(Ordering::Relaxed)
}

fn page() -> usize {
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf has no preconditions.
            #[allow(unsafe_code)]
            let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let size = usize::try_from(size)
                .ok()
                .filter(|s| s.is_power_of_two())
                .unwrap_or(4096);
            PAGE.store(size, Ordering::Relaxed);
            size
        }
        size => size,
    }
}

/// `n` rounded up to a multiple of `to` (a power of two); `None` on
/// overflow.
fn round_up(n: usize, to: usize) -> Option<usize> {
    Some(n.checked_add(to - 1)? & !(to - 1))
}

/// Whether an allocation of `layout` is one of ours. The same answer for
/// its allocation and its release: it depends on the layout alone.
fn is_large(layout: &Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= page()
}

/// The length of the mapping that holds `size` bytes: whole pages, and one
/// more for the colour offset.
fn mapping_len(size: usize) -> Option<usize> {
    round_up(size, page())?.checked_add(page())
}

/// The start of the mapping that holds the allocation at `ptr`: the page
/// it starts in (its colour offset is less than a page).
fn start_of(ptr: *mut u8) -> *mut u8 {
    ptr.wrapping_sub(ptr as usize & (page() - 1))
}

/// Mappings made so far, to pick the next one's colour.
static MAPPINGS: AtomicUsize = AtomicUsize::new(0);

/// Where in its first page the next large allocation starts: one of 64
/// cache-line offsets, spread by a multiplicative hash of a counter (a
/// multiple of `align`, which is at most a page). Without it every large
/// table would start 2 MiB aligned, and the same offsets in tables of the
/// same size (the 64 shards' control bytes) would compete for the same
/// cache sets; jemalloc randomises its large allocations' starts for the
/// same reason.
fn colour(align: usize) -> usize {
    let n = MAPPINGS.fetch_add(1, Ordering::Relaxed) as u64;
    let line = (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize;
    (line * 64) & (page() - 1) & !(align.max(1) - 1)
}

/// jemalloc, with allocations of [`LARGE`] bytes and more mapped on their
/// own (see the module docs).
pub struct Allocator;

#[allow(unsafe_code)]
mod imp {
    use super::*;
    use tikv_jemallocator::Jemalloc;

    /// A fresh mapping for `size` bytes, 2 MiB aligned, marked for huge
    /// pages if they are on; the allocation starts at a colour offset
    /// into its first page. Null if the system refuses it.
    fn map(size: usize, align: usize) -> *mut u8 {
        let Some(len) = mapping_len(size) else {
            return null_mut();
        };
        let Some(span) = len.checked_add(HUGE_PAGE) else {
            return null_mut();
        };
        // SAFETY: a new private anonymous mapping; no existing memory is
        // touched.
        let raw = unsafe {
            libc::mmap(
                null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return null_mut();
        }
        let raw = raw as usize;
        // `span` leaves room for a 2 MiB aligned start; the slack on either
        // side goes back.
        let start = (raw + HUGE_PAGE - 1) & !(HUGE_PAGE - 1);
        let (head, tail) = (start - raw, span - (start - raw) - len);
        // SAFETY: both ranges are whole pages of the mapping just made,
        // outside the part kept.
        unsafe {
            if head > 0 {
                libc::munmap(raw as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        if huge_pages() {
            // A hint: a kernel without transparent huge pages refuses it,
            // and the mapping works on base pages.
            // SAFETY: the range is the mapping just made.
            unsafe {
                libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            }
        }
        MAPPED.fetch_add(len, Ordering::Relaxed);
        (start + colour(align)) as *mut u8
    }

    /// Unmaps what [`map`] (or [`remap`]) gave for `size` bytes.
    ///
    /// # Safety
    /// `ptr` and `size` are a live large allocation's.
    unsafe fn unmap(ptr: *mut u8, size: usize) {
        let len = mapping_len(size).unwrap_or(size);
        // SAFETY: the caller's: the mapping starts at the page `ptr` is in.
        unsafe {
            libc::munmap(start_of(ptr).cast(), len);
        }
        MAPPED.fetch_sub(len, Ordering::Relaxed);
    }

    /// Resizes a large allocation in place or by moving its pages (no
    /// copy); the mapping keeps its huge page mark. Null if the system
    /// refuses it (the old allocation stands).
    ///
    /// # Safety
    /// `ptr` and `old` are a live large allocation's.
    unsafe fn remap(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
        let (Some(old_len), Some(new_len)) = (mapping_len(old), mapping_len(new)) else {
            return null_mut();
        };
        if old_len == new_len {
            return ptr;
        }
        let start = start_of(ptr);
        // SAFETY: the caller's; MREMAP_MAYMOVE lets the kernel pick the
        // new address. The pages move whole, so the allocation keeps its
        // offset into the first.
        let moved = unsafe { libc::mremap(start.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
        if moved == libc::MAP_FAILED {
            return null_mut();
        }
        MAPPED.fetch_add(new_len, Ordering::Relaxed);
        MAPPED.fetch_sub(old_len, Ordering::Relaxed);
        // SAFETY: the offset is less than a page, inside the mapping.
        unsafe { moved.cast::<u8>().add(ptr as usize - start as usize) }
    }

    // SAFETY: large layouts are served by whole mappings at least as large
    // and page aligned (so aligned as asked: `is_large` takes only
    // alignments up to a page); the rest by jemalloc. Which one served an
    // allocation follows from its layout alone, which the caller passes
    // back unchanged, so each allocation returns to its own allocator.
    unsafe impl GlobalAlloc for Allocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            if is_large(&layout) {
                map(layout.size(), layout.align())
            } else {
                // SAFETY: the caller's.
                unsafe { Jemalloc.alloc(layout) }
            }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            if is_large(&layout) {
                // A fresh anonymous mapping reads as zeros.
                map(layout.size(), layout.align())
            } else {
                // SAFETY: the caller's.
                unsafe { Jemalloc.alloc_zeroed(layout) }
            }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            if is_large(&layout) {
                // SAFETY: allocated by `map` or `remap` for this layout.
                unsafe { unmap(ptr, layout.size()) }
            } else {
                // SAFETY: the caller's.
                unsafe { Jemalloc.dealloc(ptr, layout) }
            }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: the caller guarantees `new_size`, rounded up to the
            // alignment, does not overflow isize.
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            match (is_large(&layout), is_large(&new_layout)) {
                // SAFETY: the caller's.
                (false, false) => unsafe { Jemalloc.realloc(ptr, layout, new_size) },
                // SAFETY: a large allocation of `layout.size()` bytes.
                (true, true) => unsafe { remap(ptr, layout.size(), new_size) },
                _ => {
                    // Across the threshold: a new home, then a copy.
                    // SAFETY: `new_layout` has a non-zero size (one side is
                    // large, the other the caller's non-zero size).
                    let new = unsafe { self.alloc(new_layout) };
                    if !new.is_null() {
                        // SAFETY: both live, distinct, at least this long.
                        unsafe {
                            std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                            self.dealloc(ptr, layout);
                        }
                    }
                    new
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The tests that look at mappings or the byte count run one at a
    /// time: each sees only its own large allocations.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The mapping that holds `addr`, from /proc/self/smaps: its start, end
    /// and the smaps lines that follow its header.
    fn mapping_of(addr: usize) -> Option<(usize, usize, String)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut lines = smaps.lines().peekable();
        while let Some(line) = lines.next() {
            let Some((range, _)) = line.split_once(' ') else {
                continue;
            };
            let Some((start, end)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            ) else {
                continue;
            };
            if (start..end).contains(&addr) {
                let mut body = String::new();
                while let Some(next) = lines.peek() {
                    if next.split_once(' ').is_some_and(|(r, _)| {
                        r.contains('-') && r.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
                    }) {
                        break;
                    }
                    body.push_str(lines.next().unwrap_or_default());
                    body.push('\n');
                }
                return Some((start, end, body));
            }
        }
        None
    }

    /// Whether the mapping at `addr` is marked for huge pages (`hg` among
    /// its VmFlags).
    fn marked(addr: usize) -> bool {
        let (_, _, body) = mapping_of(addr).expect("mapped");
        body.lines()
            .find_map(|l| l.strip_prefix("VmFlags:"))
            .is_some_and(|flags| flags.split_whitespace().any(|f| f == "hg"))
    }

    /// Whether the kernel has transparent huge pages at all.
    fn thp_supported() -> bool {
        crate::system_thp_mode().is_some()
    }

    #[test]
    fn a_large_allocation_is_a_mapping_of_its_own_aligned_and_marked() {
        let _serial = serial();
        let before = large_bytes();
        let table = vec![0u64; (8 << 20) / 8];
        let addr = table.as_ptr() as usize;
        assert_eq!(
            start_of(addr as *mut u8) as usize % HUGE_PAGE,
            0,
            "2 MiB aligned"
        );
        assert_eq!(addr % 64, 0, "a cache-line offset");
        assert_eq!(large_bytes() - before, (8 << 20) + page());
        let (start, end, _) = mapping_of(addr).expect("mapped");
        assert!(start <= addr && end >= addr + (8 << 20));
        if thp_supported() {
            assert!(marked(addr), "marked MADV_HUGEPAGE");
        }
        drop(table);
        assert_eq!(large_bytes(), before);
        // Unmapped: nothing is left at that address, or (another test's
        // allocation took it) not the same mapping.
        assert!(mapping_of(addr).is_none_or(|(s, e, _)| (s, e) != (start, end)));
    }

    #[test]
    fn small_allocations_stay_with_jemalloc() {
        let _serial = serial();
        let before = large_bytes();
        let small: Vec<Vec<u8>> = (0..64).map(|_| vec![1u8; LARGE - 1]).collect();
        assert_eq!(large_bytes(), before);
        assert!(small.iter().all(|v| v.len() == LARGE - 1));
    }

    #[test]
    fn growing_and_shrinking_across_the_threshold_keeps_the_bytes() {
        let _serial = serial();
        let before = large_bytes();
        let pattern = |i: usize| (i.wrapping_mul(2_654_435_761) >> 7) as u8;
        let mut v: Vec<u8> = Vec::with_capacity(1 << 20);
        let fill = |v: &mut Vec<u8>, to: usize| {
            let from = v.len();
            v.extend((from..to).map(pattern));
        };
        // Small, then large (a copy), then larger (mremap), then back.
        fill(&mut v, 1 << 20);
        assert_eq!(large_bytes(), before);
        v.reserve_exact((3 << 20) - v.len());
        fill(&mut v, 3 << 20);
        assert!(large_bytes() - before >= 3 << 20);
        v.reserve_exact((40 << 20) - v.len());
        fill(&mut v, 40 << 20);
        assert!(large_bytes() - before >= 40 << 20);
        if thp_supported() {
            assert!(
                marked(v.as_ptr() as usize),
                "a moved mapping keeps its mark"
            );
        }
        assert!(v.iter().enumerate().all(|(i, b)| *b == pattern(i)));
        v.truncate(5 << 20);
        v.shrink_to_fit();
        assert!(v.iter().enumerate().all(|(i, b)| *b == pattern(i)));
        v.truncate(1 << 20);
        v.shrink_to_fit();
        assert_eq!(large_bytes(), before, "back with jemalloc");
        assert!(v.iter().enumerate().all(|(i, b)| *b == pattern(i)));
    }

    #[test]
    fn huge_pages_off_leaves_new_mappings_unmarked() {
        let _serial = serial();
        set_huge_pages(false);
        let plain = vec![0u8; 4 << 20];
        set_huge_pages(true);
        let huge = vec![0u8; 4 << 20];
        assert!(!marked(plain.as_ptr() as usize));
        if thp_supported() {
            assert!(marked(huge.as_ptr() as usize));
        }
    }

    #[test]
    fn a_touched_large_table_is_resident_on_huge_pages() {
        let _serial = serial();
        if !matches!(
            crate::system_thp_mode().as_deref(),
            Some("always" | "madvise")
        ) {
            return;
        }
        let mut table = vec![0u8; 64 << 20];
        for i in (0..table.len()).step_by(4096) {
            table[i] = 1;
        }
        let (_, _, body) = mapping_of(table.as_ptr() as usize).expect("mapped");
        let huge_kb: u64 = body
            .lines()
            .find_map(|l| l.strip_prefix("AnonHugePages:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        std::hint::black_box(&table);
        // Huge pages come at fault time when the kernel has free 2 MiB
        // blocks, which a machine with memory to spare has; half the table
        // is the bar.
        assert!(
            huge_kb * 1024 >= 32 << 20,
            "64 MiB touched, {huge_kb} kB of it on huge pages"
        );
    }

    #[test]
    fn large_allocations_start_at_varied_cache_line_offsets() {
        let offsets: std::collections::HashSet<usize> = (0..64).map(|_| colour(16) / 64).collect();
        assert!(
            offsets.len() >= 32,
            "{} distinct offsets of 64",
            offsets.len()
        );
        assert!((0..64).all(|_| colour(page()) == 0));
        assert!((0..64).all(|_| {
            let c = colour(256);
            c.is_multiple_of(256) && c < page()
        }));
    }

    #[test]
    fn sizes_round_up_to_pages_and_refuse_overflow() {
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(usize::MAX - 10, 4096), None);
        assert!(is_large(&Layout::from_size_align(LARGE, 16).unwrap()));
        assert!(!is_large(&Layout::from_size_align(LARGE - 1, 16).unwrap()));
        assert!(!is_large(&Layout::from_size_align(LARGE, 1 << 22).unwrap()));
    }
}
