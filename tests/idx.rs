//! The IDX reader (MNIST files): small files written here, plain and gzipped, read back;
//! every malformed case gives an error naming the file and the problem.

use std::io::Write;
use std::path::{Path, PathBuf};

use rnnlens::data::idx::{self, Idx, Mnist};

/// 3 images of 2×2 pixels and their labels.
const IMAGES: [u8; 12] = [0, 255, 1, 2, 10, 20, 30, 40, 7, 7, 7, 7];
const LABELS: [u8; 3] = [3, 0, 9];

fn header(ty: u8, dims: &[u32]) -> Vec<u8> {
    let mut v = vec![0, 0, ty, dims.len() as u8];
    for d in dims {
        v.extend_from_slice(&d.to_be_bytes());
    }
    v
}

fn idx_file(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = header(0x08, dims);
    v.extend_from_slice(data);
    v
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn images_bytes() -> Vec<u8> {
    idx_file(&[3, 2, 2], &IMAGES)
}

fn labels_bytes() -> Vec<u8> {
    idx_file(&[3], &LABELS)
}

/// The error of `r`, with anyhow's whole context chain.
fn err<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
    format!("{:#}", r.expect_err("expected an error"))
}

/// Asserts the error message holds every one of `parts`.
fn assert_err_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "error {msg:?} lacks {p:?}");
    }
}

fn check_mnist(m: &Mnist) {
    assert_eq!((m.len(), m.rows, m.cols, m.pixels()), (3, 2, 2, 4));
    assert_eq!(m.images, IMAGES);
    assert_eq!(m.labels, LABELS);
    assert_eq!(m.image(1), &[10, 20, 30, 40]);
}

#[test]
fn parse_plain_and_gzipped() {
    let want = Idx {
        dims: vec![3, 2, 2],
        data: IMAGES.to_vec(),
    };
    assert_eq!(idx::parse(&images_bytes(), "x").unwrap(), want);
    assert_eq!(idx::parse(&gzip(&images_bytes()), "x").unwrap(), want);
    assert_eq!(want.to_bytes().unwrap(), images_bytes());
    let labels = idx::parse(&labels_bytes(), "l").unwrap();
    assert_eq!(labels.dims, [3]);
    assert_eq!(labels.data, LABELS);
    // zero-sized arrays are well-formed IDX
    let empty = idx::parse(&idx_file(&[0, 28, 28], &[]), "e").unwrap();
    assert_eq!(empty.dims, [0, 28, 28]);
    assert!(empty.is_empty());
    // two concatenated gzip members are one stream
    let b = images_bytes();
    let mut two = gzip(&b[..7]);
    two.extend(gzip(&b[7..]));
    assert_eq!(idx::parse(&two, "x").unwrap(), want);
}

#[test]
fn load_mnist_plain_and_gzipped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // train: plain files
    write(d, "train-images-idx3-ubyte", &images_bytes());
    write(d, "train-labels-idx1-ubyte", &labels_bytes());
    // test: gzipped files
    write(d, "t10k-images-idx3-ubyte.gz", &gzip(&images_bytes()));
    write(d, "t10k-labels-idx1-ubyte.gz", &gzip(&labels_bytes()));
    check_mnist(&idx::load_mnist(d, "train").unwrap());
    check_mnist(&idx::load_mnist(d, "test").unwrap());
    // read() of single files, plain and gzipped
    let r = idx::read(&d.join("t10k-images-idx3-ubyte.gz")).unwrap();
    assert_eq!(r.dims, [3, 2, 2]);
    // a file named .gz that is in fact plain still reads (detection is by magic bytes)
    let d2 = tempfile::tempdir().unwrap();
    write(d2.path(), "train-images-idx3-ubyte.gz", &images_bytes());
    write(d2.path(), "train-labels-idx1-ubyte", &gzip(&labels_bytes()));
    check_mnist(&idx::load_mnist(d2.path(), "train").unwrap());
}

