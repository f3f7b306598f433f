"""The OpenTelemetry GenAI semantic-convention names modelir emits, and the pure mapping from IR messages to them.

Names follow the GenAI conventions (`gen_ai.*`, development stability, as of the `semantic-conventions-genai`
registry) and the general ones (`server.*`, `error.type`, `http.*`). They are written out here rather than taken
from `opentelemetry-semantic-conventions`, which only the SDK depends on: a library user needs `opentelemetry-api`
alone. modelir's own attributes and metrics live under `modelir.*`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Literal
from urllib.parse import urlsplit

import orjson
from opentelemetry.util.types import AttributeValue

from modelir import errors
from modelir.v1 import content_pb2, errors_pb2, request_pb2, response_pb2

# ---- span and metric attributes --------------------------------------------------------------------------

OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_CHOICE_COUNT = "gen_ai.request.choice.count"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_TOP_P = "gen_ai.request.top_p"
REQUEST_TOP_K = "gen_ai.request.top_k"
REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
REQUEST_FREQUENCY_PENALTY = "gen_ai.request.frequency_penalty"
REQUEST_PRESENCE_PENALTY = "gen_ai.request.presence_penalty"
REQUEST_SEED = "gen_ai.request.seed"
REQUEST_STREAM = "gen_ai.request.stream"
OUTPUT_TYPE = "gen_ai.output.type"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
TOKEN_TYPE = "gen_ai.token.type"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
HTTP_REQUEST_METHOD = "http.request.method"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
HTTP_REQUEST_RESEND_COUNT = "http.request.resend_count"
URL_FULL = "url.full"
RPC_SYSTEM = "rpc.system"
RPC_SERVICE = "rpc.service"
RPC_METHOD = "rpc.method"
RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"

# modelir's own.
TRANSPORT = "modelir.transport"
ATTEMPT_COUNT = "modelir.attempt_count"
QUEUE_DURATION = "modelir.queue.duration"
WARNING_CODES = "modelir.warning_codes"
CAPABILITY = "modelir.capability"
SOFT_ERROR_REASON = "modelir.error.reason"
PROVIDER_REQUEST_ID = "modelir.provider.request_id"

# ---- metric names --------------------------------------------------------------------------------------------

METRIC_TOKEN_USAGE = "gen_ai.client.token.usage"
METRIC_OPERATION_DURATION = "gen_ai.client.operation.duration"
METRIC_TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
METRIC_TIME_PER_OUTPUT_CHUNK = "gen_ai.client.operation.time_per_output_chunk"
# The model-server metrics, recorded by `modelir serve` for the generation RPCs it answers.
METRIC_SERVER_REQUEST_DURATION = "gen_ai.server.request.duration"
METRIC_SERVER_TIME_TO_FIRST_TOKEN = "gen_ai.server.time_to_first_token"
METRIC_SERVER_TIME_PER_OUTPUT_TOKEN = "gen_ai.server.time_per_output_token"
METRIC_QUEUE_DURATION = "modelir.client.limiter.queue.duration"
METRIC_RETRIES = "modelir.client.retries"
METRIC_SOFT_ERRORS = "modelir.client.soft_errors"
METRIC_REJECTIONS = "modelir.client.rejections"

# The bucket boundaries the GenAI conventions advise for their histograms.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
# The conventions' advised boundaries for time to first token, and for the time per output token or chunk.
FIRST_TOKEN_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TOKEN_TIME_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

# ---- values ------------------------------------------------------------------------------------------------

# `gen_ai.provider.name` per transport: the convention's well-known value where there is one, else the engine's
# own lower-case name (the convention allows custom values). An OpenAI-style transport pointed at another host is
# still `openai`: that is the API flavour, and `server.address` tells the host.
PROVIDER_BY_TRANSPORT = {
    "openai_chat": "openai",
    "openai_completions": "openai",
    "openai_responses": "openai",
    "anthropic_messages": "anthropic",
    "google_genai": "gcp.gemini",
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llama.cpp",
    "ollama": "ollama",
    "reference": "modelir.reference",
}
REMOTE_PROVIDER = "modelir"  # a `RemoteModel` call: the provider behind the server is the server's business

_FINISH_REASONS: dict[int, str] = {
    int(value): name.removeprefix("FINISH_REASON_").lower() for name, value in response_pb2.FinishReason.items()
}
_FINISH_REASONS[response_pb2.FINISH_REASON_UNSPECIFIED] = "unknown"

# The convention's roles for the messages of `gen_ai.input.messages`; system and developer messages go to
# `gen_ai.system_instructions` instead.
_ROLES = {
    content_pb2.ROLE_USER: "user",
    content_pb2.ROLE_ASSISTANT: "assistant",
    content_pb2.ROLE_TOOL: "tool",
}


def provider_name(transport: str) -> str:
    return PROVIDER_BY_TRANSPORT.get(transport, transport)


def operation_name(request: request_pb2.Request, transport: str) -> str:
    """`chat` for a conversation, `text_completion` for a raw prompt or token ids; Gemini's API is
    `generate_content` whatever the input."""
    if transport == "google_genai":
        return "generate_content"
    return "chat" if request.WhichOneof("input") == "conversation" else "text_completion"


def endpoint(url: str) -> tuple[str, int] | None:
    """(`server.address`, `server.port`) of a base URL or a `host:port` gRPC target; None when it has no host."""
    parts = urlsplit(url if "://" in url else f"//{url}")
    if not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80 if parts.scheme == "http" else 0
    return parts.hostname, port


# Sampling fields the request sets explicitly (`optional` in the IR), under their convention names.
_SamplingField = Literal["max_output_tokens", "temperature", "top_p", "frequency_penalty", "presence_penalty", "seed"]
_SAMPLING_ATTRIBUTES: tuple[tuple[_SamplingField, str], ...] = (
    ("max_output_tokens", REQUEST_MAX_TOKENS),
    ("temperature", REQUEST_TEMPERATURE),
    ("top_p", REQUEST_TOP_P),
    ("frequency_penalty", REQUEST_FREQUENCY_PENALTY),
    ("presence_penalty", REQUEST_PRESENCE_PENALTY),
    ("seed", REQUEST_SEED),
)


_SAMPLING_NAMES: dict[str, str] = dict(_SAMPLING_ATTRIBUTES)


def request_attributes(request: request_pb2.Request) -> dict[str, AttributeValue]:
    """The sampling parameters the request asked for (only those it set).

    Read from `ListFields()` (the fields set, in one call) rather than one `HasField` per parameter: a request sets
    one or two of them, and each `HasField` looks its field up by name."""
    attributes: dict[str, AttributeValue] = {}
    for field, value in request.sampling.ListFields():
        name = field.name
        attribute = _SAMPLING_NAMES.get(name)
        if attribute is not None:
            attributes[attribute] = value
        elif name == "choice_count":
            if value > 1:
                attributes[REQUEST_CHOICE_COUNT] = value
        elif name == "top_k":
            attributes[REQUEST_TOP_K] = float(value)  # the convention types it as a double
        elif name == "stop":
            attributes[REQUEST_STOP_SEQUENCES] = list(value)
    if request.constraint.WhichOneof("kind") == "json_schema":
        attributes[OUTPUT_TYPE] = "json"
    return attributes


def finish_reasons(reasons: Iterable[int]) -> tuple[str, ...]:
    """The normalised finish reasons as lower-case words (`stop`, `length`, `tool_calls`, ...): a tuple, the
    attribute value a span keeps."""
    return tuple([_FINISH_REASONS.get(reason, "other") for reason in reasons])


# IR usage counts under their convention names. modelir's meaning is the convention's: input includes cache reads
# and writes, output includes reasoning.
_UsageField = Literal[
    "input_token_count",
    "output_token_count",
    "cache_read_token_count",
    "cache_write_token_count",
    "reasoning_token_count",
]
_USAGE_ATTRIBUTES: tuple[tuple[_UsageField, str], ...] = (
    ("input_token_count", USAGE_INPUT_TOKENS),
    ("output_token_count", USAGE_OUTPUT_TOKENS),
    ("cache_read_token_count", USAGE_CACHE_READ_INPUT_TOKENS),
    ("cache_write_token_count", USAGE_CACHE_CREATION_INPUT_TOKENS),
    ("reasoning_token_count", USAGE_REASONING_OUTPUT_TOKENS),
)


_USAGE_NAMES: dict[str, str] = dict(_USAGE_ATTRIBUTES)


def usage_attributes(usage: response_pb2.Usage) -> dict[str, int]:
    """Usage under the convention's names. A count the provider did not report is left out (every count is an
    `optional` field, so `ListFields()` lists exactly the reported ones, a zero included)."""
    return {_USAGE_NAMES[field.name]: value for field, value in usage.ListFields() if field.name in _USAGE_NAMES}


def error_type(exc: BaseException) -> str:
    """A low-cardinality `error.type`: the `ErrorInfo.reason` of a modelir error (`RATE_LIMITED`, ...), else the
    exception's class name."""
    if isinstance(exc, errors.ModelError):
        return errors.mapping_for(exc.reason).info_reason
    return type(exc).__qualname__


