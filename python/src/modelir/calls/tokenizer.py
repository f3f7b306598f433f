"""The tokenizer calls of a `Model`: tokenize, detokenize, the tokenizer's facts and the chat template's render.

Each is the model's transport, executor and limiter put to one tokenizer request: refused up front when the
manifest lacks the capability, lowered by the transport, sent under the model's deadline, lifted back. `Model`'s
methods of the same names delegate here, so that `model.py` keeps the generation path alone.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelir import errors
from modelir.pipeline import capabilities
from modelir.transports.base import SHAPE_ERRORS, HttpRequest, HttpResponse, HttpTransport, LocalTransport, shape_error
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2, service_pb2

if TYPE_CHECKING:
    from modelir.model import Model

log = logging.getLogger("modelir.model")
_UNCHECKED: weakref.WeakSet[Model] = weakref.WeakSet()  # models already logged as detokenizing unchecked ids


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
                answers = [await _answer(model, native, deadline) for native in natives]
                info = transport.lift_tokenizer_info(answers)
            except errors.ModelError as exc:
                log.warning("%s: the engine's tokenizer facts are unavailable: %s", model.name, exc)
                return None
    return info


async def _answer(model: Model, native: HttpRequest, deadline: float) -> HttpResponse:
    """The engine's answer to one tokenizer-facts request: a success, or, for a transport that reads its facts from
    a refusal (`HttpTransport.tokenizer_info_from_refusal`: vLLM names its vocabulary size only in a 400), the
    refusal itself (a 4xx; a 5xx or a connection failure is still the error it is)."""
    transport = model.transport
    assert isinstance(transport, HttpTransport) and model.executor is not None
    refused: list[HttpResponse] = []

    def keeping(answer: HttpResponse) -> errors.ModelError:
        refused.append(answer)
        return model._error_mapping(answer)

    try:
        sent = await model.executor.send(native, error_from=keeping, deadline=deadline, observe=model.limiter.observe)
    except errors.ModelError:
        if transport.tokenizer_info_from_refusal and refused and 400 <= refused[-1].status < 500:
            return refused[-1]
        raise
    return sent.response


def out_of_vocabulary(
    token_ids: Sequence[int], info: capabilities_pb2.TokenizerInfo | None
) -> errors.InvalidRequestError | None:
    """The request error for ids no tokenizer has (negative) or outside the model's vocabulary (when its size is
    known), naming each as `token_ids[i]`; None when every id may be detokenized. Engines answer such ids
    differently (llama-server a 500, llama-cpp-python's server crashes, vLLM an empty text), so modelir refuses
    them before any call."""
    size = info.vocabulary_size if info is not None else 0
    violations = []
    for i, token in enumerate(token_ids):
        if token < 0:
            violations.append(
                errors_pb2.FieldViolation(field=f"token_ids[{i}]", description="A token id is never negative.")
            )
        elif size and token >= size:
            violations.append(
                errors_pb2.FieldViolation(
                    field=f"token_ids[{i}]",
                    description=f"Token id {token} is outside the model's vocabulary of {size} tokens "
                    f"(ids 0 to {size - 1}).",
                )
            )
    return errors.InvalidRequestError(violations) if violations else None


async def detokenize(model: Model, token_ids: list[int]) -> str:
    """Token ids back to text, with the model's own tokenizer; ids outside its vocabulary are refused first
    (`out_of_vocabulary`), against the vocabulary size learned once per model (`Model.atokenizer_info`)."""
    require_tokenize(model)
    info = await model.atokenizer_info()
    if (refusal := out_of_vocabulary(token_ids, info)) is not None:
        raise refusal
    if not (info is not None and info.vocabulary_size) and model not in _UNCHECKED:
        # The IR's DetokenizeResponse has no warnings to carry this: the operator's log says it, once per model.
        _UNCHECKED.add(model)
        log.warning(
            "%s: the model's vocabulary size is unknown, so token ids outside it cannot be refused: the engine may "
            "answer them with an empty text",
            model.name,
        )
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
