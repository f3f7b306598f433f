"""Exceptions <-> `google.rpc.Status` with ErrorInfo, BadRequest, RetryInfo and UnsupportedCapabilities details.

The server turns a `ModelError` into a rich status with `to_status`; `RemoteModel` turns it back with
`error_from_rpc`, so a gRPC caller catches exactly the exceptions a local caller would.
"""

from __future__ import annotations

from typing import Any, cast

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from modelir import errors
from modelir.v1 import errors_pb2

_MAX_DURATION_SECONDS = 315_576_000_000


def to_status(exc: errors.ModelError) -> status_pb2.Status:
    mapping = errors.mapping_for(exc.reason)
    info = error_details_pb2.ErrorInfo(reason=mapping.info_reason, domain=errors.ERROR_DOMAIN)
    if exc.http_status:
        info.metadata["http_status"] = str(exc.http_status)
    if exc.provider_code:
        info.metadata["provider_code"] = exc.provider_code
    if isinstance(exc, errors.MessageTooLargeError):
        info.metadata["message_too_large"] = "true"
    details = [info]
    if isinstance(exc, errors.UnsupportedCapabilityError):
        info.metadata["missing_capabilities"] = ",".join(errors.capability_name(c) for c in exc.missing)
        details.append(exc.unsupported)
    if isinstance(exc, errors.InvalidRequestError):
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
                    for v in exc.violations
                ]
            )
        )
    if exc.retry_after is not None:
        delay = error_details_pb2.RetryInfo()
        # A `Duration` holds at most ~10,000 years; a longer hint is as good as "do not retry soon".
        delay.retry_delay.FromNanoseconds(int(min(exc.retry_after, _MAX_DURATION_SECONDS) * 1e9))
        details.append(delay)
    packed = []
    for detail in details:
        holder = any_pb2.Any()
        holder.Pack(detail)
        packed.append(holder)
    return status_pb2.Status(code=mapping.grpc_code.value[0], message=exc.message, details=packed)


# Without an ErrorInfo (the channel itself failed), the gRPC code alone decides.
_BY_CODE = {
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceededError,
    grpc.StatusCode.CANCELLED: errors.CancelledError,
    grpc.StatusCode.UNAVAILABLE: errors.ProviderUnavailableError,
    grpc.StatusCode.UNAUTHENTICATED: errors.UnauthenticatedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.RateLimitedError,
}


def error_from_rpc(error: grpc.aio.AioRpcError) -> errors.ModelError:
    """The `ModelError` a failed call stands for, with its structured details restored."""
    # An AioRpcError answers the three calls `from_call` makes (code, details, trailing_metadata); the stubs type
    # only the sync `grpc.Call`.
    status = rpc_status.from_call(cast(grpc.Call, error))
    info = error_details_pb2.ErrorInfo()
    bad = error_details_pb2.BadRequest()
    retry = error_details_pb2.RetryInfo()
    unsupported = errors_pb2.UnsupportedCapabilities()
    for holder in status.details if status is not None else ():
        for detail in (info, bad, retry, unsupported):
            if holder.Is(detail.DESCRIPTOR):
                holder.Unpack(detail)
    message = error.details() or error.code().name
    mapping = errors.mapping_for_info_reason(info.reason) if info.domain == errors.ERROR_DOMAIN else None
    if info.metadata.get("message_too_large") == "true" or (
        mapping is None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in message
    ):  # the server's refusal of its own answer, or the channel's limit (gRPC core says "... larger than max")
        return errors.MessageTooLargeError(message)
    if mapping is None:
        return _BY_CODE.get(error.code(), errors.InternalError)(message)
    kwargs: dict[str, Any] = {
        "http_status": int(info.metadata.get("http_status", 0) or 0),
        "provider_code": info.metadata.get("provider_code", ""),
    }
    if retry.HasField("retry_delay"):  # present even when zero: a message field keeps its presence
        kwargs["retry_after"] = retry.retry_delay.ToNanoseconds() / 1e9
    if mapping.exception is errors.UnsupportedCapabilityError:
        return errors.UnsupportedCapabilityError(unsupported, message, **kwargs)
    if mapping.exception is errors.InvalidRequestError:
        violations = [errors_pb2.FieldViolation(field=v.field, description=v.description) for v in bad.field_violations]
        return errors.InvalidRequestError(violations, message, **kwargs)
    return mapping.exception(message, **kwargs)
