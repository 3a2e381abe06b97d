//! The bf16 products of [`super::bf16`] on AMX (Intel's Advanced Matrix Extensions: tile
//! registers of up to 16 rows × 64 bytes and `TDPBF16PS`, which multiplies a 16 × 32 bf16
//! tile by a 32 × 16 one into 16 × 16 f32 accumulators in one instruction, 16 times the
//! multiply-adds of an AVX-512 `VDPBF16PS`).
//!
//! The operands are the bf16 kernel's own: `B`'s panels (for each depth pair the 16 columns'
//! pairs side by side: 64 bytes a row, the layout a `B` tile reads) and `A`'s rows converted
//! to pairs at a stride (a row of an `A` tile is 16 pairs of one row of `A`). So nothing is
//! packed differently: the micro-kernel alone changes. Slivers of `Aᵀ` (a weight gradient's
//! `dyᵀ`) are laid out for broadcasts, not for tiles, and stay with AVX512-BF16.
//!
//! Each element of `C` is the product of its row of `A` and its column of `B`, 16 depth pairs
//! a `TDPBF16PS` (the last chunk shorter) in order from zero, then added to `C` where the
//! product accumulates: whatever the rows and panels grouped into a call, and so whatever the
//! split between threads, the same bits. AMX is chosen for a whole product or not at all (the
//! bits differ from AVX512-BF16's, within f32 rounding: the tests hold both).
//!
//! Linux hands the tile registers to a process only when asked (`arch_prctl` with
//! `ARCH_REQ_XCOMP_PERM`); [`available`] asks once, and where the CPU or the kernel says no
//! the products stay with AVX512-BF16.

use std::arch::asm;
use std::arch::x86_64::*;
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// Rows of `C` one call computes: a whole tile.
pub const MR: usize = 16;
/// Depth pairs a `TDPBF16PS` covers: a whole row of an `A` tile.
pub const KP: usize = 16;

/// `ARCH_REQ_XCOMP_PERM` and the tile data's state component (linux/arch/x86/include/uapi).
#[cfg(target_os = "linux")]
const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
#[cfg(target_os = "linux")]
const XFEATURE_XTILEDATA: libc::c_long = 18;

static GRANTED: OnceLock<bool> = OnceLock::new();
/// The process's setting: 0 not yet read (the environment decides), 1 on, 2 off.
static PROCESS: AtomicU8 = AtomicU8::new(0);

/// Whether this CPU has AMX-TILE and AMX-BF16 and the kernel granted this process the tiles
/// (asked once, on the first call).
pub fn available() -> bool {
    *GRANTED.get_or_init(|| {
        // CPUID leaf 7, subleaf 0, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
        let l = __cpuid_count(7, 0);
        let cpu = l.edx & (1 << 22) != 0 && l.edx & (1 << 24) != 0;
        cpu && granted()
    })
}

/// Ask Linux for the tile registers (elsewhere: not asked, not used).
#[cfg(target_os = "linux")]
fn granted() -> bool {
    // SAFETY: arch_prctl with these arguments only changes this process's permissions.
    unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn granted() -> bool {
    false
}

thread_local! {
    static SCOPED: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether AMX is on for the products computed on this thread now: the innermost [`with`]
/// scope, else the process's ([`set_enabled`]; on unless turned off, or unless the environment
/// says `RNNLENS_AMX=0`: a bf16 run then gives the bits of a CPU without AMX, such as a Zen 4's).
pub fn enabled() -> bool {
    SCOPED.get().unwrap_or_else(|| match PROCESS.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os("RNNLENS_AMX").is_none_or(|v| v != "0");
            PROCESS.store(if on { 1 } else { 2 }, Ordering::Relaxed);
            on
        }
        p => p == 1,
    })
}

/// Whether a bf16 product started on this thread now runs on AMX: [`enabled`] and
/// [`available`]. A whole-sequence product decides for its blocks on the pool (the scope goes
/// with them, as the precision's does); a per-step weight decides when it is packed.
pub fn applies() -> bool {
    enabled() && available()
}

/// Turn AMX off (or back on) for the process's bf16 products.
pub fn set_enabled(on: bool) {
    PROCESS.store(if on { 1 } else { 2 }, Ordering::Relaxed);
}

