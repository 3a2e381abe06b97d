//! The cell registry: the one place where a cell's command-line name maps to its kind (what it
//! reads, how it starts, whether it takes a projection), to the layer configuration it writes
//! into `config.json`, and where that configuration's `cell` type maps back to a constructor.
//! A new cell adds its file, a variant of [`Cell`], one [`CellKind`] per command-line name, and
//! an arm of [`build`].

use super::gru::Gru;
use super::isan::Isan;
use super::linear::Linear;
use super::lstm::Lstm;
use super::lstm_no_output_gate::LstmNoOutputGate;
use super::lstm_simple_content::LstmSimpleContent;
use super::ran::{Ran, RanGates};

/// The warning for a `ran` layer whose options lack `gates` (rnnlens.torch words it alike).
pub const MISSING_GATES: &str = "a ran layer of config.json has no \"gates\" option: read as \"c\" (gates reading c_{t-1}, what checkpoints written before the option meant), while `train` writes \"h\" by default; add \"gates\": \"h\" or \"c\" to the layer's options to say which";
use super::rda::{Attention, Rda};
use super::rnn::Rnn;
use super::{Grads, Recurrent, Seq, Sizes, TensorSpec, Workspace, WsDims};
use crate::kernels::num::{Act, Float};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Options that select a cell's variant beside its name: declared once here, for the command
/// line (flattened into `train`, `params` and `task`) and for `trainer.json` and TOML
/// configurations.
#[derive(Clone, Copy, Debug, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(default)]
pub struct CellOptions {
    /// What the RAN's gates read: h_{t-1} (the first paper and the authors' released code) or
    /// c_{t-1} (the later paper's equations; docs/lm.md measures why that is not the default)
    #[arg(long, value_enum, default_value_t = RanGates::H)]
    pub ran_gates: RanGates,
    /// The RAN's content layer with its bias b_c (the later paper) or without (false: the
    /// first paper's eq. (1) and the authors' released code)
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub ran_content_bias: bool,
    /// The GRU in PyTorch's form, the reset gate applied after the recurrent product (true), or
    /// the papers' form, before it (false)
    #[arg(long, action = clap::ArgAction::Set, default_value_t = true)]
    pub gru_reset_after: bool,
    /// The generic rda cell's attention function (the rda-* presets fix their own)
    #[arg(long, value_enum, default_value_t = Attention::Exp)]
    pub rda_attention: Attention,
    /// The generic rda cell's hidden function f_h
    #[arg(long, value_enum, default_value_t = Act::Identity)]
    pub rda_hidden_fn: Act,
    /// The generic rda cell's output function f_o
    #[arg(long, value_enum, default_value_t = Act::Tanh)]
    pub rda_output_fn: Act,
    /// Start every layer whose cell starts from zeros from a learned state instead
    /// (rnn.{l}.initial_state); isan, linear, rwa and rda learn their own and ignore it
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, default_value_t = false)]
    pub learn_initial_state: bool,
}

impl Default for CellOptions {
    /// The command line's defaults.
    fn default() -> Self {
        crate::kernels::runtime::defaults()
    }
}

/// What a command-line cell name stands for.
pub struct CellKind {
    pub name: &'static str,
    /// the `cell` of its layers in `config.json`
    pub cell_type: &'static str,
    /// its layers' `options` in `config.json`, from the command line's cell options
    pub options: fn(&CellOptions) -> Result<Map<String, Value>>,
    /// it switches on the input symbol itself (no embedding; one layer only)
    pub reads_tokens: bool,
    /// it starts from learned parameters of its own (`h0` or `s0`), so a model-level learned
    /// initial state would only duplicate them
    pub learns_own_start: bool,
    /// it takes an output projection
    pub projection: bool,
    /// training carries its state from one window to the next unless told otherwise. Not the
    /// RAN: its state is an unnormalised gated sum of everything it has read; carried through
    /// a whole epoch's stream, units whose forget gate sits at 1 integrate their input without
    /// bound (truncated backpropagation never sees that far back), the RAN-identity's Adam
    /// training diverges within tens of steps and the RAN-tanh's saturates. Started from zeros
    /// every window both train well (docs/lm.md has the measurements).
    pub carries_state: bool,
}

