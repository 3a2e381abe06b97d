//! The ISAN analysis said: the text summary, the HTML section with its figures, and the data
//! files.

use super::*;


// -------------------------------------------------------------------------------------------
// Output
// -------------------------------------------------------------------------------------------

pub(crate) fn sym(lm: &Lm, x: u32) -> String {
    let s = lm.tok.decode(&[x]);
    match s.as_str() {
        " " => "␣".into(),
        "\n" => "⏎".into(),
        "\t" => "⇥".into(),
        _ => s,
    }
}


pub(crate) fn bits(nats: f64) -> f64 {
    nats / std::f64::consts::LN_2
}

pub(crate) fn fmt_top(lm: &Lm, t: &[(u32, f64)]) -> String {
    t.iter()
        .map(|&(x, pr)| format!("'{}' {:.3}", sym(lm, x), pr))
        .collect::<Vec<_>>()
        .join(", ")
}

impl IsanAnalysis {
    /// The largest relative difference between the decomposed logits and the direct forward.
    pub fn identity_error(&self) -> f64 {
        let mut e = 0.0f64;
        for (a, b) in self.logits.iter().zip(&self.forward_logits) {
            let s = b.iter().fold(1e-12f64, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(b) {
                e = e.max((x - y).abs() / s);
            }
        }
        e
    }

    /// The analyses in a few lines each, for the terminal and `summary.txt`.
    pub fn summary(&self, lm: &Lm) -> String {
        let mut o = String::new();
        self.summary_head(lm, &mut o);
        self.summary_words(lm, &mut o);
        self.summary_history(&mut o);
        self.summary_readout(&mut o);
        o
    }

    /// The model and the window, the identity's error and the top predictions at the end.
    fn summary_head(&self, lm: &Lm, o: &mut String) {
        let last = self.window.len() - 1;
        let _ = writeln!(
            o,
            "ISAN analyses: H = {}, V = {}{}; text of {} tokens, window of the last {}",
            self.hidden,
            self.vocab,
            if self.biases { "" } else { " (no biases)" },
            self.n_tokens,
            self.window.len()
        );
        let _ = writeln!(
            o,
            "  logits = b_ro + Σ κ: largest relative error {:.1e}",
            self.identity_error()
        );
        let p = softmax(&self.logits[last]);
        let _ = writeln!(
            o,
            "  after \"{}\": top {}",
            lm.tok.decode(&self.window).replace('\n', "⏎"),
            fmt_top(lm, &top_n(&p, self.options.top))
        );
    }

    /// The words that weigh most at the end, their embedding, and removing each of them.
    fn summary_words(&self, lm: &Lm, o: &mut String) {
        let mut ranked: Vec<usize> = (0..self.spans.len()).collect();
        ranked.sort_by(|&a, &b| norm(&self.word_kappa[b]).total_cmp(&norm(&self.word_kappa[a])));
        let words: Vec<String> = ranked
            .iter()
            .take(6)
            .map(|&i| {
                format!(
                    "'{}' {:.2}",
                    self.spans[i].text.replace(' ', "␣").replace('\n', "⏎"),
                    norm(&self.word_kappa[i])
                )
            })
            .collect();
        let _ = writeln!(o, "  ‖κ_word‖ at the last position: {}", words.join(", "));
        if self.word_embedding.is_empty() {
            let _ = writeln!(
                o,
                "  κ_word embedding: skipped (fewer than 3 words occur at least twice)"
            );
        } else {
            let e = &self.word_embedding;
            let mut pairs: Vec<(f64, usize, usize)> = Vec::new();
            for i in 0..e.len() {
                for j in i + 1..e.len() {
                    pairs.push(((e[i].2 - e[j].2).hypot(e[i].3 - e[j].3), i, j));
                }
            }
            pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let show = |w: &str| w.replace(' ', "␣").replace('\n', "⏎");
            let near: Vec<String> = pairs
                .iter()
                .take(2)
                .map(|&(_, i, j)| format!("{}–{}", show(&e[i].0), show(&e[j].0)))
                .collect();
            let _ = writeln!(
                o,
                "  κ_word embedding of {} frequent words: PC1 {:.1}%, PC2 {:.1}%; nearest pairs: {}",
                e.len(),
                100.0 * self.word_embedding_variance[0],
                100.0 * self.word_embedding_variance[1],
                near.join(", ")
            );
        }
        for cf in self.counterfactuals.iter().rev().take(4) {
            let _ = writeln!(
                o,
                "  without '{}': top {} (the original top keeps p = {:.3})",
                self.spans[cf.span].text,
                fmt_top(lm, &cf.top),
                cf.p_original_top
            );
        }
    }

    /// How κ decays with the lag, and what keeping the k most recent contributions costs.
    fn summary_history(&self, o: &mut String) {
        let dec: Vec<String> = self
            .decay
            .iter()
            .filter(|d| [0, 1, 2, 5, 10, 20, 40].contains(&d.0))
            .map(|d| format!("{}:{:.3}", d.0, d.1))
            .collect();
        let _ = writeln!(
            o,
            "  E‖κ‖ by lag (over {} tokens): {}",
            self.stat_tokens,
            dec.join(" ")
        );
        let hist: Vec<String> = self
            .history_ce
            .iter()
            .enumerate()
            .filter(|(i, d)| {
                [0, 1, 2, 3, 5, 10, 20].contains(&d.0) || *i + 1 == self.history_ce.len()
            })
            .map(|(_, d)| d)
            .map(|d| format!("{}:{:.2}", d.0, bits(d.1)))
            .collect();
        let _ = writeln!(
            o,
            "  bits/token keeping k contributions: {}  all: {:.3}",
            hist.join(" "),
            bits(self.full_ce)
        );
        if !self.by_word_pos.is_empty() {
            let w: Vec<String> = self
                .by_word_pos
                .iter()
                .take(8)
                .map(|w| {
                    format!(
                        "{}:{:.2}/{:.2}/{:.2}",
                        w.pos,
                        bits(w.all),
                        bits(w.separators_only),
                        bits(w.without_separators)
                    )
                })
                .collect();
            let _ = writeln!(
                o,
                "  median bits by position in word (all/separators only/without): {}",
                w.join(" ")
            );
        }
    }

    /// The readout's biases against the text's unigram and bigram distributions.
    fn summary_readout(&self, o: &mut String) {
        let _ = writeln!(o, "  unigram and bigram counted on {} ({} tokens)", self.distributions_of, self.distribution_tokens);
        let _ = writeln!(
            o,
            "  softmax(b_ro) vs unigram: r = {:.3} (log r = {:.3})",
            self.unigram_corr, self.unigram_log_corr
        );
        if !self.bigram.is_empty() {
            let (mut a, mut b, mut wsum) = (0.0, 0.0, 0.0);
            for f in self
                .bigram
                .iter()
                .filter(|f| f.corr_model.is_finite() && f.corr_unigram.is_finite())
            {
                let c = f.count as f64;
                a += c * f.corr_model;
                b += c * f.corr_unigram;
                wsum += c;
            }
            if wsum > 0.0 {
                let _ = writeln!(
                    o,
                    "  softmax(W_ro b_x + b_ro) vs P(·|x): mean r = {:.3} (unigram vs P(·|x): {:.3})",
                    a / wsum,
                    b / wsum
                );
            }
        }
        if self.biases {
            let _ = writeln!(
                o,
                "  readout basis (rank {}): corr with ln P(x) of ‖b_x‖ {:.3}, ‖b_∥‖ {:.3}, ‖b_⊥‖ {:.3}",
                self.readout_rank, self.bias_corr[0], self.bias_corr[1], self.bias_corr[2]
            );
        }
    }

    /// The report's ISAN section: the figures of every analysis.
    pub fn html(&self, lm: &Lm) -> String {
        let mut o = String::new();
        // The last position's predictions and the window's symbols, which both parts read.
        let p = softmax(&self.logits[self.window.len() - 1]);
        let names: Vec<String> = self.window.iter().map(|&x| sym(lm, x)).collect();
        self.html_window(lm, &p, &names, &mut o);
        self.html_words(lm, &p, &names, &mut o);
        self.html_history(&mut o);
        self.html_readout(lm, &mut o);
        self.html_embedding(&mut o);
        o.push_str("</section>\n");
        o
    }

    /// The section's head, the κ of the last position stacked with its softmax, ‖κ_s^t‖.
    fn html_window(&self, lm: &Lm, p: &[f64], names: &[String], o: &mut String) {
        let last = self.window.len() - 1;
        o.push_str("<section class=\"isan\">\n<h2>ISAN: contributions κ</h2>\n");
        let _ = writeln!(
            o,
            "<p>The logits are exactly <code>b_ro + Σ κ</code> (largest relative error {:.1e}). \
             Window: <code>{}</code>.</p>",
            self.identity_error(),
            esc(&lm.tok.decode(&self.window))
        );
        // Stacked κ of the final position with its softmax panel.
        let mut rows: Vec<u32> = top_n(p, 24).into_iter().map(|t| t.0).collect();
        rows.sort();
        let mut cols: Vec<(String, Vec<f64>)> = vec![("b_ro".into(), self.b_ro.clone())];
        cols.push((
            if self.window_start == 0 {
                "h0".into()
            } else {
                "…".into()
            },
            self.kappa_before[last].clone(),
        ));
        for (s, &x) in self.window.iter().enumerate() {
            cols.push((sym(lm, x), self.kappa[last][s].clone()));
        }
        cols.push(("Σ".into(), self.logits[last].clone()));
        let _ = writeln!(o, "<h3>κ_s^t at the last position, and the softmax</h3>");
        let _ = writeln!(
            o,
            "<p>Rows: the {} most probable next symbols of the {} (in symbol order; every symbol's κ is in the CSV files); \
             columns: the readout bias, what precedes the window, each symbol of the window, and their sum (the logit).</p>",
            rows.len(),
            self.vocab
        );
        o.push_str(&heatmap_with_softmax(lm, &cols, &rows, p));
        // ‖κ_s^t‖ over the window.
        let m: Vec<Vec<f64>> = (0..self.window.len())
            .map(|t| {
                (0..self.window.len())
                    .map(|s| {
                        if s <= t {
                            norm(&self.kappa[t][s])
                        } else {
                            f64::NAN
                        }
                    })
                    .collect()
            })
            .collect();
        let _ = writeln!(o, "<h3>‖κ_s^t‖ (row t, column s)</h3>");
        o.push_str(&norm_matrix(names, names, &m, None));
    }

    /// ‖κ_word^t‖ over the window, and the predictions without each word's contribution.
    fn html_words(&self, lm: &Lm, p: &[f64], names: &[String], o: &mut String) {
        let wn: Vec<String> = self
            .spans
            .iter()
            .map(|s| s.text.replace(' ', "␣").replace('\n', "⏎"))
            .collect();
        let _ = writeln!(o, "<h3>‖κ_word^t‖ (row t, column word)</h3>");
        o.push_str(&norm_matrix(names, &wn, &self.word_norms, None));
        let _ = writeln!(o, "<h3>Removing a word's contribution</h3>\n<table><tr><th>without</th><th>top predictions</th><th>p(original top)</th></tr>");
        let _ = writeln!(
            o,
            "<tr><td>(nothing)</td><td>{}</td><td>{:.3}</td></tr>",
            esc(&fmt_top(lm, &top_n(p, self.options.top))),
            top_n(p, 1)[0].1
        );
        for cf in &self.counterfactuals {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{:.3}</td></tr>",
                esc(&self.spans[cf.span].text),
                esc(&fmt_top(lm, &cf.top)),
                cf.p_original_top
            );
        }
        o.push_str("</table>\n");
    }

