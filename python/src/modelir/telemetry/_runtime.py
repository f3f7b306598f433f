"""Which tracer and meter modelir uses, its instruments, and the context variables a call shares with its attempts.

Everything here costs one global look-up when no tracer or meter provider is configured: the OpenTelemetry API's
proxy providers mean "not configured", and then every hook returns a shared no-op.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import opentelemetry.metrics._internal as _metrics_api
import opentelemetry.trace as _trace_api
from opentelemetry import context as otel_context
from opentelemetry import metrics, trace

# The context keys `opentelemetry.instrumentation.utils.suppress_instrumentation()` (and the SDK's exporters, around
# their own sends) and `suppress_http_instrumentation()` set: the API keeps them, so instrumentations share them.
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY, _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.metrics._internal import _ProxyMeterProvider

from modelir.telemetry import conventions as sc
from modelir.version import SDK_VERSION

if TYPE_CHECKING:
    from modelir.telemetry.calls import Call
    from modelir.telemetry.served import ServedCall

SCOPE = "modelir"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_DISABLED_TRACER_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
# The API's proxy stands in until an SDK provider is set; the API exports no public name for its class.
_DISABLED_METER_PROVIDERS = (_ProxyMeterProvider, metrics.NoOpMeterProvider)


class Histogram(Protocol):
    """What modelir asks of a histogram: the API's, or `modelir.telemetry.meter.AggregatingHistogram`."""

    def record(
        self, amount: float, attributes: Mapping[str, Any] | None = None, context: otel_context.Context | None = None
    ) -> None: ...


class Counter(Protocol):
    """What modelir asks of a counter: the API's, or `modelir.telemetry.meter.AggregatingCounter`."""

    def add(
        self, amount: float, attributes: Mapping[str, Any] | None = None, context: otel_context.Context | None = None
    ) -> None: ...


@dataclass(slots=True)
class Instruments:
    """The histograms and counters modelir records, made from one meter."""

    token_usage: Histogram
    duration: Histogram
    time_to_first_chunk: Histogram
    time_per_output_chunk: Histogram
    server_request_duration: Histogram
    server_time_to_first_token: Histogram
    server_time_per_output_token: Histogram
    queue_duration: Histogram
    retries: Counter
    soft_errors: Counter
    rejections: Counter

    @classmethod
    def create(cls, meter: metrics.Meter) -> Instruments:
        def histogram(name: str, unit: str, description: str, buckets: Sequence[float]) -> Histogram:
            return meter.create_histogram(
                name, unit=unit, description=description, explicit_bucket_boundaries_advisory=list(buckets)
            )

        return cls(
            token_usage=histogram(
                sc.METRIC_TOKEN_USAGE, "{token}", "Number of input and output tokens used.", sc.TOKEN_BUCKETS
            ),
            duration=histogram(sc.METRIC_OPERATION_DURATION, "s", "GenAI operation duration.", sc.DURATION_BUCKETS),
            time_to_first_chunk=histogram(
                sc.METRIC_TIME_TO_FIRST_CHUNK,
                "s",
                "Time from issuing a streamed request to receiving its first output chunk.",
                sc.DURATION_BUCKETS,
            ),
            time_per_output_chunk=histogram(
                sc.METRIC_TIME_PER_OUTPUT_CHUNK,
                "s",
                "Time per output chunk after the first, from the end of the previous chunk to the end of this one.",
                sc.TOKEN_TIME_BUCKETS,
            ),
            server_request_duration=histogram(
                sc.METRIC_SERVER_REQUEST_DURATION,
                "s",
                "Generative AI server request duration, to the last byte of the answer.",
                sc.DURATION_BUCKETS,
            ),
            server_time_to_first_token=histogram(
                sc.METRIC_SERVER_TIME_TO_FIRST_TOKEN,
                "s",
                "Time to the first output of a successful streamed request.",
                sc.FIRST_TOKEN_BUCKETS,
            ),
            server_time_per_output_token=histogram(
                sc.METRIC_SERVER_TIME_PER_OUTPUT_TOKEN,
                "s",
                "Time per output token after the first, for successful streamed requests.",
                sc.TOKEN_TIME_BUCKETS,
            ),
            queue_duration=histogram(
                sc.METRIC_QUEUE_DURATION, "s", "Time a call waited for the client-side limiter.", sc.DURATION_BUCKETS
            ),
            retries=meter.create_counter(
                sc.METRIC_RETRIES, unit="{retry}", description="HTTP attempts beyond the first, per model call."
            ),
            soft_errors=meter.create_counter(
                sc.METRIC_SOFT_ERRORS,
                unit="{response}",
                description="Responses that came back partial or suspect, by `modelir.error.reason`.",
            ),
            rejections=meter.create_counter(
                sc.METRIC_REJECTIONS,
                unit="{capability}",
                description="Requests rejected before any I/O, counted once per missing `modelir.capability`.",
            ),
        )


