//! Counting of the GEMM work done, for the benchmark's achieved-GFLOP/s figure.
//!
//! Off by default: then the only cost is one relaxed atomic load per GEMM call. When on, every
//! call records its shape so that the benchmark can time the same shapes alone, the way the
//! step ran them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

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

#[inline]
pub(super) fn record(m: usize, n: usize, k: usize, per_thread: bool) {
    if ON.load(Ordering::Relaxed) {
        *CALLS.lock().unwrap().entry(Call { m, n, k, per_thread }).or_insert(0) += 1;
    }
}

/// Floating-point operations (a multiply-add counts two) of the recorded calls.
pub fn flops(calls: &[(Call, u64)]) -> f64 {
    calls.iter().map(|&(c, count)| 2.0 * c.m as f64 * c.n as f64 * c.k as f64 * count as f64).sum()
}
