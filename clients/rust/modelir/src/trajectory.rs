//! The trajectory of a multi-turn rollout, as an RL trainer consumes it: the whole token sequence, the loss mask,
//! the sampled tokens' logprobs aligned to it and each turn's boundaries, by the rule in the comment of
//! `Response.prompt_token_ids` (proto/modelir/v1/response.proto, normative; the Python, TypeScript and Go SDKs
//! implement the same rule, and conformance/trajectories holds the vector they all agree on).
use std::fmt;
use std::io;
use std::path::Path;

use crate::{v1, RecordReader};

/// Where one turn sits in the sequence: its new prompt tokens are `prompt_start..sampled_start`, its sampled
/// tokens `sampled_start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnBoundary {
    pub prompt_start: usize,
    pub sampled_start: usize,
    pub end: usize,
}

/// A rollout's tokens, one entry per position: `loss_mask` is true where the model sampled the token, `logprobs`
/// the sampled token's logprob (NaN where the token was not sampled or its logprob was not reported).
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    pub tokens: Vec<i32>,
    pub loss_mask: Vec<bool>,
    pub logprobs: Vec<f32>,
    pub turns: Vec<TurnBoundary>,
}

/// Why a rollout has no trajectory by the rule.
#[derive(Debug)]
pub enum TrajectoryError {
    /// The record file could not be read.
    Io(io::Error),
    /// Turn `turn` (from 0) cannot be read by the rule: `reason` says why.
    Unreadable { turn: usize, reason: String },
    /// Turn `turn`'s prompt does not extend the earlier turns: at `position` the sequence has `expected` and the
    /// prompt has `found` (-1 where the prompt ended first).
    Drift { turn: usize, position: usize, expected: i32, found: i32 },
}

impl fmt::Display for TrajectoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Unreadable { turn, reason } => write!(f, "turn {turn}: {reason}"),
            Self::Drift { turn, position, expected, found } => {
                let seen = if *found >= 0 { format!("has {found}") } else { "ends there".into() };
                write!(
                    f,
                    "turn {turn}: its prompt does not extend the earlier turns (re-tokenization drift): at position \
                     {position} the sequence has token {expected}, the prompt {seen}"
                )
            }
        }
    }
}

impl std::error::Error for TrajectoryError {}

impl From<io::Error> for TrajectoryError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

fn unreadable(turn: usize, reason: impl Into<String>) -> TrajectoryError {
    TrajectoryError::Unreadable { turn, reason: reason.into() }
}

impl Trajectory {
    /// The trajectory of a rollout given as its responses, in the order they were made.
    pub fn from_responses<'a>(responses: impl IntoIterator<Item = &'a v1::Response>) -> Result<Self, TrajectoryError> {
        let turns = responses.into_iter().enumerate().map(|(i, r)| turn_of(i, r)).collect::<Result<Vec<_>, _>>()?;
        // A rollout whose prompts extend each other ends where its longest turn ends: allocate that once, keep
        // `..end`.
        let room = turns.iter().map(|(prompt, choice)| prompt.len() + sampled(choice).len()).max().unwrap_or(0);
        let mut t = Trajectory {
            tokens: vec![0; room],
            loss_mask: vec![false; room],
            logprobs: vec![f32::NAN; room],
            turns: Vec::with_capacity(turns.len()),
        };
        let mut end = 0;
        for (i, (prompt, choice)) in turns.into_iter().enumerate() {
            if let Some(position) = (0..end.min(prompt.len())).find(|&at| prompt[at] != t.tokens[at]) {
                let (expected, found) = (t.tokens[position], prompt[position]);
                return Err(TrajectoryError::Drift { turn: i, position, expected, found });
            }
            if prompt.len() < end {
                let (position, expected) = (prompt.len(), t.tokens[prompt.len()]);
                return Err(TrajectoryError::Drift { turn: i, position, expected, found: -1 });
            }
            let sampled = sampled(choice);
            let scored = scored_logprobs(i, choice, sampled)?;
            let (sampled_start, turn_end) = (prompt.len(), prompt.len() + sampled.len());
            t.tokens[end..sampled_start].copy_from_slice(&prompt[end..]);
            t.tokens[sampled_start..turn_end].copy_from_slice(sampled);
            t.loss_mask[sampled_start..turn_end].fill(true);
            t.logprobs[sampled_start..sampled_start + scored.len()].copy_from_slice(scored);
            t.turns.push(TurnBoundary { prompt_start: end, sampled_start, end: turn_end });
            end = turn_end;
        }
        t.tokens.truncate(end);
        t.loss_mask.truncate(end);
        t.logprobs.truncate(end);
        Ok(t)
    }

    /// The trajectory of a rollout given as its record file (either format, read with `RecordReader`): every
    /// record, in order, is one turn; a record without a response is refused.
    pub fn from_records(path: impl AsRef<Path>) -> Result<Self, TrajectoryError> {
        let mut responses = Vec::new();
        for stored in RecordReader::open(path)? {
            let record = stored?.record;
            match record.response {
                Some(response) => responses.push(response),
                None => {
                    let kind = if record.embed_request.is_some() {
                        "an Embed call"
                    } else {
                        "a call that returned no response"
                    };
                    let reason = format!("record '{}' is of {kind}: a rollout's turns all have responses", record.key);
                    return Err(unreadable(responses.len(), reason));
                }
            }
        }
        Self::from_responses(&responses)
    }
}

fn sampled(choice: &v1::Choice) -> &[i32] {
    choice.sampled_tokens.as_ref().map(|s| s.token_ids.as_slice()).unwrap_or_default()
}

fn turn_of(i: usize, response: &v1::Response) -> Result<(&[i32], &v1::Choice), TrajectoryError> {
    let choice = response.choices.first().ok_or_else(|| unreadable(i, "the response has no choice to continue"))?;
    if response.prompt_token_ids.is_empty() {
        return Err(unreadable(
            i,
            "the response does not say which prompt token ids the engine saw (prompt_token_ids)",
        ));
    }
    if sampled(choice).is_empty() {
        return Err(unreadable(i, "its first choice has no sampled token ids (sampled_tokens)"));
    }
    Ok((&response.prompt_token_ids, choice))
}

fn scored_logprobs<'a>(i: usize, choice: &'a v1::Choice, sampled: &[i32]) -> Result<&'a [f32], TrajectoryError> {
    let (scored, ids) = match &choice.logprobs {
        Some(l) => (l.token_logprobs.as_slice(), l.token_ids.as_slice()),
        None => (&[][..], &[][..]),
    };
    if scored.len() > sampled.len() {
        return Err(unreadable(i, format!("it has {} logprobs for {} sampled tokens", scored.len(), sampled.len())));
    }
    if !ids.is_empty() && !sampled.starts_with(ids) {
        return Err(unreadable(i, "its logprobs' token ids are not the first of its sampled token ids"));
    }
    Ok(scored)
}
