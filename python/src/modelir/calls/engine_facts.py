"""Facts about the served model that a transport learns from its engine before it can check a request (Ollama:
whether the model reads images, from `/api/show`), asked once per model through the model's executor and kept.

A transport takes part by having the three methods of `LearnsModelFacts`; the others are never asked. A call that
fails is not kept (the next request asks again) and its failure goes to the transport, which says in a warning
what it could not check; a request the learned facts rule out is refused with the transport's typed error before
the generation call.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from modelir import errors
from modelir.pipeline.prepare import Prepared
from modelir.transports.base import SHAPE_ERRORS, HttpRequest, HttpResponse, HttpTransport, shape_error
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2, service_pb2

if TYPE_CHECKING:
    from modelir.model import Model


@runtime_checkable
class LearnsModelFacts(Protocol):
    def lower_model_facts(self, request: request_pb2.Request) -> HttpRequest | None:
        """The native request for what must be known of the model to check `request`; None when nothing is."""

    def lift_model_facts(self, response: HttpResponse) -> object: ...

    def model_fact_warnings(
        self, request: request_pb2.Request, facts: object | None, unavailable: str
    ) -> list[errors_pb2.Warning]:
        """Raise the typed error for what the facts rule out, else the warnings for the response (`facts` None:
        they could not be learned, `unavailable` says why)."""


class NarrowsManifest(Protocol):
    """A `LearnsModelFacts` transport whose facts also narrow what it claims (optional; read by `manifest`)."""

    def lower_manifest_facts(self, model: str) -> HttpRequest | None:
        """The native request whose facts narrow the manifest of served model `model`; None when nothing is open
        (an option already says)."""

    def manifest_with_facts(
        self, manifest: capabilities_pb2.CapabilityManifest, facts: object
    ) -> capabilities_pb2.CapabilityManifest:
        """`manifest` (not changed) as `facts` narrow it."""


@functools.cache
def learns_model_facts(transport_class: type) -> bool:
    """Whether a transport of this class takes part (has the methods of `LearnsModelFacts`). Decided once per
    class: an `isinstance` against a runtime-checkable protocol looks up each of its members, on every call; the
    methods are the class's, so every instance of it answers the same."""
    return all(callable(getattr(transport_class, name, None)) for name in _MEMBERS)


_MEMBERS = ("lower_model_facts", "lift_model_facts", "model_fact_warnings")


async def check(model: Model, prepared: Prepared, deadline: float | None) -> None:
    """Learn what the transport needs to check `prepared.request` (once per model), then check it: the warnings
    join the prepared ones; a refusal raises before the generation call."""
    transport = model.transport
    if not learns_model_facts(type(transport)) or model.executor is None:
        return
    learner = cast(LearnsModelFacts, transport)
    native = learner.lower_model_facts(prepared.request)
    if native is None:
        return
    facts, unavailable = await _learned(model, learner, native, deadline)
    prepared.warnings.extend(learner.model_fact_warnings(prepared.request, facts, unavailable))


async def _learned(
    model: Model, learner: LearnsModelFacts, native: HttpRequest, deadline: float | None
) -> tuple[object | None, str]:
    """The facts `native` asks for (kept per model, keyed by the request, so every caller shares one answer), or
    None with why they could not be learned."""
    key = (native.method, native.path, native.body)
    facts = model._model_facts.get(key)
    if facts is not None:
        return facts, ""
    transport = model.transport
    assert isinstance(transport, HttpTransport) and model.executor is not None
    try:
        sent = await model.executor.send(
            native, error_from=model._error_mapping, deadline=deadline, observe=model.limiter.observe
        )
        try:
            facts = model._model_facts[key] = learner.lift_model_facts(sent.response)
        except SHAPE_ERRORS as exc:
            raise model._redacted(shape_error(transport, exc)) from exc
    except errors.ModelError as exc:
        return None, f"{native.method} {native.path} failed: {model._redacted(exc).message}"
    return facts, ""


async def manifest(model: Model) -> capabilities_pb2.CapabilityManifest:
    """The model's manifest as the engine's facts narrow it (`ListModels`: an Ollama model without vision does not
    claim IMAGE_INPUT), asking what a call would ask, once per model and shared with the calls. A fact that cannot be
    learned leaves the manifest as configured, as the call then runs (with a warning)."""
    transport = model.transport
    if not learns_model_facts(type(transport)) or model.executor is None:
        return model.capabilities
    narrows = getattr(transport, "lower_manifest_facts", None)
    native = narrows(model.name) if narrows is not None else None
    if native is None:
        return model.capabilities
    facts, _ = await _learned(model, cast(LearnsModelFacts, transport), native, None)
    if facts is None:
        return model.capabilities
    return cast(NarrowsManifest, transport).manifest_with_facts(model.capabilities, facts)


async def validate(model: Model, request: request_pb2.Request, verdict: service_pb2.ValidateResponse) -> None:
    """`Validate` answers what a call would: a request the pipeline accepts but the learned facts rule out (an
    image to an Ollama model without vision) is not accepted, with the transport's reasons in `unsupported`. A fact
    that cannot be learned leaves the verdict as it is, since the call would then run (with a warning)."""
    if not verdict.accepted:
        return
    try:
        await check(model, Prepared(request, [], None), model._deadline(request, None))
    except errors.UnsupportedCapabilityError as refused:
        verdict.accepted = False
        verdict.unsupported.CopyFrom(refused.unsupported)