/// Run `f` with AMX on or off on this thread (and on the pool's threads for the products it
/// splits), restoring the previous scope afterwards, also on a panic: a benchmark or a test
/// times or checks the AVX512-BF16 kernel on a CPU with AMX.
pub fn with<R>(on: bool, f: impl FnOnce() -> R) -> R {
    crate::kernels::scope::scoped(&SCOPED, on, f)
}

/// The tile configuration of one call's blocks, in one of two layouts:
/// - [`Layout::Tail`] (up to 16 rows, any depth): tiles 0-1 `C` (two panels), 2 `A`, 3 `A`'s
///   last, shorter chunk, 4-5 `B`, 6-7 `B`'s last chunk;
/// - [`Layout::Rows2`] (17 to 32 rows, whole chunks): tiles 0-1 `C` of rows 0-15, 2-3 `C` of
///   the rest, 4-5 `A` of each, 6-7 `B`: each `B` tile loaded meets two `A` tiles, each `A`
///   tile two `B` tiles (half the loads a product of the other layout).
///
/// Loaded when a block's layout differs from the last one's; released (the tiles back to
/// their initial state, which a context switch saves cheaply) when dropped. Made afresh by
/// every product: code between two products (oneDNN inside PyTorch, on the same thread) may
/// load its own.
pub struct Tiles {
    key: Option<Layout>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `mr ≤ 16` rows, a last chunk of `tail < 16` pairs (none: 0).
    Tail { mr: usize, tail: usize },
    /// `16 < mr ≤ 32` rows.
    Rows2 { mr: usize },
}

#[repr(C, align(64))]
struct Config([u8; 64]);

impl Tiles {
    pub fn new() -> Self {
        Tiles { key: None }
    }

    /// # Safety
    /// [`applies`].
    unsafe fn set(&mut self, layout: Layout) {
        if self.key == Some(layout) {
            return;
        }
        // (rows, bytes a row) of tiles 0-7
        let shapes = match layout {
            Layout::Tail { mr, tail } => [(mr, 64), (mr, 64), (mr, 64), (mr, 4 * tail), (KP, 64), (KP, 64), (tail, 64), (tail, 64)],
            Layout::Rows2 { mr } => [(16, 64), (16, 64), (mr - 16, 64), (mr - 16, 64), (16, 64), (mr - 16, 64), (KP, 64), (KP, 64)],
        };
        let mut c = Config([0; 64]);
        c.0[0] = 1; // palette 1
        for (t, (rows, bytes)) in shapes.into_iter().enumerate() {
            // A tile of no rows or no bytes is left unconfigured (all zero), as the ISA asks.
            if rows > 0 && bytes > 0 {
                c.0[16 + 2 * t..18 + 2 * t].copy_from_slice(&(bytes as u16).to_le_bytes());
                c.0[48 + t] = rows as u8;
            }
        }
        // SAFETY: a valid palette-1 configuration, on a CPU and process with AMX.
        unsafe { asm!("ldtilecfg [{}]", in(reg) c.0.as_ptr(), options(nostack, readonly)) };
        self.key = Some(layout);
    }
}

impl Default for Tiles {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        if self.key.is_some() {
            // SAFETY: tiles were configured on this thread (so AMX is there).
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
        }
    }
}

macro_rules! load {
    ($t:literal, $p:expr, $stride:expr) => {
        asm!(concat!("tileloadd tmm", $t, ", [{p} + {s}*1]"), p = in(reg) $p, s = in(reg) $stride, options(nostack, readonly))
    };
}

macro_rules! store {
    ($t:literal, $p:expr) => {
        asm!(concat!("tilestored [{p} + {s}*1], tmm", $t), p = in(reg) $p, s = in(reg) 64usize, options(nostack))
    };
}

macro_rules! dot {
    ($c:literal, $a:literal, $b:literal) => {
        asm!(concat!("tdpbf16ps tmm", $c, ", tmm", $a, ", tmm", $b), options(nostack, nomem))
    };
}

