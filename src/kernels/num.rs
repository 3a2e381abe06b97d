//! The scalar type every kernel is generic over: `f32` for training, `f64` for gradient checks.

use std::fmt::Debug;
use std::iter::Sum;
use std::ops::{AddAssign, DivAssign, MulAssign, SubAssign};

pub trait Float:
    num_traits::Float
    + Copy
    + Send
    + Sync
    + Default
    + Debug
    + Sum
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
    + 'static
{
    fn c(x: f64) -> Self;
    fn f64(self) -> f64;

    #[inline(always)]
    fn sigmoid(self) -> Self {
        Self::one() / (Self::one() + (-self).exp())
    }

    /// `tanh` for the cells' pointwise loops: f32 uses [`tanh_f32`], which vectorises; f64
    /// (the gradient checks) keeps the library function.
    #[inline(always)]
    fn tanh_fast(self) -> Self {
        self.tanh()
    }

    /// `ln(1 + x)` for `0 ≤ x ≤ 1` (the cells only take it of `e^{−|p|}`): [`ln1p_unit_f32`]
    /// for f32, which vectorises; the library function for f64.
    #[inline(always)]
    fn ln1p_unit(self) -> Self {
        self.ln_1p()
    }

    /// `exp` for the cells' pointwise loops ([`exp_f32`] for f32).
    #[inline(always)]
    fn exp_fast(self) -> Self {
        self.exp()
    }

    /// `x ← exp(x)` over a slice; f32 uses a vectorisable polynomial (within 2 ulp).
    fn exp_inplace(xs: &mut [Self]) {
        xs.iter_mut().for_each(|x| *x = x.exp());
    }
}

impl Float for f32 {
    #[inline(always)]
    fn c(x: f64) -> Self {
        x as f32
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self as f64
    }
    fn exp_inplace(xs: &mut [f32]) {
        xs.iter_mut().for_each(|x| *x = exp_f32(*x));
    }
    #[inline(always)]
    fn sigmoid(self) -> f32 {
        1.0 / (1.0 + exp_f32(-self))
    }
    #[inline(always)]
    fn tanh_fast(self) -> f32 {
        tanh_f32(self)
    }
    #[inline(always)]
    fn exp_fast(self) -> f32 {
        exp_f32(self)
    }
    #[inline(always)]
    fn ln1p_unit(self) -> f32 {
        ln1p_unit_f32(self)
    }
}

/// Partial results a reduction keeps side by side ([`fold_lanes`]): two vectors of f32 under
/// AVX2, enough to hide the adder's latency.
const LANES: usize = 16;

