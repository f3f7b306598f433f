"""What the open-weight engine transports share about a choice's output: its sampled token ids with their parts
(`Choice.sampled_tokens`) and the label it is under a choice constraint (`Choice.constrained_label`).

vLLM (`token_ids` with `return_token_ids`), sglang (`output_ids`) and llama.cpp (`tokens` with `return_tokens`)
report every sampled id, independent of logprobs, including the stop or end-of-sequence token whose text they trim
(vLLM's detokenizer skips the stop-terminating token; sglang trims a matched stop id; llama-server pushes the EOS
id before it stops). None of them says which part a token belongs to, so the attribution is the one that cannot
be wrong: every token belongs to the one part of a single-part message, except a trimmed stop / EOS token, which
belongs to none (-1). A message with several parts (reasoning and text, tool calls) is left unattributed (empty
`part_indexes`); streams attribute per delta instead, since each chunk's ids come with that chunk's content.

A stop *string* is trimmed from the text, but the tokens that spelled it are not removed from the ids; they stay
attributed to the text part, whose output they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from modelir.transports.accounting import Schema
from modelir.transports.base import PlainLane, RawEvent, StreamLifter
from modelir.v1 import request_pb2, response_pb2, stream_pb2


def fill(choice: response_pb2.Choice, token_ids: Sequence[int], *, trimmed: int = 0) -> None:
    """Set `choice.sampled_tokens` from the engine's ids; the last `trimmed` ids had their text trimmed."""
    if not token_ids:
        return
    ids = [int(i) for i in token_ids]
    trimmed = min(trimmed, len(ids))
    choice.sampled_tokens.token_ids.extend(ids)
    kept = len(ids) - trimmed
    # The accumulator leaves part indexes empty when no token has a part; unary answers must agree.
    if len(choice.message.parts) == 1 and kept:
        choice.sampled_tokens.part_indexes.extend([0] * kept + [-1] * trimmed)


def trailing_stop(token_ids: Sequence[int], stop_id: object) -> int:
    """1 when the last id is the stop / EOS id that ended generation (its text was trimmed), else 0."""
    return int(
        bool(token_ids) and isinstance(stop_id, int) and not isinstance(stop_id, bool) and token_ids[-1] == stop_id
    )


def finish_unattributed(finish: stream_pb2.ChoiceFinish, token_ids: Sequence[int]) -> None:
    """A stream's trimmed stop / EOS ids go on the choice's finish, as tokens of no part."""
    finish.unattributed_token_ids.extend(int(i) for i in token_ids)


def constrained_label(request: request_pb2.Request, text: str) -> str:
    """Under a choice constraint, the label the output is ("" when it is none of them: a violation the soft-error
    pass reports). Engines that enforce the choice with a regex or grammar give the label as the text itself."""
    if request.constraint.WhichOneof("kind") != "choice":
        return ""
    return text if text in request.constraint.choice.labels else ""


def label_choices(request: request_pb2.Request, response: response_pb2.Response) -> None:
    """Set each choice's `constrained_label` from its text (a unary answer)."""
    if request.constraint.WhichOneof("kind") == "choice":
        for choice in response.choices:
            text = "".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text")
            choice.constrained_label = constrained_label(request, text)


def label_finishes(
    request: request_pb2.Request, events: list[stream_pb2.StreamEvent], texts: Mapping[int, str]
) -> None:
    """Set each finish's `constrained_label` in a stream's end event from the choice's streamed text."""
    if request.constraint.WhichOneof("kind") != "choice":
        return
    for event in events:
        if event.WhichOneof("event") == "end":
            for finish in event.end.finishes:
                finish.constrained_label = constrained_label(request, texts.get(finish.choice_index, ""))


class LabelledStream(StreamLifter):
    """A stream lift whose end also names the chosen label (for lifts shared with wires that have no choice
    constraint, such as the OpenAI chat stream an engine's chat endpoint reuses)."""

    def __init__(self, inner: StreamLifter, request: request_pb2.Request) -> None:
        self.inner = inner
        self.request = request

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        return self.inner.feed(event)

    def plain_lane(self, section: Schema) -> PlainLane | None:
        """The inner lift's lane: a plain chunk (text, no logprobs, nothing engine-specific) is nothing this
        wrapper's `feed` adds to (a subclass whose `feed` reads more of a chunk must say otherwise)."""
        return self.inner.plain_lane(section)

    def plain_text(self, choice: int, text: str) -> stream_pb2.StreamEvent:
        return self.inner.plain_text(choice, text)

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out = self.inner.close(interrupted=interrupted)
        parts = getattr(self.inner, "parts", None)
        label_finishes(self.request, out, parts.texts() if parts is not None else {})
        return out