    /// E‖κ‖ against the lag, the cross-entropy keeping k contributions, by position in a word.
    fn html_history(&self, o: &mut String) {
        // Decay and history.
        let _ = writeln!(
            o,
            "<h3>E‖κ_s^t‖ against t − s ({} tokens)</h3>",
            self.stat_tokens
        );
        let pts: Vec<(f64, f64)> = self
            .decay
            .iter()
            .filter(|d| d.1 > 0.0)
            .map(|d| (d.0 as f64, d.1.log10()))
            .collect();
        o.push_str(&line_plot(&[("E‖κ‖", &pts, "#c33")], "t − s", "log10 E‖κ‖"));
        let _ = writeln!(
            o,
            "<h3>Cross-entropy keeping the k most recent contributions</h3>"
        );
        let pts: Vec<(f64, f64)> = self
            .history_ce
            .iter()
            .map(|d| (d.0 as f64, bits(d.1)))
            .collect();
        let full = vec![
            (0.0, bits(self.full_ce)),
            (
                self.history_ce.last().map_or(1.0, |d| d.0 as f64),
                bits(self.full_ce),
            ),
        ];
        o.push_str(&line_plot(
            &[("kept k", &pts, "#36c"), ("all", &full, "#999")],
            "k",
            "bits/token",
        ));
        if !self.by_word_pos.is_empty() {
            let _ = writeln!(o, "<h3>Median cross-entropy by position in the word</h3>");
            let a: Vec<(f64, f64)> = self
                .by_word_pos
                .iter()
                .map(|w| (w.pos as f64, bits(w.all)))
                .collect();
            let b: Vec<(f64, f64)> = self
                .by_word_pos
                .iter()
                .map(|w| (w.pos as f64, bits(w.separators_only)))
                .collect();
            let c: Vec<(f64, f64)> = self
                .by_word_pos
                .iter()
                .map(|w| (w.pos as f64, bits(w.without_separators)))
                .collect();
            o.push_str(&line_plot(
                &[
                    ("all κ", &a, "#c33"),
                    ("separators' κ only", &b, "#3a3"),
                    ("without separators' κ", &c, "#36c"),
                ],
                "position in word",
                "bits",
            ));
        }
    }

