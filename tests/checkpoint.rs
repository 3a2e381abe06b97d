//! Tests of the checkpoint file formats (src/data/checkpoint.rs).

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use rnnlens::data::checkpoint::*;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use serde::{Deserialize, Serialize};

/// A small deterministic generator (xorshift64*), so the tests need no extra dependency.
struct Gen(u64);

impl Gen {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Finite f32 values of every magnitude and sign, including subnormals and +-0.
    fn finite_f32(&mut self) -> f32 {
        loop {
            let v = f32::from_bits(self.next_u64() as u32);
            if v.is_finite() {
                return v;
            }
        }
    }
}

fn err_string<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

// ------------------------------------------------------------------ escapes

#[test]
fn byte_level_escape_round_trips_every_byte() {
    let mut all = String::new();
    for b in 0u8..=255 {
        let tok = char::from(b).to_string();
        let esc = escape_token(&tok, true);
        // Every escaped token is printable ASCII on one line.
        assert!(
            esc.bytes().all(|c| (0x20..0x7f).contains(&c)),
            "byte {b:#04x} escaped to {esc:?}"
        );
        let expected = match b {
            b'\\' => "\\\\".to_string(),
            b'\n' => "\\n".to_string(),
            b'\r' => "\\r".to_string(),
            b'\t' => "\\t".to_string(),
            0x20..=0x7e => tok.clone(),
            _ => format!("\\x{b:02x}"),
        };
        assert_eq!(esc, expected, "byte {b:#04x}");
        assert_eq!(unescape_token(&esc, true).unwrap(), tok, "byte {b:#04x}");
        all.push(char::from(b));
    }
    // A multi-byte token made of every byte also round trips.
    let esc = escape_token(&all, true);
    assert_eq!(unescape_token(&esc, true).unwrap(), all);
    // Upper-case hex is accepted on reading.
    assert_eq!(unescape_token("\\xE9\\xff", true).unwrap(), "\u{e9}\u{ff}");
}

#[test]
fn char_level_escapes_keep_text_literal() {
    let cases: &[(&str, &str)] = &[
        ("\\", "\\\\"),
        ("\t", "\\t"),
        ("\n", "\\n"),
        ("\r", "\\r"),
        (" ", " "),
        ("é", "é"),
        ("日本", "日本"),
        ("<eos>", "<eos>"),
        ("a\\nb", "a\\\\nb"),
        ("\u{0}", "\\x00"),
        ("\u{1b}", "\\x1b"),
        ("\u{7f}", "\\x7f"),
        ("\u{85}", "\\x85"),
        ("\u{ff}", "\u{ff}"),
        ("x\\x41", "x\\\\x41"),
        ("🙂", "🙂"),
    ];
    for &(tok, want) in cases {
        let esc = escape_token(tok, false);
        assert_eq!(esc, want, "escape of {tok:?}");
        assert!(!esc.contains('\n') && !esc.contains('\r'));
        assert_eq!(
            unescape_token(&esc, false).unwrap(),
            tok,
            "round trip of {tok:?}"
        );
    }
    // Every char below U+0100 round trips at char level as well.
    for c in (0u32..256).filter_map(char::from_u32) {
        let tok = c.to_string();
        assert_eq!(
            unescape_token(&escape_token(&tok, false), false).unwrap(),
            tok
        );
    }
}

#[test]
fn bad_escapes_are_rejected_and_named() {
    let e = err_string(unescape_token("ab\\q", false));
    assert!(e.contains("\\q") && e.contains("column 3"), "{e}");
    let e = err_string(unescape_token("abc\\", false));
    assert!(e.contains("backslash"), "{e}");
    let e = err_string(unescape_token("\\x4", false));
    assert!(e.contains("\\x4"), "{e}");
    let e = err_string(unescape_token("\\xzz", true));
    assert!(e.contains("\\xzz"), "{e}");
    let e = err_string(unescape_token("a\tb", false));
    assert!(e.contains("U+0009") && e.contains("\\t"), "{e}");
    let e = err_string(unescape_token("tok\r", false));
    assert!(e.contains("CRLF"), "{e}");
    // A literal non-ASCII char is fine at char level, not at byte level.
    assert_eq!(unescape_token("é", false).unwrap(), "é");
    let e = err_string(unescape_token("é", true));
    assert!(e.contains("byte-level"), "{e}");
}

// ------------------------------------------------------------------ vocab