fn obj(v: Value) -> Result<Map<String, Value>> {
    Ok(v.as_object().cloned().unwrap_or_default())
}

fn ran(output: &str, o: &CellOptions) -> Result<Map<String, Value>> {
    obj(json!({ "output": output, "gates": match o.ran_gates { RanGates::C => "c", RanGates::H => "h" }, "content_bias": o.ran_content_bias }))
}

fn rda(a: Attention, fh: Act, fo: Act) -> Result<Map<String, Value>> {
    for (what, f) in [("hidden", fh), ("output", fo)] {
        if !matches!(f, Act::Identity | Act::Tanh) {
            bail!("the RDA's {what} function must be identity or tanh, not {}", f.name());
        }
    }
    obj(json!({ "attention": a.name(), "hidden_fn": fh.name(), "output_fn": fo.name() }))
}

const fn kind(name: &'static str, cell_type: &'static str, options: fn(&CellOptions) -> Result<Map<String, Value>>) -> CellKind {
    CellKind { name, cell_type, options, reads_tokens: false, learns_own_start: false, projection: false, carries_state: true }
}

/// Every cell the command line accepts, in the order `--help` lists them.
pub const CELLS: &[CellKind] = &[
    CellKind { projection: true, carries_state: false, ..kind("ran-tanh", "ran", |o| ran("tanh", o)) },
    CellKind { projection: true, carries_state: false, ..kind("ran-identity", "ran", |o| ran("identity", o)) },
    CellKind { projection: true, ..kind("lstm", "lstm", |_| obj(json!({}))) },
    kind("gru", "gru", |o| obj(json!({ "reset_after": o.gru_reset_after }))),
    kind("rnn", "rnn", |_| obj(json!({ "nonlinearity": "tanh" }))),
    kind("irnn", "rnn", |_| obj(json!({ "nonlinearity": "relu", "init": "identity" }))),
    CellKind { reads_tokens: true, learns_own_start: true, ..kind("isan", "isan", |_| obj(json!({ "biases": true }))) },
    CellKind { reads_tokens: true, learns_own_start: true, ..kind("isan-nobias", "isan", |_| obj(json!({ "biases": false }))) },
    CellKind { reads_tokens: true, learns_own_start: true, ..kind("linear", "linear", |_| obj(json!({ "readout": "identity" }))) },
    CellKind { reads_tokens: true, learns_own_start: true, ..kind("linear-tanh", "linear", |_| obj(json!({ "readout": "tanh" }))) },
    CellKind { learns_own_start: true, ..kind("rwa", "rwa", |_| obj(json!({}))) },
    CellKind { learns_own_start: true, ..kind("rda", "rda", |o| rda(o.rda_attention, o.rda_hidden_fn, o.rda_output_fn)) },
    CellKind { learns_own_start: true, ..kind("rda-exp-tanh", "rda", |_| rda(Attention::Exp, Act::Identity, Act::Tanh)) },
    CellKind { learns_own_start: true, ..kind("rda-sigmoid-id", "rda", |_| rda(Attention::Sigmoid, Act::Identity, Act::Identity)) },
    kind("lstm-simple-content", "lstm-simple-content", |_| obj(json!({}))),
    kind("lstm-no-output-gate", "lstm-no-output-gate", |_| obj(json!({}))),
];

/// The command-line cell names.
pub fn names() -> impl Iterator<Item = &'static str> {
    CELLS.iter().map(|k| k.name)
}

/// One registered cell as every check runs it: a command-line name, its options, and an output
/// projection where the cell takes one.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    pub name: &'static str,
    pub opts: CellOptions,
    pub projection: Option<usize>,
}

