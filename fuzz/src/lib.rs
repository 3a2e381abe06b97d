//! What each fuzz target does with one input, shared by the libFuzzer binaries in
//! `fuzz_targets/` and by the corpus replay test of the main crate (`tests/fuzz_replay.rs`,
//! which includes this file with `#[path]`, so it must only use std and the main crate's
//! own dependencies: `rnnlens`, `serde_json`, `toml`).
//!
//! Every function takes arbitrary bytes and must never panic: errors from the library are
//! fine. A few `assert!`s check round trips the library promises (a vocabulary read back
//! from its own encoding is the same, a tokenizer fitted on a text decodes its encoding to
//! that text, …); a failing one is a bug like a panic.

use std::path::PathBuf;

use rnnlens::data::checkpoint;
use rnnlens::data::{self, DataSpec, Format, Level, Tokenizer};

/// The names of the targets, as the directories under `fuzz/corpus/` are called.
pub const TARGETS: [&str; 4] = ["checkpoint", "config", "idx", "corpus"];

/// Runs target `name` on `data`. Returns false for an unknown name.
pub fn run(name: &str, data: &[u8]) -> bool {
    match name {
        "checkpoint" => checkpoint(data),
        "config" => config(data),
        "idx" => idx(data),
        "corpus" => corpus(data),
        _ => return false,
    }
    true
}

// ---------------------------------------------------------------------------------------------
// checkpoint
// ---------------------------------------------------------------------------------------------

/// Separates the three files of a checkpoint input: `config.json` SEP `model.safetensors` SEP
/// `vocab.txt`.
pub const SEP: [u8; 2] = [0xFF, 0x00];

/// Splits an input into (config, model, vocab) at the first and the last [`SEP`]. JSON and
/// `vocab.txt` are UTF-8 text and never hold a 0xFF byte, while the safetensors bytes in the
/// middle may hold anything. With fewer than two separators the missing parts are empty.
pub fn split_checkpoint(data: &[u8]) -> (&[u8], &[u8], &[u8]) {
    let find = |d: &[u8]| d.windows(2).position(|w| w == SEP);
    let rfind = |d: &[u8]| d.windows(2).rposition(|w| w == SEP);
    let Some(a) = find(data) else {
        return (data, &[], &[]);
    };
    let config = &data[..a];
    let rest = &data[a + 2..];
    match rfind(rest) {
        Some(b) => (config, &rest[..b], &rest[b + 2..]),
        None => (config, rest, &[]),
    }
}

/// Joins three checkpoint files into one input of the `checkpoint` target.
pub fn join_checkpoint(config: &[u8], model: &[u8], vocab: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(config.len() + model.len() + vocab.len() + 4);
    v.extend_from_slice(config);
    v.extend_from_slice(&SEP);
    v.extend_from_slice(model);
    v.extend_from_slice(&SEP);
    v.extend_from_slice(vocab);
    v
}

pub fn checkpoint(data: &[u8]) {
    let (config, model, vocab) = split_checkpoint(data);
    if let Ok(lm) = rnnlens::model::lm::Lm::from_bytes(config, model, vocab) {
        // a model that loads can run: feed it its start token and draw two more
        let _ = rnnlens::eval::sample::sample(&lm, "", 2, 1.0, 1);
    }
    for bytes in [data, model] {
        safetensors_round_trip(bytes);
    }
    for bytes in [data, vocab] {
        for byte_level in [false, true] {
            vocab_round_trip(bytes, byte_level);
        }
    }
}

/// `decode_safetensors`; what it accepts and `encode_safetensors` writes back decodes the same.
fn safetensors_round_trip(bytes: &[u8]) {
    let Ok(tensors) = checkpoint::decode_safetensors(bytes, "x") else {
        return;
    };
    if let Ok(again) = checkpoint::encode_safetensors(&tensors) {
        let back = checkpoint::decode_safetensors(&again, "x")
            .expect("encode_safetensors output must decode");
        assert_eq!(back.len(), tensors.len());
        for (a, b) in back.iter().zip(&tensors) {
            assert_eq!((&a.name, &a.shape), (&b.name, &b.shape));
            let bits = |t: &checkpoint::NamedTensor| -> Vec<u32> {
                t.data.iter().map(|x| x.to_bits()).collect()
            };
            assert_eq!(
                bits(a),
                bits(b),
                "tensor {} changed in a round trip",
                a.name
            );
        }
    }
}

/// `decode_vocab`; a vocabulary it accepts encodes again (the escapes are an exact inverse)
/// and decodes to the same tokens.
fn vocab_round_trip(bytes: &[u8], byte_level: bool) {
    let Ok(tokens) = checkpoint::decode_vocab(bytes, byte_level, "x") else {
        return;
    };
    let enc = checkpoint::encode_vocab(&tokens, byte_level)
        .expect("a vocabulary decode_vocab accepts must encode");
    let back =
        checkpoint::decode_vocab(&enc, byte_level, "x").expect("encode_vocab output must decode");
    assert_eq!(back, tokens, "vocabulary changed in a round trip");
}

// ---------------------------------------------------------------------------------------------
// config
// ---------------------------------------------------------------------------------------------

pub fn config(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cfg) = toml::from_str::<rnnlens::training::TrainConfig>(s) else {
        return;
    };
    if cfg.validate().is_err() {
        return;
    }
    let _ = cfg.data_spec();
    let _ = cfg.layers(3);
    let _ = cfg.layers(1 << 20);
    // A run stores its configuration in trainer.json; a resumed run must read back the same.
    // (NaN is never equal to itself, so only a configuration equal to itself is compared.)
    #[allow(clippy::eq_op)]
    if cfg == cfg {
        let json = serde_json::to_vec(&cfg).expect("a valid TrainConfig serialises to JSON");
        let back: rnnlens::training::TrainConfig =
            serde_json::from_slice(&json).expect("a valid TrainConfig stored as JSON reads back");
        assert_eq!(back, cfg, "TrainConfig changed in a JSON round trip");
    }
}

