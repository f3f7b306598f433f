//! A hand-written JSON reader over borrowed bytes, for the logprob sections (tens of thousands of short keys,
//! strings and floats), where serde's per-value dispatch cost about as much as orjson parsing the whole body.
//!
//! Two kinds of reading, on purpose:
//!   - strict (`string_into`, `number`, `skip`): what the Python path would never see (a cut-out logprob section)
//!     must be valid JSON exactly as orjson, the reference decoder, takes it; whatever the reader is not sure of
//!     (a lone surrogate, a number out of range, deep nesting) is `Declined`, and the body goes to the Python path.
//!   - loose (`skip_loose`, `loose_key`): the rest of a body, which orjson parses afterwards anyway; here the reader
//!     only has to find where values begin and end, which it does as JSON tokenizes them whenever the bytes are
//!     valid JSON (and orjson refuses them when they are not).
//!
//! Never a panic: every read is bounds-checked and ends in `Declined` at the end of the input.

use crate::decimal;
use crate::openai::Declined;

pub type Read<T> = Result<T, Declined>;

/// How deep a cut-out section may nest before the reader declines it (orjson and serde_json refuse deeper
/// documents; the Python path then decides).
const MAX_DEPTH: usize = 100;

fn declined<T>(why: &str) -> Read<T> {
    Err(Declined(why.to_owned()))
}

