//! Options that several subcommands share, each declared once, and the one way an options
//! struct gets its defaults: from its own command-line declaration, so that `--help`, the
//! library's `Default` and a TOML file's missing keys cannot disagree.

use anyhow::{bail, Result};
use clap::{Args, FromArgMatches};
use serde::{Deserialize, Serialize};

/// The defaults of an options struct, as its `#[arg(default_value...)]` attributes say.
pub fn defaults<T: Args + FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults").no_binary_name(true));
    let m = cmd.try_get_matches_from(std::iter::empty::<String>()).expect("every option has a default or is optional");
    T::from_arg_matches(&m).expect("the declared defaults parse")
}

/// How a command runs, never what it computes: a run gives the same bits for the same thread
/// count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Args, Serialize, Deserialize)]
#[serde(default)]
pub struct Runtime {
    /// Worker threads [default: every core]; results are identical for a given count
    #[arg(long)]
    pub threads: Option<usize>,
}

impl Runtime {
    /// Start the worker pool (flushing denormals to zero on every thread); returns its size.
    pub fn start(&self) -> Result<usize> {
        let n = self.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        crate::kernels::num::flush_denormals();
        // A second call (tests in one process) keeps the first pool; that is fine for them.
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .start_handler(|_| crate::kernels::num::flush_denormals())
            .build_global();
        Ok(rayon::current_num_threads())
    }
}
