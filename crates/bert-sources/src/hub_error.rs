//! Why a model could not come from the hub: plain data, which the commands' errors carry and
//! the Python package turns into its own exception, without either reaching the hub's code.

use std::fmt;

/// Why a model could not come from the hub, as a caller branches on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HubFailure {
    /// The hub, the repo, the revision or a file the model needs is not there.
    NotFound,
    /// Not in the cache (or the cached snapshot is incomplete), and downloads are forbidden.
    Offline,
    /// The model is gated or private.
    Access,
    /// The network failed, or what answered is not a hub.
    Network,
    /// A download broke off, or does not match its hash, or the repo changed meanwhile.
    Broken,
    /// The weights are in a form bert-trace does not read (a pickle, several files).
    Unsupported,
}

/// A model the hub could not give, and why.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{id}: {problem}")]
pub struct HubError {
    /// The model id as given.
    pub id: String,
    pub kind: HubFailure,
    pub problem: String,
}

impl HubError {
    pub fn new(id: &impl fmt::Display, kind: HubFailure, problem: String) -> HubError {
        HubError { id: id.to_string(), kind, problem }
    }
}
