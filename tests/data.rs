//! Integration tests of the data layer: tokenizers, readers, splits, the embedded corpus, and
//! the errors bad input must give.

use std::fs;
use std::path::Path;

use rnnlens::data::*;

fn spec(path: Option<&Path>, format: Format, level: Level) -> DataSpec {
    DataSpec {
        path: path.map(Path::to_path_buf),
        format,
        level,
        vocab_size: 10_000,
        lowercase: false,
    }
}

fn err_text<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
    format!("{:#}", r.expect_err("expected an error"))
}

// ------------------------------------------------------------------------------------------
// Level / Format
// ------------------------------------------------------------------------------------------

#[test]
fn level_and_format_parse_display_and_serde() {
    for (s, l) in [
        ("char", Level::Char),
        ("byte", Level::Byte),
        ("word", Level::Word),
    ] {
        assert_eq!(s.parse::<Level>().unwrap(), l);
        assert_eq!(l.to_string(), s);
        assert_eq!(serde_json::to_string(&l).unwrap(), format!("\"{s}\""));
        assert_eq!(
            serde_json::from_str::<Level>(&format!("\"{s}\"")).unwrap(),
            l
        );
    }
    for (s, f) in [
        ("text", Format::Text),
        ("ptb", Format::Ptb),
        ("text8", Format::Text8),
        ("enwik8", Format::Enwik8),
        ("brown", Format::Brown),
    ] {
        assert_eq!(s.parse::<Format>().unwrap(), f);
        assert_eq!(f.to_string(), s);
        assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{s}\""));
        assert_eq!(
            serde_json::from_str::<Format>(&format!("\"{s}\"")).unwrap(),
            f
        );
    }
    assert!(err_text("words".parse::<Level>()).contains("words"));
    assert!(err_text("wiki".parse::<Format>()).contains("wiki"));
    assert_eq!(Format::Enwik8.default_level(), Level::Byte);
    assert_eq!(Format::Ptb.default_level(), Level::Word);
    assert!(parse_normalize("lowercase").unwrap());
    assert!(!parse_normalize("none").unwrap());
    assert!(parse_normalize("upper").is_err());
}

// ------------------------------------------------------------------------------------------
// Word level
// ------------------------------------------------------------------------------------------

#[test]
fn word_vocab_ids_unk_and_eos() {
    // counts: the 3, sat 2, cat 1, dog 1, end 1, <unk> 1 (literal)
    let train = "the cat sat\nthe dog sat\nthe end <unk>\n";
    let tok = Tokenizer::fit_word(train, 5, false).unwrap();
    // <eos> 0, <unk> 1, then by count desc, ties by byte order: the, sat, cat (cat < dog < end)
    assert_eq!(tok.tokens(), &["<eos>", "<unk>", "the", "sat", "cat"]);
    assert_eq!(tok.vocab_size(), 5);
    assert_eq!(tok.eos_id(), Some(0));
    assert_eq!(tok.unk_id(), Some(1));
    assert_eq!(tok.normalize_name(), "none");

    // one <eos> per line end; the last line needs no trailing newline; OOV -> <unk>
    assert_eq!(
        tok.encode("the dog sat\ncat").unwrap(),
        vec![2, 1, 3, 0, 4, 0]
    );
    assert_eq!(
        tok.encode("the dog sat\ncat\n").unwrap(),
        vec![2, 1, 3, 0, 4, 0]
    );
    // whitespace of any kind separates words; an empty line is a lone <eos>
    assert_eq!(
        tok.encode("  the\tcat \r\n\nsat").unwrap(),
        vec![2, 4, 0, 0, 3, 0]
    );
    // a literal <unk> is the <unk> token
    assert_eq!(tok.encode("<unk> the").unwrap(), vec![1, 2, 0]);
    assert_eq!(tok.encode("").unwrap(), Vec::<u32>::new());
    assert_eq!(
        tok.decode(&[2, 4, 3, 0, 1, 2, 0]),
        "the cat sat\n<unk> the\n"
    );

    // vocab_size 0 keeps every word; deterministic order
    let all = Tokenizer::fit_word(train, 0, false).unwrap();
    assert_eq!(
        all.tokens(),
        &["<eos>", "<unk>", "the", "sat", "cat", "dog", "end"]
    );
    assert!(Tokenizer::fit_word(train, 1, false).is_err());
    // a vocabulary larger than the text is just the text's words
    assert_eq!(
        Tokenizer::fit_word(train, 100, false).unwrap().vocab_size(),
        7
    );
}

