//! The precision the GEMMs compute in: plain f32, or mixed precision as users know it from
//! PyTorch's autocast: both operands of every matrix product rounded to bf16 (round to nearest
//! even) and multiplied with f32 accumulation. Everything else stays f32: master weights,
//! optimizer state, the cells' pointwise math, the carried state, the loss and the softmax;
//! checkpoints are f32 and load in either precision.
//!
//! The precision is ambient rather than an argument of every product: a command sets it once
//! for the process ([`set_process`], from `--precision`), a test or a library caller for a
//! scope ([`with`]), and the GEMM entry points read [`current`]. The pool's jobs that split a
//! product (`gemm::for_each_block`) carry the caller's scope to the worker threads. Which
//! instructions run is chosen at run time: AMX tiles (`TDPBF16PS`, `gemm::amx`; Intel since
//! Sapphire Rapids) where the CPU has them and Linux grants them, else the AVX512-BF16 kernel
//! (`VDPBF16PS`; Intel since Cooper Lake, AMD since Zen 4); a CPU with neither is refused with
//! a message, never silently run in f32. Both compute the same mixed precision (bf16 operands,
//! f32 sums); their bits differ by the order of the sums.
//!
//! The GPU engine's mixed precision is f16 instead (`--precision f16 --device gpu`): both
//! operands of every GEMM rounded to f16, f32 accumulation, and the loss scaled dynamically
//! (f16 overflows at 65,504 and loses small gradients below 6e-8); `kernels::gpu` says how.
//! [`Device::check`](crate::kernels::runtime::Device::check) pairs each precision with the
//! engines that compute in it.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

/// What a GEMM's operands are rounded to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f32 operands and accumulation
    #[default]
    F32,
    /// bf16 operands, f32 accumulation (mixed precision); everything but the products in f32
    Bf16,
    /// f16 operands, f32 accumulation, dynamic loss scaling (the GPU engine's mixed precision)
    F16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }

    /// `f32`, `bf16` or `f16` (a library caller's string, Python's).
    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            "f16" => Ok(Precision::F16),
            _ => bail!("unknown precision {s:?}: use \"f32\", \"bf16\" (the CPU) or \"f16\" (the GPU)"),
        }
    }

    /// Refuse what the CPU engine cannot compute in: bf16 on a CPU without a bf16 kernel,
    /// saying what it lacks, and f16 (the GPU's).
    pub fn check(self) -> Result<()> {
        if self == Precision::F16 {
            bail!("--precision f16 is the GPU engine's mixed precision (tensor cores): give --device gpu with it, or use --precision bf16 on the CPU");
        }
        if self == Precision::Bf16 && !bf16_supported() {
            bail!(
                "--precision bf16 needs a CPU with AVX512-BF16 (Intel Cooper Lake or Sapphire Rapids and later, AMD Zen 4 and later); \
                 this one has none (/proc/cpuinfo lists no avx512_bf16): use --precision f32"
            );
        }
        Ok(())
    }

}

/// The bf16 kernel this CPU runs, for headers and logs (the f32 ones: `gemm::kernels`).
pub fn bf16_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if bf16_supported() && crate::kernels::gemm::amx::applies() {
        return "AMX (TDPBF16PS: 16 x 32 bf16 tiles, f32 accumulation)";
    }
    if bf16_supported() {
        "AVX512-BF16 (VDPBF16PS: bf16 pairs, f32 accumulation)"
    } else {
        "none (this CPU has no AVX512-BF16)"
    }
}

/// Whether this CPU runs the bf16 kernel (`gemm::bf16`): AVX512-BF16 and the AVX-512 subsets
/// the kernel uses.
pub fn bf16_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    return is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512bf16");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// f16's dynamic loss scale (the GPU's `--precision f16`), as a checkpoint keeps it: the scale,
/// the steps since it last changed, and the steps it skipped because a product overflowed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossScale {
    pub scale: f32,
    pub steps: u32,
    pub skipped: u64,
}

static PROCESS: AtomicU8 = AtomicU8::new(0);

thread_local! {
    static SCOPED: Cell<Option<Precision>> = const { Cell::new(None) };
}

/// The precision of products computed on this thread now: the innermost [`with`] scope, else
/// the process's.
pub fn current() -> Precision {
    SCOPED.get().unwrap_or_else(|| match PROCESS.load(Ordering::Relaxed) {
        1 => Precision::Bf16,
        2 => Precision::F16,
        _ => Precision::F32,
    })
}

/// Set the process's precision (a command, once, after [`Precision::check`]).
pub fn set_process(p: Precision) {
    PROCESS.store(p as u8, Ordering::Relaxed);
}

/// Run `f` with products in precision `p` on this thread (and on the pool's threads for the
/// products it splits), restoring the previous scope afterwards, also on a panic.
pub fn with<R>(p: Precision, f: impl FnOnce() -> R) -> R {
    crate::kernels::scope::scoped(&SCOPED, p, f)
}

