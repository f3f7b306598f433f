"""Batch input files: JSON Lines of IR requests, each with its record key.

Each line is an IR `Request` in proto-JSON, or `{"key": ..., "request": {...}}`. The key is opaque (`Record.key`):
the caller's, or, for a request given without one, its position in the input as `#<n>` (decimal, from 0, counting
requests, not blank lines), which any language reproduces. A resume checks that the input at each recorded key is
still the request that was recorded (`changed_inputs`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
from google.protobuf import json_format

from modelir.v1 import request_pb2


class BatchInputError(ValueError):
    """An input file problem, naming the line."""


def position_key(position: int) -> str:
    """The key of the request at `position` (from 0) of an input, given without a key of its own."""
    return f"#{position}"


def request_key(request: request_pb2.Request) -> str:
    """A content hash of a request (its deterministic serialization). Not the spec's record key (that is the
    caller's key or the input position, `position_key`); kept for callers that want a content id."""
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
                    key = str(data.get("key") or position_key(len(inputs)))
                else:
                    request = json_format.ParseDict(data, request_pb2.Request())
                    key = position_key(len(inputs))
            except (orjson.JSONDecodeError, json_format.ParseError) as exc:
                raise BatchInputError(f"{path}:{number}: not an IR request in proto-JSON: {exc}") from None
            if key in seen:
                raise BatchInputError(f"{path}:{number}: the key {key!r} was already used on line {seen[key]}")
            seen[key] = number
            inputs.append((key, request))
    return inputs