@dataclass(slots=True)
class _Resolved:
    tracer_provider: object = None
    tracer: trace.Tracer | None = None
    meter_provider: object = None
    instruments: Instruments | None = None
    capture_content: bool = False


_resolved = _Resolved()
_override: dict[str, object] = {}
# `_override`'s providers, read on every call's path by `hooks()`.
_override_tracer_provider: object = None
_override_meter_provider: object = None
# The meter `modelir.telemetry.setup` built from the environment (an `AggregatingMeter`), used before the global
# meter provider: it is not the API's global one, since it makes only modelir's own instruments.
_own_meter: object = None


def use_meter(meter: object) -> None:
    """Measure with `meter` (an `AggregatingMeter`; None: back to the global meter provider) unless `install` says
    otherwise."""
    global _own_meter, _resolved, _hooks_for
    _own_meter = meter
    _resolved, _hooks_for = _Resolved(), (_UNRESOLVED, _UNRESOLVED)


def install(
    *, tracer_provider: object = None, meter_provider: object = None, capture_content: bool | None = None
) -> None:
    """Use these providers instead of the global ones (tests; several servers in one process). `None` for a
    provider goes back to the global one; `capture_content=None` goes back to the environment variable."""
    _override.clear()
    if tracer_provider is not None:
        _override["tracer_provider"] = tracer_provider
    if meter_provider is not None:
        _override["meter_provider"] = meter_provider
    if capture_content is not None:
        _override["capture_content"] = capture_content
    global _resolved, _override_tracer_provider, _override_meter_provider, _hooks_for
    _override_tracer_provider, _override_meter_provider = tracer_provider, meter_provider
    _resolved, _hooks_for = _Resolved(), (_UNRESOLVED, _UNRESOLVED)


# Providers named by these variables are loaded by the API on first use, so their presence means "maybe on".
_PROVIDERS_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ or "OTEL_PYTHON_METER_PROVIDER" in os.environ


def _capture_from_env() -> bool:
    value = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower()
    # `true` in the instrumentations that predate the span/event split; `span_only` / `span_and_event` after it.
    return value in ("true", "1", "span_only", "span_and_event")


def tracer() -> trace.Tracer | None:
    """modelir's tracer, or None when no tracer provider is configured."""
    provider = _override.get("tracer_provider") or _trace_api._TRACER_PROVIDER
    if provider is _resolved.tracer_provider and (provider is not None or not _PROVIDERS_FROM_ENV):
        return _resolved.tracer  # the path of every call once resolved (or with nothing configured)
    if provider is None and _PROVIDERS_FROM_ENV:  # the API loads the provider the environment names, once
        provider = trace.get_tracer_provider()
    if provider is None:  # nothing configured: `get_tracer_provider()` would look up an environment variable
        _resolved.tracer_provider = _resolved.tracer = None  # (a provider in use before is no longer)
        return None
    if provider is not _resolved.tracer_provider:
        _resolved.tracer_provider = provider
        _resolved.tracer = (
            None if isinstance(provider, _DISABLED_TRACER_PROVIDERS) else provider.get_tracer(SCOPE, SDK_VERSION)  # type: ignore[attr-defined]
        )
        capture = _override.get("capture_content")
        _resolved.capture_content = _capture_from_env() if capture is None else bool(capture)
    return _resolved.tracer


