"""What the OpenAI wires (chat, Responses, completions) and their compatible engines share: tables, blobs, usage.

From OpenAI's API reference (https://platform.openai.com/docs/api-reference): reasoning effort and tool-choice
mode names, data URLs for inline images, function tools, finish reasons, and usage whose cached and reasoning
counts sit inside the totals, as in the IR.
"""

from __future__ import annotations

import base64
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

import msgspec
import orjson

from modelir import errors
from modelir.errors import soft as soft_errors
from modelir.pipeline.survey import Survey
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import provider_errors
from modelir.transports.base import HttpRequest, HttpTransport, RawEvent, StreamLifter
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2, response_pb2, stream_pb2

EFFORTS = {
    request_pb2.REASONING_EFFORT_NONE: "none",
    request_pb2.REASONING_EFFORT_MINIMAL: "minimal",
    request_pb2.REASONING_EFFORT_LOW: "low",
    request_pb2.REASONING_EFFORT_MEDIUM: "medium",
    request_pb2.REASONING_EFFORT_HIGH: "high",
    request_pb2.REASONING_EFFORT_XHIGH: "xhigh",  # IR 1.1; claimed only where the wire accepts it (chat)
}
TOOL_CHOICE_MODES = {
    request_pb2.TOOL_CHOICE_MODE_AUTO: "auto",
    request_pb2.TOOL_CHOICE_MODE_NONE: "none",
    request_pb2.TOOL_CHOICE_MODE_REQUIRED: "required",
}
FINISH_REASONS = {
    "stop": response_pb2.FINISH_REASON_STOP,
    "length": response_pb2.FINISH_REASON_LENGTH,
    "tool_calls": response_pb2.FINISH_REASON_TOOL_CALLS,
    "function_call": response_pb2.FINISH_REASON_TOOL_CALLS,
    "content_filter": response_pb2.FINISH_REASON_CONTENT_FILTER,
    "error": response_pb2.FINISH_REASON_ERROR,  # OpenRouter: the generation failed mid-stream
}
JSON_HEADERS = (("content-type", "application/json"),)
# The provider options that chat completions and Responses both take (each adds its own).
OPTION_KEYS = (
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "store",
    "user",
)


def finish_reason(raw: str | None) -> response_pb2.FinishReason.ValueType:
    if raw is None:
        return response_pb2.FINISH_REASON_UNSPECIFIED
    return FINISH_REASONS.get(raw, response_pb2.FINISH_REASON_OTHER)


def json_request(path: str, body: dict[str, Any], *, stream: bool) -> HttpRequest:
    """A POST of a JSON body; streamed answers are SSE on every OpenAI wire."""
    return HttpRequest("POST", path, orjson.dumps(body), JSON_HEADERS, "sse" if stream else None)


def tool_choice(request: request_pb2.Request, named: Any) -> Any:
    """The native `tool_choice`: a mode name, or `named(tool_name)` for a named tool; None when unset."""
    choice = request.tool_choice.WhichOneof("choice")
    if choice == "mode":
        return TOOL_CHOICE_MODES[request.tool_choice.mode]
    if choice == "tool_name":
        return named(request.tool_choice.tool_name)
    return None


def logit_bias(sampling: request_pb2.SamplingParams) -> dict[str, int]:
    """`logit_bias` as OpenAI takes it: decimal token ids to integer biases (`logit_bias_problems` checked them)."""
    return {str(token): int(bias) for token, bias in sorted(sampling.logit_bias.items())}


def logit_bias_problems(sampling: request_pb2.SamplingParams, transport: BodyTransport) -> list[tuple[str, str]]:
    """OpenAI takes integer biases from -100 to 100 (https://platform.openai.com/docs/api-reference/chat/create)."""
    if not sampling.logit_bias:  # the usual case, without sorting an empty map
        return []
    return [
        (f"sampling.logit_bias[{token}]", f"{transport.name} takes an integer bias from -100 to 100, not {bias}.")
        for token, bias in sorted(sampling.logit_bias.items())
        if capabilities_pb2.CAPABILITY_LOGIT_BIAS in transport.capabilities
        and not (-100 <= bias <= 100 and bias == int(bias))  # NaN fails the range, so int() never sees it
    ]


def allowed_mode(allowed: request_pb2.AllowedTools) -> str:
    """The `mode` of an `allowed_tools` tool choice (auto unless required; validation refuses none)."""
    return "required" if allowed.mode == request_pb2.TOOL_CHOICE_MODE_REQUIRED else "auto"


