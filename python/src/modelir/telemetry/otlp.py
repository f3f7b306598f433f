"""An opt-in OTLP/gRPC span exporter at a fraction of the stock encoder's cost: spans written as protobuf bytes,
repeated attributes encoded once (`MODELIR_OTLP_FAST_SPANS=true` for `modelir serve`; off by default).

The stock exporter builds a protobuf object for every span, attribute and value in Python (`encode_spans`): about
90 us for a span of 15 attributes, in the batch processor's thread, which holds the interpreter lock the server's
event loop needs. A gateway's spans repeat the same attributes (operation, provider, model, address, transport)
call after call, so here the bytes of each `KeyValue` with a string or boolean value are kept (a bounded cache),
numbers are written directly, and the stock exporter sends the request's bytes as they are (a stub that takes
bytes), with its retries, reconnection, compression and headers. A span with events or
links (an exception recorded on it, say), and the resource and scope messages, are encoded by the stock encoder,
so what is written by hand is the `Span` message alone. The bytes parse into exactly the message `encode_spans`
builds (tests/test_telemetry_cost.py compares them). Counted with valgrind over a gateway's spans (three a request, nine
attributes each on average): 36k instructions a span, against 286k for the stock encoder.

It encodes the SDK's spans as they are after the span limits applied (it truncates nothing itself), and what it
does not write by hand it leaves to the stock encoder. This module is imported only by `modelir.telemetry.setup`
when opted in (the `otel` extra): it needs the SDK and the exporter.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from modelir.records import varint

__all__ = ["FastOTLPSpanExporter", "encode_request"]

# Span.kind: the OTLP enum is the API's value plus one (0 is SPAN_KIND_UNSPECIFIED).
_KINDS: dict[SpanKind, int] = {kind: kind.value + 1 for kind in SpanKind}
_HAS_IS_REMOTE = 0x100  # SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_CACHE_LIMIT = 8192
_U64 = (1 << 64) - 1

_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack
_pack_double = struct.Struct("<d").pack


_SMALL = [bytes([n]) for n in range(128)]  # the one-byte varints: nearly every length and tag written here
# The varints of every length up to 16 KiB (two bytes at most): a span's own length is rarely below 128.
_VARINTS = _SMALL + [varint.encode(n) for n in range(128, 1 << 14)]


def _varint(value: int) -> bytes:
    return _VARINTS[value] if value < 16384 else varint.encode(value)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the length, the payload."""
    return tag + _varint(len(payload)) + payload


def _tag(number: int, wire_type: int) -> bytes:
    return varint.encode(number << 3 | wire_type)


# Tags (field number << 3 | wire type) of the messages written here.
_KV_KEY, _KV_VALUE = _tag(1, 2), _tag(2, 2)
_ANY_STRING, _ANY_BOOL, _ANY_INT, _ANY_DOUBLE, _ANY_ARRAY, _ANY_BYTES = (
    _tag(1, 2),
    _tag(2, 0),
    _tag(3, 0),
    _tag(4, 1),
    _tag(5, 2),
    _tag(7, 2),
)
_ARRAY_VALUES = _tag(1, 2)
_KV_VALUE_DOUBLE = _KV_VALUE + b"\x09" + _ANY_DOUBLE  # a double `AnyValue`: its tag and 8 bytes, 9 in all
_SPAN_TRACE_ID = _tag(1, 2) + b"\x10"  # with the length: 16 bytes
_SPAN_SPAN_ID = _tag(2, 2) + b"\x08"
_SPAN_TRACE_STATE, _SPAN_PARENT, _SPAN_NAME = _tag(3, 2), _tag(4, 2) + b"\x08", _tag(5, 2)
_SPAN_KIND = _tag(6, 0)
_SPAN_START, _SPAN_END = _tag(7, 1), _tag(8, 1)
_SPAN_ATTRIBUTE = _tag(9, 2)
_SPAN_DROPPED_ATTRIBUTES = _tag(10, 0)
_SPAN_STATUS = _tag(15, 2)
_SPAN_FLAGS = _tag(16, 5)
_STATUS_MESSAGE, _STATUS_CODE = _tag(2, 2), _tag(3, 0)
_SCOPE_SPANS_SCOPE, _SCOPE_SPANS_SPAN, _SCOPE_SPANS_SCHEMA = _tag(1, 2), _tag(2, 2), _tag(3, 2)
_RESOURCE_SPANS_RESOURCE, _RESOURCE_SPANS_SCOPE, _RESOURCE_SPANS_SCHEMA = _tag(1, 2), _tag(2, 2), _tag(3, 2)
_REQUEST_RESOURCE_SPANS = _tag(1, 2)

