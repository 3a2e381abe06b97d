//! Options that several subcommands share, each declared once, and the one way an options
//! struct gets its defaults: from its own command-line declaration, so that `--help`, the
//! library's `Default` and a TOML file's missing keys cannot disagree.

use anyhow::{bail, Result};
use clap::{Args, FromArgMatches};
use crate::kernels::precision::Precision;
use serde::{Deserialize, Serialize};

/// The defaults of an options struct, as its `#[arg(default_value...)]` attributes say.
pub fn defaults<T: Args + FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let m = cmd.try_get_matches_from(std::iter::empty::<String>()).expect("every option has a default or is optional");
    T::from_arg_matches(&m).expect("the declared defaults parse")
}

/// Where a command computes: the CPU engine, or the GPU engine (the `gpu` cargo feature:
/// wgpu over Vulkan, Metal or DX12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    #[default]
    Cpu,
    Gpu,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }

    /// Refuse what this device cannot run: the GPU in a build without the engine (saying how
    /// to get one), bf16 on the GPU and f16 on the CPU (each engine's mixed precision is its
    /// own), bf16 on a CPU without the instructions.
    pub fn check(self, precision: Precision) -> Result<()> {
        self.check_built()?;
        match (self, precision) {
            (Device::Gpu, Precision::Bf16) => bail!("the GPU engine's mixed precision is f16 (--precision f16); bf16 is the CPU's"),
            (Device::Gpu, _) => Ok(()),
            (Device::Cpu, p) => p.check(),
        }
    }

    /// Refuse the GPU in a build without the engine, saying how to get one.
    pub fn check_built(self) -> Result<()> {
        if self == Device::Gpu && !cfg!(feature = "gpu") {
            bail!("this build of rnnlens has no GPU engine: rebuild with `cargo build --release --features gpu` (docs/gpu.md)");
        }
        Ok(())
    }
}

/// `--device`, declared once for every command that computes on either device; a command opens
/// its engine from it (`model::engine::Engine::open`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Args, Serialize, Deserialize)]
#[serde(default)]
pub struct OnDevice {
    /// Where to compute: cpu, or gpu (a build with --features gpu; docs/gpu.md says which
    /// cells, options and commands run there)
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    pub device: Device,
}

/// [`OnDevice`] (de)serialized as its bare device name, for an options file that names the
/// device as a key of its own (`task.json`: `"device": "cpu"`), where [`OnDevice`] itself is
/// flattened into the file's keys elsewhere (trainer.json, a TOML configuration).
pub mod device_name {
    use super::{Device, OnDevice};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(on: &OnDevice, s: S) -> Result<S::Ok, S::Error> {
        on.device.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OnDevice, D::Error> {
        Ok(OnDevice { device: Device::deserialize(d)? })
    }
}

/// How a command runs: its threads, which never change what it computes (a run gives the same
/// bits for the same thread count), and the precision of its matrix products, which does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Args, Serialize, Deserialize)]
#[serde(default)]
pub struct Runtime {
    /// Worker threads [default: every core]; results are identical for a given count
    #[arg(long)]
    pub threads: Option<usize>,
    /// Matrix products in f32, or mixed precision: bf16 on the CPU (bf16 operands, f32
    /// accumulation; needs AVX512-BF16), f16 on the GPU (f16 operands, f32 accumulation, the
    /// loss scaled dynamically); weights, state, pointwise math and the loss stay f32
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    pub precision: Precision,
}

impl Runtime {
    /// Start the worker pool (flushing denormals to zero on every thread, the caller's too)
    /// after checking that this CPU runs the precision asked for; returns the pool's size. The
    /// precision itself is set by the caller for its work ([`Runtime::run`]).
    pub fn start(&self) -> Result<usize> {
        self.start_on(Device::Cpu)
    }

    /// [`Runtime::start`] for a command computing on `device` (the precision checked against it).
    pub fn start_on(&self, device: Device) -> Result<usize> {
        device.check(self.precision)?;
        if device == Device::Cpu && self.precision == Precision::Bf16 {
            crate::kernels::limits::note_if_bf16_is_slower();
        }
        let n = self.start_pool()?;
        crate::kernels::num::flush_denormals();
        Ok(n)
    }

    /// `f` with the products in this precision (`kernels::precision::with`): a library entry
    /// point's whole work, so that a caller's later work (Python's) keeps its own precision.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        crate::kernels::precision::with(self.precision, f)
    }

    /// Start the worker pool, its threads flushing denormals, and leave the calling thread as
    /// it is (a caller that is not ours scopes the flush with `num::DenormalsFlushed`). The
    /// first call in a process sets the pool's size; a later one keeps it and returns it.
    pub fn start_pool(&self) -> Result<usize> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = self.threads.unwrap_or(cpus);
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        let built = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .start_handler(|_| crate::kernels::num::flush_denormals())
            .build_global();
        // Allowed (a run is the same bits only for the same count, so resuming it elsewhere
        // may need it), but said: on 2 CPUs C1 LSTM training ran at 0.99, 0.94 and 0.33 times
        // its 2-thread speed with 4, 16 and 64 threads (docs/benchmarks.md).
        if built.is_ok() && n > cpus {
            eprintln!("warning: {n} threads on {cpus} CPUs: every step's work is split among the threads and waits for the slowest, so threads beyond the CPUs slow it down (kept: a run repeats bit for bit only at the same thread count)");
        }
        Ok(rayon::current_num_threads())
    }
}

