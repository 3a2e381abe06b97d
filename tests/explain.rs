//! `rnnlens explain`: the RAN's weights reconstruct its state, the RWA/RDA effective weights
//! sum to 1 and reconstruct n/d, the PCA spectrum is right, models without a decomposition say
//! so, and the report is a self-contained page.

use rnnlens::cells::ran::{Ran, RanGates};
use rnnlens::cells::rda::{Attention, Rda};
use rnnlens::cells::{Cell, Seq, Workspace};
use rnnlens::data::Tokenizer;
use rnnlens::explain::report::{self, Options};
use rnnlens::explain::{attention, pca, ran};
use rnnlens::model::lm::{tokenizer_config, Lm};
use rnnlens::model::{layer_configs, Init, Model, ModelConfig};
use rnnlens::cells::registry::{reads_tokens, CellOptions};
use rnnlens::kernels::num::Act;
use rnnlens::kernels::rng::Rng;
use std::process::Command;

const TEXT: &str = "the cat sat on the mat, and the dog that the cat saw ate the food.\nthe end\n";

fn lm(cell: &str, hidden: &[usize], projection: Option<usize>, opts: CellOptions, seed: u64) -> Lm {
    let tok = Tokenizer::fit_char(&[TEXT], false).unwrap();
    let v = tok.vocab_size();
    let symbols = reads_tokens(cell);
    let input = if symbols { v } else { 8 };
    let layers = layer_configs(cell, input, hidden, projection, opts).unwrap();
    let config = ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: v,
        tokenizer: tokenizer_config(&tok),
        embedding_size: if symbols { None } else { Some(8) },
        layers,
        cell_name: cell.into(),
        input_size: None,
    };
    let model = Model::new(config).unwrap();
    let w = model.init_params(Init::Uniform { scale: 1.0 }, &mut Rng::new(seed));
    Lm { model, w, tok }
}

fn tokens(lm: &Lm) -> Vec<u32> {
    lm.tok.encode(TEXT).unwrap()
}

#[test]
fn ran_weights_reconstruct_the_state_for_every_variant() {
    let mut seed = 1;
    for cell in ["ran-tanh", "ran-identity"] {
        for gates in [RanGates::C, RanGates::H] {
            for projection in [None, Some(5)] {
                seed += 1;
                let opts = CellOptions { ran_gates: gates, ..Default::default() };
                let lm = lm(cell, &[6, 7], projection, opts, seed);
                let toks = tokens(&lm);
                let ex = report::explain(&lm, &toks, &Options { components: vec![0, 4], ..Default::default() }).unwrap();
                let r = ex.ran.as_ref().expect("a RAN gets its weights");
                assert_eq!(r.layers.len(), 2, "every layer of the stack");
                for l in &r.layers {
                    let what = format!("{cell} {gates:?} {projection:?} layer {}", l.layer);
                    assert!(l.rel_error < 1e-4, "{what}: reconstruction error {}", l.rel_error);
                    assert!(l.max_step_error < 1e-4, "{what}: worst position {}", l.max_step_error);
                    assert_eq!(l.steps, toks.len());
                    // Weights are products of sigmoids: in [0, 1], zero above the diagonal.
                    let n = l.steps;
                    for t in 0..n {
                        for j in 0..n {
                            let w = l.at(t, j);
                            assert!((0.0..=1.0).contains(&w), "{what}: w({t},{j}) = {w}");
                            if j > t {
                                assert_eq!(w, 0.0);
                            }
                        }
                        let v = l.arrows[t];
                        assert!(v <= t && (0..=t).all(|j| l.at(t, j) <= l.at(t, v)));
                        if let Some(p) = l.predecessors[t] {
                            assert!(p < t && (0..t).all(|j| l.at(t, j) <= l.at(t, p)));
                        }
                    }
                    // Per-unit weights never exceed the maximum over units.
                    for (_, cw) in &l.components {
                        assert!(cw.iter().zip(&l.max_w).all(|(c, m)| c <= m));
                    }
                    assert!(l.init_max.iter().all(|&x| x == 0.0), "the initial state is zero");
                }
            }
        }
    }
}

