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
//! - `copy` (T = N, default 120, N ≥ 21): 10 symbols drawn from 8 (ids 1..=8), then N − 20
//!   blanks (id 0; 100 by default) of which the last is the recall symbol (id 9), then 10 blanks
//!   during which the output repeats the 10 symbols; every step is scored (blank elsewhere).
//! - `multicopy` (T = N, a positive multiple of 20, default 1000): N/20 segments of 20 steps
//!   (50 by default): 8 symbols drawn from 8, a blank, the
//!   recall symbol, 8 blank steps that must output the 8 symbols, 2 blanks; every step scored.
//! - `parentheses` (T = N, default 100): N symbols, uniform over the six brackets `( ) [ ] { }` (ids 0..6) and
//!   the noise symbol `a` (id 6); the target at every step is each bracket type's nesting level
//!   after the symbol, saturating at 5 and floored at 0 (a closing bracket at level 0 is
//!   ignored); three outputs, squared error on the levels (the ISAN paper's linear readout).

use crate::kernels::rng::Rng;
use anyhow::{bail, Result};

/// How a task is scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// squared error on `outputs` real values
    Squared,
    /// cross-entropy over `outputs` classes
    CrossEntropy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskKind {
    Addition,
    ClassifyLength,
    SeqMnist,
    PermutedSeqMnist,
    Copy,
    Multicopy,
    Parentheses,
}

pub const TASK_NAMES: &[&str] =
    &["addition", "classify-length", "seq-mnist", "permuted-seq-mnist", "copy", "multicopy", "parentheses"];

impl std::str::FromStr for TaskKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<TaskKind> {
        Ok(match s {
            "addition" => TaskKind::Addition,
            "classify-length" => TaskKind::ClassifyLength,
            "seq-mnist" => TaskKind::SeqMnist,
            "permuted-seq-mnist" => TaskKind::PermutedSeqMnist,
            "copy" => TaskKind::Copy,
            "multicopy" => TaskKind::Multicopy,
            "parentheses" => TaskKind::Parentheses,
            _ => bail!("unknown task '{s}'; the tasks are: {}", TASK_NAMES.join(", ")),
        })
    }
}

/// The shape of a task: input width, outputs, loss, and (for symbolic tasks) the symbol count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub input: usize,
    pub outputs: usize,
    pub loss: Loss,
    /// number of input symbols when the input is one-hot symbols
    pub symbols: Option<usize>,
    /// readout heads: the outputs are `heads` groups (parentheses: one per bracket type)
    pub heads: usize,
}

pub const COPY_SYMBOLS: usize = 10;
pub const COPY_DELAY: usize = 100;
pub const MULTICOPY_SEGMENTS: usize = 50;
pub const PAREN_LEN: usize = 100;
pub const ADDITION_LEN: usize = 1000;
pub const MAX_LENGTH: usize = 1000;

impl TaskKind {
    /// The paper's length `N` of the task (see the module doc for what it measures per task).
    pub fn default_length(self) -> usize {
        match self {
            TaskKind::Addition => ADDITION_LEN,
            TaskKind::ClassifyLength => MAX_LENGTH,
            TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => 784,
            TaskKind::Copy => 2 * COPY_SYMBOLS + COPY_DELAY,
            TaskKind::Multicopy => 20 * MULTICOPY_SEGMENTS,
            TaskKind::Parentheses => PAREN_LEN,
        }
    }

    /// Refuse a length the task cannot be built at.
    pub fn check_length(self, n: usize) -> Result<()> {
        let ok = match self {
            TaskKind::Addition | TaskKind::ClassifyLength => n >= 2,
            TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => mnist_pool(n).is_some(),
            // at least the recall symbol between the symbols and their copy
            TaskKind::Copy => n > 2 * COPY_SYMBOLS,
            TaskKind::Multicopy => n > 0 && n.is_multiple_of(20),
            TaskKind::Parentheses => n >= 1,
        };
        if !ok {
            let need = match self {
                TaskKind::Addition | TaskKind::ClassifyLength => "at least 2",
                TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => {
                    "784 (one step per pixel), 196 (2×2 blocks averaged) or 49 (4×4 blocks)"
                }
                TaskKind::Copy => "at least 21 (10 symbols, a gap ending in the recall symbol, 10 outputs)",
                TaskKind::Multicopy => "a positive multiple of 20 (segments of 20 steps)",
                TaskKind::Parentheses => "at least 1",
            };
            bail!("the {self:?} task's length must be {need}, got {n}");
        }
        Ok(())
    }

    /// Whether the paper trains this task with a learned initial state (classify-length: a
    /// sequence of length 1 is classified from the state after one step, so the start matters).
    pub fn default_learn_initial_state(self) -> bool {
        self == TaskKind::ClassifyLength
    }

    pub fn spec(self) -> Spec {
        match self {
            TaskKind::Addition => Spec { input: 2, outputs: 1, loss: Loss::Squared, symbols: None, heads: 1 },
            TaskKind::ClassifyLength => Spec { input: 1, outputs: 2, loss: Loss::CrossEntropy, symbols: None, heads: 1 },
            TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => {
                Spec { input: 1, outputs: 10, loss: Loss::CrossEntropy, symbols: None, heads: 1 }
            }
            TaskKind::Copy | TaskKind::Multicopy => {
                Spec { input: 10, outputs: 10, loss: Loss::CrossEntropy, symbols: Some(10), heads: 1 }
            }
            TaskKind::Parentheses => Spec { input: 7, outputs: 3, loss: Loss::Squared, symbols: Some(7), heads: 3 },
        }
    }
}

/// One batch of a task.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub steps: usize,
    pub batch: usize,
    /// `[T, B, D]`
    pub x: Vec<f32>,
    /// `[T, B]` symbol ids for symbolic tasks (empty otherwise)
    pub tokens: Vec<u32>,
    /// scored positions as `t * B + b`, in increasing order
    pub scored: Vec<usize>,
    /// per scored position: the class (cross-entropy tasks)
    pub classes: Vec<u32>,
    /// per scored position: `outputs` target values (squared-error tasks)
    pub values: Vec<f32>,
}

