//! The explain reports of a RAN and an ISAN trained by rnnlens's own commands on the embedded
//! corpus open in headless Chromium, and the screenshot shows their figures (the arrows, the
//! κ stack). Needs Debian's `chromium`, so it is ignored (with that reason) by a plain
//! `cargo test`; `.ci/run` installs Chromium and runs it with `--ignored`.

use std::path::Path;
use std::process::Command;

fn rnnlens(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).output().expect("run rnnlens");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rnnlens {args:?} failed:\n{err}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn chromium() -> Option<&'static str> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().find(|p| Path::new(p).exists())
}

/// Screenshot `html` and return the PNG's size in bytes.
fn screenshot(browser: &str, html: &Path, png: &Path, profile: &Path) -> u64 {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", profile.display()),
            "--window-size=1400,1600",
            &format!("--screenshot={}", png.display()),
            &format!("file://{}", html.display()),
        ])
        .output()
        .expect("run chromium");
    assert!(png.exists(), "no screenshot: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::metadata(png).unwrap().len()
}

#[test]
#[ignore = "needs Debian's chromium; .ci/run installs it and runs this with --ignored"]
fn ran_and_isan_reports_render_in_headless_chromium() {
    let browser = chromium().expect("Debian's chromium is not installed (apt-get install chromium)");
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // A RAN at word level and an ISAN at character level, on the embedded Brown corpus.
    let ran = t.join("ran");
    rnnlens(&[
        "train", "--cell", "ran-tanh", "--embedding-size", "32", "--hidden-size", "32", "--max-steps", "60",
        "--sample-length", "0", "--quiet", "--out", ran.to_str().unwrap(),
    ]);
    let isan = t.join("isan");
    rnnlens(&[
        "train", "--cell", "isan", "--level", "char", "--hidden-size", "32", "--max-steps", "60", "--bptt", "50",
        "--sample-length", "0", "--quiet", "--out", isan.to_str().unwrap(),
    ]);
    for (ck, text, must) in [
        (&ran, "the jury said it did find that many of the voters were not there .", "<path"),
        (&isan, "the annual reve", "κ"),
    ] {
        let rep = t.join(format!("{}-report", ck.file_name().unwrap().to_string_lossy()));
        rnnlens(&["explain", "--checkpoint", ck.to_str().unwrap(), "--text", text, "--report", rep.to_str().unwrap()]);
        let html = std::fs::read_to_string(rep.join("index.html")).unwrap();
        assert!(html.contains("<svg") && html.contains(must), "{}", rep.display());
        let png = t.join(format!("{}.png", ck.file_name().unwrap().to_string_lossy()));
        let size = screenshot(browser, &rep.join("index.html"), &png, &t.join("profile"));
        // A page that failed to render (blank, or an error page) compresses to a few KB.
        assert!(size > 40_000, "{}: screenshot of only {size} bytes", png.display());
    }
}
