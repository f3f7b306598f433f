"""Everything an `Embed` request passes before any I/O (IR 1.1): its fields, the model's capabilities, the wire's.

In order: the request's own field rules, whatever the model (`InvalidRequestError`, every bad field named); the
capability `EMBEDDINGS` and the provider option keys (`UnsupportedCapabilityError`); then the values the wire
cannot honour although the IR allows them (`InvalidRequestError` naming the field: truncation, normalisation,
dimensions, token inputs), as a seed outside a provider's range is for generation.
"""

from __future__ import annotations

import orjson

from modelir import errors
from modelir.pipeline.capabilities import embed_missing
from modelir.transports.base import Transport
from modelir.v1 import capabilities_pb2, embedding_pb2, errors_pb2


def field_problems(request: embedding_pb2.EmbedRequest, model: str = "") -> list[tuple[str, str]]:
    """The IR's own rules for an `EmbedRequest`, as (field, why) pairs; empty when it is well formed."""
    found = []
    if request.model and model and request.model != model:
        found.append(
            (
                "model",
                f"The request names the model {request.model!r}, but it was sent to the model {model!r}; leave "
                "`model` empty or send it to the model it names.",
            )
        )
    if not request.inputs:
        found.append(("inputs", "An embedding request needs at least one input."))
    for i, one in enumerate(request.inputs):
        kind = one.WhichOneof("content")
        if kind is None:
            found.append((f"inputs[{i}]", "An input needs text or token ids."))
        elif kind == "text" and not one.text:
            found.append((f"inputs[{i}].text", "An input's text must not be empty (no provider embeds nothing)."))
        elif kind == "token_ids" and not one.token_ids.ids:
            found.append((f"inputs[{i}].token_ids", "An input's token ids must not be empty."))
        elif kind == "token_ids" and any(t < 0 for t in one.token_ids.ids):
            found.append((f"inputs[{i}].token_ids", "Token ids are never negative."))
    if request.HasField("dimension_count") and request.dimension_count <= 0:
        found.append(("dimension_count", f"A vector needs at least one dimension, not {request.dimension_count}."))
    # Closed enums (embedding.proto): a value this release does not know could embed other text than asked for.
    if request.truncation not in embedding_pb2.EmbedTruncation.values():
        found.append(("truncation", f"{request.truncation} is no EmbedTruncation this release knows."))
    if request.normalization not in embedding_pb2.EmbedNormalization.values():
        found.append(("normalization", f"{request.normalization} is no EmbedNormalization this release knows."))
    for j, entry in enumerate(request.provider_options):
        try:
            options = orjson.loads(entry.options_json or b"{}")
        except orjson.JSONDecodeError:
            options = None
        if not isinstance(options, dict):
            found.append((f"provider_options[{j}].options_json", "Provider options must be a JSON object."))
    return found


def check(
    request: embedding_pb2.EmbedRequest,
    transport: Transport,
    manifest: capabilities_pb2.CapabilityManifest,
    model: str = "",
) -> embedding_pb2.EmbedRequest:
    """Raise the typed error for the first kind of problem `request` has on `transport` (see the module); return
    the request addressed to `model` (its `model` filled when empty)."""
    if problems := field_problems(request, model):
        raise _invalid(problems)
    missing = embed_missing(manifest)
    reasons = []
    keys = transport.embed_option_keys
    for entry in request.provider_options:
        if entry.transport != transport.name:
            continue  # entries for other transports are for fallbacks, as in `Request.provider_options`
        if capabilities_pb2.CAPABILITY_PROVIDER_OPTIONS not in manifest.capabilities:
            missing = sorted({*missing, capabilities_pb2.CAPABILITY_PROVIDER_OPTIONS})
        elif unknown := [k for k in sorted(orjson.loads(entry.options_json or b"{}")) if k not in keys]:
            reasons.append(
                f"Unknown embedding option keys for {transport.name}: {', '.join(unknown)} "
                f"(known: {', '.join(keys) or 'none'})."
            )
    if missing or reasons:
        gaps = errors_pb2.UnsupportedCapabilities(model=model or request.model, missing=missing, reasons=reasons)
        raise errors.UnsupportedCapabilityError(gaps)
    if problems := transport.embed_problems(request):
        raise _invalid(problems)
    if request.model or not model:
        return request
    named = embedding_pb2.EmbedRequest()
    named.CopyFrom(request)
    named.model = model
    return named


def _invalid(problems: list[tuple[str, str]]) -> errors.InvalidRequestError:
    return errors.InvalidRequestError(errors_pb2.FieldViolation(field=f, description=d) for f, d in problems)