fn one_hot(tokens: &[u32], width: usize) -> Vec<f32> {
    let mut x = vec![0f32; tokens.len() * width];
    for (row, &t) in x.chunks_exact_mut(width).zip(tokens) {
        row[t as usize] = 1.0;
    }
    x
}

/// The parentheses targets of one sequence of symbols (0..6 brackets, 6 noise).
pub fn paren_levels(symbols: &[u32]) -> Vec<[u8; 3]> {
    let mut level = [0u8; 3];
    symbols
        .iter()
        .map(|&s| {
            if s < 6 {
                let k = (s / 2) as usize;
                if s % 2 == 0 {
                    level[k] = (level[k] + 1).min(5);
                } else {
                    level[k] = level[k].saturating_sub(1);
                }
            }
            level
        })
        .collect()
}

/// Images for the MNIST tasks: `n × 784` bytes and labels.
pub struct Images<'a> {
    pub pixels: &'a [u8],
    pub labels: &'a [u8],
}

/// Draw a training batch of `batch` sequences of the task at length `length` (see the module
/// doc; [`TaskKind::default_length`] is the paper's). `images` is needed by the MNIST tasks (which
/// draw images uniformly, or take `indices` when given), `perm` by the permuted one.
pub fn generate(
    kind: TaskKind,
    length: usize,
    batch: usize,
    rng: &mut Rng,
    images: Option<(&Images, &[usize])>,
    perm: &[usize],
) -> Result<Batch> {
    kind.check_length(length)?;
    let spec = kind.spec();
    let mut b = Batch { batch, ..Default::default() };
    match kind {
        TaskKind::Addition => {
            let t_len = length;
            b.steps = t_len;
            b.x = vec![0.0; t_len * batch * 2];
            for r in 0..batch {
                for t in 0..t_len {
                    b.x[(t * batch + r) * 2] = rng.uniform() as f32;
                }
                let i = rng.below((t_len / 2) as u64) as usize;
                let j = t_len / 2 + rng.below((t_len - t_len / 2) as u64) as usize;
                b.x[(i * batch + r) * 2 + 1] = 1.0;
                b.x[(j * batch + r) * 2 + 1] = 1.0;
                let sum = b.x[(i * batch + r) * 2] + b.x[(j * batch + r) * 2];
                b.scored.push((t_len - 1) * batch + r);
                b.values.push(sum);
            }
        }
        TaskKind::ClassifyLength => {
            let lens: Vec<usize> = (0..batch).map(|_| 1 + rng.below(length as u64) as usize).collect();
            let t_len = *lens.iter().max().unwrap_or(&1);
            b.steps = t_len;
            b.x = vec![0.0; t_len * batch];
            let mut scored: Vec<(usize, u32)> = Vec::new();
            for (r, &l) in lens.iter().enumerate() {
                for t in 0..l {
                    b.x[t * batch + r] = rng.uniform() as f32;
                }
                scored.push(((l - 1) * batch + r, (l > length / 2) as u32));
            }
            scored.sort_unstable();
            b.scored = scored.iter().map(|s| s.0).collect();
            b.classes = scored.iter().map(|s| s.1).collect();
        }
        TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => {
            let Some((img, idx)) = images else { bail!("the MNIST tasks need images (--data DIR with the IDX files)") };
            let n = img.labels.len();
            if n == 0 {
                bail!("no images");
            }
            let k = mnist_pool(length).expect("checked above");
            let side = 28 / k;
            b.steps = length;
            b.x = vec![0.0; length * batch];
            let mut pooled = vec![0f32; length];
            for r in 0..batch {
                let i = if idx.is_empty() { rng.below(n as u64) as usize } else { idx[r % idx.len()] };
                let px = &img.pixels[i * 784..(i + 1) * 784];
                for (q, v) in pooled.iter_mut().enumerate() {
                    let (row, col) = (q / side * k, q % side * k);
                    let sum: u32 = (0..k * k).map(|j| px[(row + j / k) * 28 + col + j % k] as u32).sum();
                    *v = sum as f32 / (255 * k * k) as f32;
                }
                let permuted = kind == TaskKind::PermutedSeqMnist;
                for (t, x) in b.x.iter_mut().skip(r).step_by(batch).enumerate() {
                    *x = pooled[if permuted { perm[t] } else { t }];
                }
                b.scored.push((length - 1) * batch + r);
                b.classes.push(img.labels[i] as u32);
            }
        }
        TaskKind::Copy => {
            let (t_len, delay) = (length, length - 2 * COPY_SYMBOLS);
            b.steps = t_len;
            b.tokens = vec![0; t_len * batch];
            let mut out = vec![0u32; t_len * batch];
            for r in 0..batch {
                for t in 0..COPY_SYMBOLS {
                    let s = 1 + rng.below(8) as u32;
                    b.tokens[t * batch + r] = s;
                    out[(COPY_SYMBOLS + delay + t) * batch + r] = s;
                }
                b.tokens[(COPY_SYMBOLS + delay - 1) * batch + r] = 9;
            }
            b.scored = (0..t_len * batch).collect();
            b.classes = out;
            b.x = one_hot(&b.tokens, spec.input);
        }
        TaskKind::Multicopy => {
            let t_len = length;
            b.steps = t_len;
            b.tokens = vec![0; t_len * batch];
            let mut out = vec![0u32; t_len * batch];
            for r in 0..batch {
                for seg in 0..t_len / 20 {
                    let t0 = seg * 20;
                    for k in 0..8 {
                        let s = 1 + rng.below(8) as u32;
                        b.tokens[(t0 + k) * batch + r] = s;
                        out[(t0 + 10 + k) * batch + r] = s;
                    }
                    b.tokens[(t0 + 9) * batch + r] = 9;
                }
            }
            b.scored = (0..t_len * batch).collect();
            b.classes = out;
            b.x = one_hot(&b.tokens, spec.input);
        }
        TaskKind::Parentheses => {
            b.steps = length;
            b.tokens = vec![0; length * batch];
            b.values = vec![0.0; length * batch * 3];
            for r in 0..batch {
                let seq: Vec<u32> = (0..length).map(|_| rng.below(7) as u32).collect();
                for (t, (&s, lv)) in seq.iter().zip(paren_levels(&seq)).enumerate() {
                    b.tokens[t * batch + r] = s;
                    let row = &mut b.values[(t * batch + r) * 3..(t * batch + r + 1) * 3];
                    row.iter_mut().zip(&lv).for_each(|(o, &l)| *o = l as f32);
                }
            }
            b.scored = (0..length * batch).collect();
            b.x = one_hot(&b.tokens, spec.input);
        }
    }
    Ok(b)
}

