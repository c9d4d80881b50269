//! The errors of the commands and of finding their models: the library's own ([`BertError`]),
//! the hub's ([`HubError`]), a file a command reads or writes that it cannot use, a request
//! that cannot run as given, and what was being done when one of these happened. They are
//! defined here, in the lowest crate that raises them, and bert-commands uses them as its own
//! (`bert_commands::Error`). Each is one line; options are named as [`bert_core::words`] writes
//! them, for the caller to spell.

use std::path::PathBuf;

use bert_core::BertError;

pub use crate::hub_error::HubError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Bert(#[from] BertError),

    #[error(transparent)]
    Hub(#[from] HubError),

    /// A file a command reads or writes (a page, a cache's blob) that it cannot use, and why.
    #[error("{}: {problem}", path.display())]
    File { path: PathBuf, problem: String },

    /// A request that cannot run as given: options that do not fit together, a name that
    /// matches nothing.
    #[error("{0}")]
    Request(String),

    /// What was being done when `inner` happened.
    #[error("{what}: {inner}")]
    Within { what: String, inner: Box<Error> },
}

impl Error {
    /// The library error at the root of this one, if there is one: what a caller branches on
    /// (a file not found, a bad option value).
    pub fn bert(&self) -> Option<&BertError> {
        match self {
            Error::Bert(error) => Some(error),
            Error::Within { inner, .. } => inner.bert(),
            _ => None,
        }
    }

    /// The hub's error at the root of this one, if there is one.
    pub fn hub(&self) -> Option<&HubError> {
        match self {
            Error::Hub(error) => Some(error),
            Error::Within { inner, .. } => inner.hub(),
            _ => None,
        }
    }

    /// A file error, from an I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, error: std::io::Error) -> Error {
        Error::File { path: path.into(), problem: error.to_string() }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `what` said before an error: `.within(|| format!("--model {id}"))`.
pub trait Within<T> {
    fn within(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<Error>> Within<T> for std::result::Result<T, E> {
    fn within(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Within { what: what(), inner: Box::new(e.into()) })
    }
}

/// Returns an [`Error::Request`] with the formatted message.
macro_rules! refuse {
    ($($message:tt)*) => {
        return Err($crate::error::Error::Request(format!($($message)*)))
    };
}
pub(crate) use refuse;
