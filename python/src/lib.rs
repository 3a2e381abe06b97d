//! `rnnlens._rnnlens`: the rnnlens library seen from Python. Each function here converts its
//! arguments, releases the interpreter (`Python::detach`) while the library computes, and
//! hands numbers back as numpy arrays that take over the library's buffers (no second copy).
//! The Python package (`rnnlens/__init__.py`) wraps these in documented classes; errors of the
//! library become `rnnlens.RnnlensError` (a `ValueError`) carrying the command line's message.

use numpy::{IntoPyArray, PyArray1, PyArrayMethods};
use pyo3::types::PyDict;
use rnnlens::explain::isan::IsanAnalysis;
use rnnlens::explain::ran::Influence;
use rnnlens::explain::report;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rnnlens::data::Level;
use rnnlens::eval::sample::sample_with;
use rnnlens::kernels::num::DenormalsFlushed;
use rnnlens::kernels::precision::Precision;
use rnnlens::kernels::runtime::{check_fits, Device, Runtime};
use rnnlens::model::engine::Engine;
use rnnlens::model::lm::Lm;
use rnnlens::model::{memory, trace};
use rnnlens::tasks::TaskOptions;
use rnnlens::model::run::RunRecord;
use rnnlens::training::rundir;
use rnnlens::training::{self, Progress, Start, TrainConfig};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

mod fused;

create_exception!(_rnnlens, RnnlensError, PyValueError, "An error of rnnlens, with the message its command line gives.");

/// The library's error as a Python exception: its whole chain of causes, as the CLI prints it.
fn err(e: anyhow::Error) -> PyErr {
    RnnlensError::new_err(format!("{e:#}"))
}

/// Large blocks on transparent huge pages, as the command line's (`rnnlens::kernels::alloc`):
/// the extension's own allocations (workspaces, outputs handed to numpy, gradients).
#[global_allocator]
static ALLOC: rnnlens::kernels::alloc::HugePages = rnnlens::kernels::alloc::HugePages;

/// The worker pool's size asked for before the first computation (0: every core).
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// Run `f` without the interpreter, on a started pool, with denormals flushed on this thread
/// for the duration (as the command line computes; the interpreter's own setting comes back).
/// Its products in `precision` (train and task take theirs from their options). Ctrl-C
/// (any signal whose Python handler raises) stops the work within about a tenth of a second:
/// the loops that can run long ask between windows, and the handler's exception is raised
/// here, nothing of the partial result kept.
fn compute<T: Send>(py: Python<'_>, precision: Precision, f: impl FnOnce() -> anyhow::Result<T> + Send) -> PyResult<T> {
    let raised: Arc<Mutex<Option<PyErr>>> = Arc::default();
    let seen = raised.clone();
    let out = py.detach(move || {
        let n = THREADS.load(Ordering::Relaxed);
        Runtime { threads: (n > 0).then_some(n), ..Runtime::default() }.start_pool()?;
        let _flushed = DenormalsFlushed::new();
        let last = std::cell::Cell::new(std::time::Instant::now());
        let check = move || {
            if seen.lock().is_ok_and(|e| e.is_some()) {
                return true;
            }
            if last.get().elapsed() < std::time::Duration::from_millis(100) {
                return false;
            }
            last.set(std::time::Instant::now());
            match Python::attach(|py| py.check_signals()) {
                Ok(()) => false,
                Err(e) => {
                    if let Ok(mut slot) = seen.lock() {
                        *slot = Some(e);
                    }
                    true
                }
            }
        };
        rnnlens::kernels::runtime::watching(Box::new(check), || rnnlens::kernels::precision::with(precision, f))
    });
    if let Some(e) = raised.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    // A signal that came after the last check is raised now, before any array is built.
    py.check_signals()?;
    out.map_err(err)
}

/// The size of the worker pool for the rest of the process: must come before the first
/// computation (the pool is started once). Returns the size in force.
#[pyfunction]
fn set_threads(py: Python<'_>, n: usize) -> PyResult<usize> {
    if n == 0 {
        return Err(PyValueError::new_err("threads must be at least 1"));
    }
    THREADS.store(n, Ordering::Relaxed);
    let got = py.detach(|| Runtime { threads: Some(n), ..Runtime::default() }.start_pool()).map_err(err)?;
    if got != n {
        return Err(RnnlensError::new_err(format!(
            "the worker pool was started already with {got} threads; call set_threads before anything else"
        )));
    }
    Ok(got)
}

/// Text from Python: `str`, or `bytes` for a byte-level model (or any model: decoded as UTF-8
/// where the level needs it).
#[derive(FromPyObject)]
enum Text {
    Str(String),
    Bytes(Vec<u8>),
}