/// The side of the pixel blocks averaged into one step of an MNIST task of length `n`.
fn mnist_pool(n: usize) -> Option<usize> {
    match n {
        784 => Some(1),
        196 => Some(2),
        49 => Some(4),
        _ => None,
    }
}

/// A permutation of the `n` steps of an MNIST task drawn from `seed`.
pub fn permutation(seed: u64, n: usize) -> Vec<usize> {
    let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..p.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        p.swap(i, j);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parentheses_levels_of_a_hand_made_string() {
        // ( ( [ a ) ) ) ] { { { { { { }  with ids: ( 0 ) 1 [ 2 ] 3 { 4 } 5 a 6
        let s = [0, 0, 2, 6, 1, 1, 1, 3, 4, 4, 4, 4, 4, 4, 5];
        let lv = paren_levels(&s);
        let want: [[u8; 3]; 15] = [
            [1, 0, 0],
            [2, 0, 0],
            [2, 1, 0],
            [2, 1, 0],
            [1, 1, 0],
            [0, 1, 0],
            [0, 1, 0], // closing at 0 is floored
            [0, 0, 0],
            [0, 0, 1],
            [0, 0, 2],
            [0, 0, 3],
            [0, 0, 4],
            [0, 0, 5],
            [0, 0, 5], // saturates at 5
            [0, 0, 4],
        ];
        assert_eq!(lv, want);
    }

    #[test]
    fn addition_target_is_the_sum_of_the_two_marked_values() {
        let mut rng = Rng::new(3);
        let b = generate(TaskKind::Addition, 1000, 4, &mut rng, None, &[]).unwrap();
        assert_eq!((b.steps, b.scored.len()), (1000, 4));
        for r in 0..4 {
            let marked: Vec<usize> = (0..1000).filter(|&t| b.x[(t * 4 + r) * 2 + 1] == 1.0).collect();
            assert_eq!(marked.len(), 2);
            assert!(marked[0] < 500 && marked[1] >= 500);
            let sum = b.x[(marked[0] * 4 + r) * 2] + b.x[(marked[1] * 4 + r) * 2];
            assert_eq!(b.scored[r], 999 * 4 + r);
            assert_eq!(b.values[r], sum);
        }
    }

    #[test]
    fn classify_length_scores_each_row_at_its_own_last_step() {
        let mut rng = Rng::new(5);
        let b = generate(TaskKind::ClassifyLength, 1000, 50, &mut rng, None, &[]).unwrap();
        assert_eq!(b.scored.len(), 50);
        for (&p, &c) in b.scored.iter().zip(&b.classes) {
            let (t, r) = (p / 50, p % 50);
            let len = t + 1;
            // The row has inputs up to its last step and padding (zeros) after.
            assert!((len..b.steps).all(|u| b.x[u * 50 + r] == 0.0));
            assert_eq!(c, (len > 500) as u32);
        }
        assert!(b.classes.contains(&0) && b.classes.contains(&1));
    }

    #[test]
    fn copy_outputs_the_symbols_after_the_recall() {
        let mut rng = Rng::new(7);
        let b = generate(TaskKind::Copy, 120, 3, &mut rng, None, &[]).unwrap();
        assert_eq!(b.steps, 120);
        for r in 0..3 {
            let tok = |t: usize| b.tokens[t * 3 + r];
            let out = |t: usize| b.classes[t * 3 + r];
            assert_eq!(tok(109), 9);
            for t in 0..10 {
                assert!((1..=8).contains(&tok(t)));
                assert_eq!(out(110 + t), tok(t));
                assert_eq!(out(t), 0);
            }
            assert!((10..109).all(|t| tok(t) == 0));
        }
        assert_eq!(b.x.len(), 120 * 3 * 10);
    }

    #[test]
    fn multicopy_has_fifty_segments() {
        let mut rng = Rng::new(9);
        let b = generate(TaskKind::Multicopy, 1000, 2, &mut rng, None, &[]).unwrap();
        assert_eq!(b.steps, 1000);
        let recalls = (0..1000).filter(|&t| b.tokens[t * 2] == 9).count();
        assert_eq!(recalls, 50);
        for seg in 0..50 {
            for k in 0..8 {
                assert_eq!(b.classes[(seg * 20 + 10 + k) * 2 + 1], b.tokens[(seg * 20 + k) * 2 + 1]);
            }
        }
    }

    #[test]
    fn reduced_lengths_keep_every_target_right() {
        let mut rng = Rng::new(11);
        // addition, T = 10: one marker in [0, 5) and one in [5, 10), the sum scored at step 9.
        let b = generate(TaskKind::Addition, 10, 6, &mut rng, None, &[]).unwrap();
        assert_eq!((b.steps, b.x.len()), (10, 10 * 6 * 2));
        for r in 0..6 {
            let marked: Vec<usize> = (0..10).filter(|&t| b.x[(t * 6 + r) * 2 + 1] == 1.0).collect();
            assert!(marked.len() == 2 && marked[0] < 5 && marked[1] >= 5, "{marked:?}");
            assert_eq!(b.scored[r], 9 * 6 + r);
            assert_eq!(b.values[r], b.x[(marked[0] * 6 + r) * 2] + b.x[(marked[1] * 6 + r) * 2]);
        }
        // classify-length, N = 10: lengths in 1..=10, class L > 5.
        let b = generate(TaskKind::ClassifyLength, 10, 200, &mut rng, None, &[]).unwrap();
        assert!(b.steps <= 10);
        let lens: Vec<usize> = b.scored.iter().map(|&p| p / 200 + 1).collect();
        assert!(lens.contains(&1) && lens.contains(&10));
        for (&l, &c) in lens.iter().zip(&b.classes) {
            assert_eq!(c, (l > 5) as u32, "length {l}");
        }
        // copy, T = 25: symbols at 0..10, the recall at 14 (the end of a 5-step gap), output at 15..25.
        let b = generate(TaskKind::Copy, 25, 2, &mut rng, None, &[]).unwrap();
        assert_eq!(b.steps, 25);
        for r in 0..2 {
            let tok: Vec<u32> = (0..25).map(|t| b.tokens[t * 2 + r]).collect();
            let out: Vec<u32> = (0..25).map(|t| b.classes[t * 2 + r]).collect();
            assert!(tok[..10].iter().all(|s| (1..=8).contains(s)));
            assert_eq!(&tok[10..25], &[0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            assert!(out[..15].iter().all(|&o| o == 0));
            assert_eq!(&out[15..], &tok[..10]);
        }
        // multicopy, T = 60: three segments of 20 steps.
        let b = generate(TaskKind::Multicopy, 60, 2, &mut rng, None, &[]).unwrap();
        assert_eq!((b.steps, b.scored.len()), (60, 120));
        for r in 0..2 {
            let tok: Vec<u32> = (0..60).map(|t| b.tokens[t * 2 + r]).collect();
            let out: Vec<u32> = (0..60).map(|t| b.classes[t * 2 + r]).collect();
            for seg in tok.chunks(20).zip(out.chunks(20)) {
                let (t, o) = seg;
                assert!(t[..8].iter().all(|s| (1..=8).contains(s)));
                assert_eq!(&t[8..], &[0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
                assert_eq!(&o[..10], &[0; 10]);
                assert_eq!(&o[10..18], &t[..8]);
                assert_eq!(&o[18..], &[0, 0]);
            }
        }
        // parentheses, T = 7: the levels of each generated string.
        let b = generate(TaskKind::Parentheses, 7, 3, &mut rng, None, &[]).unwrap();
        assert_eq!((b.steps, b.scored.len(), b.values.len()), (7, 21, 63));
        for r in 0..3 {
            let seq: Vec<u32> = (0..7).map(|t| b.tokens[t * 3 + r]).collect();
            for (t, lv) in paren_levels(&seq).iter().enumerate() {
                assert!((0..3).all(|k| b.values[(t * 3 + r) * 3 + k] == lv[k] as f32));
            }
        }
    }

    #[test]
    fn lengths_a_task_cannot_have_are_refused() {
        let mut rng = Rng::new(1);
        for (kind, bad, good) in [
            (TaskKind::Addition, 1, 2),
            (TaskKind::ClassifyLength, 1, 2),
            (TaskKind::Copy, 20, 21),
            (TaskKind::Multicopy, 50, 40),
            (TaskKind::Parentheses, 0, 1),
        ] {
            assert!(generate(kind, bad, 2, &mut rng, None, &[]).is_err(), "{kind:?} {bad}");
            assert!(generate(kind, good, 2, &mut rng, None, &[]).unwrap().steps <= good);
        }
        assert!(TaskKind::SeqMnist.check_length(100).is_err());
        assert!(TaskKind::PermutedSeqMnist.check_length(784).is_ok());
        for kind in [TaskKind::Addition, TaskKind::ClassifyLength, TaskKind::Copy, TaskKind::Multicopy, TaskKind::Parentheses] {
            assert!(kind.check_length(kind.default_length()).is_ok());
        }
        assert_eq!(TaskKind::Copy.default_length(), 120);
    }

    #[test]
    fn mnist_batches_use_the_permutation() {
        let pixels: Vec<u8> = (0..2 * 784).map(|i| (i % 251) as u8).collect();
        let labels = [3u8, 7];
        let img = Images { pixels: &pixels, labels: &labels };
        let perm = permutation(1, 784);
        assert_eq!(perm.len(), 784);
        let mut sorted = perm.clone();
        sorted.sort_unstable();
        assert!(sorted.iter().enumerate().all(|(i, &p)| i == p));
        let mut rng = Rng::new(1);
        let b = generate(TaskKind::PermutedSeqMnist, 784, 2, &mut rng, Some((&img, &[1, 0])), &perm).unwrap();
        assert_eq!(b.classes, vec![7, 3]);
        for t in 0..784 {
            assert_eq!(b.x[t * 2], pixels[784 + perm[t]] as f32 / 255.0);
        }
        assert!(generate(TaskKind::SeqMnist, 784, 2, &mut rng, None, &[]).is_err());
    }

    #[test]
    fn reduced_mnist_averages_pixel_blocks() {
        // An image whose pixel (row, col) is 10·(row/4) + col/4 (so each 4×4 block is constant)
        // except one pixel of block (0, 0), which is raised by 160: that block averages 10.
        let mut pixels: Vec<u8> = (0..784).map(|i| (10 * (i / 28 / 4) + i % 28 / 4) as u8).collect();
        pixels[29] += 160;
        let labels = [5u8];
        let img = Images { pixels: &pixels, labels: &labels };
        let mut rng = Rng::new(1);
        let b = generate(TaskKind::SeqMnist, 49, 1, &mut rng, Some((&img, &[0])), &[]).unwrap();
        assert_eq!((b.steps, b.x.len(), b.scored.clone(), b.classes.clone()), (49, 49, vec![48], vec![5]));
        for t in 0..49 {
            let want = if t == 0 { 10.0 } else { (10 * (t / 7) + t % 7) as f32 };
            assert!((b.x[t] * 255.0 - want).abs() < 1e-4, "step {t}: {} vs {want}", b.x[t] * 255.0);
        }
        // 14×14: the raised pixel (row 1, col 1) lands in block 0 with a quarter of its weight.
        let b = generate(TaskKind::SeqMnist, 196, 1, &mut rng, Some((&img, &[0])), &[]).unwrap();
        assert!((b.x[0] * 255.0 - 40.0).abs() < 1e-4);
        assert!((b.x[14 * 2 + 2] * 255.0 - 11.0).abs() < 1e-4); // row 2, col 2 → pixel (4, 4)
        // The permuted task permutes the pooled steps.
        let perm = permutation(3, 49);
        let p = generate(TaskKind::PermutedSeqMnist, 49, 1, &mut rng, Some((&img, &[0])), &perm).unwrap();
        let plain = generate(TaskKind::SeqMnist, 49, 1, &mut rng, Some((&img, &[0])), &[]).unwrap();
        for (t, &q) in perm.iter().enumerate() {
            assert_eq!(p.x[t], plain.x[q]);
        }
        assert!(TaskKind::SeqMnist.check_length(98).is_err());
    }
}

// ---------------------------------------------------------------------------------------
// Training a cell on a task
// ---------------------------------------------------------------------------------------

use crate::kernels::gemm::{add_bias_rows, add_col_sums, linear, linear_dw, linear_dx};
use crate::model::{layer_configs, Init, Model, ModelConfig, ModelWs, TokenizerConfig};
use crate::cells::registry::{reads_tokens, CellOptions};
use crate::training::optim::{clip, Optimizer, OptimizerKind};

/// The RDA paper's training set-up (section 6.1), with the sizes a run may reduce.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub hidden: usize,
    pub batch: usize,
    /// optimizer steps at most
    pub steps: usize,
    pub lr: f64,
    /// gradients clipped to [-clip, clip]
    pub clip: f64,
    pub seed: u64,
    /// images for the MNIST tasks: (train, test)
    pub mnist: Option<(crate::data::idx::Mnist, crate::data::idx::Mnist)>,
    /// test images scored at the end (MNIST)
    pub test_limit: usize,
    /// the task's length `N` (None: the paper's; see the module doc)
    pub length: Option<usize>,
    /// learned initial state for cells that start from zeros (None: the task's default,
    /// [`TaskKind::default_learn_initial_state`])
    pub learn_initial_state: Option<bool>,
}

impl TaskConfig {
    pub fn length(&self, kind: TaskKind) -> usize {
        self.length.unwrap_or(kind.default_length())
    }
    pub fn learn_initial_state(&self, kind: TaskKind) -> bool {
        self.learn_initial_state.unwrap_or(kind.default_learn_initial_state())
    }
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig { hidden: 250, batch: 100, steps: 10_000, lr: 0.001, clip: 1.0, seed: 1, mnist: None, test_limit: 10_000, length: None, learn_initial_state: None }
    }
}

/// One point of a learning curve.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Point {
    pub step: usize,
    pub loss: f64,
    /// fraction of scored outputs right (None for addition)
    pub accuracy: Option<f64>,
}

/// What a run measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TaskResult {
    pub task: String,
    pub cell: String,
    /// first step at which the paper's threshold was met, if it was
    pub steps_to_threshold: Option<usize>,
    /// test accuracy (MNIST tasks)
    pub test_accuracy: Option<f64>,
    pub curve: Vec<Point>,
    pub seconds: f64,
    /// the trained parameters (not serialised: [`save_task_model`] writes them)
    #[serde(skip)]
    pub weights: Vec<f32>,
}