/// `v` folded in `LANES` interleaved partials (element `i` into partial `i % LANES`, by
/// `step`), those then joined in order: a fixed order for a given length, and no chain of
/// dependent operations (a plain fold waits out the adder's latency at every element; C2's
/// 10,000-way softmax rows took twice as long).
fn fold_lanes<T: Copy, U: Copy>(v: &[T], init: U, step: impl Fn(U, T) -> U, join: impl Fn(U, U) -> U) -> U {
    let mut acc = [init; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for c in &mut chunks {
        acc.iter_mut().zip(c).for_each(|(a, &x)| *a = step(*a, x));
    }
    acc.iter_mut().zip(chunks.remainder()).for_each(|(a, &x)| *a = step(*a, x));
    acc.iter().fold(init, |s, &a| join(s, a))
}

/// `Σ v`, summed as `fold_lanes` folds.
pub fn sum_lanes<T: Float>(v: &[T]) -> T {
    sum_lanes_of(v, |x| x)
}

/// `Σ f(v_i)`, summed as `fold_lanes` folds (the global gradient norm: f32 values, f64
/// squares).
pub fn sum_lanes_of<T: Copy, U: Float>(v: &[T], f: impl Fn(T) -> U) -> U {
    fold_lanes(v, U::zero(), |a, x| a + f(x), |s, a| s + a)
}

/// The largest element of `v` (−∞ when empty; NaNs are passed over, as `max` does), found as
/// `fold_lanes` folds: the same value as a plain fold, faster.
pub fn max_lanes<T: Float>(v: &[T]) -> T {
    fold_lanes(v, T::neg_infinity(), |m, x| m.max(x), |m, a| m.max(a))
}

/// `ln(1 + x)` for f32 with `0 ≤ x ≤ 1`, without a library call: with `s = x/(2 + x)`
/// (`0 ≤ s ≤ 1/3`), `ln(1 + x) = 2·atanh(s) = 2(s + s³/3 + s⁵/5 + …)`, summed to `s¹⁵`, whose
/// next term is below 1e-9 relative. No cancellation for small `x` (then `s ≈ x/2`).
#[inline(always)]
pub fn ln1p_unit_f32(x: f32) -> f32 {
    let s = x / (2.0 + x);
    let s2 = s * s;
    let p = 1.0 / 13.0 + s2 * (1.0 / 15.0);
    let p = 1.0 / 11.0 + s2 * p;
    let p = 1.0 / 9.0 + s2 * p;
    let p = 1.0 / 7.0 + s2 * p;
    let p = 1.0 / 5.0 + s2 * p;
    let p = 1.0 / 3.0 + s2 * p;
    2.0 * s * (1.0 + s2 * p)
}

/// `tanh` for f32 without a library call, so that a loop over it vectorises:
/// `(1 − e)/(1 + e)` with `e = exp(−2|x|)`, and for `|x| < 0.2`, where that form loses relative
/// precision to cancellation, the odd Taylor polynomial to `x⁷` (next term < 1e-7 relative).
/// Both branches are computed and one selected, which compiles to a blend, not a jump.
/// NaN stays NaN; ±∞ gives ±1.
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let e = exp_f32(-2.0 * a);
    let big = ((1.0 - e) / (1.0 + e)).copysign(x);
    let x2 = x * x;
    let small = x * x2.mul_add(x2.mul_add(x2.mul_add(-17.0 / 315.0, 2.0 / 15.0), -1.0 / 3.0), 1.0);
    if a < 0.2 {
        small
    } else {
        big
    }
}

/// `exp` for f32 written so the compiler vectorises it: `x = n·ln2 + r` with `|r| ≤ ln2/2`,
/// a degree-6 polynomial for `e^r`, and `2^n` built in the exponent bits. Inputs are clamped
/// to the range where the result is a normal float (so no NaN from a huge input either).
/// The reduction and the polynomial are `mul_add`s: one FMA instruction each under the
/// repository's x86-64-v3 build (`.cargo/config.toml`), a third fewer operations than a
/// multiply and an add, and a rounding fewer (without FMA they become library calls: slower,
/// as exact; docs/benchmarks.md, "`exp_f32` in FMAs").
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    let x = x.clamp(-87.3, 88.3);
    let t = x.mul_add(LOG2E, ROUND);
    let n = t - ROUND;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let p = r.mul_add(0.001_388_889, 0.008_333_334);
    let p = r.mul_add(p, 0.041_666_668);
    let p = r.mul_add(p, 0.166_666_67);
    let p = r.mul_add(p, 0.5);
    let p = r.mul_add(p, 1.0);
    let p = r.mul_add(p, 1.0);
    // 2^n from the bits of `t`, whose unit is 1 in the last place, so they are ROUND's plus n.
    // Integer arithmetic on the bits vectorises; `n as i32` does not (Rust's saturating float
    // to integer cast compiles to a scalar convert and NaN check per lane; docs/benchmarks.md,
    // "`2^n` from the bits in `exp_f32`").
    p * f32::from_bits(t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23)
}

impl Float for f64 {
    #[inline(always)]
    fn c(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn f64(self) -> f64 {
        self
    }
}

/// The squashing function `g` of a cell's output (RAN, RDA) or the RNN nonlinearity.
/// On the command line (the RDA's functions) only identity and tanh are offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Act {
    Tanh,
    Identity,
    #[value(skip)]
    Relu,
}

