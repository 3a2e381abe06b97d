//! A trained task model read back from the checkpoint `rnnlens task` wrote (docs/checkpoint.md,
//! "Task models"): scored on fresh data of its task (`eval`), run on one example (`explain`),
//! and from Python.

use super::generate::{generate, paren_levels, Batch, Images, Loss, TaskKind};
use super::keep::{TaskCheckpointConfig, TaskMeta};
use super::step::{task_eval, task_loss, TaskWs};
use crate::data::checkpoint;
use crate::kernels::gemm::{add_bias_rows, linear};
use crate::kernels::rng::Rng;
use crate::model::{Model, ModelConfig, ModelWs};
use anyhow::{bail, Context, Result};
use std::path::Path;

/// A trained task model.
pub struct TaskModel {
    pub model: Model,
    /// flat parameters, laid out as `model.slots`
    pub w: Vec<f32>,
    pub kind: TaskKind,
    pub meta: TaskMeta,
}

pub use checkpoint::is_task_checkpoint;

/// The symbol shown for input id `s` of a symbolic task: copy and multicopy `_` (blank), `1`–`8`,
/// `!` (recall); parentheses `( ) [ ] { } a`.
pub fn symbol(kind: TaskKind, s: u32) -> char {
    match kind {
        TaskKind::Parentheses => "()[]{}a".chars().nth(s as usize).unwrap_or('?'),
        _ => match s {
            0 => '_',
            9 => '!',
            1..=8 => char::from(b'0' + s as u8),
            _ => '?',
        },
    }
}

/// Refuse a sequence that cannot be scored by `kind` or that no readable report holds.
const MAX_EXPLAINED_STEPS: usize = 2000;

impl TaskModel {
    pub fn load(dir: &Path) -> Result<TaskModel> {
        let (config, tensors, _): (TaskCheckpointConfig<ModelConfig>, _, _) = checkpoint::load_model_dir(dir, |_| false)?;
        let cfg_path = dir.join(checkpoint::CONFIG_FILE);
        if config.model.tokenizer.level != "task" {
            bail!("{}: a task model's tokenizer.level is \"task\", not {:?}", cfg_path.display(), config.model.tokenizer.level);
        }
        let kind: TaskKind = config.task.name.parse().with_context(|| format!("{}: task.name", cfg_path.display()))?;
        kind.check_length(config.task.length).with_context(|| format!("{}: task.length", cfg_path.display()))?;
        let spec = kind.spec();
        if config.model.vocab_size != spec.outputs {
            bail!("{}: the {} task has {} outputs, the model {}", cfg_path.display(), config.task.name, spec.outputs, config.model.vocab_size);
        }
        if let Some(p) = &config.task.permutation {
            let mut sorted = p.clone();
            sorted.sort_unstable();
            if sorted.len() != config.task.length || sorted.iter().enumerate().any(|(i, &v)| i != v) {
                bail!("{}: task.permutation is not a permutation of the {} steps", cfg_path.display(), config.task.length);
            }
        }
        let model = Model::new(config.model).with_context(|| format!("{}", cfg_path.display()))?;
        let want_input = if model.cells[0].reads_tokens() { spec.symbols.unwrap_or(spec.input) } else { spec.input };
        if model.config.input_size != Some(want_input) {
            bail!("{}: the {} task's inputs are {want_input} wide, the model reads {:?}", cfg_path.display(), config.task.name, model.config.input_size);
        }
        let expected: Vec<(String, Vec<usize>)> = model.slots.iter().map(|s| (s.name.clone(), s.shape.clone())).collect();
        let w = checkpoint::expect_tensors(&tensors, &expected).with_context(|| format!("{}", dir.join(checkpoint::MODEL_FILE).display()))?.concat();
        if w.iter().any(|x| !x.is_finite()) {
            bail!("{}: a tensor holds a non-finite value", dir.join(checkpoint::MODEL_FILE).display());
        }
        Ok(TaskModel { model, w, kind, meta: config.task })
    }

    pub fn cell(&self) -> &str {
        &self.model.config.cell_name
    }

    fn perm(&self) -> Vec<usize> {
        self.meta.permutation.clone().unwrap_or_default()
    }

