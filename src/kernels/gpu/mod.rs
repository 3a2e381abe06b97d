//! The GPU engine's device layer, on wgpu (Vulkan, Metal, DX12): the adapter, the buffers a
//! model lives in, and programs of compute dispatches recorded once and replayed every window.
//!
//! Every kernel sees the same bind group (`prelude.wgsl`): its parameters in a 256-byte slot of
//! one uniform buffer, picked by a dynamic offset, and five storage buffers, `W` (parameters),
//! `G` (their gradients), `O` (optimizer moments), `A` (activations and workspaces) and `I`
//! (integers). A kernel therefore takes only offsets, and one bind group serves a whole
//! program: a window's hundreds of dispatches cost no bind-group creation, and nothing is read
//! back to the host inside the time loop. wgpu places a barrier between two dispatches that
//! write the same buffer (storage read-write is not an "ordered" use on Vulkan), so each
//! dispatch sees its predecessors' results.
//!
//! The cells' kernels live beside their CPU twins (`cells/<cell>.wgsl`); the generic kernels
//! (GEMM, embedding, softmax, norm, optimizer) here.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub const PRELUDE: &str = include_str!("prelude.wgsl");
pub const GEMM: &str = include_str!("gemm.wgsl");
pub const GEMM_COOP: &str = include_str!("gemm_coop.wgsl");
pub const OPS: &str = include_str!("ops.wgsl");

/// Bytes of one dispatch's parameter slot (the strictest uniform offset alignment wgpu allows).
const SLOT: u64 = 256;
/// Parameter words per slot that the kernels read (`Params` in the prelude).
pub const WORDS: usize = 32;

/// The buffers of the bind group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    W,
    G,
    O,
    A,
    I,
}

impl Buf {
    fn wgsl(self) -> &'static str {
        match self {
            Buf::W => "W",
            Buf::G => "G",
            Buf::O => "O",
            Buf::A => "A",
            Buf::I => "I",
        }
    }
}

/// An opened adapter and device, with the compiled pipelines.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// whether the adapter offers cooperative matrices (tensor cores; wgpu's experimental
    /// feature)
    pub coop_matrix: bool,
    /// whether `--precision f16` runs its products on them: the adapter lists 16 x 16 x 16
    /// matrices of f16 operands and f32 sums and has f16 in shaders, and `RNNLENS_GPU_COOP`
    /// is not `0` (both features are then enabled on the device)
    pub coop_f16: bool,
    layout: wgpu::BindGroupLayout,
    pipe_layout: wgpu::PipelineLayout,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    /// errors the device reported outside an error scope (never a panic of the default handler)
    errors: Arc<Mutex<Vec<String>>>,
}

/// A one-line name of the adapter: its name, kind and backend.
pub fn describe(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?}, {:?}, driver {} {})", info.name, info.device_type, info.backend, info.driver, info.driver_info)
}

/// Which of the adapters (ranked best kind first, `kinds` their ranks) a process opens: under
/// mpirun the node-local rank's share of the best kind (rank `r` the `r mod n`-th of `n`), so
/// that the ranks of a machine with several GPUs spread over them, and where there is one
/// every rank shares it; the first otherwise.
pub fn adapter_for(kinds: &[u8], local_rank: Option<usize>) -> usize {
    let best = kinds.iter().take_while(|&&k| Some(&k) == kinds.first()).count().max(1);
    local_rank.map_or(0, |r| r % best)
}

