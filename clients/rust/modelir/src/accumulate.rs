//! Folds `StreamGenerate` events into the response the same request gives unary, by the accumulation rules in the
//! comment of `StreamEvent` (stream.proto), which are normative; each rule is quoted where it is applied.
use std::collections::BTreeMap;
use std::fmt;

use crate::v1;
use crate::v1::part::Content;
use crate::v1::part_delta::Content as Delta;
use crate::v1::stream_event::Event;

/// The part index of a token of no part (a finish's unattributed tokens, a delta's with `part_index` -1).
const NO_PART: i32 = -1;

#[derive(Default)]
struct ChoiceBuffer {
    parts: Vec<v1::Part>,
    logprobs: Vec<v1::TokenLogprobs>,
    token_ids: Vec<i32>,
    part_indexes: Vec<i32>,
    finish: Option<v1::ChoiceFinish>,
    phase: i32,
}

impl ChoiceBuffer {
    /// "A delta's `token_ids` are appended to the choice's `sampled_tokens.token_ids`, each with the delta's
    /// `part_index` as its part index"
    fn add_tokens(&mut self, ids: Vec<i32>, part_index: i32) {
        self.part_indexes.extend(std::iter::repeat_n(part_index, ids.len()));
        self.token_ids.extend(ids);
    }
}

/// A stream that breaks the accumulation rules: a delta that skips a part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOrderError {
    /// The choice of the delta.
    pub choice_index: i32,
    /// The part index the delta named.
    pub part_index: i32,
    /// How many parts the choice had.
    pub parts: usize,
}

impl fmt::Display for StreamOrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "stream delta skips to part {} of {} (choice {})", self.part_index, self.parts, self.choice_index)
    }
}

impl std::error::Error for StreamOrderError {}

/// Folds stream events, one at a time, into a `v1::Response`.
#[derive(Default)]
pub struct Accumulator {
    response: v1::Response,
    choices: BTreeMap<i32, ChoiceBuffer>,
    /// True once the end event arrived.
    pub ended: bool,
}

impl Accumulator {
    /// Folds one event in; an error when a delta skips a part.
    pub fn add(&mut self, event: v1::StreamEvent) -> Result<(), StreamOrderError> {
        match event.event {
            Some(Event::Start(start)) => {
                // "`start` sets the response's id and model, and its warnings"
                self.response.id = start.id;
                self.response.model = start.model;
                self.response.warnings.extend(start.warnings);
            }
            Some(Event::Delta(delta)) => return self.add_delta(delta),
            Some(Event::End(end)) => self.add_end(end),
            // "`part_done` changes nothing in the response"
            Some(Event::PartDone(_)) | None => {}
        }
        Ok(())
    }

    fn add_end(&mut self, end: v1::StreamEnd) {
        self.ended = true;
        let r = &mut self.response;
        // "a non-empty `id` or `model` on `end` replaces them"
        if !end.id.is_empty() {
            r.id = end.id;
        }
        if !end.model.is_empty() {
            r.model = end.model;
        }
        for finish in end.finishes {
            let index = finish.choice_index;
            self.choices.entry(index).or_default().finish = Some(finish);
        }
        // "its values are set on the response (its warnings are appended after the start's)"
        r.usage = end.usage;
        r.input_scores = end.input_scores;
        r.prompt_token_ids = end.prompt_token_ids;
        r.timing = end.timing;
        r.errors = end.errors;
        r.warnings.extend(end.warnings);
        r.raw = end.raw;
        r.prompt_feedback = end.prompt_feedback;
        r.service_tier = end.service_tier;
    }

