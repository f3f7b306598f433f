"""Exceptions -> `google.rpc.Status` with ErrorInfo, BadRequest and UnsupportedCapabilities details."""

from __future__ import annotations

from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from modelir import errors


def to_status(exc: errors.ModelError) -> status_pb2.Status:
    mapping = errors.mapping_for(exc.reason)
    info = error_details_pb2.ErrorInfo(reason=mapping.info_reason, domain=errors.ERROR_DOMAIN)
    if exc.http_status:
        info.metadata["http_status"] = str(exc.http_status)
    if exc.provider_code:
        info.metadata["provider_code"] = exc.provider_code
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
        delay.retry_delay.FromNanoseconds(int(exc.retry_after * 1e9))
        details.append(delay)
    packed = []
    for detail in details:
        holder = any_pb2.Any()
        holder.Pack(detail)
        packed.append(holder)
    return status_pb2.Status(code=mapping.grpc_code.value[0], message=exc.message, details=packed)