# The fixed-size fields of a span, each group one pack: the trace id (its two 64-bit halves, big-endian: the id's
# bytes in order), the span id and the parent's, with their tags and lengths; and the start and end times (fixed64,
# little-endian).
_IDS = struct.Struct(f">{len(_SPAN_TRACE_ID)}sQQ{len(_SPAN_SPAN_ID)}sQ")
_IDS_AND_PARENT = struct.Struct(f">{len(_SPAN_TRACE_ID)}sQQ{len(_SPAN_SPAN_ID)}sQ{len(_SPAN_PARENT)}sQ")
_PARENT = struct.Struct(f">{len(_SPAN_PARENT)}sQ")
_TIMES = struct.Struct(f"<{len(_SPAN_START)}sQ{len(_SPAN_END)}sQ")
# An unset status (an empty `Status` message, as the stock encoder writes it) and the flags, by whether the parent is
# remote.
_UNSET_STATUS_AND_FLAGS = {
    remote: _SPAN_STATUS + b"\x00" + _SPAN_FLAGS + _pack_fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0))
    for remote in (False, True)
}


def _any_value(value: Any) -> bytes:
    """The `AnyValue` bytes of an attribute value, as the stock encoder types it."""
    if isinstance(value, bool):
        return _ANY_BOOL + (b"\x01" if value else b"\x00")
    if isinstance(value, str):
        return _field(_ANY_STRING, value.encode())
    if isinstance(value, int):
        return _ANY_INT + _varint(value & _U64)
    if isinstance(value, float):
        return _ANY_DOUBLE + _pack_double(value)
    if isinstance(value, bytes):
        return _field(_ANY_BYTES, value)
    if isinstance(value, Sequence):
        return _field(_ANY_ARRAY, b"".join(_field(_ARRAY_VALUES, _any_value(item)) for item in value))
    raise TypeError(f"cannot encode an attribute value of type {type(value).__name__}")