impl Text {
    fn bytes(&self) -> &[u8] {
        match self {
            Text::Str(s) => s.as_bytes(),
            Text::Bytes(b) => b,
        }
    }
}

/// Per layer, its named state arrays (`states`).
type NamedStates<'py> = Vec<Vec<(String, Bound<'py, PyAny>)>>;

/// A trained model loaded from its checkpoint directory.
#[pyclass(frozen, module = "rnnlens._rnnlens")]
struct Model {
    lm: Lm,
    /// the run's trainer state, where the directory has one (how it was trained and on what)
    saved: Option<RunRecord>,
    dir: PathBuf,
    /// the precision of its matrix products (`load(..., precision=)`)
    precision: Precision,
    /// where `log_probs` and `sample` compute (`load(..., device=)`)
    engine: Engine,
}

impl Model {
    /// The tokens of a text, its size checked against the memory first (the text, its
    /// normalised copy and up to one 4-byte id per byte).
    fn read(&self, text: &Text) -> PyResult<Vec<u32>> {
        let n = text.bytes().len() as u64;
        check_fits(&format!("reading a text of {n} bytes"), n.saturating_mul(6), "give a shorter text").map_err(err)?;
        self.lm.tok.encode_bytes(text.bytes()).map_err(err)
    }
}

#[pymethods]
impl Model {
    /// The precision of its products: "f32", "bf16" (the CPU) or "f16" (the GPU).
    #[getter]
    fn precision(&self) -> &'static str {
        self.precision.name()
    }

    /// Where `log_probs` and `sample` compute: "cpu" or "gpu".
    #[getter]
    fn device(&self) -> &'static str {
        self.engine.device().name()
    }

    /// `config.json` as a JSON string.
    #[getter]
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.lm.model.config).map_err(|e| err(e.into()))
    }

    /// `trainer.json` as a JSON string, or None for a checkpoint without one.
    #[getter]
    fn trainer_json(&self) -> PyResult<Option<String>> {
        self.saved.as_ref().map(|s| serde_json::to_string(&s.json).map_err(|e| err(e.into()))).transpose()
    }

    #[getter]
    fn vocab(&self) -> Vec<String> {
        self.lm.tok.tokens().to_vec()
    }

    #[getter]
    fn level(&self) -> String {
        self.lm.tok.level.to_string()
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.dir.clone()
    }

    /// Word level: how typed text is cut into words (`tokenizer.split`); None at other levels.
    #[getter]
    fn split(&self) -> Option<&'static str> {
        self.lm.tok.unk_id().map(|_| self.lm.tok.split().as_str())
    }

    /// The tokens of `text` as strings, as `encode` reads it.
    fn tokens(&self, text: Text) -> PyResult<Vec<String>> {
        let ids = self.read(&text)?;
        Ok(ids.iter().map(|&i| self.lm.tok.tokens()[i as usize].clone()).collect())
    }

    /// The share of `text`'s tokens that are `<unk>` (0 at char and byte level, where a
    /// character outside the vocabulary is an error instead).
    fn unknown_share(&self, text: Text) -> PyResult<f64> {
        let ids = self.read(&text)?;
        Ok(self.lm.tok.unk_share(&ids).unwrap_or(0.0))
    }

    fn encode<'py>(&self, py: Python<'py>, text: Text) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let ids = self.read(&text)?;
        Ok(ids.into_pyarray(py))
    }

    fn decode(&self, ids: Vec<u32>) -> PyResult<String> {
        check_ids(&self.lm, &ids)?;
        Ok(self.lm.tok.decode(&ids))
    }

    fn decode_bytes(&self, ids: Vec<u32>) -> PyResult<Vec<u8>> {
        check_ids(&self.lm, &ids)?;
        Ok(self.lm.tok.decode_bytes(&ids))
    }

    /// ln p of every token of `text` after the first, given all before it: `rnnlens eval
    /// --input FILE --per-token OUT` on the same text, the same numbers; with the share of the
    /// text that is `<unk>` (None at char and byte level), for the Python side's warning.
    fn log_probs<'py>(&self, py: Python<'py>, text: Text) -> PyResult<(Bound<'py, PyArray1<f64>>, Option<f64>)> {
        let stream = self.read(&text)?;
        if stream.len() < 2 {
            return Err(RnnlensError::new_err(format!("the text has {} tokens; at least 2 are needed to score one", stream.len())));
        }
        // The streaming evaluation, as `rnnlens eval` at batch 1.
        let (carry, bptt) = (true, 100);
        memory::check_scoring(&self.lm.model, stream.len(), 1, bptt, true, "give a shorter text").map_err(err)?;
        // A long text says how far it is on stderr (a bar in a terminal, a line every 30 s in a
        // notebook); a short one says nothing.
        let progress = stream.len() > LONG_TEXT;
        let per = compute(py, self.precision, || {
            let mut per = Vec::with_capacity(stream.len() - 1);
            self.engine.score(&self.lm.model, &self.lm.w, &stream, 1, bptt, carry, Some(&mut per), progress)?;
            Ok(per)
        })?;
        Ok((per.into_pyarray(py), self.lm.tok.unk_share(&stream)))
    }

    /// The states after every token of `text`, read as `log_probs` reads it: per layer, a list
    /// of `(name, array [T, width])`, first the layer's `output`, then what its cell traces.
    fn states<'py>(&self, py: Python<'py>, text: Text) -> PyResult<NamedStates<'py>> {
        let tokens = self.read(&text)?;
        if tokens.is_empty() {
            return Err(RnnlensError::new_err("the text is empty: it has no states"));
        }
        let (carry, bptt) = (true, 100);
        memory::check_states(&self.lm.model, tokens.len(), "the states", "give a shorter text").map_err(err)?;
        let layers = compute(py, self.precision, || Ok(trace::states(&self.lm.model, &self.lm.w, &tokens, bptt, carry)))?;
        let n = tokens.len();
        let mut out = Vec::with_capacity(layers.len());
        for layer in layers {
            let mut named = Vec::with_capacity(1 + layer.cell.len());
            for t in std::iter::once(layer.output).chain(layer.cell) {
                // The library's buffer becomes the array's: reshaped, not copied.
                let a = t.values.into_pyarray(py).reshape([n, t.width])?;
                named.push((t.name.to_string(), a.into_any()));
            }
            out.push(named);
        }
        Ok(out)
    }

    /// `rnnlens explain` on `text`: every analysis that applies to the model, as a dict of
    /// arrays and numbers (the ones `explain --report` writes as CSV and JSON); an ISAN's
    /// unigram and bigram distributions counted on `distributions`, "text" or "train"
    /// (`explain --distributions`).
    #[pyo3(signature = (text, components = Vec::new(), distributions = "text"))]
    fn explain<'py>(&self, py: Python<'py>, text: Text, components: Vec<usize>, distributions: &str) -> PyResult<Bound<'py, PyDict>> {
        let tokens = self.read(&text)?;
        let Some(which) = report::Distributions::parse(distributions) else {
            return Err(PyValueError::new_err(format!("distributions must be \"text\" or \"train\", not {distributions:?}")));
        };
        let distributions = which.counted_on(&self.lm, &self.dir).map_err(err)?;
        let ex = compute(py, self.precision, || report::explain(&self.lm, &tokens, &report::Options { components, distributions }))?;
        let (d, ex) = explanation_dict(py, ex)?;
        d.set_item("isan", ex.isan.map(|i| isan_dict(py, i.analysis)).transpose()?)?;
        d.set_item("unknown_share", self.lm.tok.unk_share(&tokens))?;
        d.set_item("tokens", ex.tokens.into_pyarray(py))?;
        Ok(d)
    }

    /// `rnnlens sample`: feed `prime`, then draw `length` tokens at `inverse_temperature` from
    /// the generator seeded with `seed`; returns the text drawn (the prime excluded).
    #[pyo3(signature = (prime = String::new(), length = 100, inverse_temperature = 1.0, seed = 1))]
    fn sample(&self, py: Python<'_>, prime: String, length: usize, inverse_temperature: f64, seed: u64) -> PyResult<String> {
        if length == 0 {
            return Err(RnnlensError::new_err("length 0 samples nothing; give the number of tokens to generate"));
        }
        let ids = compute(py, self.precision, || sample_with(&self.lm, &prime, length, inverse_temperature, seed, None, &self.engine))?;
        let sep = if self.lm.tok.level == Level::Word && !prime.is_empty() && !prime.ends_with(char::is_whitespace) { " " } else { "" };
        Ok(format!("{sep}{}", self.lm.tok.decode(&ids)))
    }

    fn __repr__(&self) -> String {
        let c = &self.lm.model.config;
        let layers: Vec<String> = c.layers.iter().map(|l| format!("{} {}", l.cell, l.hidden_size)).collect();
        format!(
            "rnnlens.Model({:?}: {} level, {} tokens, layers [{}], {} parameters)",
            self.dir.display().to_string(),
            self.lm.tok.level,
            c.vocab_size,
            layers.join(", "),
            self.lm.model.n_params
        )
    }
}

