//! rnnlens: train, evaluate and look inside recurrent sequence models whose state can be read.
//!
//! The folders are the layers, each using only those listed before it
//! (docs/architecture.md draws them):
//! - [`kernels`]: GEMM and its packing/SIMD kernels, pointwise math, the RNG, the allocator,
//!   the worker pool;
//! - [`data`]: tokenizers, corpora (Brown, IDX) and the checkpoint format on disk;
//! - [`cells`]: the recurrent cells, forward and backward over whole sequences, and their registry;
//! - [`model`]: embedding → stacked cells → softmax decoder, a trained model in memory, scoring;
//! - [`training`]: the trainer, its options, optimizers, sampled softmax, run directory, history;
//! - [`eval`], [`tasks`], [`explain`], [`isan_fast`]: what is done with a trained model (scoring
//!   and sampling, the sequence tasks, the papers' analyses, inference through composed affine
//!   maps);
//! - [`serve`]: the explorer, a local web application over a checkpoint, a corpus and runs;
//! - [`mod@bench`]: the training throughput of every cell against the GEMM peak;
//! - [`render`]: SVG charts and the one HTML/SVG escape, for every layer that draws.

pub mod bench;
pub mod cells;
pub mod data;
pub mod eval;
pub mod explain;
pub mod isan_fast;
pub mod kernels;
pub mod model;
pub mod render;
#[cfg(feature = "serve")]
pub mod serve;
pub mod tasks;
pub mod training;