/// This process's rank among the ranks mpirun started on its machine (Open MPI's and MPICH's
/// variables), `None` outside mpirun.
fn local_rank() -> Option<usize> {
    ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"].iter().find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// Whether `adapter` offers cooperative matrices at all, and whether `--precision f16` is to
/// run on them ([`Gpu::coop_f16`]): 16 x 16 x 16 with f16 operands and f32 sums, f16 in
/// shaders, and `RNNLENS_GPU_COOP` not `0`.
fn coop_support(adapter: &wgpu::Adapter) -> (bool, bool) {
    let any = adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
    let f16_16x16 = |p: &wgpu::CooperativeMatrixProperties| {
        (p.m_size, p.n_size, p.k_size) == (16, 16, 16) && p.ab_type == wgpu::CooperativeScalarType::F16 && p.cr_type == wgpu::CooperativeScalarType::F32
    };
    let f16 = any
        && adapter.features().contains(wgpu::Features::SHADER_F16)
        && adapter.cooperative_matrix_properties().iter().any(f16_16x16)
        && std::env::var("RNNLENS_GPU_COOP").map_or(true, |v| v.trim() != "0");
    (any, f16)
}

/// The process's device ([`Gpu::shared`]), opened at its first use.
static SHARED: std::sync::Mutex<Option<std::sync::Arc<Gpu>>> = std::sync::Mutex::new(None);

/// Mesa's Vulkan drivers (lavapipe among them) print `error: XDG_RUNTIME_DIR is invalid or not
/// set in the environment.` on stderr where that variable is missing (a container, CI, a
/// service), which reads as rnnlens's own error though nothing failed. They only look for the
/// directory (for window-system sockets, which a computation never uses): where it is unset or
/// gone, point it at a private directory of our own before the driver loads.
#[cfg(target_os = "linux")]
fn quiet_mesa() {
    let ok = std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir());
    if ok {
        return;
    }
    let dir = std::env::temp_dir().join(format!("rnnlens-runtime-{}", unsafe { libc::getuid() }));
    let made = std::fs::create_dir_all(&dir).and_then(|_| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
    });
    if made.is_ok() {
        // SAFETY (for the edition that marks it unsafe): set before the driver's threads start,
        // once, while this process's own threads read no environment.
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
    }
}

#[cfg(not(target_os = "linux"))]
fn quiet_mesa() {}