thread_local! {
    /// The check [`interrupted`] asks on this thread, while [`watching`] runs.
    static CHECK: std::cell::RefCell<Option<Box<dyn Fn() -> bool>>> = const { std::cell::RefCell::new(None) };
}

/// Run `f` with `check` as this thread's answer to [`interrupted`]: how a caller that is not
/// ours (Python, whose Ctrl-C cannot reach a thread computing without its interpreter) stops
/// long work promptly. Loops that can run for seconds ask [`interrupted`] between windows and
/// stop early when it says so; the caller then discards what they return.
pub fn watching<R>(check: Box<dyn Fn() -> bool>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Box<dyn Fn() -> bool>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CHECK.with_borrow_mut(|c| *c = self.0.take());
        }
    }
    let _restore = Restore(CHECK.with_borrow_mut(|c| c.replace(check)));
    f()
}

/// Whether the caller asked this thread's work to stop ([`watching`]); false on the command
/// line, where Ctrl-C ends the process.
pub fn interrupted() -> bool {
    CHECK.with_borrow(|c| c.as_ref().is_some_and(|check| check()))
}

/// Refuse work that needs `bytes` where the machine has fewer available, naming `what` needs
/// them and `fix`: a clear error before the allocation, never an abort in it.
pub fn check_fits(what: &str, bytes: u64, fix: &str) -> Result<()> {
    if let Some(free) = available_memory().filter(|&free| bytes > free) {
        bail!("{what} needs about {}, and {} are available: {fix}", size(bytes), size(free));
    }
    Ok(())
}

/// A byte count for messages: GiB from one GiB on, MiB below.
pub fn size(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1024.0 * MIB))
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB)
    }
}

/// The environment variable that caps the memory rnnlens counts on, in bytes (for a machine
/// shared with other work, or where neither the kernel nor the container says).
pub const MEMORY_LIMIT_VAR: &str = "RNNLENS_MEMORY_LIMIT";

/// The memory this process can have without swapping: the least of `MemAvailable`, the room
/// left under the container's limit (cgroup v2 `memory.max` less what is used besides the
/// page cache) and [`MEMORY_LIMIT_VAR`]; `None` where none of them says.
pub fn available_memory() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let meminfo = read("/proc/meminfo").and_then(|info| {
        let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?.to_string();
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
    });
    let cgroup = (|| {
        let max: u64 = read("/sys/fs/cgroup/memory.max")?.trim().parse().ok()?; // "max": no limit
        let current: u64 = read("/sys/fs/cgroup/memory.current")?.trim().parse().ok()?;
        // The page cache counts in `current` but is given back on demand.
        let stat = read("/sys/fs/cgroup/memory.stat").unwrap_or_default();
        let file: u64 = stat.lines().find_map(|l| l.strip_prefix("file ")?.trim().parse().ok()).unwrap_or(0);
        Some(max.saturating_sub(current.saturating_sub(file)))
    })();
    let capped = std::env::var(MEMORY_LIMIT_VAR).ok().and_then(|v| v.trim().parse::<u64>().ok());
    [meminfo, cgroup, capped].into_iter().flatten().min()
}

/// A progress bar for long work that also speaks where stderr is not a terminal (a log, a
/// notebook, a pipe): there indicatif hides the bar, and a plain line every 30 s says how far
/// the work is and about how long is left instead.
pub struct Progress {
    bar: indicatif::ProgressBar,
    what: String,
    unit: &'static str,
    lines: bool,
    start: std::time::Instant,
    last: std::cell::Cell<std::time::Instant>,
}

impl Progress {
    /// `total` units (`unit`: "windows", "steps") of `what`, shown when `show`.
    pub fn new(show: bool, total: u64, what: &str, unit: &'static str) -> Progress {
        let bar = if show { indicatif::ProgressBar::new(total) } else { indicatif::ProgressBar::hidden() };
        bar.set_style(indicatif::ProgressStyle::with_template(&format!("{what} {{bar:30}} {{pos}}/{{len}} {unit}, ETA {{eta}}")).expect("valid template"));
        let now = std::time::Instant::now();
        Progress { lines: show && bar.is_hidden(), bar, what: what.to_string(), unit, start: now, last: std::cell::Cell::new(now) }
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        if self.lines && self.last.get().elapsed().as_secs() >= 30 {
            let (pos, len) = (self.bar.position(), self.bar.length().unwrap_or(0));
            let left = self.start.elapsed().as_secs_f64() / pos.max(1) as f64 * len.saturating_sub(pos) as f64;
            let left = left as u64;
            eprintln!("{}: {pos}/{len} {}, about {}:{:02}:{:02} left", self.what, self.unit, left / 3600, left / 60 % 60, left % 60);
            self.last.set(std::time::Instant::now());
        }
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