impl Act {
    #[inline(always)]
    pub fn f<T: Float>(self, x: T) -> T {
        match self {
            Act::Tanh => x.tanh_fast(),
            Act::Identity => x,
            Act::Relu => x.max(T::zero()),
        }
    }
    /// Derivative expressed through the output `y = f(x)`, which is what the tape keeps.
    #[inline(always)]
    pub fn df_from_y<T: Float>(self, y: T) -> T {
        match self {
            Act::Tanh => T::one() - y * y,
            Act::Identity => T::one(),
            Act::Relu => {
                if y > T::zero() {
                    T::one()
                } else {
                    T::zero()
                }
            }
        }
    }
    pub fn parse(s: &str) -> Option<Act> {
        [Act::Tanh, Act::Identity, Act::Relu].into_iter().find(|a| a.name() == s)
    }
    pub fn name(self) -> &'static str {
        match self {
            Act::Tanh => "tanh",
            Act::Identity => "identity",
            Act::Relu => "relu",
        }
    }
}

/// An [`Act`] as a type of its own, so that a loop generic over it is compiled once per
/// function with no branch per element (a `match` on `Act` inside a loop stops the compiler
/// from vectorising it). [`with_act!`](crate::with_act) picks the type for a value.
pub trait Squash: Copy {
    fn f<T: Float>(self, x: T) -> T;
    fn df_from_y<T: Float>(self, y: T) -> T;
}

macro_rules! squash {
    ($name:ident, $act:ident) => {
        #[derive(Clone, Copy)]
        pub struct $name;
        impl Squash for $name {
            #[inline(always)]
            fn f<T: Float>(self, x: T) -> T {
                Act::$act.f(x)
            }
            #[inline(always)]
            fn df_from_y<T: Float>(self, y: T) -> T {
                Act::$act.df_from_y(y)
            }
        }
    };
}
squash!(TanhFn, Tanh);
squash!(IdentityFn, Identity);
squash!(ReluFn, Relu);

/// `with_act!(g, s => expr)`: evaluate `expr` with `s` bound to the [`Squash`] type of the
/// [`Act`] value `g`.
#[macro_export]
macro_rules! with_act {
    ($g:expr, $s:ident => $body:expr) => {
        match $g {
            $crate::kernels::num::Act::Tanh => {
                let $s = $crate::kernels::num::TanhFn;
                $body
            }
            $crate::kernels::num::Act::Identity => {
                let $s = $crate::kernels::num::IdentityFn;
                $body
            }
            $crate::kernels::num::Act::Relu => {
                let $s = $crate::kernels::num::ReluFn;
                $body
            }
        }
    };
}

/// Set flush-to-zero and denormals-are-zero for the calling thread. Gradients flowing back
/// through long sequences shrink into f32's denormal range, where x86 arithmetic is very slow;
/// treating them as zero changes no printed number at f32 precision.
pub fn flush_denormals() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: setting the FTZ (bit 15) and DAZ (bit 6) flags of MXCSR only changes how this
    // thread rounds denormal floats.
    #[allow(deprecated)]
    unsafe {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        _mm_setcsr(_mm_getcsr() | (1 << 15) | (1 << 6));
    }
}

/// Flush-to-zero and denormals-are-zero on the calling thread while this lives, the thread's
/// previous setting restored when it is dropped: for a caller that is not ours (the Python
/// interpreter's thread, whose own arithmetic must keep its denormals) running our code,
/// which then computes the same bits as the command line does.
pub struct DenormalsFlushed {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl DenormalsFlushed {
    pub fn new() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: reading MXCSR has no effect; flush_denormals only sets FTZ and DAZ.
            #[allow(deprecated)]
            let saved = unsafe { std::arch::x86_64::_mm_getcsr() };
            flush_denormals();
            DenormalsFlushed { saved }
        }
        #[cfg(not(target_arch = "x86_64"))]
        DenormalsFlushed {}
    }
}

