"""Reading a `Response`: its text, reasoning, refusal, citations, tool calls, finish reason, usage, logprobs, the
sampled tokens (numpy ids with part masks, for RL), the soft errors, and a short summary.

`view(response)` wraps the message without copying it; the protobuf stays the truth and is always at `.message`.
Everything here is derived from it on access, so a view never disagrees with the message it wraps.

Logprobs come out as numpy arrays. The generated repeated fields implement `__array__` (one `memcpy` under the
upb runtime), which measured cheaper than any route through the serialized bytes: for 32,768 tokens x top-20,
`np.fromiter` over the field took ~195x as long as `np.asarray`, and serializing the message alone ~80x, before
any `np.frombuffer` could view it (and varint-packed ids cannot be viewed in place at all); `python -m
bench.logprob_arrays`. So the arrays are copies, made once (about 0.3 ms for all numeric columns there), and
safe to keep after the message changes. A top-k whose rows are all full is reshaped, not refilled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelir.logprobs import build as lp
from modelir.v1 import content_pb2, errors_pb2, logprobs_pb2, response_pb2, stream_pb2
from modelir.writing.names import enum_name

if TYPE_CHECKING:  # numpy is imported where arrays are made: reading a text (`modelir generate`) needs none
    import numpy as np


@dataclass(frozen=True, slots=True)
class LogprobArrays:
    """One choice's token logprobs, column by column.

    `ids` is None when the provider gave no token ids (absent, never zeros). The top-k alternatives are dense
    `[T, k]` arrays with `k` the largest count at any position; where a provider returned fewer alternatives
    the row is padded (`top_logprobs` with -inf, `top_ids` with -1) and `top_mask` is False. The string
    columns are read from `source` on access: most numeric work never needs them.
    """

    ids: np.ndarray | None  # int32 [T]
    logprobs: np.ndarray  # float32 [T]
    top_ids: np.ndarray | None  # int32 [T, k]
    top_logprobs: np.ndarray  # float32 [T, k]
    top_mask: np.ndarray  # bool [T, k]
    source: logprobs_pb2.TokenLogprobs

    def __len__(self) -> int:
        return len(self.logprobs)

    @property
    def tokens(self) -> list[str]:
        """The tokens as the provider spells them (for text, use `.text`: it is rebuilt from the bytes)."""
        return list(self.source.tokens)

    @property
    def top_tokens(self) -> list[list[str]]:
        """The alternatives' token strings, one (unpadded) list a position."""
        import numpy as np

        counts = np.asarray(self.source.top_counts, dtype=np.int64)
        flat = list(self.source.top_tokens)
        starts = np.concatenate([[0], np.cumsum(counts)])
        return [flat[starts[i] : starts[i + 1]] for i in range(len(counts))]

    @property
    def token_bytes(self) -> list[bytes]:
        """Each token's bytes (from the packed bytes column; empty when the provider gave none)."""
        return lp.token_byte_slices(self.source) if self.source.token_byte_offsets else []

    @property
    def text(self) -> str:
        """The text the tokens spell, from their bytes (a character split across tokens stays whole)."""
        return lp.text_of(self.source)

    def __repr__(self) -> str:
        k = self.top_logprobs.shape[1]
        ids = "with ids" if self.ids is not None else "no ids"
        mean = f", mean {float(self.logprobs.mean()):.3f}" if len(self) else ""
        return f"<LogprobArrays {len(self)} tokens, top-{k}, {ids}{mean}>"


