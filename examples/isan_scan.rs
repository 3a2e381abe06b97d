//! Parallel prefix scan over time against stepping, for a random ISAN.
//!
//! ```text
//! cargo run --release --example isan_scan -- [H,H,...] [T,T,...]
//! ```
//! For each hidden size H (default 4,8,16,32,64,128,216), sequence length T (default
//! 1000,10000,100000; lengths whose composition would take too long are skipped) and thread
//! count (1, 2), prints the stepping time, the scan's time with equal chunks (one per thread) and
//! with balanced chunks (chunk 0 steps while the others compose), the measured cost ratio
//! r = compose/step per token, and the largest relative difference from stepping.

use anyhow::Result;
use rnnlens::isan_scan::{balanced_chunks, equal_chunks, measure_ratio, scan_states, step_states};
use rnnlens::isan_table::{rel_diff, AffineMaps};
use rnnlens::model::{layer_configs, CellOptions, Init, Model, ModelConfig, TokenizerConfig};
use rnnlens::rng::Rng;
use std::time::Instant;

const K: usize = 27;

fn random_isan(h: usize) -> Result<AffineMaps> {
    let config = ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: K,
        tokenizer: TokenizerConfig { level: "char".into(), normalize: "none".into() },
        embedding_size: None,
        layers: layer_configs("isan", K, &[h], None, CellOptions::default())?,
        cell_name: "isan".into(),
        input_size: None,
    };
    let model = Model::new(config)?;
    // Entries of variance 0.9/H: the products of W_x contract slowly, as a trained ISAN's do
    // (variance 1/H would sit at the edge, where f32 products over long chunks drift).
    let w = model.init_params(Init::Uniform { scale: (2.7 / h as f64).sqrt() }, &mut Rng::new(1));
    AffineMaps::from_model(&model, &w)
}

fn list(arg: Option<&String>, default: &[usize]) -> Result<Vec<usize>> {
    Ok(match arg {
        Some(s) => s.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => default.to_vec(),
    })
}

fn best_of<R>(reps: usize, mut f: impl FnMut() -> R) -> (f64, R) {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..reps {
        let t0 = Instant::now();
        let r = f();
        best = best.min(t0.elapsed().as_secs_f64());
        out = Some(r);
    }
    (best, out.unwrap())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let hs = list(args.first(), &[4, 8, 16, 32, 64, 128, 216])?;
    let ts = list(args.get(1), &[1000, 10000, 100000])?;
    println!("| H | T | threads | r = compose/step | step ms | scan equal ms | scan balanced ms | best speed-up | max rel diff |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &h in &hs {
        let maps = random_isan(h)?;
        let mut rng = Rng::new(3);
        for &t in &ts {
            // Skip what would compose more than ~2·10¹⁰ multiply-adds.
            if (t as f64) * (h as f64).powi(3) > 2e10 {
                continue;
            }
            let tokens: Vec<u32> = (0..t).map(|_| rng.below(K as u64) as u32).collect();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
                pool.install(|| {
                    let r = measure_ratio(&maps, &tokens);
                    let reps = 3;
                    let (t_step, want) = best_of(reps, || step_states(&maps, &tokens, &maps.h0));
                    let eq = equal_chunks(t, threads);
                    let bal = balanced_chunks(t, threads, r);
                    let (t_eq, a) = best_of(reps, || scan_states(&maps, &tokens, &maps.h0, &eq));
                    let (t_bal, b) = best_of(reps, || scan_states(&maps, &tokens, &maps.h0, &bal));
                    let diff = |x: &[f32]| x.chunks(h).zip(want.chunks(h)).map(|(p, q)| rel_diff(p, q)).fold(0f64, f64::max);
                    println!(
                        "| {h} | {t} | {threads} | {r:.1} | {:.2} | {:.2} | {:.2} | {:.2}× | {:.1e} |",
                        t_step * 1e3,
                        t_eq * 1e3,
                        t_bal * 1e3,
                        t_step / t_eq.min(t_bal),
                        diff(&a).max(diff(&b))
                    );
                });
            }
        }
    }
    Ok(())
}