/// `C[mr × nc] (+)= A · B` for `mr ≤ 16` rows of `A` (pairs at stride `lda` pairs) and one or
/// two adjacent panels of `q` depth pairs (`two`: the second `pstride` pairs after the first),
/// `nc ≤ 16` or `≤ 32` columns of `C` at stride `ldc`.
///
/// # Safety
/// [`applies`]; `a` holds `mr` rows of `q` pairs at stride `lda`; `p` holds the panels; `C`'s
/// block is the caller's alone; `tiles` was made on this thread.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn block(tiles: &mut Tiles, mr: usize, q: usize, (a, lda): (*const u32, usize), (p, pstride, two): (*const u32, usize, bool), c: *mut f32, ldc: usize, nc: usize, acc: bool) {
    debug_assert!((1..=MR).contains(&mr) && nc <= if two { 32 } else { 16 });
    let (full, tail) = (q / KP, q % KP);
    // SAFETY: as the caller guarantees; every load reads `mr` rows of at most 16 pairs of A
    // within its `q`, or at most 16 rows of 64 bytes of a panel within its `q` rows.
    unsafe {
        tiles.set(Layout::Tail { mr, tail });
        let (sa, sb) = (lda * 4, 64usize);
        let p2 = p.add(pstride);
        asm!("tilezero tmm0", "tilezero tmm1", options(nostack, nomem));
        for ch in 0..full {
            load!(2, a.add(ch * KP), sa);
            load!(4, p.add(ch * KP * 16), sb);
            dot!(0, 2, 4);
            if two {
                load!(5, p2.add(ch * KP * 16), sb);
                dot!(1, 2, 5);
            }
        }
        if tail > 0 {
            load!(3, a.add(full * KP), sa);
            load!(6, p.add(full * KP * 16), sb);
            dot!(0, 3, 6);
            if two {
                load!(7, p2.add(full * KP * 16), sb);
                dot!(1, 3, 7);
            }
        }
        let mut out = Out([[0.0; 16]; 32]);
        let o = out.0.as_mut_ptr() as *mut f32;
        store!(0, o);
        if two {
            store!(1, o.add(256));
        }
        add_out(o, mr, two, c, ldc, nc, acc);
    }
}

/// `C[mr × nc] (+)= A · B` for `16 < mr ≤ 32` rows of `A` and a depth of whole chunks
/// (`q` a multiple of 16), otherwise as [`block`].
///
/// # Safety
/// As [`block`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn block2(tiles: &mut Tiles, mr: usize, q: usize, (a, lda): (*const u32, usize), (p, pstride, two): (*const u32, usize, bool), c: *mut f32, ldc: usize, nc: usize, acc: bool) {
    debug_assert!(mr > MR && mr <= 2 * MR && q.is_multiple_of(KP) && nc <= if two { 32 } else { 16 });
    // SAFETY: as the caller guarantees; rows 16.. of A are `mr - 16` rows from `a + 16 lda`.
    unsafe {
        tiles.set(Layout::Rows2 { mr });
        let (sa, sb) = (lda * 4, 64usize);
        let (a2, p2) = (a.add(MR * lda), p.add(pstride));
        asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
        for ch in 0..q / KP {
            load!(4, a.add(ch * KP), sa);
            load!(5, a2.add(ch * KP), sa);
            load!(6, p.add(ch * KP * 16), sb);
            dot!(0, 4, 6);
            dot!(2, 5, 6);
            if two {
                load!(7, p2.add(ch * KP * 16), sb);
                dot!(1, 4, 7);
                dot!(3, 5, 7);
            }
        }
        let mut out = Out([[0.0; 16]; 32]);
        let o = out.0.as_mut_ptr() as *mut f32;
        // Rows 0-15, then the rest, each through `out` (two panels: 32 rows of 16).
        store!(0, o);
        if two {
            store!(1, o.add(256));
        }
        add_out(o, MR, two, c, ldc, nc, acc);
        store!(2, o);
        if two {
            store!(3, o.add(256));
        }
        add_out(o, mr - MR, two, c.add(MR * ldc), ldc, nc, acc);
    }
}