/// The paper's measure for each task: loss below (addition) or accuracy reaching a threshold.
pub fn threshold(kind: TaskKind) -> Option<(&'static str, f64)> {
    match kind {
        TaskKind::Addition => Some(("loss <", 0.001)),
        TaskKind::ClassifyLength => Some(("accuracy =", 1.0)),
        TaskKind::Copy => Some(("accuracy >", 0.999)),
        TaskKind::Multicopy => Some(("accuracy >", 0.99)),
        TaskKind::Parentheses => Some(("accuracy >", 0.99)),
        TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => None,
    }
}

fn met(kind: TaskKind, p: &Point) -> bool {
    match threshold(kind) {
        Some(("loss <", t)) => p.loss < t,
        Some(("accuracy =", t)) => p.accuracy.is_some_and(|a| a >= t),
        Some((_, t)) => p.accuracy.is_some_and(|a| a > t),
        None => false,
    }
}

/// A task model: the cell stack on the task's input vectors (or symbols), and a readout; with
/// `learn_initial_state`, cells that start from zeros start from a learned state instead.
pub fn task_model(kind: TaskKind, cell: &str, hidden: usize, learn_initial_state: bool) -> Result<Model> {
    let spec = kind.spec();
    if reads_tokens(cell) && spec.symbols.is_none() {
        bail!("{cell} switches on input symbols; the {kind:?} task's inputs are real numbers");
    }
    let input = if reads_tokens(cell) { spec.symbols.unwrap_or(spec.input) } else { spec.input };
    let opts = CellOptions { learn_initial_state, ..Default::default() };
    let layers = layer_configs(cell, input, &[hidden], None, opts)?;
    Model::new(ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: spec.outputs,
        tokenizer: TokenizerConfig { level: "task".into(), normalize: "none".into() },
        embedding_size: None,
        layers,
        cell_name: cell.into(),
        input_size: Some(input),
    })
}