impl Gpu {
    /// The device every computation of this process uses: opened by the first caller and kept,
    /// since a driver gives a process only so many devices (an H200's refused more after some
    /// sixty opens, docs/gpu.md); a Python session sampling in a loop would otherwise run out.
    pub fn shared() -> Result<std::sync::Arc<Gpu>> {
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gpu) = slot.as_ref() {
            return Ok(gpu.clone());
        }
        let gpu = std::sync::Arc::new(Gpu::open()?);
        *slot = Some(gpu.clone());
        Ok(gpu)
    }

    /// The best adapter this machine has: a discrete GPU before an integrated one before a CPU
    /// driver (Mesa's lavapipe). `RNNLENS_GPU_ADAPTER` picks one whose name contains it.
    pub fn open() -> Result<Gpu> {
        quiet_mesa();
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::PRIMARY;
        let instance = wgpu::Instance::new(desc);
        let mut adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::PRIMARY));
        if adapters.is_empty() {
            bail!(
                "no GPU adapter was found (wgpu looked through Vulkan, Metal and DX12). On Linux the GPU needs a \
                 Vulkan driver and the Vulkan loader (libvulkan1): the vendor's driver, or Mesa's mesa-vulkan-drivers \
                 (which also gives lavapipe, a Vulkan device on the CPU)"
            );
        }
        let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        adapters.sort_by_key(rank);
        let kinds: Vec<u8> = adapters.iter().map(|a| rank(a) as u8).collect();
        let adapter = match std::env::var("RNNLENS_GPU_ADAPTER") {
            Ok(want) => {
                let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
                let i = names
                    .iter()
                    .position(|n| n.to_lowercase().contains(&want.to_lowercase()))
                    .ok_or_else(|| anyhow!("RNNLENS_GPU_ADAPTER={want} matches none of the adapters: {}", names.join(", ")))?;
                adapters.swap_remove(i)
            }
            Err(_) => adapters.swap_remove(adapter_for(&kinds, local_rank())),
        };
        let info = adapter.get_info();
        let limits = adapter.limits();
        let (coop_matrix, coop_f16) = coop_support(&adapter);
        let (required_features, experimental_features) = if coop_f16 {
            // SAFETY: wgpu's token for its experimental features (bugs there may be undefined
            // behaviour): asked for only on an adapter that lists the configuration the kernel
            // uses, and used by `gemm_coop.wgsl` alone, which the device check tests.
            (wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16, unsafe { wgpu::ExperimentalFeatures::enabled() })
        } else {
            (wgpu::Features::empty(), wgpu::ExperimentalFeatures::disabled())
        };
        if limits.max_storage_buffers_per_shader_stage < 5 {
            bail!("the adapter {} allows {} storage buffers per shader; rnnlens needs 5", info.name, limits.max_storage_buffers_per_shader_stage);
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("rnnlens"),
            required_features,
            required_limits: limits.clone(),
            experimental_features,
            ..Default::default()
        }))
        .with_context(|| format!("opening the adapter {}", describe(&info)))?;
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| sink.lock().unwrap().push(e.to_string())));
        let storage = |binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Storage { read_only: false }, has_dynamic_offset: false, min_binding_size: None },
            count: None,
        };
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer { ty: wgpu::BufferBindingType::Uniform, has_dynamic_offset: true, min_binding_size: wgpu::BufferSize::new(128) },
            count: None,
        }];
        entries.extend((1..=5).map(storage));
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor { label: Some("rnnlens"), entries: &entries });
        let pipe_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("rnnlens"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        Ok(Gpu { device, queue, info, limits, coop_matrix, coop_f16, layout, pipe_layout, pipelines: Mutex::new(HashMap::new()), errors })
    }

    pub fn describe(&self) -> String {
        describe(&self.info)
    }

    /// What `--precision f16` computes on this adapter, for the log: the tensor-core kernel, or
    /// the f32 kernels with their operands rounded to f16 (f16's numerics, not its speed), and why.
    pub fn f16_note(&self) -> String {
        if self.coop_f16 {
            return "f16: every product on cooperative matrices (tensor cores), f16 operands and f32 sums, the loss scaled dynamically".into();
        }
        let why = if self.coop_matrix {
            "this adapter's cooperative matrices have no 16 x 16 x 16 f16 configuration, or f16 in shaders, or RNNLENS_GPU_COOP=0"
        } else {
            "this adapter offers no cooperative matrices (tensor cores)"
        };
        format!("f16: every product's operands rounded to f16 in the f32 kernels, f32 sums, the loss scaled dynamically: f16's numerics at f32's speed or below ({why})")
    }

    /// The most bytes one buffer may hold here (binding and allocation limits both).
    pub fn max_buffer_bytes(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }

    /// The pipeline of `entry` in `source` (prefixed with the prelude), compiled once per `key`.
    pub fn pipeline(&self, key: &str, source: &dyn Fn() -> String, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        self.compile(key, &|| format!("{PRELUDE}\n{}", source()), entry, false)
    }

    /// [`Gpu::pipeline`] without the bounds checks wgpu adds to every buffer access, for the
    /// GEMM only: its kernels guard each access by the product's sizes, and [`Program::run`]
    /// checks that every recorded product lies inside its buffers (gemm.wgsl's header says
    /// why each access is safe).
    fn trusted_pipeline(&self, key: &str, source: &dyn Fn() -> String, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        self.compile(key, &|| format!("{PRELUDE}\n{}", source()), entry, true)
    }

    /// The pipeline of `entry` in the whole `module` (prelude included), compiled once per `key`.
    fn compile(&self, key: &str, module: &dyn Fn() -> String, entry: &str, trusted: bool) -> Result<Arc<wgpu::ComputePipeline>> {
        let full = format!("{key}:{entry}");
        if let Some(p) = self.pipelines.lock().unwrap().get(&full) {
            return Ok(p.clone());
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor { label: Some(key), source: wgpu::ShaderSource::Wgsl(module().into()) };
        let module = if trusted {
            // SAFETY: only the GEMMs come here (gemm.wgsl, and gemm_coop.wgsl appended to it),
            // whose accesses are guarded in the kernel and whose operands' extents
            // `Program::run` checks against the buffers.
            unsafe { self.device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
        } else {
            self.device.create_shader_module(desc)
        };
        let pipe = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&full),
            layout: Some(&self.pipe_layout),
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            bail!("compiling the GPU kernel {full}: {e}");
        }
        let p = Arc::new(pipe);
        self.pipelines.lock().unwrap().insert(full, p.clone());
        Ok(p)
    }

    /// Fail with what the device reported since the last check, if anything.
    pub fn check(&self) -> Result<()> {
        let mut e = self.errors.lock().unwrap();
        if e.is_empty() {
            return Ok(());
        }
        let msg = e.join("; ");
        e.clear();
        bail!("the GPU reported: {msg}")
    }

    /// Wait for everything submitted so far.
    pub fn wait(&self) -> Result<()> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| anyhow!("waiting for the GPU: {e}"))?;
        self.check()
    }
}

