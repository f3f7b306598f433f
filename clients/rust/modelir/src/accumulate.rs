//! Folds `StreamGenerate` events into the response the same request gives unary, by the rules of stream.proto:
//! a delta whose part_index is one past the last starts a part; text, reasoning and tool-call arguments append;
//! logprob chunks concatenate with their byte offsets rebased; the basis comes from the first chunk; the role is
//! assistant; the end event's id and model replace the start's.
use std::collections::BTreeMap;

use crate::v1;
use crate::v1::part::Content;
use crate::v1::part_delta::Content as Delta;
use crate::v1::stream_event::Event;

#[derive(Default)]
struct ChoiceBuffer {
    parts: Vec<v1::Part>,
    logprobs: Vec<v1::TokenLogprobs>,
    finish: Option<v1::ChoiceFinish>,
}

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
    pub fn add(&mut self, event: v1::StreamEvent) -> Result<(), String> {
        match event.event {
            Some(Event::Start(start)) => {
                self.response.id = start.id;
                self.response.model = start.model;
            }
            Some(Event::Delta(delta)) => return self.add_delta(delta),
            Some(Event::End(end)) => {
                self.ended = true;
                let r = &mut self.response;
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
                r.usage = end.usage.or(r.usage.take());
                r.input_scores = end.input_scores.or(r.input_scores.take());
                r.timing = end.timing.or(r.timing.take());
                r.error = end.error.or(r.error.take());
                r.raw = end.raw.or(r.raw.take());
                r.prompt_token_ids.extend(end.prompt_token_ids);
                r.warnings.extend(end.warnings);
            }
            None => {}
        }
        Ok(())
    }

    fn add_delta(&mut self, delta: v1::PartDelta) -> Result<(), String> {
        let choice = self.choices.entry(delta.choice_index).or_default();
        if let Some(lp) = delta.logprobs {
            choice.logprobs.push(lp);
        }
        if delta.content.is_none() && delta.artifacts.is_empty() && delta.item_id.is_empty() {
            return Ok(());
        }
        let index = delta.part_index as usize;
        if index == choice.parts.len() {
            choice.parts.push(v1::Part::default());
        } else if index > choice.parts.len() {
            return Err(format!("stream delta skips to part {index} of {}", choice.parts.len()));
        }
        let part = &mut choice.parts[index];
        match delta.content {
            Some(Delta::Text(text)) => match &mut part.content {
                Some(Content::Text(t)) => t.push_str(&text),
                _ => part.content = Some(Content::Text(text)),
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
            None => {}
        }
        part.artifacts.extend(delta.artifacts);
        if !delta.item_id.is_empty() {
            part.item_id = delta.item_id;
        }
        Ok(())
    }

    /// The accumulated response; before the end event it holds the partial output.
    pub fn response(&self) -> v1::Response {
        let mut out = self.response.clone();
        out.choices = self
            .choices
            .iter()
            .map(|(&index, buffer)| {
                let finish = buffer.finish.clone().unwrap_or_default();
                v1::Choice {
                    index,
                    message: Some(v1::Message {
                        role: v1::Role::Assistant as i32,
                        parts: buffer.parts.clone(),
                        name: String::new(),
                    }),
                    finish_reason: finish.finish_reason,
                    raw_finish_reason: finish.raw_finish_reason,
                    stop_sequence: finish.stop_sequence,
                    logprobs: (!buffer.logprobs.is_empty()).then(|| concat_logprobs(&buffer.logprobs)),
                }
            })
            .collect();
        out
    }
}

/// Consecutive logprob chunks (stream deltas) as one `TokenLogprobs`, byte offsets shifted.
pub fn concat_logprobs(chunks: &[v1::TokenLogprobs]) -> v1::TokenLogprobs {
    let mut out = v1::TokenLogprobs::default();
    for c in chunks {
        if out.basis == 0 {
            out.basis = c.basis;
        }
        let (base, top_base) = (out.token_bytes.len() as u32, out.top_token_bytes.len() as u32);
        out.token_ids.extend(&c.token_ids);
        out.logprobs.extend(&c.logprobs);
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
