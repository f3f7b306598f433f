"""What does not change between the calls of one model: its transport, provider, endpoint and span kind, and the
metric attribute sets its calls measure with (made once, shared: nobody may change them)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import SpanKind

from modelir.telemetry import conventions as sc
from modelir.telemetry.attribute_set import AttributeSet
from modelir.v1 import request_pb2


@dataclass(frozen=True, slots=True)
class Target:
    """What does not change between calls of one model, and the metric attribute sets its calls measure with."""

    transport: str
    provider: str
    endpoint: tuple[str, int] | None
    kind: SpanKind
    remote: bool
    metric_sets: dict[tuple[str, str, str, str], MetricSets] = field(default_factory=dict)
    # `gen_ai.operation.name` by the request's input kind (`conversation`, `prompt`, ...).
    operations: dict[str | None, str] = field(default_factory=dict)

    def operation(self, request: request_pb2.Request) -> str:
        """The `gen_ai.operation.name` of a request, by its input kind (made once per kind)."""
        input_kind = request.WhichOneof("input")
        operation = self.operations.get(input_kind)
        if operation is None:
            operation = self.operations[input_kind] = sc.operation_name(request, self.transport)
        return operation

    def metric_set(self, operation: str, model: str, response_model: str = "", error_type: str = "") -> MetricSets:
        """The attribute sets of one (operation, model, response model, error type), made once: a call measures
        five or six times, and building the dicts anew each time was a fifth of its metrics' cost. They are
        shared, so nobody may change them."""
        key = (operation, model, response_model, error_type)
        sets = self.metric_sets.get(key)
        if sets is None:
            if len(self.metric_sets) >= _METRIC_SETS_LIMIT:  # a bound, for models whose names or errors vary
                self.metric_sets.clear()
            plain: dict[str, Any] = {
                sc.OPERATION_NAME: operation,
                sc.PROVIDER_NAME: self.provider,
                sc.REQUEST_MODEL: model,
            }
            if self.endpoint is not None:
                plain[sc.SERVER_ADDRESS], plain[sc.SERVER_PORT] = self.endpoint
            if response_model:
                plain[sc.RESPONSE_MODEL] = response_model
            if error_type:
                plain[sc.ERROR_TYPE] = error_type
            sets = self.metric_sets[key] = MetricSets(
                AttributeSet(plain),
                AttributeSet(plain, **{sc.TOKEN_TYPE: "input"}),
                AttributeSet(plain, **{sc.TOKEN_TYPE: "output"}),
            )
        return sets


@dataclass(frozen=True, slots=True)
class MetricSets:
    plain: dict[str, Any]
    input_tokens: dict[str, Any]
    output_tokens: dict[str, Any]
    # `[instruments, lists]`: the lists that `ServedCall` appends its token usage (input, output), queue duration
    # and duration to for the `instruments` named first (`_appended`).
    appended: list[Any] = field(default_factory=lambda: [None])


def appended(sets: MetricSets, instruments: Any) -> list[Any]:
    """`sets.appended` for `instruments`: each list the histogram appends a measurement of these sets to
    (`meter.AggregatingHistogram.values_of`), None for a histogram of another kind (the SDK's)."""

    def values_of(histogram: Any, attributes: Any) -> list[float] | None:
        method = getattr(histogram, "values_of", None)
        return method(attributes) if method is not None else None

    sets.appended[:] = [
        instruments,
        values_of(instruments.token_usage, sets.input_tokens),
        values_of(instruments.token_usage, sets.output_tokens),
        values_of(instruments.queue_duration, sets.plain),
        values_of(instruments.duration, sets.plain),
    ]
    return sets.appended


_METRIC_SETS_LIMIT = 512


# Keyed by `id(model)` and dropped when the model is collected: a `WeakKeyDictionary` makes a weak reference for
# every look-up, and the target kept on the model itself would travel with it when it is pickled (to a Ray worker).
targets: dict[int, Target] = {}


def target_of(model: Any) -> Target:
    """The `Target` of a `Model` or `RemoteModel`, made at its first call."""
    target = targets.get(id(model))
    if target is None:
        transport = getattr(model, "transport", None)
        if transport is not None:  # a local `Model`: its transport, and the executor's endpoint when it has one
            executor = getattr(model, "executor", None)
            url = getattr(executor, "base_url", None) or getattr(executor, "_base_url", None)
            target = Target(
                transport.name,
                sc.provider_name(transport.name),
                sc.endpoint(url) if url else None,
                SpanKind.CLIENT if executor is not None else SpanKind.INTERNAL,  # in-process models are INTERNAL
                remote=False,
            )
        else:  # a `RemoteModel`: the modelir server is the GenAI service it calls
            where = getattr(model, "target", "")
            target = Target("", sc.REMOTE_PROVIDER, sc.endpoint(where) if where else None, SpanKind.CLIENT, True)
        weakref.finalize(model, targets.pop, id(model), None)  # before the id can be another object's
        targets[id(model)] = target
    return target