/// The tensor-core GEMM's whole module for operands in `a`, `b` and output in `c`: the two
/// `enable`s (WGSL wants them before any declaration), the prelude and gemm.wgsl with its
/// loads rounding to f16, then gemm_coop.wgsl. The activations' buffer is called `Act` here:
/// a module-scope `A` would hide the matrices' role `A` (`coop_mat16x16<f16, A>`).
pub fn gemm_coop_module(a: &str, b: &str, c: &str) -> String {
    let gemm = GEMM.replace("SRC_A", a).replace("SRC_B", b).replace("DST_C", c).replace("OPERAND", "to_f16(x)");
    let (prelude, gemm) = (rename_ident(PRELUDE, "A", "Act"), rename_ident(&gemm, "A", "Act"));
    format!("enable f16;\nenable wgpu_cooperative_matrix;\n{prelude}\n{gemm}\n{GEMM_COOP}")
}

/// `src` with every identifier `from` (a whole word, not part of a longer name) made `to`.
fn rename_ident(src: &str, from: &str, to: &str) -> String {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find(from) {
        let before = rest[..i].chars().next_back().is_some_and(word) || (i == 0 && out.chars().next_back().is_some_and(word));
        let after = rest[i + from.len()..].chars().next().is_some_and(word);
        out.push_str(&rest[..i]);
        out.push_str(if before || after { from } else { to });
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

/// The five buffers of a model on the device, with their sizes in 4-byte elements.
pub struct Arena {
    pub bufs: [wgpu::Buffer; 5],
    pub lens: [u64; 5],
}

impl Arena {
    /// Allocate `lens` elements of `W`, `G`, `O`, `A` and `I`, refusing with the figures
    /// what the device cannot hold.
    pub fn new(gpu: &Gpu, lens: [u64; 5]) -> Result<Arena> {
        let max = gpu.max_buffer_bytes();
        let names = ["parameters", "gradients", "optimizer moments", "activations", "token ids"];
        for (len, name) in lens.iter().zip(names) {
            if len * 4 > max {
                bail!(
                    "the {name} need {:.1} MiB in one buffer; the GPU {} allows {:.1} MiB per buffer (use a smaller batch, window or model)",
                    (len * 4) as f64 / 1048576.0,
                    gpu.info.name,
                    max as f64 / 1048576.0
                );
            }
        }
        let total: u64 = lens.iter().sum::<u64>() * 4;
        let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let bufs = lens.map(|len| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                // at least 16 bytes: an empty binding is not allowed
                size: (len * 4).max(16).next_multiple_of(4),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            bail!("the GPU {} could not allocate {:.1} MiB for the model: {e}", gpu.info.name, total as f64 / 1048576.0);
        }
        Ok(Arena { bufs, lens })
    }

    pub fn buf(&self, b: Buf) -> &wgpu::Buffer {
        &self.bufs[b as usize]
    }

    /// Write `data` at element `at` of `b`.
    pub fn write<T: bytemuck::Pod>(&self, gpu: &Gpu, b: Buf, at: u64, data: &[T]) {
        if !data.is_empty() {
            gpu.queue.write_buffer(self.buf(b), at * 4, bytemuck::cast_slice(data));
        }
    }

    /// Read `n` elements of `b` from element `at` (waits for the device).
    pub fn read<T: bytemuck::Pod>(&self, gpu: &Gpu, b: Buf, at: u64, n: u64) -> Result<Vec<T>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read back"),
            size: n * 4,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(self.buf(b), at * 4, &staging, 0, n * 4);
        gpu.queue.submit([enc.finish()]);
        let slice = staging.slice(..);
        let done = Arc::new(Mutex::new(None));
        let d = done.clone();
        slice.map_async(wgpu::MapMode::Read, move |r| *d.lock().unwrap() = Some(r));
        // Another thread's poll may run this callback after ours returns: poll until it has run.
        let result = loop {
            gpu.wait()?;
            if let Some(r) = done.lock().unwrap().take() {
                break r;
            }
            std::thread::yield_now();
        };
        result.map_err(|e| anyhow!("reading from the GPU: {e}"))?;
        let out = {
            let view = slice.get_mapped_range().map_err(|e| anyhow!("reading from the GPU: {e}"))?;
            bytemuck::cast_slice(&view).to_vec()
        };
        staging.unmap();
        Ok(out)
    }
}

/// One recorded operation.
enum Op {
    Dispatch { pipe: Arc<wgpu::ComputePipeline>, slot: u32, groups: [u32; 3] },
    Clear { buf: Buf, at: u64, n: u64 },
}

/// A sequence of dispatches and clears recorded once and submitted as one command
/// buffer each time it runs; its parameters live in its own uniform buffer.
pub struct Program {
    ops: Vec<Op>,
    params: Vec<u32>,
    uniform: Option<(wgpu::Buffer, wgpu::BindGroup)>,
    /// the GEMMs recorded, for the rate figures and [`Program::gemms_alone`], each with
    /// whether it was recorded by [`Program::gemm_folded`]
    pub gemms: Vec<(Gemm, bool)>,
    /// where in `A` a GEMM split along K may write its partial products (`None`: no splitting),
    /// and the most elements any split needed there
    pub scratch: Option<usize>,
    pub scratch_used: usize,
    /// the GEMM's tile, 64 or 128 (`None`: by shape, [`gemm_tile`]); `RNNLENS_GPU_GEMM=64` or
    /// `128` sets it for every program, so that a device run can time one kernel against the other
    pub tile: Option<usize>,
    /// the one-past-last element each recorded GEMM reads or writes in each buffer, checked
    /// against the buffers before the first run (the GEMM's module has no added bounds checks)
    reach: Vec<(Buf, usize)>,
    /// the GEMMs' operands rounded to f16 (`--precision f16`): the precision in effect when the
    /// program was made (`kernels::precision::current`), as the CPU's products read it
    pub half: bool,
    /// in f16, the tensor-core kernel where the device has it (`Gpu::coop_f16`); false: the
    /// f32 kernels rounding their operands (a test's reference)
    pub coop: bool,
}

impl Default for Program {
    fn default() -> Self {
        Program::new(None)
    }
}

/// Output tiles that keep a 132-processor GPU busy for about two waves.
const BUSY_TILES: usize = 264;

/// Output tiles of 128 x 128 that fill most of a 132-processor GPU once: below this, the
/// 64 x 64 kernel's four times as many workgroups (and split K) keep more processors busy.
const BIG_TILES: usize = 100;

/// The GEMM's tile for a product of `m x n` outputs: 128 where its 128 x 128 tiles fill most of
/// the GPU ([`BIG_TILES`]: the PTB shapes' input projections and weight gradients, 126 tiles at
/// batch 20, 735 at batch 128), else 64 (a recurrent step's product). The threshold is a first
/// guess awaiting a device run (docs/gpu.md); `RNNLENS_GPU_GEMM` overrides it.
pub fn gemm_tile(m: usize, n: usize) -> usize {
    if m.div_ceil(128) * n.div_ceil(128) >= BIG_TILES {
        128
    } else {
        64
    }
}

fn tile_from_env() -> Option<usize> {
    match std::env::var("RNNLENS_GPU_GEMM").ok()?.trim() {
        "64" => Some(64),
        "128" => Some(128),
        _ => None,
    }
}

/// How many slices of K a GEMM of few output tiles is split into: enough for [`BUSY_TILES`]
/// workgroups, each slice at least 64 long, at most 16 slices.
pub fn k_splits(m: usize, n: usize, k: usize) -> usize {
    let tiles = m.div_ceil(64) * n.div_ceil(64);
    if tiles >= BUSY_TILES / 2 {
        return 1;
    }
    (k / 64).min(BUSY_TILES.div_ceil(tiles)).clamp(1, 16)
}

/// A GEMM's operands: `C[m, n] (+)= op(A) · op(B) (+ biases)`; offsets and leading dimensions
/// in elements of the named buffers.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: (Buf, usize, usize),
    /// A stored transposed (`[k, m]`)
    pub ta: bool,
    pub b: (Buf, usize, usize),
    /// B stored transposed (`[n, k]`, PyTorch's weight layout)
    pub tb: bool,
    pub c: (Buf, usize, usize),
    pub accumulate: bool,
    /// bias rows (offsets in `W`) added to every row of C
    pub bias: [Option<usize>; 2],
}