/// What `explain` gives a language model's and a task model's caller alike: `cell`,
/// `summary`, `labels`, `not_applicable`, `pca`, `ran`, `attention`; and the explanation with
/// what is left of it (its ISAN section, its task section, its tokens).
fn explanation_dict(py: Python<'_>, mut ex: report::Explanation) -> PyResult<(Bound<'_, PyDict>, report::Explanation)> {
    let d = PyDict::new(py);
    d.set_item("cell", &ex.cell)?;
    d.set_item("summary", ex.summary())?;
    d.set_item("labels", &ex.labels)?;
    d.set_item("not_applicable", &ex.not_applicable)?;
    let pca = PyDict::new(py);
    pca.set_item("layer", ex.pca.layer)?;
    pca.set_item("fractions", ex.pca.fractions().into_pyarray(py))?;
    pca.set_item("participation_ratio", ex.pca.participation_ratio())?;
    pca.set_item("eigenvalues", std::mem::take(&mut ex.pca.eigenvalues).into_pyarray(py))?;
    d.set_item("pca", pca)?;
    let influence = |layers: Vec<Influence>| -> PyResult<Vec<Bound<'_, PyDict>>> { layers.into_iter().map(|l| influence_dict(py, l)).collect() };
    d.set_item("ran", ex.ran.take().map(|r| influence(r.layers)).transpose()?)?;
    d.set_item("attention", ex.attention.take().map(|a| influence(a.layers)).transpose()?)?;
    Ok((d, ex))
}

