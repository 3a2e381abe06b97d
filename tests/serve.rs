//! `rnnlens serve` as a user meets it: started on a free loopback port over a checkpoint
//! trained here and a corpus, then asked over HTTP. The API's numbers equal `explain`'s JSON,
//! a search for a span of the corpus finds it first, bad requests get clear errors with the
//! limits, and 200 concurrent requests are all answered. The browser test drives the page in
//! headless Chromium (ignored where Chromium is missing; `.ci/run` runs it) and saves a
//! screenshot of every view.

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn rnnlens(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rnnlens")).args(args).output().expect("run rnnlens");
    assert!(out.status.success(), "rnnlens {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `rnnlens serve ARGS --port 0` refused before it listens: its stderr (asserted to fail, and
/// not by a panic).
fn refused(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rnnlens")).arg("serve").args(args).args(["--port", "0"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success() && !err.contains("panicked"), "serve {args:?} was not refused: {err}");
    err
}

/// A server that is stopped when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rnnlens"))
        .arg("serve")
        .args(args)
        .args(["--port", "0", "--quiet"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start rnnlens serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Server { child, port }
}

/// One HTTP/1.1 request; returns the status and the body.
fn http(port: u16, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default();
    // Chunked bodies: keep the JSON between the chunk sizes.
    let body = if text.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(&body) } else { body };
    (status, body)
}

fn dechunk(b: &str) -> String {
    let mut out = String::new();
    let mut rest = b;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

fn json(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (s, b) = http(port, method, path, body.as_bytes());
    (s, serde_json::from_str(&b).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {b}")))
}

/// Training steps of the models: 40 in a test; more for the screenshots of docs/explorer.md
/// (scripts/explorer-shots.sh sets RNNLENS_SHOT_STEPS).
fn steps() -> String {
    std::env::var("RNNLENS_SHOT_STEPS").unwrap_or_else(|_| "40".into())
}

const TEXT: &str = "the jury said it did find that the city of atlanta had been served well";

/// A word-level RAN trained briefly, and a corpus that begins with [`TEXT`] (so its states
/// there are the text's own) followed by the start of the embedded Brown corpus's test file.
fn ran_model(t: &Path) -> (PathBuf, PathBuf) {
    let ck = t.join("runs").join("ran");
    let steps = steps();
    rnnlens(&[
        "train", "--cell", "ran-tanh", "--embedding-size", "16", "--hidden-size", "24", "--max-steps", &steps,
        "--sample-length", "0", "--quiet", "--out", ck.to_str().unwrap(),
    ]);
    let corpus = t.join("corpus.txt");
    let mut text = format!("{TEXT}\n");
    for k in 0..400 {
        text.push_str(&format!("line {k} of a corpus where the jury said it was served and the city had been found well\n"));
    }
    std::fs::write(&corpus, text).unwrap();
    (ck, corpus)
}

#[test]
fn the_api_gives_explains_numbers_finds_a_planted_span_refuses_bad_requests_and_answers_200_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (ck, corpus) = ran_model(t);
    let runs = t.join("runs");
    let srv = serve(&["--checkpoint", ck.to_str().unwrap(), "--corpus", corpus.to_str().unwrap(), "--runs", runs.to_str().unwrap()]);
    let p = srv.port;
    // The page and its parts come from the binary.
    let (s, page) = http(p, "GET", "/", b"");
    assert_eq!(s, 200);
    assert!(page.contains("rnnlens explorer") && page.contains("/app.js"));
    assert_eq!(http(p, "GET", "/app.js", b"").0, 200);

    // The RAN's arrows equal explain's JSON for the same text.
    let report = t.join("report");
    rnnlens(&["explain", "--checkpoint", ck.to_str().unwrap(), "--text", TEXT, "--report", report.to_str().unwrap()]);
    let want: Value = serde_json::from_str(&std::fs::read_to_string(report.join("ran_layer0_arrows.json")).unwrap()).unwrap();
    let (s, got) = json(p, "POST", "/api/explain", &serde_json::json!({ "text": TEXT, "components": [2, 5] }).to_string());
    assert_eq!(s, 200, "{got}");
    let layer = &got["ran"][0];
    assert_eq!(layer["arrows"], want["arrows"]);
    assert_eq!(layer["reconstruction_relative_error"], want["reconstruction_relative_error"]);
    assert_eq!(layer["components"].as_array().unwrap().len(), 2);
    let n = got["labels"].as_array().unwrap().len();
    assert_eq!(got["predictions"].as_array().unwrap().len(), n);
    // ln p of each next token is a log-probability, and its top candidate is at least as likely.
    for pr in got["predictions"].as_array().unwrap()[..n - 1].iter() {
        let lnp = pr["next_lnp"].as_f64().unwrap();
        let best = pr["top"][0][1].as_f64().unwrap();
        assert!(lnp <= 0.0 && best >= lnp - 1e-9, "{pr}");
    }

    // Typed text is cut as the corpus was (the model is Brown's), and the <unk> share is given.
    let (s, got) = json(p, "POST", "/api/explain", &serde_json::json!({ "text": "The jury said, \"Fine.\" Zqxw!" }).to_string());
    assert_eq!(s, 200, "{got}");
    let labels: Vec<&str> = got["labels"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(&labels[..9], ["the", "jury", "said", ",", "``", "fine", ".", "''", "<unk>"], "{labels:?}");
    assert_eq!(got["split"], "brown");
    assert!((got["unknown_share"].as_f64().unwrap() - 1.0 / labels.len() as f64).abs() < 1e-12, "{got}");

    // A span of the text, which the corpus begins with, is found first, where it is.
    let req = serde_json::json!({"text": TEXT, "start": 3, "end": 6, "threshold": -1.0, "top": 5});
    let (s, found) = json(p, "POST", "/api/search", &req.to_string());
    assert_eq!(s, 200, "{found}");
    let m = &found["matches"][0];
    assert_eq!(m["start"], 3, "{found}");
    assert!(m["distance"].as_f64().unwrap() < 2e-3, "f16 rounding only: {m}");
    assert_eq!(found["units"].as_array().unwrap().len(), 24);
    // Units named by the user.
    let req = serde_json::json!({"text": TEXT, "start": 3, "end": 6, "units": [0, 7], "top": 3});
    let (s, found) = json(p, "POST", "/api/search", &req.to_string());
    assert_eq!((s, &found["matches"][0]["start"]), (200, &Value::from(3)), "{found}");

    // Bad requests: clear messages with the limits, never a crash.
    for (path, body, needle) in [
        ("/api/explain", "{\"text\": 5}".to_string(), "malformed request"),
        ("/api/explain", "not json".to_string(), "malformed request"),
        ("/api/explain", "{\"text\": \"x\", \"path\": \"/etc/passwd\"}".to_string(), "unknown field"),
        ("/api/explain", serde_json::json!({"text": "the ".repeat(1500)}).to_string(), "at most 1000"),
        ("/api/explain", serde_json::json!({"text": TEXT, "components": [24]}).to_string(), "unit 24 does not exist"),
        ("/api/search", serde_json::json!({"text": TEXT, "start": 5, "end": 99, "threshold": 0.0}).to_string(), "not inside the text"),
        ("/api/search", serde_json::json!({"text": TEXT, "start": 0, "end": 60, "threshold": 0.0}).to_string(), "not inside the text"),
        ("/api/search", serde_json::json!({"text": TEXT, "start": 0, "end": 2, "threshold": 9.0}).to_string(), "lower the threshold"),
        ("/api/search", serde_json::json!({"text": TEXT, "start": 0, "end": 2, "layer": 3, "threshold": 0.0}).to_string(), "layer 3 does not exist"),
    ] {
        let (s, e) = json(p, "POST", path, &body);
        assert_eq!(s, 400, "{path} {body}: {e}");
        assert!(e["error"].as_str().unwrap().contains(needle), "{path}: {e} should say {needle:?}");
    }
    let (s, e) = json(p, "GET", "/api/runs?select=../../etc", "");
    assert!(s == 400 && e["error"].as_str().unwrap().contains("no run named"), "{e}");
    let (s, e) = json(p, "GET", "/api/kappa-map", "");
    assert!(s == 400 && e["error"].as_str().unwrap().contains("ISAN"), "{e}");
    assert_eq!(json(p, "GET", "/etc/passwd", "").0, 404);
    // A body over the limit is refused before it is read, as JSON with the limit, like every
    // other error of the API (the page shows its message).
    for path in ["/api/explain", "/api/search"] {
        let (s, body) = http(p, "POST", path, &vec![b'a'; 300 * 1024]);
        assert_eq!(s, 413, "{path}");
        let e: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{path}: 413 without JSON: {body}"));
        assert!(e["error"].as_str().unwrap().contains("larger than the 262144 bytes"), "{e}");
        assert_eq!(e["limit_bytes"], 262144);
    }

    // The runs under --runs, with their curves.
    let (s, r) = json(p, "GET", "/api/runs?select=ran", "");
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["runs"][0]["name"], "ran");
    assert!(r["svg"].as_str().unwrap().starts_with("<svg"));

    // 200 requests at once, explains and searches among them: every one answered.
    let handles: Vec<_> = (0..200)
        .map(|k| {
            std::thread::spawn(move || match k % 4 {
                0 => http(p, "POST", "/api/explain", serde_json::json!({"text": TEXT}).to_string().as_bytes()).0,
                1 => http(p, "POST", "/api/search", serde_json::json!({"text": TEXT, "start": 1, "end": 3, "threshold": -1.0}).to_string().as_bytes()).0,
                2 => http(p, "GET", "/api/model", b"").0,
                _ => http(p, "GET", "/", b"").0,
            })
        })
        .collect();
    let codes: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(codes.iter().all(|&c| c == 200), "{codes:?}");

    // The states were kept beside the checkpoint: a second server reads them.
    drop(srv);
    let kept: Vec<_> = std::fs::read_dir(t.join("runs").join("ran.explorer")).unwrap().flatten().collect();
    assert_eq!(kept.len(), 1);
    let before = std::fs::metadata(kept[0].path()).unwrap().modified().unwrap();
    let srv = serve(&["--checkpoint", ck.to_str().unwrap(), "--corpus", corpus.to_str().unwrap()]);
    let (s, found) = json(srv.port, "POST", "/api/search", &serde_json::json!({"text": TEXT, "start": 3, "end": 6, "threshold": -1.0}).to_string());
    assert_eq!((s, &found["matches"][0]["start"]), (200, &Value::from(3)));
    assert_eq!(std::fs::metadata(kept[0].path()).unwrap().modified().unwrap(), before);
}

/// An RDA trained briefly on the multicopy task (`rnnlens task`).
fn task_model(t: &Path) -> PathBuf {
    let out = t.join("task");
    let steps = steps();
    rnnlens(&["task", "multicopy", "--cell", "rda", "--steps", &steps, "--length", "40", "--hidden-size", "16", "--batch-size", "8", "--out", out.to_str().unwrap()]);
    out.join("rda")
}

/// A task model is explored like a language model: its input typed as `explain --task-input`
/// takes it or drawn from a seed, the attention weights equal `explain`'s, each step's output
/// beside its target; what only a language model has is refused with what to do instead.
#[test]
fn the_api_explains_a_task_model_as_explain_does() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ck = task_model(t);
    let srv = serve(&["--checkpoint", ck.to_str().unwrap()]);
    let p = srv.port;
    let (s, m) = json(p, "GET", "/api/model", "");
    assert_eq!(s, 200, "{m}");
    assert_eq!((m["task"]["name"].as_str(), m["task"]["length"].as_u64(), m["corpus"].is_null()), (Some("multicopy"), Some(40), true), "{m}");
    assert!(m["task"]["input"].as_str().unwrap().contains("seed N"), "{m}");

    let report = t.join("report");
    rnnlens(&["explain", "--checkpoint", ck.to_str().unwrap(), "--example", "3", "--report", report.to_str().unwrap()]);
    let want: Value = serde_json::from_str(&std::fs::read_to_string(report.join("attention_layer0_arrows.json")).unwrap()).unwrap();
    let (s, got) = json(p, "POST", "/api/explain", r#"{"text": "seed 3"}"#);
    assert_eq!(s, 200, "{got}");
    assert_eq!(got["attention"][0]["arrows"], want["arrows"]);
    assert_eq!(got["task"]["source"], "the example drawn from seed 3");
    let steps = got["task"]["steps"].as_array().unwrap();
    assert_eq!((got["labels"].as_array().unwrap().len(), steps.len()), (40, 40));
    // The multicopy task scores every step; the right ones are those explain counts.
    let right = steps.iter().filter(|o| o["right"] == true).count();
    let summary = std::fs::read_to_string(report.join("summary.txt")).unwrap();
    assert!(summary.contains(&format!("{:.1}% of the scored outputs right", 100.0 * right as f64 / 40.0)), "{right} right; {summary}");
    assert_eq!(got["summary"].as_str().unwrap().lines().nth(1), summary.lines().nth(1));

    // A typed input, then what a task model has not or cannot read.
    let (s, got) = json(p, "POST", "/api/explain", r#"{"text": "1234_____!____"}"#);
    assert_eq!((s, got["labels"].as_array().unwrap().len()), (200, 14), "{got}");
    let (s, got) = json(p, "POST", "/api/explain", r#"{"text": "12x4"}"#);
    assert_eq!(s, 400);
    assert!(got["error"].as_str().unwrap().contains("'x' is not a symbol of the multicopy task"), "{got}");
    let (s, got) = json(p, "POST", "/api/search", r#"{"text": "1234", "start": 0, "end": 2}"#);
    assert_eq!(s, 400);
    assert!(got["error"].as_str().unwrap().contains("the corpus search belongs to language models"), "{got}");
    drop(srv);
    let err = refused(&["--checkpoint", ck.to_str().unwrap(), "--corpus", "README.md"]);
    assert!(err.contains("is a model of the multicopy task"), "{err}");
    let err = refused(&["--checkpoint", ck.to_str().unwrap(), "--distributions", "train"]);
    assert!(err.contains("--distributions train counts a language model's training split"), "{err}");
}

/// An ISAN explored with `--distributions train` sets its biases and readout against the
/// unigram and bigram of the training split (as `explain --distributions train` does), the
/// same summary as the command line's; refused before listening for a model without them.
#[test]
fn the_explorer_counts_an_isans_distributions_on_the_training_split_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let ck = t.join("isan");
    let steps = steps();
    rnnlens(&["train", "--cell", "isan", "--level", "char", "--hidden-size", "16", "--batch-size", "4", "--bptt", "12", "--max-steps", &steps,
        "--threads", "1", "--sample-length", "0", "--quiet", "--out", ck.to_str().unwrap()]);
    let text = "the jury said it did find";
    let cli = |which: &str| rnnlens(&["explain", "--checkpoint", ck.to_str().unwrap(), "--text", text, "--threads", "1", "--distributions", which]);
    for which in ["text", "train"] {
        let srv = serve(&["--checkpoint", ck.to_str().unwrap(), "--threads", "1", "--distributions", which]);
        let (_, m) = json(srv.port, "GET", "/api/model", "");
        assert_eq!(m["distributions"]["of"].as_str(), (which == "train").then_some("the training split"), "{m}");
        let (s, got) = json(srv.port, "POST", "/api/explain", &serde_json::json!({ "text": text }).to_string());
        assert_eq!(s, 200, "{got}");
        let summary = got["summary"].as_str().unwrap();
        let counted = summary.lines().find(|l| l.contains("unigram and bigram counted on")).unwrap_or_else(|| panic!("{summary}"));
        let want = if which == "train" { "counted on the training split (" } else { "counted on the explained text (" };
        assert!(counted.contains(want), "{which}: {counted}");
        // the readout's lines are the command line's for the same text and counting
        let readout = |s: &str| s.lines().filter(|l| l.contains("unigram")).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(readout(summary), readout(&cli(which)), "{which}");
    }
    let (ran, _) = ran_model(t);
    let err = refused(&["--checkpoint", ran.to_str().unwrap(), "--distributions", "train"]);
    assert!(err.contains("--distributions train") && err.contains("are an ISAN's symbol statistics"), "{err}");
}

#[test]
fn serve_refuses_what_it_cannot_serve_before_listening() {
    let tmp = tempfile::tempdir().unwrap();
    let err = refused(&["--checkpoint", tmp.path().join("none").to_str().unwrap()]);
    assert!(err.contains("none"), "{err}");
}

// ---- the page in a real browser ------------------------------------------------------------

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().map(PathBuf::from).find(|p| p.exists())
}

/// Where the screenshots go: $RNNLENS_SCREENSHOTS (docs/explorer/ when the docs are made),
/// else a folder of the test's own.
fn shots_dir(t: &Path) -> PathBuf {
    let d = std::env::var_os("RNNLENS_SCREENSHOTS").map(PathBuf::from).unwrap_or_else(|| t.join("shots"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The element `sel` of `page`, once it exists (30 s at most).
async fn wait(page: &chromiumoxide::Page, sel: &str) -> chromiumoxide::Element {
    for _ in 0..300 {
        if let Ok(e) = page.find_element(sel).await {
            return e;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // What the page says instead: its error lines, the selection and the search's answer.
    let said = page
        .evaluate("JSON.stringify(['error', 'search-error', 'selection', 'search-results'].map(id => [id, document.getElementById(id) ? document.getElementById(id).textContent : null]))")
        .await
        .ok()
        .and_then(|v| v.into_value::<String>().ok());
    panic!("{sel} never appeared (the page says: {said:?})");
}

/// Wait until the page's `condition` (JavaScript) holds (30 s at most).
async fn until(page: &chromiumoxide::Page, condition: &str) {
    for _ in 0..300 {
        if page.evaluate(condition).await.ok().and_then(|v| v.into_value::<bool>().ok()) == Some(true) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let said = page.evaluate("document.getElementById('selection').textContent").await.ok().and_then(|v| v.into_value::<String>().ok());
    panic!("{condition} never held (the selection says: {said:?})");
}

async fn shot(page: &chromiumoxide::Page, path: PathBuf) {
    let png = page.screenshot(chromiumoxide::page::ScreenshotParams::builder().full_page(true).build()).await.unwrap();
    std::fs::write(path, png).unwrap();
}

/// Open the explorer of `port`, type `text` and read it.
async fn open_and_read(browser: &chromiumoxide::Browser, port: u16, text: &str) -> chromiumoxide::Page {
    let page = browser.new_page(format!("http://127.0.0.1:{port}/")).await.unwrap();
    page.wait_for_navigation().await.unwrap();
    wait(&page, "#input").await.click().await.unwrap().type_str(text).await.unwrap();
    wait(&page, "#read").await.click().await.unwrap();
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Debian's chromium; .ci/run installs it and runs this with --ignored"]
async fn the_page_in_headless_chromium_shows_explains_numbers_and_the_search_finds_the_span() {
    use chromiumoxide::{Browser, BrowserConfig};
    use futures::StreamExt;
    let browser_path = chromium().expect("Debian's chromium is not installed (apt-get install chromium)");
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let shots = shots_dir(t);
    let (ck, corpus) = ran_model(t);
    let runs = t.join("runs");
    let srv = serve(&["--checkpoint", ck.to_str().unwrap(), "--corpus", corpus.to_str().unwrap(), "--runs", runs.to_str().unwrap()]);
    let report = t.join("report");
    rnnlens(&["explain", "--checkpoint", ck.to_str().unwrap(), "--text", TEXT, "--report", report.to_str().unwrap()]);
    let want: Value = serde_json::from_str(&std::fs::read_to_string(report.join("ran_layer0_arrows.json")).unwrap()).unwrap();

    let config = BrowserConfig::builder()
        .chrome_executable(browser_path)
        .no_sandbox()
        .window_size(1400, 1800)
        .user_data_dir(t.join("profile"))
        .arg("--disable-gpu")
        .build()
        .unwrap();
    let (mut browser, mut handler) = Browser::launch(config).await.unwrap();
    let driver = tokio::spawn(async move { while handler.next().await.is_some() {} });

    let page = open_and_read(&browser, srv.port, TEXT).await;
    wait(&page, "#arrows-0 tr[data-t=\"5\"]").await;
    // What the page shows, row by row: the predecessor and its weight.
    let shown: String = page
        .evaluate("JSON.stringify([...document.querySelectorAll('#arrows-0 tr[data-t]')].map(r => [+r.dataset.t, r.querySelector('.pred').textContent, r.querySelector('.weight').textContent]))")
        .await
        .unwrap()
        .into_value()
        .unwrap();
    let shown: Vec<(usize, String, String)> = serde_json::from_str(&shown).unwrap();
    let arrows = want["arrows"].as_array().unwrap();
    assert_eq!(shown.len(), arrows.len() - 1, "every position after the first has a row");
    for (t, pred, weight) in &shown {
        let a = &arrows[*t];
        assert_eq!(pred, &format!("{} {}", a["predecessor"], a["predecessor_token"].as_str().unwrap()), "t={t}");
        // The weights are f32s; JSON parsers may differ in the last bit of an f64.
        assert_eq!(weight.parse::<f64>().unwrap() as f32, a["predecessor_weight"].as_f64().unwrap() as f32, "t={t}");
    }
    shot(&page, shots.join("ran.png")).await;
    // Typing, then Read before the typing pause (600 ms) ran out, reads the text once: a second
    // read would redraw it and drop the span selected meanwhile.
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let reads: u64 = page
        .evaluate("performance.getEntriesByType('resource').filter(e => e.name.endsWith('/api/explain')).length")
        .await
        .unwrap()
        .into_value()
        .unwrap();
    assert_eq!(reads, 1, "the text was read {reads} times");

    // Select tokens 3..5 by clicking them, search, and find the corpus's copy first.
    wait(&page, ".tok[data-t=\"3\"]").await.click().await.unwrap();
    wait(&page, ".tok[data-t=\"5\"]").await.click().await.unwrap();
    // Each click replaces the selection's button: take the one the second click made.
    until(&page, "document.getElementById('selection').textContent.startsWith('span 3..6')").await;
    wait(&page, "#search-this").await.click().await.unwrap();
    let first = wait(&page, "#search-results .match").await;
    assert_eq!(first.attribute("data-start").await.unwrap().as_deref(), Some("3"));
    shot(&page, shots.join("search.png")).await;

    // The runs view lists the run and draws its curves.
    wait(&page, "nav button[data-view=\"runs\"]").await.click().await.unwrap();
    wait(&page, "#runs-list input").await;
    wait(&page, "#runs-go").await.click().await.unwrap();
    wait(&page, "#runs-svg svg").await;
    shot(&page, shots.join("runs.png")).await;
    drop(srv);

    // An RDA and an ISAN: their views draw, and the ISAN's κ_word map has its words.
    for (cell, level) in [("rda", "word"), ("isan", "char")] {
        let ck = t.join("runs").join(cell);
        let steps = steps();
        let mut args = vec!["train", "--cell", cell, "--level", level, "--hidden-size", "24", "--max-steps", &steps, "--bptt", "50"];
        if cell != "isan" {
            args.extend(["--embedding-size", "16"]);
        }
        args.extend(["--sample-length", "0", "--quiet", "--out", ck.to_str().unwrap()]);
        rnnlens(&args);
        let srv = serve(&["--checkpoint", ck.to_str().unwrap(), "--corpus", corpus.to_str().unwrap()]);
        let page = open_and_read(&browser, srv.port, TEXT).await;
        wait(&page, if cell == "rda" { "#arrows-0 tr[data-t=\"5\"]" } else { "#cell canvas" }).await;
        shot(&page, shots.join(format!("{cell}.png"))).await;
        if cell == "isan" {
            wait(&page, "nav button[data-view=\"map\"]").await.click().await.unwrap();
            wait(&page, "#map svg circle").await;
            let n: u64 = page.evaluate("document.querySelectorAll('#map svg circle').length").await.unwrap().into_value().unwrap();
            assert!(n >= 3, "{n} words on the map");
            shot(&page, shots.join("isan-map.png")).await;
        }
    }

    // A task model: an example drawn from a seed, its steps marked right or wrong, its RDA's
    // attention drawn, and no corpus search offered.
    let ck = task_model(t);
    let srv = serve(&["--checkpoint", ck.to_str().unwrap()]);
    let page = open_and_read(&browser, srv.port, "seed 3").await;
    wait(&page, "#arrows-0 tr[data-t=\"5\"]").await;
    let marked: u64 = page.evaluate("document.querySelectorAll('#tokens .tok.right, #tokens .tok.wrong').length").await.unwrap().into_value().unwrap();
    assert_eq!(marked, 40, "the multicopy task scores every step");
    let search_hidden: bool = page.evaluate("document.querySelector('nav button[data-view=\"search\"]').hidden").await.unwrap().into_value().unwrap();
    assert!(search_hidden);
    shot(&page, shots.join("task.png")).await;
    drop(srv);
    browser.close().await.unwrap();
    let _ = driver.await;
}
