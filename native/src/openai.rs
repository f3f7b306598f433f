//! The OpenAI-shaped logprob sections, parsed from borrowed JSON straight into `Columns` (serde visitors that
//! append to the columns as they read: no allocation per token).
//!
//! Each function answers only for the shape whose Python result it reproduces exactly; anything else is
//! `Declined`, and the caller takes the Python path, which is the reference (and raises the typed error).
//!   - chat: `choices[i].logprobs`, `{content: [{token, logprob, bytes, top_logprobs: [...], id}]}`, as
//!     `modelir.transports.openai._typed.columns` builds it; the Responses API's `output_text.logprobs` is the
//!     same list of entries.
//!
//! The completions shape (parallel arrays) has its own hand-written reader: `completions.rs`.
//!
//! What the Python decoders refuse is refused here too: a struct given as an array, a missing required field,
//! a value of another type. A key repeated in an object is declined (the decoders keep the last one).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::wire::{Columns, Joined};

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

/// A JSON number (or null) read as the Python decoders read it for a float column. The literal's text is parsed by
/// core's correctly rounded parser, as CPython, orjson and msgspec parse theirs; an integer literal is an integer
/// there (so `-0` is 0, not -0.0). Infinite values are refused (the decoders refuse `1e400`).
struct Num(Option<f64>);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <&'de RawValue>::deserialize(deserializer)?;
        let text = raw.get();
        match text.as_bytes().first() {
            Some(b'n') => Ok(Num(None)),
            Some(b'-' | b'0'..=b'9') => {
                let value: f64 = text.parse().map_err(de::Error::custom)?;
                if !value.is_finite() {
                    return Err(de::Error::custom("a number out of range"));
                }
                let integer = !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
                Ok(Num(Some(if integer && value == 0.0 { 0.0 } else { value })))
            }
            _ => Err(de::Error::custom("expected a number")),
        }
    }
}

impl Num {
    fn required<E: de::Error>(self) -> Result<f64, E> {
        self.0.ok_or_else(|| E::custom("a null logprob"))
    }
}

/// A logprob as protobuf's Python float column stores it. A value beyond float32's largest is declined: that
/// column makes it infinite, where rounding to nearest would keep values just past the largest finite.
pub(crate) fn float32<E: de::Error>(value: f64) -> Result<f32, E> {
    if value.abs() > f64::from(f32::MAX) {
        return Err(E::custom("a logprob beyond float32's range"));
    }
    Ok(value as f32)
}

fn once<T, E: de::Error>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom(format_args!("a repeated {key} key")));
    }
    *slot = Some(value);
    Ok(())
}

/// A string borrowed from the input when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(V(PhantomData))
    }
}

/// An object key as its (unescaped) bytes: the hot loops compare keys with ASCII names, which needs no UTF-8
/// check; a key that names no field is checked by `unknown` before its value is skipped.
struct Key<'a>(Cow<'a, [u8]>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v.as_bytes())))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.as_bytes().to_owned())))
            }
        }
        deserializer.deserialize_bytes(V(PhantomData))
    }
}

/// Skips the value of a key that names no field, once the key is known to be UTF-8 (as the decoders require).
fn unknown<'de, A: MapAccess<'de>>(key: &Key, map: &mut A) -> Result<(), A::Error> {
    std::str::from_utf8(&key.0).map_err(de::Error::custom)?;
    map.next_value::<IgnoredAny>().map(drop)
}

/// null -> false; anything else -> the inner seed, and true.
struct Nullable<S>(S);

impl<'de, S: DeserializeSeed<'de, Value = ()>> DeserializeSeed<'de> for Nullable<S> {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        struct V<S>(S);
        impl<'de, S: DeserializeSeed<'de, Value = ()>> Visitor<'de> for V<S> {
            type Value = bool;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a value or null")
            }
            fn visit_none<E: de::Error>(self) -> Result<bool, E> {
                Ok(false)
            }
            fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
                Ok(false)
            }
            fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
                self.0.deserialize(deserializer).map(|()| true)
            }
        }
        deserializer.deserialize_option(V(self.0))
    }
}

