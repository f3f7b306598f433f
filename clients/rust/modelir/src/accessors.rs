//! Reading a response the way the Python SDK does: text, refusals, tool calls, reasoning, logprobs and sampled
//! tokens as typed slices.
use crate::v1;
use crate::v1::part::Content;

/// A choice's sampled-token logprobs as typed columns, borrowed from the message (no copies).
#[derive(Debug, Default, Clone, Copy)]
pub struct Logprobs<'a> {
    pub token_ids: &'a [i32],
    pub logprobs: &'a [f32],
    pub tokens: &'a [String],
    pub top_counts: &'a [u32],
    pub top_token_ids: &'a [i32],
    pub top_logprobs: &'a [f32],
    pub top_tokens: &'a [String],
    packed_bytes: &'a [u8],
    offsets: &'a [u32],
}

impl<'a> Logprobs<'a> {
    /// Views a `TokenLogprobs` as typed columns.
    pub fn of(lp: &'a v1::TokenLogprobs) -> Self {
        Logprobs {
            token_ids: &lp.token_ids,
            logprobs: &lp.token_logprobs,
            tokens: &lp.tokens,
            top_counts: &lp.top_counts,
            top_token_ids: &lp.top_token_ids,
            top_logprobs: &lp.top_logprobs,
            top_tokens: &lp.top_tokens,
            packed_bytes: &lp.token_bytes,
            offsets: &lp.token_byte_offsets,
        }
    }

    /// Each token's raw bytes, sliced out of the packed buffer.
    pub fn token_bytes(&self) -> Vec<&'a [u8]> {
        let ends = self.offsets.iter().skip(1).map(|&o| o as usize).chain([self.packed_bytes.len()]);
        self.offsets.iter().zip(ends).map(|(&start, end)| &self.packed_bytes[start as usize..end]).collect()
    }
}

/// The accessors, on a `Choice`.
pub trait ChoiceExt {
    /// Every text part, joined in order.
    fn text(&self) -> String;
    /// Every refusal part, joined in order (empty when the model did not refuse).
    fn refusal(&self) -> String;
    /// The tool calls, in the order the model made them.
    fn tool_calls(&self) -> Vec<&v1::ToolCall>;
    /// The visible reasoning text of every reasoning part, joined in order.
    fn reasoning(&self) -> String;
    /// The sampled tokens' logprobs (empty columns when none were asked for).
    fn logprobs(&self) -> Logprobs<'_>;
    /// The sampled token ids (whether or not logprobs were asked for) and, one per token, the index of the message
    /// part each belongs to (-1 for none; empty when the provider cannot attribute tokens to parts).
    fn sampled_tokens(&self) -> (&[i32], &[i32]);
    /// The sampled text rebuilt from the token bytes (never by joining token strings).
    fn text_from_bytes(&self) -> String;
}

fn parts(choice: &v1::Choice) -> impl Iterator<Item = &Content> {
    choice.message.iter().flat_map(|m| m.parts.iter()).filter_map(|p| p.content.as_ref())
}

impl ChoiceExt for v1::Choice {
    fn text(&self) -> String {
        parts(self).filter_map(|c| if let Content::Text(t) = c { Some(t.as_str()) } else { None }).collect()
    }
    fn refusal(&self) -> String {
        parts(self).filter_map(|c| if let Content::Refusal(t) = c { Some(t.as_str()) } else { None }).collect()
    }
    fn tool_calls(&self) -> Vec<&v1::ToolCall> {
        parts(self).filter_map(|c| if let Content::ToolCall(t) = c { Some(t) } else { None }).collect()
    }
    fn reasoning(&self) -> String {
        parts(self).filter_map(|c| if let Content::Reasoning(r) = c { Some(r.text.as_str()) } else { None }).collect()
    }
    fn logprobs(&self) -> Logprobs<'_> {
        self.logprobs.as_ref().map(Logprobs::of).unwrap_or_default()
    }
    fn sampled_tokens(&self) -> (&[i32], &[i32]) {
        self.sampled_tokens.as_ref().map_or((&[][..], &[][..]), |s| (&s.token_ids[..], &s.part_indexes[..]))
    }
    fn text_from_bytes(&self) -> String {
        String::from_utf8_lossy(self.logprobs.as_ref().map_or(&[][..], |lp| &lp.token_bytes)).into_owned()
    }
}

/// The accessors of a response's first choice.
pub trait Completion {
    /// The first choice (a default one when the response has none).
    fn first(&self) -> &v1::Choice;
}

impl Completion for v1::Response {
    fn first(&self) -> &v1::Choice {
        static EMPTY: std::sync::OnceLock<v1::Choice> = std::sync::OnceLock::new();
        self.choices.first().unwrap_or_else(|| EMPTY.get_or_init(v1::Choice::default))
    }
}