class _Encoder:
    """Span bytes with the `KeyValue` bytes of string and boolean attributes cached, and each resource's and
    scope's bytes encoded once."""

    def __init__(self) -> None:
        self._key_values: dict[tuple[str, type, Any], bytes] = {}
        self._keys: dict[str, bytes] = {}
        self._headers: dict[tuple[int, int], tuple[Any, Any, bytes, bytes]] = {}
        self._names: dict[str, tuple[SpanKind, bytes]] = {}

    def _key_value(self, key: str, value: Any) -> bytes:
        """The `KeyValue` field of one attribute not in the cache (cached when its value may repeat). A string or a
        float, the values that miss most (ids, durations), is written here in one expression: the nested `_field`
        and `_varint` calls were most of a miss's cost."""
        kind = type(value)
        key_bytes = self._keys.get(key)
        if key_bytes is None:
            if len(self._keys) >= _CACHE_LIMIT:
                self._keys.clear()
            key_bytes = self._keys[key] = _field(_KV_KEY, key.encode())
        if kind is float:  # durations: rarely the same twice, never cached
            key_value = key_bytes + _KV_VALUE_DOUBLE + _pack_double(value)
            return _SPAN_ATTRIBUTE + _varint(len(key_value)) + key_value
        if kind is str and len(value) < 4096:
            data: bytes = value.encode()  # `kind is str` does not narrow `value` for mypy
            if len(data) < 4096:  # every length below is then under 16 KiB: one look-up in the varint table
                any_value = _ANY_STRING + _VARINTS[len(data)] + data
                key_value = key_bytes + _KV_VALUE + _VARINTS[len(any_value)] + any_value
                encoded = _SPAN_ATTRIBUTE + _varint(len(key_value)) + key_value
                self._cache(key, kind, value, encoded)
                return encoded
        # Floats (durations) rarely repeat; strings, flags, counts and string tuples do.
        cacheable = kind is str or kind is int or kind is bool or (kind is tuple and all(type(v) is str for v in value))
        encoded = _field(_SPAN_ATTRIBUTE, key_bytes + _field(_KV_VALUE, _any_value(value)))
        if cacheable:
            self._cache(key, kind, value, encoded)
        return encoded

    def _cache(self, key: str, kind: type, value: Any, encoded: bytes) -> None:
        if len(self._key_values) >= _CACHE_LIMIT:
            self._key_values.clear()
        self._key_values[(key, kind, value)] = encoded

    def _span(self, span: ReadableSpan) -> bytes:
        """The `Span` message's bytes, in field order. Written for the fewest interpreter steps (the batch
        processor's thread encodes every kept span while holding the interpreter lock a server's event loop needs):
        the ids (and parent) and the two times are one `struct` pack each, the name and kind one cached field, an
        unset status and the flags one constant."""
        context, parent = span.context, span.parent
        trace_id, span_id, trace_state = context.trace_id, context.span_id, context.trace_state
        if trace_state:
            state = ",".join(f"{k}={v}" for k, v in trace_state.items())
            out = [
                _IDS.pack(_SPAN_TRACE_ID, trace_id >> 64, trace_id & _U64, _SPAN_SPAN_ID, span_id),
                _field(_SPAN_TRACE_STATE, state.encode()),
            ]
            if parent is not None:
                out.append(_PARENT.pack(_SPAN_PARENT, parent.span_id))
        elif parent is not None:
            out = [
                _IDS_AND_PARENT.pack(
                    _SPAN_TRACE_ID,
                    trace_id >> 64,
                    trace_id & _U64,
                    _SPAN_SPAN_ID,
                    span_id,
                    _SPAN_PARENT,
                    parent.span_id,
                )
            ]
        else:
            out = [_IDS.pack(_SPAN_TRACE_ID, trace_id >> 64, trace_id & _U64, _SPAN_SPAN_ID, span_id)]
        name, kind = span.name, span.kind
        named = self._names.get(name)
        if named is None or named[0] is not kind:
            named = self._name_and_kind(name, kind)
        out.append(named[1])
        out.append(_TIMES.pack(_SPAN_START, span.start_time, _SPAN_END, span.end_time))
        attributes = span.attributes
        if attributes:
            # The cache looked up inline, a call made only on a miss: most of a span's attributes repeat.
            cached, key_value = self._key_values.get, self._key_value
            out += [cached((key, type(value), value)) or key_value(key, value) for key, value in attributes.items()]
        if span.dropped_attributes:
            out += (_SPAN_DROPPED_ATTRIBUTES, _varint(span.dropped_attributes))
        remote = parent is not None and parent.is_remote
        status = span.status
        if status.status_code is StatusCode.UNSET:  # nearly always (an unset status carries no description)
            out.append(_UNSET_STATUS_AND_FLAGS[remote])
        else:
            message = status.description.encode() if status.description else b""
            code = status.status_code.value
            out.append(
                _field(
                    _SPAN_STATUS,
                    (_field(_STATUS_MESSAGE, message) if message else b"")
                    + (_STATUS_CODE + _SMALL[code] if code else b""),
                )
            )
            out += (_SPAN_FLAGS, _pack_fixed32(_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)))
        return b"".join(out)

    def _name_and_kind(self, name: str, kind: SpanKind) -> tuple[SpanKind, bytes]:
        if len(self._names) >= _CACHE_LIMIT:
            self._names.clear()
        encoded = (_field(_SPAN_NAME, name.encode()) if name else b"") + _SPAN_KIND + _SMALL[_KINDS[kind]]
        named = self._names[name] = (kind, encoded)
        return named

    def _header(self, span: ReadableSpan) -> tuple[bytes, bytes]:
        """The encoded resource (with its schema URL) and scope (with its schema URL) of `span`'s group."""
        resource, scope = span.resource, span.instrumentation_scope
        key = (id(resource), id(scope))
        cached = self._headers.get(key)
        if cached is None or cached[0] is not resource or cached[1] is not scope:
            if len(self._headers) >= 64:
                self._headers.clear()
            stock = encode_spans([span]).resource_spans[0]
            resource_bytes = _field(_RESOURCE_SPANS_RESOURCE, stock.resource.SerializeToString())
            if stock.schema_url:
                resource_bytes += _field(_RESOURCE_SPANS_SCHEMA, stock.schema_url.encode())
            scope_spans = stock.scope_spans[0]
            scope_bytes = _field(_SCOPE_SPANS_SCOPE, scope_spans.scope.SerializeToString())
            if scope_spans.schema_url:
                scope_bytes += _field(_SCOPE_SPANS_SCHEMA, scope_spans.schema_url.encode())
            cached = self._headers[key] = (resource, scope, resource_bytes, scope_bytes)
        return cached[2], cached[3]

    def request(self, spans: Sequence[ReadableSpan]) -> bytes:
        """The `ExportTraceServiceRequest` bytes of `spans`, grouped by resource and then scope, as the stock
        encoder groups them."""
        groups: dict[bytes, dict[bytes, list[bytes]]] = {}
        resource = scope = group = None
        encode = self._span
        for span in spans:
            if span.resource is not resource or span.instrumentation_scope is not scope:  # a batch's spans share them
                resource, scope = span.resource, span.instrumentation_scope
                resource_bytes, scope_bytes = self._header(span)
                group = groups.setdefault(resource_bytes, {}).setdefault(scope_bytes, [])
            if span.events or span.links:  # rare (a recorded exception): the stock encoder, for exactness
                encoded = _stock_span(span)
            else:
                try:
                    encoded = encode(span)
                except TypeError:  # a value of a type written only by the stock encoder
                    encoded = _stock_span(span)
            group += (_SCOPE_SPANS_SPAN, _varint(len(encoded)), encoded)  # type: ignore[operator]
        out = []
        for resource_bytes, scopes in groups.items():
            scope_fields = [
                _field(_RESOURCE_SPANS_SCOPE, scope_bytes + b"".join(encoded_spans))
                for scope_bytes, encoded_spans in scopes.items()
            ]
            out.append(_field(_REQUEST_RESOURCE_SPANS, resource_bytes + b"".join(scope_fields)))
        return b"".join(out)


