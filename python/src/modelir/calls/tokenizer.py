"""The tokenizer calls of a `Model`: tokenize, detokenize, the tokenizer's facts and the chat template's render.

Each is the model's transport, executor and limiter put to one tokenizer request: refused up front when the
manifest lacks the capability, lowered by the transport, sent under the model's deadline, lifted back. `Model`'s
methods of the same names delegate here, so that `model.py` keeps the generation path alone.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from modelir import errors
from modelir.pipeline import capabilities
from modelir.transports.base import SHAPE_ERRORS, HttpTransport, LocalTransport, shape_error
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2, service_pb2

if TYPE_CHECKING:
    from modelir.model import Model

log = logging.getLogger("modelir.model")


def require_tokenize(model: Model, request: service_pb2.TokenizeRequest | None = None) -> None:
    """Refuse before any call when the model's manifest lacks what the tokenizer request needs."""
    if missing := capabilities.tokenize_missing(request, model.capabilities):
        gaps = errors_pb2.UnsupportedCapabilities(model=model.name, missing=missing)
        raise errors.UnsupportedCapabilityError(gaps)


async def tokenizer_info(model: Model) -> capabilities_pb2.TokenizerInfo | None:
    """What the transport knows of the tokenizer, or what the engine reports; None when neither says. An engine
    that cannot answer is logged, not raised: `ListModels` must not fail because one model's engine is down."""
    transport = model.transport
    info = transport.tokenizer_info()
    if info is None and isinstance(transport, HttpTransport) and model.executor is not None:
        natives = transport.lower_tokenizer_info(transport.provider_model or model.name)
        if natives:
            try:
                deadline = time.monotonic() + 10.0
                sent = [
                    await model.executor.send(
                        native, error_from=model._error_mapping, deadline=deadline, observe=model.limiter.observe
                    )
                    for native in natives
                ]
                info = transport.lift_tokenizer_info([s.response for s in sent])
            except errors.ModelError as exc:
                log.warning("%s: the engine's tokenizer facts are unavailable: %s", model.name, exc)
                return None
    return info


async def detokenize(model: Model, token_ids: list[int]) -> str:
    """Token ids back to text, with the model's own tokenizer."""
    require_tokenize(model)
    transport = model.transport
    if isinstance(transport, LocalTransport):
        return await transport.detokenize(token_ids)
    assert isinstance(transport, HttpTransport) and model.executor is not None
    async with model.limiter.acquire():
        sent = await model.executor.send(
            transport.lower_detokenize(token_ids),
            error_from=model._error_mapping,
            deadline=model._deadline(None, None),
            observe=model.limiter.observe,
        )
    try:
        return transport.lift_detokenize(sent.response)
    except SHAPE_ERRORS as exc:
        raise model._redacted(shape_error(transport, exc)) from exc


async def tokenize(model: Model, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse:
    """A `TokenizeRequest` through the model's tokenizer (one engine call per text, or one in-process)."""
    require_tokenize(model, request)
    transport = model.transport
    if isinstance(transport, LocalTransport):
        return await transport.tokenize(request)
    assert isinstance(transport, HttpTransport) and model.executor is not None
    deadline = model._deadline(None, None)
    async with model.limiter.acquire():
        sent = [
            await model.executor.send(
                native, error_from=model._error_mapping, deadline=deadline, observe=model.limiter.observe
            )
            for native in transport.lower_tokenize(request)
        ]
    try:
        return transport.lift_tokenize(request, [s.response for s in sent])
    except SHAPE_ERRORS as exc:
        raise model._redacted(shape_error(transport, exc)) from exc


async def render_prompt(model: Model, request: request_pb2.Request) -> str | None:
    """The conversation through the model's chat template, when its transport can render it; None when not."""
    transport = model.transport
    lower = getattr(transport, "lower_render_prompt", None)
    if lower is None or model.executor is None or not isinstance(transport, HttpTransport):
        return None
    async with model.limiter.acquire():
        sent = await model.executor.send(lower(request), error_from=transport.error, observe=model.limiter.observe)
    prompt: str = transport.lift_render_prompt(sent.response)  # type: ignore[attr-defined]
    return prompt
