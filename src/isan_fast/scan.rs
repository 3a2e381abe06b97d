//! Forward inference over time by a parallel prefix scan of affine maps, for cells whose
//! transition does not depend on the state (the ISAN, the linear RNN).
//!
//! The sequence is cut into chunks. Phase 1, in parallel: chunk 0, whose starting state is known,
//! simply steps; every middle chunk composes its affine map `(A, b)` (an `H³` product per token);
//! the last chunk's map is never needed. Phase 2, sequential and short: each chunk's starting
//! state is the previous chunk's map applied to the previous start. Phase 3, in parallel: every
//! chunk but the first steps from its true starting state.
//!
//! Composing costs `c ≈ H³` per token against `s ≈ H²` for a step, so with `r = c/s`:
//! - [`equal_chunks`] (the textbook split, one chunk per thread) is faster than stepping only
//!   when `P > 1 + r`: never for two threads;
//! - [`balanced_chunks`] gives chunk 0 `r` times the length of the others (it steps while they
//!   compose) and uses `P + 1` chunks for `P` threads: at best `(r + P)/(r + 1)` times faster,
//!   which tends to 1 as `H` grows.
//!
//! `examples/isan_scan.rs` measures both against stepping.

use crate::isan_fast::table::AffineMaps;
use rayon::prelude::*;

/// The states after every token (`[T, H]`) by stepping from `start`.
pub fn step_states(m: &AffineMaps, tokens: &[u32], start: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; tokens.len() * m.hidden];
    step_into(m, tokens, start, &mut out);
    out
}

fn step_into(m: &AffineMaps, tokens: &[u32], start: &[f32], out: &mut [f32]) {
    let h = m.hidden;
    for (t, &x) in tokens.iter().enumerate() {
        let (done, rest) = out.split_at_mut(t * h);
        let prev = if t == 0 { start } else { &done[(t - 1) * h..] };
        m.step(x, prev, &mut rest[..h]);
    }
}

/// Chunk boundaries `0 = b_0 < … < b_P = T` of `P` equal chunks.
pub fn equal_chunks(len: usize, chunks: usize) -> Vec<usize> {
    let p = chunks.clamp(1, len.max(1));
    (0..=p).map(|i| i * len / p).collect()
}

/// Chunk boundaries for `threads` threads when composing a token costs `ratio` steps: chunk 0
/// of length `ratio·L`, then `threads` chunks of length `L` (see the module documentation).
pub fn balanced_chunks(len: usize, threads: usize, ratio: f64) -> Vec<usize> {
    if threads <= 1 {
        return vec![0, len];
    }
    let l = len as f64 / (ratio.max(0.0) + threads as f64);
    let first = ((ratio.max(0.0) * l).round() as usize).min(len);
    let mut b = vec![0];
    b.extend((0..=threads).map(|i| first + (i * (len - first)) / threads));
    b.dedup();
    b
}

/// The states after every token (`[T, H]`) from `start`, by the three-phase scan over the
/// chunks `bounds` (as [`equal_chunks`] or [`balanced_chunks`] make them), on the current rayon
/// pool. Equal to [`step_states`] up to rounding.
pub fn scan_states(m: &AffineMaps, tokens: &[u32], start: &[f32], bounds: &[usize]) -> Vec<f32> {
    let h = m.hidden;
    assert!(bounds.len() >= 2 && bounds[0] == 0 && *bounds.last().unwrap() == tokens.len(), "scan: bad chunk bounds");
    let mut out = vec![0.0f32; tokens.len() * h];
    // Disjoint output slices, one per chunk.
    let mut slices: Vec<&mut [f32]> = Vec::with_capacity(bounds.len() - 1);
    let mut rest = &mut out[..];
    for w in bounds.windows(2) {
        let (a, b) = rest.split_at_mut((w[1] - w[0]) * h);
        slices.push(a);
        rest = b;
    }
    let toks = |c: usize| &tokens[bounds[c]..bounds[c + 1]];
    let nc = slices.len();

    // Phase 1: chunk 0 steps, chunks 1..nc-1 compose (the last chunk's map is not needed).
    let (first, later) = slices.split_first_mut().expect("at least one chunk");
    let maps: Vec<(Vec<f32>, Vec<f32>)> = rayon::join(
        || step_into(m, toks(0), start, first),
        || (1..nc.saturating_sub(1)).into_par_iter().map(|c| m.compose(toks(c))).collect(),
    )
    .1;

    // Phase 2: the true starting state of every later chunk.
    let mut starts = Vec::with_capacity(nc);
    starts.push(if first.is_empty() { start.to_vec() } else { first[first.len() - h..].to_vec() });
    for (a, b) in &maps {
        let mut next = vec![0.0f32; h];
        crate::isan_fast::table::apply(h, a, b, starts.last().unwrap(), &mut next);
        starts.push(next);
    }

    // Phase 3: every later chunk steps from its start.
    later.par_iter_mut().enumerate().for_each(|(i, s)| step_into(m, toks(i + 1), &starts[i], s));
    out
}

/// Measured cost of composing one token relative to one step (`c / s`) at this model's size,
/// each the best of a few repetitions over (at most) the first 64 tokens.
pub fn measure_ratio(m: &AffineMaps, tokens: &[u32]) -> f64 {
    use std::time::Instant;
    let toks = &tokens[..tokens.len().min(64)];
    let best = |reps: usize, f: &dyn Fn()| {
        (0..reps)
            .map(|_| {
                let t0 = Instant::now();
                f();
                t0.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let s = best(20, &|| {
        std::hint::black_box(step_states(m, toks, &m.h0));
    });
    let c = best(5, &|| {
        std::hint::black_box(m.compose(toks));
    });
    c / s.max(1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isan_fast::table::rel_diff;
    use crate::isan_fast::table::tests::tiny_lm;
    use crate::kernels::rng::Rng;

    #[test]
    fn scan_equals_stepping() {
        for cell in ["isan", "isan-nobias", "linear"] {
            let (model, w) = tiny_lm(cell, 6, 7, 3);
            let m = AffineMaps::from_model(&model, &w).unwrap();
            let mut rng = Rng::new(9);
            let tokens: Vec<u32> = (0..500).map(|_| rng.below(6) as u32).collect();
            let want = step_states(&m, &tokens, &m.h0);
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            let splits = [
                equal_chunks(500, 1),
                equal_chunks(500, 2),
                equal_chunks(500, 7),
                balanced_chunks(500, 2, 5.0),
                balanced_chunks(500, 3, 0.5),
                vec![0, 0, 1, 499, 500],
            ];
            for b in &splits {
                let got = pool.install(|| scan_states(&m, &tokens, &m.h0, b));
                for (t, (g, w)) in got.chunks(7).zip(want.chunks(7)).enumerate() {
                    assert!(rel_diff(g, w) < 1e-4, "{cell} {b:?} t {t}: {}", rel_diff(g, w));
                }
            }
        }
    }

    #[test]
    fn chunk_bounds_cover_the_sequence() {
        assert_eq!(equal_chunks(10, 3), vec![0, 3, 6, 10]);
        assert_eq!(equal_chunks(2, 5), vec![0, 1, 2]);
        let b = balanced_chunks(100, 2, 3.0);
        assert_eq!((b[0], b[1], *b.last().unwrap(), b.len()), (0, 60, 100, 4));
        assert_eq!(balanced_chunks(100, 1, 3.0), vec![0, 100]);
    }
}