// ---------------------------------------------------------------------------------------------
// idx
// ---------------------------------------------------------------------------------------------

pub fn idx(data: &[u8]) {
    // a small decompression limit keeps a run fast; the full one is tested by tests/idx.rs
    let Ok(a) = rnnlens::data::idx::parse_with_limit(data, "x", 1 << 24) else {
        return;
    };
    let n = a.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    assert_eq!(n, Some(a.data.len()), "dims and data length disagree");
    if !rnnlens::data::idx::is_gzip(data) {
        assert_eq!(a.to_bytes().expect("a parsed array encodes"), data);
    }
    // the same input as an MNIST images file with a matching labels file
    if a.dims.len() == 3 {
        let labels = rnnlens::data::idx::Idx {
            dims: vec![a.dims[0]],
            data: vec![1; a.dims[0].min(1 << 16)],
        };
        if let Ok(m) = rnnlens::data::idx::mnist_from_idx(a, labels, "images", "labels") {
            assert_eq!(m.images.len(), m.len() * m.pixels());
            let _ = m.image(m.len() - 1);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// corpus
// ---------------------------------------------------------------------------------------------

/// A temporary file for the corpus readers that only take a path (one per process and thread,
/// removed after each input).
fn scratch_file() -> PathBuf {
    let tid = format!("{:?}", std::thread::current().id());
    let tid: String = tid.chars().filter(char::is_ascii_digit).collect();
    std::env::temp_dir().join(format!("rnnlens-fuzz-corpus-{}-{tid}", std::process::id()))
}

/// The first byte picks the options (level, lowercase, format, vocabulary size); the rest is
/// the text.
pub fn corpus(data: &[u8]) {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let lowercase = flags & 1 != 0;
    let level = [Level::Char, Level::Byte, Level::Word, Level::Word][(flags >> 1) as usize & 3];
    let format =
        [Format::Text, Format::Text8, Format::Enwik8, Format::Brown][(flags >> 3) as usize & 3];
    let vocab_size = [0usize, 1, 2, 3, 5, 10, 50, 10000][(flags >> 5) as usize & 7];

    // byte level: any bytes
    if let Ok(tok) = Tokenizer::fit_byte(&[body], lowercase) {
        let ids = tok
            .encode_bytes(body)
            .expect("a fitted byte tokenizer encodes its text");
        let norm: Vec<u8> = if lowercase {
            body.to_ascii_lowercase()
        } else {
            body.to_vec()
        };
        assert_eq!(tok.decode_bytes(&ids), norm, "byte-level round trip");
        let _ = tok.decode(&ids);
        let _ = tok.decode(&[u32::MAX, 0, 255, 256]);
    }

    if let Ok(text) = std::str::from_utf8(body) {
        text_checks(text, lowercase, vocab_size);
    }

    let _ = data::check_split_len("x", body.len(), flags as usize, (flags as usize) << 20);

    // the readers that take a path: the text / text8 / enwik8 / brown splits
    let path = scratch_file();
    if std::fs::write(&path, body).is_ok() {
        let spec = DataSpec {
            path: Some(path.clone()),
            format,
            level,
            vocab_size,
            lowercase,
        };
        if let Ok(c) = data::load_corpus(&spec) {
            let v = c.tokenizer.vocab_size() as u32;
            for s in [&c.train, &c.valid, &c.test] {
                assert!(!s.is_empty(), "an empty split loaded");
                assert!(s.iter().all(|&t| t < v), "an id outside the vocabulary");
            }
            let _ = c.tokenizer.decode(&c.valid);
            let _ = data::read_input_file(&path, &c.tokenizer);
        }
        let _ = std::fs::remove_file(&path);
    }
}

fn text_checks(text: &str, lowercase: bool, vocab_size: usize) {
    let _ = data::parse_brown_tagged(text, "x");
    let docs = data::brown_documents(text);
    let [a, b, c] = data::split_brown_documents(&docs);
    assert_eq!(
        data::brown_documents(&format!("{a}\n{b}\n{c}")).len(),
        docs.len(),
        "split_brown_documents lost or merged documents"
    );

    if let Ok(tok) = Tokenizer::fit_char(&[text], lowercase) {
        let ids = tok
            .encode(text)
            .expect("a fitted char tokenizer encodes its text");
        assert_eq!(
            tok.decode(&ids),
            tok.normalize(text),
            "char-level round trip"
        );
        let _ = tok.encode_bytes(text.as_bytes());
    }

    if let Ok(tok) = Tokenizer::fit_word(text, vocab_size, lowercase) {
        let ids = tok
            .encode(text)
            .expect("word-level encode never fails on text");
        // one id per whitespace-separated word and one <eos> per line
        let norm = tok.normalize(text);
        let expected: usize = if norm.is_empty() {
            0
        } else {
            let body = norm.strip_suffix('\n').unwrap_or(&norm);
            body.split('\n')
                .map(|l| l.split_whitespace().count() + 1)
                .sum()
        };
        assert_eq!(
            ids.len(),
            expected,
            "word count differs from split_whitespace"
        );
        let v = tok.vocab_size() as u32;
        assert!(ids.iter().all(|&i| i < v));
        // decoding and encoding again gives the same ids
        let again = tok.encode(&tok.decode(&ids)).expect("encode");
        assert_eq!(again, ids, "word-level decode/encode round trip");
    }
}
