//! Data-parallel training across processes: under `mpirun -np N` (cargo feature `mpi`) each
//! rank trains on its share of the batch rows and the ranks sum their gradients before the
//! clipping and the optimizer step, which every rank then takes identically. Rank 0 alone
//! prints, validates and writes. docs/distributed.md says what is sent and what it costs.
//!
//! **A fixed order.** The gradients are summed in rank order, whatever the timing: each rank
//! receives every rank's copy of one chunk (an all-to-all), adds them 0, 1, …, N−1, and the
//! summed chunks are gathered back to every rank. That is the bandwidth of a ring all-reduce
//! (each rank sends and receives `2·(N−1)/N` of the gradient) without its timing-dependent
//! order, so a run is reproducible for a given seed, thread count and rank count.
//!
//! **The same model as one process.** The global batch is the configured one; a rank's rows
//! are a contiguous block of it. Every rank draws the dropout masks of the whole batch and
//! keeps its rows ([`crate::model::Dropout::shard`]), so the generator stays at the position
//! one process would have and the masks are those one process would use. What differs from
//! one process is only the order of the float additions inside the weight gradients.

use std::ops::Range;
use std::sync::OnceLock;

/// This process's place among the ranks.
pub struct Dist {
    pub rank: usize,
    pub size: usize,
}

static DIST: OnceLock<Dist> = OnceLock::new();
/// MPI itself, finalized by [`finalize`] when the process ends its work.
#[cfg(feature = "mpi")]
static UNIVERSE: std::sync::Mutex<Option<mpi::environment::Universe>> = std::sync::Mutex::new(None);
/// The gradient sum's send and receive buffers, kept across steps.
#[cfg(feature = "mpi")]
static F32_BUFS: std::sync::Mutex<(Vec<f32>, Vec<f32>)> = std::sync::Mutex::new((Vec::new(), Vec::new()));

/// The ranks this process trains with: itself alone unless [`init`] joined an MPI job.
pub fn get() -> &'static Dist {
    DIST.get_or_init(|| Dist { rank: 0, size: 1 })
}

/// Whether this process was started by an MPI launcher (Open MPI, MPICH or a PMIx one).
pub fn launched_by_mpi() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"].iter().any(|v| std::env::var_os(v).is_some())
}

/// Join the MPI job this process was launched in (a no-op outside one). Call before anything
/// asks [`get`].
#[cfg(feature = "mpi")]
pub fn init() -> anyhow::Result<()> {
    use mpi::topology::Communicator;
    if !launched_by_mpi() {
        return Ok(());
    }
    let universe = mpi::initialize().ok_or_else(|| anyhow::anyhow!("MPI was initialized already"))?;
    let world = universe.world();
    let d = Dist { rank: world.rank() as usize, size: world.size() as usize };
    *UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()) = Some(universe);
    DIST.set(d).map_err(|_| anyhow::anyhow!("the ranks were asked for before MPI started"))
}

/// Leave the MPI job (MPI_Finalize), if this process joined one.
pub fn finalize() {
    #[cfg(feature = "mpi")]
    drop(UNIVERSE.lock().unwrap_or_else(|e| e.into_inner()).take());
}

impl Dist {
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Refuse f16 training across ranks: each rank's dynamic loss scale would need the others'
    /// overflows to stay the same on all of them (the GPU engine's `--precision f16`).
    pub fn refuse_half(&self, half: bool) -> anyhow::Result<()> {
        if half && self.size > 1 {
            anyhow::bail!("--precision f16 under mpirun is not supported yet (each rank's loss scale would need the others' overflows): use --precision f32");
        }
        Ok(())
    }

    /// This rank's rows of a global batch of `batch` rows.
    pub fn rows(&self, batch: usize) -> Range<usize> {
        self.rows_of_rank(batch, self.rank)
    }

    /// Replace `x` on every rank by the sum over ranks, added in rank order.
    #[cfg_attr(not(feature = "mpi"), allow(unused_variables, clippy::needless_return))]
    pub fn sum_f32(&self, x: &mut [f32]) {
        if self.size == 1 {
            return;
        }
        // A gradient's buffers are kept from step to step, not allocated per step.
        #[cfg(feature = "mpi")]
        {
            let mut bufs = F32_BUFS.lock().unwrap_or_else(|e| e.into_inner());
            let (send, recv) = &mut *bufs;
            self.sum_in_order(x, send, recv);
        }
    }

