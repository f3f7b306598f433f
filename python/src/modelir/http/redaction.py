"""Credentials kept out of what leaves a call: the secrets a request's headers carry, removed from errors and kept
raw bodies."""

from __future__ import annotations

from collections.abc import Mapping

from modelir import errors

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


def redact(exc: errors.ModelError, secrets: tuple[str, ...]) -> errors.ModelError:
    """Remove every secret from what `exc` carries into messages, statuses and records."""
    if not secrets:
        return exc
    for secret in secrets:
        if secret in exc.message:
            exc.message = exc.message.replace(secret, REDACTED)
        if secret in exc.provider_code:
            exc.provider_code = exc.provider_code.replace(secret, REDACTED)
    exc.args = (exc.message,)
    return exc