    /// The readout's biases: against the unigram distribution, their split, their distances,
    /// and each symbol's bias against its bigram distribution.
    fn html_readout(&self, lm: &Lm, o: &mut String) {
        let _ = writeln!(
            o,
            "<h3>softmax(b_ro) against the unigram distribution of {} (r = {:.3})</h3>",
            esc(&self.distributions_of),
            self.unigram_corr
        );
        let pts: Vec<(f64, f64)> = self
            .unigram
            .iter()
            .zip(&self.softmax_b_ro)
            .map(|(&a, &b)| (a, b))
            .collect();
        o.push_str(&scatter(&pts, "P(x)", "softmax(b_ro)"));
        if self.biases && !self.bias_split.is_empty() {
            let _ = writeln!(
                o,
                "<h3>Bias norms against ln P(x): ‖b‖ r = {:.3}, ‖b_∥‖ r = {:.3}, ‖b_⊥‖ r = {:.3}</h3>",
                self.bias_corr[0], self.bias_corr[1], self.bias_corr[2]
            );
            let seen: Vec<&BiasSplit> = self
                .bias_split
                .iter()
                .filter(|b| b.log_unigram.is_finite())
                .collect();
            for (name, f) in [("‖b_∥‖", 1usize), ("‖b_⊥‖", 2)] {
                let pts: Vec<(f64, f64)> = seen
                    .iter()
                    .map(|b| {
                        (
                            b.log_unigram,
                            if f == 1 { b.norm_parallel } else { b.norm_perp },
                        )
                    })
                    .collect();
                o.push_str(&scatter(&pts, "ln P(x)", name));
            }
        }
        if !self.bias_cosine[0].is_empty() {
            let names: Vec<String> = (0..self.bias_cosine[0].len() as u32)
                .map(|x| sym(lm, x))
                .collect();
            for (title, m) in ["b_x", "b_∥ (readout space)", "b_⊥ (orthogonal complement)"]
                .iter()
                .zip(&self.bias_cosine)
            {
                let _ = writeln!(
                    o,
                    "<h3>Cosine distance between the biases: {title} (white 0, black 2)</h3>"
                );
                o.push_str(&norm_matrix(&names, &names, m, Some(2.0)));
            }
        }
        if !self.bigram.is_empty() {
            let _ = writeln!(
                o,
                "<h3>Per symbol x: corr(softmax(W_ro b_x + b_ro), P(·|x)) (y) against corr(P(·), P(·|x)) (x)</h3>"
            );
            let pts: Vec<(f64, f64)> = self
                .bigram
                .iter()
                .map(|b| (b.corr_unigram, b.corr_model))
                .collect();
            o.push_str(&scatter(&pts, "unigram vs bigram r", "model vs bigram r"));
        }
    }