#[test]
fn word_level_lowercase_is_applied_on_encode() {
    let tok = Tokenizer::fit_word("The the THE Cat\n", 10, true).unwrap();
    assert_eq!(tok.tokens(), &["<eos>", "<unk>", "the", "cat"]);
    assert_eq!(tok.normalize_name(), "lowercase");
    assert_eq!(tok.encode("CAT The").unwrap(), vec![3, 2, 0]);
}

#[test]
fn from_tokens_validates() {
    let ok = Tokenizer::from_tokens(
        Level::Word,
        false,
        vec!["a".into(), "<unk>".into(), "b".into(), "<eos>".into()],
    )
    .unwrap();
    assert_eq!(ok.unk_id(), Some(1));
    assert_eq!(ok.eos_id(), Some(3));
    assert_eq!(ok.encode("a zz\nb").unwrap(), vec![0, 1, 3, 2, 3]);

    let dup = err_text(Tokenizer::from_tokens(
        Level::Word,
        false,
        vec!["<eos>".into(), "<unk>".into(), "a".into(), "a".into()],
    ));
    assert!(dup.contains("twice"), "{dup}");
    let no_unk = err_text(Tokenizer::from_tokens(
        Level::Word,
        false,
        vec!["<eos>".into(), "a".into()],
    ));
    assert!(no_unk.contains("<unk>"), "{no_unk}");
    let no_eos = err_text(Tokenizer::from_tokens(
        Level::Word,
        false,
        vec!["<unk>".into(), "a".into()],
    ));
    assert!(no_eos.contains("<eos>"), "{no_eos}");
    assert!(Tokenizer::from_tokens(Level::Char, false, vec!["ab".into()]).is_err());
    assert!(Tokenizer::from_tokens(Level::Char, false, vec!["a".into(), "a".into()]).is_err());
    assert!(Tokenizer::from_tokens(Level::Byte, false, vec!["\u{100}".into()]).is_err());
    assert!(Tokenizer::from_tokens(Level::Char, false, vec![]).is_err());

    // a tokenizer rebuilt from its own tokens behaves the same
    let fitted = Tokenizer::fit_char(&["hello wörld"], false).unwrap();
    let rebuilt = Tokenizer::from_tokens(Level::Char, false, fitted.tokens().to_vec()).unwrap();
    assert_eq!(
        fitted.encode("wörld").unwrap(),
        rebuilt.encode("wörld").unwrap()
    );
}

// ------------------------------------------------------------------------------------------
// Char and byte level
// ------------------------------------------------------------------------------------------