fn u(x: usize) -> u32 {
    u32::try_from(x).expect("a GPU offset or size beyond 2^32 elements (the arena's limits refuse such models first)")
}

impl Program {
    /// An empty program whose split GEMMs write their partial products at `scratch` in `A`
    /// (`None`: no GEMM is split).
    pub fn new(scratch: Option<usize>) -> Program {
        let half = crate::kernels::precision::current() == crate::kernels::precision::Precision::F16;
        Program { ops: Vec::new(), params: Vec::new(), uniform: None, gemms: Vec::new(), scratch, scratch_used: 0, tile: tile_from_env(), reach: Vec::new(), half, coop: true }
    }

    /// Record a dispatch of `entry` with `params` (at most [`WORDS`] words) over `groups`.
    pub fn dispatch(&mut self, pipe: Arc<wgpu::ComputePipeline>, params: &[u32], groups: [u32; 3]) -> usize {
        assert!(params.len() <= WORDS);
        let slot = self.params.len() / (SLOT as usize / 4);
        self.params.extend_from_slice(params);
        self.params.resize((slot + 1) * (SLOT as usize / 4), 0);
        if groups.iter().all(|&g| g > 0) {
            self.ops.push(Op::Dispatch { pipe, slot: slot as u32, groups });
        }
        slot
    }

