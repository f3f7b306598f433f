"""The request pipeline, written once: validate the fields, check the capabilities, apply the artifact policy, lower.

`Model.arun`, `Model.astream`, `Model.avalidate` and the conformance runner all go through a `Pipeline`, so a
request is accepted or rejected the same way wherever it enters. Every step is pure and runs before any I/O: a
rejected request never reaches the limiter or the network.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelir import artifacts, capabilities, errors
from modelir.transports.base import HttpRequest, HttpTransport, Transport
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2, service_pb2
from modelir.validation import field_violations, model_mismatch


@dataclass(slots=True)  # not frozen: on the hot path, a frozen dataclass takes about twice as long to build
class Prepared:
    """A request that passed every check, ready to run.

    `request` is what the transport runs and lifts against (foreign artifacts already handled by the policy);
    `warnings` are what the policy did, for the response; `native` is the lowered HTTP request (None for an
    in-process transport).
    """

    request: request_pb2.Request
    warnings: list[errors_pb2.Warning]
    native: HttpRequest | None


class Pipeline:
    """The checks and the lowering for one transport, under a manifest (the transport's own unless narrowed) and
    the model name that rejections carry."""

    __slots__ = ("_lower", "manifest", "model", "transport")

    def __init__(
        self,
        transport: Transport,
        manifest: capabilities_pb2.CapabilityManifest | None = None,
        *,
        model: str = "",
    ) -> None:
        self.transport = transport
        # Decided once, not per request: an isinstance check against an ABC costs about 0.2 us.
        self._lower = transport.lower if isinstance(transport, HttpTransport) else None
        self.manifest = manifest if manifest is not None else transport.manifest()
        self.model = model

    def unsupported(
        self, request: request_pb2.Request, *, streaming: bool = False
    ) -> errors_pb2.UnsupportedCapabilities | None:
        """What the manifest and the transport's own limits lack for `request`; None when it can run.

        Assumes valid fields (run `validate_request` first).
        """
        return capabilities.unsupported(
            request,
            self.manifest,
            model=self.model,
            streaming=streaming,
            extra_reasons=self.transport.extra_unsupported(request, streaming=streaming),
        )

    def check(
        self, request: request_pb2.Request, *, streaming: bool = False
    ) -> tuple[request_pb2.Request, list[errors_pb2.Warning]]:
        """Validate, check the capabilities and apply the foreign-artifact policy.

        Raises `InvalidRequestError` (naming every bad field, and `model` when the request names another model
        than this pipeline's) or `UnsupportedCapabilityError` (naming every gap). Returns the request the transport
        must run and the policy's warnings.
        """
        violations = self._violations(request)
        if violations:
            raise errors.InvalidRequestError(violations)
        # DROP is applied before the capability check, so what it removes cannot make the request unsupported;
        # under REJECT the check comes first and, where foreign artifacts are in the way, says DROP would help.
        dropping = request.foreign_artifact_policy == request_pb2.FOREIGN_ARTIFACT_POLICY_DROP
        warnings: list[errors_pb2.Warning] = []
        if dropping:
            request, warnings = self._apply_artifact_policy(request)
        gaps = self.unsupported(request, streaming=streaming)
        if gaps is not None:
            raise errors.UnsupportedCapabilityError(self._with_policy_hint(request, gaps, dropped=bool(warnings)))
        if dropping:
            return request, warnings
        return self._apply_artifact_policy(request)

    def _violations(self, request: request_pb2.Request) -> list[errors_pb2.FieldViolation]:
        """The model-name mismatch, the IR's own field rules, then the provider's (a seed out of its range, ...)."""
        mismatch = model_mismatch(request, self.model)
        violations = ([mismatch] if mismatch is not None else []) + field_violations(request)
        if not violations:
            violations = [
                errors_pb2.FieldViolation(field=f, description=d) for f, d in self.transport.field_problems(request)
            ]
        return violations

    def _apply_artifact_policy(
        self, request: request_pb2.Request
    ) -> tuple[request_pb2.Request, list[errors_pb2.Warning]]:
        transport = self.transport
        return artifacts.apply_foreign_artifact_policy(
            request, transport=transport.name, model=transport.issuer_model(request)
        )

    def _with_policy_hint(
        self, request: request_pb2.Request, gaps: errors_pb2.UnsupportedCapabilities, *, dropped: bool
    ) -> errors_pb2.UnsupportedCapabilities:
        """`gaps`, with a reason saying what the foreign-artifact policy did or could do, when it matters."""
        if dropped:
            gaps.reasons.append(
                "FOREIGN_ARTIFACT_POLICY_DROP already removed the foreign reasoning artifacts (and reasoning that "
                "cannot travel without them); what is named here is still in the way."
            )
        elif artifacts.foreign_artifact_count(
            request, transport=self.transport.name, model=self.transport.issuer_model(request)
        ):
            gaps.reasons.append(
                "The conversation carries reasoning artifacts from another issuer: set foreign_artifact_policy to "
                "FOREIGN_ARTIFACT_POLICY_DROP to drop them (and reasoning that cannot travel without them) first."
            )
        return gaps

    def prepare(self, request: request_pb2.Request, *, streaming: bool = False) -> Prepared:
        """`check`, then lower for an HTTP transport: everything a request goes through before the limiter."""
        checked, warnings = self.check(request, streaming=streaming)
        native = self._lower(checked, stream=streaming) if self._lower is not None else None
        return Prepared(checked, warnings, native)

    def report(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        """The verdict `Validate` returns: field violations, else the required capabilities and any gaps."""
        out = service_pb2.ValidateResponse()
        violations = self._violations(request)
        out.field_violations.extend(violations)
        if violations:
            return out
        dropped: list[errors_pb2.Warning] = []
        if request.foreign_artifact_policy == request_pb2.FOREIGN_ARTIFACT_POLICY_DROP:
            request, dropped = self._apply_artifact_policy(request)  # as `check` does: what DROP removes is not needed
        required = capabilities.requirements(request).sorted_capabilities()
        out.required.extend(capabilities_pb2.Capability.ValueType(c) for c in required)
        gaps = self.unsupported(request)
        if gaps is not None:
            out.unsupported.CopyFrom(self._with_policy_hint(request, gaps, dropped=bool(dropped)))
        out.accepted = gaps is None
        return out
