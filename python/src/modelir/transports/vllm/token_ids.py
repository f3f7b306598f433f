"""vLLM's sampled ids in a stream (`return_token_ids`): each chunk's ids on that chunk's delta, and the trimmed stop /
EOS id on the choice's finish, for both endpoints."""

from __future__ import annotations

from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.accounting import Schema
from modelir.transports.base import PlainLane, RawEvent, StreamLifter
from modelir.transports.vllm import byte_level, dialect
from modelir.v1 import request_pb2, response_pb2, stream_pb2


class TokenIdStream(StreamLifter):
    """The OpenAI-shaped stream lift, plus each chunk's `token_ids` (vLLM `return_token_ids`) on that chunk's delta.

    A chunk's ids ride on its one content delta (so they belong to that part); a chunk whose content spans two parts
    (the end of reasoning and the start of text) or has none gives its ids on a delta of no part. The finishing
    chunk's trimmed stop / EOS id goes on the choice's finish as an unattributed token.
    """

    def __init__(self, inner: StreamLifter, request: request_pb2.Request) -> None:
        self.inner = inner
        self.request = request
        self.trimmed: dict[int, list[int]] = {}
        self.tokens: dict[int, list[str]] = {}  # each choice's logprob tokens, for `byte_level.lost_text`

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        out = self.inner.feed(event)
        for item in out:
            if item.WhichOneof("event") == "delta" and item.delta.HasField("logprobs"):
                self.tokens.setdefault(item.delta.choice_index, []).extend(item.delta.logprobs.tokens)
        if b'"token_ids"' not in event.data:
            return out
        chunk = common.parse_json(event.data, "stream chunk")
        for raw in chunk.get("choices") or () if isinstance(chunk, dict) else ():
            ids = raw.get("token_ids") if isinstance(raw, dict) else None
            if not isinstance(ids, list) or not ids:
                continue
            index = raw.get("index", 0)
            cut = dialect.trimmed(self.request, raw, ids)
            if cut:
                self.trimmed[index] = ids[len(ids) - cut :]
                ids = ids[: len(ids) - cut]
            if ids:
                parts = getattr(self.inner, "parts", None)
                opened = len(parts.labels(index)) if parts is not None else 0
                _attach(out, index, ids, opened - 1)
        return out

    def plain_lane(self, section: Schema) -> PlainLane | None:
        """The inner lift's lane: a plain chunk carries no `token_ids` and no logprobs, which are all `feed` adds."""
        return self.inner.plain_lane(section)

    def plain_text(self, choice: int, text: str) -> stream_pb2.StreamEvent:
        return self.inner.plain_text(choice, text)

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out = self.inner.close(interrupted=interrupted)
        for event in out:
            if event.WhichOneof("event") == "end":
                for finish in event.end.finishes:
                    tokens.finish_unattributed(finish, self.trimmed.get(finish.choice_index, ()))
                    stops.settle_natural_end(self.request, finish)
                    natural = finish.finish_reason == response_pb2.FINISH_REASON_STOP
                    lost = byte_level.lost_text(self.tokens.get(finish.choice_index, ()), natural)
                    byte_level.flag_lost_text(event.end.warnings, lost, finish.choice_index)
                event.end.warnings.extend(dialect.truncation_warnings(self.request, event.end.usage))
        parts = getattr(self.inner, "parts", None)
        tokens.label_finishes(self.request, out, parts.texts() if parts is not None else {})
        return out


def _attach(events: list[stream_pb2.StreamEvent], choice: int, ids: list[int], last_part: int) -> None:
    """The ids on the chunk's one content delta; on a delta of the choice's latest part when the chunk has no
    content (a finishing chunk); on a delta of no part when its content spans two parts."""
    deltas = [
        e.delta
        for e in events
        if e.WhichOneof("event") == "delta" and e.delta.choice_index == choice and e.delta.WhichOneof("content")
    ]
    if len({d.part_index for d in deltas}) == 1:
        deltas[-1].token_ids.extend(ids)
    else:
        part = last_part if not deltas else -1
        delta = stream_pb2.PartDelta(choice_index=choice, part_index=part, token_ids=ids)
        events.append(stream_pb2.StreamEvent(delta=delta))
