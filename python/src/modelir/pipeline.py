"""The request pipeline, written once: validate the fields, check the capabilities, apply the artifact policy, lower.

`Model.arun`, `Model.astream`, `Model.avalidate` and the conformance runner all go through these functions, so a
request is accepted or rejected the same way wherever it enters. Every step is pure and runs before any I/O: a
rejected request never reaches the limiter or the network.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelir import artifacts, capabilities, errors
from modelir.transports.base import HttpRequest, HttpTransport, Transport
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2, service_pb2
from modelir.validation import field_violations, validate_request


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request that passed every check, ready to run.

    `request` is what the transport runs and lifts against (foreign artifacts already handled by the policy);
    `warnings` are what the policy did, for the response; `native` is the lowered HTTP request (None for an
    in-process transport).
    """

    request: request_pb2.Request
    warnings: list[errors_pb2.Warning]
    native: HttpRequest | None


def unsupported(
    request: request_pb2.Request,
    transport: Transport,
    manifest: capabilities_pb2.CapabilityManifest,
    *,
    model: str = "",
    streaming: bool = False,
) -> errors_pb2.UnsupportedCapabilities | None:
    """What `manifest` (narrowed or not) and the transport's own limits lack for `request`; None when it can run.

    Assumes valid fields (run `validate_request` first).
    """
    return capabilities.unsupported(
        request,
        manifest,
        model=model,
        streaming=streaming,
        extra_reasons=transport.extra_unsupported(request, streaming=streaming),
    )


def check(
    request: request_pb2.Request,
    transport: Transport,
    manifest: capabilities_pb2.CapabilityManifest,
    *,
    model: str = "",
    streaming: bool = False,
) -> tuple[request_pb2.Request, list[errors_pb2.Warning]]:
    """Validate, check the capabilities and apply the foreign-artifact policy.

    Raises `InvalidRequestError` (naming every bad field) or `UnsupportedCapabilityError` (naming every gap).
    Returns the request the transport must run and the policy's warnings.
    """
    validate_request(request)
    gaps = unsupported(request, transport, manifest, model=model, streaming=streaming)
    if gaps is not None:
        raise errors.UnsupportedCapabilityError(gaps)
    return artifacts.apply_foreign_artifact_policy(
        request, transport=transport.name, model=transport.issuer_model(request)
    )


def prepare(
    request: request_pb2.Request,
    transport: Transport,
    manifest: capabilities_pb2.CapabilityManifest,
    *,
    model: str = "",
    streaming: bool = False,
) -> Prepared:
    """`check`, then lower for an HTTP transport: everything a request goes through before the limiter."""
    checked, warnings = check(request, transport, manifest, model=model, streaming=streaming)
    native = transport.lower(checked, stream=streaming) if isinstance(transport, HttpTransport) else None
    return Prepared(checked, warnings, native)


def report(
    request: request_pb2.Request,
    transport: Transport,
    manifest: capabilities_pb2.CapabilityManifest,
    *,
    model: str = "",
) -> service_pb2.ValidateResponse:
    """The verdict `Validate` returns: field violations, else the required capabilities and any gaps."""
    out = service_pb2.ValidateResponse()
    violations = field_violations(request)
    out.field_violations.extend(violations)
    if violations:
        return out
    out.required.extend(
        capabilities_pb2.Capability.ValueType(c) for c in capabilities.requirements(request).sorted_capabilities()
    )
    gaps = unsupported(request, transport, manifest, model=model)
    if gaps is not None:
        out.unsupported.CopyFrom(gaps)
    out.accepted = gaps is None
    return out
