"""The one policy for reasoning artifacts replayed to a transport or model that did not issue them.

Artifacts (signatures, redacted or encrypted reasoning, thought signatures) are only meaningful to their issuer.
Before a request is lowered, every artifact in its conversation is compared with the issuer the request is going
to. The request chooses what happens to foreign ones: rejected (the default) or dropped with a warning. Reasoning
whose every artifact was dropped is dropped too, since providers refuse reasoning without its signature.
"""

from __future__ import annotations

from modelir.errors import ForeignArtifactError
from modelir.v1 import content_pb2, errors_pb2, request_pb2


def _is_foreign(artifact: content_pb2.OpaqueArtifact, transport: str, model: str) -> bool:
    return artifact.issuer.transport != transport or artifact.issuer.model != model


def foreign_artifact_count(request: request_pb2.Request, *, transport: str, model: str) -> int:
    """How many artifacts in the request's conversation another issuer issued."""
    if request.WhichOneof("input") != "conversation":
        return 0
    return sum(
        _is_foreign(artifact, transport, model)
        for message in request.conversation.messages
        for part in message.parts
        for artifact in part.artifacts
    )


def apply_foreign_artifact_policy(
    request: request_pb2.Request, *, transport: str, model: str
) -> tuple[request_pb2.Request, list[errors_pb2.Warning]]:
    """Return the request to lower (possibly with foreign artifacts removed) and the warnings to report."""
    if request.WhichOneof("input") != "conversation":
        return request, []
    foreign = [
        (i, j, k, artifact)
        for i, message in enumerate(request.conversation.messages)
        for j, part in enumerate(message.parts)
        for k, artifact in enumerate(part.artifacts)
        if _is_foreign(artifact, transport, model)
    ]
    if not foreign:
        return request, []
    if request.foreign_artifact_policy != request_pb2.FOREIGN_ARTIFACT_POLICY_DROP:
        where = ", ".join(
            f"messages[{i}].parts[{j}].artifacts[{k}] (issued by {a.issuer.transport}/{a.issuer.model})"
            for i, j, k, a in foreign
        )
        raise ForeignArtifactError(
            f"reasoning artifacts from another issuer cannot be replayed to {transport}/{model}: {where}. "
            "Set foreign_artifact_policy to FOREIGN_ARTIFACT_POLICY_DROP to drop them instead."
        )
    cleaned = request_pb2.Request()
    cleaned.CopyFrom(request)
    warnings = []
    for message in cleaned.conversation.messages:
        kept_parts = []
        for part in message.parts:
            own = [a for a in part.artifacts if not _is_foreign(a, transport, model)]
            dropped = len(part.artifacts) - len(own)
            if dropped and part.WhichOneof("content") == "reasoning" and not own:
                warnings.append(
                    errors_pb2.Warning(
                        code="foreign_reasoning_dropped",
                        message="Dropped a reasoning part whose artifacts came from another issuer.",
                    )
                )
                continue
            if dropped:
                del part.artifacts[:]
                part.artifacts.extend(own)
                warnings.append(
                    errors_pb2.Warning(
                        code="foreign_artifact_dropped",
                        message=f"Dropped {dropped} reasoning artifact(s) from another issuer.",
                    )
                )
            kept_parts.append(part)
        del message.parts[:]
        message.parts.extend(kept_parts)
    return cleaned, warnings