def config(text: str) -> dict[str, Any]:
    """A provider tool's JSON configuration (validation checked that it is an object); empty when unset."""
    value: dict[str, Any] = orjson.loads(text) if text else {}
    return value


def function_tool(tool: request_pb2.Tool) -> dict[str, Any]:
    """A function tool's fields (chat nests them under `function`, Responses puts them beside `type`)."""
    function: dict[str, Any] = {
        "name": tool.function.name,
        "parameters": common.json_object(tool.function.parameters_json_schema),
    }
    if tool.function.description:
        function["description"] = tool.function.description
    if tool.function.strict:
        function["strict"] = True
    return function


def json_schema_format(schema: request_pb2.JsonSchema) -> dict[str, Any]:
    """The `json_schema` format's fields: name, schema and strictness."""
    spec: dict[str, Any] = {"name": schema.name or "output", "schema": orjson.loads(schema.schema_json)}
    if schema.strict:
        spec["strict"] = True
    return spec


def blob_url(blob: content_pb2.Blob) -> str:
    """The blob's URI, or the data as a `data:` URL."""
    if blob.WhichOneof("source") == "uri":
        return blob.uri
    return f"data:{blob.mime_type};base64,{base64.b64encode(blob.data).decode()}"


# Usage detail members -> `Usage.details` keys (documented in response.proto).
_INPUT_DETAILS = {"audio_tokens": "audio_input_token_count", "image_tokens": "image_input_token_count"}
_OUTPUT_DETAILS = {
    "audio_tokens": "audio_output_token_count",
    "accepted_prediction_tokens": "accepted_prediction_token_count",
    "rejected_prediction_tokens": "rejected_prediction_token_count",
}


def usage_from(raw: Mapping[str, Any] | None, usage: response_pb2.Usage, *, input_key: str, output_key: str) -> None:
    """OpenAI's counts already follow the IR's meaning: cached and reasoning tokens sit inside the totals.

    Some OpenAI-compatible providers (xAI) count reasoning outside the output (`total = prompt + completion +
    reasoning`); the totals say which convention a body follows, and the output is normalised to include it."""
    if not raw:
        return
    input_details = raw.get("prompt_tokens_details") or raw.get("input_tokens_details") or {}
    output_details = raw.get("completion_tokens_details") or raw.get("output_tokens_details") or {}
    prompt, output, total = raw.get(input_key), raw.get(output_key), raw.get("total_tokens")
    reasoning = output_details.get("reasoning_tokens")
    if (
        isinstance(prompt, int)
        and isinstance(output, int)
        and isinstance(reasoning, int)
        and reasoning > 0
        and total == prompt + output + reasoning
    ):
        output += reasoning  # reasoning was counted beside the output, not in it
    if prompt is not None:
        usage.input_token_count = prompt
    if output is not None:
        usage.output_token_count = output
    if (value := input_details.get("cached_tokens")) is not None:
        usage.cache_read_token_count = value
    if (value := input_details.get("cache_write_tokens")) is not None:
        usage.cache_write_token_count = value
    if reasoning is not None:
        usage.reasoning_token_count = reasoning
    for details, keys in ((input_details, _INPUT_DETAILS), (output_details, _OUTPUT_DETAILS)):
        for native, key in keys.items():
            if isinstance(value := details.get(native), int):
                usage.details[key] = value


def provider_timing(raw: Mapping[str, Any], timing: response_pb2.Timing) -> None:
    """Groq's usage says how long the model read the prompt and wrote the answer (`prompt_time`,
    `completion_time`, seconds): the provider's own durations."""
    for native, duration in (
        ("prompt_time", "provider_input_duration"),
        ("completion_time", "provider_output_duration"),
    ):
        if isinstance(seconds := raw.get(native), int | float) and not isinstance(seconds, bool) and seconds >= 0:
            getattr(timing, duration).FromNanoseconds(int(seconds * 1e9))  # looked up only when the usage has it


def malformed(transport: str, exc: msgspec.DecodeError) -> errors.MalformedResponseError:
    """The error table's error for a typed decoder's failure: a body of the wrong shape, or no JSON at all."""
    if isinstance(exc, msgspec.ValidationError):
        return errors.MalformedResponseError(
            f"{transport} could not lift the provider's answer, which does not have the documented shape: {exc}"
        )
    return errors.MalformedResponseError(f"the provider's response body is not valid JSON: {exc}")


def decode(decoder: msgspec.json.Decoder[Any], body: bytes, transport: str) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise malformed(transport, exc) from None