#[test]
fn char_level_round_trip_and_unknown_char() {
    let text = "Héllo, wörld!\n日本\n";
    let tok = Tokenizer::fit_char(&[text], false).unwrap();
    // sorted by code point
    let cps: Vec<u32> = tok
        .tokens()
        .iter()
        .map(|t| t.chars().next().unwrap() as u32)
        .collect();
    assert!(cps.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(tok.tokens()[0], "\n");
    assert_eq!(
        tok.vocab_size(),
        text.chars()
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    let ids = tok.encode(text).unwrap();
    assert_eq!(ids.len(), text.chars().count());
    assert_eq!(tok.decode(&ids), text);
    assert_eq!(tok.id("ö"), Some(ids[8]));

    let e = err_text(tok.encode("Hollo z"));
    assert!(
        e.contains("'z'") && e.contains("U+007A") && e.contains("byte offset 6"),
        "{e}"
    );
    let e = err_text(tok.encode("Hé€"));
    assert!(e.contains("U+20AC") && e.contains("byte offset 3"), "{e}");

    // invalid UTF-8 given as bytes at char level: the offset is named
    let e = err_text(tok.encode_bytes(b"Hell\xffo"));
    assert!(e.contains("UTF-8") && e.contains("offset 4"), "{e}");

    // lowercasing at char level
    let low = Tokenizer::fit_char(&["ABC"], true).unwrap();
    assert_eq!(low.tokens(), &["a", "b", "c"]);
    assert_eq!(low.decode(&low.encode("CaB").unwrap()), "cab");
}

#[test]
fn byte_level_tokens_and_round_trip() {
    let data: &[u8] = b"A\x00\xffA\xe9\n";
    let tok = Tokenizer::fit_byte(&[data], false).unwrap();
    // one token per byte value present, sorted, each the char U+00XX
    assert_eq!(tok.tokens(), &["\u{0}", "\n", "A", "\u{e9}", "\u{ff}"]);
    let ids = tok.encode_bytes(data).unwrap();
    assert_eq!(ids, vec![2, 0, 4, 2, 3, 1]);
    assert_eq!(tok.decode_bytes(&ids), data);
    assert_eq!(tok.id("\u{ff}"), Some(4));
    // valid UTF-8 decodes exactly through decode()
    let t2 = Tokenizer::fit_byte(&["né\n".as_bytes()], false).unwrap();
    assert_eq!(t2.decode(&t2.encode("né\n").unwrap()), "né\n");
    // a byte outside the vocabulary is an error with its offset
    let e = err_text(tok.encode_bytes(b"AAB"));
    assert!(e.contains("0x42") && e.contains("offset 2"), "{e}");
}

// ------------------------------------------------------------------------------------------
// Readers
// ------------------------------------------------------------------------------------------

#[test]
fn ptb_layout_from_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("ptb.train.txt"),
        " the cat <unk> sat \n the dog sat \n",
    )
    .unwrap();
    fs::write(dir.path().join("ptb.valid.txt"), " the bird sat \n").unwrap();
    fs::write(dir.path().join("ptb.test.txt"), " a cat \n").unwrap();
    let c = load_corpus(&spec(Some(dir.path()), Format::Ptb, Level::Word)).unwrap();
    let t = &c.tokenizer;
    assert_eq!(t.tokens(), &["<eos>", "<unk>", "sat", "the", "cat", "dog"]);
    assert_eq!(c.train, vec![3, 4, 1, 2, 0, 3, 5, 2, 0]);
    assert_eq!(c.valid, vec![3, 1, 2, 0]); // "bird" is not a training word
    assert_eq!(c.test, vec![1, 4, 0]);
    assert!(c.source.contains("PTB"));

    // char level over the same layout: vocabulary from all three splits
    let c = load_corpus(&spec(Some(dir.path()), Format::Ptb, Level::Char)).unwrap();
    assert_eq!(c.tokenizer.decode(&c.valid), " the bird sat \n");
    assert!(c.tokenizer.id("b").is_some());
}

#[test]
fn text_format_splits_90_5_5_at_line_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.txt");
    let lines: Vec<String> = (0..100).map(|i| format!("line {i:03}")).collect();
    let text = lines.join("\n") + "\n";
    fs::write(&p, &text).unwrap();
    // 900 bytes of 9-byte lines: cuts at bytes 810 and 855, both just after a '\n'
    let c = load_corpus(&spec(Some(&p), Format::Text, Level::Char)).unwrap();
    let tok = &c.tokenizer;
    let (tr, va, te) = (
        tok.decode(&c.train),
        tok.decode(&c.valid),
        tok.decode(&c.test),
    );
    assert!(
        tr.starts_with("line 000\n") && tr.ends_with("line 089\n"),
        "{tr}"
    );
    assert_eq!(va, "line 090\nline 091\nline 092\nline 093\nline 094\n");
    assert!(
        te.starts_with("line 095\n") && te.ends_with("line 099\n"),
        "{te}"
    );
    assert_eq!(tr + &va + &te, text);
    assert!(
        c.source.contains("t.txt") && c.source.contains("90/5/5"),
        "{}",
        c.source
    );

    // word level: 90 lines of 2 words + <eos>; validation numbers are not training words
    let c = load_corpus(&spec(Some(&p), Format::Text, Level::Word)).unwrap();
    assert_eq!((c.train.len(), c.valid.len(), c.test.len()), (270, 15, 15));
    assert_eq!(c.tokenizer.decode(&c.valid[..3]), "line <unk>\n");
    assert_eq!(c.tokenizer.vocab_size(), 2 + 91); // <eos>, <unk>, "line", 000..089
}

