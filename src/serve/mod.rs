//! `rnnlens serve`: a local web application to look inside a checkpoint. Type a text and see
//! the predictions, the hidden state and the cell's own analysis (RAN weights, RWA/RDA
//! attention, ISAN contributions); select a span and find where the corpus's states match it;
//! see the ISAN's κ_word map; compare the runs' curves.
//!
//! The page, its script and styles are compiled into the binary ([`page`]); the API
//! ([`api`]) answers JSON. The server reads only the files named on its command line and the
//! run directories under `--runs`: a request names a run by the name the list gave, never by
//! a path. Every computation runs off the network threads, at most [`MAX_BUSY`] at a time; a
//! bad request gets a JSON error with the limit it broke, and nothing a request holds can
//! stop the server.

pub mod api;
mod json;
pub mod page;
pub mod store;
pub mod task;

use crate::data;
use crate::explain::report::Distributions;
use crate::kernels::runtime::Runtime;
use crate::model::lm::Lm;
use anyhow::{bail, Context, Result};
use api::{App, Reader};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// Computations running at once; further requests wait their turn.
pub const MAX_BUSY: usize = 4;
/// The largest request body, in bytes.
pub const MAX_BODY: usize = 256 * 1024;

/// The options of `rnnlens serve`.
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// Checkpoint directory written by `rnnlens train`
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// A text file to search for state patterns, tokenized as the checkpoint's corpus was; its
    /// states are computed once and kept in CHECKPOINT.explorer/ [default: none: no search]
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Port to listen on; 0 picks a free one
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Address to listen on (anything but loopback exposes the model to the network)
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub host: IpAddr,
    /// Folder whose run directories (those with a metrics.jsonl) the Runs view lists
    #[arg(long, default_value = "runs")]
    pub runs: PathBuf,
    #[command(flatten)]
    pub runtime: Runtime,
    /// No progress bar while the corpus's states are computed
    #[arg(long)]
    pub quiet: bool,
    /// An ISAN's unigram and bigram distributions (set against its biases and readout in every
    /// explained text): counted on that text, or on the training split of the corpus the
    /// model was trained on, as the ISAN paper counts them (counted once, at the start)
    #[arg(long, value_enum, default_value_t = Distributions::Text)]
    pub distributions: Distributions,
}

/// Load the model (and the corpus's states), then serve until interrupted.
pub fn run(a: &ServeArgs) -> Result<()> {
    a.runtime.start()?;
    // The explorer computes on the server's threads, for the whole process.
    crate::kernels::precision::set_process(a.runtime.precision);
    // The streaming reading of every text, as eval and Python read it.
    let (carry, bptt) = (true, 100);
    if crate::tasks::is_task_checkpoint(&a.checkpoint) {
        let tm = crate::tasks::TaskModel::load(&a.checkpoint)?;
        if let Some(path) = &a.corpus {
            bail!("{} is a model of the {} task: its inputs come from the task, not from a corpus ({} is for language models); type them in the page", a.checkpoint.display(), tm.meta.name, path.display());
        }
        if a.distributions == Distributions::Train {
            bail!("--distributions train counts a language model's training split; {} is a model of the {} task", a.checkpoint.display(), tm.meta.name);
        }
        let app = App { dir: a.checkpoint.clone(), reader: Reader::Task(tm), carry, bptt, store: None, corpus_name: None, runs: a.runs.clone(), kappa_map: Default::default(), distributions: None };
        return listen(a, app);
    }
    let lm = Lm::load(&a.checkpoint)?;
    let distributions = a.distributions.counted_on(&lm, &a.checkpoint).context("--distributions train")?;
    if let Some(d) = &distributions {
        eprintln!("distributions: an ISAN's unigram and bigram counted on {} ({} tokens)", d.0, d.1.len());
    }
    let store = match &a.corpus {
        Some(path) => {
            let tokens = data::read_input_file(path, &lm.tok)?;
            let s = store::open(&a.checkpoint, &lm, tokens, carry, bptt, a.quiet)?;
            eprintln!(
                "corpus: {} tokens of {}, states {} {}",
                s.tokens.len(),
                path.display(),
                if s.loaded { "read from" } else { "computed and kept in" },
                s.path.display()
            );
            Some(s)
        }
        None => None,
    };
    listen(a, App {
        dir: a.checkpoint.clone(),
        reader: Reader::Lm(lm),
        carry,
        bptt,
        store,
        corpus_name: a.corpus.as_ref().map(|p| p.display().to_string()),
        runs: a.runs.clone(),
        kappa_map: Default::default(),
        distributions,
    })
}

