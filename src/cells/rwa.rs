//! Recurrent Weighted Average (Ostmeyer & Cowell), as restated in section 3 of the RDA paper.
//!
//! ```text
//! u_t = W_u x_t + b_u
//! g_t = W_g [x_t, h_{t-1}] + b_g
//! z_t = u_t ∘ tanh(g_t)
//! a_t = exp(W_a [x_t, h_{t-1}] + b_a)
//! n_t = n_{t-1} + z_t ∘ a_t
//! d_t = d_{t-1} + a_t
//! h_t = tanh(n_t / d_t)
//! ```
//! starting from `n_0 = d_0 = 0`, `h_0 = tanh(s0)` with a learned `s0`; the output is `h_t`.
//! A variational dropout mask, when given, multiplies `h_{t-1}` before the recurrent GEMM.
//!
//! This is the RDA kernel ([`super::rda`]) without the discount (`γ = 1`), with exp attention,
//! `f_h = tanh` and `f_o = identity`; see there for the details. In short:
//!
//! - **Stable form.** Per unit a running maximum `m_t = max(m_{t-1}, l_t)` of the attention
//!   logits `l`, initialised by the first step (from the cell's own initial state `d = 0`, so
//!   `m_1 = l_1`: no −∞ sentinel); `n' = n·e^{−m}` and `d' = d·e^{−m}` are stored, updated
//!   with the factors `e^{m_{t-1}−m_t} ≤ 1` and `e^{l_t−m_t} ≤ 1`, one of which is exactly 1,
//!   so `d' ≥ 1` after the first step and nothing overflows for any logit. `h` depends only on
//!   `n'/d'`, which is invariant to `m`; backward differentiates the forward map exactly,
//!   including the carried `m` (the branch of the max taken).
//! - **State** `S = 4H`: four `[B, H]` blocks `[n' | d' | m | h]`. A final state passed as the
//!   next window's `s0` continues exactly. `sanitize_state` sets `d' ← 0.5 + |d'|`.
//! - **Parameters** (flat, in this order): `W_g [H, D+H]`, `W_a [H, D+H]` (adjacent: one
//!   `[2H, D+H]` matrix, first `D` columns on `x`, last `H` on `h`), `W_u [H, D]`,
//!   `b_u, b_g, b_a` (`[H]` each, adjacent), `s0 [H]`.
//! - **Workspace**: `xp[t] = [u | p_g | p_a]` (`[B, 3H]`, input projections of all steps by two
//!   GEMMs, then each step's recurrent GEMM adds the `h` part), `act[t]` `[B, 7H]` (`tanh g`,
//!   the factors and the branch of the max; one block unused without a discount), `st`, `rin`,
//!   `tmp` (`e^{−2|p_g|}` for the `tanh`, one `exp_inplace` per step) as in the RDA.

use super::rda::{Attention, Kernel};
use super::{Grads, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::num::{Act, Float};

#[derive(Clone, Debug, PartialEq)]
pub struct Rwa {
    pub input: usize,
    pub hidden: usize,
}

impl Rwa {
    fn kernel(&self) -> Kernel {
        Kernel { d: self.input, h: self.hidden, att: Attention::Exp, fh: Act::Tanh, fo: Act::Identity, discount: false }
    }
}

#[cfg(feature = "gpu")]
impl Rwa {
    pub fn gpu_cell(&self) -> anyhow::Result<super::gpu::GpuCell> {
        self.kernel().gpu_cell()
    }
}

impl Recurrent for Rwa {
    fn sizes(&self) -> Sizes {
        self.kernel().sizes()
    }
    fn tensors(&self) -> Vec<TensorSpec> {
        self.kernel().tensors()
    }
    fn ws_dims(&self) -> WsDims {
        self.kernel().ws_dims()
    }
    fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        self.kernel().forward(w, seq, ws, y)
    }
    fn backward<T: Float>(&self, w: &[T], g: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        self.kernel().backward(w, g, seq, ws, grads)
    }
    fn sanitize_state<T: Float>(&self, s: &mut [T], batch: usize) {
        self.kernel().sanitize_state(s, batch)
    }
    fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        self.kernel().trace(ws)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::rda::tests::{check_against_naive, check_continuation, check_long_sequence_is_finite};
    use crate::cells::{gradcheck, Cell};

    fn rwa(input: usize, hidden: usize) -> Rwa {
        Rwa { input, hidden }
    }

    #[test]
    fn gradients_match_finite_differences() {
        gradcheck::check(&Cell::Rwa(rwa(3, 4)), &[1, 2, 3]);
    }

    #[test]
    fn forward_matches_the_equations_as_written() {
        let c = rwa(2, 5);
        for seed in [4, 5, 6] {
            check_against_naive(&Cell::Rwa(c.clone()), &c.kernel(), seed);
        }
    }

    #[test]
    fn long_sequence_with_huge_logits_stays_finite() {
        check_long_sequence_is_finite(&Cell::Rwa(rwa(3, 8)), 11);
    }

    #[test]
    fn continuing_from_the_final_state_is_exact() {
        for seed in [1, 2, 3] {
            check_continuation(&Cell::Rwa(rwa(3, 5)), seed);
        }
    }

    #[test]
    fn parameter_count() {
        // 2 · 250·(2+250) + 250·2 + 3·250 + 250
        let cell = Cell::Rwa(rwa(2, 250));
        assert_eq!(cell.param_len(), 127_500);
        let names: Vec<_> = cell.tensors().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["W_g", "W_a", "W_u", "b_u", "b_g", "b_a", "s0"]);
    }
}