/// Loss and accuracy at the scored positions, from the readout's outputs `out`
/// `[scored, C]`; with `grad`, `out` becomes the gradient of the mean loss.
fn task_loss(kind: TaskKind, b: &Batch, out: &mut [f32], grad: bool) -> (f64, Option<f64>) {
    let spec = kind.spec();
    let c = spec.outputs;
    let n = b.scored.len();
    match spec.loss {
        Loss::Squared => {
            let mut loss = 0.0f64;
            let mut right = 0usize;
            for (row, tgt) in out.chunks_exact_mut(c).zip(b.values.chunks_exact(c)) {
                for (o, &t) in row.iter_mut().zip(tgt) {
                    let d = *o - t;
                    loss += (d as f64) * (d as f64);
                    right += (o.round() == t) as usize;
                    if grad {
                        *o = 2.0 * d / (n * c) as f32;
                    }
                }
            }
            let acc = (kind != TaskKind::Addition).then(|| right as f64 / (n * c) as f64);
            (loss / (n * c) as f64, acc)
        }
        Loss::CrossEntropy => {
            let mut loss = 0.0f64;
            let mut right = 0usize;
            for (row, &k) in out.chunks_exact_mut(c).zip(&b.classes) {
                let mx = row.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                let arg = row.iter().position(|&v| v == mx).unwrap_or(0);
                right += (arg == k as usize) as usize;
                let sum: f32 = row.iter().map(|&v| (v - mx).exp()).sum();
                loss += (sum.ln() + mx - row[k as usize]) as f64;
                if grad {
                    for v in row.iter_mut() {
                        *v = (*v - mx).exp() / sum / n as f32;
                    }
                    row[k as usize] -= 1.0 / n as f32;
                }
            }
            (loss / n as f64, Some(right as f64 / n as f64))
        }
    }
}