    /// The task's measure over `batches` batches of `batch` fresh sequences drawn from `seed`
    /// (the MNIST tasks: every image of `test`, in batches of `batch`): the mean loss and the
    /// share of scored outputs right, and the number of sequences.
    pub fn evaluate(&self, batches: usize, batch: usize, seed: u64, test: Option<&crate::data::idx::Mnist>) -> Result<(f64, Option<f64>, usize)> {
        if batches == 0 || batch == 0 {
            bail!("--batches and --batch-size must be positive");
        }
        let mut ws = TaskWs::default();
        let mut rng = Rng::new(seed);
        let (mut loss, mut right, mut n) = (0.0, 0.0, 0usize);
        let perm = self.perm();
        let mut add = |b: &Batch, ws: &mut TaskWs| {
            let (l, a) = task_eval(self.kind, &self.model, &self.w, b, ws);
            // weighted by scored positions, so that every batch counts by its outputs
            let k = b.scored.len() as f64;
            loss += l * k;
            right += a.unwrap_or(0.0) * k;
            k
        };
        let mut scored = 0.0;
        match (self.kind, test) {
            (TaskKind::SeqMnist | TaskKind::PermutedSeqMnist, Some(t)) => {
                let images = Images { pixels: &t.images, labels: &t.labels };
                let mut start = 0;
                while start < t.labels.len() {
                    let idx: Vec<usize> = (start..(start + batch).min(t.labels.len())).collect();
                    let b = generate(self.kind, self.meta.length, idx.len(), &mut rng, Some((&images, &idx)), &perm, self.meta.markers)?;
                    scored += add(&b, &mut ws);
                    start += idx.len();
                    n += idx.len();
                }
            }
            (TaskKind::SeqMnist | TaskKind::PermutedSeqMnist, None) => bail!("the MNIST tasks are scored on test images: give --data DIR with the IDX files"),
            _ => {
                for _ in 0..batches {
                    let b = generate(self.kind, self.meta.length, batch, &mut rng, None, &perm, self.meta.markers)?;
                    scored += add(&b, &mut ws);
                    n += batch;
                }
            }
        }
        let accuracy = (self.kind != TaskKind::Addition).then_some(right / scored);
        Ok((loss / scored, accuracy, n))
    }

    /// One sequence of the task drawn from `seed` (batch 1), with its targets; the MNIST tasks
    /// take image `seed mod n` of `test`.
    pub fn example(&self, seed: u64, test: Option<&crate::data::idx::Mnist>) -> Result<Batch> {
        let mut rng = Rng::new(seed);
        let perm = self.perm();
        match (self.kind, test) {
            (TaskKind::SeqMnist | TaskKind::PermutedSeqMnist, Some(t)) => {
                let images = Images { pixels: &t.images, labels: &t.labels };
                let i = (seed % t.labels.len().max(1) as u64) as usize;
                generate(self.kind, self.meta.length, 1, &mut rng, Some((&images, &[i])), &perm, self.meta.markers)
            }
            (TaskKind::SeqMnist | TaskKind::PermutedSeqMnist, None) => bail!("an MNIST example is one of the test images: give --data DIR with the IDX files"),
            _ => generate(self.kind, self.meta.length, 1, &mut rng, None, &perm, self.meta.markers),
        }
    }

    /// One sequence typed by the user: the symbols of a symbolic task (copy and multicopy
    /// `_12345678!`, parentheses `()[]{}a`; spaces ignored), or the values of a real-valued one
    /// separated by spaces or commas (addition: a value marked with `*` is one of the two to
    /// add, e.g. `0.3 0.7* 0.1 0.5*`). Targets are set where the task's rule gives them from
    /// the input alone (parentheses, addition); the copy tasks' are left unscored.
    pub fn parse_input(&self, text: &str) -> Result<Batch> {
        let spec = self.kind.spec();
        let mut b = Batch { batch: 1, ..Default::default() };
        match self.kind {
            TaskKind::Copy | TaskKind::Multicopy | TaskKind::Parentheses => {
                for c in text.chars().filter(|c| !c.is_whitespace()) {
                    let Some(id) = (0..spec.symbols.unwrap_or(0) as u32).find(|&s| symbol(self.kind, s) == c) else {
                        let all: String = (0..spec.symbols.unwrap_or(0) as u32).map(|s| symbol(self.kind, s)).collect();
                        bail!("{c:?} is not a symbol of the {} task (its symbols: {all})", self.meta.name);
                    };
                    b.tokens.push(id);
                }
                b.steps = b.tokens.len();
                b.x = vec![0.0; b.steps * spec.input];
                for (t, &s) in b.tokens.iter().enumerate() {
                    b.x[t * spec.input + s as usize] = 1.0;
                }
                if self.kind == TaskKind::Parentheses {
                    b.scored = (0..b.steps).collect();
                    b.values = paren_levels(&b.tokens).iter().flat_map(|l| l.map(f32::from)).collect();
                }
            }
            TaskKind::Addition | TaskKind::ClassifyLength => {
                let mut marked = Vec::new();
                for v in text.split(|c: char| c == ',' || c.is_whitespace()).filter(|s| !s.is_empty()) {
                    let (num, mark) = match v.strip_suffix('*') {
                        Some(n) => (n, true),
                        None => (v, false),
                    };
                    let x: f32 = num.parse().ok().filter(|x: &f32| x.is_finite()).with_context(|| format!("{v:?} is not a number"))?;
                    if mark && self.kind != TaskKind::Addition {
                        bail!("only the addition task marks values (with *)");
                    }
                    b.x.push(x);
                    if self.kind == TaskKind::Addition {
                        b.x.push(mark as u8 as f32);
                    }
                    if mark {
                        marked.push(x);
                    }
                }
                b.steps = b.x.len() / spec.input;
                if self.kind == TaskKind::Addition && marked.len() == 2 {
                    b.scored = vec![b.steps - 1];
                    b.values = vec![marked[0] + marked[1]];
                }
                if self.kind == TaskKind::ClassifyLength && b.steps > 0 {
                    b.scored = vec![b.steps - 1];
                    b.classes = vec![(b.steps > self.meta.length / 2) as u32];
                }
            }
            TaskKind::SeqMnist | TaskKind::PermutedSeqMnist => bail!("an MNIST input is an image: explain one of the test images with --example N and --data DIR"),
        }
        if b.steps == 0 {
            bail!("the input is empty: give at least one step");
        }
        if b.steps > MAX_EXPLAINED_STEPS {
            bail!("the input has {} steps; at most {MAX_EXPLAINED_STEPS} are explained", b.steps);
        }
        Ok(b)
    }

