//! modelir's native fast path: the logprob sections of OpenAI-shaped JSON bodies parsed straight into packed
//! `TokenLogprobs` wire bytes, with no Python object per token. Python merges the bytes into the IR
//! (`MergeFromString`); its own builders stay the reference, and whatever shape this declines goes to them.

mod chat;
mod completions;
mod decimal;
mod json;
mod openai;
mod wire;

use pyo3::buffer::PyBuffer;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use completions::Dialect;
use openai::{Declined, Section};

create_exception!(
    modelir_native,
    Unsupported,
    PyException,
    "A body whose logprob section the native path does not reproduce exactly; take the Python path."
);

/// The bytes behind any buffer (bytes, memoryview, msgspec.Raw), without copying them.
fn with_bytes<T>(
    data: &Bound<'_, PyAny>,
    work: impl FnOnce(&[u8]) -> Result<T, Declined>,
) -> PyResult<T> {
    let buffer = PyBuffer::<u8>::get(data)?;
    if !buffer.is_c_contiguous() {
        return Err(Unsupported::new_err("a non-contiguous buffer"));
    }
    // The buffer (and so the bytes) stays alive and unchanged for the call: `buffer` holds the export, and the
    // exporters used here (bytes, msgspec.Raw) are immutable. The GIL is kept: taking it back after releasing it
    // can wait up to the interpreter's switch interval whenever another thread runs Python (an in-process gRPC
    // server's, say), far more than a small section costs to parse.
    let bytes =
        unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) };
    let result = work(bytes);
    drop(buffer);
    result.map_err(|Declined(why)| Unsupported::new_err(why))
}

fn section(py: Python<'_>, section: Section) -> Option<Bound<'_, PyBytes>> {
    match section {
        Section::Absent => None,
        Section::Empty => Some(PyBytes::new(py, b"")),
        Section::Built(columns) => Some(PyBytes::new(py, &columns.encode())),
    }
}

/// A chat choice's `logprobs` JSON -> None (absent or null content), b"" (empty content) or `TokenLogprobs` bytes.
#[pyfunction]
fn chat_choice_logprobs<'py>(
    py: Python<'py>,
    raw: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let built = with_bytes(raw, chat::chat_choice)?;
    Ok(section(py, built))
}

/// A list of OpenAI logprob entries (JSON, or null) -> None, b"" or `TokenLogprobs` bytes; `unclamp` reads vLLM's
/// -9999.0 clamp (as float32) back as -inf.
#[pyfunction]
#[pyo3(signature = (raw, *, unclamp = false))]
fn entries_logprobs<'py>(
    py: Python<'py>,
    raw: &Bound<'py, PyAny>,
    unclamp: bool,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let built = with_bytes(raw, move |bytes| chat::entries(bytes, unclamp))?;
    Ok(section(py, built))
}

type Span<'py> = Option<(usize, usize, Option<Bound<'py, PyBytes>>)>;

/// A completions body -> per choice, None (no `logprobs` key) or (start, end, built): the span of the choice's
/// `logprobs` value in the body and what it holds (None, b"" or `TokenLogprobs` bytes).
#[pyfunction]
#[pyo3(signature = (body, *, unclamp, token_ids))]
fn completion_logprobs<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyAny>,
    unclamp: bool,
    token_ids: bool,
) -> PyResult<Vec<Span<'py>>> {
    let dialect = Dialect { unclamp, token_ids };
    let found = with_bytes(body, move |bytes| {
        completions::completion_body(bytes, dialect)
    })?;
    Ok(found
        .into_iter()
        .map(|s| s.map(|(start, end, built)| (start, end, section(py, built))))
        .collect())
}

#[pymodule]
fn modelir_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Unsupported", m.py().get_type::<Unsupported>())?;
    m.add_function(wrap_pyfunction!(chat_choice_logprobs, m)?)?;
    m.add_function(wrap_pyfunction!(entries_logprobs, m)?)?;
    m.add_function(wrap_pyfunction!(completion_logprobs, m)?)?;
    Ok(())
}
