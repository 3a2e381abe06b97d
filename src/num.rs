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
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Act {
    Tanh,
    Identity,
    Relu,
}

impl Act {
    #[inline(always)]
    pub fn f<T: Float>(self, x: T) -> T {
        match self {
            Act::Tanh => x.tanh(),
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
    pub fn name(self) -> &'static str {
        match self {
            Act::Tanh => "tanh",
            Act::Identity => "identity",
            Act::Relu => "relu",
        }
    }
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