    /// The dispatches this program records (each one a barrier after the one before).
    pub fn dispatches(&self) -> usize {
        self.ops.iter().filter(|o| matches!(o, Op::Dispatch { .. })).count()
    }

    /// Threads `n` in 256-thread workgroups over a grid whose x stays within the device's limit.
    pub fn flat(&mut self, pipe: Arc<wgpu::ComputePipeline>, params: &[u32], n: usize) -> usize {
        let groups = n.div_ceil(256);
        self.dispatch(pipe, params, grid(groups))
    }

    pub fn clear(&mut self, buf: Buf, at: usize, n: usize) {
        if n > 0 {
            self.ops.push(Op::Clear { buf, at: at as u64, n: n as u64 });
        }
    }

    /// Record `g`: 128 x 128 or 64 x 64 tiles of C ([`gemm_tile`]), the latter with K split
    /// ([`k_splits`]) where the program has scratch.
    pub fn gemm(&mut self, gpu: &Gpu, g: Gemm) -> Result<()> {
        self.record_gemm(gpu, g, false).map(|_| ())
    }

    /// Record `g` as [`Program::gemm`] does, except that where K is split the reduction is
    /// left to the kernel that reads the product next, which saves a dispatch: the returned
    /// words (the cells' `FOLD_*` slots, in order) tell that kernel's `fold_split` where the
    /// partial products are and how to finish them. `None`: nothing to fold (the product is
    /// whole). The output must be in `A` (else it is reduced here), `m` of the reading
    /// kernel's rows.
    pub fn gemm_folded(&mut self, gpu: &Gpu, g: Gemm) -> Result<Option<[u32; 8]>> {
        self.record_gemm(gpu, g, g.c.0 == Buf::A)
    }

