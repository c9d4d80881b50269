//! The commands' errors: [`Error`], which bert-sources defines (the lowest crate that raises
//! one: finding a model), with the library's own ([`bert_core::BertError`]), the hub's
//! ([`HubError`]), a file a command reads or writes that it cannot use, a request that cannot
//! run as given, and what was being done when one of these happened. Each is one line; options
//! are named as [`bert_core::words`] writes them, for the caller to spell. What bert-view cannot
//! draw becomes one of them by [`drawn`].

pub use bert_sources::error::{Error, HubError, Result, Within};

/// Returns a [`Error::Request`] with the formatted message.
#[macro_export]
macro_rules! refuse {
    ($($message:tt)*) => {
        return Err($crate::Error::Request(format!($($message)*)))
    };
}

/// What bert-view could not draw, as the commands' error: the library's error as it is, a
/// request refused as a request.
pub fn drawn(error: bert_view::Error) -> Error {
    match error {
        bert_view::Error::Bert(error) => Error::Bert(error),
        bert_view::Error::Request(message) => Error::Request(message),
    }
}