pub struct Reader<'a> {
    bytes: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// How many bytes are left to read.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The next byte after JSON whitespace (not consumed); None at the end.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        while let Some(&byte) = self.bytes.get(self.pos) {
            if !matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
                return Some(byte);
            }
            self.pos += 1;
        }
        None
    }

    /// Consumes `byte` (after whitespace) if it is next.
    #[inline]
    pub fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            return true;
        }
        false
    }

    #[inline]
    pub fn expect(&mut self, byte: u8) -> Read<()> {
        if self.eat(byte) {
            return Ok(());
        }
        declined("unexpected JSON syntax")
    }

    /// After a list element or an object member: true for `,` (another follows), false for `close`.
    #[inline]
    pub fn more(&mut self, close: u8) -> Read<bool> {
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(byte) if byte == close => {
                self.pos += 1;
                Ok(false)
            }
            _ => declined("unexpected JSON syntax"),
        }
    }

    /// Consumes `null` if it is the next value.
    #[inline]
    pub fn null(&mut self) -> bool {
        if self.peek() == Some(b'n') && self.bytes.get(self.pos..self.pos + 4) == Some(b"null") {
            self.pos += 4;
            return true;
        }
        false
    }

    /// Opens a list: false when it is empty (`[]`, consumed whole).
    #[inline]
    pub fn open_list(&mut self) -> Read<bool> {
        self.expect(b'[')?;
        Ok(!self.eat(b']'))
    }

    /// Opens an object: false when it is empty (`{}`, consumed whole).
    #[inline]
    pub fn open_object(&mut self) -> Read<bool> {
        self.expect(b'{')?;
        Ok(!self.eat(b'}'))
    }

    /// Consumes `byte` if it is the very next byte (no whitespace before it).
    #[inline]
    pub fn eat_byte(&mut self, byte: u8) -> bool {
        if self.bytes.get(self.pos) == Some(&byte) {
            self.pos += 1;
            return true;
        }
        false
    }

    /// The end of the input, but for whitespace.
    pub fn end(&mut self) -> Read<()> {
        if self.peek().is_some() {
            return declined("trailing characters");
        }
        Ok(())
    }

    // ---- strict ------------------------------------------------------------------------------------------

    /// A string, unescaped and appended to `out` as UTF-8. Refused as orjson refuses them: a raw control character,
    /// an unknown escape, invalid UTF-8; a lone surrogate escape is declined (not ours to decide).
    #[inline]
    pub fn string_into(&mut self, out: &mut Vec<u8>) -> Read<()> {
        self.expect(b'"')?;
        let bytes = self.bytes;
        loop {
            let start = self.pos;
            let mut high = 0u8;
            while let Some(&byte) = bytes.get(self.pos) {
                if byte == b'"' || byte == b'\\' || byte < 0x20 {
                    break;
                }
                high |= byte;
                self.pos += 1;
            }
            let run = &bytes[start..self.pos];
            // A run ends at an ASCII byte, so it never splits a UTF-8 sequence: each run is checked on its own.
            if high >= 0x80 && std::str::from_utf8(run).is_err() {
                return declined("a string that is not UTF-8");
            }
            out.extend_from_slice(run);
            match bytes.get(self.pos) {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(out)?;
                }
                _ => return declined("a control character or the end of input in a string"),
            }
        }
    }

    /// A string without escapes, borrowed (its UTF-8 not checked: the caller compares it with ASCII names, or
    /// checks it); None, with the position somewhere inside it, when it has an escape (then read it again with
    /// `string_into`). A raw control character or the end of input is refused.
    #[inline]
    pub fn plain_string(&mut self) -> Read<Option<&'a [u8]>> {
        self.expect(b'"')?;
        let bytes = self.bytes;
        let start = self.pos;
        while let Some(&byte) = bytes.get(self.pos) {
            if byte == b'"' {
                self.pos += 1;
                return Ok(Some(&bytes[start..self.pos - 1]));
            }
            if byte == b'\\' {
                return Ok(None);
            }
            if byte < 0x20 {
                break;
            }
            self.pos += 1;
        }
        declined("a control character or the end of input in a string")
    }

    /// An unsigned integer literal (JSON's grammar: no leading zero) of at most `max`, at the position (no
    /// whitespace before it); a fraction or exponent after it is left for the caller's syntax check to refuse.
    #[inline]
    pub fn small_integer(&mut self, max: u64) -> Read<u64> {
        let bytes = self.bytes;
        let start = self.pos;
        let mut value = 0u64;
        while let Some(&digit @ b'0'..=b'9') = bytes.get(self.pos) {
            value = value * 10 + u64::from(digit - b'0');
            if value > max {
                return declined("an integer out of range");
            }
            self.pos += 1;
        }
        match self.pos - start {
            0 => declined("not an integer"),
            1 => Ok(value),
            _ if bytes[start] == b'0' => declined("a leading zero"),
            _ => Ok(value),
        }
    }

    fn escape(&mut self, out: &mut Vec<u8>) -> Read<()> {
        let Some(&kind) = self.bytes.get(self.pos) else {
            return declined("the end of input in an escape");
        };
        self.pos += 1;
        let byte = match kind {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let first = self.hex4()?;
                let code = match first {
                    0xD800..=0xDBFF => {
                        if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                            return declined("a lone surrogate escape");
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return declined("a lone surrogate escape");
                        }
                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return declined("a lone surrogate escape"),
                    _ => first,
                };
                let Some(c) = char::from_u32(code) else {
                    return declined("an escape that is no character");
                };
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                return Ok(());
            }
            _ => return declined("an unknown escape"),
        };
        out.push(byte);
        Ok(())
    }

    fn hex4(&mut self) -> Read<u32> {
        let Some(digits) = self.bytes.get(self.pos..self.pos + 4) else {
            return declined("the end of input in an escape");
        };
        let mut value = 0;
        for &digit in digits {
            let nibble = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                b'A'..=b'F' => digit - b'A' + 10,
                _ => return declined("a bad \\u escape"),
            };
            value = value << 4 | u32::from(nibble);
        }
        self.pos += 4;
        Ok(value)
    }

    /// A number as the Python decoders read it for a float column: the literal (strict JSON grammar) rounded to
    /// the nearest f64 as CPython, orjson and msgspec round theirs (`decimal::to_f64`, else core's parser on the
    /// literal); an integer literal is an integer there, so `-0` is 0, not -0.0. A value out of f64's range is
    /// declined (the decoders refuse `1e400`).
    #[inline]
    pub fn number(&mut self) -> Read<f64> {
        self.number_rounded(false)
    }

    /// A number for a float32 column: as `number`, except that the f64 may be a few ulps off the correctly rounded
    /// one where that cannot change its float32 value nor how it compares with any float32 value
    /// (`decimal::near_f64`: no 128-bit division for the 17-digit reprs logprobs come in).
    #[inline]
    pub fn number_for_f32(&mut self) -> Read<f64> {
        self.number_rounded(true)
    }

    #[inline]
    fn number_rounded(&mut self, for_f32: bool) -> Read<f64> {
        self.peek();
        let bytes = self.bytes;
        let start = self.pos;
        let mut pos = start;
        let negative = bytes.get(pos) == Some(&b'-');
        pos += usize::from(negative);
        // The significant digits as an integer (up to 19 of them: more and core's parser decides) and the
        // power of ten the fraction's length adds. Leading zeros are skipped one by one, the rest read eight at a
        // time where they come in eights.
        let mut mantissa = 0u64;
        let mut significant = 0usize;
        let mut integer = true;
        match bytes.get(pos) {
            Some(b'0') => pos += 1,
            Some(b'1'..=b'9') => significant += decimal::digits(bytes, &mut pos, &mut mantissa),
            _ => return declined("not a JSON number"),
        }
        let mut scale = 0i32;
        if bytes.get(pos) == Some(&b'.') {
            pos += 1;
            integer = false;
            let from = pos;
            if mantissa == 0 {
                while bytes.get(pos) == Some(&b'0') {
                    pos += 1;
                }
            }
            significant += decimal::digits(bytes, &mut pos, &mut mantissa);
            if pos == from {
                return declined("not a JSON number");
            }
            scale = -((pos - from).min(100_000) as i32);
        } else if matches!(bytes.get(pos), Some(b'0'..=b'9')) {
            return declined("not a JSON number"); // a leading zero
        }
        let mut exponent = 0i32;
        if matches!(bytes.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            integer = false;
            let minus = bytes.get(pos) == Some(&b'-');
            pos += usize::from(matches!(bytes.get(pos), Some(b'+' | b'-')));
            let from = pos;
            while let Some(&d @ b'0'..=b'9') = bytes.get(pos) {
                exponent = (exponent * 10 + i32::from(d - b'0')).min(100_000); // beyond any f64: core decides
                pos += 1;
            }
            if pos == from {
                return declined("not a JSON number");
            }
            if minus {
                exponent = -exponent;
            }
        }
        self.pos = pos;
        let fast = if significant > 19 {
            None
        } else if for_f32 {
            decimal::near_f64(mantissa, exponent + scale)
                .or_else(|| decimal::to_f64(mantissa, exponent + scale))
        } else {
            decimal::to_f64(mantissa, exponent + scale)
        };
        let value = match fast {
            Some(magnitude) if negative => -magnitude,
            Some(magnitude) => magnitude,
            None => {
                // ASCII by construction; core's parser takes exactly the JSON grammar's literals.
                let text = std::str::from_utf8(&bytes[start..pos])
                    .map_err(|_| Declined("not ASCII".into()))?;
                text.parse().map_err(|_| Declined("not a number".into()))?
            }
        };
        if !value.is_finite() {
            return declined("a number out of range");
        }
        Ok(if integer && value == 0.0 { 0.0 } else { value })
    }

    /// Any one value, checked as strictly as the rest of a cut-out section (its text is never parsed elsewhere).
    pub fn skip(&mut self, scratch: &mut Vec<u8>, depth: usize) -> Read<()> {
        if depth > MAX_DEPTH {
            return declined("nesting too deep");
        }
        match self.peek() {
            Some(b'"') => {
                scratch.clear();
                self.string_into(scratch)
            }
            Some(b'[') => {
                if self.open_list()? {
                    loop {
                        self.skip(scratch, depth + 1)?;
                        if !self.more(b']')? {
                            break;
                        }
                    }
                }
                Ok(())
            }
            Some(b'{') => {
                if self.open_object()? {
                    loop {
                        scratch.clear();
                        self.string_into(scratch)?;
                        self.expect(b':')?;
                        self.skip(scratch, depth + 1)?;
                        if !self.more(b'}')? {
                            break;
                        }
                    }
                }
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => self.number().map(drop),
            _ => {
                for literal in [&b"null"[..], b"true", b"false"] {
                    if self.bytes.get(self.pos..self.pos + literal.len()) == Some(literal) {
                        self.pos += literal.len();
                        return Ok(());
                    }
                }
                declined("not a JSON value")
            }
        }
    }

    // ---- loose -------------------------------------------------------------------------------------------

    /// A key of the body's outer objects, as its raw bytes; a key with an escape is declined (rather than compared
    /// unescaped: no provider escapes these names).
    pub fn loose_key(&mut self) -> Read<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.pos;
        while let Some(&byte) = self.bytes.get(self.pos) {
            match byte {
                b'"' => {
                    self.pos += 1;
                    return Ok(&self.bytes[start..self.pos - 1]);
                }
                b'\\' => return declined("an escaped key"),
                _ => self.pos += 1,
            }
        }
        declined("the end of input in a key")
    }

    /// Skips one value of the body's rest, which orjson checks afterwards: strings by their quotes (a backslash
    /// escapes the next byte), containers by counting brackets outside strings, scalars up to a delimiter.
    pub fn skip_loose(&mut self) -> Read<()> {
        let bytes = self.bytes;
        let mut depth = 0usize;
        self.peek();
        loop {
            let Some(&byte) = bytes.get(self.pos) else {
                return declined("the end of input in a value");
            };
            match byte {
                b'"' => {
                    self.pos += 1;
                    loop {
                        match bytes.get(self.pos) {
                            Some(b'"') => break,
                            Some(b'\\') => self.pos += 2,
                            Some(_) => self.pos += 1,
                            None => return declined("the end of input in a string"),
                        }
                    }
                    self.pos += 1;
                }
                b'[' | b'{' => {
                    depth += 1;
                    self.pos += 1;
                }
                b']' | b'}' if depth > 0 => {
                    depth -= 1;
                    self.pos += 1;
                }
                b',' | b']' | b'}' if depth == 0 => return Ok(()),
                b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Ok(()),
                _ => self.pos += 1,
            }
            if depth == 0 && matches!(byte, b'"' | b']' | b'}') {
                return Ok(());
            }
        }
    }
}