#[test]
fn text8_split_on_a_small_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("text8");
    let words = ["anarchism", "originated", "as", "a", "term", "of", "abuse"];
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 1000 {
        text.push(' ');
        text.push_str(words[i % words.len()]);
        i += 1;
    }
    text.truncate(1000);
    fs::write(&p, &text).unwrap();

    let c = load_corpus(&spec(Some(&p), Format::Text8, Level::Char)).unwrap();
    assert_eq!((c.train.len(), c.valid.len(), c.test.len()), (900, 50, 50));
    assert!(c.source.contains("proportionally"), "{}", c.source);
    assert_eq!(c.tokenizer.decode(&c.valid), &text[900..950]);
    let distinct = text
        .chars()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert_eq!(c.tokenizer.vocab_size(), distinct);

    // enwik8 at byte level splits the same way, in bytes
    let c = load_corpus(&spec(Some(&p), Format::Enwik8, Level::Byte)).unwrap();
    assert_eq!((c.train.len(), c.valid.len(), c.test.len()), (900, 50, 50));

    // word level: cuts move to whitespace so no word is cut in two
    let c = load_corpus(&spec(Some(&p), Format::Text8, Level::Word)).unwrap();
    let all: Vec<&str> = text.split_whitespace().collect();
    let n_words = c.train.len() + c.valid.len() + c.test.len() - 3; // one <eos> per split
    assert_eq!(n_words, all.len());
    assert!(
        c.train.iter().all(|&id| id != 1),
        "no word of train is unknown"
    );
}

#[test]
fn brown_tagged_files_are_parsed() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("ca01"),
        "\n\n\tThe/at Fulton/np-tl jury/nn said/vbd ./.\n\n\n\tIt/pps cost/vbd 1/2/cd dollar/nn ./.\n",
    )
    .unwrap();
    fs::write(
        dir.path().join("ca02"),
        "\n\tA/at second/od document/nn ./.\n\n",
    )
    .unwrap();
    fs::write(dir.path().join("README"), "not a corpus file").unwrap();
    fs::write(dir.path().join("cats.txt"), "ca01 news").unwrap();

    let docs = read_brown_dir(dir.path()).unwrap();
    assert_eq!(
        docs,
        vec![
            "The Fulton jury said .\nIt cost 1/2 dollar .".to_string(),
            "A second document .".to_string(),
        ]
    );
    // two documents are too few for the split by document
    let e = err_text(load_corpus(&spec(
        Some(dir.path()),
        Format::Brown,
        Level::Word,
    )));
    assert!(e.contains("only 2 documents") && e.contains("20"), "{e}");

    // a malformed token is an error naming the file and line
    let e = err_text(parse_brown_tagged("ok/at\nbroken\n", "cz99"));
    assert!(
        e.contains("cz99") && e.contains("line 2") && e.contains("broken"),
        "{e}"
    );

    // 20 documents: 18 train, doc 18 valid, doc 19 test
    let dir = tempfile::tempdir().unwrap();
    for i in 0..20 {
        let name = format!("c{}{:02}", if i < 10 { 'a' } else { 'b' }, i % 10 + 1);
        fs::write(
            dir.path().join(name),
            format!("\tDoc/nn number{i}/cd ./.\n"),
        )
        .unwrap();
    }
    let c = load_corpus(&spec(Some(dir.path()), Format::Brown, Level::Word)).unwrap();
    assert_eq!(c.tokenizer.decode(&c.valid), "Doc <unk> .\n");
    assert_eq!(c.tokenizer.decode(&c.test), "Doc <unk> .\n");
    assert!(c.tokenizer.id("number17").is_some() && c.tokenizer.id("number18").is_none());
    assert!(c.source.contains("18/1/1"), "{}", c.source);
    // train: 18 docs of 3 words + <eos>, with an empty line (<eos>) between documents
    assert_eq!(c.train.len(), 18 * 4 + 17);

    // split_brown_documents on its own
    let docs: Vec<String> = (0..40).map(|i| format!("d{i}")).collect();
    let [tr, va, te] = split_brown_documents(&docs);
    assert_eq!(va, "d18\n\nd38\n");
    assert_eq!(te, "d19\n\nd39\n");
    assert_eq!(brown_documents(&tr).len(), 36);
}