def soft_error_type(error: errors_pb2.ResponseError) -> str:
    """`error.type` of a response's soft error (`TRUNCATED_STREAM`, `CONSTRAINT_VIOLATED`, ...)."""
    return errors.mapping_for(error.reason).info_reason


# ---- content (opt-in) ------------------------------------------------------------------------------------


def input_messages_json(request: request_pb2.Request) -> tuple[str, str | None]:
    """`gen_ai.input.messages` and `gen_ai.system_instructions` as the conventions' JSON (system messages go to
    the latter). Captured only when the user opted in."""
    messages: list[dict[str, object]] = []
    system: list[dict[str, object]] = []
    which = request.WhichOneof("input")
    if which == "conversation":
        for message in request.conversation.messages:
            parts = [_part(p) for p in message.parts]
            if message.role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER):
                system.extend(parts)
            else:
                messages.append({"role": _ROLES.get(message.role, "user"), "parts": parts})
    elif which == "prompt":
        messages.append({"role": "user", "parts": [{"type": "text", "content": request.prompt}]})
    elif which == "token_ids":
        messages.append({"role": "user", "parts": [{"type": "token_ids", "content": list(request.token_ids.ids)}]})
    if request.prefill:
        messages.append({"role": "assistant", "parts": [{"type": "text", "content": request.prefill}]})
    return orjson.dumps(messages).decode(), (orjson.dumps(system).decode() if system else None)


def output_messages_json(choices: Iterable[response_pb2.Choice]) -> str:
    return orjson.dumps(
        [
            {
                "role": "assistant",
                "parts": [_part(p) for p in choice.message.parts],
                "finish_reason": _FINISH_REASONS.get(choice.finish_reason, "other"),
            }
            for choice in choices
        ]
    ).decode()


def _part(part: content_pb2.Part) -> dict[str, object]:
    which = part.WhichOneof("content")
    if which == "text":
        return {"type": "text", "content": part.text}
    if which == "tool_call":
        call = part.tool_call
        return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments_json}
    if which == "tool_result":
        result = part.tool_result
        return {"type": "tool_call_response", "id": result.tool_call_id, "response": [_part(p) for p in result.content]}
    if which == "reasoning":
        return {"type": "reasoning", "content": part.reasoning.text or "\n".join(part.reasoning.summary)}
    if which == "blob":
        blob = part.blob
        if blob.WhichOneof("source") == "uri":
            return {"type": "uri", "mime_type": blob.mime_type, "uri": blob.uri}
        return {"type": "blob", "mime_type": blob.mime_type, "content": base64.b64encode(blob.data).decode()}
    return {"type": "unknown"}
