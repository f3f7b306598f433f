"""The OpenTelemetry context and span contexts read without the API's chains of Python calls, on every call's path.

Why: the API's look-ups are layers of Python functions (`trace.get_current_span` -> `context.get_value` ->
`context.get_current` -> the runtime context -> `ContextVar.get`), and a `SpanContext`'s fields are Python
properties; each layer costs about 900 interpreter instructions (counted with valgrind), and an unsampled trace
took some sixty of them per served call. Here the context's entries are read directly, and a span context is
unpacked as the tuple it is.

What this relies on, all unchanged since the API's 1.0: the context keys of the current span and of baggage, the
runtime context being a `ContextVar` (the default; `OTEL_PYTHON_CONTEXT` may name another, and then the API's own
functions are used), `SpanContext`'s tuple layout, and `NonRecordingSpan` keeping its span context in `_context`.
`tests/test_telemetry_context.py` checks each against the public API, so an upgrade that moves one fails there, not
in a server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar, Token
from operator import attrgetter
from typing import Any

from opentelemetry import baggage as _baggage
from opentelemetry import context as _context
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, Span, SpanContext, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

BAGGAGE_KEY: str = _baggage._BAGGAGE_KEY  # the context key of the baggage
_runtime = _context._RUNTIME_CONTEXT
# The ContextVar holding the current context, when the runtime context is the API's default one.
_current: ContextVar[Any] | None = _runtime._current_context if type(_runtime) is ContextVarsRuntimeContext else None
# How to read the span context of a span of a known type, without a Python call (`get_span_context` is a Python
# method): the attribute it returns. Any other type is asked by `isinstance` and its method.
_SPAN_CONTEXT_OF: dict[type, Callable[[Any], SpanContext]] = {NonRecordingSpan: attrgetter("_context")}


# `current()` is `opentelemetry.context.get_current()` and `attach(context)` is `opentelemetry.context.attach`: with
# the default runtime context, the context variable's own methods (a call in C, no Python frame), else the API's.
current: Callable[[], Any] = _current.get if _current is not None else _context.get_current
attach: Callable[[Context], Token[Any]] = _current.set if _current is not None else _context.attach


_logger = logging.getLogger(_context.__name__)


def detach(token: Token[Any]) -> None:
    """`opentelemetry.context.detach(token)`: a token of another context is logged, as the API logs it."""
    if _current is None:
        _context.detach(token)
        return
    try:
        _current.reset(token)
    except Exception:  # the API's own handling: a wrong token must not break the caller
        _logger.exception("Failed to detach context")


# `detach(token)` for a token known to belong to the current context (its owner just reset another of its variables):
# the context variable's own `reset`, with nothing to log.
detach_own: Callable[[Token[Any]], None] = _current.reset if _current is not None else detach


def with_span(span: Span, context: Context | None = None) -> Context:
    """`trace.set_span_in_context(span, context)`: `context` (None: the current one) with `span` as its span."""
    return Context({**(context if context is not None else current()), _SPAN_KEY: span})


def span_context(context: Any) -> SpanContext:
    """The span context of the span in `context` (a `Context`; None: the current one), as
    `trace.get_current_span(context).get_span_context()`."""
    span = (context if context is not None else current()).get(_SPAN_KEY)
    read = _SPAN_CONTEXT_OF.get(type(span))
    if read is not None:
        return read(span)
    if span is None or not isinstance(span, Span):  # as the API: anything else is no span
        return INVALID_SPAN_CONTEXT
    return span.get_span_context()


def knows_span_type(span_type: type, attribute: str) -> None:
    """Let `span_context` read the span context of spans of `span_type` (a `Span` subclass whose `get_span_context`
    returns its `attribute`) directly."""
    assert issubclass(span_type, Span)
    _SPAN_CONTEXT_OF[span_type] = attrgetter(attribute)


_MAX_TRACE_ID = (1 << 128) - 1
LEFT_OUT_FLAGS = TraceFlags(TraceFlags.RANDOM_TRACE_ID)  # not sampled; a random trace id (the SDK's flags for it)


class LeftOutRoot(NonRecordingSpan):
    """The root of a new trace that the sampler left out, made from the 192 bits drawn for its ids (`drawn`: the
    trace id the low 128, the span id the high 64; see `LeanTracer.start_root`). It is the `NonRecordingSpan` of
    that span context, whose `SpanContext` is made only when something asks for it.

    Why: nine RPCs in ten start one, and nothing on their path reads the span context: the W3C header is rendered
    from `drawn` in one step (`wire.root_traceparent`). Building the span context and the span the general way,
    and the header id by id, was ~5 k instructions a request (`bench/instructions.py`)."""

    __slots__ = ("_made", "drawn")  # made as `object.__new__(LeftOutRoot)`, then `drawn` set: no `__init__` to run
    drawn: int
    _made: SpanContext

    @property
    def _context(self) -> SpanContext:  # type: ignore[override]  # where `NonRecordingSpan` keeps its span context
        try:
            return self._made
        except AttributeError:
            drawn = self.drawn
            made = self._made = tuple.__new__(  # what `SpanContext(...)` makes (see `LeanTracer.start_span`)
                SpanContext, (drawn & _MAX_TRACE_ID, drawn >> 128, False, LEFT_OUT_FLAGS, DEFAULT_TRACE_STATE, True)
            )
            return made


knows_span_type(LeftOutRoot, "_context")


def trace_id_hex(span_context: SpanContext) -> str:
    """`trace.format_trace_id(span_context.trace_id)`: a 128-bit id's bytes in hex (formatting the int costs twice)."""
    trace_id = span_context[0]
    return trace_id.to_bytes(16, "big").hex() if 0 <= trace_id < 1 << 128 else f"{trace_id:032x}"


# A `SpanContext` is a tuple of these, in this order: the hot paths unpack it instead of reading its properties.
SPAN_CONTEXT_FIELDS = ("trace_id", "span_id", "is_remote", "trace_flags", "trace_state", "is_valid")
