"""The first model call of a generation RPC whose span is not recorded, measured in fewer steps (`ServedCall`).

Nine RPCs in ten at `modelir serve`'s default sampling make no recorded span: the sampler left their root out, and
the model call's own span, which the sampler decides as it decides any other (`calls.model_call`), is left out too.
Such a call needs none of a `Call`'s span work, and a successful answer none of its error handling; its metrics are
appended straight to the aggregating meter's lists. Anything else (an exception, an answer with errors) is recorded
by a `Call` made for it then, so those rarer paths are the general ones.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context

from modelir.telemetry import _runtime
from modelir.telemetry.attribute_set import FOLD_AT
from modelir.telemetry.targets import appended, target_of
from modelir.v1 import request_pb2, response_pb2


class ServedCall:
    """A model call with no recorded span, inside a served RPC: its measurements, its propagated context (its span
    that the sampler left out, made current for the call) and the provider's request id, nothing more."""

    __slots__ = (
        "_ctx_token",
        "_instruments",
        "_model",
        "_request",
        "_response",
        "_token",
        "attempts",
        "context",
        "seen",
        "started",
    )
    span = None  # never recorded
    _ctx_token: Any
    _response: response_pb2.Response | None

    def __init__(self, model: Any, request: request_pb2.Request, seen: _runtime.Seen, context: Any) -> None:
        """`context`: the call's context (its unrecorded span in the RPC's), or None without a tracer."""
        self._model, self._request, self.seen, self._instruments = model, request, seen, seen.instruments
        self.context, self.attempts, self._response, self._ctx_token = context, 0, None, None
        self.started = time.monotonic()

    def __enter__(self) -> ServedCall:
        self._token = _runtime.current_call.set(self)  # what the HTTP attempts inside find (`wire.http_attempt`)
        if self.context is not None:
            self._ctx_token = otel_context.attach(self.context)
        return self

    def finish(self, response: response_pb2.Response) -> response_pb2.Response:
        self._response = response
        return response

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._ctx_token is not None:
            otel_context.detach(self._ctx_token)
        _runtime.current_call.reset(self._token)
        instruments, response = self._instruments, self._response
        if instruments is None:  # traces only, this one left out: nothing to record
            return
        if exc is not None or response is None or response.errors:
            self._recorded_by_call(exc)
            return
        # `Call._record_outcome` and `Call._end` for a unary answer without errors.
        model, request = self._model, self._request
        target = target_of(model)
        sets = target.metric_set(target.operation(request), request.model or model.name, response.model)
        usage, context, seen = response.usage, self.context, self.seen
        seen.answer = response  # its usage, as read here, is the RPC's too (`ServerCall.answered`)
        # The lists an `AggregatingHistogram` appends these sets' measurements to (`values_of`), appended to here;
        # None for another meter's instruments: `record` is called.
        lists = sets.appended if sets.appended[0] is instruments else appended(sets, instruments)
        tokens = usage.input_token_count
        if tokens or usage.HasField("input_token_count"):
            _measure(instruments.token_usage, lists[1], tokens, sets.input_tokens, context)
            seen.input_tokens = tokens
        tokens = usage.output_token_count
        if tokens or usage.HasField("output_token_count"):
            _measure(instruments.token_usage, lists[2], tokens, sets.output_tokens, context)
            seen.output_tokens = tokens
        if not target.remote:
            timing = response.timing
            queued = timing.queue_duration
            seconds = queued.seconds + queued.nanos / 1e9
            if seconds or timing.HasField("queue_duration"):
                _measure(instruments.queue_duration, lists[3], seconds, sets.plain, context)
        _measure(instruments.duration, lists[4], time.monotonic() - self.started, sets.plain, context)
        if self.attempts > 1 and not target.remote:
            instruments.retries.add(self.attempts - 1, sets.plain)

    def _recorded_by_call(self, exc: BaseException | None) -> None:
        """Record this call as a `Call` without a span would: its answer (soft errors included), then its end (an
        exception's type, a rejection's capabilities, the duration, the retries)."""
        from modelir.telemetry.calls import Call

        call = Call(self._model, self._request, streaming=False, instruments=self._instruments)
        call.started, call.attempts, call.context = self.started, self.attempts, self.context
        if self._response is not None:
            call.finish(self._response)
        call._end(exc)


def _measure(histogram: Any, values: list[float] | None, value: float, attributes: Any, context: Any) -> None:
    """`histogram.record(value, attributes, context)`, or the value appended to the aggregating histogram's own
    list of these attributes (`values`), folded when it is full."""
    if values is None:
        histogram.record(value, attributes, context)
        return
    values.append(value)
    if len(values) >= FOLD_AT:
        histogram.fold(values, attributes)