/// Scratch space of a task step: the model's workspace and the readout's buffers, allocated
/// once and reused by every step.
#[derive(Default)]
pub struct TaskWs {
    pub model: ModelWs<f32>,
    /// the top layer's outputs at the scored positions `[scored, H]`
    gathered: Vec<f32>,
    /// the readout's outputs `[scored, C]`, then their gradient
    out: Vec<f32>,
    /// the gradient of `gathered`
    dg: Vec<f32>,
}

/// Forward a batch and compute the readout at the scored positions into `ws.out` `[scored, C]`.
fn forward_scored(model: &Model, w: &[f32], b: &Batch, ws: &mut TaskWs) {
    // A symbol-reading cell (ISAN) takes `tokens`; the one-hot `x` is then simply unused.
    let mut state = model.initial_state::<f32>(b.batch);
    model.forward_layers(w, Some(&b.x[..]), &b.tokens, b.steps, b.batch, &mut state, &mut ws.model, None);
    let h = model.top_width();
    let top = &ws.model.xs[model.cells.len()];
    let (gathered, out) = (&mut ws.gathered, &mut ws.out);
    gathered.clear();
    for &p in &b.scored {
        gathered.extend_from_slice(&top[p * h..(p + 1) * h]);
    }
    let (hw, hb) = model.head();
    let c = model.vocab_size();
    out.clear();
    out.resize(b.scored.len() * c, 0.0);
    linear(b.scored.len(), c, h, gathered, &w[hw], out, false);
    add_bias_rows(b.scored.len(), c, &[&w[hb]], out, c);
}

/// Forward `b` and score it without a gradient: the mean loss and the accuracy.
pub fn task_eval(kind: TaskKind, model: &Model, w: &[f32], b: &Batch, ws: &mut TaskWs) -> (f64, Option<f64>) {
    forward_scored(model, w, b, ws);
    task_loss(kind, b, &mut ws.out, false)
}

/// One training step on `b` as [`run_task`] takes it: forward, loss, backward into `g`
/// (overwritten), gradients clipped to `[-cfg.clip, cfg.clip]`, one optimizer update at `cfg.lr`.
/// Returns the mean loss and the accuracy; a non-finite loss leaves the weights unchanged.
#[allow(clippy::too_many_arguments)]
pub fn task_step(
    kind: TaskKind,
    model: &Model,
    w: &mut [f32],
    g: &mut [f32],
    opt: &mut Optimizer,
    b: &Batch,
    ws: &mut TaskWs,
    cfg: &TaskConfig,
) -> (f64, Option<f64>) {
    forward_scored(model, w, b, ws);
    let (loss, accuracy) = task_loss(kind, b, &mut ws.out, true);
    if !loss.is_finite() {
        return (loss, accuracy);
    }
    g.fill(0.0);
    let (hw, hb) = model.head();
    let (h, c) = (model.top_width(), model.vocab_size());
    let n = b.scored.len();
    linear_dw(n, c, h, &ws.out, &ws.gathered, &mut g[hw.clone()]);
    add_col_sums(n, c, &ws.out, &mut g[hb]);
    let nl = model.cells.len();
    let dxs = &mut ws.model.dxs[nl];
    dxs.fill(0.0);
    ws.dg.resize(n * h, 0.0);
    linear_dx(n, c, h, &ws.out, &w[hw], &mut ws.dg, false);
    for (k, &p) in b.scored.iter().enumerate() {
        dxs[p * h..(p + 1) * h].copy_from_slice(&ws.dg[k * h..(k + 1) * h]);
    }
    model.backward_layers(w, g, &b.tokens, &mut ws.model);
    clip(g, None, Some(cfg.clip));
    opt.step(w, g, cfg.lr);
    (loss, accuracy)
}