    /// Run one sequence `b` (batch 1) from the initial state and return the workspaces and the
    /// readout at every step `[T, C]`.
    pub fn run(&self, b: &Batch) -> Result<(ModelWs<f32>, Vec<f32>)> {
        if b.batch != 1 {
            bail!("one sequence at a time");
        }
        let mut state = self.model.initial_state::<f32>(1);
        let mut ws = ModelWs::default();
        self.model.forward_layers(&self.w, Some(&b.x[..]), &b.tokens, b.steps, 1, &mut state, &mut ws, None);
        let (hw, hb) = self.model.head();
        let (h, c) = (self.model.top_width(), self.model.vocab_size());
        let mut out = vec![0f32; b.steps * c];
        linear(b.steps, c, h, ws.layer_input(self.model.cells.len()), &self.w[hw], &mut out, false);
        add_bias_rows(b.steps, c, &[&self.w[hb]], &mut out, c);
        Ok((ws, out))
    }

    /// The loss and accuracy of `b` at its scored positions from the readout `out` `[T, C]` of
    /// [`TaskModel::run`] (None where `b` scores nothing).
    pub fn score(&self, b: &Batch, out: &[f32]) -> Option<(f64, Option<f64>)> {
        if b.scored.is_empty() {
            return None;
        }
        let c = self.model.vocab_size();
        let mut at: Vec<f32> = b.scored.iter().flat_map(|&p| out[p * c..(p + 1) * c].iter().copied()).collect();
        Some(task_loss(self.kind, b, &mut at, false))
    }

    /// What the model answers at step `t` from the readout row `o`: the class (cross-entropy
    /// tasks, a symbol for the copy tasks) or the values.
    pub fn answer(&self, o: &[f32]) -> String {
        match self.kind.spec().loss {
            Loss::CrossEntropy => {
                let k = o.iter().enumerate().fold(0, |best, (i, &v)| if v > o[best] { i } else { best });
                match self.kind {
                    TaskKind::Copy | TaskKind::Multicopy => symbol(self.kind, k as u32).to_string(),
                    _ => k.to_string(),
                }
            }
            Loss::Squared => o.iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join("/"),
        }
    }

    /// Whether the readout row `o` answers scored position `k` of `b` right, as the task's
    /// accuracy counts it (the class, or every value after rounding).
    pub fn is_right(&self, b: &Batch, k: usize, o: &[f32]) -> bool {
        match self.kind.spec().loss {
            Loss::CrossEntropy => o.iter().enumerate().fold(0, |best, (i, &v)| if v > o[best] { i } else { best }) == b.classes[k] as usize,
            Loss::Squared => {
                let c = o.len();
                o.iter().zip(&b.values[k * c..(k + 1) * c]).all(|(v, t)| v.round() == *t)
            }
        }
    }

    /// The label of each step of `b`: its symbol, or its value(s).
    pub fn labels(&self, b: &Batch) -> Vec<String> {
        if !b.tokens.is_empty() {
            return b.tokens.iter().map(|&s| symbol(self.kind, s).to_string()).collect();
        }
        let d = self.kind.spec().input;
        b.x.chunks_exact(d)
            .map(|v| match self.kind {
                TaskKind::Addition => format!("{:.2}{}", v[0], if v[1] == 1.0 { "*" } else { "" }),
                _ => format!("{:.2}", v[0]),
            })
            .collect()
    }

    /// The target at scored position `k` of `b`, as [`TaskModel::answer`] writes answers.
    pub fn target(&self, b: &Batch, k: usize) -> String {
        match self.kind.spec().loss {
            Loss::CrossEntropy => match self.kind {
                TaskKind::Copy | TaskKind::Multicopy => symbol(self.kind, b.classes[k]).to_string(),
                _ => b.classes[k].to_string(),
            },
            Loss::Squared => {
                let c = self.kind.spec().outputs;
                b.values[k * c..(k + 1) * c].iter().map(|v| format!("{v:.2}")).collect::<Vec<_>>().join("/")
            }
        }
    }
}