def instruments() -> Instruments | None:
    """modelir's instruments, or None when no meter provider is configured. The provider may be an SDK one or
    an `AggregatingMeter` (`modelir.telemetry.meter`): both make histograms and counters alike."""
    provider = _override.get("meter_provider") or _own_meter or _metrics_api._METER_PROVIDER
    if provider is _resolved.meter_provider and (provider is not None or not _PROVIDERS_FROM_ENV):
        return _resolved.instruments  # the path of every call once resolved (or with nothing configured)
    if provider is None and _PROVIDERS_FROM_ENV:
        provider = metrics.get_meter_provider()
    if provider is None:  # nothing configured: `get_meter_provider()` would look up an environment variable
        _resolved.meter_provider = _resolved.instruments = None  # (a provider in use before is no longer)
        return None
    if provider is not _resolved.meter_provider:
        _resolved.meter_provider = provider
        _resolved.instruments = (
            None
            if isinstance(provider, _DISABLED_METER_PROVIDERS)
            else Instruments.create(provider.get_meter(SCOPE, SDK_VERSION))  # type: ignore[attr-defined]
        )
    return _resolved.instruments


# What `hooks()` answered last, and the providers in effect then (the overriding or the global ones).
_UNRESOLVED = object()
_hooks_for: tuple[object, object] = (None, None)  # nothing configured: None, until a provider is set
_hooks: _Resolved | None = None


def hooks() -> _Resolved | None:
    """The tracer and instruments in use (`.tracer`, `.instruments`: either may be None), or None when neither is:
    what `tracer()` and `instruments()` tell together, in one look-up once resolved (each call's hooks start here).

    Once resolved (and when nothing is configured) it reads the API's two provider globals directly and compares
    them with the ones it resolved: `get_tracer_provider()` and `get_meter_provider()` look up an environment
    variable on every call and together cost ~2.5 us, which would be 2-3% of a small in-process call.
    """
    tracer_provider = _override_tracer_provider or _trace_api._TRACER_PROVIDER
    meter_provider = _override_meter_provider or _own_meter or _metrics_api._METER_PROVIDER
    if tracer_provider is _hooks_for[0] and meter_provider is _hooks_for[1] and not _PROVIDERS_FROM_ENV:
        return _hooks
    return _resolve_hooks(tracer_provider, meter_provider)


def _resolve_hooks(tracer_provider: object, meter_provider: object) -> _Resolved | None:
    """Resolve the tracer and the instruments of these providers (set or changed since the last call)."""
    global _hooks, _hooks_for
    tracer()
    instruments()
    resolved = _resolved
    _hooks = resolved if resolved.tracer is not None or resolved.instruments is not None else None
    _hooks_for = (tracer_provider, meter_provider)
    return _hooks


def capture_content() -> bool:
    tracer()
    return _resolved.capture_content


# ---- what a call shares with the HTTP attempts it makes, and with whoever builds its record -------------------


@dataclass(init=False)
class Seen:
    """What `capture()` collects about the last model call made inside it, for a record's provenance; and, from a
    generation RPC whose span is not recorded, what its first model call needs to be measured as a `ServedCall`.

    Made empty (`Seen()`) and filled in: its fields start as the class's defaults, with no `__init__` to run."""

    trace_id: str = ""
    span_id: str = ""
    provider_request_id: str = ""
    # Set by a generation RPC whose span is not recorded (no tracer, or a root the sampler left out): its first model
    # call may be a `ServedCall` (`calls.model_call`), made in `context` (the RPC's) with these `instruments`.
    served: bool = False
    context: Any = None
    instruments: Any = None
    # What that `ServedCall` read of its answer's usage (None: not reported), for the RPC that answers with it.
    answer: object = None
    input_tokens: int | None = None
    output_tokens: int | None = None


current_call: ContextVar[Call | ServedCall | None] = ContextVar("modelir_telemetry_call", default=None)
current_capture: ContextVar[Seen | None] = ContextVar("modelir_telemetry_capture", default=None)


def instrumented(context: Any = None, *, http: bool = False) -> bool:
    """Whether spans may be made in `context` (None: the current one): False under `suppress_instrumentation()`, or
    for an HTTP client span (`http`) under `suppress_http_instrumentation()`, as `is_instrumentation_enabled()` and
    `is_http_instrumentation_enabled()` of `opentelemetry.instrumentation.utils` read them."""
    if otel_context.get_value(_SUPPRESS_INSTRUMENTATION_KEY, context):
        return False
    return not (http and otel_context.get_value(_SUPPRESS_HTTP_INSTRUMENTATION_KEY, context))