/// Train `cell` on `kind` with the paper's set-up, recording the learning curve every
/// `report_every` steps; stops early once the paper's threshold is met.
pub fn run_task(kind: TaskKind, cell: &str, cfg: &TaskConfig, mut progress: impl FnMut(&Point)) -> Result<TaskResult> {
    let t0 = std::time::Instant::now();
    let length = cfg.length(kind);
    kind.check_length(length)?;
    let model = task_model(kind, cell, cfg.hidden, cfg.learn_initial_state(kind))?;
    let mut rng = Rng::new(cfg.seed);
    let mut w = model.init_params(Init::Xavier, &mut rng);
    let mut g = vec![0f32; model.n_params];
    let mut opt = Optimizer::new(OptimizerKind::Adam, model.n_params);
    // Identical data for every cell: the batches come from their own generator.
    let mut data_rng = Rng::new(cfg.seed.wrapping_add(1000));
    let perm = permutation(cfg.seed, length);
    let mut ws = TaskWs::default();
    let mut result = TaskResult {
        task: format!("{kind:?}"),
        cell: cell.into(),
        steps_to_threshold: None,
        test_accuracy: None,
        curve: Vec::new(),
        seconds: 0.0,
        weights: Vec::new(),
    };
    let train_images = cfg.mnist.as_ref().map(|(tr, _)| Images { pixels: &tr.images, labels: &tr.labels });
    for step in 1..=cfg.steps {
        let b = generate(kind, length, cfg.batch, &mut data_rng, train_images.as_ref().map(|i| (i, &[][..])), &perm)?;
        let (loss, accuracy) = task_step(kind, &model, &mut w, &mut g, &mut opt, &b, &mut ws, cfg);
        if !loss.is_finite() {
            bail!("{cell} on {kind:?}: the loss became {loss} at step {step}");
        }
        let p = Point { step, loss, accuracy };
        progress(&p);
        result.curve.push(p);
        if result.steps_to_threshold.is_none() && met(kind, &p) {
            result.steps_to_threshold = Some(step);
            break;
        }
    }
    if let Some((_, test)) = &cfg.mnist {
        let images = Images { pixels: &test.images, labels: &test.labels };
        let n = test.labels.len().min(cfg.test_limit);
        let mut right = 0.0;
        let mut start = 0;
        while start < n {
            let idx: Vec<usize> = (start..(start + cfg.batch).min(n)).collect();
            let b = generate(kind, length, idx.len(), &mut data_rng, Some((&images, &idx)), &perm)?;
            let (_, acc) = task_eval(kind, &model, &w, &b, &mut ws);
            right += acc.unwrap_or(0.0) * idx.len() as f64;
            start += idx.len();
        }
        result.test_accuracy = Some(right / n.max(1) as f64);
    }
    result.seconds = t0.elapsed().as_secs_f64();
    result.weights = w;
    Ok(result)
}

/// What a task checkpoint's `config.json` adds to the model's: the task and how its data was
/// drawn, so that the model can be scored again on the same inputs (for the permuted MNIST
/// task, the permutation of the steps itself).
#[derive(serde::Serialize)]
struct TaskCheckpointConfig<'a> {
    #[serde(flatten)]
    model: &'a ModelConfig,
    task: TaskMeta,
}

#[derive(serde::Serialize)]
struct TaskMeta {
    name: String,
    length: usize,
    seed: u64,
    steps_run: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    permutation: Option<Vec<usize>>,
}

/// Write the model a run trained as a checkpoint directory (config.json with a `task` key,
/// model.safetensors; `vocab.txt` names the outputs).
pub fn save_task_model(dir: &std::path::Path, kind: TaskKind, r: &TaskResult, cfg: &TaskConfig) -> Result<()> {
    let length = cfg.length(kind);
    let model = task_model(kind, &r.cell, cfg.hidden, cfg.learn_initial_state(kind))?;
    if r.weights.len() != model.n_params {
        bail!("no trained weights to save for {}", r.cell);
    }
    let tensors: Vec<crate::data::checkpoint::NamedTensor> = model
        .named(&r.weights)
        .into_iter()
        .map(|(name, shape, data)| crate::data::checkpoint::NamedTensor::new(name, shape.to_vec(), data.to_vec()))
        .collect();
    let config = TaskCheckpointConfig {
        model: &model.config,
        task: TaskMeta {
            name: TASK_NAMES[kind as usize].to_string(),
            length,
            seed: cfg.seed,
            steps_run: r.curve.len(),
            permutation: (kind == TaskKind::PermutedSeqMnist).then(|| permutation(cfg.seed, length)),
        },
    };
    let outputs: Vec<String> = (0..kind.spec().outputs).map(|i| format!("output{i}")).collect();
    crate::data::checkpoint::save_model_dir(dir, &config, &tensors, &outputs, false, &[])
}

#[cfg(test)]
mod run_tests {
    use super::*;

    #[test]
    fn a_gru_learns_short_parentheses_counting_and_isan_reads_symbols() {
        let cfg = TaskConfig { hidden: 24, batch: 16, steps: 150, lr: 0.01, ..Default::default() };
        let r = run_task(TaskKind::Parentheses, "gru", &cfg, |_| {}).unwrap();
        let first = r.curve.first().unwrap().loss;
        let last = r.curve.last().unwrap().loss;
        assert!(last < 0.5 * first, "loss {first} -> {last}");
        let r = run_task(TaskKind::Parentheses, "isan", &cfg, |_| {}).unwrap();
        assert!(r.curve.last().unwrap().loss < r.curve.first().unwrap().loss);
        assert!(run_task(TaskKind::Addition, "isan", &cfg, |_| {}).is_err());
    }

    #[test]
    fn classify_length_learns_the_initial_state_by_default() {
        let has = |m: &Model| m.slots.iter().any(|s| s.name == "rnn.0.initial_state");
        let cfg = TaskConfig::default();
        for (kind, cell, want) in [
            (TaskKind::ClassifyLength, "gru", true),
            (TaskKind::ClassifyLength, "lstm", true),
            (TaskKind::ClassifyLength, "rwa", false), // its own s0 instead
            (TaskKind::Addition, "gru", false),
        ] {
            let m = task_model(kind, cell, 8, cfg.learn_initial_state(kind)).unwrap();
            assert_eq!(has(&m), want, "{kind:?} {cell}");
        }
        let cfg = TaskConfig { learn_initial_state: Some(false), ..cfg };
        assert!(!has(&task_model(TaskKind::ClassifyLength, "gru", 8, cfg.learn_initial_state(TaskKind::ClassifyLength)).unwrap()));
        // A short run trains through it.
        let cfg = TaskConfig { hidden: 8, batch: 8, steps: 3, length: Some(12), ..Default::default() };
        let r = run_task(TaskKind::ClassifyLength, "lstm", &cfg, |_| {}).unwrap();
        assert_eq!(r.curve.len(), 3);
        assert!(r.curve.iter().all(|p| p.loss.is_finite()));
    }

