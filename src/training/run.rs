//! One training run in progress: [`Run::start`] sets it up (settings, data, model, a fresh or
//! resumed state), [`Run::epoch`] trains one epoch window by window and ends it (validation,
//! checkpoint), [`Run::finish`] ends the run (a `--max-steps` stop measured and saved) and
//! returns what it reached. `train_in` is the three in order.

use super::*;
use std::ops::Range;
use super::windows::{Window, Windows};

/// Everything a run keeps between its windows: what is fixed from the start, and what each
/// window and checkpoint moves on.
pub(super) struct Run {
    cfg: TrainConfig,
    /// carried state across windows (the cell's policy made explicit)
    carry: bool,
    /// no progress output (also on every rank but the first)
    quiet: bool,
    corpus: Corpus,
    word_level: bool,
    model: Model,
    /// the global batch, this rank's rows of it and their count
    batch: usize,
    rows: Range<usize>,
    local: usize,
    drop: Dropout,
    /// the training split batchified, and its windows per epoch
    data: Vec<u32>,
    windows: usize,
    unigram: Score,
    title: String,
    max_steps: u64,
    /// the step this process started from, the wall clock it started at and the seconds the
    /// run had before
    start_step: u64,
    t_run: Instant,
    wall0: f64,
    /// a mean loss per token above this is divergence, not learning
    diverged_above: f64,
    valid_every: Option<u64>,
    /// seconds spent validating inside epochs (`valid_every`), kept out of tokens/s
    inside_valid: f64,
    /// the device the run computes on, and its half of each step
    engine: Engine,
    device: Box<dyn Windows>,
    rng: Rng,
    opt: Optimizer,
    state: State<f32>,
    st: TrainerState,
    records: Vec<Record>,
    w: Vec<f32>,
    g: Vec<f32>,
    ws: ModelWs<f32>,
    sampled: Option<SampledSoftmax<f32>>,
    /// this rank's columns of a window (under MPI)
    x_rows: Vec<u32>,
    y_rows: Vec<u32>,
    /// the latest validation, and (trained from the initial state every window) the same
    /// validation with the state reset as in training
    valid: Score,
    windowed: Option<Score>,
}

/// This rank's rows of every batch and its dropout, checked against the ranks under mpirun.
fn shard(cfg: &TrainConfig, dist: &dist::Dist) -> Result<(Range<usize>, Dropout)> {
    let batch = cfg.batch_size;
    let mut drop = cfg.dropout()?;
    if dist.size > 1 {
        if !batch.is_multiple_of(dist.size) {
            bail!("the batch of {batch} rows does not divide evenly among the {} ranks; give a --batch-size that does", dist.size);
        }
        if cfg.sampled_softmax > 0 {
            bail!("--sampled-softmax is not supported under MPI yet; train it in one process");
        }
        drop.shard = Some((batch, dist.rows(batch).start, dist.rows(batch).end));
    }
    Ok((dist.rows(batch), drop))
}

/// The run's first line about its model.
fn describe_model(cfg: &TrainConfig, model: &Model, threads: usize) -> String {
    format!(
        "model: {} {:?}, {}, {} recurrent / {} total parameters; {} threads",
        cfg.cell,
        cfg.hidden_size,
        match model.config.embedding_size {
            Some(e) => format!("embedding {e}"),
            None => "no embedding (switches on the symbol)".to_string(),
        },
        model.recurrent_params(),
        model.n_params,
        threads
    )
}

/// The curves' title: cell, sizes, the output folder's name and the level.
fn run_title(cfg: &TrainConfig, word_level: bool) -> String {
    let level = if word_level { "word level" } else { "character level" };
    let out = cfg.out.file_name().map_or(String::new(), |n| n.to_string_lossy().to_string());
    format!("{} {:?}, {out}: {level}", cfg.cell, cfg.hidden_size)
}