/// One layer's RAN weights or effective attention weights (`explain`'s `*_layer{l}_weights.csv`
/// and `*_arrows.json`).
fn influence_dict(py: Python<'_>, l: Influence) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let n = l.steps;
    d.set_item("layer", l.layer)?;
    d.set_item("cell", l.cell)?;
    d.set_item("hidden", l.hidden)?;
    d.set_item("weights", l.max_w.into_pyarray(py).reshape([n, n])?)?;
    d.set_item("arrows", l.arrows.iter().map(|&v| v as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("predecessors", l.predecessors.iter().map(|p| p.map_or(-1, |p| p as i64)).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("initial_state_weight", l.init_max.into_pyarray(py))?;
    let comps = PyDict::new(py);
    for (m, w) in l.components {
        comps.set_item(m, w.into_pyarray(py).reshape([n, n])?)?;
    }
    d.set_item("components", comps)?;
    d.set_item("reconstruction_relative_error", l.rel_error)?;
    d.set_item("worst_position_relative_error", l.max_step_error)?;
    d.set_item("max_sum_error", l.max_sum_error)?;
    Ok(d)
}

/// Rows of equal length as one `[rows, width]` array.
fn matrix<'py>(py: Python<'py>, rows: &[Vec<f64>]) -> PyResult<Bound<'py, PyAny>> {
    let width = rows.first().map_or(0, |r| r.len());
    let flat: Vec<f64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Ok(flat.into_pyarray(py).reshape([rows.len(), width])?.into_any())
}

/// The ISAN's analyses (`explain`'s `isan_*.csv` and `isan_summary.json`).
fn isan_dict(py: Python<'_>, a: IsanAnalysis) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let (w, v) = (a.window.len(), a.vocab);
    d.set_item("distributions_of", a.distributions_of.clone())?;
    d.set_item("distribution_tokens", a.distribution_tokens)?;
    d.set_item("window_start", a.window_start)?;
    d.set_item("window", a.window.clone().into_pyarray(py))?;
    d.set_item("b_ro", a.b_ro.clone().into_pyarray(py))?;
    // κ_s^t at [t, s, :], zero for s > t.
    let mut kappa = vec![0f64; w * w * v];
    for (t, row) in a.kappa.iter().enumerate() {
        for (s, k) in row.iter().enumerate() {
            kappa[(t * w + s) * v..(t * w + s + 1) * v].copy_from_slice(k);
        }
    }
    d.set_item("kappa", kappa.into_pyarray(py).reshape([w, w, v])?)?;
    d.set_item("kappa_before", matrix(py, &a.kappa_before)?)?;
    d.set_item("logits", matrix(py, &a.logits)?)?;
    d.set_item("identity_error", a.identity_error())?;
    let spans: Vec<(usize, usize, String, bool)> = a.spans.iter().map(|s| (s.start, s.end, s.text.clone(), s.separator)).collect();
    d.set_item("spans", spans)?;
    d.set_item("word_kappa_last", matrix(py, &a.word_kappa)?)?;
    d.set_item("decay_lag", a.decay.iter().map(|x| x.0 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("decay_mean_norm", a.decay.iter().map(|x| x.1).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("decay_pairs", a.decay.iter().map(|x| x.2 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("history_ce_k", a.history_ce.iter().map(|x| x.0 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("history_ce", a.history_ce.iter().map(|x| x.1).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("full_ce", a.full_ce)?;
    let wp = PyDict::new(py);
    wp.set_item("pos", a.by_word_pos.iter().map(|x| x.pos as i64).collect::<Vec<_>>().into_pyarray(py))?;
    wp.set_item("count", a.by_word_pos.iter().map(|x| x.count as i64).collect::<Vec<_>>().into_pyarray(py))?;
    wp.set_item("median_all", a.by_word_pos.iter().map(|x| x.all).collect::<Vec<_>>().into_pyarray(py))?;
    wp.set_item("median_separators_only", a.by_word_pos.iter().map(|x| x.separators_only).collect::<Vec<_>>().into_pyarray(py))?;
    wp.set_item("median_without_separators", a.by_word_pos.iter().map(|x| x.without_separators).collect::<Vec<_>>().into_pyarray(py))?;
    d.set_item("word_position_ce", wp)?;
    d.set_item("unigram", a.unigram.clone().into_pyarray(py))?;
    d.set_item("softmax_b_ro", a.softmax_b_ro.clone().into_pyarray(py))?;
    d.set_item("unigram_corr", a.unigram_corr)?;
    d.set_item("unigram_log_corr", a.unigram_log_corr)?;
    // The biases' norms in the readout basis, per symbol (NaN where the split does not exist).
    let split = |f: fn(&rnnlens::explain::isan::BiasSplit) -> f64| -> Vec<f64> {
        (0..v).map(|j| a.bias_split.get(j).map_or(f64::NAN, f)).collect()
    };
    d.set_item("bias_norm", split(|b| b.norm).into_pyarray(py))?;
    d.set_item("bias_norm_parallel", split(|b| b.norm_parallel).into_pyarray(py))?;
    d.set_item("bias_norm_perp", split(|b| b.norm_perp).into_pyarray(py))?;
    d.set_item("bias_corr", a.bias_corr.to_vec())?;
    let emb = PyDict::new(py);
    emb.set_item("words", a.word_embedding.iter().map(|x| x.0.clone()).collect::<Vec<_>>())?;
    emb.set_item("count", a.word_embedding.iter().map(|x| x.1 as i64).collect::<Vec<_>>().into_pyarray(py))?;
    emb.set_item("pc1", a.word_embedding.iter().map(|x| x.2).collect::<Vec<_>>().into_pyarray(py))?;
    emb.set_item("pc2", a.word_embedding.iter().map(|x| x.3).collect::<Vec<_>>().into_pyarray(py))?;
    emb.set_item("variance", a.word_embedding_variance.to_vec())?;
    d.set_item("word_embedding", emb)?;
    Ok(d)
}

fn check_ids(lm: &Lm, ids: &[u32]) -> PyResult<()> {
    let v = lm.tok.tokens().len();
    match ids.iter().find(|&&i| i as usize >= v) {
        Some(bad) => Err(RnnlensError::new_err(format!("token id {bad} is outside the vocabulary of {v} tokens"))),
        None => Ok(()),
    }
}

/// Ask Python whether a signal (Ctrl-C) is pending, or run the caller's callback, for an
/// observer of the library: `Break` when training must stop, with the Python error to raise
/// (None when the callback asked to stop by returning False).
struct Listener {
    callback: Option<Py<PyAny>>,
    error: Option<PyErr>,
    stopped: bool,
}

impl Listener {
    fn hear(&mut self, event: impl FnOnce(Python<'_>) -> PyResult<Bound<'_, PyDict>>) -> std::ops::ControlFlow<()> {
        use std::ops::ControlFlow::{Break, Continue};
        Python::attach(|py| {
            if let Err(e) = py.check_signals() {
                self.error = Some(e);
                return Break(());
            }
            let Some(cb) = &self.callback else { return Continue(()) };
            match event(py).and_then(|d| cb.call1(py, (d,))) {
                Err(e) => {
                    self.error = Some(e);
                    Break(())
                }
                Ok(r) if matches!(r.extract::<bool>(py), Ok(false)) => {
                    self.stopped = true;
                    Break(())
                }
                Ok(_) => Continue(()),
            }
        })
    }

    /// The run's end: the Python error that stopped it, or a stop the callback asked for
    /// (`Ok(true)`), or the library's error.
    fn finish<T>(self, r: anyhow::Result<T>) -> PyResult<Option<T>> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.downcast_ref::<training::Stopped>().is_some() => match self.error {
                Some(py_err) => Err(py_err),
                None if self.stopped => Ok(None),
                None => Err(err(e)),
            },
            Err(e) => Err(err(e)),
        }
    }
}

/// `rnnlens train` with the configuration `config_json` (the TOML configuration's keys) or
/// the TOML file `config_path`, or `--resume resume` with the keys given changed; returns the
/// run directory. `callback(dict)` hears every step and validation; returning False stops the
/// run there (its last checkpoint kept); Ctrl-C does the same and raises KeyboardInterrupt.
#[pyfunction]
#[pyo3(signature = (config_json = None, config_path = None, resume = None, overwrite = false, quiet = false, callback = None))]
fn train(
    py: Python<'_>,
    config_json: Option<String>,
    config_path: Option<PathBuf>,
    resume: Option<PathBuf>,
    overwrite: bool,
    quiet: bool,
    callback: Option<Py<PyAny>>,
) -> PyResult<(String, bool)> {
    let given: serde_json::Value = match &config_json {
        Some(j) => serde_json::from_str(j).map_err(|e| PyValueError::new_err(format!("config: {e}")))?,
        None => serde_json::json!({}),
    };
    let cfg = (|| -> anyhow::Result<TrainConfig> {
        let base = match (&resume, &config_path) {
            (Some(dir), _) => serde_json::to_value(rundir::resume_config(dir)?)?,
            (None, Some(p)) => serde_json::to_value(TrainConfig::from_toml(p)?)?,
            (None, None) => serde_json::to_value(TrainConfig::default())?,
        };
        let mut merged = base;
        if let (Some(m), serde_json::Value::Object(g)) = (merged.as_object_mut(), given) {
            for (k, v) in g {
                m.insert(k, v);
            }
        }
        TrainConfig::from_value(merged)
    })()
    .map_err(err)?;
    let out = cfg.out.display().to_string();
    let start = match (&resume, overwrite) {
        (Some(dir), _) => Start::Resume(dir),
        (None, true) => Start::Replace,
        (None, false) => Start::New,
    };
    let mut listener = Listener { callback, error: None, stopped: false };
    let r = py.detach(|| {
        let _flushed = DenormalsFlushed::new();
        training::train_observed(cfg, start, quiet, &mut |p| {
            listener.hear(|py| {
                let d = PyDict::new(py);
                match *p {
                    Progress::Step { step, epoch, window, windows, loss, lr } => {
                        d.set_item("kind", "step")?;
                        d.set_item("step", step)?;
                        d.set_item("epoch", epoch)?;
                        d.set_item("window", window)?;
                        d.set_item("windows", windows)?;
                        d.set_item("loss", loss)?;
                        d.set_item("lr", lr)?;
                    }
                    Progress::Valid { step, epoch, nll } => {
                        d.set_item("kind", "valid")?;
                        d.set_item("step", step)?;
                        d.set_item("epoch", epoch)?;
                        d.set_item("nll", nll)?;
                    }
                }
                Ok(d)
            })
        })
    });
    let finished = listener.finish(r)?.is_some();
    Ok((out, finished))
}

/// `rnnlens task` with the options `options_json` (the flags' names with `_`, `name` the task);
/// returns the table and, per cell, its result (`curve` as `step`, `loss`, `accuracy` arrays).
#[pyfunction]
#[pyo3(signature = (options_json, quiet = false, callback = None))]
fn task<'py>(py: Python<'py>, options_json: String, quiet: bool, callback: Option<Py<PyAny>>) -> PyResult<(String, Vec<Bound<'py, PyDict>>)> {
    let opts: TaskOptions = serde_json::from_str(&options_json).map_err(|e| RnnlensError::new_err(format!("task options: {e}")))?;
    // the keys given (threads and precision under "runtime"), which a resumed run checks
    let json: serde_json::Value = serde_json::from_str(&options_json).unwrap_or_default();
    let has = |k: &str| json.get(k).is_some() || json.get("runtime").and_then(|r| r.get(k)).is_some();
    let given = rnnlens::tasks::keep::given_options(has);
    let mut listener = Listener { callback, error: None, stopped: false };
    let r = py.detach(|| {
        rnnlens::tasks::run(&opts, &given, quiet, &mut |cell, p| {
            listener.hear(|py| {
                let d = PyDict::new(py);
                d.set_item("cell", cell)?;
                d.set_item("step", p.step)?;
                d.set_item("loss", p.loss)?;
                d.set_item("accuracy", p.accuracy)?;
                Ok(d)
            })
        })
    });
    let Some((table, results)) = listener.finish(r)? else {
        return Ok((String::from("stopped by the callback"), Vec::new()));
    };
    let mut out = Vec::new();
    for r in results {
        let d = PyDict::new(py);
        d.set_item("cell", &r.cell)?;
        d.set_item("task", &r.task)?;
        d.set_item("steps_to_threshold", r.steps_to_threshold)?;
        d.set_item("test_accuracy", r.test_accuracy)?;
        d.set_item("seconds", r.seconds)?;
        d.set_item("step", r.curve.iter().map(|p| p.step as i64).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("loss", r.curve.iter().map(|p| p.loss).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("accuracy", r.curve.iter().map(|p| p.accuracy.unwrap_or(f64::NAN)).collect::<Vec<_>>().into_pyarray(py))?;
        d.set_item("checkpoint", opts.resume.as_ref().unwrap_or(&opts.out).join(&r.cell).display().to_string())?;
        out.push(d);
    }
    Ok((table, out))
}

/// Load the checkpoint directory `path` (what `rnnlens train` wrote, or `to_checkpoint`), to
/// compute in `precision` ("f32"; "bf16" on the CPU, "f16" on the GPU).
#[pyfunction]
#[pyo3(signature = (path, precision = "f32", device = "cpu"))]
fn load(py: Python<'_>, path: PathBuf, precision: &str, device: &str) -> PyResult<Model> {
    // checked against the device where the engine opens (f16 is the GPU's, bf16 the CPU's)
    let precision = Precision::parse(precision).map_err(err)?;
    let device = match device {
        "cpu" => Device::Cpu,
        "gpu" => Device::Gpu,
        other => return Err(PyValueError::new_err(format!("device must be \"cpu\" or \"gpu\", got {other:?}"))),
    };
    if device == Device::Gpu && !cfg!(feature = "gpu") {
        return Err(RnnlensError::new_err(
            "this rnnlens package was built without the GPU engine: reinstall it with MATURIN_PEP517_ARGS=\"--features gpu\" pip install ./python (docs/gpu.md)",
        ));
    }
    let dir = path.clone();
    let (lm, saved) = compute(py, Precision::F32, move || {
        let lm = Lm::load(&dir)?;
        let saved = RunRecord::read(&dir)?;
        Ok((lm, saved))
    })?;
    if device == Device::Gpu && lm.model.config.input_size.is_some() {
        return Err(RnnlensError::new_err("task models do not run on the GPU yet (use device=\"cpu\")"));
    }
    // the device opened now, so that a missing driver is said at load
    let engine = compute(py, Precision::F32, || Engine::open(device, precision))?;
    Ok(Model { lm, saved, dir: path, precision, engine })
}

/// Whether this build has the GPU engine (`device="gpu"`).
#[pyfunction]
fn has_gpu() -> bool {
    cfg!(feature = "gpu")
}

/// Tokens beyond which `log_probs` reports its progress on stderr (a long text scores for
/// minutes; a short one should print nothing).
const LONG_TEXT: usize = 2_000_000;

/// A model trained by `rnnlens task` (`rnnlens.load` of its checkpoint).
#[pyclass(frozen, module = "rnnlens._rnnlens")]
struct TaskModel {
    tm: rnnlens::tasks::TaskModel,
    dir: PathBuf,
}

impl TaskModel {
    /// The sequence asked for: the example the task's generator draws from `example`, or the
    /// typed `inputs` (`rnnlens explain --example`, `--task-input`), and what it is.
    fn sequence(&self, example: Option<u64>, inputs: Option<String>, data: Option<PathBuf>) -> anyhow::Result<(rnnlens::tasks::Batch, String)> {
        let test = data.as_ref().map(|d| rnnlens::data::idx::load_mnist(d, "test")).transpose()?;
        match (example, inputs) {
            (Some(seed), None) => Ok((self.tm.example(seed, test.as_ref())?, format!("the example drawn from seed {seed}"))),
            (None, Some(text)) => Ok((self.tm.parse_input(&text)?, "the typed input".to_string())),
            _ => anyhow::bail!("give one of example=SEED (a sequence the task's generator draws) or inputs=\"...\""),
        }
    }
}

#[pymethods]
impl TaskModel {
    #[getter]
    fn task(&self) -> String {
        self.tm.meta.name.clone()
    }
    #[getter]
    fn cell(&self) -> String {
        self.tm.cell().to_string()
    }
    #[getter]
    fn length(&self) -> usize {
        self.tm.meta.length
    }
    #[getter]
    fn steps_run(&self) -> usize {
        self.tm.meta.steps_run
    }

    /// `rnnlens eval` of a task model: the task's measure on `batches` batches of 100 fresh
    /// sequences drawn from `seed` (the MNIST tasks: every test image of `data`).
    #[pyo3(signature = (batches = 10, seed = None, data = None))]
    fn evaluate<'py>(&self, py: Python<'py>, batches: usize, seed: Option<u64>, data: Option<PathBuf>) -> PyResult<Bound<'py, PyDict>> {
        let seed = seed.unwrap_or(self.tm.meta.seed + 2_000_000);
        let (loss, accuracy, n) = compute(py, Precision::F32, || {
            let test = data.as_ref().map(|d| rnnlens::data::idx::load_mnist(d, "test")).transpose()?;
            self.tm.evaluate(batches, rnnlens::eval::TASK_EVAL_BATCH, seed, test.as_ref())
        })?;
        let d = PyDict::new(py);
        d.set_item("loss", loss)?;
        d.set_item("accuracy", accuracy)?;
        d.set_item("sequences", n)?;
        d.set_item("seed", seed)?;
        Ok(d)
    }

    /// The model run on one sequence: `labels` (each step's input), `outputs` `[T, C]` (the
    /// readout at every step), `scored` (the steps the task scores), and there `loss` and
    /// `accuracy`.
    #[pyo3(signature = (example = None, inputs = None, data = None))]
    fn run<'py>(&self, py: Python<'py>, example: Option<u64>, inputs: Option<String>, data: Option<PathBuf>) -> PyResult<Bound<'py, PyDict>> {
        let (b, out) = compute(py, Precision::F32, || {
            let (b, _) = self.sequence(example, inputs, data)?;
            let (_, out) = self.tm.run(&b)?;
            Ok((b, out))
        })?;
        let c = self.tm.model.vocab_size();
        let d = PyDict::new(py);
        d.set_item("labels", self.tm.labels(&b))?;
        d.set_item("outputs", out.clone().into_pyarray(py).reshape([b.steps, c])?)?;
        d.set_item("scored", b.scored.iter().map(|&p| p as i64).collect::<Vec<_>>().into_pyarray(py))?;
        let score = self.tm.score(&b, &out);
        d.set_item("loss", score.map(|s| s.0))?;
        d.set_item("accuracy", score.and_then(|s| s.1))?;
        Ok(d)
    }

    /// `rnnlens explain` of a task model on one sequence: as `Model.explain`'s keys (`ran`,
    /// `attention`, `pca`, `summary`, `labels`), and `outputs`: `(step, input, target, answer,
    /// right)` of the scored steps.
    #[pyo3(signature = (example = None, inputs = None, components = Vec::new(), data = None))]
    fn explain<'py>(&self, py: Python<'py>, example: Option<u64>, inputs: Option<String>, components: Vec<usize>, data: Option<PathBuf>) -> PyResult<Bound<'py, PyDict>> {
        let ex = compute(py, Precision::F32, || {
            let (b, source) = self.sequence(example, inputs, data)?;
            report::explain_task(&self.tm, &b, &source, &report::Options { components, ..Default::default() })
        })?;
        let (d, ex) = explanation_dict(py, ex)?;
        d.set_item("outputs", ex.task.map(|t| t.rows).unwrap_or_default())?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("rnnlens.TaskModel({:?}: {} task, length {}, {}, {} steps trained)", self.dir.display().to_string(), self.tm.meta.name, self.tm.meta.length, self.tm.cell(), self.tm.meta.steps_run)
    }
}

/// Load the task model checkpoint `path` (what `rnnlens task` wrote).
#[pyfunction]
fn load_task(py: Python<'_>, path: PathBuf) -> PyResult<TaskModel> {
    let dir = path.clone();
    let tm = compute(py, Precision::F32, move || rnnlens::tasks::TaskModel::load(&dir))?;
    Ok(TaskModel { tm, dir: path })
}

/// Whether `path` holds a task model (written by `rnnlens task`) rather than a language model.
#[pyfunction]
fn is_task_checkpoint(path: PathBuf) -> bool {
    rnnlens::tasks::is_task_checkpoint(&path)
}

#[pymodule]
fn _rnnlens(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RnnlensError", m.py().get_type::<RnnlensError>())?;
    m.add_class::<Model>()?;
    m.add_class::<TaskModel>()?;
    m.add_class::<fused::FusedLayer>()?;
    m.add_class::<fused::Tape>()?;
    m.add_function(wrap_pyfunction!(fused::bf16_supported, m)?)?;
    m.add_function(wrap_pyfunction!(load_task, m)?)?;
    m.add_function(wrap_pyfunction!(is_task_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(has_gpu, m)?)?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    m.add_function(wrap_pyfunction!(train, m)?)?;
    m.add_function(wrap_pyfunction!(task, m)?)?;
    Ok(())
}