    #[test]
    fn a_permuted_mnist_model_is_saved_with_its_permutation() {
        let mk = |n: usize| crate::data::idx::Mnist {
            images: (0..n * 784).map(|i| (i * 7 % 256) as u8).collect(),
            labels: (0..n).map(|i| (i % 10) as u8).collect(),
            rows: 28,
            cols: 28,
        };
        let cfg = TaskConfig { hidden: 4, batch: 3, steps: 2, length: Some(49), seed: 5, mnist: Some((mk(6), mk(4))), ..Default::default() };
        let r = run_task(TaskKind::PermutedSeqMnist, "gru", &cfg, |_| {}).unwrap();
        assert!(r.test_accuracy.is_some());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gru");
        save_task_model(&path, TaskKind::PermutedSeqMnist, &r, &cfg).unwrap();
        let (config, tensors, vocab) =
            crate::data::checkpoint::load_model_dir::<serde_json::Value>(&path, |_| false).unwrap();
        assert_eq!(vocab.len(), 10);
        let want: Vec<serde_json::Value> = permutation(5, 49).into_iter().map(|p| p.into()).collect();
        assert_eq!(config["task"]["permutation"].as_array().unwrap(), &want);
        assert_eq!(config["task"]["length"], 49);
        assert_eq!(config["input_size"], 1);
        let n: usize = tensors.iter().map(|t| t.data.len()).sum();
        assert_eq!(n, r.weights.len());
        let model = task_model(TaskKind::PermutedSeqMnist, "gru", 4, false).unwrap();
        for t in &tensors {
            let (_, _, data) = model.named(&r.weights).into_iter().find(|(name, _, _)| *name == t.name).unwrap();
            assert_eq!(&t.data[..], data, "{}", t.name);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Comparing cells: the table, the CSV of learning curves and their plot
// ---------------------------------------------------------------------------------------

/// The side-by-side table of a comparison of runs at task length `length`, each of at most
/// `steps` steps.
pub fn table(kind: TaskKind, results: &[TaskResult], steps: usize, length: usize) -> String {
    let measure = match threshold(kind) {
        Some((what, t)) => format!("steps until {what} {t}"),
        None => "test accuracy".to_string(),
    };
    let paper = if length == kind.default_length() { "the paper's" } else { "reduced" };
    let mut s = format!("{kind:?}, length {length} ({paper}), at most {steps} steps\n");
    s += &format!("{:<18} {:>28} {:>12} {:>10}\n", "cell", measure, "final loss", "seconds");
    for r in results {
        let m = match (threshold(kind), r.steps_to_threshold, r.test_accuracy) {
            (None, _, Some(a)) => format!("{a:.4}"),
            (Some(_), Some(n), _) => n.to_string(),
            _ => format!("> {steps}"),
        };
        let last = r.curve.last().map_or(f64::NAN, |p| p.loss);
        s.push_str(&format!("{:<18} {:>28} {:>12.5} {:>10.1}\n", r.cell, m, last, r.seconds));
    }
    s
}

/// `step,cell,loss,accuracy` rows of every learning curve.
pub fn curves_csv(results: &[TaskResult]) -> String {
    let mut s = String::from("step,cell,loss,accuracy\n");
    for r in results {
        for p in &r.curve {
            let acc = p.accuracy.map_or(String::new(), |a| format!("{a}"));
            s.push_str(&format!("{},{},{},{}\n", p.step, r.cell, p.loss, acc));
        }
    }
    s
}

/// The learning curves (loss, log scale, against steps), one line per cell, as an SVG image.
pub fn curves_svg(kind: TaskKind, results: &[TaskResult]) -> String {
    let series = results
        .iter()
        .map(|r| crate::render::Series { label: r.cell.clone(), points: r.curve.iter().map(|p| (p.step as f64, p.loss)).collect() })
        .collect();
    let panel = crate::render::Panel { title: String::new(), xlabel: "step".into(), ylabel: "training loss (log scale)".into(), log_y: true, series };
    crate::render::chart(&format!("{kind:?}: training loss"), &[panel], 1)
}

#[cfg(test)]
mod output_tests {
    use super::*;

    #[test]
    fn table_csv_and_plot_carry_every_cell() {
        let mk = |cell: &str, hit: Option<usize>| TaskResult {
            task: "Addition".into(),
            cell: cell.into(),
            steps_to_threshold: hit,
            test_accuracy: None,
            curve: vec![Point { step: 1, loss: 0.5, accuracy: None }, Point { step: 2, loss: 0.0005, accuracy: None }],
            seconds: 1.0,
            weights: Vec::new(),
        };
        let rs = [mk("gru", Some(2)), mk("lstm", None)];
        let t = table(TaskKind::Addition, &rs, 2, 100);
        assert!(t.contains("steps until loss < 0.001"));
        assert!(t.starts_with("Addition, length 100 (reduced), at most 2 steps"));
        assert!(t.lines().any(|l| l.starts_with("gru") && l.contains(" 2 ")));
        assert!(t.lines().any(|l| l.starts_with("lstm") && l.contains("> 2")));
        let csv = curves_csv(&rs);
        assert_eq!(csv.lines().count(), 5);
        assert!(csv.contains("2,lstm,0.0005,"));
        let svg = curves_svg(TaskKind::Addition, &rs);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">lstm</text>"));
    }
}