/// The general form: from a nonzero initial state the weights plus the initial state's term
/// `Π f_k ∘ c_0` reconstruct `c_t`.
#[test]
fn ran_weights_with_a_nonzero_initial_state() {
    let (d, h, steps) = (4, 5, 30);
    let mut rng = Rng::new(7);
    for output in [Act::Tanh, Act::Identity] {
        let cell = Cell::Ran(Ran { input: d, hidden: h, projection: None, output, gates: RanGates::C, content_bias: true });
        let w: Vec<f32> = (0..cell.param_len()).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let x: Vec<f32> = (0..steps * d).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let s0: Vec<f32> = (0..h).map(|_| rng.range(-2.0, 2.0) as f32).collect();
        let mut ws = Workspace::default();
        let mut y = vec![0f32; steps * h];
        let seq = Seq { steps, batch: 1, x: &x, tokens: None, s0: Some(&s0), mask: None, emb: None, out_from: 0 };
        cell.forward(&w, &seq, &mut ws, &mut y);
        let l = ran::layer_weights(0, &cell, &ws, &[]);
        assert!(l.rel_error < 1e-4, "{output:?}: {}", l.rel_error);
        assert!(l.init_max[0] > 0.0, "the initial state carries weight");
        // Without the initial state's term the sum would be wrong: check the term matters.
        let c1: f64 = ws.st[h..2 * h].iter().map(|&c| (c as f64).abs()).sum();
        assert!(c1 > 0.0);
    }
}

#[test]
fn attention_weights_sum_to_one_and_reconstruct_n_over_d() {
    let mut seed = 100;
    for (cell, att) in [("rwa", "exp"), ("rda", "exp"), ("rda", "relu"), ("rda", "softplus"), ("rda", "sigmoid"), ("rda-sigmoid-id", "sigmoid")] {
        seed += 1;
        let opts = CellOptions { rda_attention: Attention::parse(att).unwrap(), ..Default::default() };
        let lm = lm(cell, &[6, 5], None, opts, seed);
        let toks = tokens(&lm);
        let ex = report::explain(&lm, &toks, &Options { components: vec![1], ..Default::default() }).unwrap();
        assert!(ex.ran.is_none());
        let a = ex.attention.as_ref().expect("RWA/RDA get effective weights");
        assert_eq!(a.layers.len(), 2);
        for l in &a.layers {
            let what = format!("{cell}/{att} layer {}", l.layer);
            let s = l.max_sum_error.unwrap();
            assert!(s < 1e-4, "{what}: weights sum to 1 within {s}");
            assert!(l.rel_error < 1e-4, "{what}: reconstruction error {}", l.rel_error);
            assert!(l.max_w.iter().all(|&w| (0.0..=1.0 + 1e-5).contains(&w)), "{what}");
        }
        assert!(ex.summary().contains("none of the papers"));
    }
}

/// From a nonzero (sanitized) initial state, the initial state's share completes the sum.
#[test]
fn attention_weights_with_a_nonzero_initial_state() {
    let (d, h, steps) = (3, 4, 25);
    let mut rng = Rng::new(9);
    let cells = [
        (Cell::Rda(Rda::rwa(d, h)), Attention::Exp, false),
        (Cell::Rda(Rda::new(d, h, Attention::Sigmoid, Act::Identity, Act::Tanh)), Attention::Sigmoid, true),
        (Cell::Rda(Rda::new(d, h, Attention::Exp, Act::Tanh, Act::Identity)), Attention::Exp, true),
    ];
    for (cell, att, discount) in cells {
        let w: Vec<f32> = (0..cell.param_len()).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let x: Vec<f32> = (0..steps * d).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        let mut s0: Vec<f32> = (0..4 * h).map(|_| rng.range(-1.0, 1.0) as f32).collect();
        cell.sanitize_state(&mut s0, 1);
        let mut ws = Workspace::default();
        let mut y = vec![0f32; steps * h];
        let seq = Seq { steps, batch: 1, x: &x, tokens: None, s0: Some(&s0), mask: None, emb: None, out_from: 0 };
        cell.forward(&w, &seq, &mut ws, &mut y);
        let l = attention::layer_weights(0, h, att, discount, &ws, &[]);
        assert!(l.max_sum_error.unwrap() < 1e-4, "{cell:?}: sum {}", l.max_sum_error.unwrap());
        assert!(l.rel_error < 1e-4, "{cell:?}: {}", l.rel_error);
        assert!(l.init_max[0] > 0.0);
    }
}

