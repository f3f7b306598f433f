//! The columnar `TokenLogprobs` message (proto/modelir/v1/logprobs.proto), written as protobuf wire bytes.
//!
//! Only field numbers appear here, never field names: names may be re-cut (the spec keeps numbers forever).
//! Python merges these bytes into an empty message (`MergeFromString`), so the order of fields does not matter;
//! what must match the Python builders is every column's content.

pub const TOKEN_IDS: u32 = 1;
pub const LOGPROBS: u32 = 2;
pub const TOKENS: u32 = 3;
pub const TOKEN_BYTES: u32 = 4;
pub const TOKEN_BYTE_OFFSETS: u32 = 5;
pub const TOP_COUNTS: u32 = 6;
pub const TOP_TOKEN_IDS: u32 = 7;
pub const TOP_LOGPROBS: u32 = 8;
pub const TOP_TOKENS: u32 = 9;
pub const TOP_TOKEN_BYTES: u32 = 10;
pub const TOP_TOKEN_BYTE_OFFSETS: u32 = 11;

const LENGTH_DELIMITED: u32 = 2;

/// Repeated strings kept as one buffer and their lengths (no allocation per token).
#[derive(Default)]
pub struct Strings {
    pub data: Vec<u8>,
    pub lengths: Vec<u32>,
}

impl Strings {
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// The strings from the `from`-th on.
    pub fn iter_from(&self, from: usize) -> impl Iterator<Item = &str> + Clone {
        let start: usize = self.lengths[..from].iter().map(|&l| l as usize).sum();
        self.lengths[from..]
            .iter()
            .scan(start, move |position, &length| {
                let piece = &self.data[*position..*position + length as usize];
                *position += length as usize;
                // Every piece was pushed as a &str.
                Some(std::str::from_utf8(piece).unwrap_or_default())
            })
    }
}

/// Concatenated byte pieces and the start offset of each (what `logprobs.joined` returns).
#[derive(Default)]
pub struct Joined {
    pub data: Vec<u8>,
    pub offsets: Vec<u32>,
}

impl Joined {
    /// Starts the next piece; its bytes are then appended to `data`.
    pub fn start(&mut self) {
        self.offsets.push(self.data.len() as u32);
    }
}

/// Every column of one `TokenLogprobs`; a column left empty is not written (proto3 writes no empty packed field).
#[derive(Default)]
pub struct Columns {
    pub token_ids: Vec<i32>,
    pub logprobs: Vec<f32>,
    pub tokens: Strings,
    pub token_bytes: Joined,
    pub top_counts: Vec<u32>,
    pub top_token_ids: Vec<i32>,
    pub top_logprobs: Vec<f32>,
    pub top_tokens: Strings,
    pub top_token_bytes: Joined,
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(out, u64::from(field << 3 | wire_type));
}

fn delimited(out: &mut Vec<u8>, field: u32, payload: &[u8]) {
    tag(out, field, LENGTH_DELIMITED);
    varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

fn packed_varints(
    out: &mut Vec<u8>,
    field: u32,
    values: impl Iterator<Item = u64>,
    scratch: &mut Vec<u8>,
) {
    scratch.clear();
    for value in values {
        varint(scratch, value);
    }
    if !scratch.is_empty() {
        delimited(out, field, scratch);
    }
}

fn packed_floats(out: &mut Vec<u8>, field: u32, values: &[f32]) {
    if values.is_empty() {
        return;
    }
    tag(out, field, LENGTH_DELIMITED);
    varint(out, (values.len() * 4) as u64);
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
}

fn strings(out: &mut Vec<u8>, field: u32, column: &Strings) {
    // Tens of thousands of short strings: the tag is one byte (field numbers below 16), and so is a length below 128.
    let key = (field << 3 | LENGTH_DELIMITED) as u8;
    debug_assert!(field < 16);
    let mut start = 0usize;
    for &length in &column.lengths {
        let end = start + length as usize;
        out.push(key);
        if length < 0x80 {
            out.push(length as u8);
        } else {
            varint(out, u64::from(length));
        }
        out.extend_from_slice(&column.data[start..end]);
        start = end;
    }
}

fn joined(
    out: &mut Vec<u8>,
    bytes_field: u32,
    offsets_field: u32,
    column: &Joined,
    scratch: &mut Vec<u8>,
) {
    if !column.data.is_empty() {
        delimited(out, bytes_field, &column.data);
    }
    packed_varints(
        out,
        offsets_field,
        column.offsets.iter().map(|&o| u64::from(o)),
        scratch,
    );
}

impl Columns {
    /// The message's wire bytes. int32 is written as protobuf does: a negative value sign-extended to 64 bits.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.tokens.data.len()
                + self.top_tokens.data.len()
                + self.token_bytes.data.len()
                + self.top_token_bytes.data.len()
                + 4 * (self.logprobs.len() + self.top_logprobs.len())
                + 4 * (self.tokens.lengths.len() + self.top_tokens.lengths.len())
                + 64,
        );
        let mut scratch = Vec::new();
        packed_varints(
            &mut out,
            TOKEN_IDS,
            self.token_ids.iter().map(|&v| i64::from(v) as u64),
            &mut scratch,
        );
        packed_floats(&mut out, LOGPROBS, &self.logprobs);
        strings(&mut out, TOKENS, &self.tokens);
        joined(
            &mut out,
            TOKEN_BYTES,
            TOKEN_BYTE_OFFSETS,
            &self.token_bytes,
            &mut scratch,
        );
        packed_varints(
            &mut out,
            TOP_COUNTS,
            self.top_counts.iter().map(|&v| u64::from(v)),
            &mut scratch,
        );
        packed_varints(
            &mut out,
            TOP_TOKEN_IDS,
            self.top_token_ids.iter().map(|&v| i64::from(v) as u64),
            &mut scratch,
        );
        packed_floats(&mut out, TOP_LOGPROBS, &self.top_logprobs);
        strings(&mut out, TOP_TOKENS, &self.top_tokens);
        joined(
            &mut out,
            TOP_TOKEN_BYTES,
            TOP_TOKEN_BYTE_OFFSETS,
            &self.top_token_bytes,
            &mut scratch,
        );
        out
    }
}
