"""Batch input files: JSON Lines of IR requests, each with a stable key.

Each line is an IR `Request` in proto-JSON, or `{"key": ..., "request": {...}}`. A line without a key gets a
stable one: the first 24 hex digits of the SHA-256 of the request's deterministic binary serialization.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
from google.protobuf import json_format

from modelir.v1 import request_pb2


class BatchInputError(ValueError):
    """An input file problem, naming the line."""


def request_key(request: request_pb2.Request) -> str:
    return hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()[:24]


def read_inputs(path: str | Path) -> list[tuple[str, request_pb2.Request]]:
    inputs: list[tuple[str, request_pb2.Request]] = []
    seen: dict[str, int] = {}
    with Path(path).open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                data = orjson.loads(line)
                if isinstance(data, dict) and "request" in data:
                    request = json_format.ParseDict(data["request"], request_pb2.Request())
                    key = str(data.get("key") or request_key(request))
                else:
                    request = json_format.ParseDict(data, request_pb2.Request())
                    key = request_key(request)
            except (orjson.JSONDecodeError, json_format.ParseError) as exc:
                raise BatchInputError(f"{path}:{number}: not an IR request in proto-JSON: {exc}") from None
            if key in seen:
                raise BatchInputError(f"{path}:{number}: the key {key!r} was already used on line {seen[key]}")
            seen[key] = number
            inputs.append((key, request))
    return inputs