#[test]
fn lstm_gets_the_spectrum_and_says_what_does_not_apply() {
    for cell in ["lstm", "gru", "rnn"] {
        let lm = lm(cell, &[6], None, CellOptions::default(), 3);
        let ex = report::explain(&lm, &tokens(&lm), &Options::default()).unwrap();
        assert!(ex.ran.is_none() && ex.attention.is_none() && ex.isan.is_none());
        let s = ex.summary();
        assert!(s.contains("PCA spectrum"), "{s}");
        assert!(s.contains("Not applicable"), "{s}");
        assert!(s.contains("RAN weights w_j^t: apply to RAN layers only"), "{s}");
        assert!(s.contains("RWA/RDA effective attention weights"), "{s}");
        assert!(s.contains("ISAN contribution analyses"), "{s}");
        assert!(s.contains(&format!("{cell}: ")), "the reason names the cell: {s}");
        let f: f64 = ex.pca.fractions().iter().sum();
        assert!((f - 1.0).abs() < 1e-9);
        assert!(ex.pca.eigenvalues.windows(2).all(|w| w[0] >= w[1]));
        // --components needs a weight analysis: ignored, and said so.
        let ex = report::explain(&lm, &tokens(&lm), &Options { components: vec![1], ..Default::default() }).unwrap();
        assert!(ex.summary().contains("(--components)"));
    }
}

#[test]
fn eigenvalues_of_known_matrices() {
    // The tridiagonal Toeplitz matrix (2, −1) has eigenvalues 2 − 2 cos(kπ/(n+1)); rotate it
    // by a dense orthogonal matrix (a product of Householder reflections) so that the
    // reduction has work to do.
    let n = 12;
    let mut a = vec![0f64; n * n];
    for i in 0..n {
        a[i * n + i] = 2.0;
        if i + 1 < n {
            a[i * n + i + 1] = -1.0;
            a[(i + 1) * n + i] = -1.0;
        }
    }
    let mut rng = Rng::new(5);
    for _ in 0..3 {
        let v: Vec<f64> = (0..n).map(|_| rng.range(-1.0, 1.0)).collect();
        let vv: f64 = v.iter().map(|x| x * x).sum();
        let hm: Vec<f64> = (0..n * n).map(|k| (k / n == k % n) as u8 as f64 - 2.0 * v[k / n] * v[k % n] / vv).collect();
        let mul = |x: &[f64], y: &[f64]| -> Vec<f64> {
            (0..n * n).map(|k| (0..n).map(|m| x[(k / n) * n + m] * y[m * n + k % n]).sum()).collect()
        };
        a = mul(&mul(&hm, &a), &hm);
    }
    let mut ev = rnnlens::kernels::f64::symmetric_eigenvalues(&mut a, n);
    ev.sort_by(f64::total_cmp);
    for (k, e) in ev.iter().enumerate() {
        let want = 2.0 - 2.0 * ((k + 1) as f64 * std::f64::consts::PI / (n + 1) as f64).cos();
        assert!((e - want).abs() < 1e-10, "eigenvalue {k}: {e} vs {want}");
    }
    // Outputs spread along two orthogonal directions with variances 4 and 1 (and 0 elsewhere).
    let (t, o) = (400, 5);
    let mut y = vec![0f32; t * o];
    for i in 0..t {
        let (p, q) = (if i % 2 == 0 { 2.0 } else { -2.0 }, if (i / 2) % 2 == 0 { 1.0 } else { -1.0 });
        y[i * o] = (p + q) / 2f32.sqrt();
        y[i * o + 1] = (p - q) / 2f32.sqrt();
        y[i * o + 3] = 7.0;
    }
    let s = pca::spectrum(&y, t, o);
    let c = t as f64 / (t - 1) as f64;
    assert!((s[0] - 4.0 * c).abs() < 1e-5 && (s[1] - c).abs() < 1e-5 && s[2].abs() < 1e-9, "{s:?}");
    // More units than positions: the Gram matrix gives the same nonzero eigenvalues.
    let s2 = pca::spectrum(&y[..6 * o], 6, o);
    assert_eq!(s2.len(), 5);
    let s3 = pca::spectrum(&y[..3 * o], 3, o);
    assert_eq!(s3.len(), 3, "min(T, O) eigenvalues");
    let tr: f64 = {
        let rows = &y[..3 * o];
        (0..o)
            .map(|m| {
                let mean = (0..3).map(|i| rows[i * o + m] as f64).sum::<f64>() / 3.0;
                (0..3).map(|i| (rows[i * o + m] as f64 - mean).powi(2)).sum::<f64>() / 2.0
            })
            .sum()
    };
    assert!((s3.iter().sum::<f64>() - tr).abs() < 1e-9 * tr.max(1.0), "the trace is kept");
}