/// Serve `app` on the address of `a` until interrupted.
fn listen(a: &ServeArgs, app: App) -> Result<()> {
    let app = Arc::new(app);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(a.host, a.port))
            .await
            .with_context(|| format!("cannot listen on {}:{} (another server there? --port 0 picks a free port)", a.host, a.port))?;
        let addr = listener.local_addr()?;
        println!("rnnlens serve: open http://{addr}/ in a browser (Ctrl-C stops the server)");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        axum::serve(listener, router(app))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("the server stopped")
    })
}

/// The routes: the page, then the API.
pub fn router(app: Arc<App>) -> Router {
    let busy = Arc::new(tokio::sync::Semaphore::new(MAX_BUSY));
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", page::INDEX) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", page::SCRIPT) }))
        .route("/app.css", get(|| async { asset("text/css; charset=utf-8", page::STYLE) }))
        .route("/api/model", get(|State((app, _)): State<(Arc<App>, Arc<tokio::sync::Semaphore>)>| async move { ok(app.model()) }))
        .route(
            "/api/explain",
            post(|State((app, busy)): State<(Arc<App>, Arc<tokio::sync::Semaphore>)>, body: Result<Bytes, BytesRejection>| async move {
                let body = match body {
                    Ok(b) => b,
                    Err(r) => return unreadable(r),
                };
                compute(busy, move || app.explain(&parse(&body)?)).await
            }),
        )
        .route(
            "/api/search",
            post(|State((app, busy)): State<(Arc<App>, Arc<tokio::sync::Semaphore>)>, body: Result<Bytes, BytesRejection>| async move {
                let body = match body {
                    Ok(b) => b,
                    Err(r) => return unreadable(r),
                };
                compute(busy, move || app.search(&parse(&body)?)).await
            }),
        )
        .route(
            "/api/runs",
            get(|State((app, busy)): State<(Arc<App>, Arc<tokio::sync::Semaphore>)>, Query(q): Query<HashMap<String, String>>| async move {
                let select: Vec<String> = q.get("select").map(|s| s.split(',').filter(|x| !x.is_empty()).map(String::from).collect()).unwrap_or_default();
                compute(busy, move || app.runs(&select)).await
            }),
        )
        .route(
            "/api/kappa-map",
            get(|State((app, busy)): State<(Arc<App>, Arc<tokio::sync::Semaphore>)>| async move { compute(busy, move || app.kappa_map()).await }),
        )
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such page or API call (the API: GET /api/model, POST /api/explain, POST /api/search, GET /api/runs, GET /api/kappa-map)") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state((app, busy))
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [(header::CONTENT_TYPE, kind), (header::CONTENT_SECURITY_POLICY, "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:")],
        body,
    )
        .into_response()
}

fn ok(v: Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn error(code: StatusCode, msg: &str) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], json!({ "error": msg }).to_string()).into_response()
}

/// A body that could not be read (one over [`MAX_BODY`]: 413) as a JSON error with the limit,
/// as every other error of the API, instead of the framework's plain text.
fn unreadable(r: BytesRejection) -> Response {
    let msg = if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        format!("the request is larger than the {MAX_BODY} bytes the explorer accepts: send a shorter text")
    } else {
        format!("the request could not be read: {}", r.body_text())
    };
    (r.status(), [(header::CONTENT_TYPE, "application/json")], json!({ "error": msg, "limit_bytes": MAX_BODY }).to_string()).into_response()
}

/// A request body as JSON of `T`, or the parser's message.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| anyhow::anyhow!("malformed request: {e}"))
}

/// Run `f` on a blocking thread once one of the [`MAX_BUSY`] places is free; its error (or
/// its panic, which cannot take the server down) becomes a JSON error.
async fn compute(busy: Arc<tokio::sync::Semaphore>, f: impl FnOnce() -> Result<Value> + Send + 'static) -> Response {
    let Ok(_permit) = busy.acquire_owned().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
    };
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => ok(v),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, &format!("{e:#}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &format!("internal error (please report it): {e}")),
    }
}
