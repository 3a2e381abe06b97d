//! No allocation inside the time loop: a counting global allocator shows that a whole training
//! step (forward, loss, backward, clipping, Adam) of every cell, once its workspaces exist,
//! allocates fewer extra times on a window of 100 steps than on one of 4 than there are extra
//! steps (96), so no time step allocates. (The count is not exactly equal: the GEMMs over a
//! whole sequence, for the weight gradients, may allocate a packing buffer once they are large
//! enough, which depends on the window; those are per call, never per step.)

use rnnlens::model::{layer_configs, Init, Model, ModelConfig, ModelWs, TokenizerConfig};
use rnnlens::cells::registry::{self, reads_tokens, CellOptions};
use rnnlens::training::optim::{Optimizer, OptimizerKind};
use rnnlens::kernels::rng::Rng;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations of the second of two identical training steps on a `steps`-long window.
fn allocations_of_a_step(cell: &str, steps: usize) -> usize {
    let (vocab, batch) = (11, 3);
    let symbols = reads_tokens(cell);
    let layers = layer_configs(cell, if symbols { vocab } else { 8 }, &[24], None, CellOptions::default()).unwrap();
    let model = Model::new(ModelConfig {
        format: "rnnlens".into(),
        format_version: 1,
        vocab_size: vocab,
        tokenizer: TokenizerConfig { level: "char".into(), normalize: "none".into(), split: None },
        embedding_size: (!symbols).then_some(8),
        layers,
        cell_name: cell.into(),
        input_size: None,
    })
    .unwrap();
    let mut rng = Rng::new(7);
    let mut w = model.init_params(Init::Xavier, &mut rng);
    let mut g = vec![0f32; model.n_params];
    let mut opt = Optimizer::new(OptimizerKind::Adam, model.n_params);
    let x: Vec<u32> = (0..steps * batch).map(|_| rng.below(vocab as u64) as u32).collect();
    let y: Vec<u32> = (0..steps * batch).map(|_| rng.below(vocab as u64) as u32).collect();
    let mut state = model.initial_state(batch);
    let mut ws = ModelWs::default();
    let mut step = |count: bool| {
        COUNTING.store(count, Ordering::Relaxed);
        let before = ALLOCS.load(Ordering::Relaxed);
        let (_, norm) = rnnlens::training::window_gradient(&model, &w, &mut g, (&x, &y), batch, &mut state, &mut ws, None, None, (Some(5.0), None));
        assert!(norm.is_some_and(f64::is_finite), "{cell}: gradient not finite");
        opt.step(&mut w, &g, 1e-3);
        COUNTING.store(false, Ordering::Relaxed);
        ALLOCS.load(Ordering::Relaxed) - before
    };
    step(false);
    step(true)
}

#[test]
fn a_training_step_allocates_nothing_per_time_step() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    pool.install(|| {
        for cell in registry::names() {
            let (short, long) = (allocations_of_a_step(cell, 4), allocations_of_a_step(cell, 100));
            assert!(long < short + 96, "{cell}: {short} allocations for 4 steps, {long} for 100");
        }
    });
}
