"""Capability requirements declared up front: a task names what it needs once, and setup checks a model against it.

`needs("chat", "input_scoring", top_logprobs=5)` lists capabilities by short name (the `Capability` value without
`CAPABILITY_`, lowercased) and the limits the task will ask for. `check(model)` / `await acheck(model)` compare
them with the model's manifest (a local `Model` or a `RemoteModel` alike) and raise one
`UnsupportedCapabilityError` that names every missing capability and limit, before any request is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from modelir.errors import UnsupportedCapabilityError, capability_name
from modelir.interface import ModelInterface
from modelir.pipeline.capabilities import requirements
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2
from modelir.writing import enum_value
from modelir.writing.names import enum_name

# Keyword -> the `ModelLimits` field it is checked against.
_LIMITS = {
    "top_logprobs": "max_top_logprobs",
    "choices": "max_choices",
    "stop_sequences": "max_stop_sequences",
    "max_output_tokens": "max_output_tokens",
}


@dataclass(frozen=True, slots=True)
class Needs:
    """What a task needs from a model: capabilities (`Capability` values) and limits (`ModelLimits` field ->
    the largest value the task uses)."""

    capabilities: frozenset[int]
    limits: Mapping[str, int] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return sorted(enum_name(capabilities_pb2.Capability, c) for c in self.capabilities)

    def __or__(self, other: Needs) -> Needs:
        limits = dict(self.limits)
        for name, value in other.limits.items():
            limits[name] = max(value, limits.get(name, 0))
        return Needs(self.capabilities | other.capabilities, limits)

    def gaps(
        self, manifest: capabilities_pb2.CapabilityManifest, *, model: str = ""
    ) -> errors_pb2.UnsupportedCapabilities | None:
        """Every capability and limit `manifest` lacks (None when it has them all)."""
        have = set(manifest.capabilities)
        out = errors_pb2.UnsupportedCapabilities(model=model)
        out.missing.extend(sorted(self.capabilities - have))  # type: ignore[arg-type]
        for limit, value in sorted(self.limits.items()):
            allowed = getattr(manifest.limits, limit)
            if allowed and value > allowed:  # 0 means the manifest states no limit
                out.limit_violations.add(limit=limit, allowed=allowed, requested=value)
        if not out.missing and not out.limit_violations:
            return None
        return out

    def check(self, model: ModelInterface) -> None:
        """Raise `UnsupportedCapabilityError` naming everything `model` lacks."""
        _raise(self.gaps(model.capabilities, model=model.name))

    async def acheck(self, model: ModelInterface) -> None:
        _raise(self.gaps(await model.acapabilities(), model=model.name))


def _raise(gaps: errors_pb2.UnsupportedCapabilities | None) -> None:
    if gaps is None:
        return
    pieces = []
    if gaps.missing:
        pieces.append("missing capabilities: " + ", ".join(capability_name(c) for c in gaps.missing))
    pieces += [f"{v.limit} is {v.allowed}, the task needs {v.requested}" for v in gaps.limit_violations]
    raise UnsupportedCapabilityError(gaps, f"model {gaps.model!r} lacks what the task needs: " + "; ".join(pieces))


def needs(
    *capabilities: str,
    top_logprobs: int = 0,
    choices: int = 0,
    stop_sequences: int = 0,
    max_output_tokens: int = 0,
) -> Needs:
    """Declare a task's needs: `needs("chat", "tools", "sampled_token_ids", top_logprobs=20)`."""
    values = frozenset(
        enum_value(capabilities_pb2.Capability, name, field=f"capabilities[{i}]") for i, name in enumerate(capabilities)
    )
    given = {"top_logprobs": top_logprobs, "choices": choices, "stop_sequences": stop_sequences}
    given["max_output_tokens"] = max_output_tokens
    limits = {_LIMITS[k]: v for k, v in given.items() if v}
    return Needs(values, limits)


def needs_of(request: request_pb2.Request, *, streaming: bool = False) -> Needs:
    """The needs of a sample request (every capability and limit it uses)."""
    derived = requirements(request, streaming=streaming)
    return Needs(frozenset(derived.capabilities), dict(derived.limits))