#[test]
fn vocab_round_trip_and_exact_file_contents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.txt");
    let toks: Vec<String> = ["a", " ", "\\", "\n", "é", "日本", "<unk>", "\t"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    save_vocab(&path, &toks, false).unwrap();
    assert_eq!(
        fs::read_to_string(&path).unwrap(),
        "a\n \n\\\\\n\\n\né\n日本\n<unk>\n\\t\n"
    );
    assert_eq!(load_vocab(&path, false).unwrap(), toks);

    // Byte level: all 256 bytes plus a special token.
    let mut toks: Vec<String> = (0u8..=255).map(|b| char::from(b).to_string()).collect();
    toks.push("<eos>".to_string());
    save_vocab(&path, &toks, true).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.is_ascii());
    assert_eq!(text.lines().count(), 257);
    assert_eq!(text.lines().nth(0x20).unwrap(), " ");
    assert_eq!(text.lines().nth(0xe9).unwrap(), "\\xe9");
    assert_eq!(load_vocab(&path, true).unwrap(), toks);
}

#[test]
fn vocab_newline_handling_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.txt");
    let name = path.display().to_string();

    // A missing final newline is tolerated.
    fs::write(&path, "a\nb").unwrap();
    assert_eq!(load_vocab(&path, false).unwrap(), vec!["a", "b"]);
    // A line with one space is the space token (no trimming).
    fs::write(&path, " \n  \n").unwrap();
    assert_eq!(load_vocab(&path, false).unwrap(), vec![" ", "  "]);

    fs::write(&path, "a\n\nb\n").unwrap();
    let e = err_string(load_vocab(&path, false));
    assert!(
        e.contains(&name) && e.contains("line 2") && e.contains("empty"),
        "{e}"
    );

    fs::write(&path, "a\nb\n\n").unwrap();
    let e = err_string(load_vocab(&path, false));
    assert!(e.contains("line 3") && e.contains("blank line"), "{e}");

    fs::write(&path, "a\nb\\q\n").unwrap();
    let e = err_string(load_vocab(&path, false));
    assert!(
        e.contains(&name) && e.contains("line 2") && e.contains("\\q"),
        "{e}"
    );

    fs::write(&path, "a\r\nb\r\n").unwrap();
    let e = err_string(load_vocab(&path, false));
    assert!(e.contains("line 1") && e.contains("CRLF"), "{e}");

    fs::write(&path, "a\nb\na\n").unwrap();
    let e = err_string(load_vocab(&path, false));
    assert!(
        e.contains("line 3") && e.contains("duplicates line 1"),
        "{e}"
    );

    fs::write(&path, "").unwrap();
    assert!(err_string(load_vocab(&path, false)).contains("empty"));

    fs::write(&path, b"a\n\xff\n").unwrap();
    let e = err_string(load_vocab(&path, false));
    assert!(e.contains("line 2") && e.contains("UTF-8"), "{e}");

    let missing = dir.path().join("nope.txt");
    let e = err_string(load_vocab(&missing, false));
    assert!(
        e.contains("nope.txt") && e.contains("does not exist"),
        "{e}"
    );

    // The writer refuses what the file cannot hold.
    assert!(save_vocab(&path, &["a".into(), "".into()], false).is_err());
    assert!(save_vocab(&path, &["a".into(), "a".into()], false).is_err());
    assert!(save_vocab(&path, &["日".into()], true).is_err());
    assert!(save_vocab(&path, &[], false).is_err());
}

// ------------------------------------------------------------------ safetensors

fn random_tensors(g: &mut Gen) -> Vec<NamedTensor> {
    let specs: &[(&str, &[usize])] = &[
        ("rnn.0.weight_ih", &[12, 5]),
        ("rnn.0.weight_hh", &[12, 3]),
        ("rnn.0.bias_ih", &[12]),
        ("embedding.weight", &[7, 5]),
        ("rnn.1.W_x", &[4, 3, 3]),
        ("scalar", &[]),
    ];
    specs
        .iter()
        .map(|&(name, shape)| {
            let n: usize = shape.iter().product();
            NamedTensor::new(
                name,
                shape.to_vec(),
                (0..n).map(|_| g.finite_f32()).collect(),
            )
        })
        .collect()
}