    /// The frequent words placed by their mean κ_word.
    fn html_embedding(&self, o: &mut String) {
        if !self.word_embedding.is_empty() {
            let _ = writeln!(
                o,
                "<h3>κ_word embedding of the {} most frequent words (mean κ_word after the word, PCA: PC1 {:.1}%, PC2 {:.1}% of the variance)</h3>",
                self.word_embedding.len(),
                100.0 * self.word_embedding_variance[0],
                100.0 * self.word_embedding_variance[1]
            );
            o.push_str(&labelled_scatter(&self.word_embedding, "PC1", "PC2"));
        }
    }

    /// The analyses' numbers as CSV and JSON files in `dir` (beside the report's page).
    pub fn write_data(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        self.write_kappa_last(dir)?;
        self.write_statistics(dir)?;
        self.write_readout(dir)?;
        self.write_summary(dir)?;
        self.write_affine(dir)
    }

    /// `isan_kappa_last.csv`: κ of the final position, one row per source.
    fn write_kappa_last(&self, dir: &Path) -> Result<()> {
        let last = self.window.len() - 1;
        // κ of the final position: one row per source.
        let mut s = String::from("source,position");
        for j in 0..self.vocab {
            let _ = write!(s, ",v{j}");
        }
        s.push('\n');
        let row = |s: &mut String, name: &str, pos: &str, k: &[f64]| {
            let _ = write!(s, "{name},{pos}");
            for x in k {
                let _ = write!(s, ",{x:e}");
            }
            s.push('\n');
        };
        row(&mut s, "b_ro", "", &self.b_ro);
        row(&mut s, "before", "", &self.kappa_before[last]);
        for (i, &x) in self.window.iter().enumerate() {
            row(
                &mut s,
                &format!("tok{x}"),
                &(self.window_start + i).to_string(),
                &self.kappa[last][i],
            );
        }
        row(&mut s, "logits", "", &self.logits[last]);
        write_atomic(&dir.join("isan_kappa_last.csv"), s.as_bytes())?;
        Ok(())
    }