#[test]
fn report_is_a_self_contained_page_with_data_files() {
    let dir = tempfile::tempdir().unwrap();
    let lm = lm("ran-tanh", &[6, 6], None, CellOptions::default(), 11);
    let ex = report::explain(&lm, &tokens(&lm), &Options { components: vec![2], ..Default::default() }).unwrap();
    let out = dir.path().join("rep");
    ex.write_report(&out).unwrap();
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(html.contains("<svg"), "figures are inline SVG");
    assert!(!html.to_lowercase().contains("http"), "no links to anything outside the page");
    assert!(!html.contains("<script") && !html.contains("<link"), "no scripts or external styles");
    assert!(html.contains("RAN weights") && html.contains("PCA spectrum"));
    for f in ["ran_layer0_weights.csv", "ran_layer1_arrows.json", "ran_layer1_unit2.csv", "pca_spectrum.csv", "summary.txt", "tokens.json"] {
        assert!(out.join(f).is_file(), "{f} is written");
    }
    let csv = std::fs::read_to_string(out.join("ran_layer0_weights.csv")).unwrap();
    assert_eq!(csv.lines().count(), tokens(&lm).len() + 1);
    let arrows: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("ran_layer0_arrows.json")).unwrap()).unwrap();
    assert_eq!(arrows["arrows"].as_array().unwrap().len(), tokens(&lm).len());
    // No temporary files are left behind.
    assert!(std::fs::read_dir(&out).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().starts_with('.')));
}

#[test]
fn too_long_texts_are_refused_clearly() {
    let lm = lm("ran-tanh", &[4], None, CellOptions::default(), 2);
    let toks: Vec<u32> = (0..report::MAX_TOKENS + 1).map(|i| (i % 5) as u32).collect();
    let err = report::explain(&lm, &toks, &Options::default()).err().unwrap().to_string();
    assert!(err.contains("at most 2000"), "{err}");
    let err = format!("{:#}", report::explain(&lm, &toks[..2], &Options { components: vec![4], ..Default::default() }).err().unwrap());
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn explain_command_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).output().unwrap();
    for (cell, must) in [("ran-identity", "RAN weights"), ("rda", "Effective attention weights"), ("lstm", "Not applicable")] {
        let ck = dir.path().join(cell);
        let lm = lm(cell, &[5], None, CellOptions::default(), 4);
        lm.save(&ck).unwrap();
        let rep = dir.path().join(format!("{cell}-report"));
        let input = dir.path().join("text.txt");
        std::fs::write(&input, TEXT).unwrap();
        let out = run(&["explain", "--checkpoint", ck.to_str().unwrap(), "--input", input.to_str().unwrap(), "--report", rep.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{cell}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(must) && stdout.contains("PCA spectrum"), "{cell}: {stdout}");
        assert!(rep.join("index.html").is_file());
        let out = run(&["explain", "--checkpoint", ck.to_str().unwrap(), "--text", "the cat"]);
        assert!(out.status.success());
        // A character outside the vocabulary is a clear error, not a panic.
        let out = run(&["explain", "--checkpoint", ck.to_str().unwrap(), "--text", "QQQ"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !err.contains("panicked"), "{err}");
    }
}

#[test]
fn isan_models_get_the_isan_section() {
    let dir = tempfile::tempdir().unwrap();
    let lm = lm("isan", &[6], None, CellOptions::default(), 21);
    let ex = report::explain(&lm, &tokens(&lm), &Options::default()).unwrap();
    assert!(ex.isan.is_some() && ex.ran.is_none() && ex.attention.is_none());
    let s = ex.summary();
    assert!(!s.contains("ISAN contribution analyses: apply"), "{s}");
    assert!(s.contains("PCA spectrum"), "{s}");
    ex.write_report(dir.path()).unwrap();
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("<svg"));
    // The SVG namespace name is an identifier, not a link; nothing else may name a URL.
    let rest = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(!rest.to_lowercase().contains("http"), "no links to anything outside the page");
    assert!(!html.contains("<script") && !html.contains("<link"));
}

