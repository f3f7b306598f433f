"""llama-server's raw-prompt stream (native `/completion` events): one event per token, its sampled id held until
the next event says whether it was the EOS, and what the stream never sent (held-back text, lost ids) said."""

from __future__ import annotations

from typing import Any

from modelir.errors import soft as soft_errors
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.base import RawEvent, StreamLifter
from modelir.transports.llamacpp import completion
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import request_pb2, response_pb2, stream_pb2


class CompletionStreamLifter(StreamLifter):
    """Native `/completion` events: one token each, then a final `stop: true` event with the totals."""

    def __init__(self, request: request_pb2.Request) -> None:
        self.request = request
        self.started = False
        self.final: dict[str, Any] | None = None
        self.saw_probabilities = False
        self.parts = StreamParts()
        # Each event's sampled id is held until the next event says whether it was the EOS that ended the stream
        # (a token of no part); llama-server sends one id per event.
        self.pending: list[int] = []
        self.id_count = 0
        # `tokens_predicted` as of the last token event (None once an event lacks it or its id), and whether that
        # event's text was empty: llama-server holds text back while it might still change (`_held_back`).
        self.predicted_so_far: int | None = 0
        self.last_text_empty = False

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        data = common.parse_json(event.data, "stream event")
        out: list[stream_pb2.StreamEvent] = []
        if not self.started:
            self.started = True
            out.append(stream_pb2.StreamEvent(start=stream_pb2.StreamStart(model=data.get("model") or "")))
        delta = self.parts.delta(0, "text", text=data.get("content") or "")
        probabilities = data.get("completion_probabilities")
        if probabilities is not None:
            self.saw_probabilities = True
            if self.request.HasField("logprob_options") and probabilities:
                completion.columns(probabilities, self.request.logprob_options.top_logprob_count, delta.delta.logprobs)
        ids = data.get("tokens")
        ids = [i for i in ids if isinstance(i, int)] if isinstance(ids, list) else []
        self.id_count += len(ids)
        if not data.get("stop") and (ids or data.get("content")):  # a token event (text without an id says nothing)
            predicted = data.get("tokens_predicted")
            known = bool(ids) and isinstance(predicted, int) and self.predicted_so_far is not None
            self.predicted_so_far = predicted if known else None
            self.last_text_empty = not data.get("content")
        if data.get("stop"):
            self.final = data
            if data.get("stop_type") == "eos" and not self._unsent():  # else the EOS never had an event either
                delta.delta.token_ids.extend(self.pending[:-1] + ids[:-1])
                self.pending = (self.pending + ids)[-1:]
            else:
                delta.delta.token_ids.extend(self.pending + ids)
                self.pending = []
        else:
            delta.delta.token_ids.extend(self.pending)
            self.pending = ids
        out.append(delta)
        return out

    def _unsent(self) -> int:
        """How many sampled tokens at the end had no event (0 when the events do not say)."""
        predicted = self.final.get("tokens_predicted") if self.final is not None else None
        if not isinstance(predicted, int) or self.predicted_so_far is None:
            return 0  # an event without its id or count: the events do not say
        return max(predicted - self.predicted_so_far, 0)

    def _held_back(self) -> str:
        """Why the streamed text lacks the end of the answer, or "" when it does not.

        llama-server sends a token's text only once it cannot change: while the text ends inside a UTF-8 character
        the token gets no event at all, and while it ends in what may begin a stop string the event's text is
        empty. Its final stream event carries no text, so whatever is still held back when generation ends is
        never sent (the unary answer has it). The first case is certain (the last events' `tokens_predicted`
        falls short of the final one); the second is likely when the limit ends an answer whose last event had a
        token but no text."""
        if unsent := self._unsent():
            return (
                f"llama-server never sent the text of the last {unsent} sampled token(s): it ended inside a UTF-8 "
                "character, which its stream holds back; the unary answer has it (U+FFFD for the cut bytes)"
            )
        if (
            self.request.sampling.stop
            and self.final
            and self.final.get("stop_type") == "limit"
            and self.last_text_empty
        ):
            return (
                "llama-server may have held back the end of the text as a possible start of a stop string when the "
                "token limit ended generation; its stream never sends such text (the unary answer has it)"
            )
        return ""

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        facts = soft_errors.Facts()
        if self.final is not None:
            settled = response_pb2.Response()
            choice = settled.choices.add()
            completion.finish(choice, self.final)
            completion.usage_and_timing(self.final, settled)
            finish = end.finishes.add(
                choice_index=0, finish_reason=choice.finish_reason, raw_finish_reason=choice.raw_finish_reason
            )
            stops.copy_stop(choice, finish)
            tokens.finish_unattributed(finish, self.pending)
            finish.constrained_label = tokens.constrained_label(self.request, self.parts.texts().get(0, ""))
            predicted = self.final.get("tokens_predicted")
            if isinstance(predicted, int) and self.predicted_so_far is not None and self.id_count < predicted:
                # llama-server sends no event for a token that ends inside a UTF-8 sequence, so its id is lost.
                end.warnings.add(
                    code="sampled_tokens_incomplete",
                    message=f"the stream carried {self.id_count} of {predicted} sampled token ids",
                )
            if unsent_text := self._held_back():
                end.warnings.add(code="stream_text_incomplete", message=unsent_text)
            end.usage.CopyFrom(settled.usage)
            end.model = self.final.get("model") or ""  # only the last event names the model
            if settled.HasField("timing"):
                end.timing.CopyFrom(settled.timing)
            if not self.saw_probabilities:
                facts.lack_logprobs(0)
        else:
            end.finishes.add(choice_index=0)
            facts.cut_short = "the stream ended before its final (stop) event; the output is partial"
        events = []
        if self.final is None and self.pending:  # cut short: the held id was not a final EOS
            held = stream_pb2.PartDelta(choice_index=0, part_index=0, token_ids=self.pending)
            events.append(stream_pb2.StreamEvent(delta=held))
        soft_errors.settle_stream(self.request, end, facts, self.parts.texts())
        return [*events, stream_pb2.StreamEvent(end=end)]
