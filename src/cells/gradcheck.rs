//! Central finite differences in f64 against a cell's backward pass: every parameter, every
//! input element and every initial-state element, with and without a recurrent dropout mask,
//! starting from a given state and from the cell's own (zero or learned) initial state.

use super::{Cell, Grads, Seq, Workspace};
use crate::kernels::rng::Rng;

/// Step of the five-point central stencil: its truncation error is O(EPS⁴) ≈ 1e-12 and its
/// rounding error ≈ 1e-16·|loss|/EPS ≈ 1e-13, far below the tolerance.
const EPS: f64 = 1e-3;
const REL_TOL: f64 = 1e-6;

struct Problem {
    steps: usize,
    batch: usize,
    w: Vec<f64>,
    x: Vec<f64>,
    s0: Vec<f64>,
    /// start from `s0` (else from the cell's own initial state)
    given: bool,
    /// `[T, B]` symbols for cells that read token ids
    tokens: Vec<u32>,
    mask: Option<Vec<f64>>,
    ry: Vec<f64>,
    rs: Vec<f64>,
}

/// The scalar loss `Σ y∘Ry + Σ s_T∘Rs`, which reaches every output and the final state.
fn loss(cell: &Cell, p: &Problem, w: &[f64], x: &[f64], s0: &[f64], ws: &mut Workspace<f64>) -> f64 {
    let s0 = if p.given { Some(s0) } else { None };
    let seq = Seq { steps: p.steps, batch: p.batch, x, tokens: Some(&p.tokens), s0, mask: p.mask.as_deref(), emb: None, out_from: 0 };
    let mut y = vec![0.0; p.ry.len()];
    cell.forward(w, &seq, ws, &mut y);
    let a: f64 = y.iter().zip(&p.ry).map(|(a, b)| a * b).sum();
    let b: f64 = ws.final_state().iter().zip(&p.rs).map(|(a, b)| a * b).sum();
    a + b
}

fn close(analytic: f64, numeric: f64) -> bool {
    (analytic - numeric).abs() <= REL_TOL * analytic.abs().max(numeric.abs()) + 1e-10
}

/// Check `cell` on small random problems for each seed; panics naming the first mismatch.
/// `symbols` is the number of distinct input symbols for cells that read token ids.
pub fn check(cell: &Cell, seeds: &[u64]) {
    check_with_symbols(cell, seeds, 3);
}

pub fn check_with_symbols(cell: &Cell, seeds: &[u64], symbols: u64) {
    let sz = cell.sizes();
    let n_w = cell.param_len();
    for &seed in seeds {
        for (masked, given) in [(false, true), (true, true), (true, false)] {
            let mut rng = Rng::new(seed);
            let (steps, batch) = (4, 2);
            let tokens = (0..steps * batch).map(|_| rng.below(symbols) as u32).collect();
            let mut rnd = |n: usize, lo: f64, hi: f64| (0..n).map(|_| rng.range(lo, hi)).collect::<Vec<f64>>();
            let p = Problem {
                steps,
                batch,
                given,
                tokens,
                w: rnd(n_w, -0.8, 0.8),
                // A cell that reads token ids has no input vector (and no input gradient).
                x: rnd(if cell.reads_tokens() { 0 } else { steps * batch * sz.input }, -1.0, 1.0),
                s0: rnd(batch * sz.state, -0.5, 0.5),
                mask: if masked { Some(rnd(batch * sz.rec, 0.3, 1.7)) } else { None },
                ry: rnd(steps * batch * sz.output, -1.0, 1.0),
                rs: rnd(batch * sz.state, -1.0, 1.0),
            };
            let mut p = p;
            cell.sanitize_state(&mut p.s0, batch);
            let p = p;
            let mut ws = Workspace::default();
            loss(cell, &p, &p.w, &p.x, &p.s0, &mut ws);
            let mut gw = vec![0.0; n_w];
            let mut dx = vec![0.0; p.x.len()];
            let mut ds0 = vec![0.0; p.s0.len()];
            let seq = Seq {
                steps,
                batch,
                x: &p.x,
                tokens: Some(&p.tokens),
                s0: if given { Some(&p.s0) } else { None },
                mask: p.mask.as_deref(),
                emb: None,
                out_from: 0,
            };
            cell.backward(
                &p.w,
                &mut gw,
                &seq,
                &mut ws,
                Grads {
                    dy: &p.ry,
                    ds_final: Some(&p.rs),
                    dx: if cell.reads_tokens() { None } else { Some(&mut dx) },
                    ds0: if given { Some(&mut ds0) } else { None },
                },
            );

            let mut names = Vec::new();
            for t in cell.tensors() {
                for k in 0..t.len() {
                    names.push(format!("{}[{k}]", t.name));
                }
            }
            assert_eq!(names.len(), n_w, "tensor list does not cover the parameter slice");
            let numeric = |which: usize, k: usize, eps: f64, ws: &mut Workspace<f64>| {
                let mut v = [p.w.clone(), p.x.clone(), p.s0.clone()];
                let x0 = v[which][k];
                let mut at = |dx: f64| {
                    v[which][k] = x0 + dx;
                    loss(cell, &p, &v[0], &v[1], &v[2], ws)
                };
                (8.0 * (at(eps) - at(-eps)) - (at(2.0 * eps) - at(-2.0 * eps))) / (12.0 * eps)
            };
            let mut nonzero = 0;
            let checks: &[(usize, &Vec<f64>, &str)] = if given {
                &[(0, &gw, "parameter"), (1, &dx, "input"), (2, &ds0, "initial state")]
            } else {
                &[(0, &gw, "parameter"), (1, &dx, "input")]
            };
            for &(which, analytic, what) in checks {
                for (k, &a) in analytic.iter().enumerate() {
                    let mut n = numeric(which, k, EPS, &mut ws);
                    // A relu's kink (its attention or recurrence) within the stencil's ±2·EPS
                    // bends the difference; the same point at a hundredth of the step lies clear
                    // of it unless the kink sits closer than that, where a real error would
                    // still show at both steps.
                    if !close(a, n) {
                        n = numeric(which, k, EPS / 100.0, &mut ws);
                    }
                    let name = if which == 0 { names[k].clone() } else { format!("{what}[{k}]") };
                    assert!(
                        close(a, n),
                        "{cell:?} seed {seed} masked {masked} given s0 {given}: d/d{name}: backward {a:e}, finite difference {n:e}"
                    );
                    if a.abs() > 1e-8 {
                        nonzero += 1;
                    }
                }
            }
            // A backward that returned zeros everywhere would pass the comparison vacuously only
            // if the forward ignored its inputs; demand that most gradients are live (relu
            // units switched off at every position legitimately have zero gradients).
            let total = gw.len() + dx.len() + if given { ds0.len() } else { 0 };
            assert!(nonzero * 2 >= total, "{cell:?}: only {nonzero} of {total} gradients are nonzero");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::registry;

    /// Every registered cell and each of its options (`registry::variants`) against central
    /// differences in f64, with inputs thin enough to ride in the step's GEMM and wide enough
    /// for their own: a cell is checked by being in the registry, not by a test of its own.
    #[test]
    fn every_registered_cell_and_option_matches_finite_differences() {
        for v in registry::variants() {
            let symbols = registry::reads_tokens(v.name);
            let inputs: &[usize] = if symbols { &[3] } else { &[2, crate::cells::FOLD_MAX + 2] };
            for &d in inputs {
                // said before the check, so that a failure names the variant
                println!("{v}, input {d}");
                let cell = v.cell(d, 4).unwrap();
                check_with_symbols(&cell, &[1, 2], 3);
            }
        }
    }
}
