//! `rnnlens._rnnlens`: the rnnlens library seen from Python. Each function here converts its
//! arguments, releases the interpreter (`Python::detach`) while the library computes, and
//! hands numbers back as numpy arrays that take over the library's buffers (no second copy).
//! The Python package (`rnnlens/__init__.py`) wraps these in documented classes; errors of the
//! library become `rnnlens.RnnlensError` (a `ValueError`) carrying the command line's message.

use numpy::{IntoPyArray, PyArray1, PyArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rnnlens::data::Level;
use rnnlens::eval::{sample::sample, scoring};
use rnnlens::kernels::num::DenormalsFlushed;
use rnnlens::kernels::runtime::Runtime;
use rnnlens::model::lm::Lm;
use rnnlens::model::score::evaluate;
use rnnlens::model::trace;
use rnnlens::training::rundir::{self, TrainerState};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

create_exception!(_rnnlens, RnnlensError, PyValueError, "An error of rnnlens, with the message its command line gives.");

/// The library's error as a Python exception: its whole chain of causes, as the CLI prints it.
fn err(e: anyhow::Error) -> PyErr {
    RnnlensError::new_err(format!("{e:#}"))
}

/// The worker pool's size asked for before the first computation (0: every core).
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// Run `f` without the interpreter, on a started pool, with denormals flushed on this thread
/// for the duration (as the command line computes; the interpreter's own setting comes back).
fn compute<T: Send>(py: Python<'_>, f: impl FnOnce() -> anyhow::Result<T> + Send) -> PyResult<T> {
    py.detach(|| {
        let n = THREADS.load(Ordering::Relaxed);
        Runtime { threads: (n > 0).then_some(n) }.start_pool()?;
        let _flushed = DenormalsFlushed::new();
        f()
    })
    .map_err(err)
}

/// The size of the worker pool for the rest of the process: must come before the first
/// computation (the pool is started once). Returns the size in force.
#[pyfunction]
fn set_threads(py: Python<'_>, n: usize) -> PyResult<usize> {
    if n == 0 {
        return Err(PyValueError::new_err("threads must be at least 1"));
    }
    THREADS.store(n, Ordering::Relaxed);
    let got = py.detach(|| Runtime { threads: Some(n) }.start_pool()).map_err(err)?;
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

/// A trained model loaded from its checkpoint directory.
#[pyclass(frozen, module = "rnnlens._rnnlens")]
struct Model {
    lm: Lm,
    /// the run's trainer state, where the directory has one (how it was trained and on what)
    saved: Option<TrainerState>,
    dir: PathBuf,
}

#[pymethods]
impl Model {
    /// `config.json` as a JSON string.
    #[getter]
    fn config_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.lm.model.config).map_err(|e| err(e.into()))
    }

    /// `trainer.json` as a JSON string, or None for a checkpoint without one.
    #[getter]
    fn trainer_json(&self) -> PyResult<Option<String>> {
        self.saved.as_ref().map(|s| serde_json::to_string(s).map_err(|e| err(e.into()))).transpose()
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

    fn encode<'py>(&self, py: Python<'py>, text: Text) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let ids = self.lm.tok.encode_bytes(text.bytes()).map_err(err)?;
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
    /// --input FILE --per-token OUT` on the same text, the same numbers.
    fn log_probs<'py>(&self, py: Python<'py>, text: Text) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let stream = self.lm.tok.encode_bytes(text.bytes()).map_err(err)?;
        if stream.len() < 2 {
            return Err(RnnlensError::new_err(format!("the text has {} tokens; at least 2 are needed to score one", stream.len())));
        }
        let (carry, bptt) = scoring(self.saved.as_ref(), 100);
        let per = compute(py, || {
            let mut per = Vec::with_capacity(stream.len() - 1);
            evaluate(&self.lm.model, &self.lm.w, &stream, 1, bptt, carry, Some(&mut per), false);
            Ok(per)
        })?;
        Ok(per.into_pyarray(py))
    }

    /// The states after every token of `text`, read as `log_probs` reads it: per layer, a list
    /// of `(name, array [T, width])`, first the layer's `output`, then what its cell traces.
    fn states<'py>(&self, py: Python<'py>, text: Text) -> PyResult<Vec<Vec<(String, Bound<'py, PyAny>)>>> {
        let tokens = self.lm.tok.encode_bytes(text.bytes()).map_err(err)?;
        if tokens.is_empty() {
            return Err(RnnlensError::new_err("the text is empty: it has no states"));
        }
        let (carry, bptt) = scoring(self.saved.as_ref(), 100);
        let layers = compute(py, || Ok(trace::states(&self.lm.model, &self.lm.w, &tokens, bptt, carry)))?;
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

    /// `rnnlens sample`: feed `prime`, then draw `length` tokens at `inverse_temperature` from
    /// the generator seeded with `seed`; returns the text drawn (the prime excluded).
    #[pyo3(signature = (prime = String::new(), length = 100, inverse_temperature = 1.0, seed = 1))]
    fn sample(&self, py: Python<'_>, prime: String, length: usize, inverse_temperature: f64, seed: u64) -> PyResult<String> {
        if length == 0 {
            return Err(RnnlensError::new_err("length 0 samples nothing; give the number of tokens to generate"));
        }
        let ids = compute(py, || sample(&self.lm, &prime, length, inverse_temperature, seed))?;
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

fn check_ids(lm: &Lm, ids: &[u32]) -> PyResult<()> {
    let v = lm.tok.tokens().len();
    match ids.iter().find(|&&i| i as usize >= v) {
        Some(bad) => Err(RnnlensError::new_err(format!("token id {bad} is outside the vocabulary of {v} tokens"))),
        None => Ok(()),
    }
}

/// Load the checkpoint directory `path` (what `rnnlens train` wrote, or `to_checkpoint`).
#[pyfunction]
fn load(py: Python<'_>, path: PathBuf) -> PyResult<Model> {
    let dir = path.clone();
    let (lm, saved) = compute(py, move || {
        let lm = Lm::load(&dir)?;
        let saved = rundir::saved_state(&dir)?;
        Ok((lm, saved))
    })?;
    Ok(Model { lm, saved, dir: path })
}

#[pymodule]
fn _rnnlens(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("RnnlensError", m.py().get_type::<RnnlensError>())?;
    m.add_class::<Model>()?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(set_threads, m)?)?;
    Ok(())
}
