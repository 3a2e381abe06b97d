//! The generators: one [`Batch`] of a task from a seed, exactly as the module above defines it.

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
/// blanks (the recall symbol among them) between the copy task's symbols and the end, by default
pub const COPY_GAP: usize = 100;
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
            TaskKind::Copy => COPY_SYMBOLS + COPY_GAP + COPY_SYMBOLS,
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
                TaskKind::Copy => "at least 21 (10 symbols, the recall symbol, 10 outputs)",
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

impl Batch {
    /// Rows `rows` of the batch (a rank's share under MPI), scored positions renumbered.
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Batch {
        let (t, b, n) = (self.steps, self.batch, rows.len());
        let d = self.x.len().checked_div(t * b).unwrap_or(0);
        let mut out = Batch { steps: t, batch: n, x: Vec::with_capacity(t * n * d), tokens: Vec::new(), scored: Vec::new(), classes: Vec::new(), values: Vec::new() };
        for step in 0..t {
            out.x.extend_from_slice(&self.x[(step * b + rows.start) * d..(step * b + rows.end) * d]);
            if !self.tokens.is_empty() {
                out.tokens.extend_from_slice(&self.tokens[step * b + rows.start..step * b + rows.end]);
            }
        }
        let per = if self.scored.is_empty() { 0 } else { self.values.len() / self.scored.len() };
        for (k, &p) in self.scored.iter().enumerate() {
            let (step, row) = (p / b, p % b);
            if rows.contains(&row) {
                out.scored.push(step * n + row - rows.start);
                if !self.classes.is_empty() {
                    out.classes.push(self.classes[k]);
                }
                out.values.extend_from_slice(&self.values[k * per..(k + 1) * per]);
            }
        }
        out
    }
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

/// Where the addition task's two markers go. The paper says only "all zeros except for two
/// ones"; rnnlens's default puts one in each half of the sequence, and the RWA authors'
/// generator draws both over the whole sequence (two distinct steps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Markers {
    /// one marker in each half
    #[default]
    Halves,
    /// both anywhere in the sequence, at two distinct steps
    Anywhere,
}

impl Markers {
    /// Whether this is the default layout (left out of a checkpoint's `config.json`).
    pub fn is_default(&self) -> bool {
        *self == Markers::default()
    }
}

