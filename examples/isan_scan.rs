//! Parallel prefix scan over time against stepping, for a random ISAN.
//!
//! ```text
//! cargo run --release --example isan_scan -- [H,H,...] [T,T,...] [REPS]
//! ```
//! For each hidden size H (default 4,8,16,32,64,128,216) and sequence length T (default
//! 1000,10000,100000; lengths whose composition would take too long are skipped), prints the
//! measured cost ratio r = compose/step per token, the stepping time, and the scan's time on one
//! and on two threads with two schedules made for two threads: equal (3 equal chunks: chunk 0
//! steps while chunk 1 composes, then chunks 1 and 2 step) and balanced (chunk 0 `r` times
//! longer than chunks 1 and 2), with the balanced schedule's ideal speed-up `(r+2)/(r+1)` and the
//! largest relative difference from stepping.

use anyhow::Result;
use rnnlens::isan_fast::scan::{balanced_chunks, equal_chunks, measure_ratio, scan_states, step_states};
use rnnlens::isan_fast::table::{rel_diff, AffineMaps};
use rnnlens::model::{layer_configs, Init, Model, ModelConfig, TokenizerConfig};
use rnnlens::cells::registry::CellOptions;
use rnnlens::kernels::rng::Rng;
use std::time::Instant;

const K: usize = 27;

fn random_isan(h: usize) -> Result<AffineMaps> {
    let config = ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: K,
        tokenizer: TokenizerConfig { level: "char".into(), normalize: "none".into(), split: None },
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
    let reps: usize = args.get(2).map_or(Ok(7), |s| s.parse())?;
    let pools = [1, 2].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().expect("thread pool"));
    println!("Schedules made for 2 threads; each time is the best of {reps}. Stepping is single-threaded.");
    println!("| H | T | r = compose/step | step ms | equal (3 chunks) 1 thr / 2 thr ms | balanced 1 thr / 2 thr ms | balanced model (r+2)/(r+1) | speed-up 2 thr (best schedule) | max rel diff |");
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
            let r = pools[1].install(|| (0..3).map(|_| measure_ratio(&maps, &tokens)).fold(f64::INFINITY, f64::min));
            let (t_step, want) = best_of(reps, || step_states(&maps, &tokens, &maps.h0));
            let schedules = [equal_chunks(t, 3), balanced_chunks(t, 2, r)];
            let mut times = [[0.0; 2]; 2];
            let mut diff = 0f64;
            for (si, b) in schedules.iter().enumerate() {
                for (pi, pool) in pools.iter().enumerate() {
                    let (secs, got) = pool.install(|| best_of(reps, || scan_states(&maps, &tokens, &maps.h0, b)));
                    times[si][pi] = secs;
                    diff = got.chunks(h).zip(want.chunks(h)).map(|(p, q)| rel_diff(p, q)).fold(diff, f64::max);
                }
            }
            let ms = |x: f64| x * 1e3;
            println!(
                "| {h} | {t} | {r:.1} | {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2}× | {:.2}× | {diff:.1e} |",
                ms(t_step),
                ms(times[0][0]),
                ms(times[0][1]),
                ms(times[1][0]),
                ms(times[1][1]),
                (r + 2.0) / (r + 1.0),
                t_step / times[0][1].min(times[1][1]),
            );
        }
    }
    Ok(())
}