#[test]
fn safetensors_round_trip_is_bit_exact_and_sorted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut tensors = random_tensors(&mut g);
    tensors[0].data[0] = -0.0;
    tensors[0].data[1] = f32::from_bits(1); // smallest subnormal
    tensors[0].data[2] = f32::MAX;
    save_safetensors(&path, &tensors).unwrap();
    let loaded = load_safetensors(&path).unwrap();

    let mut want = tensors.clone();
    want.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(loaded.len(), want.len());
    for (l, w) in loaded.iter().zip(&want) {
        assert_eq!(l.name, w.name);
        assert_eq!(l.shape, w.shape);
        let lb: Vec<u32> = l.data.iter().map(|v| v.to_bits()).collect();
        let wb: Vec<u32> = w.data.iter().map(|v| v.to_bits()).collect();
        assert_eq!(lb, wb, "tensor {}", l.name);
    }
    // No temp file is left behind.
    assert_eq!(names_in(dir.path()), vec!["model.safetensors"]);
}

#[test]
fn safetensors_empty_list_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.safetensors");
    save_safetensors(&path, &[]).unwrap();
    assert!(load_safetensors(&path).unwrap().is_empty());
    let bytes = fs::read(&path).unwrap();
    assert!(SafeTensors::deserialize(&bytes).unwrap().is_empty());
}

#[test]
fn written_file_is_readable_by_the_safetensors_crate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let mut g = Gen(42);
    let tensors = random_tensors(&mut g);
    save_safetensors(&path, &tensors).unwrap();

    let bytes = fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.len(), tensors.len());
    for t in &tensors {
        let v = st.tensor(&t.name).unwrap();
        assert_eq!(v.dtype(), Dtype::F32);
        assert_eq!(v.shape(), &t.shape[..]);
        let le: Vec<u8> = t.data.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(v.data(), &le[..]);
    }
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(
        meta.metadata()
            .as_ref()
            .unwrap()
            .get("format")
            .map(String::as_str),
        Some("pt")
    );
}

#[test]
fn safetensors_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let name = path.display().to_string();
    let mut g = Gen(7);
    save_safetensors(&path, &random_tensors(&mut g)).unwrap();
    let good = fs::read(&path).unwrap();

    // Truncated data.
    fs::write(&path, &good[..good.len() - 3]).unwrap();
    let e = err_string(load_safetensors(&path));
    assert!(
        e.contains(&name) && e.contains("not a valid safetensors"),
        "{e}"
    );
    // Truncated inside the header, and shorter than the length prefix.
    fs::write(&path, &good[..20]).unwrap();
    assert!(err_string(load_safetensors(&path)).contains(&name));
    fs::write(&path, &good[..5]).unwrap();
    assert!(err_string(load_safetensors(&path)).contains(&name));
    // Not a safetensors file at all.
    fs::write(&path, "hello, world, this is text").unwrap();
    assert!(err_string(load_safetensors(&path)).contains(&name));

    // Wrong dtype, written by the safetensors crate itself.
    let f64_bytes: Vec<u8> = [1.0f64, 2.0, 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let view = TensorView::new(Dtype::F64, vec![3], &f64_bytes).unwrap();
    let buf = safetensors::serialize([("decoder.bias", view)], None).unwrap();
    fs::write(&path, buf).unwrap();
    let e = err_string(load_safetensors(&path));
    assert!(
        e.contains(&name) && e.contains("decoder.bias") && e.contains("F64"),
        "{e}"
    );

    // Missing file.
    let missing = dir.path().join("missing.safetensors");
    let e = err_string(load_safetensors(&missing));
    assert!(
        e.contains("missing.safetensors") && e.contains("does not exist"),
        "{e}"
    );
}

/// A safetensors file with a hand-written header.
fn raw_safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

#[test]
fn safetensors_rejects_duplicates_and_zero_dims() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.safetensors");
    let one = 1.0f32.to_le_bytes();

    // Sanity: the hand-written format is accepted when valid.
    fs::write(
        &path,
        raw_safetensors(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            &one,
        ),
    )
    .unwrap();
    assert_eq!(
        load_safetensors(&path).unwrap(),
        vec![NamedTensor::new("a", vec![1], vec![1.0])]
    );

    let dup = r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    fs::write(&path, raw_safetensors(dup, &one)).unwrap();
    let e = err_string(load_safetensors(&path));
    assert!(
        e.contains("x.safetensors") && e.contains("duplicate") && e.contains("`a`"),
        "{e}"
    );

    let zero = r#"{"a":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    fs::write(&path, raw_safetensors(zero, &one)).unwrap();
    let e = err_string(load_safetensors(&path));
    assert!(
        e.contains("x.safetensors") && e.contains("zero dimension"),
        "{e}"
    );

    // The writer refuses the same things, and a data length that does not match the shape,
    // without touching an existing file.
    let before = fs::read(&path).unwrap();
    let bad: &[Vec<NamedTensor>] = &[
        vec![NamedTensor::new("a", vec![2, 0], vec![])],
        vec![NamedTensor::new("a", vec![2, 3], vec![0.0; 5])],
        vec![
            NamedTensor::new("a", vec![1], vec![0.0]),
            NamedTensor::new("a", vec![1], vec![0.0]),
        ],
        vec![NamedTensor::new("", vec![1], vec![0.0])],
        vec![NamedTensor::new("__metadata__", vec![1], vec![0.0])],
        vec![NamedTensor::new("a", vec![usize::MAX, 2], vec![0.0])],
    ];
    for tensors in bad {
        let e = err_string(save_safetensors(&path, tensors));
        assert!(e.contains("x.safetensors"), "{e}");
    }
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(names_in(dir.path()), vec!["x.safetensors"]);
}

