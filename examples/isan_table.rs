//! Composed-affine inference against table size: memory, speed-up and state agreement.
//!
//! ```text
//! cargo run --release --example isan_table -- CHECKPOINT [TOKENS [N,N,...]]
//! ```
//! The words are counted over the checkpoint's training split (from its trainer.json); the input
//! is the first TOKENS (default 1,000,000) tokens of that split. Prints `eval --isan-table`'s
//! report for each N (default 0,100,1000,5000).

use anyhow::{Context, Result};
use rnnlens::isan_table::{entry_bytes, eval_report, frequent_words, AffineMaps, Built, IsanTable};
use rnnlens::lm::Lm;
use rnnlens::train::TrainerState;
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
    let saved: TrainerState = rnnlens::checkpoint::load_json(&dir.join("trainer.json"))?;
    let corpus = rnnlens::data::load_corpus(&saved.config.data_spec()?)?;
    let stream = &corpus.train[..tokens.min(corpus.train.len())];
    println!("input: the first {} tokens of the training split; H = {}, K = {}", stream.len(), maps.hidden, maps.symbols);
    for h in [maps.hidden] {
        for n in [100, 1000, 5000] {
            println!("memory at H = {h}: {n} entries × {} bytes = {:.1} MB", entry_bytes(h), (n * entry_bytes(h)) as f64 / 1e6);
        }
    }
    let words = frequent_words(&lm.tok, &corpus.train, sizes.iter().copied().max().unwrap_or(0))?;
    for &n in &sizes {
        let t0 = Instant::now();
        let table = IsanTable::new(maps.clone(), words[..n.min(words.len())].to_vec())?;
        let built = Built { table, source: "the training split".into(), seconds: t0.elapsed().as_secs_f64() };
        println!("--- N = {n}");
        print!("{}", eval_report(&lm, &built, stream)?);
    }
    Ok(())
}
