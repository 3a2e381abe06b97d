//! The lowest layer: what every cell and the model compute with.
//!
//! - [`gemm`]: the blocked GEMM, its packing and its AVX2/AVX-512 micro-kernels;
//! - [`precision`]: f32 or bf16 (mixed precision) products, chosen once per command;
//! - [`num`]: pointwise math (activations, reductions) in f32 and f64;
//! - [`mod@f64`]: small dense f64 linear algebra for the analyses (one eigen solver, one median);
//! - [`rng`]: the counter-based generator every seeded step draws from;
//! - [`alloc`]: the binary's allocator, large blocks on transparent huge pages;
//! - [`runtime`]: the worker pool, and the one way an options struct gets its defaults;
//! - [`scope`]: the thread-local scope of an ambient setting (the precision, AMX on or off).

pub mod alloc;
pub mod f64;
pub mod gemm;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod limits;
pub mod num;
pub mod precision;
pub mod rng;
pub mod runtime;
pub mod scope;
