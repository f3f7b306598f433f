"""What Ollama does without saying, said as warnings: a prompt it may have cut (`truncate: true`), images it may
have ignored (a model whose vision is not configured), its default repeat penalty on a greedy request."""

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


IMAGE_WARNING = "image_input_unverified"


def images(request: request_pb2.Request, vision: bool | None) -> list[errors_pb2.Warning]:
    """Images sent to a model whose vision is not configured: Ollama would have ignored them without a word if the
    model has none, so the caller is told to say (`vision`)."""
    if vision is not None:
        return []
    images = sum(p.WhichOneof("content") == "blob" for m in request.conversation.messages for p in m.parts)
    if not images:
        return []
    return [
        errors_pb2.Warning(
            code=IMAGE_WARNING,
            message=f"{images} image(s) sent to an Ollama model whose vision is not configured: Ollama ignores images "
            "without a word when the model has no vision (its /api/show capabilities say); set the transport's "
            "`vision` option so that modelir refuses them or sends them knowingly",
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
