//! The legacy completions logprob sections (OpenAI, vLLM), read by the hand-written `json::Reader` in one pass over
//! the body: where each choice's `logprobs` value sits, and its parallel arrays straight into `Columns`, as
//! `OpenAICompletions.columns` builds them (with vLLM's -9999.0 clamp and `token_id:N` spellings when asked).
//!
//! serde_json read this shape (40,000 short keys and floats for 2,000 x top-20) slower than orjson plus the Python
//! builders; reading the bytes directly, with no per-value dispatch, is what makes the native path pay here.
//! What the Python decoders refuse is declined here too (a value of another type, a missing or mismatched array),
//! and so is what this reader is not sure to reproduce: a repeated key, an escaped outer key.

use crate::json::{Read, Reader};
use crate::openai::{float32, push_string, Declined, Section};
use crate::wire::Columns;

// vLLM clamps minus infinity to this value; the IR stores -inf (modelir.logprobs.VLLM_MINUS_INFINITY).
const VLLM_MINUS_INFINITY: f64 = -9999.0;
const TOKEN_ID_PREFIX: &str = "token_id:";

/// How vLLM's extensions apply to a completions section.
#[derive(Clone, Copy)]
pub struct Dialect {
    /// -9999.0 and below read back as -inf.
    pub unclamp: bool,
    /// Tokens spelled `token_id:N` fill the id columns.
    pub token_ids: bool,
}

fn declined<T>(why: &str) -> Read<T> {
    Err(Declined(why.to_owned()))
}

/// A completions logprob value: a number, or null (a position without a logprob: NaN in the IR).
#[inline]
fn value(r: &mut Reader, dialect: Dialect) -> Read<f32> {
    if r.null() {
        return Ok(f32::NAN);
    }
    if !matches!(r.peek(), Some(b'-' | b'0'..=b'9')) {
        return declined("a logprob that is not a number");
    }
    match r.number_for_f32()? {
        v if dialect.unclamp && v <= VLLM_MINUS_INFINITY => Ok(f32::NEG_INFINITY),
        v => float32(v),
    }
}

#[derive(Default)]
struct Completion {
    out: Columns,
    tokens: Option<bool>,
    values: Option<usize>,
    tops: Option<usize>,
    /// The current alternatives object's keys, (hash, start, length) in `out.top_tokens.data`: a repeat is told
    /// by the hash and confirmed on the bytes.
    keys: Vec<(u64, usize, usize)>,
    scratch: Vec<u8>,
}

/// A key's first eight bytes and its length in one word: enough to tell most keys of one small object apart
/// before comparing their bytes (and cheaper than hashing every byte).
#[inline]
fn key_hash(bytes: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    let n = bytes.len().min(8);
    head[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(head) ^ (bytes.len() as u64).rotate_right(8)
}

/// A key met for the first time in the same position's alternatives, or a decline (orjson keeps a repeated key's
/// last value at its first place; the Python path reproduces that).
#[inline]
fn first_time(b: &mut Completion, start: usize) -> Read<()> {
    let data = &b.out.top_tokens.data;
    let key = &data[start..];
    let hash = key_hash(key);
    for &(other, from, length) in &b.keys {
        if other == hash && &data[from..from + length] == key {
            return declined("a repeated alternative key");
        }
    }
    b.keys.push((hash, start, key.len()));
    Ok(())
}

/// One position's alternatives, `{token: logprob}` or null, in document order; pushes their count.
fn alternatives(r: &mut Reader, b: &mut Completion, dialect: Dialect) -> Read<()> {
    if r.null() {
        b.out.top_counts.push(0);
        return Ok(());
    }
    let first = b.out.top_tokens.len();
    b.keys.clear();
    if r.open_object()? {
        loop {
            let start = b.out.top_tokens.data.len();
            push_string(r, &mut b.out.top_tokens)?;
            first_time(b, start)?;
            r.expect(b':')?;
            let logprob = value(r, dialect)?;
            b.out.top_logprobs.push(logprob);
            if !r.more(b'}')? {
                break;
            }
        }
    }
    b.out
        .top_counts
        .push((b.out.top_tokens.len() - first) as u32);
    Ok(())
}

/// A list (or null: false) whose elements `element` reads.
fn nullable_list(r: &mut Reader, mut element: impl FnMut(&mut Reader) -> Read<()>) -> Read<bool> {
    if r.null() {
        return Ok(false);
    }
    if r.open_list()? {
        loop {
            element(r)?;
            if !r.more(b']')? {
                break;
            }
        }
    }
    Ok(true)
}

fn once(seen: &mut bool, key: &str) -> Read<()> {
    if std::mem::replace(seen, true) {
        return Err(Declined(format!("a repeated {key} key")));
    }
    Ok(())
}

/// `{tokens, token_logprobs, top_logprobs, ...}` or null (false); other keys, such as `text_offset`, are checked
/// and skipped.
fn arrays(r: &mut Reader, b: &mut Completion, dialect: Dialect) -> Read<bool> {
    if r.null() {
        return Ok(false);
    }
    let mut seen = [false; 3];
    let mut key = Vec::new();
    if r.open_object()? {
        loop {
            key.clear();
            r.string_into(&mut key)?;
            r.expect(b':')?;
            match key.as_slice() {
                b"tokens" => {
                    once(&mut seen[0], "tokens")?;
                    let tokens = &mut b.out.tokens;
                    b.tokens = Some(nullable_list(r, |r| push_string(r, tokens))?);
                }
                b"token_logprobs" => {
                    once(&mut seen[1], "token_logprobs")?;
                    let values = &mut b.out.logprobs;
                    let given = nullable_list(r, |r| value(r, dialect).map(|v| values.push(v)))?;
                    b.values = given.then_some(values.len());
                }
                b"top_logprobs" => {
                    once(&mut seen[2], "top_logprobs")?;
                    let mut count = 0;
                    if nullable_list(r, |r| {
                        count += 1;
                        alternatives(r, b, dialect)
                    })? {
                        b.tops = Some(count);
                    }
                }
                _ => r.skip(&mut b.scratch, 1)?,
            }
            if !r.more(b'}')? {
                break;
            }
        }
    }
    Ok(true)
}

/// The ids that `token_id:N` spellings carry, when every token is so spelled (vLLM's `spells_token_ids`), else
/// None. A spelling that Python's `int()` might read differently from plain ASCII digits is declined.
fn spelled_ids<'s>(
    mut tokens: impl Iterator<Item = &'s str> + Clone,
) -> Result<Option<Vec<i32>>, Declined> {
    match tokens.clone().next() {
        Some(t) if t.starts_with(TOKEN_ID_PREFIX) => {}
        _ => return Ok(None),
    }
    let mut ids = Vec::new();
    let mut unsure = false;
    for token in tokens.by_ref() {
        let Some(rest) = token.strip_prefix(TOKEN_ID_PREFIX) else {
            return Ok(None); // one token that is not an id: no id columns, whatever the others are
        };
        let digits = rest.strip_prefix('-').unwrap_or(rest);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            unsure = true;
            continue;
        }
        match rest.parse::<i32>() {
            Ok(id) => ids.push(id),
            Err(_) => unsure = true, // beyond int32: Python's column refuses it
        }
    }
    if unsure {
        return Err(Declined("a token_id spelling beyond plain digits".into()));
    }
    Ok(Some(ids))
}