def logprob_arrays(logprobs: logprobs_pb2.TokenLogprobs) -> LogprobArrays:
    """Numpy columns of one `TokenLogprobs` (a choice's, or `input_scores.tokens`)."""
    import numpy as np

    values = np.asarray(logprobs.token_logprobs, dtype=np.float32)
    ids = np.asarray(logprobs.token_ids, dtype=np.int32) if len(logprobs.token_ids) else None
    counts = np.asarray(logprobs.top_counts, dtype=np.int64)
    positions = len(counts)
    k = int(counts.max()) if positions else 0
    flat = np.asarray(logprobs.top_logprobs, dtype=np.float32)
    if len(flat) != int(counts.sum()):
        raise ValueError(
            f"top_logprobs has {len(flat)} values but top_counts sum to {int(counts.sum())}: not a valid TokenLogprobs"
        )
    top_ids_flat = np.asarray(logprobs.top_token_ids, dtype=np.int32) if len(logprobs.top_token_ids) else None
    if top_ids_flat is not None and len(top_ids_flat) != len(flat):
        raise ValueError(
            f"top_token_ids has {len(top_ids_flat)} values and top_logprobs {len(flat)}: not a valid TokenLogprobs"
        )
    if positions and int(counts.min()) == k:  # every position has k alternatives: a reshape, no copy
        top_logprobs = flat.reshape(positions, k)
        mask = np.ones((positions, k), dtype=bool)
        top_ids = top_ids_flat.reshape(positions, k) if top_ids_flat is not None else None
    else:  # a boolean mask fills row by row, which is the order of the flat columns
        mask = np.arange(k) < counts[:, None]
        top_logprobs = np.full((positions, k), -np.inf, dtype=np.float32)
        top_logprobs[mask] = flat
        top_ids = None
        if top_ids_flat is not None:
            top_ids = np.full((positions, k), -1, dtype=np.int32)
            top_ids[mask] = top_ids_flat
    return LogprobArrays(ids, values, top_ids, top_logprobs, mask, logprobs)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts with the IR's one meaning (input includes cache reads and writes; output includes reasoning).

    A count the provider did not report is None, not zero.
    """

    input: int | None
    output: int | None
    reasoning: int | None
    cache_read: int | None
    cache_write: int | None

    @property
    def total(self) -> int | None:
        return None if self.input is None or self.output is None else self.input + self.output

    @classmethod
    def of(cls, usage: response_pb2.Usage) -> Usage:
        def count(name: str) -> int | None:
            return getattr(usage, name) if usage.HasField(name) else None  # type: ignore[arg-type]

        return cls(
            count("input_token_count"),
            count("output_token_count"),
            count("reasoning_token_count"),
            count("cache_read_token_count"),
            count("cache_write_token_count"),
        )

    def __str__(self) -> str:
        shown = [
            f"{name} {value}" for name, value in zip(self.__slots__, _astuple(self), strict=True) if value is not None
        ]
        return ", ".join(shown) or "not reported"


def _astuple(usage: Usage) -> tuple[int | None, ...]:
    return (usage.input, usage.output, usage.reasoning, usage.cache_read, usage.cache_write)


class ChoiceView:
    """One choice of a response. `.message` is the `Choice` itself."""

    __slots__ = ("message",)

    def __init__(self, choice: response_pb2.Choice) -> None:
        self.message = choice

    def _parts(self, kind: str) -> list[content_pb2.Part]:
        return [p for p in self.message.message.parts if p.WhichOneof("content") == kind]

    @property
    def text(self) -> str:
        """The answer's text parts joined, in provider order (reasoning and tool calls excluded)."""
        return "".join(p.text for p in self._parts("text"))

    @property
    def reasoning(self) -> str:
        """The reasoning text (or, where the provider gave only summaries, the summaries), joined."""
        return "".join(p.reasoning.text or "\n".join(p.reasoning.summary) for p in self._parts("reasoning"))

    @property
    def artifacts(self) -> list[content_pb2.OpaqueArtifact]:
        """Every reasoning artifact of the message (signatures, encrypted content...), in order."""
        return [a for p in self.message.message.parts for a in p.artifacts]

    @property
    def tool_calls(self) -> list[content_pb2.ToolCall]:
        """The tool calls, in order (`arguments(i)` parses the i-th one's JSON)."""
        return [p.tool_call for p in self._parts("tool_call")]

    def arguments(self, index: int = 0) -> Any:
        """The parsed JSON arguments of the `index`-th tool call."""
        calls = self.tool_calls
        if index >= len(calls):
            raise IndexError(f"tool call {index} asked for, but the choice has {len(calls)}")
        return json.loads(calls[index].arguments_json or "{}")

    @property
    def finish_reason(self) -> str:
        """The normalised finish reason's short name: `stop`, `length`, `stop_sequence`, `tool_calls`, ..."""
        return enum_name(response_pb2.FinishReason, self.message.finish_reason)

    @property
    def logprobs(self) -> LogprobArrays | None:
        """The sampled tokens' logprobs as numpy arrays; None when none were asked for or returned."""
        if not self.message.HasField("logprobs"):
            return None
        return logprob_arrays(self.message.logprobs)

    @property
    def refusal(self) -> str:
        """The model's refusal in its own words, joined over refusal parts; empty when it did not refuse."""
        return "".join(p.refusal for p in self._parts("refusal"))

    @property
    def citations(self) -> list[content_pb2.Citation]:
        """Every citation on the message's text parts, in part order."""
        return [c for p in self.message.message.parts for c in p.citations]

    @property
    def constrained_label(self) -> str:
        """Under a choice constraint, the label chosen (the text stays verbatim); empty otherwise."""
        return self.message.constrained_label

    @property
    def sampled_token_ids(self) -> np.ndarray:
        """Every sampled token id as int64 (a trimmed stop or EOS token included), empty when none reported."""
        import numpy as np

        return np.asarray(self.message.sampled_tokens.token_ids, dtype=np.int64)

    @property
    def sampled_part_indexes(self) -> np.ndarray | None:
        """The message part of each sampled token (-1: of no part) as int64; None when the provider did not
        attribute tokens to parts."""
        import numpy as np

        indexes = self.message.sampled_tokens.part_indexes
        return np.asarray(indexes, dtype=np.int64) if len(indexes) else None

    def token_mask(self, *kinds: str) -> np.ndarray:
        """A boolean mask over `sampled_token_ids`: True for the tokens of parts of these kinds (`"text"`,
        `"reasoning"`, `"tool_call"`, ...), e.g. `token_mask("text", "tool_call")` to train on everything but
        reasoning. Raises `ValueError` when the provider did not attribute tokens to parts."""
        indexes = self.sampled_part_indexes
        if indexes is None:
            raise ValueError("the provider did not say which part each sampled token belongs to")
        import numpy as np

        parts = self.message.message.parts
        wanted = np.array([p.WhichOneof("content") in kinds for p in parts] + [False], dtype=bool)
        return wanted[np.where(indexes >= 0, indexes, len(parts))]

    def __repr__(self) -> str:
        from modelir.reading.summary import choice_lines

        return "\n".join(choice_lines(self.message))


