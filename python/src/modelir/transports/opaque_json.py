"""Opaque payloads inside native JSON: moved out into artifacts on lift, put back in place on replay.

A provider-run tool's result can hold encrypted members (an Anthropic `web_search_result.encrypted_content`). The
IR keeps the result's JSON verbatim in `ServerToolResult.result_json` except for those members, which become
`OpaqueArtifact`s of the part (issuer-checked like every artifact), each naming its place with an RFC 6901 JSON
pointer (`OpaqueArtifact.json_pointer`). `extract` and `restore` are exact inverses for string payloads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from modelir.v1 import content_pb2


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def extract(
    native: Any,
    is_opaque: Callable[[list[str | int], str], content_pb2.OpaqueArtifactKind.ValueType | None],
    issuer: content_pb2.Issuer,
) -> tuple[str, list[content_pb2.OpaqueArtifact]]:
    """(the JSON text of `native` without its opaque members, those members as artifacts in document order).

    `is_opaque(path, key)` says, for a string member `key` at `path`, the artifact kind it is (None: keep it)."""
    artifacts: list[content_pb2.OpaqueArtifact] = []

    def walk(node: Any, path: list[str | int]) -> Any:
        if isinstance(node, dict):
            out = {}
            for key, value in node.items():
                kind = is_opaque(path, key) if isinstance(value, str) else None
                if kind is not None:
                    pointer = "".join(f"/{_escape(str(p))}" for p in [*path, key])
                    artifacts.append(
                        content_pb2.OpaqueArtifact(kind=kind, data=value.encode(), issuer=issuer, json_pointer=pointer)
                    )
                else:
                    out[key] = walk(value, [*path, key])
            return out
        if isinstance(node, list):
            return [walk(value, [*path, i]) for i, value in enumerate(node)]
        return node

    return orjson.dumps(walk(native, [])).decode(), artifacts


def restore(result_json: str, artifacts: Iterable[content_pb2.OpaqueArtifact]) -> Any:
    """The native JSON value with every pointed artifact put back in its place (artifacts without a pointer are
    not part of the JSON and are skipped)."""
    node = orjson.loads(result_json) if result_json else {}
    node = copy.deepcopy(node)
    for artifact in artifacts:
        if not artifact.json_pointer:
            continue
        *parents, last = [_unescape(t) for t in artifact.json_pointer.split("/")[1:]]
        target = node
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        target[last] = artifact.data.decode()
    return node
