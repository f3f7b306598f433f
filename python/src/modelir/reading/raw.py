"""Typed raw responses: a kept raw exchange (`include_raw=True`) read as parsed JSON or as the provider SDK's type.

`raw_json(x)` parses the body (or, for a stream, each event's data). `raw_typed(x)` validates it into the type the
provider's own SDK uses for it, chosen by the exchange's transport: `openai` for the OpenAI transports,
`anthropic` for Anthropic Messages, `google-genai` for Gemini. The SDKs are optional: each is imported only when
asked for, and a missing one raises an `ImportError` that names the package to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from typing import Any

import orjson

from modelir.v1 import response_pb2, stream_pb2

RawLike = response_pb2.Response | response_pb2.RawExchange | stream_pb2.StreamEvent


@dataclass(frozen=True, slots=True)
class _SdkType:
    package: str  # what to pip install
    module: str
    unary: str  # the type of a unary body
    event: str  # the type of one stream event's data (a union is validated with pydantic's TypeAdapter)


_SDK_TYPES = {
    "openai_chat": _SdkType("openai", "openai.types.chat", "ChatCompletion", "ChatCompletionChunk"),
    "openai_completions": _SdkType("openai", "openai.types", "Completion", "Completion"),
    "openai_responses": _SdkType("openai", "openai.types.responses", "Response", "ResponseStreamEvent"),
    "anthropic_messages": _SdkType("anthropic", "anthropic.types", "Message", "RawMessageStreamEvent"),
    "google_genai": _SdkType(
        "google-genai", "google.genai.types", "GenerateContentResponse", "GenerateContentResponse"
    ),
}
# Stream events that carry no provider object: the end-of-stream sentinel and keep-alives.
_NOT_EVENTS = {b"[DONE]"}
_KEEPALIVE_EVENTS = {"ping"}


def _exchange(source: RawLike) -> response_pb2.RawExchange:
    if isinstance(source, response_pb2.RawExchange):
        return source
    if isinstance(source, stream_pb2.StreamEvent):
        if source.WhichOneof("event") != "end" or not source.end.HasField("raw"):
            raise ValueError("only a stream's end event carries the raw exchange (ask with include_raw=True)")
        return source.end.raw
    if isinstance(source, response_pb2.Response):
        if not source.HasField("raw"):
            raise ValueError("the response kept no raw exchange: build the request with include_raw=True")
        return source.raw
    raise TypeError(f"expected a Response, a RawExchange or a stream's end event; got {type(source).__name__}")


def _events(raw: response_pb2.RawExchange) -> list[bytes]:
    return [e.data for e in raw.stream_events if e.data.strip() not in _NOT_EVENTS and e.event not in _KEEPALIVE_EVENTS]


def raw_json(source: RawLike) -> Any:
    """The provider's answer as parsed JSON: the body of a unary exchange, or the list of a stream's event data
    (without `[DONE]` and keep-alive pings)."""
    raw = _exchange(source)
    try:
        if raw.stream_events:
            return [orjson.loads(data) for data in _events(raw)]
        return orjson.loads(raw.body)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the raw {raw.transport or 'provider'} answer is not JSON: {exc}") from None


def sdk_type_name(transport: str) -> str | None:
    """The SDK type a transport's unary body is read as (`"openai.types.chat.ChatCompletion"`), or None."""
    sdk = _SDK_TYPES.get(transport)
    return f"{sdk.module}.{sdk.unary}" if sdk else None


# Engines that answer in OpenAI's shapes on some endpoints: the body's `object` says which shape it is.
_OPENAI_COMPATIBLE = {"vllm", "llamacpp"}
_BY_OBJECT = {
    "chat.completion": "openai_chat",
    "chat.completion.chunk": "openai_chat",
    "text_completion": "openai_completions",
}


def _sdk_for(raw: response_pb2.RawExchange) -> _SdkType | None:
    if raw.transport not in _OPENAI_COMPATIBLE:
        return _SDK_TYPES.get(raw.transport)
    data = raw_json(raw)
    first = data[0] if isinstance(data, list) and data else data
    kind = first.get("object") if isinstance(first, dict) else None
    return _SDK_TYPES.get(_BY_OBJECT.get(kind, "") if isinstance(kind, str) else "")


def raw_typed(source: RawLike) -> Any:
    """The provider's answer as its own SDK's type: one object for a unary exchange, a list for a stream.

    vLLM and llama.cpp answers in OpenAI's shapes (told by their `object` field) read as the `openai` types.
    """
    raw = _exchange(source)
    sdk = _sdk_for(raw)
    if sdk is None:
        known = ", ".join(sorted(_SDK_TYPES))
        raise LookupError(
            f"no provider SDK type for this {raw.transport!r} answer (there is one for {known}, and for vLLM and "
            "llama.cpp answers in OpenAI's shapes); use raw_json()"
        )
    try:
        module = importlib.import_module(sdk.module)
    except ImportError:
        raise ImportError(
            f"reading a {raw.transport} answer as its SDK type needs `pip install {sdk.package}`"
        ) from None
    data = raw_json(raw)
    if raw.stream_events:
        return [_validate(getattr(module, sdk.event), item, sdk) for item in data]
    return _validate(getattr(module, sdk.unary), data, sdk)


@cache
def _adapter(kind: Any) -> Any:
    from pydantic import TypeAdapter  # a dependency of every SDK listed above

    return TypeAdapter(kind)


def _validate(kind: Any, data: Any, sdk: _SdkType) -> Any:
    from pydantic import ValidationError

    try:
        if hasattr(kind, "model_validate"):
            return kind.model_validate(data)
        return _adapter(kind).validate_python(data)
    except ValidationError as exc:
        raise ValueError(
            f"the raw answer does not fit {sdk.package}'s {getattr(kind, '__name__', sdk.event)} type "
            f"(a newer API than the installed SDK?); raw_json() still reads it: {exc}"
        ) from None
