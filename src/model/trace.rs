//! The states of a model over a text: every layer's output and the quantities its cell traces
//! (memory, gates, attention sums), at every position, as the model scores the text.

use super::{Model, ModelWs};
use crate::cells::Trace;

/// One layer's states over a text: `output` is what the layer passes up (`[T, width]`), `cell`
/// the cell's own traced quantities (`[T, width]` each, see `Recurrent::trace`).
pub struct LayerStates {
    pub output: Trace<f32>,
    pub cell: Vec<Trace<f32>>,
}

/// The states after each token of `tokens` (one stream), read in windows of `bptt` tokens with
/// the state carried from window to window, or started afresh at each (`carry` false), as
/// [`super::score::evaluate`] reads the same text: position `t` holds the state after token `t`.
pub fn states(model: &Model, w: &[f32], tokens: &[u32], bptt: usize, carry: bool) -> Vec<LayerStates> {
    let mut ws = ModelWs::default();
    let mut state = model.initial_state::<f32>(1);
    let mut out: Vec<LayerStates> = Vec::new();
    for window in tokens.chunks(bptt.max(1)) {
        // A caller that asked to stop (Python's Ctrl-C) discards the partial states.
        if crate::kernels::runtime::interrupted() {
            break;
        }
        if !carry {
            state = model.initial_state(1);
        }
        model.forward_layers(w, None, window, window.len(), 1, &mut state, &mut ws, None);
        for (l, cell) in model.cells.iter().enumerate() {
            let width = cell.sizes().output;
            let traced = cell.trace(&ws.cell_ws[l]);
            match out.get_mut(l) {
                Some(layer) => {
                    layer.output.values.extend_from_slice(&ws.ys[l]);
                    for (all, t) in layer.cell.iter_mut().zip(traced) {
                        all.values.extend(t.values);
                    }
                }
                None => out.push(LayerStates { output: Trace { name: "output", width, values: ws.ys[l].clone() }, cell: traced }),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::registry::{self, CellOptions};
    use crate::kernels::rng::Rng;
    use crate::model::score::evaluate;
    use crate::model::{layer_configs, Init, ModelConfig, TokenizerConfig};

    fn model(cell: &str) -> (Model, Vec<f32>) {
        let symbols = registry::reads_tokens(cell);
        // A cell that switches on the symbols reads them itself: it is the one layer.
        let hidden: &[usize] = if symbols { &[6] } else { &[6, 4] };
        let layers = layer_configs(cell, if symbols { 7 } else { 5 }, hidden, None, CellOptions::default()).unwrap();
        let config = ModelConfig {
            format: "rnnlens".into(),
            format_version: 1,
            vocab_size: 7,
            tokenizer: TokenizerConfig { level: "word".into(), normalize: "none".into(), split: None },
            embedding_size: if symbols { None } else { Some(5) },
            layers,
            cell_name: cell.into(),
            input_size: None,
        };
        let m = Model::new(config).unwrap();
        let w = m.init_params(Init::Xavier, &mut Rng::new(3));
        (m, w)
    }

    fn check_equations(cell: &str, layer: &LayerStates) {
        let get = |name: &str| layer.cell.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{cell} traces no {name}"));
        let close = |a: f32, b: f32, what: &str| assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{cell}: {what}: {a} vs {b}");
        let w = layer.output.width;
        let n = layer.output.values.len() / w;
        let content = match cell {
            "lstm" => Some("g"),
            "ran-tanh" | "ran-identity" | "lstm-simple-content" | "lstm-no-output-gate" => Some("content"),
            _ => None,
        };
        if let Some(content) = content {
            let (c, i, f, u) = (get("c"), get("i"), get("f"), get(content));
            for t in 0..n {
                for j in 0..w {
                    let prev = if t == 0 { 0.0 } else { c.values[(t - 1) * w + j] };
                    let k = t * w + j;
                    close(c.values[k], i.values[k] * u.values[k] + f.values[k] * prev, "c = i content + f c_prev");
                }
            }
            if cell == "lstm" {
                let o = get("o");
                (0..n * w).for_each(|k| close(layer.output.values[k], o.values[k] * c.values[k].tanh(), "h = o tanh c"));
            }
        }
        if cell == "gru" {
            let (z, nn, h) = (get("z"), get("n"), &layer.output.values);
            for k in 0..n * w {
                let prev = if k < w { 0.0 } else { h[k - w] };
                close(h[k], (1.0 - z.values[k]) * nn.values[k] + z.values[k] * prev, "h = (1-z) n + z h_prev");
            }
        }
        if cell == "rwa" {
            let (nn, d, h) = (get("n"), get("d"), get("h"));
            (0..n * w).for_each(|k| close(h.values[k], (nn.values[k] / d.values[k]).tanh(), "h = tanh(n/d)"));
        }
        if cell.starts_with("rda") {
            assert!(get("gamma").values.iter().all(|&g| (0.0..=1.0).contains(&g)), "{cell}: a discount outside [0, 1]");
        }
    }

    /// Every layer's states have one row per token, the output matches the forward pass read
    /// in one window, the cell's traced memory ends at the layer's final state, and the top
    /// layer's outputs give the logits `evaluate` scores.
    #[test]
    fn states_follow_the_forward_pass_window_by_window() {
        let tokens: Vec<u32> = (0..23).map(|i| (i * 5 % 7) as u32).collect();
        for cell in registry::names() {
            let (m, w) = model(cell);
            for (bptt, carry) in [(5, true), (23, true), (6, false)] {
                let st = states(&m, &w, &tokens, bptt, carry);
                assert_eq!(st.len(), m.cells.len(), "{cell}");
                for (l, layer) in st.iter().enumerate() {
                    assert_eq!(layer.output.values.len(), tokens.len() * layer.output.width, "{cell} layer {l}");
                    for t in &layer.cell {
                        assert_eq!(t.values.len(), tokens.len() * t.width, "{cell} layer {l} {}", t.name);
                        assert!(t.values.iter().all(|v| v.is_finite()), "{cell} {}", t.name);
                    }
                }
                // Carried, the window length changes nothing but float32 rounding (a product's
                // path may depend on its shape): the same as one window.
                if carry {
                    let whole = states(&m, &w, &tokens, tokens.len(), true);
                    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + x.abs().max(y.abs())));
                    for (a, b) in st.iter().zip(&whole) {
                        assert!(close(&a.output.values, &b.output.values), "{cell} bptt {bptt}");
                        for (x, y) in a.cell.iter().zip(&b.cell) {
                            assert!(close(&x.values, &y.values), "{cell} {} bptt {bptt}", x.name);
                        }
                    }
                }
                // The traced quantities are the ones the equations name: the memory's update
                // from the gates (the first window starts from zeros), the GRU's interpolation,
                // the attention's h = f_h(n/d).
                if bptt == tokens.len() {
                    check_equations(cell, &st[0]);
                }
                // The per-token log-probabilities from the states' top outputs agree with evaluate.
                let mut per = Vec::new();
                evaluate(&m, &w, &tokens, 1, bptt, carry, Some(&mut per), false);
                let top = &st[m.cells.len() - 1].output;
                let (v, k) = (m.vocab_size(), top.width);
                let (dw, db) = m.head();
                for (t, &lp) in per.iter().enumerate() {
                    let x = &top.values[t * k..(t + 1) * k];
                    let logits: Vec<f64> =
                        (0..v).map(|j| w[db.clone()][j] as f64 + (0..k).map(|i| w[dw.clone()][j * k + i] as f64 * x[i] as f64).sum::<f64>()).collect();
                    let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let lse = mx + logits.iter().map(|z| (z - mx).exp()).sum::<f64>().ln();
                    let want = logits[tokens[t + 1] as usize] - lse;
                    assert!((want - lp).abs() < 1e-4, "{cell} bptt {bptt} carry {carry} position {t}: {want} vs {lp}");
                }
            }
        }
    }
}