    /// The mean over ranks of each rank's gradient (each of its rows' mean loss), in `g` on
    /// every rank: what the trainer and the benchmark clip and apply.
    pub fn mean_f32(&self, g: &mut [f32]) {
        if self.size == 1 {
            return;
        }
        self.sum_f32(g);
        let inv = 1.0 / self.size as f32;
        use rayon::prelude::*;
        g.par_chunks_mut(1 << 16).for_each(|c| c.iter_mut().for_each(|x| *x *= inv));
    }

    /// The same for a few f64 values (losses, token counts).
    #[cfg_attr(not(feature = "mpi"), allow(unused_variables, clippy::needless_return))]
    pub fn sum_f64(&self, x: &mut [f64]) {
        if self.size == 1 {
            return;
        }
        #[cfg(feature = "mpi")]
        self.sum_in_order(x, &mut Vec::new(), &mut Vec::new());
    }

    /// Every rank gets rank 0's `x`.
    #[cfg_attr(not(feature = "mpi"), allow(unused_variables, clippy::needless_return))]
    pub fn broadcast_f64(&self, x: &mut [f64]) {
        if self.size == 1 {
            return;
        }
        #[cfg(feature = "mpi")]
        {
            use mpi::collective::Root;
            use mpi::topology::Communicator;
            self.world().process_at_rank(0).broadcast_into(x);
        }
    }

    /// Every rank's `local` (all of one length), concatenated in rank order, on every rank.
    pub fn gather_f32(&self, local: &[f32]) -> Vec<f32> {
        if self.size == 1 {
            return local.to_vec();
        }
        #[cfg(feature = "mpi")]
        {
            use mpi::collective::CommunicatorCollectives;
            let mut all = vec![0f32; local.len() * self.size];
            self.world().all_gather_into(local, &mut all[..]);
            all
        }
        #[cfg(not(feature = "mpi"))]
        unreachable!("more than one rank without MPI")
    }

    /// A state of `batch` rows laid out in `[batch, w]` blocks of widths `blocks`, from every
    /// rank's own rows (its `[rows, w]` blocks), on every rank.
    pub fn gather_rows(&self, local: &[f32], blocks: &[usize], batch: usize) -> Vec<f32> {
        if self.size == 1 {
            return local.to_vec();
        }
        let all = self.gather_f32(local);
        let per_rank = local.len();
        let mut full = Vec::with_capacity(per_rank * self.size);
        let mut off = 0;
        for &w in blocks {
            for r in 0..self.size {
                let n = self.rows_of_rank(batch, r).len() * w;
                full.extend_from_slice(&all[r * per_rank + off..r * per_rank + off + n]);
            }
            off += self.rows(batch).len() * w;
        }
        full
    }

    /// This rank's rows of a full state laid out as [`Dist::gather_rows`] makes it.
    pub fn own_rows(&self, full: &[f32], blocks: &[usize], batch: usize) -> Vec<f32> {
        if self.size == 1 {
            return full.to_vec();
        }
        let rows = self.rows(batch);
        let mut out = Vec::new();
        let mut off = 0;
        for &w in blocks {
            out.extend_from_slice(&full[off + rows.start * w..off + rows.end * w]);
            off += batch * w;
        }
        out
    }

    fn rows_of_rank(&self, batch: usize, r: usize) -> Range<usize> {
        batch * r / self.size..batch * (r + 1) / self.size
    }

    #[cfg(feature = "mpi")]
    fn world(&self) -> mpi::topology::SimpleCommunicator {
        mpi::topology::SimpleCommunicator::world()
    }

    #[cfg(feature = "mpi")]
    fn sum_in_order<T: mpi::datatype::Equivalence + Copy + Default + std::ops::AddAssign>(&self, x: &mut [T], send: &mut Vec<T>, recv: &mut Vec<T>) {
        use mpi::collective::CommunicatorCollectives;
        let n = self.size;
        let chunk = x.len().div_ceil(n);
        send.resize(chunk * n, T::default());
        send[..x.len()].copy_from_slice(x);
        recv.resize(chunk * n, T::default());
        let world = self.world();
        // recv[r·chunk..]: rank r's copy of this rank's chunk, added into rank 0's in rank order.
        world.all_to_all_into(&send[..], &mut recv[..]);
        let (mine, rest) = recv.split_at_mut(chunk);
        for r in 1..n {
            for (a, &b) in mine.iter_mut().zip(&rest[(r - 1) * chunk..r * chunk]) {
                *a += b;
            }
        }
        world.all_gather_into(&mine[..], &mut send[..]);
        x.copy_from_slice(&send[..x.len()]);
    }
}