#[test]
fn malformed_headers() {
    let name = "bad-file-idx3";
    let cases: Vec<(Vec<u8>, Vec<&str>)> = vec![
        (vec![], vec!["truncated IDX header", "0 bytes"]),
        (vec![0, 0, 8], vec!["truncated IDX header", "3 bytes"]),
        (
            vec![1, 0, 8, 1, 0, 0, 0, 0],
            vec!["not an IDX file", "01 00", "expected 00 00"],
        ),
        (
            b"PK\x03\x04rest".to_vec(),
            vec!["not an IDX file", "zip archive"],
        ),
        (header(0x07, &[1]), vec!["unknown IDX element type 0x07"]),
        (
            header(0x0D, &[1]),
            vec!["type 0x0D (f32) is not supported: MNIST images and labels are unsigned bytes"],
        ),
        (header(0x0E, &[1]), vec!["type 0x0E (f64) is not supported"]),
        (header(0x0B, &[1]), vec!["type 0x0B (i16) is not supported"]),
        (header(0x08, &[]), vec!["0 dimensions"]),
        (
            vec![0, 0, 8, 3, 0, 0, 0, 3, 0, 0],
            vec![
                "truncated IDX header",
                "3 dimensions need 16 header bytes",
                "10 bytes",
            ],
        ),
    ];
    for (bytes, parts) in cases {
        let msg = err(idx::parse(&bytes, name));
        assert_err_has(&msg, &[name]);
        assert_err_has(&msg, &parts);
    }
}

#[test]
fn data_length_mismatch_and_overflow() {
    let name = "imgs";
    // truncated data: expected vs found
    let mut b = images_bytes();
    b.pop();
    let msg = err(idx::parse(&b, name));
    assert_err_has(
        &msg,
        &[name, "3×2×2", "need 12 bytes", "found 11", "truncated"],
    );
    // extra bytes
    let mut b = images_bytes();
    b.push(0);
    let msg = err(idx::parse(&b, name));
    assert_err_has(&msg, &[name, "need 12 bytes", "found 13", "extra bytes"]);
    // absurd but non-overflowing sizes: compared against the data at hand, nothing allocated
    let msg = err(idx::parse(&idx_file(&[u32::MAX, u32::MAX], &[1, 2]), name));
    assert_err_has(&msg, &[name, "found 2"]);
    // a product that overflows usize
    let msg = err(idx::parse(
        &idx_file(&[u32::MAX, u32::MAX, u32::MAX, u32::MAX, u32::MAX], &[1]),
        name,
    ));
    assert_err_has(&msg, &[name, "overflow"]);
    // 255 dimensions of size 1 with one byte: fine
    let dims = vec![1u32; 255];
    let ok = idx::parse(&idx_file(&dims, &[42]), name).unwrap();
    assert_eq!(ok.dims.len(), 255);
    assert_eq!(ok.data, [42]);
}

#[test]
fn gzip_problems() {
    let name = "images.gz";
    let gz = gzip(&images_bytes());
    // truncated stream
    let msg = err(idx::parse(&gz[..gz.len() / 2], name));
    assert_err_has(&msg, &[name, "corrupt gzip stream"]);
    // damaged deflate data / checksum
    let mut bad = gz.clone();
    let k = bad.len() - 6;
    bad[k] ^= 0xff;
    let msg = err(idx::parse(&bad, name));
    assert_err_has(&msg, &[name, "corrupt gzip stream"]);
    // only the magic bytes
    let msg = err(idx::parse(&[0x1f, 0x8b], name));
    assert_err_has(&msg, &[name, "corrupt gzip stream"]);
    // a decompressed IDX that is itself malformed names the file too
    let msg = err(idx::parse(&gzip(&[0, 0, 8]), name));
    assert_err_has(
        &msg,
        &[name, "after gzip decompression", "truncated IDX header"],
    );
    // the decompressed-size limit
    let big = idx_file(&[4096], &[0u8; 4096]);
    let msg = err(idx::parse_with_limit(&gzip(&big), name, 1000));
    assert_err_has(&msg, &[name, "more than 1000 bytes"]);
    assert!(idx::parse_with_limit(&gzip(&big), name, big.len() as u64).is_ok());
    // the default limit is 1 GiB
    assert_eq!(idx::MAX_DECOMPRESSED, 1 << 30);
}

