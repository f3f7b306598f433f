//! The chat and Responses logprob sections (a list of `{token, logprob, bytes, top_logprobs, id}` entries), read by
//! the hand-written `json::Reader` straight into `Columns`, as `modelir.transports.openai._typed.columns` builds
//! them: the chat API's `choices[i].logprobs` (its `content`) and the Responses API's `output_text.logprobs`.
//!
//! serde's per-value dispatch made this read cost about half an `orjson.loads` of the whole body; reading the bytes
//! directly, keys compared in place, is the same one pass without it. What the Python decoders refuse is declined
//! (a struct given as an array, a missing required field, a value of another type), and so is what this reader is
//! not sure to reproduce: a repeated key (the decoders keep the last one), a lone surrogate, deep nesting.

use crate::json::{Read, Reader};
use crate::openai::{float32, push_string, Declined, Section};
use crate::wire::{Columns, Joined};

// vLLM clamps minus infinity to this value; the IR stores -inf (modelir.logprobs.VLLM_MINUS_INFINITY).
const VLLM_MINUS_INFINITY: f32 = -9999.0;

fn declined<T>(why: &str) -> Read<T> {
    Err(Declined(why.to_owned()))
}

/// Bookkeeping for the rules `_typed.columns` applies across entries (decided by the first entry or alternative).
#[derive(Default)]
struct Entries {
    out: Columns,
    count: usize,
    ids: usize,
    first_has_id: bool,
    first_has_tops: bool,
    flat: usize,
    top_ids: usize,
    first_top_has_id: bool,
    /// vLLM: a logprob at or below -9999.0 (as float32, the column's type) reads back as -inf.
    unclamp: bool,
    scratch: Vec<u8>,
}

/// The keys an entry may have that the builder reads.
#[derive(Clone, Copy, PartialEq)]
enum Field {
    Token,
    Logprob,
    Bytes,
    TopLogprobs,
    Id,
    Other,
}

/// An object key, as the field it names. Unescaped keys (all of them, in practice) are compared in place; a key
/// with an escape is unescaped first (the decoders compare unescaped names). A key that names no field must still
/// be a valid string (UTF-8, no lone surrogate), as the decoders require.
#[inline]
fn key(r: &mut Reader, scratch: &mut Vec<u8>) -> Read<Field> {
    let start = r.pos;
    let name = match r.plain_string()? {
        Some(name) => name,
        None => {
            r.pos = start;
            scratch.clear();
            r.string_into(scratch)?;
            &scratch[..]
        }
    };
    Ok(match name {
        b"token" => Field::Token,
        b"logprob" => Field::Logprob,
        b"bytes" => Field::Bytes,
        b"top_logprobs" => Field::TopLogprobs,
        b"id" => Field::Id,
        _ => {
            if !name.is_ascii() && std::str::from_utf8(name).is_err() {
                return declined("a key that is not UTF-8");
            }
            Field::Other
        }
    })
}

fn once(seen: &mut bool, key: &str) -> Read<()> {
    if std::mem::replace(seen, true) {
        return Err(Declined(format!("a repeated {key} key")));
    }
    Ok(())
}

/// `[n, n, ...]` with each n an integer literal 0-255, appended to `out`; anything else (another type, a float, a
/// sign, a leading zero, a value past 255) is declined.
#[inline]
fn byte_list(r: &mut Reader, out: &mut Vec<u8>) -> Read<()> {
    if !r.open_list()? {
        return Ok(());
    }
    loop {
        r.peek();
        out.push(r.small_integer(255)? as u8);
        if !r.more(b']')? {
            return Ok(());
        }
    }
}

/// An entry's `id`: null, or an integer literal within int32 (a float literal, even `5.0`, is declined as the
/// decoders refuse it for an int field).
#[inline]
fn id(r: &mut Reader) -> Read<Option<i32>> {
    if r.null() {
        return Ok(None);
    }
    r.peek();
    let negative = r.eat_byte(b'-');
    let magnitude = r.small_integer(1 << 31)?;
    let value = if negative {
        -(magnitude as i64)
    } else {
        magnitude as i64
    };
    i32::try_from(value)
        .map(Some)
        .map_err(|_| Declined("an id beyond int32".into()))
}

/// A logprob: a number (not null), as its float32 column stores it.
#[inline]
fn logprob(r: &mut Reader, unclamp: bool) -> Read<f32> {
    if !matches!(r.peek(), Some(b'-' | b'0'..=b'9')) {
        return declined("a logprob that is not a number");
    }
    let value = float32(r.number_for_f32()?)?;
    Ok(if unclamp && value <= VLLM_MINUS_INFINITY {
        f32::NEG_INFINITY
    } else {
        value
    })
}

