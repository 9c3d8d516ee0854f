//! Errors of the vortex method. Every message says what went wrong and where (file, key, step).

use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    /// The configuration file could not be parsed (unknown key, wrong type): the message of the
    /// TOML parser, which names the key and the line.
    #[error("{file}: {msg}")]
    ConfigParse { file: String, msg: String },
    /// A value in the configuration is out of range or inconsistent with another.
    #[error("{file}: `{key}`: {msg}")]
    Config {
        file: String,
        key: String,
        msg: String,
    },
    #[error("evaluation failed at step {step}: {source}")]
    Fmm {
        step: u64,
        #[source]
        source: vortex_fmm::FmmError,
    },
    /// A distributed evaluation failed (on this rank, or `DomainError::Remote` on another).
    #[error("evaluation failed at step {step}: {source}")]
    Domain {
        step: u64,
        #[source]
        source: vortex_domain::DomainError,
    },
    /// Another rank failed (every rank returns this after [`crate::parallel::agree`]): its
    /// rank and message.
    #[error("rank {rank}: {msg}")]
    Rank { rank: usize, msg: String },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint {path}: {msg}")]
    Checkpoint { path: PathBuf, msg: String },
    #[error("RBF re-interpolation: {0}")]
    Rbf(String),
    #[error(
        "blow-up at step {step} (t = {t}): {what}; the last good checkpoint is {last_checkpoint}"
    )]
    BlowUp {
        step: u64,
        t: f64,
        what: String,
        last_checkpoint: String,
    },
    /// An evaluation gave a non-finite velocity or stretching.
    #[error("non-finite {what} at step {step}, particle {particle} at {position:?}: {cause}")]
    NonFiniteField {
        step: u64,
        what: String,
        particle: u64,
        position: [f64; 3],
        cause: String,
    },
    /// A stability check refused the step (see [`crate::health`]).
    #[error("step {step} (t = {t}): {what}; the last good checkpoint is {last_checkpoint}")]
    Unstable {
        step: u64,
        t: f64,
        what: String,
        last_checkpoint: String,
    },
    /// An output directory that would lose or mix an earlier run's files.
    #[error("{0}")]
    OutDir(String),
    /// Not enough memory for the run (estimated before allocating).
    #[error("{0}")]
    Memory(String),
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Whether this error only reports that another rank failed (its own message says why).
    pub fn is_remote(&self) -> bool {
        matches!(
            self,
            Error::Domain {
                source: vortex_domain::DomainError::Remote { .. },
                ..
            }
        )
    }

    /// The error with `name` as the last good checkpoint where it names one (a blow-up or a
    /// refused step): the checkpoint whose write finished after the error was raised.
    pub(crate) fn with_last_checkpoint(mut self, name: String) -> Error {
        if let Error::BlowUp {
            last_checkpoint, ..
        }
        | Error::Unstable {
            last_checkpoint, ..
        } = &mut self
        {
            *last_checkpoint = name;
        }
        self
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
