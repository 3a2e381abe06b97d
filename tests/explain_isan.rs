//! The ISAN analyses (`rnnlens::explain::isan`): the exact decomposition of the logits into
//! contributions κ and the quantities built on it, checked against the model's own forward.
#![allow(clippy::needless_range_loop)]

use rnnlens::data::Tokenizer;
use rnnlens::explain::isan::{self, Options};
use rnnlens::model::lm::Lm;
use rnnlens::model::{layer_configs, Init, Model, ModelConfig, ModelWs, TokenizerConfig};
use rnnlens::cells::registry::CellOptions;
use rnnlens::kernels::rng::Rng;

const TEXT: &str =
    "the annual revenue of the company rose while the reverse trend held in the annual report \
                    and the revenue grew ";

fn isan_lm(cell: &str, text: &str, hidden: usize, scale: f64, seed: u64) -> Lm {
    let tok = Tokenizer::fit_char(&[text], false).unwrap();
    let v = tok.vocab_size();
    let layers = layer_configs(cell, v, &[hidden], None, CellOptions::default()).unwrap();
    let config = ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: v,
        tokenizer: TokenizerConfig {
            level: "char".into(),
            normalize: "none".into(),
            split: None,
        },
        embedding_size: None,
        layers,
        cell_name: cell.into(),
        input_size: None,
    };
    let model = Model::new(config).unwrap();
    let w = model.init_params(Init::Uniform { scale }, &mut Rng::new(seed));
    Lm { model, w, tok }
}

/// The model's own f32 logits `[n][V]` for `tokens`, batch 1, from its initial state.
fn forward_logits(lm: &Lm, tokens: &[u32]) -> Vec<Vec<f64>> {
    let mut ws = ModelWs::<f32>::default();
    let mut state = lm.model.initial_state::<f32>(1);
    lm.model
        .forward(&lm.w, tokens, tokens.len(), 1, &mut state, &mut ws, None);
    let v = lm.model.vocab_size();
    ws.logits[..tokens.len() * v]
        .chunks_exact(v)
        .map(|r| r.iter().map(|&x| x as f64).collect())
        .collect()
}

fn rel_err(a: &[f64], b: &[f64]) -> f64 {
    let s = b.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / s)
        .fold(0.0, f64::max)
}

fn nll(logits: &[f64], target: u32) -> f64 {
    let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = mx + logits.iter().map(|x| (x - mx).exp()).sum::<f64>().ln();
    lse - logits[target as usize]
}

fn slot(lm: &Lm, name: &str) -> std::ops::Range<usize> {
    lm.model
        .slots
        .iter()
        .find(|s| s.name == name)
        .unwrap()
        .range()
}

#[test]
fn logits_equal_b_ro_plus_the_contributions() {
    for (cell, h, window) in [("isan", 12, 200), ("isan", 7, 30), ("isan-nobias", 9, 200)] {
        let lm = isan_lm(cell, TEXT, h, 0.3, 3);
        let tokens = lm.tok.encode(TEXT).unwrap();
        let a = isan::analyze_with(
            &lm,
            &tokens,
            Options {
                window,
                ..Options::default()
            },
        )
        .unwrap();
        let f = forward_logits(&lm, &tokens);
        assert_eq!(a.window.len(), window.min(tokens.len()));
        assert_eq!(a.window_start + a.window.len(), tokens.len());
        for t in 0..a.window.len() {
            // The decomposition itself, summed here term by term.
            let mut sum = a.b_ro.clone();
            for (j, x) in sum.iter_mut().enumerate() {
                *x += a.kappa_before[t][j];
                for k in &a.kappa[t] {
                    *x += k[j];
                }
            }
            assert_eq!(a.kappa[t].len(), t + 1);
            let model = &f[a.window_start + t];
            assert!(
                rel_err(&sum, model) < 1e-4,
                "{cell}: position {t}: {}",
                rel_err(&sum, model)
            );
            assert!(rel_err(&a.logits[t], model) < 1e-4);
            assert!(rel_err(&a.forward_logits[t], model) < 1e-4);
        }
        assert!(a.identity_error() < 1e-9, "{cell}: {}", a.identity_error());
        if cell == "isan-nobias" {
            // Without biases every contribution but h0's is zero.
            assert!(a.kappa.iter().flatten().flatten().all(|&x| x == 0.0));
            assert!(a.decay.iter().all(|d| d.1 == 0.0));
            assert!(a.bias_split.is_empty() && a.bias_cosine.iter().all(|m| m.is_empty()));
        }
    }
}