// ------------------------------------------------------------------ expect_tensors

#[test]
fn expect_tensors_checks_names_and_shapes() {
    let found = vec![
        NamedTensor::new("a", vec![2, 3], (0..6).map(|v| v as f32).collect()),
        NamedTensor::new("b", vec![3], vec![7.0, 8.0, 9.0]),
    ];
    let exp = |v: &[(&str, &[usize])]| -> Vec<(String, Vec<usize>)> {
        v.iter().map(|(n, s)| (n.to_string(), s.to_vec())).collect()
    };

    let data = expect_tensors(&found, &exp(&[("b", &[3]), ("a", &[2, 3])])).unwrap();
    assert_eq!(
        data,
        vec![vec![7.0, 8.0, 9.0], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]
    );

    let e = err_string(expect_tensors(
        &found,
        &exp(&[("a", &[2, 3]), ("b", &[3]), ("c", &[4, 4])]),
    ));
    assert!(
        e.contains("missing tensor `c`") && e.contains("[4, 4]"),
        "{e}"
    );

    let e = err_string(expect_tensors(&found, &exp(&[("a", &[2, 3])])));
    assert!(
        e.contains("unexpected tensor `b`") && e.contains("[3]"),
        "{e}"
    );

    let e = err_string(expect_tensors(&found, &exp(&[("a", &[3, 2]), ("b", &[3])])));
    assert!(
        e.contains("tensor `a` has shape [2, 3], expected [3, 2]"),
        "{e}"
    );

    // Several problems are reported together.
    let e = err_string(expect_tensors(&found, &exp(&[("a", &[6]), ("c", &[1])])));
    assert!(
        e.contains("`a`")
            && e.contains("missing tensor `c`")
            && e.contains("unexpected tensor `b`"),
        "{e}"
    );
}

// ------------------------------------------------------------------ write_atomic

#[test]
fn write_atomic_writes_and_replaces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.bin");
    write_atomic(&path, b"first").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"first");
    write_atomic(&path, b"second, longer").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"second, longer");
    write_atomic(&path, b"").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"");
    assert_eq!(names_in(dir.path()), vec!["f.bin"]);
}

#[test]
fn write_atomic_failure_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();

    // The rename fails: the target is a non-empty directory. The temp file is removed.
    let target = dir.path().join("target");
    fs::create_dir(&target).unwrap();
    fs::write(target.join("inside"), b"keep").unwrap();
    let e = err_string(write_atomic(&target, b"new"));
    assert!(e.contains(&target.display().to_string()), "{e}");
    assert_eq!(fs::read(target.join("inside")).unwrap(), b"keep");
    assert_eq!(names_in(dir.path()), vec!["target"]);

    // The directory does not exist.
    let e = err_string(write_atomic(&dir.path().join("no/such/dir/f"), b"x"));
    assert!(e.contains("no/such/dir"), "{e}");
}

#[cfg(unix)]
#[test]
#[ignore = "needs a user other than root (root ignores directory permissions); .ci/run runs this with --ignored when not root"]
fn write_atomic_in_read_only_directory_leaves_the_old_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ro = dir.path().join("ro");
    fs::create_dir(&ro).unwrap();
    let path = ro.join("config.json");
    fs::write(&path, b"old contents").unwrap();
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o555)).unwrap();

    // Root ignores directory permissions: then this test cannot test anything.
    let probe = ro.join("probe");
    if fs::write(&probe, b"").is_ok() {
        let _ = fs::remove_file(&probe);
        fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
        panic!("permissions are not enforced here (running as root?): run this test as another user");
    }

    let r = write_atomic(&path, b"new contents");
    let save = save_json(&path, &serde_json::json!({"a": 1}));
    fs::set_permissions(&ro, fs::Permissions::from_mode(0o755)).unwrap();
    let e = err_string(r);
    assert!(e.contains(&path.display().to_string()), "{e}");
    assert!(save.is_err());
    assert_eq!(fs::read(&path).unwrap(), b"old contents");
    assert_eq!(names_in(&ro), vec!["config.json"]);
}

