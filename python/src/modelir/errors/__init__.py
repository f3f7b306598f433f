"""The exception hierarchy and the one table that maps it to gRPC codes, ErrorInfo reasons and Response.error.

Every failure in modelir is a `ModelError` subclass carrying an `ErrorReason`. The table `ERROR_TABLE` is the only
place that says which gRPC status code and which `google.rpc.ErrorInfo.reason` a reason becomes, so the server,
`RemoteModel` and the record writer all agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from modelir.v1 import capabilities_pb2, errors_pb2, response_pb2

ERROR_DOMAIN = "modelir.dev"

R = errors_pb2.ErrorReason


@dataclass(frozen=True, slots=True)
class ErrorMapping:
    """How one `ErrorReason` appears on each channel."""

    exception: type[ModelError]
    grpc_code: grpc.StatusCode
    retryable: bool

    @property
    def reason(self) -> errors_pb2.ErrorReason.ValueType:
        return self.exception.reason

    @property
    def info_reason(self) -> str:
        """The `google.rpc.ErrorInfo.reason` string: the enum name without its prefix."""
        return errors_pb2.ErrorReason.Name(self.reason).removeprefix("ERROR_REASON_")


class ModelError(Exception):
    """Base of every modelir error. `reason` is an `ErrorReason` value."""

    reason: errors_pb2.ErrorReason.ValueType = R.ERROR_REASON_INTERNAL

    def __init__(
        self,
        message: str,
        *,
        http_status: int = 0,
        provider_code: str = "",
        retry_after: float | None = None,
        partial: response_pb2.Response | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
        self.provider_code = provider_code
        # Seconds the provider asked us to wait before retrying (Retry-After, RetryInfo), when it said. A hint that
        # is not a finite, non-negative number (a provider's `inf`, a negative delay) is no hint.
        self.retry_after = retry_after if retry_after is None or 0 <= retry_after < math.inf else None
        # Output received before the failure; never thrown away.
        self.partial = partial

    # One error may know better than its reason's row (a 429 whose hint says "never"); None: the table decides.
    _retryable: bool | None = None

    @property
    def retryable(self) -> bool:
        """True when retrying the same request may succeed (the table says, per reason, unless this error knows)."""
        return mapping_for(self.reason).retryable if self._retryable is None else self._retryable

    @retryable.setter
    def retryable(self, value: bool) -> None:
        self._retryable = value

    def to_response_error(self) -> errors_pb2.ResponseError:
        error = errors_pb2.ResponseError(
            reason=self.reason,
            message=self.message,
            http_status=self.http_status,
            provider_code=self.provider_code,
            retryable=self.retryable,
        )
        if self.retry_after is not None:
            error.retry_delay.FromNanoseconds(int(min(self.retry_after, 315_576_000_000) * 1e9))
        return error


class InvalidRequestError(ModelError):
    """The request is malformed or inconsistent, whatever the model."""

    reason = R.ERROR_REASON_INVALID_REQUEST

    def __init__(
        self, violations: Iterable[errors_pb2.FieldViolation], message: str | None = None, **kwargs: Any
    ) -> None:
        self.violations = list(violations)
        text = "; ".join(f"{v.field}: {v.description}" for v in self.violations)
        super().__init__(message or f"invalid request: {text}", **kwargs)


class UnsupportedCapabilityError(ModelError):
    """The request needs capabilities or limits the model lacks. Names every one of them."""

    reason = R.ERROR_REASON_UNSUPPORTED_CAPABILITY

    def __init__(
        self, unsupported: errors_pb2.UnsupportedCapabilities, message: str | None = None, **kwargs: Any
    ) -> None:
        self.unsupported = unsupported
        super().__init__(message or describe_unsupported(unsupported), **kwargs)

    @property
    def missing(self) -> list[int]:
        return list(self.unsupported.missing)


class UnknownModelError(ModelError):
    """No model of that name is configured."""

    reason = R.ERROR_REASON_UNKNOWN_MODEL


class UnauthenticatedError(ModelError):
    """The caller did not authenticate to the modelir server."""

    reason = R.ERROR_REASON_UNAUTHENTICATED


class ProviderAuthError(ModelError):
    """The provider refused the configured credential."""

    reason = R.ERROR_REASON_PROVIDER_AUTH


class RateLimitedError(ModelError):
    """The provider's rate limit or quota was exhausted after every retry."""

    reason = R.ERROR_REASON_RATE_LIMITED


class MessageTooLargeError(RateLimitedError):
    """A message over a gRPC message limit (an answer larger than the server may send or the client may receive).
    gRPC's code for it is RESOURCE_EXHAUSTED, as for a rate limit, but retrying the same call gives the same
    answer: it is not retryable. Raise the limit (`server.max_message_bytes`) or ask for less."""

    _retryable = False


