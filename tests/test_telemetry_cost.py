"""The opt-in span encoder (`telemetry/otlp.py`) gives exactly what the stock one gives: its bytes parse into the
message the stock OTLP encoder builds, for every kind of attribute value, status, parent, event and link, with the
span limits applied as the SDK applied them."""

from __future__ import annotations

import pytest
from modelir.telemetry.otlp import FastOTLPSpanExporter, encode_request
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState


def _spans() -> list:
    exporter = InMemorySpanExporter()
    providers = [
        TracerProvider(resource=Resource({"service.name": "a", "n": 1})),
        TracerProvider(resource=Resource({"service.name": "b"}, schema_url="https://example.com/schema")),
    ]
    for provider in providers:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1"), ("other", "x")]),
    )
    for provider in providers:
        for scope in ("modelir", "other"):
            tracer = provider.get_tracer(scope, "1.2.3")
            attributes = {
                "s": "text é ✓",
                "empty": "",
                "yes": True,
                "no": False,
                "i": 7,
                "zero": 0,
                "negative": -3,
                "big": 2**62,
                "f": 0.25,
                "nf": -1e-9,
                "strings": ("a", "b"),
                "ints": (1, -2),
                "floats": (0.5,),
                "bools": (True, False),
            }
            for kind in SpanKind:
                with tracer.start_as_current_span(f"{scope} {kind.name}", kind=kind, attributes=attributes) as span:
                    span.set_attribute("late", 1)
            with tracer.start_as_current_span(
                "remote child", context=trace.set_span_in_context(trace.NonRecordingSpan(remote))
            ) as span:
                span.set_status(Status(StatusCode.ERROR, "it broke"))
            with tracer.start_as_current_span("ok", links=[Link(remote, {"why": "because"})]) as span:
                span.set_status(Status(StatusCode.OK))
            with pytest.raises(ValueError), tracer.start_as_current_span("raises"):
                raise ValueError("boom")
            with tracer.start_as_current_span("") as span:
                span.add_event("something", {"k": "v"})
    return list(exporter.get_finished_spans())


def test_the_span_encoder_gives_the_stock_message():
    spans = _spans()
    assert len(spans) == 36  # 2 providers x 2 scopes x (5 kinds + 4 others)
    assert encode_request(spans) == encode_spans(spans)
    for span in spans:  # one at a time too, and again through one encoder whose caches are warm
        assert encode_request([span]) == encode_spans([span])
    exporter = FastOTLPSpanExporter(endpoint="127.0.0.1:9", insecure=True)
    try:
        for _ in range(2):
            assert ExportTraceServiceRequest.FromString(exporter._translate_data(spans)) == encode_spans(spans)
    finally:
        exporter.shutdown()


def _fast_path_spans(limits: SpanLimits | None = None) -> list:
    """Spans the encoder writes through its fast paths: roots and children of local and remote parents, with and
    without trace state, every status, a name used with two kinds, long names and a span longer than the varint
    table (16 KiB)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "fast"}), span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("modelir", "1.2.3")
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("v", "1")]))
    remote_plain = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(1))
    for round_ in range(2):  # the second time through warm caches
        root = tracer.start_span("chat mini", kind=SpanKind.CLIENT, attributes={"a": "x", "n": round_, "f": 0.5})
        local = tracer.start_span("chat mini", trace.set_span_in_context(root), kind=SpanKind.INTERNAL)
        local.set_attributes({"unique": f"id-{round_}", "reasons": ("stop",)})
        local.end()
        for parent in (remote, remote_plain):
            child = tracer.start_span("POST", trace.set_span_in_context(trace.NonRecordingSpan(parent)))
            child.set_status(Status(StatusCode.ERROR, "it broke"))
            child.end()
        ok = tracer.start_span("n" * 300, attributes={"long": "é" * 9000})  # > 16 KiB in UTF-8
        ok.set_status(Status(StatusCode.OK))
        ok.end()
        tracer.start_span("", attributes={"error": True}).end()
        root.end()
    return list(exporter.get_finished_spans())


@pytest.mark.parametrize("limit", [None, 100])
def test_the_fast_paths_encode_to_the_stock_message_with_the_span_limits_applied(limit):
    spans = _fast_path_spans(SpanLimits(max_attribute_length=limit))
    longest = max(len(s.attributes.get("long", "")) for s in spans)
    assert len(spans) == 12 and longest == (limit or 9000)
    assert encode_request(spans) == encode_spans(spans)
    for span in spans:
        assert encode_request([span]) == encode_spans([span])