/// A list of byte values appended to a joined column. The list is taken as its JSON text (serde_json has checked
/// its syntax) and read by `byte_values`: much cheaper than one serde element per byte.
struct ByteList<'c>(&'c mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for ByteList<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let raw = <&'de RawValue>::deserialize(deserializer)?;
        byte_values(raw.get().as_bytes(), self.0).map_err(de::Error::custom)
    }
}

/// `[n, n, ...]` with each n an integer 0-255, appended to `out`; anything else (another type, a float, a sign,
/// a value past 255) is refused. The text is one syntactically valid JSON value.
fn byte_values(text: &[u8], out: &mut Vec<u8>) -> Result<(), &'static str> {
    const REFUSED: &str = "bytes that are not a list of integers 0-255";
    let skip = |i: &mut usize| {
        while matches!(text.get(*i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            *i += 1;
        }
    };
    if text.first() != Some(&b'[') {
        return Err(REFUSED);
    }
    let mut i = 1;
    skip(&mut i);
    if text.get(i) == Some(&b']') {
        return Ok(());
    }
    loop {
        skip(&mut i);
        let start = i;
        let mut value = 0u32;
        while let Some(&digit @ b'0'..=b'9') = text.get(i) {
            value = value * 10 + u32::from(digit - b'0');
            if value > 255 {
                return Err(REFUSED);
            }
            i += 1;
        }
        if i == start {
            return Err(REFUSED);
        }
        out.push(value as u8);
        skip(&mut i);
        match text.get(i) {
            Some(b',') => i += 1,
            Some(b']') => return Ok(()),
            _ => return Err(REFUSED),
        }
    }
}

// ---- chat completions and Responses -----------------------------------------------------------------------

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
}

/// A list of alternatives; pushes its length to `top_counts`.
struct TopsSeed<'b>(&'b mut Entries);

impl<'de> DeserializeSeed<'de> for TopsSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for TopsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of top_logprobs")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let b = self.0;
        let mut count = 0u32;
        while seq
            .next_element_seed(ItemSeed {
                b: &mut *b,
                top: true,
            })?
            .is_some()
        {
            count += 1;
        }
        b.out.top_counts.push(count);
        Ok(())
    }
}

/// One entry `{token, logprob, bytes, top_logprobs, id}`, or with `top` one of its alternatives (which has no
/// `top_logprobs`), appended to the main or the top columns; the token's UTF-8 where `bytes` is null or absent.
struct ItemSeed<'b> {
    b: &'b mut Entries,
    top: bool,
}

impl Entries {
    fn bytes_of(&mut self, top: bool) -> &mut Joined {
        if top {
            &mut self.out.top_token_bytes
        } else {
            &mut self.out.token_bytes
        }
    }
}

