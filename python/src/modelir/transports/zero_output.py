"""One meaning of `max_output_tokens = 0` ("generate nothing", as the spec says) on engines that read it otherwise.

Engines disagree: Ollama reads `num_predict: 0` as "no limit", llama-cpp-python's server reads `max_tokens: 0` as
"fill the context", vLLM's chat route refuses it, and OpenAI's chat API takes at least one output token. The rule,
for every transport whose engine cannot generate zero tokens: ask the engine for one token and drop what it
generated from the Response (text, reasoning, tool calls, sampled logprobs, the chosen label), keeping `usage` as
what the engine really did, with a `zero_output_emulated` warning that names the engine. A transport that cannot
drop the output (it cannot tell generated text from the rest) rejects 0 up front instead (`wire_unsupported`), as
llama-server's transport does.
"""

from __future__ import annotations

from modelir.v1 import errors_pb2, request_pb2, response_pb2, stream_pb2

WARNING_CODE = "zero_output_emulated"


def asks_for_nothing(request: request_pb2.Request) -> bool:
    return request.sampling.HasField("max_output_tokens") and request.sampling.max_output_tokens == 0


def engine_limit(request: request_pb2.Request) -> int | None:
    """The output limit to send the engine: the request's, with 0 raised to 1; None when the request sets none."""
    if not request.sampling.HasField("max_output_tokens"):
        return None
    return max(request.sampling.max_output_tokens, 1)


def warning(engine: str) -> errors_pb2.Warning:
    return errors_pb2.Warning(
        code=WARNING_CODE,
        message=f"{engine} cannot generate zero tokens: it was asked for one, and what it generated was dropped "
        "(usage still counts it)",
    )


def drop_output(response: response_pb2.Response, engine: str) -> None:
    """Empty every choice of a unary answer to `max_output_tokens = 0`: one empty text part, no logprobs, no label,
    finish reason LENGTH (the limit ended it)."""
    for choice in response.choices:
        del choice.message.parts[:]
        choice.message.parts.add(text="")
        choice.ClearField("logprobs")
        choice.constrained_label = ""
        choice.finish_reason = response_pb2.FINISH_REASON_LENGTH
    response.warnings.append(warning(engine))


def end_of_nothing(end: stream_pb2.StreamEnd, engine: str) -> None:
    """The stream form of `drop_output` for the end event (the lifter withholds the deltas themselves)."""
    for finish in end.finishes:
        finish.finish_reason = response_pb2.FINISH_REASON_LENGTH
        finish.constrained_label = ""
    end.warnings.append(warning(engine))