#[test]
fn h0_is_the_whole_story_at_the_start() {
    let lm = isan_lm("isan", TEXT, 10, 0.3, 4);
    let tokens = lm.tok.encode("the").unwrap();
    let a = isan::analyze(&lm, &tokens).unwrap();
    assert_eq!(a.window_start, 0);
    // κ_{h0} at position 0 is W_ro W_{x_0} h0.
    let h = 10;
    let w = &lm.w[slot(&lm, "rnn.0.W_x")];
    let h0 = &lm.w[slot(&lm, "rnn.0.h0")];
    let wro = &lm.w[slot(&lm, "decoder.weight")];
    let x = tokens[0] as usize;
    let u: Vec<f64> = (0..h)
        .map(|r| {
            (0..h)
                .map(|c| w[x * h * h + r * h + c] as f64 * h0[c] as f64)
                .sum()
        })
        .collect();
    for j in 0..a.vocab {
        let k: f64 = (0..h).map(|c| wro[j * h + c] as f64 * u[c]).sum();
        assert!((k - a.kappa_before[0][j]).abs() < 1e-9);
    }
}

#[test]
fn words_partition_the_window_and_their_kappa_add_up() {
    let lm = isan_lm("isan", TEXT, 12, 0.3, 5);
    let text = "the annual reve";
    let tokens = lm.tok.encode(text).unwrap();
    let a = isan::analyze(&lm, &tokens).unwrap();
    let words: Vec<(&str, bool)> = a
        .spans
        .iter()
        .map(|s| (s.text.as_str(), s.separator))
        .collect();
    assert_eq!(
        words,
        [
            ("the", false),
            (" ", true),
            ("annual", false),
            (" ", true),
            ("reve", false)
        ]
    );
    let mut next = 0;
    for s in &a.spans {
        assert_eq!(s.start, next);
        assert_eq!(lm.tok.decode(&a.window[s.start..s.end]), s.text);
        next = s.end;
    }
    assert_eq!(next, a.window.len());
    // b_ro + κ_h0 + Σ κ_word (separators included) = the final logits.
    let last = a.window.len() - 1;
    let mut sum: Vec<f64> = a
        .b_ro
        .iter()
        .zip(&a.kappa_before[last])
        .map(|(x, y)| x + y)
        .collect();
    for k in &a.word_kappa {
        sum.iter_mut().zip(k).for_each(|(s, x)| *s += x);
    }
    assert!(rel_err(&sum, &a.logits[last]) < 1e-12);
    // The norms at the final position are those of κ_word.
    for (i, k) in a.word_kappa.iter().enumerate() {
        let n = k.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((a.word_norms[last][i] - n).abs() < 1e-12);
    }
    // A word that starts after t contributes nothing at t.
    assert_eq!(a.word_norms[0][2], 0.0);
    // One counterfactual per word (not per separator): the logits minus that word's κ.
    assert_eq!(a.counterfactuals.len(), 3);
    for cf in &a.counterfactuals {
        assert!(!a.spans[cf.span].separator);
        let back: Vec<f64> = cf
            .logits
            .iter()
            .zip(&a.word_kappa[cf.span])
            .map(|(x, y)| x + y)
            .collect();
        assert!(rel_err(&back, &a.logits[last]) < 1e-12);
        // Its top predictions are the argmax of its own softmax.
        let best = (0..a.vocab)
            .max_by(|&i, &j| cf.logits[i].total_cmp(&cf.logits[j]))
            .unwrap();
        assert_eq!(cf.top[0].0 as usize, best);
        assert!(cf.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
    let s = a.summary(&lm);
    assert!(s.contains("without 'annual'"), "{s}");
}

/// Keeping the k most recent contributions and dropping the rest (h0 included) is running the
/// model on the last k symbols from a zero state: checked against the model's own forward.
#[test]
fn truncated_history_equals_a_forward_from_zero_on_the_suffix() {
    let lm = isan_lm("isan", TEXT, 10, 0.3, 6);
    let tokens = lm.tok.encode(&TEXT[..60]).unwrap();
    let mut zero_h0 = isan_lm("isan", TEXT, 10, 0.3, 6);
    let r = slot(&lm, "rnn.0.h0");
    zero_h0.w[r].fill(0.0);
    for k in [1usize, 2, 5, 17] {
        let tl = isan::truncated_logits(&lm, &tokens, k).unwrap();
        for i in [k - 1, k + 3, tokens.len() - 1] {
            let suffix = &tokens[i + 1 - k..=i];
            let f = forward_logits(&zero_h0, suffix);
            assert!(rel_err(&tl[i], &f[k - 1]) < 1e-4, "k {k} i {i}");
        }
    }
    let all = isan::truncated_logits(&lm, &tokens, tokens.len() + 1).unwrap();
    let f = forward_logits(&lm, &tokens);
    for i in 0..tokens.len() {
        assert!(rel_err(&all[i], &f[i]) < 1e-4);
    }
}

/// The analysis computes the history curve lag by lag over the whole text; it must agree with
/// the direct truncation, and the decay curve with the norms of the κ it is built from.
#[test]
fn history_cross_entropy_and_decay_agree_with_direct_computation() {
    let lm = isan_lm("isan", TEXT, 8, 0.3, 7);
    let tokens = lm.tok.encode(TEXT).unwrap();
    let n = tokens.len();
    let opts = Options {
        window: 10,
        max_lag: 12,
        max_stat_tokens: 10_000,
        top: 3,
    };
    let a = isan::analyze_with(&lm, &tokens, opts).unwrap();
    assert_eq!(a.stat_tokens, n);
    assert_eq!(a.history_ce.len(), 14);
    for &(k, ce) in &a.history_ce {
        let tl = isan::truncated_logits(&lm, &tokens, k).unwrap();
        let direct: f64 =
            (0..n - 1).map(|i| nll(&tl[i], tokens[i + 1])).sum::<f64>() / (n - 1) as f64;
        assert!((ce - direct).abs() < 1e-9, "k {k}: {ce} vs {direct}");
    }
    let f = forward_logits(&lm, &tokens);
    let full: f64 = (0..n - 1).map(|i| nll(&f[i], tokens[i + 1])).sum::<f64>() / (n - 1) as f64;
    assert!((a.full_ce - full).abs() < 1e-4);
    // k = 0 is softmax(b_ro) alone.
    let b = a.b_ro.clone();
    let uni: f64 = (0..n - 1).map(|i| nll(&b, tokens[i + 1])).sum::<f64>() / (n - 1) as f64;
    assert!((a.history_ce[0].1 - uni).abs() < 1e-12);
    // The decay at lags inside the window matches the window's own κ (the window is the tail,
    // so only check lag 0 over the whole text: ‖W_ro b_x‖ averaged over the symbols read).
    let h = 8;
    let bx = &lm.w[slot(&lm, "rnn.0.b_x")];
    let wro = &lm.w[slot(&lm, "decoder.weight")];
    let lag0: f64 = tokens
        .iter()
        .map(|&x| {
            (0..a.vocab)
                .map(|j| {
                    (0..h)
                        .map(|c| wro[j * h + c] as f64 * bx[x as usize * h + c] as f64)
                        .sum::<f64>()
                        .powi(2)
                })
                .sum::<f64>()
                .sqrt()
        })
        .sum::<f64>()
        / n as f64;
    assert_eq!(a.decay[0].0, 0);
    assert_eq!(a.decay[0].2, n);
    assert!((a.decay[0].1 - lag0).abs() < 1e-9);
    assert_eq!(a.decay[5].2, n - 5);
    // Median cross-entropy by position in the word: every prediction counted once.
    let counted: usize = a.by_word_pos.iter().map(|w| w.count).sum();
    assert_eq!(counted, n - 1);
    assert_eq!(a.by_word_pos[0].pos, 0);
}

#[test]
fn unigram_bigram_and_readout_basis() {
    // H > V so that the readout's row space is a proper subspace.
    let text = "abba cab bac abc ";
    let lm = isan_lm("isan", text, 9, 0.3, 8);
    let tokens = lm.tok.encode(text).unwrap();
    let v = lm.tok.vocab_size();
    assert!(v < 9);
    let a = isan::analyze(&lm, &tokens).unwrap();
    let sa: f64 = a.softmax_b_ro.iter().sum();
    assert!((sa - 1.0).abs() < 1e-12);
    let a_id = lm.tok.id("a").unwrap() as usize;
    assert!((a.unigram[a_id] - 5.0 / 17.0).abs() < 1e-12);
    // One bigram row per symbol followed by something; counts add to n − 1.
    assert_eq!(
        a.bigram.iter().map(|b| b.count).sum::<usize>(),
        tokens.len() - 1
    );
    assert!(a.bigram.iter().all(|b| b.corr_model.abs() <= 1.0 + 1e-12));
    assert_eq!(a.readout_rank, v);
    assert_eq!(a.bias_split.len(), v);
    for b in &a.bias_split {
        let back = (b.norm_parallel.powi(2) + b.norm_perp.powi(2)).sqrt();
        assert!((back - b.norm).abs() < 1e-9 * b.norm.max(1.0));
        assert!(b.norm_perp > 1e-6);
    }
    // Cosine distances: zero on the diagonal, symmetric, within [0, 2].
    for m in &a.bias_cosine {
        assert_eq!(m.len(), v);
        for i in 0..v {
            assert!(m[i][i].abs() < 1e-12);
            for j in 0..v {
                assert!((m[i][j] - m[j][i]).abs() < 1e-12);
                assert!((-1e-12..=2.0 + 1e-12).contains(&m[i][j]));
            }
        }
    }
    // The readout basis (eq. 9): the first V coordinates of [h; 1] in it are the logits, and the
    // transformed dynamics (eq. 10) act on those coordinates as W' acts on [h; 1].
    let basis = isan::readout_basis(&lm).unwrap();
    assert_eq!(a.readout_basis.as_ref(), Some(&basis));
    let h = 9;
    assert_eq!(basis.len(), h + 1);
    let mv = |m: &[Vec<f64>], x: &[f64]| -> Vec<f64> {
        m.iter()
            .map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    };
    let mut hv: Vec<f64> = (0..h).map(|i| (i as f64 * 1.3).cos()).collect();
    hv.push(1.0);
    let wro = &lm.w[slot(&lm, "decoder.weight")];
    let bro = &lm.w[slot(&lm, "decoder.bias")];
    let coords = mv(&basis, &hv);
    for j in 0..v {
        let l: f64 = (0..h).map(|c| wro[j * h + c] as f64 * hv[c]).sum::<f64>() + bro[j] as f64;
        assert!((coords[j] - l).abs() < 1e-9);
    }
    for x in 0..v as u32 {
        let d = isan::readout_basis_dynamics(&lm, x).unwrap();
        let wp = isan::affine_expansion(&lm, x).unwrap();
        let want = mv(&basis, &mv(&wp, &hv));
        let got = mv(&d, &coords);
        assert!(rel_err(&got, &want) < 1e-9, "{x}");
    }
    assert_eq!(a.readout_dynamics.len(), a.expansions.len());
    // With H ≤ V the row space is everything: nothing is orthogonal to the readout.
    let lm2 = isan_lm("isan", text, 2, 0.3, 9);
    let a2 = isan::analyze(&lm2, &tokens).unwrap();
    assert_eq!(a2.readout_rank, 2);
    assert!(a2
        .bias_split
        .iter()
        .all(|b| b.norm_perp < 1e-9 * b.norm.max(1.0)));
    // With V > H + 1 there is no readout basis.
    assert!(isan::readout_basis(&lm2).is_err());
    assert!(a2.readout_basis.is_none() && a2.readout_dynamics.is_empty());
}

#[test]
fn the_symbol_statistics_count_on_the_text_they_are_given() {
    // Counted on another text (the training split, as the paper counts them), the unigram and
    // bigram distributions are that text's; the contributions stay the explained text's.
    let text = "abba cab bac abc ";
    let lm = isan_lm("isan", text, 9, 0.3, 8);
    let tokens = lm.tok.encode(text).unwrap();
    let other = lm.tok.encode("aaab cab aaab ").unwrap();
    let own = isan::analyze(&lm, &tokens).unwrap();
    let stats = isan::StatsText { name: "the training split", tokens: &other };
    let a = isan::analyze_counting_on(&lm, &tokens, Options::default(), Some(stats)).unwrap();
    assert_eq!((a.distributions_of.as_str(), a.distribution_tokens), ("the training split", other.len()));
    assert_eq!((own.distributions_of.as_str(), own.distribution_tokens), ("the explained text", tokens.len()));
    let a_id = lm.tok.id("a").unwrap() as usize;
    assert!((a.unigram[a_id] - 7.0 / 14.0).abs() < 1e-12, "{}", a.unigram[a_id]);
    assert_eq!(a.bigram.iter().map(|b| b.count).sum::<usize>(), other.len() - 1);
    assert!((a.unigram_corr - own.unigram_corr).abs() > 1e-6);
    assert_eq!((a.full_ce, &a.decay, &a.history_ce), (own.full_ce, &own.decay, &own.history_ce));
    assert_eq!(a.logits, own.logits);
    // A statistics text the model cannot read is refused, as an explained one is.
    let bad = [0u32, 999];
    let e = isan::analyze_counting_on(&lm, &tokens, Options::default(), Some(isan::StatsText { name: "x", tokens: &bad }));
    assert!(e.err().expect("refused").to_string().contains("out of range"));
}

#[test]
fn the_affine_expansion_is_linear_in_the_augmented_state() {
    let lm = isan_lm("isan", TEXT, 6, 0.3, 10);
    let h = 6;
    let k = lm.tok.id("e").unwrap();
    let wp = isan::affine_expansion(&lm, k).unwrap();
    assert_eq!(wp.len(), h + 1);
    assert!(wp.iter().all(|r| r.len() == h + 1));
    let hv: Vec<f64> = (0..h).map(|i| (i as f64 * 0.7).sin()).collect();
    let mut aug = hv.clone();
    aug.push(1.0);
    let out: Vec<f64> = wp
        .iter()
        .map(|r| r.iter().zip(&aug).map(|(a, b)| a * b).sum())
        .collect();
    let w = &lm.w[slot(&lm, "rnn.0.W_x")];
    let b = &lm.w[slot(&lm, "rnn.0.b_x")];
    for r in 0..h {
        let want: f64 = (0..h)
            .map(|c| w[k as usize * h * h + r * h + c] as f64 * hv[c])
            .sum::<f64>()
            + b[k as usize * h + r] as f64;
        assert!((out[r] - want).abs() < 1e-12);
    }
    assert_eq!(out[h], 1.0);
    assert!(isan::affine_expansion(&lm, lm.tok.vocab_size() as u32).is_err());
}

#[test]
fn other_models_and_bad_tokens_are_refused() {
    let lm = isan_lm("isan", TEXT, 4, 0.3, 11);
    assert!(isan::analyze(&lm, &[]).is_err());
    assert!(isan::analyze(&lm, &[lm.tok.vocab_size() as u32]).is_err());
    let tok = Tokenizer::fit_char(&[TEXT], false).unwrap();
    let v = tok.vocab_size();
    let config = ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: v,
        tokenizer: TokenizerConfig {
            level: "char".into(),
            normalize: "none".into(),
            split: None,
        },
        embedding_size: Some(4),
        layers: layer_configs("rnn", 4, &[5], None, CellOptions::default()).unwrap(),
        cell_name: "rnn".into(),
        input_size: None,
    };
    let model = Model::new(config).unwrap();
    let w = model.init_params(Init::Xavier, &mut Rng::new(1));
    let rnn = Lm { model, w, tok };
    let err = isan::analyze(&rnn, &[0, 1]).err().unwrap().to_string();
    assert!(err.contains("isan"), "{err}");
}

/// Train a small character ISAN and run everything, output included.
#[test]
fn trained_isan_report() {
    let tmp = tempfile::tempdir().unwrap();
    let lines = [
        "the annual revenue rose",
        "annual revenue fell",
        "the car went in reverse",
        "we reverse the order",
        "a reverse trend",
        "the revenue of the firm",
        "an annual report",
        "put it in reverse",
    ];
    let mut text = String::new();
    let mut rng = Rng::new(7);
    for _ in 0..600 {
        text.push_str(lines[rng.below(lines.len() as u64) as usize]);
        text.push('\n');
    }
    let data = tmp.path().join("text.txt");
    std::fs::write(&data, &text).unwrap();
    let cfg = rnnlens::training::TrainConfig {
        data: Some(data),
        format: Some(rnnlens::data::Format::Text),
        level: Some(rnnlens::data::Level::Char),
        cell: "isan".into(),
        hidden_size: vec![24],
        batch_size: 16,
        bptt: 40,
        carry_state: Some(false),
        max_steps: Some(300),
        epochs: 50,
        lr: 0.01,
        dropout: 0.0,
        init: rnnlens::training::InitScheme::Xavier,
        out: tmp.path().join("run"),
        sample_length: 0,
        runtime: rnnlens::kernels::runtime::Runtime { threads: Some(2), ..Default::default() },
        ..Default::default()
    };
    let lm = rnnlens::training::train(cfg, rnnlens::training::Start::New, true).unwrap().lm;
    let probe = format!(
        "{}the annual reve",
        &text[..text[..1500].rfind('\n').unwrap() + 1]
    );
    let tokens = lm.tok.encode(&probe).unwrap();
    let a = isan::analyze(&lm, &tokens).unwrap();
    let f = forward_logits(&lm, &tokens);
    for t in 0..a.window.len() {
        assert!(rel_err(&a.logits[t], &f[a.window_start + t]) < 1e-4);
    }
    let summary = a.summary(&lm);
    eprintln!("{summary}");
    assert!(summary.contains("without 'annual'"));
    // Trained: better than the readout bias alone, and the full history beats one symbol.
    assert!(a.full_ce < a.history_ce[0].1);
    assert!(a.full_ce < a.history_ce[1].1);
    assert!(a.unigram_corr > 0.5, "{}", a.unigram_corr);
    let html = a.html(&lm);
    assert!(html.matches("<svg").count() >= 6);
    assert!(
        !html.contains("http://")
            || html.matches("http://www.w3.org/2000/svg").count()
                == html.matches("http://").count()
    );
    let out = tmp.path().join("data");
    a.write_data(&out).unwrap();
    for f in [
        "isan_kappa_last.csv",
        "isan_decay.csv",
        "isan_history_ce.csv",
        "isan_summary.json",
        "isan_unigram_bias.csv",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let last = *tokens.last().unwrap();
    let j: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.join(format!("isan_affine_{last}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(j["W_prime"].as_array().unwrap().len(), 25);
    let decay = std::fs::read_to_string(out.join("isan_decay.csv")).unwrap();
    assert_eq!(decay.lines().count(), a.decay.len() + 1);
}

/// The cross-entropy by position in the word with only the separators' contributions, and
/// without them, are the cross-entropies of two edited models: one whose separator biases are
/// zero (without), one whose other biases and h0 are zero (only). Checked against their forward.
#[test]
fn separator_contributions_are_those_of_edited_models() {
    let lm = isan_lm("isan", TEXT, 8, 0.3, 12);
    let tokens = lm.tok.encode(TEXT).unwrap();
    let n = tokens.len();
    let a = isan::analyze(&lm, &tokens).unwrap();
    let h = 8;
    let space = lm.tok.id(" ").unwrap() as usize;
    let rb = slot(&lm, "rnn.0.b_x");
    let mut without = isan_lm("isan", TEXT, 8, 0.3, 12);
    without.w[rb.start + space * h..rb.start + (space + 1) * h].fill(0.0);
    let mut only = isan_lm("isan", TEXT, 8, 0.3, 12);
    for k in 0..lm.tok.vocab_size() {
        if k != space {
            only.w[rb.start + k * h..rb.start + (k + 1) * h].fill(0.0);
        }
    }
    only.w[slot(&lm, "rnn.0.h0")].fill(0.0);
    let full_l = forward_logits(&lm, &tokens);
    let only_l = forward_logits(&only, &tokens);
    let without_l = forward_logits(&without, &tokens);
    let mut buckets: Vec<[Vec<f64>; 3]> = vec![Default::default(); 13];
    let mut pos = 0usize;
    for i in 0..n - 1 {
        pos = if tokens[i] as usize == space {
            0
        } else {
            pos + 1
        };
        let b = &mut buckets[pos.min(12)];
        b[0].push(nll(&full_l[i], tokens[i + 1]));
        b[1].push(nll(&only_l[i], tokens[i + 1]));
        b[2].push(nll(&without_l[i], tokens[i + 1]));
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        let m = v.len();
        if m % 2 == 1 {
            v[m / 2]
        } else {
            0.5 * (v[m / 2 - 1] + v[m / 2])
        }
    };
    let mut seen = 0;
    for (p, b) in buckets.iter_mut().enumerate() {
        if b[0].is_empty() {
            continue;
        }
        let w = &a.by_word_pos[seen];
        seen += 1;
        assert_eq!((w.pos, w.count), (p, b[0].len()));
        assert!((w.all - med(&mut b[0])).abs() < 1e-4, "pos {p}");
        assert!((w.separators_only - med(&mut b[1])).abs() < 1e-4, "pos {p}");
        assert!(
            (w.without_separators - med(&mut b[2])).abs() < 1e-4,
            "pos {p}"
        );
    }
    assert_eq!(seen, a.by_word_pos.len());
}

/// A word-level ISAN: every token is its own word (no separators, no positions in words), and a
/// large vocabulary shortens the window and the statistics instead of exhausting memory.
#[test]
fn word_level_and_large_vocabularies() {
    use rnnlens::data::Level;
    let mut words: Vec<String> = vec!["<unk>".into(), "<eos>".into()];
    words.extend((0..20_000).map(|i| format!("w{i}")));
    let tok = Tokenizer::from_tokens(Level::Word, false, words).unwrap();
    let v = tok.vocab_size();
    let layers = layer_configs("isan", v, &[2], None, CellOptions::default()).unwrap();
    let config = ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: v,
        tokenizer: TokenizerConfig {
            level: "word".into(),
            normalize: "none".into(),
            split: None,
        },
        embedding_size: None,
        layers,
        cell_name: "isan".into(),
        input_size: None,
    };
    let model = Model::new(config).unwrap();
    let w = model.init_params(Init::Uniform { scale: 0.3 }, &mut Rng::new(13));
    let lm = Lm { model, w, tok };
    let mut rng = Rng::new(14);
    let tokens: Vec<u32> = (0..3000).map(|_| rng.below(v as u64) as u32).collect();
    let a = isan::analyze(&lm, &tokens).unwrap();
    assert!(
        a.window.len() < 48 && a.window.len() >= 2,
        "{}",
        a.window.len()
    );
    assert!(a.stat_tokens < 3000 && a.stat_tokens >= 100);
    assert!(a.spans.iter().all(|s| s.end == s.start + 1 && !s.separator));
    assert_eq!(a.counterfactuals.len(), a.window.len());
    assert!(a.by_word_pos.is_empty());
    assert!(a.bigram.len() <= 1000);
    assert!(a.bias_cosine.iter().all(|m| m.is_empty()));
    assert!(a.readout_basis.is_none());
    let f = forward_logits(&lm, &tokens);
    for t in 0..a.window.len() {
        assert!(rel_err(&a.logits[t], &f[a.window_start + t]) < 1e-4);
    }
    let html = a.html(&lm);
    // Four scatter plots of at most 1500 points, one of at most 1000 bigram rows.
    assert!(html.matches("<circle").count() <= 4 * 1500 + 1000);
    let dir = tempfile::tempdir().unwrap();
    a.write_data(dir.path()).unwrap();
    assert!(!dir.path().join("isan_cosine_b.csv").exists());
}

#[test]
fn kappa_word_embedding_is_a_pca_of_the_frequent_words() {
    let text = "the cat and the dog and the cat saw a dog and the cat ran to the dog ";
    let lm = isan_lm("isan", text, 12, 0.4, 7);
    let tokens = lm.tok.encode(text).unwrap();
    let a = isan::analyze(&lm, &tokens).unwrap();
    // The words seen at least twice, by count (ties by the word).
    let mut expect = vec![
        ("the".to_string(), 5usize),
        ("cat".to_string(), 3),
        ("dog".to_string(), 3),
        ("and".to_string(), 3),
    ];
    expect.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let got: Vec<(String, usize)> = a
        .word_embedding
        .iter()
        .map(|w| (w.0.clone(), w.1))
        .collect();
    assert_eq!(got, expect);
    let v = a.vocab;
    let k = a.word_embedding.len();
    assert_eq!(a.word_embedding_axes.len(), 2);
    assert_eq!(a.word_embedding_kappa.len(), k);
    // Orthonormal directions.
    let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
    let ax = &a.word_embedding_axes;
    assert!((dot(&ax[0], &ax[0]) - 1.0).abs() < 1e-9);
    assert!((dot(&ax[1], &ax[1]) - 1.0).abs() < 1e-9);
    assert!(dot(&ax[0], &ax[1]).abs() < 1e-9);
    // The centred vectors project onto the stored coordinates.
    let mut mean = vec![0.0; v];
    for kv in &a.word_embedding_kappa {
        mean.iter_mut()
            .zip(kv)
            .for_each(|(m, x)| *m += x / k as f64);
    }
    let centred: Vec<Vec<f64>> = a
        .word_embedding_kappa
        .iter()
        .map(|kv| kv.iter().zip(&mean).map(|(x, m)| x - m).collect())
        .collect();
    let total: f64 = centred.iter().map(|c| dot(c, c)).sum();
    assert!(total > 0.0);
    for (c, w) in centred.iter().zip(&a.word_embedding) {
        assert!((dot(c, &ax[0]) - w.2).abs() < 1e-9 * total.sqrt());
        assert!((dot(c, &ax[1]) - w.3).abs() < 1e-9 * total.sqrt());
    }
    let [f1, f2] = a.word_embedding_variance;
    assert!(
        (0.0..=1.0).contains(&f1)
            && (0.0..=1.0).contains(&f2)
            && f1 >= f2
            && f1 + f2 <= 1.0 + 1e-12
    );
    let var = |d: &[f64]| centred.iter().map(|c| dot(c, d).powi(2)).sum::<f64>() / total;
    assert!((var(&ax[0]) - f1).abs() < 1e-9);
    assert!((var(&ax[1]) - f2).abs() < 1e-9);
    // PC1 maximises the variance: no random direction does better; PC2 beats any direction
    // orthogonal to PC1.
    let mut rng = Rng::new(3);
    for _ in 0..200 {
        let mut d: Vec<f64> = (0..v).map(|_| rng.uniform() - 0.5).collect();
        let n = dot(&d, &d).sqrt();
        d.iter_mut().for_each(|x| *x /= n);
        assert!(var(&d) <= f1 + 1e-9);
        let p = dot(&d, &ax[0]);
        d.iter_mut().zip(&ax[0]).for_each(|(x, y)| *x -= p * y);
        let n = dot(&d, &d).sqrt();
        d.iter_mut().for_each(|x| *x /= n);
        assert!(var(&d) <= f2 + 1e-9);
    }
    let s = a.summary(&lm);
    assert!(s.contains("κ_word embedding of 4 frequent words"), "{s}");
    assert!(a.html(&lm).contains(">the</text>"));
    let dir = std::env::temp_dir().join(format!("rnnlens_isan_emb_{}", std::process::id()));
    a.write_data(&dir).unwrap();
    let csv = std::fs::read_to_string(dir.join("isan_word_embedding.csv")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "word,count,pc1,pc2");
    assert_eq!(lines.len(), k + 1);
    assert!(lines[1].starts_with("the,5,"));
    // Too few repeated words: skipped and said so.
    let lm2 = isan_lm("isan", "ab cd ab ef ", 8, 0.4, 1);
    let t2 = lm2.tok.encode("ab cd ab ef ").unwrap();
    let b = isan::analyze(&lm2, &t2).unwrap();
    assert!(b.word_embedding.is_empty());
    assert!(b.summary(&lm2).contains("κ_word embedding: skipped"));
}

#[test]
fn the_statistics_do_not_depend_on_the_thread_count() {
    // Whoever reads a checkpoint (the CLI, Python, a report) may run with another number of
    // threads, or have its work split differently between two runs: the sums must be taken in
    // one order. A float sum split where threads steal work changed the last bit of one
    // history cross-entropy between the CLI and Python once.
    let text = TEXT.repeat(12);
    let lm = isan_lm("isan", &text, 8, 0.3, 11);
    let tokens = lm.tok.encode(&text).unwrap();
    let opts = Options {
        window: 10,
        max_lag: 20,
        max_stat_tokens: 10_000,
        top: 3,
    };
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| isan::analyze_with(&lm, &tokens, opts).unwrap())
    };
    let bits = |a: &isan::IsanAnalysis| {
        let mut b: Vec<u64> = a.history_ce.iter().map(|d| d.1.to_bits()).collect();
        b.extend(a.decay.iter().map(|d| d.1.to_bits()));
        b.push(a.full_ce.to_bits());
        b
    };
    let one = bits(&run(1));
    for threads in [2, 3, 4, 7] {
        for _ in 0..3 {
            assert_eq!(bits(&run(threads)), one, "{threads} threads");
        }
    }
}