    fn record_gemm(&mut self, gpu: &Gpu, g: Gemm, fold: bool) -> Result<Option<[u32; 8]>> {
        if g.m == 0 || g.n == 0 {
            return Ok(None);
        }
        assert!(g.k < 1 << 31, "a GEMM's K of 2^31 or more");
        let (a, b, c) = (g.a.0.wgsl(), g.b.0.wgsl(), g.c.0.wgsl());
        let key = format!("gemm_{a}{b}{c}{}", if self.half { "_f16" } else { "" });
        let operand = if self.half { "to_f16(x)" } else { "x" };
        let source = || GEMM.replace("SRC_A", a).replace("SRC_B", b).replace("DST_C", c).replace("OPERAND", operand);
        self.record_reach(&g);
        self.gemms.push((g, fold));
        let tile = self.tile.unwrap_or_else(|| gemm_tile(g.m, g.n));
        let flags = g.ta as u32 | (g.tb as u32) << 1 | (g.accumulate as u32) << 2 | (g.bias[0].is_some() as u32) << 3 | (g.bias[1].is_some() as u32) << 4;
        let (bias0, bias1) = (u(g.bias[0].unwrap_or(0)), u(g.bias[1].unwrap_or(0)));
        let p = [u(g.m), u(g.n), u(g.k), u(g.a.1), u(g.a.2), u(g.b.1), u(g.b.2), u(g.c.1), u(g.c.2), flags, bias0, bias1];
        if self.half && self.coop && gpu.coop_f16 {
            // f16 on tensor cores: 32 x 32 tiles, K never split
            // SAFETY of the unchecked module: gemm_coop.wgsl's header (as gemm.wgsl's)
            let pipe = gpu.compile(&format!("gemm_coop_{a}{b}{c}"), &|| gemm_coop_module(a, b, c), "gemm_coop", true)?;
            self.dispatch(pipe, &p, [u(g.n.div_ceil(32)), u(g.m.div_ceil(32)), 1]);
            return Ok(None);
        }
        if tile == 128 {
            let pipe = gpu.trusted_pipeline(&key, &source, "gemm128")?;
            self.dispatch(pipe, &p, [u(g.n.div_ceil(128)), u(g.m.div_ceil(128)), 1]);
            return Ok(None);
        }
        let pipe = gpu.trusted_pipeline(&key, &source, "gemm")?;
        let splits = if self.scratch.is_some() { k_splits(g.m, g.n, g.k) } else { 1 };
        let groups = [u(g.n.div_ceil(64)), u(g.m.div_ceil(64)), 1];
        if splits == 1 {
            self.dispatch(pipe, &p, groups);
            return Ok(None);
        }
        let at = self.scratch.unwrap_or(0);
        let chunk = g.k.div_ceil(splits).next_multiple_of(16);
        let splits = g.k.div_ceil(chunk);
        self.scratch_used = self.scratch_used.max(splits * g.m * g.n);
        self.reach.push((Buf::A, at + splits * g.m * g.n));
        let mut ps = p.to_vec();
        ps[9] |= 32;
        ps.extend([u(chunk), u(at)]);
        self.dispatch(pipe, &ps, [groups[0], groups[1], u(splits)]);
        if fold {
            return Ok(Some([u(splits), u(at), u(g.c.1), u(g.c.2), u(g.n), flags, bias0, bias1]));
        }
        let reduce = gpu.trusted_pipeline(&key, &source, "reduce")?;
        let mut pr = p.to_vec();
        pr.extend([u(splits), u(at)]);
        self.flat(reduce, &pr, g.m * g.n);
        Ok(None)
    }

