"""Whether an Ollama model reads images, learned from `/api/show` before an image is sent to it.

Ollama accepts images for any model and ignores them without a word when the model has no vision (a 200, the
image unread). Its `/api/show` answers `capabilities`, a list such as `["completion", "vision", "tools",
"thinking", "embedding"]` (since Ollama 0.6.4; 0.17 also has `insert` and `image`). The transport asks it once per
model (`calls/engine_facts`, through the executor) when a request carries an image and its `vision` option is
unset, then refuses the image up front (UNSUPPORTED_CAPABILITY, IMAGE_INPUT, before the generation call) when
"vision" is not listed. When it cannot tell (an `/api/show` without `capabilities`, from an Ollama before 0.6.4, or
one that fails) the image is sent with an `image_input_unverified` warning that says why: never a silent send. The
`vision` option overrides what `/api/show` says: `true` sends images without asking, `false` refuses them. The same
answer narrows the manifest `ListModels` serves (`narrowed`: no IMAGE_INPUT for a model without vision).
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from modelir import errors
from modelir.transports import _common as common
from modelir.transports.base import HttpRequest, HttpResponse
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2

IMAGE_WARNING = "image_input_unverified"


@dataclass(frozen=True, slots=True)
class Shown:
    """What `/api/show` said: its `capabilities`, or None when the answer has none (an Ollama before 0.6.4)."""

    capabilities: frozenset[str] | None


def image_count(request: request_pb2.Request) -> int:
    """The images (blob parts) in the request's conversation."""
    return sum(p.WhichOneof("content") == "blob" for m in request.conversation.messages for p in m.parts)


def lower(model: str) -> HttpRequest:
    return HttpRequest("POST", "/api/show", orjson.dumps({"model": model}), (("content-type", "application/json"),))


def lift(response: HttpResponse) -> Shown:
    body = common.parse_json(response.body, "show body")
    if not isinstance(body, dict):
        raise errors.MalformedResponseError("ollama: the /api/show answer is not a JSON object")
    listed = body.get("capabilities")
    if listed is None:
        return Shown(None)
    if not isinstance(listed, list) or not all(isinstance(c, str) for c in listed):
        raise errors.MalformedResponseError(f"ollama: /api/show `capabilities` is not a list of names: {listed!r}")
    return Shown(frozenset(listed))


def narrowed(manifest: capabilities_pb2.CapabilityManifest, shown: Shown | None) -> capabilities_pb2.CapabilityManifest:
    """`manifest` without IMAGE_INPUT when `/api/show` lists the model's capabilities and "vision" is not among
    them; as it is when the model has vision or its capabilities are unknown (images are then sent, with a warning)."""
    if shown is None or shown.capabilities is None or "vision" in shown.capabilities:
        return manifest
    narrowed = capabilities_pb2.CapabilityManifest()
    narrowed.CopyFrom(manifest)
    kept = [c for c in manifest.capabilities if c != capabilities_pb2.CAPABILITY_IMAGE_INPUT]
    del narrowed.capabilities[:]
    narrowed.capabilities.extend(kept)
    return narrowed


def vision_warnings(
    request: request_pb2.Request, model: str, shown: Shown | None, unavailable: str
) -> list[errors_pb2.Warning]:
    """Refuse the request's images when `/api/show` says the model (`model`, Ollama's name for it) has no vision;
    the warning that says why it could not tell (`shown` None: the call failed, `unavailable` says how); nothing
    when the model has vision."""
    images = image_count(request)
    if shown is not None and shown.capabilities is not None:
        if "vision" in shown.capabilities:
            return []
        gaps = errors_pb2.UnsupportedCapabilities(
            model=request.model, missing=[capabilities_pb2.CAPABILITY_IMAGE_INPUT]
        )
        listed = ", ".join(sorted(shown.capabilities)) or "none"
        gaps.reasons.append(
            f"Ollama: model {model!r} has no vision (its /api/show capabilities are {listed}) and would ignore the "
            f"{images} image(s) without a word; the transport's `vision` option overrides this"
        )
        raise errors.UnsupportedCapabilityError(gaps)
    why = "its /api/show answer has no capabilities (Ollama before 0.6.4)" if shown is not None else unavailable
    return [
        errors_pb2.Warning(
            code=IMAGE_WARNING,
            message=f"{images} image(s) sent to Ollama model {model!r} whose vision could not be learned ({why}): "
            "Ollama ignores images without a word when the model has no vision; set the transport's `vision` "
            "option so that modelir refuses them or sends them knowingly",
        )
    ]