impl Default for DenormalsFlushed {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for DenormalsFlushed {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: restores the thread's own earlier MXCSR value.
        #[allow(deprecated)]
        unsafe {
            std::arch::x86_64::_mm_setcsr(self.saved)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    #[allow(deprecated)]
    fn flushing_denormals_for_a_scope_restores_the_callers_setting() {
        use std::arch::x86_64::{_mm_getcsr, _mm_setcsr};
        let product = || std::hint::black_box(f32::MIN_POSITIVE) * std::hint::black_box(0.5f32);
        // SAFETY: MXCSR's FTZ and DAZ flags change only how this thread rounds denormals; the
        // test thread's own value is put back at the end (another test may have flushed it).
        let before = unsafe { _mm_getcsr() };
        unsafe { _mm_setcsr(before & !((1 << 15) | (1 << 6))) };
        assert!(product() > 0.0, "denormals kept to begin with");
        {
            let _g = DenormalsFlushed::new();
            assert_eq!(product(), 0.0, "flushed inside the scope");
        }
        let kept = product() > 0.0;
        unsafe { _mm_setcsr(before) };
        assert!(kept, "the caller's setting restored after the scope");
    }

    #[test]
    fn lane_reductions_take_every_element_once() {
        // Lengths around the 16 lanes; distinct values, the largest placed last (in the
        // remainder when there is one), so a skipped or doubled element shows.
        for len in [0usize, 1, 15, 16, 17, 33, 100] {
            let mut v: Vec<f32> = (0..len).map(|i| ((i * 37 % 29) as f32) - 10.0).collect();
            if let Some(last) = v.last_mut() {
                *last = 100.0;
            }
            let want_sum: f64 = v.iter().map(|&x| x as f64).sum();
            assert!((sum_lanes(&v) as f64 - want_sum).abs() < 1e-3, "len {len}: {} vs {want_sum}", sum_lanes(&v));
            let want_max = v.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            assert_eq!(max_lanes(&v), want_max, "len {len}");
        }
        assert_eq!(max_lanes(&[1.0f64, f64::NAN, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn fast_exp_is_within_a_few_ulp_of_std() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let (a, b) = (exp_f32(x) as f64, (x as f64).exp());
            worst = worst.max(((a - b) / b).abs());
            x += 0.0137;
        }
        assert!(worst < 3e-7, "worst relative error {worst:e}");
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(-1e30) >= 0.0 && exp_f32(-1e30) < 1e-37);
        assert!(exp_f32(1e30).is_finite());
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn ln1p_on_the_unit_interval_is_within_a_few_ulp_of_std() {
        let mut worst = 0f64;
        let mut x = 0.0f32;
        while x <= 1.0 {
            let want = (x as f64).ln_1p();
            worst = worst.max(((ln1p_unit_f32(x) as f64 - want) / want.max(1e-30)).abs());
            x += 0.000_173;
        }
        for x in [1e-30f32, 1e-10, 1e-5, 1.0] {
            let want = (x as f64).ln_1p();
            worst = worst.max(((ln1p_unit_f32(x) as f64 - want) / want).abs());
        }
        assert!(worst < 5e-7, "worst relative error {worst:e}");
        assert_eq!(ln1p_unit_f32(0.0), 0.0);
    }

    #[test]
    fn fast_tanh_and_sigmoid_are_within_a_few_ulp_of_std() {
        let (mut worst_t, mut worst_s) = (0f64, 0f64);
        let mut x = -20.0f32;
        while x < 20.0 {
            let t = (x as f64).tanh();
            worst_t = worst_t.max(((tanh_f32(x) as f64 - t) / t.abs().max(1e-30)).abs());
            let s = 1.0 / (1.0 + (-x as f64).exp());
            worst_s = worst_s.max(((Float::sigmoid(x) as f64 - s) / s).abs());
            x += 0.000_731;
        }
        assert!(worst_t < 1e-6, "tanh: worst relative error {worst_t:e}");
        assert!(worst_s < 1e-6, "sigmoid: worst relative error {worst_s:e}");
        for x in [1e-30f32, -1e-7, 0.19999, 0.2, -0.2] {
            let want = (x as f64).tanh();
            assert!(((tanh_f32(x) as f64 - want) / want).abs() < 1e-6, "tanh({x})");
        }
        assert_eq!(tanh_f32(0.0), 0.0);
        assert_eq!((tanh_f32(f32::INFINITY), tanh_f32(f32::NEG_INFINITY)), (1.0, -1.0));
        assert_eq!((tanh_f32(1e30), tanh_f32(-1e30)), (1.0, -1.0));
        assert!(tanh_f32(f32::NAN).is_nan() && Float::sigmoid(f32::NAN).is_nan());
        assert!(Float::sigmoid(-1e30f32) < 1e-37);
        assert_eq!(Float::sigmoid(1e30f32), 1.0);
    }
}
