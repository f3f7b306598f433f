"""The embedding call of a `Model` (IR 1.1): the request checked (`pipeline.embedding`), one call to the transport's
embedding endpoint under one deadline, the answer lifted and accounted. `Model.aembed` delegates here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelir import errors
from modelir.http.retry import timeout_for
from modelir.pipeline import embedding
from modelir.records import raw_exchange
from modelir.transports.base import SHAPE_ERRORS, HttpTransport, LocalTransport, shape_error, utf8_repaired
from modelir.v1 import embedding_pb2

if TYPE_CHECKING:
    from modelir.model import Model


async def embed(
    model: Model, request: embedding_pb2.EmbedRequest, deadline: float | None
) -> embedding_pb2.EmbedResponse:
    """One `EmbedRequest` through `model`: refused before any call when the model cannot honour it."""
    request = embedding.check(request, model.transport, model.capabilities, model.name)
    transport = model.transport
    deadline = model._deadline(None, deadline)
    try:
        async with timeout_for(deadline):
            if isinstance(transport, LocalTransport):
                try:
                    return await transport.embed(request)
                except NotImplementedError:  # a manifest that claims more than its transport does
                    raise errors.InternalError(f"{transport.name} claims embeddings but cannot embed") from None
            assert isinstance(transport, HttpTransport) and model.executor is not None
            native = transport.lower_embed(request)
            async with model.limiter.acquire(deadline=deadline):
                sent = await model.executor.send(
                    native,
                    error_from=model._error_mapping,
                    deadline=deadline,
                    observe=model.limiter.observe,
                    deadline_enforced=True,
                )
    except TimeoutError:
        raise errors.DeadlineExceededError("the request's deadline expired") from None
    answer = sent.response
    if damage := utf8_repaired(answer.body)[1]:  # a vector cannot be partly right: refused, not lifted around
        malformed = errors.MalformedResponseError(f"{transport.name}: {damage}", http_status=answer.status)
        raise model._redacted(malformed)
    try:  # (no `check_answer_shape`: its keys are the generation answer's; the lift counts the vectors)
        response = transport.lift_embed_accounted(request, answer)
    except errors.MalformedResponseError as exc:
        raise model._redacted(exc) from None
    except SHAPE_ERRORS as exc:
        raise model._redacted(shape_error(transport, exc)) from exc
    if request.include_raw:
        response.raw.CopyFrom(
            raw_exchange.exchange(
                request,
                native,
                secrets=model.executor.secrets,
                transport=transport.name,
                status=answer.status,
                answer_headers=answer.headers,
                body=answer.body,
            )
        )
    return response