class ProviderUnavailableError(ModelError):
    """The provider was unreachable, overloaded or failed with a server error after every retry."""

    reason = R.ERROR_REASON_PROVIDER_UNAVAILABLE


class DeadlineExceededError(ModelError):
    """The call's deadline expired."""

    reason = R.ERROR_REASON_DEADLINE_EXCEEDED


class CancelledError(ModelError):
    """The caller cancelled the call."""

    reason = R.ERROR_REASON_CANCELLED


class ProviderRejectedError(ModelError):
    """The provider rejected the request as invalid (an HTTP 4xx other than auth and rate limits)."""

    reason = R.ERROR_REASON_PROVIDER_REJECTED


class MalformedResponseError(ModelError):
    """The provider's answer could not be parsed; any output parsed before the fault is kept."""

    reason = R.ERROR_REASON_MALFORMED_RESPONSE


class TruncatedStreamError(ModelError):
    """The stream ended before the provider said it was complete."""

    reason = R.ERROR_REASON_TRUNCATED_STREAM


class MissingLogprobsError(ModelError):
    """Log probabilities were requested but the provider did not return them."""

    reason = R.ERROR_REASON_MISSING_LOGPROBS


class ConstraintViolatedError(ModelError):
    """The output violates the requested constraint, e.g. invalid JSON under a JSON schema."""

    reason = R.ERROR_REASON_CONSTRAINT_VIOLATED


class ForeignArtifactError(ModelError):
    """A reasoning artifact was replayed to a transport or model that did not issue it, or failed its check."""

    reason = R.ERROR_REASON_FOREIGN_ARTIFACT


class InternalError(ModelError):
    """A fault inside modelir itself."""

    reason = R.ERROR_REASON_INTERNAL


# The one table: each exception's gRPC status code and whether retrying the same request may succeed. The
# `ErrorInfo.reason` and `Response.error.reason` are the exception's `reason`.
_C = grpc.StatusCode
ERROR_TABLE: dict[int, ErrorMapping] = {
    m.reason: m
    for m in (
        ErrorMapping(InvalidRequestError, _C.INVALID_ARGUMENT, retryable=False),
        ErrorMapping(UnsupportedCapabilityError, _C.FAILED_PRECONDITION, retryable=False),
        ErrorMapping(UnknownModelError, _C.NOT_FOUND, retryable=False),
        ErrorMapping(UnauthenticatedError, _C.UNAUTHENTICATED, retryable=False),
        ErrorMapping(ProviderAuthError, _C.PERMISSION_DENIED, retryable=False),
        ErrorMapping(RateLimitedError, _C.RESOURCE_EXHAUSTED, retryable=True),
        ErrorMapping(ProviderUnavailableError, _C.UNAVAILABLE, retryable=True),
        ErrorMapping(DeadlineExceededError, _C.DEADLINE_EXCEEDED, retryable=True),
        ErrorMapping(CancelledError, _C.CANCELLED, retryable=False),
        ErrorMapping(ProviderRejectedError, _C.FAILED_PRECONDITION, retryable=False),
        ErrorMapping(MalformedResponseError, _C.DATA_LOSS, retryable=False),
        ErrorMapping(TruncatedStreamError, _C.DATA_LOSS, retryable=True),
        ErrorMapping(MissingLogprobsError, _C.DATA_LOSS, retryable=False),
        ErrorMapping(ConstraintViolatedError, _C.DATA_LOSS, retryable=False),
        ErrorMapping(ForeignArtifactError, _C.FAILED_PRECONDITION, retryable=False),
        ErrorMapping(InternalError, _C.INTERNAL, retryable=False),
    )
}
_BY_INFO_REASON = {m.info_reason: m for m in ERROR_TABLE.values()}


def mapping_for(reason: errors_pb2.ErrorReason.ValueType) -> ErrorMapping:
    return ERROR_TABLE.get(reason, ERROR_TABLE[R.ERROR_REASON_INTERNAL])


def mapping_for_info_reason(info_reason: str) -> ErrorMapping | None:
    return _BY_INFO_REASON.get(info_reason)


def capability_name(capability: int) -> str:
    """`CAPABILITY_INPUT_SCORING` -> `INPUT_SCORING`; a capability newer than this release (a newer server names
    it) as its number, since receivers tolerate values their schema does not know."""
    value = capabilities_pb2.Capability.DESCRIPTOR.values_by_number.get(capability)
    return value.name.removeprefix("CAPABILITY_") if value is not None else str(capability)


def describe_unsupported(unsupported: errors_pb2.UnsupportedCapabilities) -> str:
    pieces = []
    if unsupported.missing:
        pieces.append("missing capabilities: " + ", ".join(capability_name(c) for c in unsupported.missing))
    for v in unsupported.limit_violations:
        pieces.append(f"{v.limit} is {v.allowed}, the request asks for {v.requested}")
    pieces.extend(unsupported.reasons)
    return f"model {unsupported.model!r} cannot run this request: " + "; ".join(pieces)