/// The per-unit weights against the definition, multiplied out naively from the gates.
#[test]
fn unit_weights_match_the_definition() {
    // RAN: w_j^t(m) = i_j(m) Π_{k=j+1..t} f_k(m), the gates as the cell traces them.
    let h = 6;
    let lm1 = lm("ran-tanh", &[h], None, CellOptions::default(), 31);
    let toks = tokens(&lm1);
    let units: Vec<usize> = (0..h).collect();
    let ex = report::explain(&lm1, &toks, &Options { components: units.clone(), ..Default::default() }).unwrap();
    let l = &ex.ran.as_ref().unwrap().layers[0];
    let ws = report::forward(&lm1, &toks).unwrap();
    let traces = lm1.model.cells[0].trace(&ws.cell_ws[0]);
    let gate = |name: &str| traces.iter().find(|t| t.name == name).unwrap().values.clone();
    let (gi, gf) = (gate("i"), gate("f"));
    let n = toks.len();
    for (k, &m) in units.iter().enumerate() {
        for t in 0..n {
            for j in 0..=t {
                let mut w = gi[j * h + m] as f64;
                for q in j + 1..=t {
                    w *= gf[q * h + m] as f64;
                }
                let got = l.components[k].1[t * n + j] as f64;
                assert!((got - w).abs() <= 1e-6 * w.abs() + 1e-30, "unit {m} ({t},{j}): {got} vs {w}");
            }
        }
    }
    // RDA with exp attention: w_j^t = a_j Π γ / Σ_i a_i Π γ, from the pre-activations
    // xp = [u | p_g | p_a | p_γ] (small weights keep every exponential tame).
    let h = 4;
    let mut lm2 = lm("rda", &[h], None, CellOptions::default(), 32);
    lm2.w.iter_mut().for_each(|x| *x *= 0.5);
    let toks = tokens(&lm2);
    let ex = report::explain(&lm2, &toks, &Options { components: (0..h).collect(), ..Default::default() }).unwrap();
    let l = &ex.attention.as_ref().unwrap().layers[0];
    let ws = report::forward(&lm2, &toks).unwrap();
    let xp = &ws.cell_ws[0].xp;
    let n = toks.len();
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    for m in 0..h {
        for t in 0..n {
            let raw: Vec<f64> = (0..=t)
                .map(|j| {
                    let mut w = (xp[j * 4 * h + 2 * h + m] as f64).exp();
                    for q in j + 1..=t {
                        w *= sig(xp[q * 4 * h + 3 * h + m] as f64);
                    }
                    w
                })
                .collect();
            let tot: f64 = raw.iter().sum();
            for (j, r) in raw.iter().enumerate() {
                let got = l.components[m].1[t * n + j] as f64;
                let want = r / tot;
                assert!((got - want).abs() <= 1e-5 * want + 1e-7, "unit {m} ({t},{j}): {got} vs {want}");
            }
        }
    }
}

/// A task model trained briefly by the library, saved as `rnnlens task` saves it, read back.
fn task_model(kind: rnnlens::tasks::TaskKind, cell: &str, length: usize, dir: &std::path::Path) -> rnnlens::tasks::TaskModel {
    use rnnlens::tasks::{run_task, save_task_model, TaskConfig};
    let cfg = TaskConfig { hidden: 12, batch: 8, steps: 30, length: Some(length), lr: 0.01, ..Default::default() };
    let r = run_task(kind, cell, &cfg, |_| std::ops::ControlFlow::Continue(())).unwrap();
    save_task_model(dir, kind, &r, &cfg, &[]).unwrap();
    rnnlens::tasks::TaskModel::load(dir).unwrap()
}

