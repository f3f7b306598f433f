"""The one policy for opaque artifacts and provider-issued parts replayed to a transport or model that did not issue
them.

Artifacts (signatures, redacted or encrypted reasoning, thought signatures, encrypted search results and citation
indexes) are only meaningful to their issuer, and so are the parts a provider produced itself (provider-run tool
calls and results, provider parts). Before a request is lowered, every artifact in its conversation (on parts and
on their citations) is compared with the issuer the request is going to (transport and model), and every
provider-issued part with its transport. The request chooses what happens to foreign ones: rejected (the default)
or dropped with a warning. Reasoning whose every artifact was dropped is dropped too, since providers refuse
reasoning without its signature; a provider-run tool call or result that is foreign or lost an artifact is
dropped whole, with the other half of its pair.
"""

from __future__ import annotations

from collections.abc import Iterator

from modelir.errors import ForeignArtifactError
from modelir.pipeline.survey import PROVIDER_ISSUED as _PROVIDER_ISSUED
from modelir.pipeline.survey import Survey, survey
from modelir.v1 import content_pb2, errors_pb2, request_pb2


def _is_foreign(artifact: content_pb2.OpaqueArtifact, transport: str, model: str) -> bool:
    return artifact.issuer.transport != transport or artifact.issuer.model != model


def _part_issuer(part: content_pb2.Part) -> content_pb2.Issuer | None:
    kind = part.WhichOneof("content")
    if kind not in _PROVIDER_ISSUED:
        return None
    issuer: content_pb2.Issuer = getattr(part, kind).issuer
    return issuer if issuer.transport else None


def _foreign_part(part: content_pb2.Part, transport: str) -> bool:
    issuer = _part_issuer(part)
    return issuer is not None and issuer.transport != transport


def _artifacts(part: content_pb2.Part) -> Iterator[tuple[str, content_pb2.OpaqueArtifact]]:
    for k, artifact in enumerate(part.artifacts):
        yield f"artifacts[{k}]", artifact
    for c, citation in enumerate(part.citations):
        for k, artifact in enumerate(citation.artifacts):
            yield f"citations[{c}].artifacts[{k}]", artifact


def _foreign(seen: Survey, transport: str, model: str) -> list[str]:
    """The places of the foreign artifacts and parts, read from the parts the survey noted as issued (those with
    artifacts or citations, and provider-issued kinds): a conversation without any is not walked again."""
    found = []
    for i, j, part, kind in seen.issued:
        if _foreign_part(part, transport):
            issuer = _part_issuer(part)
            assert issuer is not None
            found.append(f"messages[{i}].parts[{j}] (a {kind} of {issuer.transport})")
        for where, artifact in _artifacts(part):
            if _is_foreign(artifact, transport, model):
                issued = f"{artifact.issuer.transport}/{artifact.issuer.model}"
                found.append(f"messages[{i}].parts[{j}].{where} (issued by {issued})")
    return found


def foreign_artifact_count(
    request: request_pb2.Request, *, transport: str, model: str, seen: Survey | None = None
) -> int:
    """How many artifacts and provider-issued parts in the request's conversation another issuer issued (`seen`:
    the request's `survey`, when the caller has made it already)."""
    if request.WhichOneof("input") != "conversation":
        return 0
    return len(_foreign(survey(request) if seen is None else seen, transport, model))


def _call_id(part: content_pb2.Part) -> str:
    kind = part.WhichOneof("content")
    if kind == "server_tool_call":
        return part.server_tool_call.id
    if kind == "server_tool_result":
        return part.server_tool_result.tool_call_id
    return ""


def apply_foreign_artifact_policy(
    request: request_pb2.Request, *, transport: str, model: str, seen: Survey | None = None
) -> tuple[request_pb2.Request, list[errors_pb2.Warning]]:
    """Return the request to lower (possibly with foreign artifacts and parts removed: a new request) and the
    warnings to report (`seen`: the request's `survey`, when the caller has made it already)."""
    if request.WhichOneof("input") != "conversation":
        return request, []
    foreign = _foreign(survey(request) if seen is None else seen, transport, model)
    if not foreign:
        return request, []
    if request.foreign_artifact_policy != request_pb2.FOREIGN_ARTIFACT_POLICY_DROP:
        raise ForeignArtifactError(
            f"artifacts or provider parts from another issuer cannot be replayed to {transport}/{model}: "
            f"{', '.join(foreign)}. Set foreign_artifact_policy to FOREIGN_ARTIFACT_POLICY_DROP to drop them instead."
        )
    cleaned = request_pb2.Request()
    cleaned.CopyFrom(request)
    warnings = []
    for message in cleaned.conversation.messages:
        kept_parts = []
        dropped_calls: set[str] = set()
        for part in message.parts:
            kind = part.WhichOneof("content")
            own = [a for a in part.artifacts if not _is_foreign(a, transport, model)]
            dropped = len(part.artifacts) - len(own)
            if _foreign_part(part, transport) or (kind in _PROVIDER_ISSUED and dropped):
                dropped_calls.add(_call_id(part))
                warnings.append(
                    errors_pb2.Warning(
                        code="foreign_provider_part_dropped",
                        message=f"Dropped a {kind} part that only its issuer can take back.",
                    )
                )
                continue
            if dropped and kind == "reasoning" and not own:
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
                        message=f"Dropped {dropped} artifact(s) from another issuer.",
                    )
                )
            kept_citations = [
                c for c in part.citations if not any(_is_foreign(a, transport, model) for a in c.artifacts)
            ]
            if len(kept_citations) != len(part.citations):
                warnings.append(
                    errors_pb2.Warning(
                        code="foreign_citation_dropped",
                        message=f"Dropped {len(part.citations) - len(kept_citations)} citation(s) from another issuer.",
                    )
                )
                del part.citations[:]
                part.citations.extend(kept_citations)
            kept_parts.append(part)
        dropped_calls.discard("")
        # The other half of a dropped call/result pair cannot travel alone.
        kept_parts = [p for p in kept_parts if _call_id(p) not in dropped_calls]
        del message.parts[:]
        message.parts.extend(kept_parts)
    return cleaned, warnings