#[test]
fn embedded_brown_corpus_loads() {
    let text = embedded_brown().unwrap();
    let docs = brown_documents(&text);
    assert_eq!(docs.len(), 500);
    let words: usize = docs.iter().map(|d| d.split_whitespace().count()).sum();
    assert_eq!(words, 1_161_192);
    let sentences: usize = docs.iter().map(|d| d.lines().count()).sum();
    assert_eq!(sentences, 57_340);
    assert!(docs[0].starts_with("The Fulton County Grand Jury said Friday"));

    let start = std::time::Instant::now();
    let c = load_corpus(&spec(None, Format::Brown, Level::Word)).unwrap();
    let took = start.elapsed();
    eprintln!("embedded Brown at word level loaded in {took:?}");
    assert!(
        c.source.contains("500 documents") && c.source.contains("450/25/25"),
        "{}",
        c.source
    );
    assert_eq!(c.tokenizer.vocab_size(), 10_000);
    let total = c.train.len() + c.valid.len() + c.test.len();
    // words + one <eos> per sentence + one per empty line between documents of a split
    assert_eq!(total, words + sentences + (450 - 1) + (25 - 1) + (25 - 1));
    assert!(c.train.len() > 1_000_000 && c.valid.len() > 40_000 && c.test.len() > 40_000);
    let unk = c.tokenizer.unk_id().unwrap();
    let unk_rate = c.valid.iter().filter(|&&i| i == unk).count() as f64 / c.valid.len() as f64;
    assert!(
        unk_rate > 0.01 && unk_rate < 0.15,
        "valid <unk> rate {unk_rate}"
    );

    let c = load_corpus(&spec(None, Format::Brown, Level::Char)).unwrap();
    assert!(c.tokenizer.vocab_size() > 60 && c.tokenizer.vocab_size() < 100);
    assert!(c.train.len() > 5_000_000);
}

#[test]
fn read_input_file_uses_the_given_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.txt");
    fs::write(&p, "the cat\nthe fish\n").unwrap();
    let tok = Tokenizer::fit_word("the cat\n", 10, false).unwrap();
    // "cat" (2) and "the" (3) tie on count: byte order decides
    assert_eq!(tok.tokens(), &["<eos>", "<unk>", "cat", "the"]);
    assert_eq!(read_input_file(&p, &tok).unwrap(), vec![3, 2, 0, 3, 1, 0]);
}

// ------------------------------------------------------------------------------------------
// Bad input
// ------------------------------------------------------------------------------------------

