//! rnnlens: train, evaluate and look inside recurrent sequence models whose state can be read.
//!
//! - [`cells`]: the recurrent cells, forward and backward over whole sequences;
//! - [`model`]: embedding → stacked cells → softmax decoder, with dropout;
//! - [`data`]: corpus readers and tokenizers; [`checkpoint`]: the on-disk format;
//! - [`train`], [`eval`], [`sample`]: what the command line runs; [`mod@bench`]: its throughput;
//! - [`isan_table`], [`isan_scan`]: inference through composed affine maps (ISAN, linear RNN);
//! - [`hugepages`]: the binary's allocator, large blocks on transparent huge pages.

pub mod bench;
pub mod cells;
pub mod checkpoint;
pub mod data;
pub mod eval;
pub mod explain;
pub mod hugepages;
pub mod idx;
pub mod isan_scan;
pub mod isan_table;
pub mod linalg;
pub mod lm;
pub mod metrics;
pub mod model;
pub mod num;
pub mod optim;
pub mod options;
pub mod plot;
pub mod rng;
pub mod sample;
pub mod sampled;
pub mod tasks;
pub mod train;
