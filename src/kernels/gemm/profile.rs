//! Counting of the GEMM work done, for the benchmark's achieved-GFLOP/s figure.
//!
//! Off by default: then the only cost is one relaxed atomic load per GEMM call. When on, every
//! call records its shape so that the benchmark can time the same shapes alone, the way the
//! step ran them (a lock a call: the recorded step is kept out of the timed ones); and, apart,
//! it can time the products where they ran, in the timed steps.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// One GEMM shape `C[m,n] = A[m,k] · B[k,n]` as a step called it. `per_thread` marks a
/// product run on one thread while every other thread runs its own (the time loops' step
/// products, `PackedB::gemm_serial` on each thread's batch rows); the others were split over
/// the pool by the GEMM itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Call {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub per_thread: bool,
}

static ON: AtomicBool = AtomicBool::new(false);
static CALLS: Mutex<BTreeMap<Call, u64>> = Mutex::new(BTreeMap::new());
/// While timing: nanoseconds in per-thread products (summed over the threads) and in the rest.
static TIMING: AtomicBool = AtomicBool::new(false);
static NS_PER_THREAD: AtomicU64 = AtomicU64::new(0);
static NS_SPLIT: AtomicU64 = AtomicU64::new(0);

/// Start recording (and clear what was recorded before).
pub fn start() {
    CALLS.lock().unwrap().clear();
    ON.store(true, Ordering::Relaxed);
}

/// Stop recording and return every shape called with its number of calls.
pub fn stop() -> Vec<(Call, u64)> {
    ON.store(false, Ordering::Relaxed);
    std::mem::take(&mut *CALLS.lock().unwrap()).into_iter().collect()
}

/// Start timing the products where they run (no lock: two clock reads and an atomic add a
/// call), from zero.
pub fn start_timing() {
    NS_PER_THREAD.store(0, Ordering::Relaxed);
    NS_SPLIT.store(0, Ordering::Relaxed);
    TIMING.store(true, Ordering::Relaxed);
}

/// Stop timing and return the seconds the products took where they ran: the per-thread
/// products' (every thread running its own at once) over the pool's threads, plus the others'
/// (each split over the pool by the GEMM from one calling thread).
pub fn stop_timing() -> f64 {
    TIMING.store(false, Ordering::Relaxed);
    let per_thread = NS_PER_THREAD.load(Ordering::Relaxed) as f64 / rayon::current_num_threads() as f64;
    (per_thread + NS_SPLIT.load(Ordering::Relaxed) as f64) * 1e-9
}

/// While timing, the time from [`record`] to its drop is added to its kind's nanoseconds.
pub(super) struct Timer(Option<(bool, Instant)>);

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some((per_thread, t)) = self.0.take() {
            let ns = t.elapsed().as_nanos() as u64;
            if per_thread { &NS_PER_THREAD } else { &NS_SPLIT }.fetch_add(ns, Ordering::Relaxed);
        }
    }
}

/// Count a call of a shape while recording; while timing, time it until the guard drops.
#[inline]
pub(super) fn record(m: usize, n: usize, k: usize, per_thread: bool) -> Timer {
    if ON.load(Ordering::Relaxed) {
        *CALLS.lock().unwrap().entry(Call { m, n, k, per_thread }).or_insert(0) += 1;
    }
    Timer(TIMING.load(Ordering::Relaxed).then(|| (per_thread, Instant::now())))
}

/// Floating-point operations (a multiply-add counts two) of the recorded calls.
pub fn flops(calls: &[(Call, u64)]) -> f64 {
    calls.iter().map(|&(c, count)| 2.0 * c.m as f64 * c.n as f64 * c.k as f64 * count as f64).sum()
}