#[test]
fn missing_and_empty_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.txt");
    for f in [Format::Text, Format::Text8, Format::Enwik8] {
        let e = err_text(load_corpus(&spec(Some(&missing), f, Level::Char)));
        assert!(
            e.contains("nope.txt") && e.contains("does not exist"),
            "{e}"
        );
    }
    let e = err_text(load_corpus(&spec(Some(&missing), Format::Ptb, Level::Word)));
    assert!(
        e.contains("nope.txt") && e.contains("does not exist"),
        "{e}"
    );
    let e = err_text(load_corpus(&spec(
        Some(&missing),
        Format::Brown,
        Level::Word,
    )));
    assert!(e.contains("nope.txt"), "{e}");
    let e = err_text(load_corpus(&spec(None, Format::Text, Level::Char)));
    assert!(e.contains("needs a data path"), "{e}");

    let empty = dir.path().join("empty.txt");
    fs::write(&empty, "").unwrap();
    let e = err_text(load_corpus(&spec(Some(&empty), Format::Text, Level::Char)));
    assert!(e.contains("empty.txt") && e.contains("empty"), "{e}");
    let tok = Tokenizer::fit_char(&["a"], false).unwrap();
    let e = err_text(read_input_file(&empty, &tok));
    assert!(e.contains("empty.txt") && e.contains("empty"), "{e}");
    let e = err_text(read_input_file(&missing, &tok));
    assert!(e.contains("does not exist"), "{e}");

    // a one-line file cannot give three splits at line boundaries... it falls back to a
    // whitespace cut; a file of three bytes without whitespace cannot be split at all
    let tiny = dir.path().join("tiny.txt");
    fs::write(&tiny, "abc").unwrap();
    let e = err_text(load_corpus(&spec(Some(&tiny), Format::Text, Level::Word)));
    assert!(e.contains("tiny.txt") && e.contains("too small"), "{e}");
}

#[test]
fn invalid_utf8_at_char_level_names_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.txt");
    let mut bytes = "line one\nline two\n".repeat(20).into_bytes();
    bytes[100] = 0xff;
    fs::write(&p, &bytes).unwrap();
    for level in [Level::Char, Level::Word] {
        let e = err_text(load_corpus(&spec(Some(&p), Format::Text, level)));
        assert!(
            e.contains("bad.txt") && e.contains("UTF-8") && e.contains("offset 100"),
            "{e}"
        );
    }
    // byte level takes any bytes
    let c = load_corpus(&spec(Some(&p), Format::Text, Level::Byte)).unwrap();
    assert!(c.tokenizer.id("\u{ff}").is_some());

    let tok = Tokenizer::fit_char(&["line one\ntw"], false).unwrap();
    let e = err_text(read_input_file(&p, &tok));
    assert!(e.contains("bad.txt") && e.contains("offset 100"), "{e}");
}

#[test]
fn ptb_directory_missing_a_file() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("ptb.train.txt"), "a b\n").unwrap();
    fs::write(dir.path().join("ptb.test.txt"), "a b\n").unwrap();
    let e = err_text(load_corpus(&spec(
        Some(dir.path()),
        Format::Ptb,
        Level::Word,
    )));
    assert!(e.contains("ptb.valid.txt"), "{e}");
    fs::write(dir.path().join("ptb.valid.txt"), "").unwrap();
    let e = err_text(load_corpus(&spec(
        Some(dir.path()),
        Format::Ptb,
        Level::Word,
    )));
    assert!(e.contains("ptb.valid.txt") && e.contains("empty"), "{e}");
    let f = dir.path().join("ptb.train.txt");
    let e = err_text(load_corpus(&spec(Some(&f), Format::Ptb, Level::Word)));
    assert!(e.contains("not a directory"), "{e}");
}

#[test]
fn split_too_short_for_one_batch() {
    assert!(check_split_len("train", 36 * 4, 4, 35).is_ok());
    let e = err_text(check_split_len("valid", 36 * 4 - 1, 4, 35));
    assert!(
        e.contains("valid") && e.contains("143") && e.contains("144"),
        "{e}"
    );
    assert!(check_split_len("test", 2, 1, 1).is_ok());
    assert!(check_split_len("test", 1, 1, 1).is_err());
    assert!(check_split_len("test", 100, 0, 1).is_err());
    assert!(check_split_len("test", 100, 1, 0).is_err());
}