impl Run {
    /// Settle the settings, read the data, build the model, and start fresh or from the saved
    /// run; says what it set up.
    pub(super) fn start(cfg: TrainConfig, start: Start, quiet: bool) -> Result<Run> {
        let (cfg, resumed) = settle(cfg, start)?;
        let carry = cfg.carry_state();
        let threads = cfg.runtime.start_on(cfg.on.device)?;
        // Under mpirun each rank trains rows `rows` of every batch; rank 0 alone speaks and writes.
        let dist = dist::get();
        let quiet = quiet || !dist.is_root();
        let say = |s: String| {
            if !quiet {
                eprintln!("{s}");
            }
        };

        let corpus = load_data(&cfg, &say)?;
        let word_level = corpus.tokenizer.level == Level::Word;
        let model = build_model(&cfg, &corpus, quiet)?;
        let batch = cfg.batch_size;
        let (rows, drop) = shard(&cfg, dist)?;
        let local = rows.len();

        // Fresh start or the saved run.
        let mut rng = Rng::new(cfg.seed);
        let mut opt = Optimizer::new(cfg.optimizer, model.n_params);
        let mut state = model.initial_state::<f32>(local);
        let mut st = fresh_state(&cfg);
        // The history so far: empty for a fresh run; a resumed run's, as its checkpoint saved it.
        let mut records: Vec<Record> = Vec::new();
        let w = match &resumed {
            None => model.init_params(cfg.init(), &mut rng),
            Some((dir, saved)) => {
                let r = resume_saved((dir, saved), &cfg, &model, &corpus.tokenizer, (&mut opt, &mut state), batch, &say)?;
                (rng, st, records) = (r.1, r.2, r.3);
                r.0
            }
        };

        say(describe_model(&cfg, &model, threads));
        let unigram = unigram_score(&corpus.train, &corpus.valid, model.vocab_size());
        say(format!("baseline: add-one unigram model on valid: {}", unigram.describe(word_level)));
        // The curves' reference line: first in a fresh run's history, and added to one saved
        // before runs recorded it.
        if !records.iter().any(|r| matches!(r, Record::Baseline { .. })) {
            records.insert(0, Record::unigram(unigram.mean(), word_level));
        }

        let mut data = Vec::new();
        let len = batchify(&corpus.train, batch, &mut data);
        let windows = (len - 1) / cfg.bptt;
        let sampled = (cfg.sampled_softmax > 0).then(|| {
            SampledSoftmax::new(cfg.sampled_softmax, &corpus.train, model.vocab_size(), cfg.bptt * batch, model.top_width())
        });
        // The sampled loss estimates the NLL with a bias: say which one is reported.
        if sampled.is_some() {
            say(format!(
                "sampled softmax: {} draws per step from the unigram distribution beside the batch's targets; the training loss shown is the sampled loss, validation uses the full softmax",
                cfg.sampled_softmax
            ));
        }
        let title = run_title(&cfg, word_level);
        // Resolved once and saved, so that a resumed run validates where the uninterrupted one would.
        let valid_every = cfg.valid_every_steps(windows);
        st.config.valid_every = Some(valid_every.unwrap_or(0));
        // The run's clock counts the engine's start (a GPU's device and kernels) too.
        let t_run = Instant::now();
        let engine = Engine::open(cfg.on.device, cfg.runtime.precision)?;
        let device = open_windows(&engine, &cfg, &model, (&w, &opt), (local, &drop), dist.size)?;
        say(engine.describe());
        Ok(Run {
            carry,
            quiet,
            word_level,
            batch,
            rows,
            local,
            drop,
            data,
            windows,
            unigram,
            title,
            max_steps: cfg.max_steps.unwrap_or(u64::MAX),
            start_step: st.step,
            t_run,
            wall0: st.seconds,
            diverged_above: (model.vocab_size() as f64).ln() + DIVERGED_NATS,
            valid_every,
            inside_valid: 0.0,
            engine,
            device,
            rng,
            opt,
            state,
            st,
            records,
            g: vec![0f32; model.n_params],
            w,
            ws: ModelWs::default(),
            sampled,
            x_rows: Vec::new(),
            y_rows: Vec::new(),
            valid: Score::default(),
            windowed: None,
            cfg,
            corpus,
            model,
        })
    }

