//! Composed-affine inference against table size: memory, speed-up and state agreement.
//!
//! ```text
//! cargo run --release --example isan_table -- CHECKPOINT [TOKENS [N,N,...]]
//! ```
//! The words are counted over the checkpoint's training split (from its trainer.json); the input
//! is the first TOKENS (default 1,000,000) tokens of that split. Prints one row per table size N
//! (default 0,100,1000,5000): memory, composition time, jumps, the time to consume the input
//! through the table and by character stepping (same kernel), and the largest relative
//! difference of the states where the table reaches a position. (`rnnlens eval --isan-table N`
//! also checks against the model's own forward.)

use anyhow::{Context, Result};
use rnnlens::isan_fast::table::{entry_bytes, frequent_words, measure, AffineMaps, IsanTable};
use rnnlens::model::lm::Lm;
use rnnlens::training::TrainerState;
use std::path::PathBuf;
use std::time::Instant;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().context("usage: isan_table CHECKPOINT [TOKENS [N,N,...]]")?);
    let tokens: usize = args.get(1).map_or(Ok(1_000_000), |s| s.parse())?;
    let sizes: Vec<usize> = match args.get(2) {
        Some(s) => s.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => vec![0, 100, 1000, 5000],
    };
    let lm = Lm::load(&dir)?;
    let maps = AffineMaps::from_lm(&lm)?;
    let saved: TrainerState = rnnlens::data::checkpoint::load_json(&dir.join("trainer.json"))?;
    let corpus = rnnlens::data::load_corpus(&saved.config.data_spec()?)?;
    let stream = &corpus.train[..tokens.min(corpus.train.len())];
    println!("input: the first {} tokens of the training split; H = {}, K = {}", stream.len(), maps.hidden, maps.symbols);
    for h in [maps.hidden] {
        for n in [100, 1000, 5000] {
            println!("memory at H = {h}: {n} entries × {} bytes = {:.1} MB", entry_bytes(h), (n * entry_bytes(h)) as f64 / 1e6);
        }
    }
    let words = frequent_words(&lm.tok, &corpus.train, sizes.iter().copied().max().unwrap_or(0))?;
    println!("| N | table MB | compose s | jumps | tokens jumped | updates | table s | stepping s | speed-up | max rel diff |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for &n in &sizes {
        let t0 = Instant::now();
        let table = IsanTable::new(maps.clone(), words[..n.min(words.len())].to_vec())?;
        let build = t0.elapsed().as_secs_f64();
        let m = measure(&table, stream, true);
        let c = m.consumed;
        println!(
            "| {n} | {:.1} | {build:.2} | {} | {} ({:.1}%) | {} | {:.3} | {:.3} | {:.2}× | {:.1e} |",
            (table.len() * table.entry_bytes()) as f64 / 1e6,
            c.jumps,
            c.jumped_tokens,
            100.0 * c.jumped_tokens as f64 / stream.len() as f64,
            c.jumps + c.steps,
            m.t_table,
            m.t_step,
            m.t_step / m.t_table,
            m.max_rel
        );
    }
    Ok(())
}