/// The split sizes and `<unk>` rates of the embedded corpus are the ones data/README.md records
/// (`--nocapture` prints them).
#[test]
fn embedded_sizes_are_the_ones_data_readme_records() {
    // (level, lowercase): vocabulary, train, valid, test tokens, <unk> % of each (one decimal)
    let want = [
        (Level::Word, false, 10_000, 1_097_131, 60_785, 61_113, [7.8, 10.2, 10.4]),
        (Level::Word, true, 10_000, 1_097_131, 60_785, 61_113, [6.7, 8.9, 9.1]),
        (Level::Char, false, 85, 5_512_308, 306_555, 308_708, [0.0; 3]),
        (Level::Char, true, 59, 5_512_308, 306_555, 308_708, [0.0; 3]),
        (Level::Byte, false, 85, 5_512_308, 306_555, 308_708, [0.0; 3]),
    ];
    for (level, lowercase, vocab, train, valid, test, unk) in want {
        let mut s = spec(None, Format::Brown, level);
        s.lowercase = lowercase;
        let c = load_corpus(&s).unwrap();
        let rate = |v: &[u32]| c.tokenizer.unk_share(v).unwrap_or(0.0) * 100.0;
        let got = [rate(&c.train), rate(&c.valid), rate(&c.test)];
        println!("{level} lowercase={lowercase}: vocab {} train {} valid {} test {} (<unk> % {got:.2?})", c.tokenizer.vocab_size(), c.train.len(), c.valid.len(), c.test.len());
        assert_eq!((c.tokenizer.vocab_size(), c.train.len(), c.valid.len(), c.test.len()), (vocab, train, valid, test), "{level} lowercase={lowercase}");
        for (g, w) in got.iter().zip(unk) {
            assert!(((g * 10.0).round() / 10.0 - w).abs() < 1e-9, "{level} lowercase={lowercase}: <unk> {got:?} % against data/README.md's {unk:?}");
        }
    }
}

#[test]
fn typed_text_is_cut_as_the_brown_corpus_was() {
    let mut s = spec(None, Format::Brown, Level::Word);
    s.lowercase = true;
    let c = load_corpus(&s).unwrap();
    let tok = &c.tokenizer;
    assert_eq!(tok.split(), Split::Brown);
    let words = |text: &str| -> Vec<String> { tok.encode(text).unwrap().iter().map(|&i| tok.tokens()[i as usize].clone()).collect() };
    assert_eq!(words("Hello, world! It's fine."), ["hello", ",", "world", "!", "it's", "fine", ".", "<eos>"]);
    assert_eq!(words("\u{201C}No,\u{201D} he said\u{2014}twice (Mr. Smith didn\u{2019}t)."), [
        "``", "no", ",", "''", "he", "said", "--", "twice", "(", "mr.", "smith", "didn't", ")", ".", "<eos>"
    ]);
    // eval --input reads a file the same way
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("typed.txt");
    fs::write(&p, "Hello, world!\n").unwrap();
    assert_eq!(read_input_file(&p, tok).unwrap(), tok.encode("hello , world !\n").unwrap());

    // The corpus's own text (already cut) reads as the corpus reads it: only words outside the
    // vocabulary with punctuation attached (a rare abbreviation "calif.") change.
    let text = embedded_brown().unwrap();
    let [_, valid, _] = split_brown_documents(&brown_documents(&text));
    let typed = tok.encode(&valid).unwrap();
    let d = typed.len().abs_diff(c.valid.len()) as f64 / c.valid.len() as f64;
    eprintln!("Brown valid split: {} corpus tokens, {} through the typed rule", c.valid.len(), typed.len());
    assert!(d < 0.005, "the typed rule changes {:.3}% of the valid split's length", 100.0 * d);
    let unk = |ids: &[u32]| tok.unk_share(ids).unwrap();
    assert!(unk(&typed) <= unk(&c.valid), "{} > {}", unk(&typed), unk(&c.valid));
}

#[test]
fn checkpoints_carry_the_split_rule() {
    // word-level corpora of other formats keep the whitespace split
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.txt");
    fs::write(&p, "a b, c.\n".repeat(40)).unwrap();
    let c = load_corpus(&spec(Some(&p), Format::Text, Level::Word)).unwrap();
    assert_eq!(c.tokenizer.split(), Split::Whitespace);
    let ids: Vec<u32> = ["b,", "c.", "<eos>"].iter().map(|w| c.tokenizer.id(w).unwrap()).collect();
    assert_eq!(c.tokenizer.encode("b, c.").unwrap(), ids);
    assert_eq!(c.tokenizer.unk_share(&c.tokenizer.encode("b, zz").unwrap()), Some(1.0 / 3.0));
}