/// `C[rows × nc] (+)=` the stored tiles at `o` (panel `j`'s row `r` at `o[256 j + 16 r]`).
///
/// # Safety
/// `o` holds what is described; `C`'s block is the caller's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
unsafe fn add_out(o: *const f32, rows: usize, two: bool, c: *mut f32, ldc: usize, nc: usize, acc: bool) {
    for j in 0..(if two { 2 } else { 1 }) {
        let mask = lanes(nc.saturating_sub(j * 16));
        for r in 0..rows {
            // SAFETY: as the caller guarantees.
            unsafe {
                let v = _mm512_loadu_ps(o.add(j * 256 + r * 16));
                let cr = c.add(r * ldc + j * 16);
                let v = if acc { _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, cr)) } else { v };
                _mm512_mask_storeu_ps(cr, mask, v);
            }
        }
    }
}

/// Rows `0..m` of `C` (+)= `A · B` for one or two panels, in blocks of up to 32 rows where
/// the depth is whole chunks ([`block2`]) and of up to 16 otherwise ([`block`]): how a caller
/// walks its rows (which rows share a block does not change any element's bits). The rows are
/// shared evenly between the fewest 32-row blocks (100 rows: four of 25, not three of 32 and one
/// of 4, which took the 16-row layout, two accumulators and a reloaded tile configuration twice
/// for every panel: a tenth of a bf16 step at C3 for a twenty-fifth of its rows).
///
/// # Safety
/// As [`block`], for `m` rows.
#[allow(clippy::too_many_arguments)]
pub unsafe fn rows(tiles: &mut Tiles, m: usize, q: usize, (a, lda): (*const u32, usize), panels: (*const u32, usize, bool), c: *mut f32, ldc: usize, nc: usize, acc: bool) {
    let even = m.div_ceil(m.div_ceil(2 * MR).max(1));
    let mut i0 = 0;
    while i0 < m {
        let left = m - i0;
        // SAFETY: as the caller guarantees, for rows i0.. i0 + mr.
        unsafe {
            if q.is_multiple_of(KP) && left > MR {
                // (`even` > 16 wherever `left` is: only m > 16 leaves more than 16 rows)
                let mr = left.min(even);
                block2(tiles, mr, q, (a.add(i0 * lda), lda), panels, c.add(i0 * ldc), ldc, nc, acc);
                i0 += mr;
            } else {
                let mr = left.min(MR);
                block(tiles, mr, q, (a.add(i0 * lda), lda), panels, c.add(i0 * ldc), ldc, nc, acc);
                i0 += mr;
            }
        }
    }
}

/// `iters` rounds of 12 `TDPBF16PS` into 4 independent accumulators (a tile's product takes
/// longer than 4 issue slots, so fewer would wait on their own sums): the tiles' limit, for
/// `kernels::limits` (a multiply-add of 16 × 16 × 32 an instruction). Returns a sum to keep.
///
/// # Safety
/// [`applies`].
pub unsafe fn chains(iters: usize) -> f32 {
    let mut tiles = Tiles::new();
    let ones = Out([[1.0; 16]; 32]);
    let mut out = Out([[0.0; 16]; 32]);
    // SAFETY: AMX is here (the caller). A "tail" of 16 configures every tile as 16 rows of
    // 64 bytes: tiles 0, 1, 6 and 7 accumulate tile 2 times tile 4, each read from `ones`
    // (16 rows of 64 bytes: 1 KiB of its 2).
    unsafe {
        tiles.set(Layout::Tail { mr: 16, tail: 16 });
        let p = ones.0.as_ptr() as *const u32;
        load!(2, p, 64usize);
        load!(4, p, 64usize);
        asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm6", "tilezero tmm7", options(nostack, nomem));
        for _ in 0..iters {
            for _ in 0..3 {
                dot!(0, 2, 4);
                dot!(1, 2, 4);
                dot!(6, 2, 4);
                dot!(7, 2, 4);
            }
        }
        store!(0, out.0.as_mut_ptr());
    }
    out.0[0][0]
}

/// Two tiles of `C` as stored: panel `j`'s row `r` at `[16 j + r]`.
#[repr(C, align(64))]
struct Out([[f32; 16]; 32]);

/// Mask of the first `w ≤ 16` lanes.
fn lanes(w: usize) -> u16 {
    if w >= 16 {
        !0
    } else {
        (1u16 << w) - 1
    }
}