/// `choices[i].logprobs` of a completion, read at `r`: null (absent), or the parallel arrays.
fn section(r: &mut Reader, dialect: Dialect) -> Read<Section> {
    let mut b = Completion::default();
    // Room for the most the rest of the body can hold (an alternative takes at least six bytes, `"":0,`), so the
    // columns never move while they grow; pages never written are never touched.
    let room = r.remaining().min(1 << 24);
    b.out.top_tokens.data.reserve(room);
    b.out.top_tokens.lengths.reserve(room / 6);
    b.out.top_logprobs.reserve(room / 6);
    if !arrays(r, &mut b, dialect)? {
        return Ok(Section::Absent);
    }
    let count = b.out.tokens.len();
    if b.tokens != Some(true) || count == 0 {
        return Ok(Section::Empty); // absent, null or empty tokens: nothing to build
    }
    if b.values != Some(count) {
        return declined("token_logprobs missing or of another length than tokens");
    }
    let tops = b.tops.unwrap_or(0);
    if tops != 0 && tops != count {
        return declined("top_logprobs of another length than tokens");
    }
    let mut out = b.out;
    if dialect.token_ids {
        if let Some(ids) = spelled_ids(out.tokens.iter_from(0))? {
            out.token_ids = ids;
        }
    }
    if out.top_tokens.len() == 0 {
        // No alternatives anywhere (`any(tops)` is false in Python): no top columns at all.
        out.top_counts.clear();
        out.top_logprobs.clear();
        return Ok(Section::Built(Box::new(out)));
    }
    if dialect.token_ids {
        if let Some(ids) = spelled_ids(out.top_tokens.iter_from(0))? {
            out.top_token_ids = ids;
        }
    }
    Ok(Section::Built(Box::new(out)))
}

/// One choice found in a body: the byte span (start, end) of its `logprobs` value and what the value holds.
pub type Found = Option<(usize, usize, Section)>;

/// Each choice of a completions body, in order: None for a choice without a `logprobs` key, else its span and
/// section. Python parses the rest (the spans cut out) with orjson, the reference decoder, which also checks
/// every byte this pass only skips. Declined when the body is not an object, `choices` is not a list of objects,
/// or it or a choice's `logprobs` key is repeated (orjson keeps the last one): the Python path handles those.
pub fn completion_body(body: &[u8], dialect: Dialect) -> Read<Vec<Found>> {
    let mut r = Reader::new(body);
    let mut choices = None;
    if r.open_object()? {
        loop {
            if r.loose_key()? == b"choices" {
                if choices.is_some() {
                    return declined("a repeated choices key");
                }
                r.expect(b':')?;
                choices = Some(choice_list(&mut r, dialect)?);
            } else {
                r.expect(b':')?;
                r.skip_loose()?;
            }
            if !r.more(b'}')? {
                break;
            }
        }
    }
    Ok(choices.unwrap_or_default())
}

fn choice_list(r: &mut Reader, dialect: Dialect) -> Read<Vec<Found>> {
    let mut found = Vec::new();
    if !r.open_list()? {
        return Ok(found);
    }
    loop {
        let mut logprobs = None;
        if r.open_object()? {
            loop {
                if r.loose_key()? == b"logprobs" {
                    if logprobs.is_some() {
                        return declined("a repeated logprobs key");
                    }
                    r.expect(b':')?;
                    r.peek();
                    let start = r.pos;
                    let built = section(r, dialect)?;
                    logprobs = Some((start, r.pos, built));
                } else {
                    r.expect(b':')?;
                    r.skip_loose()?;
                }
                if !r.more(b'}')? {
                    break;
                }
            }
        }
        found.push(logprobs);
        if !r.more(b']')? {
            return Ok(found);
        }
    }
}
