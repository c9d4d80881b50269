//! How a command's passes run: how many threads, and which kernels. The library reads no
//! environment variable: a caller that honours `BERT_TRACE_THREADS` and `BERT_TRACE_KERNELS`
//! (the binary, the Python package) reads them with [`PassSettings::from_env`], handing it its
//! way of reading the environment.

use bert_core::ops::{self, Kernels};
use bert_core::words::{Choice, Opt};
use bert_core::BertError;

use crate::error::{Error, Result};
use crate::source::Env;

pub const THREADS: Opt = Opt("threads");
pub const KERNELS: Opt = Opt("kernels");

/// The variable that sets the thread count when no option does.
pub const THREADS_ENV_VAR: &str = "BERT_TRACE_THREADS";
/// The variable that picks the kernels when no option does.
pub const KERNELS_ENV_VAR: &str = "BERT_TRACE_KERNELS";

/// The thread count and kernels a request asks for; None: the process's count (the physical
/// cores, unless set before) and the fast kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassSettings {
    pub threads: Option<usize>,
    pub kernels: Option<Kernels>,
}

impl PassSettings {
    /// The settings the environment gives where `given` gives none.
    pub fn from_env(given: PassSettings, env: Env<'_>) -> Result<PassSettings> {
        let threads = match (given.threads, env(THREADS_ENV_VAR).filter(|v| !v.trim().is_empty())) {
            (Some(n), _) => Some(n),
            (None, Some(text)) => {
                let refused = || ops::ThreadsError::OutOfRange {
                    setting: THREADS_ENV_VAR,
                    value: text.clone(),
                    max: ops::max_threads(),
                };
                let n = text.trim().parse::<usize>().map_err(|_| threads_error(refused()))?;
                Some(ops::check_threads(n, THREADS_ENV_VAR, &text).map_err(threads_error)?)
            }
            (None, None) => None,
        };
        let kernels = match (given.kernels, env(KERNELS_ENV_VAR).filter(|v| !v.trim().is_empty())) {
            (Some(kernels), _) => Some(kernels),
            (None, Some(text)) => Some(Kernels::parse(text.trim()).ok_or_else(|| {
                Error::Request(format!("{KERNELS_ENV_VAR} is `{text}`, expected {}", Kernels::accepted()))
            })?),
            (None, None) => None,
        };
        Ok(PassSettings { threads, kernels })
    }

    /// Fixes the thread count for this process's passes and returns it, with the kernels.
    pub fn apply(&self) -> Result<(usize, Kernels)> {
        let threads = match self.threads {
            Some(n) => {
                let n = ops::check_threads(n, "‹threads›", &n.to_string()).map_err(threads_error)?;
                ops::set_threads(n).map_err(threads_error)?
            }
            None => ops::threads(),
        };
        Ok((threads, self.kernels.unwrap_or_default()))
    }

    /// The value of matrixmultiply's `MATMUL_NUM_THREADS` for these settings, when they set a
    /// thread count: what the caller sets at its start, before any thread exists (see
    /// `bert_core::ops::MATMUL_ENV_VAR`). None leaves matrixmultiply its own default.
    pub fn matmul_threads(&self) -> Option<String> {
        self.threads.map(|n| n.clamp(1, ops::MAX_MATMUL_THREADS).to_string())
    }
}

fn threads_error(error: ops::ThreadsError) -> Error {
    Error::Bert(BertError::Training(error.to_string()))
}