// ------------------------------------------------------------------ JSON and model dirs

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Tokenizer {
    level: String,
    normalize: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Config {
    format: String,
    format_version: u32,
    vocab_size: usize,
    tokenizer: Tokenizer,
    embedding_size: Option<usize>,
    extra: HashMap<String, f64>,
}

fn config(level: &str, vocab_size: usize) -> Config {
    Config {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size,
        tokenizer: Tokenizer {
            level: level.into(),
            normalize: "none".into(),
        },
        embedding_size: Some(4),
        extra: HashMap::from([("lr".to_string(), 0.001)]),
    }
}

#[test]
fn json_round_trip_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    let c = config("char", 3);
    save_json(&path, &c).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("\n  \"format\": \"rnnlens\"") && text.ends_with("}\n"),
        "{text}"
    );
    assert_eq!(load_json::<Config>(&path).unwrap(), c);

    fs::write(
        &path,
        "{\"format\": \"rnnlens\",\n  \"vocab_size\": \"three\"}",
    )
    .unwrap();
    let e = err_string(load_json::<Config>(&path));
    assert!(e.contains("c.json") && e.contains("line 2"), "{e}");
    fs::write(&path, "{ not json").unwrap();
    assert!(err_string(load_json::<Config>(&path)).contains("c.json"));
    let e = err_string(load_json::<Config>(&dir.path().join("absent.json")));
    assert!(e.contains("absent.json"), "{e}");
}

#[test]
fn model_dir_round_trip() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt/run1");
    let mut g = Gen(1234);
    let tensors = random_tensors(&mut g);
    let vocab: Vec<String> = ["\u{0}", "\u{e9}", " ", "\\"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let c = config("byte", vocab.len());
    save_model_dir(&dir, &c, &tensors, &vocab, true, &[]).unwrap();
    assert_eq!(
        names_in(&dir),
        vec!["config.json", "manifest.json", "model.safetensors", "vocab.txt"]
    );
    assert_eq!(
        fs::read_to_string(dir.join("vocab.txt")).unwrap(),
        "\\x00\n\\xe9\n \n\\\\\n"
    );

    let (c2, t2, v2) = load_model_dir::<Config>(&dir, |c| c.tokenizer.level == "byte").unwrap();
    assert_eq!(c2, c);
    assert_eq!(v2, vocab);
    let mut want = tensors.clone();
    want.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(t2, want);

    // Overwriting an existing checkpoint replaces the whole directory: a stale trainer file
    // does not survive beside a model it does not belong to, unless it is saved with it.
    fs::write(dir.join("trainer.json"), "{}").unwrap();
    let vocab3: Vec<String> = vec!["a".into(), "b".into()];
    let c3 = config("char", 2);
    let t3 = vec![NamedTensor::new("decoder.bias", vec![2], vec![0.5, -0.5])];
    save_model_dir(&dir, &c3, &t3, &vocab3, false, &[]).unwrap();
    let (c4, t4, v4) = load_model_dir::<Config>(&dir, |c| c.tokenizer.level == "byte").unwrap();
    assert_eq!((c4, t4, v4), (c3.clone(), t3.clone(), vocab3.clone()));
    assert_eq!(
        names_in(&dir),
        vec!["config.json", "manifest.json", "model.safetensors", "vocab.txt"]
    );
    save_model_dir(&dir, &c3, &t3, &vocab3, false, &[("trainer.json", b"{}".to_vec())]).unwrap();
    assert!(names_in(&dir).contains(&"trainer.json".to_string()));
    // No leftovers beside it.
    assert_eq!(names_in(dir.parent().unwrap()), vec!["run1"]);
}