impl Variant {
    /// The cell at these sizes (`d` inputs, or symbols for a cell that reads them).
    pub fn cell(&self, d: usize, h: usize) -> Result<Cell> {
        cell_for(self.name, d, h, self.projection, &self.opts)
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let options = (lookup(self.name).map_err(|_| std::fmt::Error)?.options)(&self.opts).unwrap_or_default();
        write!(f, "{} {}", self.name, Value::Object(options))?;
        self.projection.map_or(Ok(()), |p| write!(f, " projection {p}"))
    }
}

/// Every registered cell, with each value of each option it reads changed alone from the
/// command line's defaults (the RAN's gates and content bias, the GRU's form, the generic RDA's attention and
/// functions: what changes its layer's `config.json` options), each with and without a
/// projection where it takes one. The checks (finite differences, threads, workspace reuse,
/// the whole model, training) run over this list, so a cell added to [`CELLS`] gets them all.
pub fn variants() -> Vec<Variant> {
    use clap::ValueEnum;
    let base = CellOptions::default();
    let mut singles = vec![base];
    singles.extend(RanGates::value_variants().iter().map(|&g| CellOptions { ran_gates: g, ..base }));
    singles.push(CellOptions { ran_content_bias: false, ..base });
    singles.extend([true, false].map(|r| CellOptions { gru_reset_after: r, ..base }));
    singles.extend(Attention::value_variants().iter().map(|&a| CellOptions { rda_attention: a, ..base }));
    singles.extend(Act::value_variants().iter().map(|&f| CellOptions { rda_hidden_fn: f, ..base }));
    singles.extend(Act::value_variants().iter().map(|&f| CellOptions { rda_output_fn: f, ..base }));
    let mut out: Vec<Variant> = Vec::new();
    for k in CELLS {
        let mut seen: Vec<Map<String, Value>> = Vec::new();
        for opts in &singles {
            // an option the cell does not read gives options seen already
            let Ok(o) = (k.options)(opts) else { continue };
            if seen.contains(&o) {
                continue;
            }
            seen.push(o);
            for projection in [None, Some(3)].into_iter().filter(|p| p.is_none() || k.projection) {
                out.push(Variant { name: k.name, opts: *opts, projection });
            }
        }
    }
    out
}

/// The kind of a command-line cell name, or an error listing them all.
pub fn lookup(name: &str) -> Result<&'static CellKind> {
    match CELLS.iter().find(|k| k.name == name) {
        Some(k) => Ok(k),
        None => bail!("unknown cell '{name}'; the cells are: {}", names().collect::<Vec<_>>().join(", ")),
    }
}

/// The cell a command-line name and options give, with these sizes (`d` inputs or symbols,
/// `h` units, an optional projection to `p`).
pub fn cell_for(name: &str, d: usize, h: usize, p: Option<usize>, opts: &CellOptions) -> Result<Cell> {
    let kind = lookup(name)?;
    if p.is_some() && !kind.projection {
        bail!("an output projection is available for ran-* and lstm cells, not for {name}");
    }
    build(kind.cell_type, d, h, p, &(kind.options)(opts)?)
}

/// Whether the named cell switches on the input symbol itself (no embedding); false for a name
/// the registry does not know.
pub fn reads_tokens(name: &str) -> bool {
    lookup(name).is_ok_and(|k| k.reads_tokens)
}

/// Whether the named cell starts from learned parameters of its own.
pub fn learns_own_initial_state(name: &str) -> bool {
    lookup(name).is_ok_and(|k| k.learns_own_start)
}

/// Whether training carries the named cell's state across windows unless told otherwise, given
/// the recurrent dropout. The RAN-tanh carries it when dropout acts inside the cell and starts
/// every window from zeros otherwise: measured both ways in docs/lm.md (with the paper's
/// recurrent dropout, carried ends 12 epochs at 111.3 against 126.0 from zeros; without it,
/// one epoch gives 192.0 carried against 172.6, its forget gates sitting at 1 over a long stream).
/// The RAN-identity never carries it by default: carried, it diverges under Adam.
pub fn carries_state_by_default(name: &str, rec_dropout: f64) -> bool {
    lookup(name).is_ok_and(|k| k.carries_state) || (name == "ran-tanh" && rec_dropout > 0.0)
}