/// Draw a training batch of `batch` sequences of the task at length `length` (see the module
/// doc; [`TaskKind::default_length`] is the paper's). `images` is needed by the MNIST tasks (which
/// draw images uniformly, or take `indices` when given), `perm` by the permuted one; `markers`
/// lays out the addition task's two markers.
#[allow(clippy::too_many_arguments)]
pub fn generate(
    kind: TaskKind,
    length: usize,
    batch: usize,
    rng: &mut Rng,
    images: Option<(&Images, &[usize])>,
    perm: &[usize],
    markers: Markers,
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
                let (i, j) = match markers {
                    Markers::Halves => (rng.below((t_len / 2) as u64) as usize, t_len / 2 + rng.below((t_len - t_len / 2) as u64) as usize),
                    Markers::Anywhere => {
                        let i = rng.below(t_len as u64) as usize;
                        // a second step drawn from the others
                        let j = rng.below(t_len as u64 - 1) as usize;
                        (i, if j >= i { j + 1 } else { j })
                    }
                };
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
            let t_len = length;
            b.steps = t_len;
            b.tokens = vec![0; t_len * batch];
            let mut out = vec![0u32; t_len * batch];
            for r in 0..batch {
                let symbols: Vec<u32> = (0..COPY_SYMBOLS).map(|_| 1 + rng.below(8) as u32).collect();
                // The recall symbol anywhere after the symbols that leaves room for their copy.
                let recall = COPY_SYMBOLS + rng.below((t_len - 2 * COPY_SYMBOLS) as u64) as usize;
                for (t, &s) in symbols.iter().enumerate() {
                    b.tokens[t * batch + r] = s;
                    out[(recall + 1 + t) * batch + r] = s;
                }
                b.tokens[recall * batch + r] = 9;
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
        let b = generate(TaskKind::Addition, 1000, 4, &mut rng, None, &[], Markers::Halves).unwrap();
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
        let b = generate(TaskKind::ClassifyLength, 1000, 50, &mut rng, None, &[], Markers::Halves).unwrap();
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

    /// The recall position of row `r` of a copy batch, after checking the row against the
    /// paper's description (RDA paper, sections 6.3-6.4): 10 symbols from 8, blanks, a single
    /// recall symbol, the copy right after it, blank outputs everywhere else.
    fn copy_row(b: &Batch, r: usize) -> usize {
        let (t_len, n) = (b.steps, b.batch);
        let tok = |t: usize| b.tokens[t * n + r];
        let out = |t: usize| b.classes[t * n + r];
        let recalls: Vec<usize> = (0..t_len).filter(|&t| tok(t) == 9).collect();
        assert_eq!(recalls.len(), 1, "row {r}: one recall symbol");
        let recall = recalls[0];
        assert!((COPY_SYMBOLS..t_len - COPY_SYMBOLS).contains(&recall), "row {r}: recall at {recall}");
        for t in 0..t_len {
            if t < COPY_SYMBOLS {
                assert!((1..=8).contains(&tok(t)), "row {r} step {t}");
            } else if t != recall {
                assert_eq!(tok(t), 0, "row {r}: blank input at {t}");
            }
            let want = if t > recall && t <= recall + COPY_SYMBOLS { tok(t - recall - 1) } else { 0 };
            assert_eq!(out(t), want, "row {r}: output at {t} (recall at {recall})");
        }
        recall
    }

    #[test]
    fn copy_outputs_the_symbols_right_after_a_recall_placed_anywhere() {
        let mut rng = Rng::new(7);
        let b = generate(TaskKind::Copy, 120, 20_000, &mut rng, None, &[], Markers::Halves).unwrap();
        assert_eq!((b.steps, b.scored.len(), b.x.len()), (120, 120 * 20_000, 120 * 20_000 * 10));
        let mut count = [0usize; 120];
        for r in 0..b.batch {
            count[copy_row(&b, r)] += 1;
        }
        // "Randomly placed over the whole sequence": every position from the step after the
        // symbols (10) to the last that leaves room for the copy (109) is drawn, uniformly (200
        // expected each; 5 standard deviations is about 70), and no other.
        assert!(count[..10].iter().chain(&count[110..]).all(|&c| c == 0));
        for (t, &c) in count.iter().enumerate().take(110).skip(10) {
            assert!((130..=270).contains(&c), "recall at step {t} drawn {c} times in 20,000");
        }
    }

    #[test]
    fn multicopy_has_fifty_segments() {
        let mut rng = Rng::new(9);
        let b = generate(TaskKind::Multicopy, 1000, 2, &mut rng, None, &[], Markers::Halves).unwrap();
        assert_eq!(b.steps, 1000);
        let recalls = (0..1000).filter(|&t| b.tokens[t * 2] == 9).count();
        assert_eq!(recalls, 50);
        for seg in 0..50 {
            for k in 0..8 {
                assert_eq!(b.classes[(seg * 20 + 10 + k) * 2 + 1], b.tokens[(seg * 20 + k) * 2 + 1]);
            }
        }
    }

    /// The addition task's markers: one in each half by default; anywhere, at two distinct
    /// steps, both can fall in one half (the RWA authors' layout), the target their sum either way.
    #[test]
    fn addition_markers_in_halves_or_anywhere() {
        let mut rng = Rng::new(9);
        let (t, n) = (20, 2000);
        for markers in [Markers::Halves, Markers::Anywhere] {
            let b = generate(TaskKind::Addition, t, n, &mut rng, None, &[], markers).unwrap();
            let mut same_half = 0;
            for r in 0..n {
                let at: Vec<usize> = (0..t).filter(|&s| b.x[(s * n + r) * 2 + 1] == 1.0).collect();
                assert_eq!(at.len(), 2, "{markers:?}: two distinct markers");
                let sum: f32 = at.iter().map(|&s| b.x[(s * n + r) * 2]).sum();
                assert!((b.values[r] - sum).abs() < 1e-6);
                same_half += ((at[0] < t / 2) == (at[1] < t / 2)) as usize;
            }
            match markers {
                Markers::Halves => assert_eq!(same_half, 0),
                // two distinct steps of 20 fall in one half with probability 18/38
                Markers::Anywhere => assert!((800..1100).contains(&same_half), "{same_half} of {n}"),
            }
        }
    }

    #[test]
    fn reduced_lengths_keep_every_target_right() {
        let mut rng = Rng::new(11);
        // addition, T = 10: one marker in [0, 5) and one in [5, 10), the sum scored at step 9.
        let b = generate(TaskKind::Addition, 10, 6, &mut rng, None, &[], Markers::Halves).unwrap();
        assert_eq!((b.steps, b.x.len()), (10, 10 * 6 * 2));
        for r in 0..6 {
            let marked: Vec<usize> = (0..10).filter(|&t| b.x[(t * 6 + r) * 2 + 1] == 1.0).collect();
            assert!(marked.len() == 2 && marked[0] < 5 && marked[1] >= 5, "{marked:?}");
            assert_eq!(b.scored[r], 9 * 6 + r);
            assert_eq!(b.values[r], b.x[(marked[0] * 6 + r) * 2] + b.x[(marked[1] * 6 + r) * 2]);
        }
        // classify-length, N = 10: lengths in 1..=10, class L > 5.
        let b = generate(TaskKind::ClassifyLength, 10, 200, &mut rng, None, &[], Markers::Halves).unwrap();
        assert!(b.steps <= 10);
        let lens: Vec<usize> = b.scored.iter().map(|&p| p / 200 + 1).collect();
        assert!(lens.contains(&1) && lens.contains(&10));
        for (&l, &c) in lens.iter().zip(&b.classes) {
            assert_eq!(c, (l > 5) as u32, "length {l}");
        }
        // copy, T = 25: the recall anywhere in 10..=14, the copy right after it; T = 21: at 10.
        let b = generate(TaskKind::Copy, 25, 200, &mut rng, None, &[], Markers::Halves).unwrap();
        let recalls: std::collections::BTreeSet<usize> = (0..200).map(|r| copy_row(&b, r)).collect();
        assert_eq!(recalls.into_iter().collect::<Vec<_>>(), vec![10, 11, 12, 13, 14]);
        let b = generate(TaskKind::Copy, 21, 5, &mut rng, None, &[], Markers::Halves).unwrap();
        assert!((0..5).all(|r| copy_row(&b, r) == 10));
        // multicopy, T = 60: three segments of 20 steps.
        let b = generate(TaskKind::Multicopy, 60, 2, &mut rng, None, &[], Markers::Halves).unwrap();
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
        let b = generate(TaskKind::Parentheses, 7, 3, &mut rng, None, &[], Markers::Halves).unwrap();
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
            assert!(generate(kind, bad, 2, &mut rng, None, &[], Markers::Halves).is_err(), "{kind:?} {bad}");
            assert!(generate(kind, good, 2, &mut rng, None, &[], Markers::Halves).unwrap().steps <= good);
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
        let b = generate(TaskKind::PermutedSeqMnist, 784, 2, &mut rng, Some((&img, &[1, 0])), &perm, Markers::Halves).unwrap();
        assert_eq!(b.classes, vec![7, 3]);
        for t in 0..784 {
            assert_eq!(b.x[t * 2], pixels[784 + perm[t]] as f32 / 255.0);
        }
        assert!(generate(TaskKind::SeqMnist, 784, 2, &mut rng, None, &[], Markers::Halves).is_err());
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
        let b = generate(TaskKind::SeqMnist, 49, 1, &mut rng, Some((&img, &[0])), &[], Markers::Halves).unwrap();
        assert_eq!((b.steps, b.x.len(), b.scored.clone(), b.classes.clone()), (49, 49, vec![48], vec![5]));
        for t in 0..49 {
            let want = if t == 0 { 10.0 } else { (10 * (t / 7) + t % 7) as f32 };
            assert!((b.x[t] * 255.0 - want).abs() < 1e-4, "step {t}: {} vs {want}", b.x[t] * 255.0);
        }
        // 14×14: the raised pixel (row 1, col 1) lands in block 0 with a quarter of its weight.
        let b = generate(TaskKind::SeqMnist, 196, 1, &mut rng, Some((&img, &[0])), &[], Markers::Halves).unwrap();
        assert!((b.x[0] * 255.0 - 40.0).abs() < 1e-4);
        assert!((b.x[14 * 2 + 2] * 255.0 - 11.0).abs() < 1e-4); // row 2, col 2 → pixel (4, 4)
        // The permuted task permutes the pooled steps.
        let perm = permutation(3, 49);
        let p = generate(TaskKind::PermutedSeqMnist, 49, 1, &mut rng, Some((&img, &[0])), &perm, Markers::Halves).unwrap();
        let plain = generate(TaskKind::SeqMnist, 49, 1, &mut rng, Some((&img, &[0])), &[], Markers::Halves).unwrap();
        for (t, &q) in perm.iter().enumerate() {
            assert_eq!(p.x[t], plain.x[q]);
        }
        assert!(TaskKind::SeqMnist.check_length(98).is_err());
    }
}