    /// The decay of κ with the lag, the cross-entropy keeping k contributions, by position in
    /// a word.
    fn write_statistics(&self, dir: &Path) -> Result<()> {
        let mut s = String::from("lag,mean_norm,pairs\n");
        for d in &self.decay {
            let _ = writeln!(s, "{},{:e},{}", d.0, d.1, d.2);
        }
        write_atomic(&dir.join("isan_decay.csv"), s.as_bytes())?;
        let mut s = String::from("k,ce_nats\n");
        for d in &self.history_ce {
            let _ = writeln!(s, "{},{:e}", d.0, d.1);
        }
        let _ = writeln!(s, "all,{:e}", self.full_ce);
        write_atomic(&dir.join("isan_history_ce.csv"), s.as_bytes())?;
        let mut s =
            String::from("pos,count,median_all,median_separators_only,median_without_separators\n");
        for w in &self.by_word_pos {
            let _ = writeln!(
                s,
                "{},{},{:e},{:e},{:e}",
                w.pos, w.count, w.all, w.separators_only, w.without_separators
            );
        }
        write_atomic(&dir.join("isan_word_position_ce.csv"), s.as_bytes())?;
        Ok(())
    }

    /// The readout's biases against the unigram distribution, their cosine distances, and the
    /// words' embedding.
    fn write_readout(&self, dir: &Path) -> Result<()> {
        let mut s = String::from("symbol,unigram,softmax_b_ro,norm_b,norm_parallel,norm_perp\n");
        for j in 0..self.vocab {
            let b = self.bias_split.get(j);
            let _ = writeln!(
                s,
                "{j},{:e},{:e},{},{},{}",
                self.unigram[j],
                self.softmax_b_ro[j],
                b.map_or(String::new(), |b| format!("{:e}", b.norm)),
                b.map_or(String::new(), |b| format!("{:e}", b.norm_parallel)),
                b.map_or(String::new(), |b| format!("{:e}", b.norm_perp))
            );
        }
        write_atomic(&dir.join("isan_unigram_bias.csv"), s.as_bytes())?;
        if !self.word_embedding.is_empty() {
            let mut s = String::from("word,count,pc1,pc2\n");
            for (w, c, x, y) in &self.word_embedding {
                let w = if w.contains([',', '"', '\n', '\r']) {
                    format!("\"{}\"", w.replace('"', "\"\""))
                } else {
                    w.clone()
                };
                let _ = writeln!(s, "{w},{c},{x:e},{y:e}");
            }
            write_atomic(&dir.join("isan_word_embedding.csv"), s.as_bytes())?;
        }
        let names = ["b", "b_parallel", "b_perp"];
        for (name, m) in names.iter().zip(&self.bias_cosine) {
            if m.is_empty() {
                continue;
            }
            let mut s = String::new();
            for r in m {
                let cells: Vec<String> = r.iter().map(|x| format!("{x:e}")).collect();
                let _ = writeln!(s, "{}", cells.join(","));
            }
            write_atomic(&dir.join(format!("isan_cosine_{name}.csv")), s.as_bytes())?;
        }
        Ok(())
    }