/// Whether a `config.json` layer of this `cell` type already starts from learned parameters of
/// its own (`h0` or `s0`): what the registry says of the names that write that type.
pub fn type_learns_own_start(cell_type: &str) -> bool {
    CELLS.iter().any(|k| k.cell_type == cell_type && k.learns_own_start)
}

fn opt_str<'a>(options: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>> {
    match options.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => bail!("layer option '{key}' must be a string, found {v}"),
    }
}

fn opt_bool(options: &Map<String, Value>, key: &str) -> Result<Option<bool>> {
    match options.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => bail!("layer option '{key}' must be a boolean, found {v}"),
    }
}

/// The cell a `config.json` layer describes: its `cell` type, sizes and `options`.
pub fn build(cell_type: &str, d: usize, h: usize, p: Option<usize>, options: &Map<String, Value>) -> Result<Cell> {
    if d == 0 || h == 0 || p == Some(0) {
        bail!("layer sizes must be positive (input {d}, hidden {h}, projection {p:?})");
    }
    // Refuse sizes whose parameters would not fit in memory before anything is allocated.
    let biggest = (4 * h).checked_mul(d.max(h).max(p.unwrap_or(0)));
    if biggest.is_none_or(|n| n > 1 << 32) {
        bail!("layer of input {d}, hidden {h} is too large");
    }
    let s = |key: &str| -> Result<Option<&str>> { opt_str(options, key) };
    let cell = match cell_type {
        "ran" => {
            let output = match s("output")?.unwrap_or("tanh") {
                "tanh" => Act::Tanh,
                "identity" => Act::Identity,
                o => bail!("ran option output must be \"tanh\" or \"identity\", found \"{o}\""),
            };
            // Checkpoints always say; one without the key predates the option (c then), which
            // is the opposite of `train`'s default now: said, so that a hand-written
            // config.json does not get it silently.
            let gates = s("gates")?.unwrap_or_else(|| {
                eprintln!("warning: {MISSING_GATES}");
                "c"
            });
            let gates = match gates {
                "c" => RanGates::C,
                "h" => RanGates::H,
                o => bail!("ran option gates must be \"c\" or \"h\", found \"{o}\""),
            };
            // absent: the bias, as every checkpoint had before the option
            let content_bias = opt_bool(options, "content_bias")?.unwrap_or(true);
            Cell::Ran(Ran { input: d, hidden: h, projection: p, output, gates, content_bias })
        }
        "lstm" => Cell::Lstm(Lstm { input: d, hidden: h, projection: p }),
        "gru" => Cell::Gru(Gru { input: d, hidden: h, reset_after: opt_bool(options, "reset_after")?.unwrap_or(true) }),
        "rnn" => {
            let nonlinearity = match s("nonlinearity")?.unwrap_or("tanh") {
                "tanh" => Act::Tanh,
                "relu" => Act::Relu,
                o => bail!("rnn option nonlinearity must be \"tanh\" or \"relu\", found \"{o}\""),
            };
            Cell::Rnn(Rnn { input: d, hidden: h, nonlinearity, identity_init: s("init")? == Some("identity") })
        }
        "isan" => Cell::Isan(Isan { symbols: d, hidden: h, biases: opt_bool(options, "biases")?.unwrap_or(true) }),
        "linear" => {
            let readout = match s("readout")?.unwrap_or("identity") {
                "identity" => Act::Identity,
                "tanh" => Act::Tanh,
                o => bail!("linear option readout must be \"identity\" or \"tanh\", found \"{o}\""),
            };
            Cell::Linear(Linear { symbols: d, hidden: h, readout })
        }
        "rwa" => Cell::Rda(Rda::rwa(d, h)),
        "rda" => {
            let a = s("attention")?.unwrap_or("exp");
            let attention = Attention::parse(a)
                .with_context(|| format!("rda option attention must be exp, relu, softplus or sigmoid, found \"{a}\""))?;
            // Missing keys default to the generic `rda` cell of the command line (= rda-exp-tanh).
            let fun = |key: &str, default: &str| -> Result<Act> {
                match s(key)?.unwrap_or(default) {
                    "identity" => Ok(Act::Identity),
                    "tanh" => Ok(Act::Tanh),
                    o => bail!("rda option {key} must be \"identity\" or \"tanh\", found \"{o}\""),
                }
            };
            let (hidden_fn, output_fn) = (fun("hidden_fn", "identity")?, fun("output_fn", "tanh")?);
            Cell::Rda(Rda::new(d, h, attention, hidden_fn, output_fn))
        }
        "lstm-simple-content" => Cell::LstmSimpleContent(LstmSimpleContent { input: d, hidden: h }),
        "lstm-no-output-gate" => Cell::LstmNoOutputGate(LstmNoOutputGate { input: d, hidden: h }),
        other => bail!("unknown cell type '{other}' in the model configuration"),
    };
    if p.is_some() && !matches!(cell, Cell::Ran(_) | Cell::Lstm(_)) {
        bail!("cell type '{cell_type}' has no output projection");
    }
    Ok(cell)
}