class BodyTransport(HttpTransport):
    """An OpenAI-wire transport whose native body is built as a dict (`body`, the hook dialects extend) and
    serialised once by `lower`."""

    path: str

    @abstractmethod
    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]: ...

    def body_surveyed(self, request: request_pb2.Request, seen: Survey, *, stream: bool) -> dict[str, Any]:
        """`body`, from the pipeline's `survey` of `request`: a wire whose body lowers a conversation overrides it.
        The default is `body` itself (so a dialect that extends only `body` is lowered through it)."""
        return self.body(request, stream=stream)

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        return json_request(self.path, self.body(request, stream=stream), stream=stream)

    def lower_surveyed(self, request: request_pb2.Request, seen: Survey, *, stream: bool) -> HttpRequest:
        return json_request(self.path, self.body_surveyed(request, seen, stream=stream), stream=stream)

    def finish(
        self, raw_reason: str | None, stop_reason: Any = None
    ) -> tuple[response_pb2.FinishReason.ValueType, str, stops.Stop]:
        """(normalised finish reason, raw finish reason, what stopped it) of a choice or final chunk."""
        return finish_reason(raw_reason), raw_reason or "", None


def finish_body(
    request: request_pb2.Request, body: dict[str, Any], *, stream: bool, transport: str, seen: Survey | None = None
) -> dict[str, Any]:
    """The fields every chat and completions body ends with: streaming with usage, then the provider options
    (`seen`: the request's survey, when the caller has it, says whether it sets any)."""
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if seen is None or "provider_options" in seen.present:
        body.update(common.provider_options(request, transport))
    return body


class ChunkStream(StreamLifter):
    """What the chat and completions stream lifts share: chunks until `data: [DONE]`, error chunks, the start
    event (from the first chunk with an id: Azure's first chunk has an empty one), usage, finishes and the end."""

    def __init__(self, transport: BodyTransport, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.done = False
        self.usage = response_pb2.Usage()
        self.finishes: dict[int, dict[str, Any]] = {}
        self.has_logprobs: set[int] = set()
        self.refused: set[int] = set()
        self.service_tier = ""
        self.parts = StreamParts()
        self.facts = soft_errors.Facts()
        self.timing = response_pb2.Timing()

    def chunk(self, event: RawEvent) -> tuple[list[tuple[int, dict[str, Any]]], list[stream_pb2.StreamEvent]]:
        """The (index, choice) pairs an event carries (none for `[DONE]` and error chunks), and the start event
        it may open. Each choice's finish is recorded here."""
        if event.data.strip() == b"[DONE]":
            self.done = True
            return [], []
        chunk = common.parse_json(event.data, "stream chunk")
        if isinstance(error := chunk.get("error"), dict):  # typed by its code; the chunk's usage and choices stay
            self.facts.provider_error = provider_errors.mid_stream(error)
        # Groq reports a stream's usage inside `x_groq` (https://console.groq.com/docs/api-reference).
        groq = chunk.get("x_groq")
        if usage := chunk.get("usage") or (groq.get("usage") if isinstance(groq, dict) else None):
            usage_from(usage, self.usage, input_key="prompt_tokens", output_key="completion_tokens")
            provider_timing(usage, self.timing)
        if isinstance(chunk.get("service_tier"), str):
            self.service_tier = chunk["service_tier"]
        choices = [(raw.get("index", 0), raw) for raw in common.array(chunk, "choices")]
        for index, raw in choices:
            if raw.get("finish_reason") is not None or index not in self.finishes:
                self.finishes[index] = raw if raw.get("finish_reason") is not None else {}
        if self.started or not chunk.get("id"):
            return choices, []
        self.started = True
        start = stream_pb2.StreamStart(id=chunk["id"], model=chunk.get("model") or "")
        return choices, [stream_pb2.StreamEvent(start=start)]

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        for index in sorted(self.finishes):
            raw = self.finishes[index]
            finish, raw_reason, stop = self.transport.finish(raw.get("finish_reason"), raw.get("stop_reason"))
            if index in self.refused:
                finish = response_pb2.FINISH_REASON_REFUSAL
            finished = end.finishes.add(choice_index=index, finish_reason=finish, raw_finish_reason=raw_reason)
            stops.set_stop(finished, stop)
        if self.usage.ListFields():
            end.usage.CopyFrom(self.usage)
        if self.timing.ListFields():
            end.timing.CopyFrom(self.timing)
        end.service_tier = self.service_tier
        if interrupted or not self.done:
            self.facts.cut_short = "the stream ended before [DONE]; the output is partial"
        self.facts.missing_logprobs = [i for i in self.finishes if i not in self.has_logprobs]
        soft_errors.settle_stream(self.request, end, self.facts, self.parts.texts())
        return [stream_pb2.StreamEvent(end=end)]