    /// `isan_summary.json`: the spans, the words' κ, the counterfactuals, the correlations.
    fn write_summary(&self, dir: &Path) -> Result<()> {
        let summary = json!({
            "window_start": self.window_start,
            "window": self.window,
            "identity_error": self.identity_error(),
            "spans": self.spans.iter().map(|s| json!({"start": s.start, "end": s.end, "text": s.text, "separator": s.separator})).collect::<Vec<_>>(),
            "word_kappa_last": self.word_kappa,
            "counterfactuals": self.counterfactuals.iter().map(|c| json!({"span": c.span, "top": c.top, "p_original_top": c.p_original_top, "logits": c.logits})).collect::<Vec<_>>(),
            "distributions_of": self.distributions_of,
            "distribution_tokens": self.distribution_tokens,
            "unigram_corr": self.unigram_corr,
            "unigram_log_corr": self.unigram_log_corr,
            "bigram": self.bigram.iter().map(|b| json!({"symbol": b.symbol, "count": b.count, "corr_model": b.corr_model, "corr_unigram": b.corr_unigram})).collect::<Vec<_>>(),
            "readout_rank": self.readout_rank,
            "bias_corr": {"norm": self.bias_corr[0], "parallel": self.bias_corr[1], "perp": self.bias_corr[2]},
        });
        write_atomic(
            &dir.join("isan_summary.json"),
            serde_json::to_string_pretty(&summary)?.as_bytes(),
        )?;
        Ok(())
    }