class ResponseView:
    """A response, read. `.message` is the `Response`; the shortcuts read its first choice."""

    __slots__ = ("message",)

    def __init__(self, response: response_pb2.Response) -> None:
        if not isinstance(response, response_pb2.Response):
            raise TypeError(f"view() reads a modelir Response; got {type(response).__name__}")
        self.message = response

    @property
    def choices(self) -> list[ChoiceView]:
        """Every choice, read."""
        return [ChoiceView(c) for c in self.message.choices]

    @property
    def first(self) -> ChoiceView:
        """The first choice, read (a response without choices raises, naming its error)."""
        if not self.message.choices:
            error = f" (error: {self.message.errors[0].message})" if self.message.errors else ""
            raise ValueError(f"the response has no choices{error}")
        return ChoiceView(self.message.choices[0])

    # The first choice's readings, typed as `ChoiceView`'s (an editor shows what each gives).
    @property
    def text(self) -> str:
        """The first choice's text parts joined, in provider order (reasoning and tool calls excluded)."""
        return self.first.text

    @property
    def reasoning(self) -> str:
        """The first choice's reasoning text (or its summaries), joined."""
        return self.first.reasoning

    @property
    def artifacts(self) -> list[content_pb2.OpaqueArtifact]:
        """Every reasoning artifact of the first choice's message (signatures, encrypted content...), in order."""
        return self.first.artifacts

    @property
    def tool_calls(self) -> list[content_pb2.ToolCall]:
        """The first choice's tool calls, in order (`arguments(i)` parses the i-th one's JSON)."""
        return self.first.tool_calls

    @property
    def finish_reason(self) -> str:
        """The first choice's finish reason: `stop`, `length`, `stop_sequence`, `tool_calls`, ..."""
        return self.first.finish_reason

    @property
    def logprobs(self) -> LogprobArrays | None:
        """The first choice's sampled tokens' logprobs as numpy arrays; None when none were asked for or returned."""
        return self.first.logprobs

    @property
    def refusal(self) -> str:
        """The first choice's refusal in the model's own words; empty when it did not refuse."""
        return self.first.refusal

    @property
    def citations(self) -> list[content_pb2.Citation]:
        """Every citation on the first choice's text parts, in part order."""
        return self.first.citations

    @property
    def constrained_label(self) -> str:
        """Under a choice constraint, the label the first choice chose; empty otherwise."""
        return self.first.constrained_label

    @property
    def sampled_token_ids(self) -> np.ndarray:
        """The first choice's sampled token ids as int64 (empty when none were reported)."""
        return self.first.sampled_token_ids

    def token_mask(self, *kinds: str) -> np.ndarray:
        """`ChoiceView.token_mask` of the first choice."""
        return self.first.token_mask(*kinds)

    def arguments(self, index: int = 0) -> Any:
        """The parsed JSON arguments of the first choice's `index`-th tool call."""
        return self.first.arguments(index)

    @property
    def texts(self) -> list[str]:
        """Every choice's text."""
        return [c.text for c in self.choices]

    @property
    def usage(self) -> Usage:
        """Token counts with the IR's one meaning; a count the provider did not report is None."""
        return Usage.of(self.message.usage)

    @property
    def input_logprobs(self) -> LogprobArrays | None:
        """The scored input span's logprobs as numpy arrays; None without input scoring."""
        if not bool(self.message.input_scores):
            return None
        return logprob_arrays(self.message.input_scores[0].tokens)

    @property
    def error(self) -> errors_pb2.ResponseError | None:
        """The first soft error of a partial response (the output kept is in the choices); None when it completed.
        Every one is in `errors`."""
        return self.message.errors[0] if self.message.errors else None

    @property
    def errors(self) -> list[errors_pb2.ResponseError]:
        """Every soft error of the response, in the order they were found (empty when it completed)."""
        return list(self.message.errors)

    @property
    def assistant_message(self) -> content_pb2.Message:
        """The first choice's message, ready to append to the conversation for the next turn (a copy)."""
        out = content_pb2.Message()
        out.CopyFrom(self.first.message.message)
        return out

    def __repr__(self) -> str:
        from modelir.reading.summary import summary

        return summary(self.message)


def view(response: response_pb2.Response) -> ResponseView:
    """Read `response`: `view(r).text`, `.reasoning`, `.tool_calls`, `.finish_reason`, `.usage`, `.logprobs`."""
    return ResponseView(response)


def delta_text(event: stream_pb2.StreamEvent) -> str:
    """The answer text a stream event adds ('' for every other event: reasoning, tool calls, start, end)."""
    return event.delta.text if event.WhichOneof("event") == "delta" else ""
