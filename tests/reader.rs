//! An independent reader of the checkpoint contract: it computes a RAN language model's ln p
//! from `config.json`, `model.safetensors` and `vocab.txt` alone, following docs/checkpoint.md
//! and the RAN's equations (docs/cells.md), in f64, with none of rnnlens's code (its own
//! safetensors and vocab.txt parsing, its own tokenizer and forward pass), and checks that
//! `rnnlens eval --per-token` gives the same numbers: for a RAN trained with its state reset
//! every window and for one trained with the state carried, since the streaming evaluation
//! does not depend on how a model was trained.

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

fn rnnlens(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).output().expect("run rnnlens");
    assert!(out.status.success(), "rnnlens {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

// ---- the reader ---------------------------------------------------------------------------

/// A safetensors file: an 8-byte little-endian header length, a JSON header naming each
/// tensor's dtype, shape and byte range, then the data.
fn safetensors(bytes: &[u8]) -> HashMap<String, (Vec<usize>, Vec<f64>)> {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut out = HashMap::new();
    for (name, t) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        assert_eq!(t["dtype"], "F32", "{name}");
        let shape: Vec<usize> = t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        let (a, b) = (t["data_offsets"][0].as_u64().unwrap() as usize, t["data_offsets"][1].as_u64().unwrap() as usize);
        let values = data[a..b].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect();
        out.insert(name.clone(), (shape, values));
    }
    out
}