    /// Whether the run goes on: epochs left and no `--max-steps` stop yet.
    pub(super) fn going(&self) -> bool {
        self.st.epoch < self.cfg.epochs && !self.st.finished
    }

    fn say(&self, s: String) {
        if !self.quiet {
            eprintln!("{s}");
        }
    }

    /// Seconds of the whole run, earlier processes' included.
    fn wall(&self) -> f64 {
        self.wall0 + self.t_run.elapsed().as_secs_f64()
    }

    fn loss_name(&self) -> &'static str {
        if self.sampled.is_some() { "sampled loss" } else { "loss" }
    }

    fn describe_train(&self, nll: f64, tokens: u64) -> String {
        match self.sampled.is_some() {
            true => format!("sampled loss {:.3}", nll / tokens.max(1) as f64),
            false => Score { nll, tokens: tokens as usize }.describe(self.word_level),
        }
    }

    /// The checkpoint in `--out`: weights, optimizer, every rank's rows of the state, counters,
    /// history and curves (all ranks take part; rank 0 writes).
    fn save(&self) -> Result<()> {
        let (dir, w, model, dist) = (&self.cfg.out, &self.w, &self.model, dist::get());
        if let Some(s) = model.slots.iter().find(|s| w[s.range()].iter().any(|x| !x.is_finite())) {
            bail!("refusing to save: {} holds non-finite values; {}", s.name, rundir::kept(dir));
        }
        let mut st = self.st.clone();
        let (seed, pos) = self.rng.position();
        st.rng_seed = seed;
        st.rng_pos = pos.to_string();
        st.optimizer_steps = self.opt.t;
        st.loss_scale = self.opt.loss_scale;
        let mut tensors = Vec::new();
        if self.opt.kind == OptimizerKind::Adam {
            tensors.push(NamedTensor::new("optimizer.m", vec![self.opt.m.len()], self.opt.m.clone()));
            tensors.push(NamedTensor::new("optimizer.v", vec![self.opt.v.len()], self.opt.v.clone()));
        }
        // Every rank's rows of the state, in order (all ranks take part; rank 0 writes).
        for (l, s) in self.state.layers.iter().enumerate() {
            tensors.push(NamedTensor::new(format!("state.{l}"), vec![self.batch, s.len() / self.local], dist.gather_rows(s, &model.cells[l].state_blocks(), self.batch)));
        }
        if !dist.is_root() {
            return Ok(());
        }
        let svg = metrics::run_svg(&self.title, &self.records, self.word_level);
        rundir::save(dir, model, w, &self.corpus.tokenizer, &st, &tensors, &self.records, svg)
    }

    /// The training report of the steps since the last one (none if there were none); `lr` is
    /// the epoch's rate before any halving by skipped batches.
    fn report(&mut self, lr: f64) {
        let seconds = self.wall();
        let st = &mut self.st;
        let lr = lr * st.lr_scale;
        if st.log_tokens > 0 {
            let loss = st.log_nll / st.log_tokens as f64;
            self.records.push(Record::Train { step: st.step, epoch: st.epoch + 1, tokens: st.tokens, seconds: metrics::round_ms(seconds), loss, lr, sampled: self.sampled.is_some() });
        }
        st.log_nll = 0.0;
        st.log_tokens = 0;
    }

    /// Train the current epoch from its current window to its end (validated, saved, told),
    /// or to the `--max-steps` stop (then `st.finished`).
    pub(super) fn epoch(&mut self, observe: &mut dyn FnMut(&Progress) -> ControlFlow<()>) -> Result<()> {
        let cfg = &self.cfg;
        let lr = scheduled_lr(cfg.lr, cfg.lr_decay, cfg.decay_start, self.st.epoch);
        if self.st.window == 0 {
            self.state = self.model.initial_state(self.local);
            self.st.epoch_nll = 0.0;
            self.st.epoch_tokens = 0;
        }
        let windows = self.windows;
        let bar = if self.quiet { ProgressBar::hidden() } else { ProgressBar::new(windows as u64) };
        bar.set_style(
            ProgressStyle::with_template("epoch {prefix} {bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}")
                .expect("valid template"),
        );
        bar.set_prefix(format!("{}/{}", self.st.epoch + 1, self.cfg.epochs));
        bar.set_position(self.st.window as u64);
        let clock = EpochClock { t_epoch: Instant::now(), first_window: self.st.window, inside_valid0: self.inside_valid };
        let mut t_report = Instant::now();
        let mut consecutive_skips = 0;
        while self.st.window < windows {
            if self.st.step >= self.max_steps {
                self.st.finished = true;
                bar.finish_and_clear();
                return Ok(());
            }
            let applied = self.window(lr, &mut consecutive_skips)?;
            if self.st.step.is_multiple_of(LOG_EVERY) {
                self.report(lr);
            }
            bar.inc(1);
            let st = &self.st;
            let now = Progress::Step { step: st.step, epoch: st.epoch + 1, window: st.window, windows, loss: applied.unwrap_or(f64::NAN), lr: lr * st.lr_scale };
            if observe(&now).is_break() {
                return Err(Stopped { step: st.step, kept: rundir::kept(&self.cfg.out) }.into());
            }
            if applied.is_none() {
                continue;
            }
            // Every 10 windows, and whenever a report is due (a window can take seconds: a
            // large model, a slow device), so that a run without a terminal is never silent
            // for much more than 30 s.
            if self.st.window.is_multiple_of(10) || self.st.window == windows || t_report.elapsed().as_secs() >= 30 {
                self.progress_message(&bar, &clock, &mut t_report);
            }
            // Points of the curves inside the epoch (its end and a --max-steps stop validate
            // anyway): the streaming score alone, for the record.
            if self.valid_every.is_some_and(|k| self.st.step.is_multiple_of(k)) && self.st.window < windows && self.st.step < self.max_steps {
                bar.set_message("validating…");
                self.validate_inside()?;
            }
            if self.cfg.save_every.is_some_and(|k| self.st.step.is_multiple_of(k)) && self.st.window < windows {
                self.st.seconds = self.wall();
                self.device.sync(&mut self.w, &mut self.opt, &mut self.state)?;
                self.save()?;
            }
        }
        bar.finish_and_clear();
        self.end_epoch(lr, &clock, observe)
    }

    /// One window: its gradient, and the optimizer's step where the result can be applied
    /// (returns the window's mean loss); a divergent window is skipped (`None`, the rate
    /// halved, the state reset) or stops the run as `--on-divergence` says.
    fn window(&mut self, lr: f64, consecutive_skips: &mut usize) -> Result<Option<f64>> {
        let (cfg, batch, dist) = (&self.cfg, self.batch, dist::get());
        let i = self.st.window * cfg.bptt;
        let (mut x, mut y) = (&self.data[i * batch..(i + cfg.bptt) * batch], &self.data[(i + 1) * batch..(i + 1 + cfg.bptt) * batch]);
        if dist.size > 1 {
            // This rank's columns of the time-major window.
            for (src, dst) in [(x, &mut self.x_rows), (y, &mut self.y_rows)] {
                dst.clear();
                src.chunks_exact(batch).for_each(|t| dst.extend_from_slice(&t[self.rows.clone()]));
            }
            (x, y) = (&self.x_rows, &self.y_rows);
        }
        // Tokens of the whole (global) window.
        let window_tokens = cfg.bptt * batch;
        if !self.carry {
            self.state = self.model.initial_state(self.local);
        }
        let clipping = cfg.clipping();
        let (model, drop) = (&self.model, &self.drop);
        let (mut nll, mut norm) = self.device.window(Window {
            model,
            w: &self.w,
            g: &mut self.g,
            xy: (x, y),
            local: self.local,
            state: &mut self.state,
            ws: &mut self.ws,
            drop: (drop, &mut self.rng),
            sampled: self.sampled.as_mut(),
            clipping: if dist.size > 1 { (None, None) } else { clipping },
        })?;
        if dist.size > 1 {
            // The window's loss over every rank; if it is finite every rank has its
            // gradient, and their mean (each is of its rows' mean loss) is clipped here.
            let mut v = [nll];
            dist.sum_f64(&mut v);
            nll = v[0];
            if nll.is_finite() {
                dist.mean_f32(&mut self.g);
                norm = Some(clip(&mut self.g, clipping.0, clipping.1));
            } else {
                norm = None;
            }
        }
        let mean_loss = nll / window_tokens as f64;
        let st = &mut self.st;
        if let Some(what) = diagnose_window(model, (nll, mean_loss, norm), self.diverged_above, self.device.on_host(), &self.g, &self.ws) {
            let at = format!("at step {} (epoch {}, window {})", st.step + 1, st.epoch + 1, st.window + 1);
            if cfg.on_divergence == OnDivergence::Stop || *consecutive_skips >= MAX_CONSECUTIVE_SKIPS {
                bail!(
                    "{what} {at}; no weights were changed and nothing was written: {} (try a lower --lr, clipping, or --on-divergence skip)",
                    rundir::kept(&cfg.out)
                );
            }
            // Skip the batch, halve the rate, and start the next window from a clean state.
            *consecutive_skips += 1;
            st.lr_scale *= 0.5;
            st.skipped += 1;
            self.state = model.initial_state(self.local);
            if dist.is_root() {
                eprintln!("warning: {what} {at}; batch skipped, learning rate now {:.3e}", lr * st.lr_scale);
            }
            st.step += 1;
            st.window += 1;
            st.tokens += window_tokens as u64;
            return Ok(None);
        }
        *consecutive_skips = 0;
        self.device.step(&mut self.opt, &mut self.w, &self.g, lr * st.lr_scale);
        st.step += 1;
        st.window += 1;
        st.epoch_nll += nll;
        st.epoch_tokens += window_tokens as u64;
        st.tokens += window_tokens as u64;
        st.log_nll += nll;
        st.log_tokens += window_tokens as u64;
        Ok(Some(mean_loss))
    }

    /// The bar's message (the epoch's loss so far and tokens/s), and without a terminal a line
    /// every 30 seconds instead.
    fn progress_message(&self, bar: &ProgressBar, clock: &EpochClock, t_report: &mut Instant) {
        let st = &self.st;
        let secs = clock.t_epoch.elapsed().as_secs_f64() - (self.inside_valid - clock.inside_valid0);
        let tps = (st.window - clock.first_window) as f64 * (self.cfg.bptt * self.batch) as f64 / secs.max(1e-9);
        let mean = st.epoch_nll / st.epoch_tokens as f64;
        let m = match (self.sampled.is_some(), self.word_level) {
            (true, _) => String::new(),
            (false, true) => format!(" (ppl {:.1})", mean.exp()),
            (false, false) => format!(" (bpc {:.3})", mean / std::f64::consts::LN_2),
        };
        let loss_name = self.loss_name();
        bar.set_message(format!("{loss_name} {mean:.3}{m}, {tps:.0} tokens/s"));
        // Without a terminal the bar is hidden: report progress as lines instead.
        if !self.quiet && bar.is_hidden() && t_report.elapsed().as_secs() >= 30 {
            let eta = bar.eta().as_secs();
            eprintln!(
                "epoch {}/{}: window {}/{}, {loss_name} {mean:.3}{m}, {tps:.0} tokens/s, epoch ends in {}:{:02}:{:02}",
                st.epoch + 1,
                self.cfg.epochs,
                st.window,
                self.windows,
                eta / 3600,
                eta / 60 % 60,
                eta % 60
            );
            *t_report = Instant::now();
        }
    }

    /// A validation inside an epoch (`--valid-every`), recorded as a point of the curves.
    fn validate_inside(&mut self) -> Result<()> {
        self.device.sync(&mut self.w, &mut self.opt, &mut self.state)?;
        let t_valid = Instant::now();
        let v = super::validate(&self.engine, &self.model, &self.w, &self.corpus.valid, &self.cfg, true, true)?;
        self.inside_valid += t_valid.elapsed().as_secs_f64();
        // The carried state is how such a run reads: its divergence stops the run here as at
        // an epoch's end. A run trained with resets may run away over the split (said at
        // its end); a point JSON cannot hold is left out of the curve.
        if self.carry {
            check_valid(&v, self.diverged_above, self.st.step, &self.cfg.out)?;
        }
        if v.mean().is_finite() {
            let st = &self.st;
            self.records.push(Record::valid(st.step, st.epoch + 1, st.tokens, self.wall(), (v.mean(), None), self.word_level));
        }
        Ok(())
    }

    /// The full validation the run ends an epoch or a stop with, into `valid` (and `windowed`).
    fn validate_end(&mut self) -> Result<()> {
        self.device.sync(&mut self.w, &mut self.opt, &mut self.state)?;
        (self.valid, self.windowed) = validate_run(&self.engine, (&self.model, &self.w, &self.corpus.valid), &self.cfg, self.carry, self.quiet)?;
        check_valid(self.windowed.as_ref().unwrap_or(&self.valid), self.diverged_above, self.st.step, &self.cfg.out)
    }

    /// f16's loss scale and the steps its overflows skipped so far, for a line that reports a
    /// stretch of training (empty in f32 and bf16); as of the device's last `sync`.
    fn loss_scale_note(&self) -> String {
        self.opt.loss_scale.map(|s| format!(", f16 loss scale {} ({} steps skipped so far)", s.scale, s.skipped)).unwrap_or_default()
    }

    /// The end of an epoch: validated, said, recorded, saved, then told.
    fn end_epoch(&mut self, lr: f64, clock: &EpochClock, observe: &mut dyn FnMut(&Progress) -> ControlFlow<()>) -> Result<()> {
        self.report(lr);
        let secs = clock.t_epoch.elapsed().as_secs_f64() - (self.inside_valid - clock.inside_valid0);
        let t_valid = Instant::now();
        self.validate_end()?;
        let st = &self.st;
        let train_mean = st.epoch_nll / st.epoch_tokens.max(1) as f64;
        let f16 = self.loss_scale_note();
        self.say(format!(
            "epoch {}/{}: train {}, valid {} ({} tokens){}, lr {lr:.3e}, {:.0} tokens/s, {:.0}s (+{:.0}s validation){f16}",
            st.epoch + 1,
            self.cfg.epochs,
            self.describe_train(st.epoch_nll, st.epoch_tokens),
            self.valid.describe(self.word_level),
            self.valid.tokens,
            self.windowed.as_ref().map(|w| format!(", with the state reset every window as trained {}", w.describe(self.word_level))).unwrap_or_default(),
            (st.window - clock.first_window) as f64 * (self.cfg.bptt * self.batch) as f64 / secs.max(1e-9),
            secs,
            t_valid.elapsed().as_secs_f64() + (self.inside_valid - clock.inside_valid0)
        ));
        let (valid, wall) = (self.valid.mean(), self.wall());
        let st = &mut self.st;
        st.history.push(EpochRecord { epoch: st.epoch + 1, step: st.step, train_nll: train_mean, valid_nll: valid, valid_tokens: self.valid.tokens, lr, seconds: secs });
        self.records.push(Record::valid(st.step, st.epoch + 1, st.tokens, wall, (valid, self.windowed.map(|w| w.mean())), self.word_level));
        let now = Progress::Valid { step: st.step, epoch: st.epoch + 1, nll: valid };
        st.epoch += 1;
        st.window = 0;
        st.epoch_nll = 0.0;
        st.epoch_tokens = 0;
        self.state = self.model.initial_state(self.local);
        self.st.seconds = self.wall();
        self.save()?;
        // Told after the epoch's checkpoint, so a stop here keeps the whole epoch.
        if observe(&now).is_break() {
            return Err(Stopped { step: self.st.step, kept: rundir::kept(&self.cfg.out) }.into());
        }
        Ok(())
    }

    /// The end of the run: one stopped by `--max-steps` inside an epoch is measured and saved;
    /// the validation it ends with (a run trained with resets also says how it reads with
    /// them); the trained model.
    pub(super) fn finish(mut self, observe: &mut dyn FnMut(&Progress) -> ControlFlow<()>) -> Result<Outcome> {
        let word_level = self.word_level;
        if self.st.finished {
            // Stopped by --max-steps inside an epoch: measure what was reached and save it.
            let secs = self.t_run.elapsed().as_secs_f64() - self.inside_valid;
            let trained = self.st.step - self.start_step;
            let lr = scheduled_lr(self.cfg.lr, self.cfg.lr_decay, self.cfg.decay_start, self.st.epoch);
            self.report(lr);
            self.validate_end()?;
            // A run resumed where it had already stopped measures the same point again: once is enough.
            let (st, valid) = (&self.st, self.valid);
            if !self.records.iter().any(|r| matches!(r, Record::Valid { step, .. } if *step == st.step)) {
                self.records.push(Record::valid(st.step, st.epoch + 1, st.tokens, self.wall(), (valid.mean(), self.windowed.map(|w| w.mean())), word_level));
            }
            // The run ends here either way; the observer hears the validation it ends with.
            let _ = observe(&Progress::Valid { step: st.step, epoch: st.epoch + 1, nll: valid.mean() });
            self.say(format!(
                "stopped after {} steps (epoch {}, window {}/{}): train {} (this epoch so far), valid {} ({} tokens); {:.0} tokens/s over {trained} steps{}",
                st.step,
                st.epoch + 1,
                st.window,
                self.windows,
                self.describe_train(st.epoch_nll, st.epoch_tokens),
                valid.describe(word_level),
                valid.tokens,
                trained as f64 * (self.cfg.bptt * self.batch) as f64 / secs.max(1e-9),
                self.loss_scale_note(),
            ));
            self.st.seconds = self.wall();
            self.save()?;
        } else if self.valid.tokens == 0 {
            self.device.sync(&mut self.w, &mut self.opt, &mut self.state)?;
            (self.valid, self.windowed) = validate_run(&self.engine, (&self.model, &self.w, &self.corpus.valid), &self.cfg, self.carry, self.quiet)?;
        }
        // Validation carries the state through the split, as every reader scores a model; one
        // trained from the initial state every window may do worse so: said, not hidden.
        if let Some(windowed) = self.windowed {
            if windowed.mean() < self.valid.mean() {
                self.say(format!(
                    "note: trained with its state reset every {} tokens, this model validates worse with the state carried through the split ({}) than with the reset ({})",
                    self.cfg.bptt,
                    self.valid.describe(word_level),
                    windowed.describe(word_level)
                ));
            }
        }
        self.say(format!("checkpoint: {} ({:.0}s in all)", self.cfg.out.display(), self.t_run.elapsed().as_secs_f64()));
        Ok(Outcome { lm: Lm { model: self.model, w: self.w, tok: self.corpus.tokenizer }, valid: self.valid, unigram: self.unigram, history: self.st.history })
    }
}

/// When the epoch began, at which window, and the seconds validated inside epochs by then.
struct EpochClock {
    t_epoch: Instant,
    first_window: usize,
    inside_valid0: f64,
}

/// This rank's windows (`local` rows of each batch, `drop` its dropout) on the engine's device,
/// from the weights and the optimizer's state `(w, opt)`; under mpirun (`ranks` > 1) the
/// gradient is the ranks' mean, made on the host whichever device computed each share.
#[cfg_attr(not(feature = "gpu"), allow(unused_variables))]
fn open_windows(engine: &Engine, cfg: &TrainConfig, model: &Model, (w, opt): (&[f32], &Optimizer), (local, drop): (usize, &Dropout), ranks: usize) -> Result<Box<dyn Windows>> {
    #[cfg(feature = "gpu")]
    if let Some(gpu) = engine.gpu() {
        return Ok(Box::new(super::windows_gpu::GpuWindows::new(gpu.clone(), cfg, model, (w, opt), (local, *drop), ranks > 1)?));
    }
    Ok(Box::new(super::windows::CpuWindows))
}
