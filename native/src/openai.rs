//! What the readers share: a section's outcome (`Section`), a decline (`Declined`), the float32 rule of the
//! logprob columns and a string read into a column.
//!
//! Each reader answers only for the shape whose Python result it reproduces exactly; anything else is `Declined`,
//! and the caller takes the Python path, which is the reference (and raises the typed error). The chat and
//! Responses entries are read by `chat.rs`, the completions parallel arrays by `completions.rs`, both with the
//! hand-written `json::Reader`.

use std::fmt;

use crate::json::{Read, Reader};

/// Why the native path gave the body back to the Python builders (a shape it does not reproduce).
#[derive(Debug)]
pub struct Declined(pub String);

impl<E: fmt::Display> From<E> for Declined {
    fn from(err: E) -> Self {
        Declined(err.to_string())
    }
}

/// What a logprob section amounts to, mirroring the Python lifts' three cases.
pub enum Section {
    /// null or absent: the provider sent no logprobs (the lift records that).
    Absent,
    /// present but without tokens (an empty list): nothing to build.
    Empty,
    /// the built columns.
    Built(Box<Columns>),
}

use crate::wire::{Columns, Strings};

/// A logprob as protobuf's Python float column stores it. A value beyond float32's largest is declined: that
/// column makes it infinite, where rounding to nearest would keep values just past the largest finite.
#[inline]
pub(crate) fn float32(value: f64) -> Result<f32, Declined> {
    if value.abs() > f64::from(f32::MAX) {
        return Err(Declined("a logprob beyond float32's range".into()));
    }
    Ok(value as f32)
}

/// One string pushed to a column, unescaped.
#[inline]
pub fn push_string(r: &mut Reader, column: &mut Strings) -> Read<()> {
    let start = column.data.len();
    r.string_into(&mut column.data)?;
    column.lengths.push((column.data.len() - start) as u32);
    Ok(())
}
