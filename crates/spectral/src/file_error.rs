//! [`DurableError`]: the errors of the files a run trusts, each naming the file: checkpoint
//! containers and atomic writes ([`crate::durable`], which re-exports it), output directories
//! and their lock ([`crate::outdir`]), inputs ([`crate::inputs`]) and what `--overwrite` removes
//! ([`crate::overwrite`]). It sits below all four, so none of them imports another for its error.

use std::path::{Path, PathBuf};

/// Errors of the durable-file layer; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// An operating-system error.
    #[error("{path}: {source}")]
    Os {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A checkpoint container that cannot be used.
    #[error("checkpoint {path}: {msg}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// An output directory that would mix or lose the files of an earlier run.
    #[error("output directory {path}: {msg}")]
    OutDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong and what to do.
        msg: String,
    },
}

/// The operating-system error of an operation on `path`.
pub(crate) fn os(path: &Path) -> impl FnOnce(std::io::Error) -> DurableError + '_ {
    move |source| DurableError::Os {
        path: path.to_path_buf(),
        source,
    }
}
