//! The sequence tasks of the RDA paper (section 6) and the ISAN paper (section 5): exact
//! generators, each driven by a seed.
//!
//! A [`Batch`] is time-major: `x[t][b][d]` as `[T, B, D]` (and the same inputs as symbol ids in
//! `tokens` for the symbolic tasks, so that cells which switch on the symbol can read them).
//! The loss is computed only at the scored positions `(t, b)`; a sequence shorter than the
//! batch's `T` is padded after its end, and since it is scored at its own last step, no
//! padding ever reaches the state that is scored.
//!
//! Generators (where the paper is silent the choice is stated here and fixed by the seed). Each
//! task has a length `N` (the paper's by default; `rnnlens task --length N` reduces it), whose
//! meaning per task is given in brackets:
//! - `addition` (T = N, default 1000, N ≥ 2): channel 0 uniform in [0, 1), channel 1 a marker, 1 at exactly two
//!   steps, one uniform in [0, T/2) and one in [T/2, T) (integer halves); target: the sum of the two marked
//!   values, at the last step; squared error.
//! - `classify-length` (N = the longest length, default 1000, N ≥ 2): length L uniform in
//!   1..=N, one channel uniform in [0, 1); class `L > N/2` (integer half), scored at step L − 1.
//!   As in the paper, cells that would start from zeros learn their initial state here by
//!   default (`TaskConfig.learn_initial_state`): a length-1 sequence is classified from the
//!   state after a single step, so where that step starts from matters.
//! - `seq-mnist`, `permuted-seq-mnist` (N = 784, 196 or 49): 28×28 images, one pixel (÷255)
//!   per step in row-major order, 10 classes scored at the last step; the permutation of the N
//!   steps is drawn from the seed. A reduced length averages k×k blocks of pixels first
//!   (k = 2 for 196 = 14×14 steps, k = 4 for 49 = 7×7): the same images, seen at a coarser
//!   resolution, so that a 2-core machine can afford the task. Other lengths are refused.
//! - `copy` (T = N, default 120, N ≥ 21): 10 symbols drawn from 8 (ids 1..=8), then blanks
//!   (id 0) with a single recall symbol (id 9) at a step drawn uniformly from 10..=N−11, "randomly
//!   placed over the whole sequence" (RDA paper, 6.4); the 10 steps right after it must output
//!   the 10 symbols, every other step a blank; every step is scored. The RWA authors' generator
//!   (the paper's source for the task) places it the same way, one step short of the end
//!   (its recall never falls on N−11); docs/tasks.md says why we follow the paper.
//! - `multicopy` (T = N, a positive multiple of 20, default 1000): N/20 segments of 20 steps
//!   (50 by default): 8 symbols drawn from 8, a blank, the
//!   recall symbol, 8 blank steps that must output the 8 symbols, 2 blanks; every step scored.
//! - `parentheses` (T = N, default 100): N symbols, uniform over the six brackets `( ) [ ] { }` (ids 0..6) and
//!   the noise symbol `a` (id 6); the target at every step is each bracket type's nesting level
//!   after the symbol, saturating at 5 and floored at 0 (a closing bracket at level 0 is
//!   ignored); three outputs, squared error on the levels (the ISAN paper's linear readout).

mod generate;
pub mod keep;
pub mod model;
mod output;
mod run;
mod config;
mod step;
#[cfg(feature = "gpu")]
mod step_gpu;
mod train;

pub use generate::*;
pub use keep::{Point, TaskMeta, TaskResult};
pub use model::{is_task_checkpoint, TaskModel};
pub use output::*;
pub use run::{run, TaskOptions};
pub use config::*;
pub use step::{task_eval, task_gradient, task_loss, task_step, task_step_ranks, TaskWs};
#[cfg(feature = "gpu")]
pub use step_gpu::gpu_task_batch;
pub use train::*;