#[test]
fn manifest_catches_changed_files_and_foreign_directories_are_not_replaced() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ck");
    let tensors = vec![NamedTensor::new("decoder.bias", vec![2], vec![1.0, 2.0])];
    let vocab: Vec<String> = vec!["a".into(), "b".into()];
    let is_byte = |c: &Config| c.tokenizer.level == "byte";
    save_model_dir(&dir, &config("char", 2), &tensors, &vocab, false, &[]).unwrap();
    load_model_dir::<Config>(&dir, is_byte).unwrap();
    // A flipped byte in the model: same length, different checksum.
    let p = dir.join("model.safetensors");
    let mut m = fs::read(&p).unwrap();
    let last = m.len() - 1;
    m[last] ^= 1;
    fs::write(&p, &m).unwrap();
    let e = err_string(load_model_dir::<Config>(&dir, is_byte));
    assert!(e.contains("model.safetensors") && e.contains("SHA-256"), "{e}");
    // A truncated vocabulary.
    m[last] ^= 1;
    fs::write(&p, &m).unwrap();
    fs::write(dir.join("vocab.txt"), "a\n").unwrap();
    let e = err_string(load_model_dir::<Config>(&dir, is_byte));
    assert!(e.contains("vocab.txt") && e.contains("bytes long"), "{e}");

    // A directory with a user's own files is never replaced.
    let mine = root.path().join("mine");
    fs::create_dir(&mine).unwrap();
    fs::write(mine.join("notes.txt"), "precious").unwrap();
    let e = err_string(save_model_dir(&mine, &config("char", 2), &tensors, &vocab, false, &[]));
    assert!(e.contains("notes.txt") && e.contains("refusing"), "{e}");
    assert_eq!(fs::read_to_string(mine.join("notes.txt")).unwrap(), "precious");
}

#[test]
fn model_dir_errors() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ckpt");
    let tensors = vec![NamedTensor::new("decoder.bias", vec![2], vec![1.0, 2.0])];
    let vocab: Vec<String> = vec!["a".into(), "b".into()];
    let is_byte = |c: &Config| c.tokenizer.level == "byte";

    // vocab_size must agree with the vocabulary; nothing is written otherwise.
    let e = err_string(save_model_dir(&dir, &config("char", 3), &tensors, &vocab, false, &[]));
    assert!(e.contains("vocab_size") && e.contains('3'), "{e}");
    assert!(!dir.exists());
    // An invalid vocabulary is refused before anything is written.
    let bad_vocab: Vec<String> = vec!["a".into(), "".into()];
    assert!(save_model_dir(&dir, &config("char", 2), &tensors, &bad_vocab, false, &[]).is_err());
    assert!(!dir.exists());

    let e = err_string(load_model_dir::<Config>(&dir, is_byte));
    assert!(e.contains("does not exist"), "{e}");

    save_model_dir(&dir, &config("char", 2), &tensors, &vocab, false, &[]).unwrap();
    // The checks below tamper with files: without the manifest the loader sees the directory
    // as one another tool wrote (the manifest's own checks are tested separately).
    fs::remove_file(dir.join("manifest.json")).unwrap();

    // Missing files.
    for (file, needle) in [
        ("model.safetensors", "model.safetensors"),
        ("vocab.txt", "vocab.txt"),
        ("config.json", "config.json"),
    ] {
        let p = dir.join(file);
        let saved = fs::read(&p).unwrap();
        fs::remove_file(&p).unwrap();
        let e = err_string(load_model_dir::<Config>(&dir, is_byte));
        assert!(e.contains(needle) && e.contains("missing"), "{e}");
        fs::write(&p, saved).unwrap();
    }
    load_model_dir::<Config>(&dir, is_byte).unwrap();

    // A vocab.txt that disagrees with the config.
    fs::write(dir.join("vocab.txt"), "a\nb\nc\n").unwrap();
    let e = err_string(load_model_dir::<Config>(&dir, is_byte));
    assert!(
        e.contains("vocab_size = 2") && e.contains("3 tokens"),
        "{e}"
    );
    fs::write(dir.join("vocab.txt"), "a\nb\n").unwrap();

    // A foreign format.
    let mut c = config("char", 2);
    c.format = "other".into();
    save_json(&dir.join("config.json"), &c).unwrap();
    let e = err_string(load_model_dir::<Config>(&dir, is_byte));
    assert!(e.contains("config.json") && e.contains("rnnlens"), "{e}");

    // A byte-level config reading a char-level vocab with a literal non-ASCII char.
    save_model_dir(&dir, &config("byte", 2), &tensors, &vocab, true, &[]).unwrap();
    fs::remove_file(dir.join("manifest.json")).unwrap();
    fs::write(dir.join("vocab.txt"), "a\né\n").unwrap();
    let e = err_string(load_model_dir::<Config>(&dir, is_byte));
    assert!(e.contains("vocab.txt") && e.contains("line 2"), "{e}");
}
