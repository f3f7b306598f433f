"""The exception hierarchy and the one table that maps it to gRPC codes, ErrorInfo reasons and Response.error.

Every failure in modelir is a `ModelError` subclass carrying an `ErrorReason`. The table `ERROR_TABLE` is the only
place that says which gRPC status code and which `google.rpc.ErrorInfo.reason` a reason becomes, so the server,
`RemoteModel` and the record writer all agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import grpc

from modelir.v1 import capabilities_pb2, errors_pb2, response_pb2

ERROR_DOMAIN = "modelir.dev"

R = errors_pb2.ErrorReason


@dataclass(frozen=True, slots=True)
class ErrorMapping:
    """How one `ErrorReason` appears on each channel."""

    reason: int
    grpc_code: grpc.StatusCode
    exception: type[ModelError]
    soft: bool  # True: the response is returned with `error` set instead of raising.

    @property
    def info_reason(self) -> str:
        """The `google.rpc.ErrorInfo.reason` string: the enum name without its prefix."""
        return errors_pb2.ErrorReason.Name(self.reason).removeprefix("ERROR_REASON_")


class ModelError(Exception):
    """Base of every modelir error. `reason` is an `ErrorReason` value."""

    reason: int = R.ERROR_REASON_INTERNAL

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

    # True when retrying the same request may succeed.
    retryable: bool = False

    def to_response_error(self) -> errors_pb2.ResponseError:
        return errors_pb2.ResponseError(
            reason=self.reason,
            message=self.message,
            http_status=self.http_status,
            provider_code=self.provider_code,
            retryable=self.retryable,
        )


class InvalidRequestError(ModelError):
    """The request is malformed or inconsistent, whatever the model."""

    reason = R.ERROR_REASON_INVALID_REQUEST

    def __init__(self, violations: Iterable[errors_pb2.FieldViolation], message: str | None = None, **kwargs) -> None:
        self.violations = list(violations)
        text = "; ".join(f"{v.field}: {v.description}" for v in self.violations)
        super().__init__(message or f"invalid request: {text}", **kwargs)


class UnsupportedCapabilityError(ModelError):
    """The request needs capabilities or limits the model lacks. Names every one of them."""

    reason = R.ERROR_REASON_UNSUPPORTED_CAPABILITY

    def __init__(self, unsupported: errors_pb2.UnsupportedCapabilities, message: str | None = None, **kwargs) -> None:
        self.unsupported = unsupported
        super().__init__(message or describe_unsupported(unsupported), **kwargs)

    @property
    def missing(self) -> list[int]:
        return list(self.unsupported.missing)


class UnknownModelError(ModelError):
    reason = R.ERROR_REASON_UNKNOWN_MODEL


class UnauthenticatedError(ModelError):
    reason = R.ERROR_REASON_UNAUTHENTICATED


class ProviderAuthError(ModelError):
    reason = R.ERROR_REASON_PROVIDER_AUTH


class RateLimitedError(ModelError):
    reason = R.ERROR_REASON_RATE_LIMITED
    retryable = True


class ProviderUnavailableError(ModelError):
    reason = R.ERROR_REASON_PROVIDER_UNAVAILABLE
    retryable = True


class DeadlineExceededError(ModelError):
    reason = R.ERROR_REASON_DEADLINE_EXCEEDED
    retryable = True


class CancelledError(ModelError):
    reason = R.ERROR_REASON_CANCELLED


class ProviderRejectedError(ModelError):
    reason = R.ERROR_REASON_PROVIDER_REJECTED


class MalformedResponseError(ModelError):
    reason = R.ERROR_REASON_MALFORMED_RESPONSE


class TruncatedStreamError(ModelError):
    reason = R.ERROR_REASON_TRUNCATED_STREAM
    retryable = True


class MissingLogprobsError(ModelError):
    reason = R.ERROR_REASON_MISSING_LOGPROBS


class ConstraintViolatedError(ModelError):
    reason = R.ERROR_REASON_CONSTRAINT_VIOLATED


class ForeignArtifactError(ModelError):
    reason = R.ERROR_REASON_FOREIGN_ARTIFACT


class InternalError(ModelError):
    reason = R.ERROR_REASON_INTERNAL


_C = grpc.StatusCode
ERROR_TABLE: dict[int, ErrorMapping] = {
    m.reason: m
    for m in (
        ErrorMapping(R.ERROR_REASON_INVALID_REQUEST, _C.INVALID_ARGUMENT, InvalidRequestError, False),
        ErrorMapping(R.ERROR_REASON_UNSUPPORTED_CAPABILITY, _C.FAILED_PRECONDITION, UnsupportedCapabilityError, False),
        ErrorMapping(R.ERROR_REASON_UNKNOWN_MODEL, _C.NOT_FOUND, UnknownModelError, False),
        ErrorMapping(R.ERROR_REASON_UNAUTHENTICATED, _C.UNAUTHENTICATED, UnauthenticatedError, False),
        ErrorMapping(R.ERROR_REASON_PROVIDER_AUTH, _C.PERMISSION_DENIED, ProviderAuthError, False),
        ErrorMapping(R.ERROR_REASON_RATE_LIMITED, _C.RESOURCE_EXHAUSTED, RateLimitedError, False),
        ErrorMapping(R.ERROR_REASON_PROVIDER_UNAVAILABLE, _C.UNAVAILABLE, ProviderUnavailableError, False),
        ErrorMapping(R.ERROR_REASON_DEADLINE_EXCEEDED, _C.DEADLINE_EXCEEDED, DeadlineExceededError, False),
        ErrorMapping(R.ERROR_REASON_CANCELLED, _C.CANCELLED, CancelledError, False),
        ErrorMapping(R.ERROR_REASON_PROVIDER_REJECTED, _C.FAILED_PRECONDITION, ProviderRejectedError, False),
        ErrorMapping(R.ERROR_REASON_MALFORMED_RESPONSE, _C.DATA_LOSS, MalformedResponseError, False),
        ErrorMapping(R.ERROR_REASON_TRUNCATED_STREAM, _C.DATA_LOSS, TruncatedStreamError, True),
        ErrorMapping(R.ERROR_REASON_MISSING_LOGPROBS, _C.DATA_LOSS, MissingLogprobsError, True),
        ErrorMapping(R.ERROR_REASON_CONSTRAINT_VIOLATED, _C.DATA_LOSS, ConstraintViolatedError, True),
        ErrorMapping(R.ERROR_REASON_FOREIGN_ARTIFACT, _C.FAILED_PRECONDITION, ForeignArtifactError, False),
        ErrorMapping(R.ERROR_REASON_INTERNAL, _C.INTERNAL, InternalError, False),
    )
}
_BY_INFO_REASON = {m.info_reason: m for m in ERROR_TABLE.values()}


def mapping_for(reason: int) -> ErrorMapping:
    return ERROR_TABLE.get(reason, ERROR_TABLE[R.ERROR_REASON_INTERNAL])


def mapping_for_info_reason(info_reason: str) -> ErrorMapping | None:
    return _BY_INFO_REASON.get(info_reason)


def error_from_response_error(error: errors_pb2.ResponseError) -> ModelError:
    """Rebuild the exception a `ResponseError` (from a record or the wire) stands for."""
    exc_type = mapping_for(error.reason).exception
    kwargs = {"http_status": error.http_status, "provider_code": error.provider_code}
    if exc_type is InvalidRequestError:
        return InvalidRequestError([], error.message, **kwargs)
    if exc_type is UnsupportedCapabilityError:
        return UnsupportedCapabilityError(errors_pb2.UnsupportedCapabilities(), error.message, **kwargs)
    return exc_type(error.message, **kwargs)


def capability_name(capability: int) -> str:
    """`CAPABILITY_INPUT_SCORING` -> `INPUT_SCORING`."""
    return capabilities_pb2.Capability.Name(capability).removeprefix("CAPABILITY_")


def describe_unsupported(unsupported: errors_pb2.UnsupportedCapabilities) -> str:
    pieces = []
    if unsupported.missing:
        pieces.append("missing capabilities: " + ", ".join(capability_name(c) for c in unsupported.missing))
    for v in unsupported.limit_violations:
        pieces.append(f"{v.limit} is {v.allowed}, the request asks for {v.requested}")
    pieces.extend(unsupported.reasons)
    return f"model {unsupported.model!r} cannot run this request: " + "; ".join(pieces)