    fn add_delta(&mut self, delta: v1::PartDelta) -> Result<(), StreamOrderError> {
        let choice = self.choices.entry(delta.choice_index).or_default();
        // "The phase of the choice's message, on any delta once it is known; a later delta's phase replaces an
        // earlier one. Unspecified on deltas that do not say." (IR 1.1)
        if delta.phase != 0 {
            choice.phase = delta.phase;
        }
        if let Some(lp) = delta.logprobs {
            choice.logprobs.push(lp);
        }
        // "A delta with no content, artifacts, citations or item id only carries logprobs or token ids and starts
        // no part; its `part_index` may then be -1 (token ids of no part)."
        if delta.content.is_none()
            && delta.artifacts.is_empty()
            && delta.citations.is_empty()
            && delta.item_id.is_empty()
        {
            choice.add_tokens(delta.token_ids, delta.part_index.max(NO_PART));
            return Ok(());
        }
        let index = delta.part_index;
        if index >= 0 && index as usize == choice.parts.len() {
            choice.parts.push(v1::Part::default());
        } else if index < 0 || index as usize > choice.parts.len() {
            return Err(StreamOrderError {
                choice_index: delta.choice_index,
                part_index: index,
                parts: choice.parts.len(),
            });
        }
        let part = &mut choice.parts[index as usize];
        match delta.content {
            Some(Delta::Text(text)) => match &mut part.content {
                Some(Content::Text(t)) => t.push_str(&text),
                _ => part.content = Some(Content::Text(text)),
            },
            Some(Delta::Refusal(text)) => match &mut part.content {
                Some(Content::Refusal(t)) => t.push_str(&text),
                _ => part.content = Some(Content::Refusal(text)),
            },
            Some(Delta::Reasoning(r)) => {
                if !matches!(part.content, Some(Content::Reasoning(_))) {
                    part.content = Some(Content::Reasoning(v1::Reasoning::default()));
                }
                if let Some(Content::Reasoning(reasoning)) = &mut part.content {
                    reasoning.text.push_str(&r.text);
                    if let Some(summary) = r.summary_text {
                        let at = r.summary_index as usize;
                        if reasoning.summary.len() <= at {
                            reasoning.summary.resize(at + 1, String::new());
                        }
                        reasoning.summary[at].push_str(&summary);
                    }
                }
            }
            Some(Delta::ToolCall(c)) => {
                if !matches!(part.content, Some(Content::ToolCall(_))) {
                    part.content = Some(Content::ToolCall(v1::ToolCall::default()));
                }
                if let Some(Content::ToolCall(call)) = &mut part.content {
                    if !c.id.is_empty() {
                        call.id = c.id;
                    }
                    if !c.name.is_empty() {
                        call.name = c.name;
                    }
                    call.arguments_json.push_str(&c.arguments_json);
                }
            }
            Some(Delta::Blob(blob)) => part.content = Some(Content::Blob(blob)),
            // "a whole `part` replaces the part's content (and a whole part's artifacts, item id and citations are
            // appended to the part's)"; as Python's fold, a whole part without content keeps the part's, and its
            // provider options and cache breakpoint travel too
            Some(Delta::Part(whole)) => {
                if whole.content.is_some() {
                    part.content = whole.content;
                }
                part.artifacts.extend(whole.artifacts);
                if !whole.item_id.is_empty() {
                    part.item_id = whole.item_id;
                }
                part.citations.extend(whole.citations);
                part.provider_options.extend(whole.provider_options);
                if whole.cache_breakpoint.is_some() {
                    part.cache_breakpoint = whole.cache_breakpoint;
                }
            }
            None => {}
        }
        part.artifacts.extend(delta.artifacts);
        part.citations.extend(delta.citations);
        if !delta.item_id.is_empty() {
            part.item_id = delta.item_id;
        }
        choice.add_tokens(delta.token_ids, index);
        Ok(())
    }

    /// The accumulated response; before the end event it holds the partial output.
    pub fn response(&self) -> v1::Response {
        let mut out = self.response.clone();
        // "Every accumulated message has the role `ROLE_ASSISTANT`; choices are sorted by index, and a choice named
        // only by a `ChoiceFinish` still appears."
        out.choices = self
            .choices
            .iter()
            .map(|(&index, buffer)| {
                let finish = buffer.finish.clone().unwrap_or_default();
                // "a finish's `unattributed_token_ids` are appended last, with -1"
                let mut token_ids = buffer.token_ids.clone();
                let mut part_indexes = buffer.part_indexes.clone();
                part_indexes.extend(std::iter::repeat_n(NO_PART, finish.unattributed_token_ids.len()));
                token_ids.extend(&finish.unattributed_token_ids);
                // "When no token has a part index of 0 or more, `sampled_tokens.part_indexes` stays empty"
                if !part_indexes.iter().any(|&i| i >= 0) {
                    part_indexes.clear();
                }
                v1::Choice {
                    index,
                    message: Some(v1::Message {
                        role: v1::Role::Assistant as i32,
                        parts: buffer.parts.clone(),
                        phase: buffer.phase,
                        ..Default::default()
                    }),
                    finish_reason: finish.finish_reason,
                    raw_finish_reason: finish.raw_finish_reason,
                    stop: finish.stop.map(|stop| match stop {
                        v1::choice_finish::Stop::StopSequence(s) => v1::choice::Stop::StopSequence(s),
                        v1::choice_finish::Stop::StopTokenId(id) => v1::choice::Stop::StopTokenId(id),
                    }),
                    logprobs: (!buffer.logprobs.is_empty()).then(|| concat_logprobs(&buffer.logprobs)),
                    sampled_tokens: (!token_ids.is_empty()).then_some(v1::SampledTokens { token_ids, part_indexes }),
                    output_token_count: finish.output_token_count,
                    constrained_label: finish.constrained_label,
                    native_json: finish.native_json,
                }
            })
            .collect();
        out
    }
}

/// Consecutive logprob chunks (stream deltas) as one `TokenLogprobs`: columns concatenated in arrival order, byte
/// offsets rebased by the bytes that came before, the basis of the first chunk that has one.
pub fn concat_logprobs(chunks: &[v1::TokenLogprobs]) -> v1::TokenLogprobs {
    let mut out = v1::TokenLogprobs::default();
    for c in chunks {
        if out.basis == 0 {
            out.basis = c.basis;
        }
        let (base, top_base) = (out.token_bytes.len() as u32, out.top_token_bytes.len() as u32);
        out.token_ids.extend(&c.token_ids);
        out.token_logprobs.extend(&c.token_logprobs);
        out.tokens.extend(c.tokens.iter().cloned());
        out.token_byte_offsets.extend(c.token_byte_offsets.iter().map(|o| o + base));
        out.token_bytes.extend(&c.token_bytes);
        out.top_counts.extend(&c.top_counts);
        out.top_token_ids.extend(&c.top_token_ids);
        out.top_logprobs.extend(&c.top_logprobs);
        out.top_tokens.extend(c.top_tokens.iter().cloned());
        out.top_token_byte_offsets.extend(c.top_token_byte_offsets.iter().map(|o| o + top_base));
        out.top_token_bytes.extend(&c.top_token_bytes);
    }
    out
}
