//! Replays the fuzz corpora kept in `fuzz/corpus/<target>/` through the same code the
//! cargo-fuzz targets run (`fuzz/src/lib.rs`, included here), so that `cargo test` checks
//! every input the fuzzer found interesting without needing cargo-fuzz or a nightly
//! toolchain. The crash reproducers kept in `fuzz/artifacts/<target>/` (bugs not fixed yet)
//! are replayed by the ignored test `replay_artifacts`: `cargo test --test fuzz_replay --
//! --ignored` shows which still fail.

#[allow(dead_code)]
#[path = "../fuzz/src/lib.rs"]
mod targets;

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Feeds every file of `fuzz/<kind>/<target>/` to the target. Returns how many files there
/// were and the ones that panicked.
fn run_dir(kind: &str, target: &str) -> (usize, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let all = files(&dir);
    let mut failed = Vec::new();
    for p in &all {
        // (a file can vanish while a fuzzer works on the same directory)
        let Ok(data) = std::fs::read(p) else { continue };
        match std::panic::catch_unwind(|| targets::run(target, &data)) {
            Ok(known) => assert!(known, "unknown fuzz target {target}"),
            Err(_) => failed.push(p.display().to_string()),
        }
    }
    (all.len(), failed)
}

/// Replays `fuzz/corpus/<target>/`; a panic names the files. Returns how many there were.
fn replay(target: &str) -> usize {
    let (n, failed) = run_dir("corpus", target);
    assert!(
        failed.is_empty(),
        "fuzz target {target} panicked on {failed:#?}"
    );
    n
}

#[test]
fn replay_checkpoint() {
    assert!(replay("checkpoint") > 0, "fuzz/corpus/checkpoint is empty");
}

#[test]
fn replay_config() {
    assert!(replay("config") > 0, "fuzz/corpus/config is empty");
}

#[test]
fn replay_idx() {
    assert!(replay("idx") > 0, "fuzz/corpus/idx is empty");
}

#[test]
fn replay_corpus() {
    assert!(replay("corpus") > 0, "fuzz/corpus/corpus is empty");
}

/// The reproducers of crashes not fixed yet (see `fuzz/README.md`); each must stop panicking
/// once its bug is fixed, and then moves to `fuzz/corpus/`.
#[test]
#[ignore = "reproducers of open bugs, see fuzz/README.md"]
fn replay_artifacts() {
    let mut failed = Vec::new();
    for t in targets::TARGETS {
        failed.extend(run_dir("artifacts", t).1);
    }
    assert!(failed.is_empty(), "still panicking: {failed:#?}");
}

#[test]
fn every_corpus_directory_is_a_target() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            targets::TARGETS.contains(&name.as_str()),
            "fuzz/corpus/{name} matches no fuzz target"
        );
    }
}

#[test]
fn checkpoint_split_round_trips() {
    let joined = targets::join_checkpoint(b"{}", &[0xFF, 0x00, 1, 0xFF, 0x00], b"a\nb\n");
    let (c, m, v) = targets::split_checkpoint(&joined);
    assert_eq!(c, b"{}");
    assert_eq!(m, &[0xFF, 0x00, 1, 0xFF, 0x00]);
    assert_eq!(v, b"a\nb\n");
    assert_eq!(
        targets::split_checkpoint(b"abc"),
        (&b"abc"[..], &[][..], &[][..])
    );
}

/// The checkpoint corpus holds real checkpoints (made by `rnnlens train`), so the fuzzer
/// starts from inputs that load and run, not only from ones rejected early.
#[test]
fn checkpoint_corpus_holds_loadable_models() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/checkpoint");
    let loaded = files(&dir)
        .iter()
        .filter(|p| {
            let Ok(data) = std::fs::read(p) else {
                return false;
            };
            let (c, m, v) = targets::split_checkpoint(&data);
            rnnlens::model::lm::Lm::from_bytes(c, m, v).is_ok()
        })
        .count();
    assert!(
        loaded >= 3,
        "only {loaded} files of {} load as a model",
        dir.display()
    );
}