/// One entry, or with `top` one of its alternatives (whose `top_logprobs` key, if any, is skipped), appended to the
/// main or the top columns; the token's UTF-8 stands for its bytes where `bytes` is null or absent.
fn item(r: &mut Reader, b: &mut Entries, top: bool) -> Read<()> {
    let mut seen = [false; 5];
    let (mut logprob_value, mut bytes_given, mut tops_given, mut id_value) =
        (0f32, false, false, None);
    let token_start = if top {
        &b.out.top_tokens
    } else {
        &b.out.tokens
    }
    .data
    .len();
    bytes_column(&mut b.out, top).start();
    if !r.open_object()? {
        return declined("an entry without token and logprob");
    }
    loop {
        let field = key(r, &mut b.scratch)?;
        r.expect(b':')?;
        match field {
            Field::Token => {
                once(&mut seen[0], "token")?;
                push_string(
                    r,
                    if top {
                        &mut b.out.top_tokens
                    } else {
                        &mut b.out.tokens
                    },
                )?;
            }
            Field::Logprob => {
                once(&mut seen[1], "logprob")?;
                logprob_value = logprob(r, b.unclamp)?;
            }
            Field::Bytes => {
                once(&mut seen[2], "bytes")?;
                if !r.null() {
                    byte_list(r, &mut bytes_column(&mut b.out, top).data)?;
                    bytes_given = true;
                }
            }
            Field::TopLogprobs if !top => {
                once(&mut seen[3], "top_logprobs")?;
                if !r.null() {
                    let mut count = 0u32;
                    if r.open_list()? {
                        loop {
                            item(r, b, true)?;
                            count += 1;
                            if !r.more(b']')? {
                                break;
                            }
                        }
                    }
                    b.out.top_counts.push(count);
                    tops_given = true;
                }
            }
            Field::Id => {
                once(&mut seen[4], "id")?;
                id_value = id(r)?;
            }
            Field::TopLogprobs | Field::Other => r.skip(&mut b.scratch, 3)?,
        }
        if !r.more(b'}')? {
            break;
        }
    }
    if !seen[0] {
        return declined("an entry without a token");
    }
    if !seen[1] {
        return declined("an entry without a logprob");
    }
    let out = &mut b.out;
    if !bytes_given {
        let (tokens, joined) = if top {
            (&out.top_tokens.data, &mut out.top_token_bytes.data)
        } else {
            (&out.tokens.data, &mut out.token_bytes.data)
        };
        joined.extend_from_slice(&tokens[token_start..]);
    }
    if top {
        out.top_logprobs.push(logprob_value);
        if b.flat == 0 {
            b.first_top_has_id = id_value.is_some();
        }
        b.top_ids += usize::from(id_value.is_some());
        out.top_token_ids.extend(id_value);
        b.flat += 1;
    } else {
        out.logprobs.push(logprob_value);
        if !tops_given {
            out.top_counts.push(0); // absent or null: no alternatives at this position
        }
        if b.count == 0 {
            b.first_has_id = id_value.is_some();
            b.first_has_tops = tops_given;
        }
        b.ids += usize::from(id_value.is_some());
        out.token_ids.extend(id_value);
        b.count += 1;
    }
    Ok(())
}

fn bytes_column(out: &mut Columns, top: bool) -> &mut Joined {
    if top {
        &mut out.top_token_bytes
    } else {
        &mut out.token_bytes
    }
}

/// A list of entries or null (the Responses API's `output_text.logprobs`, a chat choice's `logprobs.content`), the
/// whole of `raw`; `unclamp` reads vLLM's -9999.0 clamp back as -inf.
pub fn entries(raw: &[u8], unclamp: bool) -> Read<Section> {
    let mut r = Reader::new(raw);
    let mut b = Entries {
        unclamp,
        ..Entries::default()
    };
    if r.null() {
        r.end()?;
        return Ok(Section::Absent);
    }
    // Room for the most the section can hold (an alternative takes at least 20 bytes, `{"token":"","logprob":0},`),
    // so the columns never move while they grow; pages never written are never touched.
    let room = raw.len();
    b.out.top_tokens.data.reserve(room / 4);
    b.out.top_tokens.lengths.reserve(room / 20);
    b.out.top_logprobs.reserve(room / 20);
    b.out.top_token_bytes.data.reserve(room / 4);
    b.out.top_token_bytes.offsets.reserve(room / 20);
    if r.open_list()? {
        loop {
            item(&mut r, &mut b, false)?;
            if !r.more(b']')? {
                break;
            }
        }
    }
    r.end()?;
    finish(b)
}

/// A chat choice's `logprobs` object (or null): its `content`, other keys checked and skipped.
pub fn chat_choice(raw: &[u8]) -> Read<Section> {
    let mut r = Reader::new(raw);
    if r.null() {
        r.end()?;
        return Ok(Section::Absent);
    }
    let mut content = None;
    let mut scratch = Vec::new();
    if r.open_object()? {
        loop {
            scratch.clear();
            r.string_into(&mut scratch)?;
            r.expect(b':')?;
            if scratch == b"content" {
                if content.is_some() {
                    return declined("a repeated content key");
                }
                r.peek();
                let start = r.pos;
                r.skip(&mut scratch, 1)?;
                content = Some((start, r.pos));
            } else {
                r.skip(&mut scratch, 1)?;
            }
            if !r.more(b'}')? {
                break;
            }
        }
    }
    r.end()?;
    match content {
        Some((start, end)) => entries(&raw[start..end], false),
        None => Ok(Section::Absent),
    }
}

/// The rules across entries, as `_typed.columns` has them: ids when the first entry has one (then every entry
/// must), alternatives when any came back or the first entry has a list, their ids likewise by the first one.
fn finish(mut b: Entries) -> Read<Section> {
    if b.count == 0 {
        return Ok(Section::Empty);
    }
    if !b.first_has_id {
        b.out.token_ids.clear();
    } else if b.ids != b.count {
        return declined("an entry without the id its list has");
    }
    if b.flat == 0 && !b.first_has_tops {
        b.out.top_counts.clear();
    }
    if !b.first_top_has_id {
        b.out.top_token_ids.clear();
    } else if b.top_ids != b.flat {
        return declined("an alternative without the id its list has");
    }
    Ok(Section::Built(Box::new(b.out)))
}