#[test]
fn read_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope-idx1-ubyte");
    let msg = err(idx::read(&missing));
    assert_err_has(&msg, &["nope-idx1-ubyte", "does not exist"]);
    let msg = err(idx::read(dir.path()));
    assert_err_has(&msg, &["is a directory"]);
    let p = write(
        dir.path(),
        "broken-idx3-ubyte",
        &[0, 0, 0x0C, 1, 0, 0, 0, 1, 0, 0, 0, 0],
    );
    let msg = err(idx::read(&p));
    assert_err_has(
        &msg,
        &[&p.display().to_string(), "type 0x0C (i32) is not supported"],
    );
    let p = write(dir.path(), "broken.gz", &[0x1f, 0x8b, 8, 0, 1, 2, 3]);
    let msg = err(idx::read(&p));
    assert_err_has(&msg, &[&p.display().to_string(), "corrupt gzip stream"]);
}

#[test]
fn load_mnist_checks() {
    let split_err = |images: Vec<u8>, labels: Vec<u8>| -> String {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "train-images-idx3-ubyte", &images);
        write(dir.path(), "train-labels-idx1-ubyte", &labels);
        err(idx::load_mnist(dir.path(), "train"))
    };
    // images not 3-D
    let msg = split_err(idx_file(&[3, 4], &IMAGES), labels_bytes());
    assert_err_has(
        &msg,
        &["train-images-idx3-ubyte", "must be 3-D", "2 dimensions"],
    );
    // labels not 1-D
    let msg = split_err(images_bytes(), idx_file(&[3, 1], &LABELS));
    assert_err_has(&msg, &["train-labels-idx1-ubyte", "must be 1-D"]);
    // counts differ
    let msg = split_err(images_bytes(), idx_file(&[2], &LABELS[..2]));
    assert_err_has(
        &msg,
        &[
            "train-labels-idx1-ubyte",
            "2 labels",
            "3 images",
            "train-images-idx3-ubyte",
        ],
    );
    // a label of 10
    let msg = split_err(images_bytes(), idx_file(&[3], &[1, 10, 2]));
    assert_err_has(&msg, &["train-labels-idx1-ubyte", "label 1 is 10", "0..=9"]);
    // no images
    let msg = split_err(idx_file(&[0, 2, 2], &[]), idx_file(&[0], &[]));
    assert_err_has(&msg, &["train-images-idx3-ubyte", "no image pixels"]);
    // a malformed file inside the directory names it
    let msg = split_err(images_bytes(), vec![0, 0, 8]);
    assert_err_has(&msg, &["train-labels-idx1-ubyte", "truncated IDX header"]);

    // missing files, missing directory, bad split name
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "train-images-idx3-ubyte", &images_bytes());
    let msg = err(idx::load_mnist(dir.path(), "train"));
    assert_err_has(&msg, &["has no train-labels-idx1-ubyte"]);
    let msg = err(idx::load_mnist(dir.path(), "test"));
    assert_err_has(&msg, &["has no t10k-images-idx3-ubyte"]);
    let msg = err(idx::load_mnist(&dir.path().join("absent"), "train"));
    assert_err_has(&msg, &["absent", "does not exist"]);
    let msg = err(idx::load_mnist(dir.path(), "valid"));
    assert_err_has(&msg, &["unknown MNIST split \"valid\""]);
}

#[test]
fn encode_rejects_bad_arrays() {
    assert!(idx::encode(&[], &[]).is_err());
    assert!(idx::encode(&[2], &[1]).is_err());
    assert!(idx::encode(&[1usize << 33], &[]).is_err());
    assert_eq!(
        idx::encode(&[2], &[5, 6]).unwrap(),
        [0, 0, 8, 1, 0, 0, 0, 2, 5, 6]
    );
}
