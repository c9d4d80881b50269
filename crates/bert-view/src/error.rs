//! Why a dump or a report cannot be drawn: the library's own error reading it ([`BertError`]),
//! or what it holds that cannot be drawn (a shape that disagrees with the dump's, a picture too
//! large, a report of no known kind). Each is one line; options are named as
//! [`bert_core::words`] writes them, for the caller to spell.

use bert_core::BertError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Bert(#[from] BertError),

    /// What the dump, the report or the request asks that cannot be drawn, and why.
    #[error("{0}")]
    Request(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Returns an [`Error::Request`] with the formatted message.
macro_rules! refuse {
    ($($message:tt)*) => {
        return Err($crate::error::Error::Request(format!($($message)*)))
    };
}
pub(crate) use refuse;

/// A value that must be there: `.or_refuse("what it is for")`.
pub(crate) trait OrRefuse<T> {
    fn or_refuse(self, problem: &str) -> Result<T>;
}

impl<T> OrRefuse<T> for Option<T> {
    fn or_refuse(self, problem: &str) -> Result<T> {
        self.ok_or_else(|| Error::Request(problem.to_string()))
    }
}

impl From<ndarray::ShapeError> for Error {
    fn from(error: ndarray::ShapeError) -> Error {
        Error::Request(format!("a stage is not of the shape drawn: {error}"))
    }
}
