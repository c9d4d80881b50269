//! The commands' errors: the library's own ([`BertError`]), the hub's ([`HubError`]), a file a
//! command reads or writes that it cannot use, a request that cannot run as given, and what was
//! being done when one of these happened. Each is one line; options are named as
//! [`bert_core::words`] writes them, for the caller to spell.

use std::path::PathBuf;

use bert_core::BertError;

pub use crate::source::hub_error::HubError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Bert(#[from] BertError),

    #[error(transparent)]
    Hub(#[from] HubError),

    /// A file a command reads or writes that it cannot use, and why.
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

/// Returns a [`Error::Request`] with the formatted message.
#[macro_export]
macro_rules! refuse {
    ($($message:tt)*) => {
        return Err($crate::Error::Request(format!($($message)*)))
    };
}

/// An option that must be there: `.or_refuse("what it is for")`.
pub trait OrRefuse<T> {
    fn or_refuse(self, problem: &str) -> Result<T>;
}

impl<T> OrRefuse<T> for Option<T> {
    fn or_refuse(self, problem: &str) -> Result<T> {
        self.ok_or_else(|| Error::Request(problem.to_string()))
    }
}

impl From<bert_view::Error> for Error {
    fn from(error: bert_view::Error) -> Error {
        match error {
            bert_view::Error::Bert(error) => Error::Bert(error),
            bert_view::Error::Request(message) => Error::Request(message),
        }
    }
}

impl From<ndarray::ShapeError> for Error {
    fn from(error: ndarray::ShapeError) -> Error {
        Error::Request(format!("a stage is not of the shape drawn: {error}"))
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Error {
        Error::Request(format!("not the JSON expected: {error}"))
    }
}

impl From<globset::Error> for Error {
    fn from(error: globset::Error) -> Error {
        Error::Request(format!("not a valid glob: {error}"))
    }
}