def _stock_span(span: ReadableSpan) -> bytes:
    return encode_spans([span]).resource_spans[0].scope_spans[0].spans[0].SerializeToString()


def encode_request(spans: Sequence[ReadableSpan], encoder: _Encoder | None = None) -> ExportTraceServiceRequest:
    """What `encode_spans(spans)` gives, built from bytes written here and parsed in C."""
    return ExportTraceServiceRequest.FromString((encoder or _Encoder()).request(spans))


class _BytesTraceServiceStub:
    """The trace service's stub with the request sent as the bytes it is given: the stock stub would take a message
    object, which the encoded bytes would first be parsed into and then serialised from again."""

    def __init__(self, channel: Any) -> None:
        self.Export = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,  # bytes, as given
            response_deserializer=ExportTraceServiceResponse.FromString,
            _registered_method=True,
        )


class FastOTLPSpanExporter(OTLPSpanExporter):
    """The stock OTLP/gRPC span exporter (same settings, environment variables, retries, reconnection) with the
    encoder above, its bytes sent as they are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encoder = _Encoder()
        # The stock exporter makes its stub from `_stub` (again when it reconnects): the one that sends bytes.
        self._stub = _BytesTraceServiceStub
        self._client = self._stub(self._channel)

    def _translate_data(self, data: Sequence[ReadableSpan]) -> bytes:  # type: ignore[override]
        return self._encoder.request(data)
