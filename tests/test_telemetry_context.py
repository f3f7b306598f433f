"""`modelir.telemetry._context` reads the OpenTelemetry context and span contexts through the API's internals: each
read here against the public API it replaces, so an upgrade of `opentelemetry-api` that moves one fails here."""

from __future__ import annotations

import pytest
from modelir.telemetry import _context
from modelir.telemetry.tracer import LeanSpan
from opentelemetry import baggage, context, trace
from opentelemetry.trace import INVALID_SPAN, NonRecordingSpan, SpanContext, TraceFlags, TraceState

_SPAN_CONTEXTS = [
    SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
    SpanContext(1, 2, is_remote=False, trace_flags=TraceFlags(0x02), trace_state=TraceState([("k", "v")])),
    SpanContext(0, 0, is_remote=False),
]


def test_a_span_context_is_the_tuple_of_its_fields_in_order():
    for span_context in _SPAN_CONTEXTS:
        assert tuple(span_context) == tuple(getattr(span_context, f) for f in _context.SPAN_CONTEXT_FIELDS)


@pytest.mark.parametrize("span_context", _SPAN_CONTEXTS)
def test_the_span_context_in_a_context_is_the_apis(span_context):
    given = trace.set_span_in_context(NonRecordingSpan(span_context))
    assert _context.span_context(given) == trace.get_current_span(given).get_span_context() == span_context
    token = context.attach(given)
    try:
        assert _context.current() is context.get_current()
        assert _context.span_context(None) == span_context
    finally:
        context.detach(token)


def test_anything_but_a_span_under_the_span_key_is_no_span():
    empty = context.Context()
    assert _context.span_context(empty) == trace.get_current_span(empty).get_span_context()
    odd = context.set_value(_context._SPAN_KEY, "not a span", empty)
    assert trace.get_current_span(odd) is INVALID_SPAN
    assert _context.span_context(odd) == INVALID_SPAN.get_span_context()


def test_spans_of_known_types_and_others_alike():
    class Custom(NonRecordingSpan):  # a span type `_context` has not been told of
        pass

    span_context = _SPAN_CONTEXTS[0]
    for span in (Custom(span_context), LeanSpan.__new__(LeanSpan)):
        if isinstance(span, LeanSpan):
            span.context = span_context
        given = trace.set_span_in_context(span)
        assert _context.span_context(given) == trace.get_current_span(given).get_span_context() == span_context


def test_baggage_is_seen_as_the_api_sees_it():
    empty = context.Context()
    with_baggage = baggage.set_baggage("user", "ada", empty)
    emptied = baggage.remove_baggage("user", with_baggage)
    for given in (empty, with_baggage, emptied):
        assert bool(given.get(_context.BAGGAGE_KEY)) is bool(baggage.get_all(given))


def test_the_current_context_is_read_from_the_apis_context_variable():
    assert _context._current is not None  # the default runtime context: the fast path is the one in use
    token = context.attach(context.set_value("k", 1))
    try:
        assert _context.current() is context.get_current() and _context.current()["k"] == 1
    finally:
        context.detach(token)


def test_a_span_set_in_a_context_attached_and_detached_as_the_api_does_it():
    base = context.set_value("k", 1, context.Context())
    span = NonRecordingSpan(_SPAN_CONTEXTS[1])
    assert _context.with_span(span, base) == trace.set_span_in_context(span, base)
    token = _context.attach(base)
    try:
        assert context.get_current() is base
        assert _context.with_span(span) == trace.set_span_in_context(span)  # on the current context
    finally:
        _context.detach(token)
    assert context.get_current() is not base


def test_detaching_a_token_of_another_context_is_logged_not_raised(caplog):
    import contextvars

    token = contextvars.copy_context().run(_context.attach, context.Context())
    _context.detach(token)  # made in another context: the API logs it
    assert "Failed to detach context" in caplog.text


@pytest.mark.parametrize("trace_id", [0, 1, 0xABC, (1 << 128) - 1])
def test_a_trace_id_in_hex_is_the_apis(trace_id):
    span_context = SpanContext(trace_id, 1, is_remote=False)
    assert _context.trace_id_hex(span_context) == trace.format_trace_id(trace_id)


def test_the_global_propagator_is_read_where_the_api_keeps_it():
    """`wire` reads the global propagator where `propagate.get_global_textmap()` finds it, set or replaced."""
    from modelir.telemetry import wire
    from opentelemetry import propagate
    from opentelemetry.propagators.composite import CompositePropagator

    default = propagate.get_global_textmap()
    try:
        assert getattr(propagate, wire._GLOBAL_TEXTMAP) is default
        replaced = CompositePropagator([])
        propagate.set_global_textmap(replaced)
        assert getattr(propagate, wire._GLOBAL_TEXTMAP) is replaced is propagate.get_global_textmap()
    finally:
        propagate.set_global_textmap(default)