#[test]
fn the_rdas_attention_on_a_multicopy_example_sums_to_one_and_rebuilds_the_engines_forward() {
    use rnnlens::tasks::{task_eval, TaskKind, TaskWs};
    let tmp = tempfile::tempdir().unwrap();
    let tm = task_model(TaskKind::Multicopy, "rda-exp-tanh", 60, &tmp.path().join("rda"));
    let b = tm.example(4, None).unwrap();
    assert_eq!((b.steps, b.batch), (60, 1));
    let ex = report::explain_task(&tm, &b, "example 4", &Options::default()).unwrap();
    let layer = &ex.attention.as_ref().expect("an RDA has attention weights").layers[0];
    // Per unit and step, the weights over the past (and the initial state) sum to one, and the
    // weighted average they give is the forward pass's n_t/d_t.
    let sum_err = layer.max_sum_error.unwrap();
    assert!(sum_err < 1e-5, "weights sum to 1 within {sum_err}");
    assert!(layer.rel_error < 1e-5 && layer.max_step_error < 1e-4, "reconstruction {} (worst {})", layer.rel_error, layer.max_step_error);
    // Every row of the heat map is a distribution over the past: nothing above the diagonal.
    for t in 0..60 {
        assert!(layer.max_w[t * 60 + t + 1..(t + 1) * 60].iter().all(|&w| w == 0.0), "step {t} attends to the future");
    }
    // The pass explain reads is the training engine's: the same loss on the same sequence.
    let (_, out) = tm.run(&b).unwrap();
    let (loss, acc) = tm.score(&b, &out).unwrap();
    let (want_loss, want_acc) = task_eval(TaskKind::Multicopy, &tm.model, &tm.w, &b, &mut TaskWs::default());
    assert!((loss - want_loss).abs() <= 1e-12 * want_loss.abs().max(1.0) && acc == want_acc, "{loss} {acc:?} against {want_loss} {want_acc:?}");
    assert!(ex.summary().contains("task multicopy (length 60), rda-exp-tanh trained 30 steps; example 4"), "{}", ex.summary());
}

#[test]
fn an_isan_on_parentheses_splits_its_readout_into_one_kappa_per_symbol() {
    use rnnlens::tasks::TaskKind;
    let tmp = tempfile::tempdir().unwrap();
    let tm = task_model(TaskKind::Parentheses, "isan", 20, &tmp.path().join("isan"));
    let b = tm.parse_input("(([a]{)}").unwrap();
    assert_eq!(b.scored.len(), 8);
    let ex = report::explain_task(&tm, &b, "typed", &Options::default()).unwrap();
    let s = ex.summary();
    assert!(s.contains("ISAN readout at the last step"), "{s}");
    // The split's sum equals the model's own readout (f64 against the f32 forward).
    let within: f64 = s.lines().find_map(|l| l.trim().strip_prefix("the split's sum against the model's readout: within ")).unwrap().parse().unwrap();
    assert!(within < 1e-4, "{s}");
    assert!(tm.parse_input("((x").unwrap_err().to_string().contains("not a symbol of the parentheses task"));
}

#[test]
fn the_pca_plot_leaves_out_the_components_at_numerical_zero_and_says_so() {
    // Two directions of variance among 5 units, and a third at 1e-18 of them (the size of
    // rounding, which squashed the log axis): the other eigenvalues are at numerical zero.
    let (t, o) = (400, 5);
    let y: Vec<f32> = (0..t * o).map(|k| match k % o { 0 => ((k / o) % 2) as f32 * 2.0, 1 => ((k / o / 2) % 2) as f32, 2 => ((k / o) % 3) as f32 * 1e-9, _ => 0.0 }).collect();
    let p = pca::PcaAnalysis::new(0, &y, t, o).unwrap();
    let html = p.html();
    let points = html.split("<polyline points=\"").nth(1).unwrap().split('"').next().unwrap().split_whitespace().count();
    assert_eq!(points, 2, "{html}");
    assert!(html.contains("The other 3 components are at numerical zero"), "{html}");
    assert_eq!(p.fractions().len(), 5, "the data keeps them");
}
