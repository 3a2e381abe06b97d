//! A global allocator that puts large blocks on transparent huge pages.
//!
//! The buffers of a training step are tens to hundreds of megabytes (C2's logits 45 MB, its
//! parameters, gradient and Adam moments 72 MB each; C3's gates 400 MB), and the GEMMs walk
//! them along strides of many kilobytes: on 4 KiB pages nearly every row of a block is its own
//! TLB entry. Linux gives 2 MiB pages only to memory that asks for them (this machine's
//! `transparent_hugepage/enabled` is `madvise`), so blocks from [`MIN`] bytes up are mapped
//! here directly, aligned to 2 MiB and advised `MADV_HUGEPAGE` before they are first touched;
//! smaller ones go to the system allocator. It trains every shape faster, at the cost of up
//! to one huge page more per large block (docs/benchmarks.md, "Large blocks on huge pages").
//!
//! The blocks come straight from `mmap`, so they are zero without being written (a large
//! `vec![0.0; n]` costs no pass), and `munmap` returns them whole. Elsewhere than Linux this is
//! the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks from this size up are mapped on huge pages.
pub const MIN: usize = 4 << 20;
/// The huge page size (x86-64 and most arm64 kernels).
const HUGE: usize = 2 << 20;

/// The allocator; the `rnnlens` binary installs it with `#[global_allocator]`.
pub struct HugePages;

#[cfg(target_os = "linux")]
impl HugePages {
    /// Whether a block of this layout is mapped here: large, and aligned no more strictly
    /// than a huge page.
    fn mapped(l: Layout) -> bool {
        l.size() >= MIN && l.align() <= HUGE
    }

    /// The length mapped for `size` bytes: whole huge pages.
    fn span(size: usize) -> usize {
        size.div_ceil(HUGE) * HUGE
    }

    /// A zeroed block of `span(size)` bytes on a 2 MiB boundary, advised onto huge pages, or
    /// null when the kernel refuses the mapping.
    unsafe fn map(size: usize) -> *mut u8 {
        let len = Self::span(size);
        // SAFETY: an anonymous private mapping asks nothing of existing memory; the head and
        // tail trimmed below lie inside it, and the advice is about the range kept.
        unsafe {
            // Map one huge page more than needed, then cut to the 2 MiB boundary.
            let raw = libc::mmap(std::ptr::null_mut(), len + HUGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            if raw == libc::MAP_FAILED {
                return std::ptr::null_mut();
            }
            let start = raw as usize;
            let aligned = start.next_multiple_of(HUGE);
            let head = aligned - start;
            if head > 0 {
                libc::munmap(raw, head);
            }
            let tail = HUGE - head;
            if tail > 0 {
                libc::munmap((aligned + len) as *mut libc::c_void, tail);
            }
            // Advice only: without huge pages the block still works on small ones.
            libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            aligned as *mut u8
        }
    }
}

#[cfg(target_os = "linux")]
// SAFETY: blocks are either the system allocator's (small layouts, passed through with the
// same layout) or whole mappings of `span(size)` bytes made by `map` and unmapped by `dealloc`,
// chosen by `mapped(layout)`, which is the same for a block's allocation and its release.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: as the trait requires of the caller.
        unsafe { if Self::mapped(l) { Self::map(l.size()) } else { System.alloc(l) } }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above; a fresh anonymous mapping reads as zeros.
        unsafe { if Self::mapped(l) { Self::map(l.size()) } else { System.alloc_zeroed(l) } }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `alloc` with this layout (the trait's contract).
        unsafe {
            if Self::mapped(l) {
                libc::munmap(p as *mut libc::c_void, Self::span(l.size()));
            } else {
                System.dealloc(p, l)
            }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the trait's contract: `p` is a block of layout `l`, and `new_size` with
        // `l.align()` is a valid layout.
        unsafe {
            let new = Layout::from_size_align_unchecked(new_size, l.align());
            match (Self::mapped(l), Self::mapped(new)) {
                (false, false) => System.realloc(p, l, new_size),
                // Growing within the mapped span needs nothing.
                (true, true) if Self::span(new_size) == Self::span(l.size()) => p,
                _ => {
                    let q = self.alloc(new);
                    if !q.is_null() {
                        std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size));
                        self.dealloc(p, l);
                    }
                    q
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
// SAFETY: every call is the system allocator's.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        unsafe { System.realloc(p, l, new_size) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_zeroed_aligned_and_keep_their_contents_through_realloc() {
        let a = HugePages;
        for (size, align) in [(MIN, 4), (MIN + 12_345, 64), (MIN - 8, 8), (3 * HUGE + 1, 4096)] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: the layouts are valid and non-zero; every access is inside the block.
            unsafe {
                let p = a.alloc_zeroed(l);
                assert!(!p.is_null() && (p as usize).is_multiple_of(align), "{size}: {p:?}");
                // Large blocks are this allocator's own mappings, on huge-page boundaries.
                #[cfg(target_os = "linux")]
                assert_eq!(size >= MIN, (p as usize).is_multiple_of(HUGE), "{size}: {p:?}");
                let s = std::slice::from_raw_parts_mut(p, size);
                assert!(s.iter().all(|&b| b == 0), "{size}: not zeroed");
                for (i, b) in s.iter_mut().enumerate() {
                    *b = (i % 251) as u8;
                }
                // Across the threshold and within a mapped span, up and down.
                let mut cur = (p, l);
                for new_size in [size + 1, size + 3 * HUGE, MIN - 100, size] {
                    let q = a.realloc(cur.0, cur.1, new_size);
                    assert!(!q.is_null() && (q as usize).is_multiple_of(align), "{size} -> {new_size}");
                    let kept = size.min(cur.1.size()).min(new_size);
                    let t = std::slice::from_raw_parts(q, kept);
                    assert!(t.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "{size} -> {new_size}: contents lost");
                    cur = (q, Layout::from_size_align(new_size, align).unwrap());
                }
                a.dealloc(cur.0, cur.1);
            }
        }
    }
}