    /// Note how far `g` reaches into each buffer it reads or writes.
    fn record_reach(&mut self, g: &Gemm) {
        // a [rows, cols] block stored `ld` apart from `at`: its last element and one
        let end = |(buf, at, ld): (Buf, usize, usize), rows: usize, cols: usize| (buf, at + (rows - 1) * ld + cols);
        let a = if g.ta { end(g.a, g.k, g.m) } else { end(g.a, g.m, g.k) };
        let b = if g.tb { end(g.b, g.n, g.k) } else { end(g.b, g.k, g.n) };
        if g.k > 0 {
            self.reach.extend([a, b]);
        }
        self.reach.push(end(g.c, g.m, g.n));
        self.reach.extend(g.bias.iter().flatten().map(|&at| (Buf::W, at + g.n)));
    }

    /// Overwrite the parameters of a recorded slot (takes effect at the next [`Program::run`]).
    pub fn set_params(&mut self, gpu: &Gpu, slot: usize, params: &[u32]) {
        let at = slot * (SLOT as usize / 4);
        self.params[at..at + params.len()].copy_from_slice(params);
        if let Some((buf, _)) = &self.uniform {
            gpu.queue.write_buffer(buf, (at * 4) as u64, bytemuck::cast_slice(params));
        }
    }

    /// Submit the program (without waiting for it).
    pub fn run(&mut self, gpu: &Gpu, arena: &Arena) {
        if self.uniform.is_none() {
            for &(buf, end) in &self.reach {
                let len = arena.lens[buf as usize] as usize;
                assert!(end <= len, "a recorded GEMM reaches element {end} of the buffer {buf:?}, which holds {len}");
            }
            let size = (self.params.len() as u64 * 4).max(SLOT);
            let buf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("parameters"),
                size,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            gpu.queue.write_buffer(&buf, 0, bytemuck::cast_slice(&self.params));
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding { buffer: &buf, offset: 0, size: wgpu::BufferSize::new(128) }),
            }];
            entries.extend(arena.bufs.iter().enumerate().map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32 + 1, resource: b.as_entire_binding() }));
            let bg = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &gpu.layout, entries: &entries });
            self.uniform = Some((buf, bg));
        }
        let (_, bg) = self.uniform.as_ref().unwrap();
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        let mut i = 0;
        while i < self.ops.len() {
            match &self.ops[i] {
                Op::Clear { buf, at, n } => {
                    enc.clear_buffer(arena.buf(*buf), at * 4, Some(n * 4));
                    i += 1;
                }
                Op::Dispatch { .. } => {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    let mut current: Option<*const wgpu::ComputePipeline> = None;
                    while let Some(Op::Dispatch { pipe, slot, groups }) = self.ops.get(i) {
                        if current != Some(Arc::as_ptr(pipe)) {
                            pass.set_pipeline(pipe);
                            current = Some(Arc::as_ptr(pipe));
                        }
                        pass.set_bind_group(0, bg, &[*slot * SLOT as u32]);
                        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
                        i += 1;
                    }
                }
            }
        }
        gpu.queue.submit([enc.finish()]);
    }

    /// A program of these GEMMs alone, in order, on the buffers and at the offsets they were
    /// recorded with (a folded one without its reduction, as in the step): what a step's matrix
    /// products cost without anything between them (they write over the step's activations and
    /// gradients).
    pub fn gemms_alone(gpu: &Gpu, gemms: &[(Gemm, bool)], scratch: Option<usize>) -> Result<Program> {
        let mut p = Program::new(scratch);
        for &(g, folded) in gemms {
            // a folded product's reduction is the reading kernel's work, not a dispatch of the step
            p.record_gemm(gpu, g, folded)?;
        }
        Ok(p)
    }
}

/// Workgroups `groups` as a grid of at most 65,535 in x (the kernels flatten it with `flat_id`).
pub fn grid(groups: usize) -> [u32; 3] {
    if groups <= 65_535 {
        [groups as u32, 1, 1]
    } else {
        [65_535, groups.div_ceil(65_535) as u32, 1]
    }
}

/// The model-level kernels of `ops.wgsl`.
pub fn op(gpu: &Gpu, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
    gpu.pipeline("ops", &|| OPS.to_string(), entry)
}