/// vocab.txt: one token per line, `\\`, `\n`, `\r`, `\t` and `\xHH` escaped.
fn vocab(text: &str) -> Vec<String> {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
        .iter()
        .map(|l| {
            let mut s = String::new();
            let mut it = l.chars();
            while let Some(c) = it.next() {
                if c != '\\' {
                    s.push(c);
                    continue;
                }
                match it.next().unwrap() {
                    '\\' => s.push('\\'),
                    'n' => s.push('\n'),
                    'r' => s.push('\r'),
                    't' => s.push('\t'),
                    'x' => {
                        let h: String = [it.next().unwrap(), it.next().unwrap()].iter().collect();
                        s.push(char::from(u8::from_str_radix(&h, 16).unwrap()));
                    }
                    e => panic!("unknown escape \\{e}"),
                }
            }
            s
        })
        .collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `y = W x` for `W` `[rows, cols]` row-major.
fn matvec(w: &[f64], x: &[f64]) -> Vec<f64> {
    w.chunks_exact(x.len()).map(|row| row.iter().zip(x).map(|(a, b)| a * b).sum()).collect()
}

/// ln p of every character of `text` after the first, the state carried from the start.
fn ran_log_probs(dir: &Path, text: &str) -> Vec<f64> {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let t = safetensors(&std::fs::read(dir.join("model.safetensors")).unwrap());
    let tokens = vocab(&std::fs::read_to_string(dir.join("vocab.txt")).unwrap());
    assert_eq!(config["tokenizer"]["level"], "char");
    assert_eq!(config["layers"].as_array().unwrap().len(), 1);
    let layer = &config["layers"][0];
    assert_eq!(layer["cell"], "ran");
    assert!(layer["projection_size"].is_null() && layer.get("learn_initial_state").is_none());
    let tanh = match layer["options"]["output"].as_str().unwrap() {
        "tanh" => true,
        "identity" => false,
        o => panic!("output {o}"),
    };
    // gates read h_{t-1} ("h") or c_{t-1} ("c", also a layer without the key)
    let gates_read_h = layer["options"]["gates"] == "h";
    let h = layer["hidden_size"].as_u64().unwrap() as usize;
    let get = |n: &str| &t[n].1;
    let (emb, w_cx, b_c, w_ix, w_ic, b_i, w_fx, w_fc, b_f, dec_w, dec_b) = (
        get("embedding.weight"),
        get("rnn.0.W_cx"),
        get("rnn.0.b_c"),
        get("rnn.0.W_ix"),
        get("rnn.0.W_ic"),
        get("rnn.0.b_i"),
        get("rnn.0.W_fx"),
        get("rnn.0.W_fc"),
        get("rnn.0.b_f"),
        get("decoder.weight"),
        get("decoder.bias"),
    );
    let e = t["embedding.weight"].0[1];
    let ids: Vec<usize> = text.chars().map(|c| tokens.iter().position(|t| t.chars().eq([c])).expect("in the vocabulary")).collect();
    let mut c = vec![0.0; h];
    let mut out = Vec::new();
    for (k, &id) in ids.iter().enumerate().take(ids.len() - 1) {
        let x = &emb[id * e..(id + 1) * e];
        let g = |v: f64| if tanh { v.tanh() } else { v };
        let r: Vec<f64> = if gates_read_h { c.iter().map(|&v| g(v)).collect() } else { c.clone() };
        let (cx, ix, ir, fx, fr) = (matvec(w_cx, x), matvec(w_ix, x), matvec(w_ic, &r), matvec(w_fx, x), matvec(w_fc, &r));
        for u in 0..h {
            let i = sigmoid(ix[u] + ir[u] + b_i[u]);
            let f = sigmoid(fx[u] + fr[u] + b_f[u]);
            c[u] = i * (cx[u] + b_c[u]) + f * c[u];
        }
        let hv: Vec<f64> = c.iter().map(|&v| g(v)).collect();
        let logits: Vec<f64> = matvec(dec_w, &hv).iter().zip(dec_b).map(|(a, b)| a + b).collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
        out.push(logits[ids[k + 1]] - lse);
    }
    out
}

// ---- the test -----------------------------------------------------------------------------

fn per_token(dir: &Path, input: &Path, extra: &[&str]) -> Vec<f64> {
    let out = dir.with_extension(format!("lp{}", extra.len()));
    let mut args = vec!["eval", "--checkpoint", dir.to_str().unwrap(), "--input", input.to_str().unwrap(), "--per-token", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    rnnlens(&args);
    std::fs::read_to_string(&out).unwrap().lines().map(|l| l.split('\t').next().unwrap().parse().unwrap()).collect()
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn an_independent_reader_of_the_contract_gets_evals_numbers_however_the_ran_was_trained() {
    let tmp = tempfile::tempdir().unwrap();
    let words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "house"];
    let mut s = String::new();
    let mut x: u64 = 11;
    for line in 0..400 {
        for _ in 0..(4 + line % 6) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            s.push_str(words[(x >> 33) as usize % words.len()]);
            s.push(' ');
        }
        s.push_str(".\n");
    }
    let data = tmp.path().join("corpus.txt");
    std::fs::write(&data, &s).unwrap();
    // A text several training windows long: a reset every window would change its scores.
    let text: String = s.lines().skip(7).take(12).collect::<Vec<_>>().join("\n");
    let input = tmp.path().join("text.txt");
    std::fs::write(&input, &text).unwrap();

    for (name, carry) in [("reset", "false"), ("carried", "true")] {
        let dir = tmp.path().join(name);
        rnnlens(&[
            "train", "--data", data.to_str().unwrap(), "--level", "char", "--cell", "ran-tanh", "--embedding-size", "8",
            "--hidden-size", "16", "--batch-size", "4", "--bptt", "20", "--max-steps", "80", "--dropout", "0", "--carry-state",
            carry, "--threads", "1", "--sample-length", "0", "--quiet", "--out", dir.to_str().unwrap(),
        ]);
        let reader = ran_log_probs(&dir, &text);
        assert_eq!(reader.len(), text.chars().count() - 1);
        let eval = per_token(&dir, &input, &[]);
        let d = max_diff(&reader, &eval);
        let windowed = per_token(&dir, &input, &["--reset-every", "20"]);
        eprintln!("{name}: eval --per-token within {d:.2e} of the reader over {} tokens; --reset-every 20 {:.2e}", reader.len(), max_diff(&reader, &windowed));
        assert!(d < 1e-4, "{name}: eval --per-token is {d} from the independent reader");
        // The reset measure is another one, which the reader does not reproduce.
        assert!(max_diff(&reader, &windowed) > 1e-2, "{name}: a reset every 20 tokens should change the scores");
    }
}
