//! Every cell trains: a few hundred steps at character level on the embedded Brown corpus
//! lower the validation loss well below the untrained model's, and `eval --per-token` works
//! on the result. The state is reset every window: carried over thousands of steps, the
//! unbounded linear recurrences (linear with a tanh readout, the identity RAN) blow up within a
//! few hundred Adam steps — a property of those models, not of training.

use std::process::Command;

fn rnnlens(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).output().expect("run rnnlens");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rnnlens {args:?} failed:\n{err}");
    String::from_utf8_lossy(&out.stdout).to_string() + &err
}

/// Bits per character printed on the `validation:` line.
fn valid_bpc(out: &str) -> f64 {
    let line = out.lines().find(|l| l.starts_with("validation:")).unwrap_or_else(|| panic!("no validation line in\n{out}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn every_cell_learns_characters_and_scores_per_token() {
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("eval.txt");
    std::fs::write(&text, "the jury said it did find that many of the voters were not there .\n").unwrap();
    // Every named cell except the generic `rda`, whose presets are listed.
    let cells = rnnlens::cells::registry::names().filter(|&c| c != "rda");
    for cell in cells {
        let out = tmp.path().join(cell);
        let o = out.to_str().unwrap();
        let common = [
            "train", "--cell", cell, "--level", "char", "--embedding-size", "16", "--hidden-size", "32", "--batch-size",
            "16", "--bptt", "40", "--lr", "0.005", "--dropout", "0", "--threads", "1", "--sample-length", "0", "--carry-state", "false", "--out", o,
        ];
        let mut untrained = common.to_vec();
        untrained.extend(["--max-steps", "0"]);
        let before = valid_bpc(&rnnlens(&untrained));
        let mut trained = common.to_vec();
        trained.extend(["--max-steps", "250", "--overwrite"]);
        let after = valid_bpc(&rnnlens(&trained));
        assert!(after < before - 1.0, "{cell}: valid {after} bits/char after 250 steps, {before} before");
        // Uniform over the ~85 characters is 6.4 bits; unigram statistics alone give about 4.4.
        assert!(after < 5.0, "{cell}: valid {after} bits/char after 250 steps");

        let lp = tmp.path().join(format!("{cell}.lp"));
        rnnlens(&["eval", "--checkpoint", o, "--input", text.to_str().unwrap(), "--per-token", lp.to_str().unwrap()]);
        let lps: Vec<f64> = std::fs::read_to_string(&lp).unwrap().lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(lps.len(), std::fs::metadata(&text).unwrap().len() as usize - 1, "{cell}");
        assert!(lps.iter().all(|x| x.is_finite() && *x <= 0.0), "{cell}");
    }
}