/// Any recurrent cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Ran(Ran),
    Lstm(Lstm),
    Gru(Gru),
    Rnn(Rnn),
    Isan(Isan),
    Linear(Linear),
    Rda(Rda),
    LstmSimpleContent(LstmSimpleContent),
    LstmNoOutputGate(LstmNoOutputGate),
}

macro_rules! each_cell {
    ($self:expr, $c:ident => $e:expr) => {
        match $self {
            Cell::Ran($c) => $e,
            Cell::Lstm($c) => $e,
            Cell::Gru($c) => $e,
            Cell::Rnn($c) => $e,
            Cell::Isan($c) => $e,
            Cell::Linear($c) => $e,
            Cell::Rda($c) => $e,
            Cell::LstmSimpleContent($c) => $e,
            Cell::LstmNoOutputGate($c) => $e,
        }
    };
}

impl Cell {
    /// The cell's GPU description, or what keeps it on the CPU.
    #[cfg(feature = "gpu")]
    pub fn gpu_cell(&self) -> Result<super::gpu::GpuCell> {
        // a cell's own `gpu_cell` where it has kernels, else `Recurrent`'s refusal
        each_cell!(self, c => c.gpu_cell()).with_context(|| format!("the {} cell on the GPU", self.type_name()))
    }

    /// The `cell` type of its layers in `config.json`: what [`build`] reads back into it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Cell::Ran(_) => "ran",
            Cell::Lstm(_) => "lstm",
            Cell::Gru(_) => "gru",
            Cell::Rnn(_) => "rnn",
            Cell::Isan(_) => "isan",
            Cell::Linear(_) => "linear",
            Cell::Rda(c) => c.type_name(),
            Cell::LstmSimpleContent(_) => "lstm-simple-content",
            Cell::LstmNoOutputGate(_) => "lstm-no-output-gate",
        }
    }

    pub fn sizes(&self) -> Sizes {
        each_cell!(self, c => c.sizes())
    }
    /// The widths of the state's `[B, w]` blocks, in order (they sum to `sizes().state`), as
    /// each cell's doc comment lays them out; data-parallel training gathers rows block by block.
    pub fn state_blocks(&self) -> Vec<usize> {
        let s = self.sizes();
        match self {
            Cell::Lstm(_) => vec![s.rec, s.hidden],
            Cell::LstmSimpleContent(_) => vec![s.hidden; 2],
            Cell::Rda(_) => vec![s.hidden; 4],
            _ => vec![s.state],
        }
    }
    pub fn tensors(&self) -> Vec<TensorSpec> {
        each_cell!(self, c => c.tensors())
    }
    pub fn ws_dims(&self, thin: bool) -> WsDims {
        each_cell!(self, c => c.ws_dims(thin))
    }
    pub fn reads_tokens(&self) -> bool {
        each_cell!(self, c => c.reads_tokens())
    }
    pub fn sanitize_state<T: Float>(&self, s: &mut [T], batch: usize) {
        each_cell!(self, c => c.sanitize_state(s, batch))
    }
    pub fn trace<T: Float>(&self, ws: &Workspace<T>) -> Vec<super::Trace<T>> {
        each_cell!(self, c => c.trace(ws))
    }
    pub fn param_len(&self) -> usize {
        self.tensors().iter().map(|t| t.len()).sum()
    }
    pub fn forward<T: Float>(&self, w: &[T], seq: &Seq<T>, ws: &mut Workspace<T>, y: &mut [T]) {
        ws.ensure(self.ws_dims(super::folds_input(seq, self.sizes().input)), seq.steps, seq.batch);
        each_cell!(self, c => c.forward(w, seq, ws, y))
    }
    pub fn backward<T: Float>(&self, w: &[T], g: &mut [T], seq: &Seq<T>, ws: &mut Workspace<T>, grads: Grads<T>) {
        each_cell!(self, c => c.backward(w, g, seq, ws, grads))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A checkpoint's layer names its cell type, not the command-line name it was trained
    /// under, so what a type's names say of their start must agree for the type's answer
    /// ([`type_learns_own_start`]) to be theirs.
    #[test]
    fn the_names_of_one_cell_type_agree_on_how_it_starts() {
        for k in CELLS {
            assert_eq!(type_learns_own_start(k.cell_type), k.learns_own_start, "{} ({})", k.name, k.cell_type);
        }
        assert!(type_learns_own_start("rda") && type_learns_own_start("isan") && !type_learns_own_start("lstm"));
    }

    /// The checks' list holds every registered name, every value of every option a cell
    /// reads, and a projection for every cell that takes one.
    #[test]
    fn the_variants_cover_every_name_option_value_and_projection() {
        use clap::ValueEnum;
        let vs = variants();
        for k in CELLS {
            assert!(vs.iter().any(|v| v.name == k.name && v.projection.is_none()), "{}", k.name);
            assert_eq!(vs.iter().any(|v| v.name == k.name && v.projection.is_some()), k.projection, "{}", k.name);
        }
        let has = |name: &str, f: &dyn Fn(&CellOptions) -> bool| vs.iter().any(|v| v.name == name && f(&v.opts));
        for &g in RanGates::value_variants() {
            assert!(has("ran-tanh", &|o| o.ran_gates == g) && has("ran-identity", &|o| o.ran_gates == g));
        }
        assert!(has("gru", &|o| !o.gru_reset_after) && has("gru", &|o| o.gru_reset_after));
        for &a in Attention::value_variants() {
            assert!(has("rda", &|o| o.rda_attention == a), "{a:?}");
        }
        for &f in Act::value_variants() {
            assert!(has("rda", &|o| o.rda_hidden_fn == f) && has("rda", &|o| o.rda_output_fn == f), "{f:?}");
        }
        // an option a cell does not read adds no variant of it
        assert_eq!(vs.iter().filter(|v| v.name == "lstm").count(), 2);
        for v in &vs {
            v.cell(3, 4).unwrap_or_else(|e| panic!("{v}: {e}"));
        }
    }

    /// Every command-line name builds a cell that names its own type as `config.json` does
    /// (the RWA, a preset of the RDA's kernel, included).
    #[test]
    fn every_cell_names_the_type_it_was_built_from() {
        for k in CELLS {
            let options = (k.options)(&CellOptions::default()).unwrap();
            let p = k.projection.then_some(3);
            let cell = build(k.cell_type, 4, 5, p, &options).unwrap();
            assert_eq!(cell.type_name(), k.cell_type, "{}", k.name);
        }
    }
}