impl<'de> DeserializeSeed<'de> for ItemSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a logprob entry object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let (b, top) = (self.b, self.top);
        let (mut token, mut logprob, mut bytes, mut tops, mut id) = (None, None, None, None, None);
        b.bytes_of(top).start();
        while let Some(key) = map.next_key::<Key>()? {
            match key.0.as_ref() {
                b"token" => once(&mut token, map.next_value::<Text>()?.0, "token")?,
                b"logprob" => once(
                    &mut logprob,
                    map.next_value::<Num>()?.required()?,
                    "logprob",
                )?,
                b"bytes" => {
                    let given =
                        map.next_value_seed(Nullable(ByteList(&mut b.bytes_of(top).data)))?;
                    once(&mut bytes, given, "bytes")?;
                }
                b"top_logprobs" if !top => {
                    let given = map.next_value_seed(Nullable(TopsSeed(&mut *b)))?;
                    once(&mut tops, given, "top_logprobs")?;
                }
                b"id" => once(&mut id, map.next_value::<Option<i32>>()?, "id")?,
                _ => unknown(&key, &mut map)?,
            }
        }
        let token = token.ok_or_else(|| de::Error::missing_field("token"))?;
        let logprob = float32(logprob.ok_or_else(|| de::Error::missing_field("logprob"))?)?;
        if bytes != Some(true) {
            b.bytes_of(top).data.extend_from_slice(token.as_bytes());
        }
        let id = id.flatten();
        if top {
            b.out.top_tokens.push(&token);
            b.out.top_logprobs.push(logprob);
            if b.flat == 0 {
                b.first_top_has_id = id.is_some();
            }
            b.top_ids += usize::from(id.is_some());
            b.out.top_token_ids.extend(id);
            b.flat += 1;
        } else {
            b.out.tokens.push(&token);
            b.out.logprobs.push(logprob);
            if tops != Some(true) {
                b.out.top_counts.push(0); // absent or null: no alternatives at this position
            }
            if b.count == 0 {
                b.first_has_id = id.is_some();
                b.first_has_tops = tops == Some(true);
            }
            b.ids += usize::from(id.is_some());
            b.out.token_ids.extend(id);
            b.count += 1;
        }
        Ok(())
    }
}

/// A list of entries, or null.
struct EntriesSeed<'b>(&'b mut Entries);

impl<'de> DeserializeSeed<'de> for EntriesSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EntriesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of logprob entries")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let b = self.0;
        while seq
            .next_element_seed(ItemSeed {
                b: &mut *b,
                top: false,
            })?
            .is_some()
        {}
        Ok(())
    }
}

/// `{content: [...] | null, ...}` (other keys skipped); whether `content` held a list.
struct ChoiceSeed<'b>(&'b mut Entries);

impl<'de> DeserializeSeed<'de> for ChoiceSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ChoiceSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a choice logprobs object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        let mut content = None;
        while let Some(key) = map.next_key::<Text>()? {
            if key.0 == "content" {
                let given = map.next_value_seed(Nullable(EntriesSeed(&mut *b)))?;
                once(&mut content, given, "content")?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        if content != Some(true) {
            b.count = usize::MAX; // marks "no list": absent or null content
        }
        Ok(())
    }
}

fn parse_seed<'de, S: DeserializeSeed<'de, Value = bool>>(
    raw: &'de [u8],
    seed: S,
) -> Result<bool, Declined> {
    let mut deserializer = serde_json::Deserializer::from_slice(raw);
    let given = seed.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(given)
}

/// `choices[i].logprobs` of a chat completion (an object or null).
pub fn chat_choice(raw: &[u8]) -> Result<Section, Declined> {
    let mut b = Entries::default();
    if !parse_seed(raw, Nullable(ChoiceSeed(&mut b)))? || b.count == usize::MAX {
        return Ok(Section::Absent);
    }
    finish_entries(b)
}

/// A list of entries or null (the Responses API's `output_text.logprobs`).
pub fn entries(raw: &[u8]) -> Result<Section, Declined> {
    let mut b = Entries::default();
    if !parse_seed(raw, Nullable(EntriesSeed(&mut b)))? {
        return Ok(Section::Absent);
    }
    finish_entries(b)
}

/// The rules across entries, as `_typed.columns` has them: ids when the first entry has one (then every entry
/// must), alternatives when any came back or the first entry has a list, their ids likewise by the first one.
fn finish_entries(mut b: Entries) -> Result<Section, Declined> {
    if b.count == 0 {
        return Ok(Section::Empty);
    }
    if !b.first_has_id {
        b.out.token_ids.clear();
    } else if b.ids != b.count {
        return Err(Declined("an entry without the id its list has".into()));
    }
    if b.flat == 0 && !b.first_has_tops {
        b.out.top_counts.clear();
    }
    if !b.first_top_has_id {
        b.out.top_token_ids.clear();
    } else if b.top_ids != b.flat {
        return Err(Declined(
            "an alternative without the id its list has".into(),
        ));
    }
    Ok(Section::Built(Box::new(b.out)))
}
