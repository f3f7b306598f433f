"""What Ollama does without saying, said as warnings: a prompt it may have cut (`truncate: true`), its default repeat
penalty on a greedy request. (Images it may ignore are checked before the call: `ollama_show`.)"""

from __future__ import annotations

from modelir.transports import _common as common
from modelir.v1 import errors_pb2, request_pb2, response_pb2

TRUNCATION_WARNING = "input_truncation_allowed"


def truncation(request: request_pb2.Request, usage: response_pb2.Usage) -> list[errors_pb2.Warning]:
    """A caller who allows Ollama's truncation (`truncate: true`) is told that the prompt may have been cut: Ollama's
    answer does not say whether it was (only its log does)."""
    if common.provider_options(request, "ollama").get("truncate") is not True:
        return []
    return [
        errors_pb2.Warning(
            code=TRUNCATION_WARNING,
            message=f"Ollama may have cut the prompt to its context (num_ctx) without saying so; it read "
            f"{usage.input_token_count} prompt tokens",
        )
    ]


PENALTY_WARNING = "default_repeat_penalty"


def default_penalty(request: request_pb2.Request) -> list[errors_pb2.Warning]:
    """Greedy decoding asked for (temperature 0) without a repetition penalty: Ollama applies its default
    `repeat_penalty` of 1.1 anyway, so the tokens are not the model's most likely ones; the caller is told (and
    `sampling.repetition_penalty = 1` turns it off)."""
    sampling = request.sampling
    greedy = sampling.HasField("temperature") and sampling.temperature == 0
    if not greedy or sampling.HasField("repetition_penalty"):
        return []
    return [
        errors_pb2.Warning(
            code=PENALTY_WARNING,
            message="Ollama applied its default repeat_penalty (1.1) to this greedy request: the output need not be "
            "the model's most likely tokens; set sampling.repetition_penalty to 1 for plain greedy decoding",
        )
    ]
