//! `bert_trace.serve(dump)` and `Trace.serve()`: the page of `bert-trace view --serve`, served
//! from this machine while the notebook goes on; the handle says where, and ends it.

use std::path::PathBuf;
use std::sync::Mutex;

use bert_commands::view::serve::{self, ServeRequest, Serving};
use bert_commands::view::ViewRequest;
use pyo3::prelude::*;

use crate::args;
use crate::errors::{guarded, OrRaise};

/// A running server: `url` (with the session's token) opens the page; `stop()` ends it, as
/// leaving a `with` block does. Shown in a notebook, it is the page itself, in a frame.
#[pyclass(name = "Server", module = "bert_trace", frozen)]
pub struct Server {
    #[pyo3(get)]
    url: String,
    running: Mutex<Option<Serving>>,
}

#[pymethods]
impl Server {
    /// Ends the server: it answers nothing more. Stopping it again does nothing.
    fn stop(&self, py: Python<'_>) {
        let serving = self.running.lock().expect("not poisoned").take();
        if let Some(serving) = serving {
            py.detach(|| serving.stop());
        }
    }

    /// Whether it still answers.
    #[getter]
    fn running(&self) -> bool {
        self.running.lock().expect("not poisoned").is_some()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.stop(py);
        false
    }

    fn _repr_html_(&self) -> String {
        let url = bert_commands::render::text_table::html_escape(&self.url);
        format!(
            "<p><a href=\"{url}\" target=\"_blank\">{url}</a> (bert_trace.Server: stop() ends it)</p>\n\
             <iframe src=\"{url}\" style=\"width: 100%; height: 900px; border: 1px solid #ddd\"></iframe>"
        )
    }

    fn __repr__(&self) -> String {
        let state = if self.running() { "running" } else { "stopped" };
        format!("bert_trace.Server({}, {state})", self.url)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(serving) = self.running.get_mut().expect("not poisoned").take() {
            serving.stop();
        }
    }
}

/// The keywords both ways of serving share, as a request.
pub fn request(
    model: Option<PathBuf>,
    host: &str,
    port: u16,
    heatmap: Option<&Bound<'_, PyAny>>,
) -> PyResult<ServeRequest> {
    Ok(ServeRequest {
        view: ViewRequest { model, heatmaps: args::strings(heatmap)?, ..ViewRequest::default() },
        host: host.to_string(),
        port,
        dialect: bert_core::words::Dialect::Keywords,
    })
}

/// Starts serving `dump` (a path) by `request`.
pub fn serve_path(py: Python<'_>, dump: PathBuf, request: ServeRequest) -> PyResult<Server> {
    guarded(py, || {
        let request = ServeRequest { view: ViewRequest { dump, ..request.view }, ..request };
        let serving = py.detach(|| serve::serve(&request)).or_raise(py)?;
        Ok(started(py, serving))
    })
}

/// Starts serving `dump`, already open (a trace in memory), by `request`.
pub fn serve_open(py: Python<'_>, dump: bert_core::Dump, request: ServeRequest) -> PyResult<Server> {
    guarded(py, || {
        let serving = py.detach(|| serve::serve_dump(dump, &request)).or_raise(py)?;
        Ok(started(py, serving))
    })
}

fn started(py: Python<'_>, serving: Serving) -> Server {
    crate::errors::notes(py, &serving.notes);
    Server { url: serving.url.clone(), running: Mutex::new(Some(serving)) }
}
