"""The request pipeline, written once: validate the fields, check the capabilities, apply the artifact policy, lower.

`Model.arun`, `Model.astream`, `Model.avalidate` and the conformance runner all go through a `Pipeline`, so a
request is accepted or rejected the same way wherever it enters. Every step is pure and runs before any I/O: a
rejected request never reaches the limiter or the network. The checks read one walk of the request's conversation
(`survey`), made once per request (again only when the artifact policy dropped parts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from modelir import errors
from modelir.pipeline import artifacts, capabilities, continuations, media_policy
from modelir.pipeline.survey import Survey, survey
from modelir.pipeline.validation import field_violations, model_mismatch
from modelir.transports.base import HttpRequest, HttpTransport, Transport
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2, response_pb2, service_pb2


@dataclass(slots=True)  # not frozen: on the hot path, a frozen dataclass takes about twice as long to build
class Prepared:
    """A request that passed every check, ready to run.

    `request` is what the transport runs and lifts against (foreign artifacts already handled by the policy);
    `warnings` are what the policy did, for the response; `native` is the lowered HTTP request (None for an
    in-process transport, for a request that `split_continuations` cuts into one call per continuation, and for a
    token-in conversation until `calls.token_prompt` has built its token-id prompt).
    """

    request: request_pb2.Request
    warnings: list[errors_pb2.Warning]
    native: HttpRequest | None


class Pipeline:
    """The checks and the lowering for one transport, under a manifest (the transport's own unless narrowed) and
    the model name that rejections carry."""

    __slots__ = ("_capabilities", "_lower", "_runs_as_token_prompt", "manifest", "model", "transport")

    def __init__(
        self,
        transport: Transport,
        manifest: capabilities_pb2.CapabilityManifest | None = None,
        *,
        model: str = "",
    ) -> None:
        self.transport = transport
        # Decided once, not per request: an isinstance check against an ABC costs about 0.2 us.
        self._lower = transport.lower_surveyed if isinstance(transport, HttpTransport) else None
        self._runs_as_token_prompt = transport.runs_as_token_prompt if isinstance(transport, HttpTransport) else None
        self.manifest = manifest if manifest is not None else transport.manifest()
        self.model = model
        # The manifest's capabilities as a set, with the manifest they were read from (`manifest` may be replaced).
        self._capabilities: tuple[capabilities_pb2.CapabilityManifest, frozenset[int]] | None = None

    def unsupported(
        self, request: request_pb2.Request, *, streaming: bool = False, seen: Survey | None = None
    ) -> errors_pb2.UnsupportedCapabilities | None:
        """What the manifest and the transport's own limits lack for `request`; None when it can run.

        Assumes valid fields (run `validate_request` first). `seen` is the request's `survey`, when made already.
        """
        if seen is None:
            seen = survey(request)
        if self._capabilities is None or self._capabilities[0] is not self.manifest:
            self._capabilities = (self.manifest, frozenset(self.manifest.capabilities))
        return capabilities.unsupported(
            request,
            self.manifest,
            model=self.model,
            streaming=streaming,
            extra_reasons=self.transport.extra_unsupported(request, streaming=streaming, seen=seen),
            seen=seen,
            have=self._capabilities[1],
        )

    def check(
        self,
        request: request_pb2.Request,
        *,
        streaming: bool = False,
        media: media_policy.MediaPolicy | None = None,
    ) -> tuple[request_pb2.Request, list[errors_pb2.Warning]]:
        """Check the media URIs under `media` (when given), validate, check the capabilities and apply the
        foreign-artifact policy, all from one `survey` of the request's conversation.

        Raises `InvalidRequestError` (naming every bad field or media URI, and `model` when the request names
        another model than this pipeline's) or `UnsupportedCapabilityError` (naming every gap). Returns the request
        the transport must run and the policy's warnings.
        """
        checked, warnings, _ = self._check(request, streaming=streaming, media=media)
        return checked, warnings

    def _check(
        self,
        request: request_pb2.Request,
        *,
        streaming: bool,
        media: media_policy.MediaPolicy | None,
    ) -> tuple[request_pb2.Request, list[errors_pb2.Warning], Survey]:
        """`check`, with the survey of the request it returns (what the lowering reads)."""
        seen = survey(request)
        if media is not None:
            media_policy.check(request, media, seen)
        violations = self._violations(request, seen)
        if violations:
            raise errors.InvalidRequestError(violations)
        # DROP is applied before the capability check, so what it removes cannot make the request unsupported;
        # under REJECT the check comes first and, where foreign artifacts are in the way, says DROP would help.
        dropping = request.foreign_artifact_policy == request_pb2.FOREIGN_ARTIFACT_POLICY_DROP
        warnings: list[errors_pb2.Warning] = []
        if dropping:
            cleaned, warnings = self._apply_artifact_policy(request, seen)
            if cleaned is not request:  # what the checks below read is the request that runs
                request, seen = cleaned, survey(cleaned)
        gaps = self.unsupported(request, streaming=streaming, seen=seen)
        if gaps is not None:
            hinted = self._with_policy_hint(request, gaps, dropped=bool(warnings), seen=seen)
            raise errors.UnsupportedCapabilityError(hinted)
        if dropping:
            return request, warnings, seen
        checked, warnings = self._apply_artifact_policy(request, seen)
        # KEEP and REJECT return the request itself; anything else would need its own walk
        return checked, warnings, seen if checked is request else survey(checked)

    def _violations(self, request: request_pb2.Request, seen: Survey) -> list[errors_pb2.FieldViolation]:
        """The model-name mismatch, the IR's own field rules, then the provider's (a seed out of its range, ...)."""
        mismatch = model_mismatch(request, self.model)
        violations = ([mismatch] if mismatch is not None else []) + field_violations(request, seen)
        if not violations:
            violations = [
                errors_pb2.FieldViolation(field=f, description=d) for f, d in self.transport.field_problems(request)
            ]
        return violations

    def _apply_artifact_policy(
        self, request: request_pb2.Request, seen: Survey
    ) -> tuple[request_pb2.Request, list[errors_pb2.Warning]]:
        transport = self.transport
        return artifacts.apply_foreign_artifact_policy(
            request, transport=transport.name, model=transport.issuer_model(request), seen=seen
        )

    def _with_policy_hint(
        self, request: request_pb2.Request, gaps: errors_pb2.UnsupportedCapabilities, *, dropped: bool, seen: Survey
    ) -> errors_pb2.UnsupportedCapabilities:
        """`gaps`, with a reason saying what the foreign-artifact policy did or could do, when it matters."""
        if dropped:
            gaps.reasons.append(
                "FOREIGN_ARTIFACT_POLICY_DROP already removed the foreign reasoning artifacts (and reasoning that "
                "cannot travel without them); what is named here is still in the way."
            )
        elif artifacts.foreign_artifact_count(
            request, transport=self.transport.name, model=self.transport.issuer_model(request), seen=seen
        ):
            gaps.reasons.append(
                "The conversation carries reasoning artifacts from another issuer: set foreign_artifact_policy to "
                "FOREIGN_ARTIFACT_POLICY_DROP to drop them (and reasoning that cannot travel without them) first."
            )
        return gaps

    def prepare(
        self,
        request: request_pb2.Request,
        *,
        streaming: bool = False,
        media: media_policy.MediaPolicy | None = None,
    ) -> Prepared:
        """`check`, then lower for an HTTP transport: everything a request goes through before the limiter."""
        checked, warnings, seen = self._check(request, streaming=streaming, media=media)
        native = None
        # A token-in conversation (as its transport says) is lowered once its token-id prompt is built
        # (`calls.token_prompt`, after I/O).
        if (
            self._lower is not None
            and split_continuations(checked, self.transport) is None
            and self._runs_as_token_prompt is not None
            and not self._runs_as_token_prompt(checked)
        ):
            try:  # a split request is lowered once per continuation
                native = self._lower(checked, seen, stream=streaming)
            except (ValueError, TypeError, RecursionError) as exc:  # JSON text the wire cannot carry, and the like
                raise errors.InvalidRequestError(
                    [
                        errors_pb2.FieldViolation(
                            field="request", description=f"{self.transport.name} cannot send it: {exc}"
                        )
                    ]
                ) from None
        return Prepared(checked, warnings, native)

    def report(
        self, request: request_pb2.Request, *, media: media_policy.MediaPolicy | None = None
    ) -> service_pb2.ValidateResponse:
        """The verdict `Validate` returns: field violations (a media URI `media` refuses is one), else the required
        capabilities and any gaps."""
        out = service_pb2.ValidateResponse()
        seen = survey(request)
        if media is not None:
            try:  # what a call would answer: a refused media URI is a field violation too
                media_policy.check(request, media, seen)
            except errors.InvalidRequestError as exc:
                out.field_violations.extend(exc.violations)
                return out
        violations = self._violations(request, seen)
        out.field_violations.extend(violations)
        if violations:
            return out
        dropped: list[errors_pb2.Warning] = []
        if request.foreign_artifact_policy == request_pb2.FOREIGN_ARTIFACT_POLICY_DROP:
            # as `check` does: what DROP removes is not needed
            cleaned, dropped = self._apply_artifact_policy(request, seen)
            if cleaned is not request:
                request, seen = cleaned, survey(cleaned)
        required = capabilities.requirements(request, seen=seen).sorted_capabilities()
        out.required.extend(capabilities_pb2.Capability.ValueType(c) for c in required)
        gaps = self.unsupported(request, seen=seen)
        if gaps is not None:
            out.unsupported.CopyFrom(self._with_policy_hint(request, gaps, dropped=bool(dropped), seen=seen))
        out.accepted = gaps is None
        return out


# ---- several continuations on a transport that scores one per call ---------------------------------------------


def split_continuations(request: request_pb2.Request, transport: Transport) -> list[request_pb2.Request] | None:
    """One request per continuation, in order, when `request` asks to score several and `transport` scores one
    per call (`scores_continuations_at_once` is False); None when the request runs as it is."""
    spans = continuations.of(request)
    if len(spans) < 2 or transport.scores_continuations_together(request):
        return None
    out = []
    for span in spans:
        one = request_pb2.Request()
        one.CopyFrom(request)
        del one.input_scoring.continuations[:]
        one.input_scoring.continuations.append(span)
        out.append(one)
    return out


def merge_continuations(responses: Sequence[response_pb2.Response]) -> response_pb2.Response:
    """The one response to a split request: the first call's choices and identity, every call's input scores in
    continuation order, usage summed (a count no call reported stays absent), every soft error and warning kept,
    the timing from the first start to the last end with every attempt counted."""
    first, last = responses[0], responses[-1]
    merged = response_pb2.Response()
    merged.CopyFrom(first)
    for field in ("input_scores", "errors", "warnings"):
        merged.ClearField(field)
    for response in responses:
        merged.input_scores.extend(response.input_scores)
        merged.errors.extend(response.errors)
        merged.warnings.extend(w for w in response.warnings if w not in merged.warnings)
    merged.ClearField("usage")
    for response in responses:
        if not response.HasField("usage"):
            continue
        usage = merged.usage
        for descriptor, value in response.usage.ListFields():
            if descriptor.name == "details":
                for key, count in value.items():
                    usage.details[key] = usage.details.get(key, 0) + count
            else:
                setattr(usage, descriptor.name, getattr(usage, descriptor.name) + value)
    if first.HasField("timing"):
        merged.timing.end_time.CopyFrom(last.timing.end_time)
        merged.timing.attempt_count = sum(r.timing.attempt_count for r in responses)
    return merged