    /// `isan_affine_X.json`: each expanded symbol's affine map, in the readout's basis too.
    fn write_affine(&self, dir: &Path) -> Result<()> {
        for (x, m) in &self.expansions {
            let rd = self
                .readout_dynamics
                .iter()
                .find(|r| r.0 == *x)
                .map(|r| &r.1);
            let j = json!({"symbol": x, "W_prime": m, "readout_basis": self.readout_basis, "W_prime_in_readout_basis": rd});
            write_atomic(
                &dir.join(format!("isan_affine_{x}.json")),
                serde_json::to_string(&j)?.as_bytes(),
            )?;
        }
        Ok(())
    }
}

/// Columns = sources (each a V-vector), rows = the chosen symbols; then the softmax bars.
pub(crate) fn heatmap_with_softmax(lm: &Lm, cols: &[(String, Vec<f64>)], rows: &[u32], p: &[f64]) -> String {
    // Cells and type large enough to read at the report's width with its 48-token window (51
    // columns: 816 px, the bars beside them).
    let (cw, rh, left) = (16.0, 16.0, 36.0);
    let bar = 120.0;
    let names: Vec<String> = cols.iter().map(|(n, _)| n.clone()).collect();
    let (labels, rise) = column_labels(&names, left, cw, 20.0);
    let top = 20.0 + rise;
    let width = left + cw * cols.len() as f64 + 20.0 + bar + 60.0;
    let height = top + rh * rows.len() as f64 + 56.0;
    let m = cols[1..cols.len() - 1]
        .iter()
        .flat_map(|c| rows.iter().map(move |&r| c.1[r as usize].abs()))
        .fold(0.0, f64::max);
    let mut o = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-size=\"12\" font-family=\"monospace\">\n");
    o.push_str(&labels);
    let pm = rows.iter().map(|&r| p[r as usize]).fold(1e-12, f64::max);
    for (ri, &r) in rows.iter().enumerate() {
        let y = top + rh * ri as f64;
        let _ = writeln!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 4.0,
            y + rh - 2.0,
            esc(&sym(lm, r))
        );
        for (c, (name, v)) in cols.iter().enumerate() {
            let x = left + cw * c as f64;
            let _ = writeln!(
                o,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{cw}\" height=\"{rh}\" fill=\"{}\"><title>{} → {}: {:.4}</title></rect>",
                diverging(v[r as usize], m),
                esc(name),
                esc(&sym(lm, r)),
                v[r as usize]
            );
        }
        let bx = left + cw * cols.len() as f64 + 20.0;
        let w = bar * p[r as usize] / pm;
        let _ = writeln!(
            o,
            "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"#555\"/><text x=\"{:.1}\" y=\"{:.1}\">{:.3}</text>",
            y + 1.0,
            rh - 2.0,
            bx + w + 3.0,
            y + rh - 2.0,
            p[r as usize]
        );
    }
    // Colour scale of the contributions (b_ro and Σ share it; values beyond it saturate).
    let sy = top + rh * rows.len() as f64 + 14.0;
    for k in 0..11 {
        let v = m * (k as f64 - 5.0) / 5.0;
        let _ = writeln!(o, "<rect x=\"{:.1}\" y=\"{sy:.1}\" width=\"{cw}\" height=\"12\" fill=\"{}\" stroke=\"#ccc\"/>", left + cw * k as f64, diverging(v, m));
    }
    let _ = writeln!(o, "<text x=\"{left:.1}\" y=\"{:.1}\">{}</text>", sy + 26.0, short_num(-m));
    let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", left + cw * 11.0, sy + 26.0, short_num(m));
    let _ = writeln!(o, "<text x=\"{:.1}\" y=\"{:.1}\">κ on the logit (blue lowers it, red raises it)</text>", left + cw * 11.0 + 8.0, sy + 11.0);
    o.push_str("</svg>\n");
    o
}
