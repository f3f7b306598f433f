"""Credentials kept out of what leaves a call: the secrets a request's headers carry, removed from errors and kept
raw bodies.

This is the one redaction pass, applied where the text is made: raised errors as the executor or `Model` raises them,
soft errors and warnings as `Model` receives them from a lift (a provider's error inside a 200 answer or a stream
can quote the key). Everything downstream (`Response.errors`, `StreamEnd.errors`, gRPC statuses and stream events,
the command line, logs, spans, records) only ever sees the redacted text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from modelir import errors
from modelir.v1 import errors_pb2

REDACTED = "[redacted]"


def secrets_in(headers: Mapping[str, str]) -> tuple[str, ...]:
    found = set()
    for value in headers.values():
        scheme, _, token = value.partition(" ")
        for secret in (value, token if scheme.lower() in ("bearer", "basic", "token") else ""):
            if len(secret) >= 8:  # shorter values are not credentials, and redacting them would mangle text
                found.add(secret)
    return tuple(sorted(found, key=len, reverse=True))


def redact_bytes(data: bytes, secrets: tuple[str, ...]) -> bytes:
    """`data` with every secret replaced (a kept raw body or event that reflects a credential)."""
    for secret in secrets:
        encoded = secret.encode()
        if encoded in data:
            data = data.replace(encoded, REDACTED.encode())
    return data


def redact_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact(exc: errors.ModelError, secrets: tuple[str, ...]) -> errors.ModelError:
    """Remove every secret from what `exc` carries into messages, statuses and records (its partial output's soft
    errors too)."""
    if not secrets:
        return exc
    exc.message = redact_text(exc.message, secrets)
    exc.provider_code = redact_text(exc.provider_code, secrets)
    exc.args = (exc.message,)
    if exc.partial is not None:
        redact_outcome(exc.partial, secrets)
    return exc


class _Outcome(Protocol):
    """A `Response` or a `StreamEnd`: where soft errors and warnings are reported."""

    @property
    def errors(self) -> RepeatedCompositeFieldContainer[errors_pb2.ResponseError]: ...

    @property
    def warnings(self) -> RepeatedCompositeFieldContainer[errors_pb2.Warning]: ...


def redact_outcome(outcome: _Outcome, secrets: tuple[str, ...]) -> None:
    """Remove every secret from the soft errors and warnings of a response or a stream's end, in place."""
    if not secrets:
        return
    for error in outcome.errors:
        error.message = redact_text(error.message, secrets)
        error.provider_code = redact_text(error.provider_code, secrets)
        for key, value in error.metadata.items():
            error.metadata[key] = redact_text(value, secrets)
    for warning in outcome.warnings:
        warning.message = redact_text(warning.message, secrets)
