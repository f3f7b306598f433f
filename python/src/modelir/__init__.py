"""modelir: a schema-first, versioned intermediate representation (IR) for talking to language models.

The one primitive is `Model.arun(Request) -> Response`; everything else is sugar over it. Generated message
classes live in `modelir.v1`; the most used ones are re-exported here.

The names below are imported on first use (PEP 562), so that importing `modelir` (and so starting the `modelir`
command, whose `--version` and `--help` need none of it) does not load gRPC, aiohttp, protobuf and OpenTelemetry.
`_EXPORTS` is the table; the `TYPE_CHECKING` imports say the same to type checkers and editors (a test holds the
two equal). A submodule (`modelir.pipeline`, ...) is imported on first attribute access too.
"""

# The TYPE_CHECKING imports exist for type checkers only: ruff cannot tell that `__all__` (built from `_EXPORTS`)
# re-exports them.
# ruff: noqa: F401

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modelir.connect import Connection, connect
    from modelir.errors import (
        ConstraintViolatedError,
        DeadlineExceededError,
        ForeignArtifactError,
        InvalidRequestError,
        ModelError,
        ProviderUnavailableError,
        RateLimitedError,
        TruncatedStreamError,
        UnknownModelError,
        UnsupportedCapabilityError,
    )
    from modelir.http.executor import Executor
    from modelir.http.retry import RetryPolicy
    from modelir.interface import ModelInterface, Score
    from modelir.limiter import Limiter
    from modelir.logprobs.build import bits_per_byte
    from modelir.model import Model
    from modelir.pipeline.capabilities import requirements, unsupported
    from modelir.pipeline.needs import Needs, needs
    from modelir.reading.classification import Classification, aclassify, classify
    from modelir.reading.raw import raw_json, raw_typed
    from modelir.reading.trajectory import (
        Trajectory,
        TrajectoryDriftError,
        TrajectoryError,
        trajectory,
        trajectory_from_records,
    )
    from modelir.reading.view import LogprobArrays, ResponseView, view
    from modelir.records.recording import arecorded, record_of, recorded
    from modelir.remote import RemoteModel
    from modelir.streams.fold import StreamAccumulator, accumulate
    from modelir.transports.reference import ReferenceModel
    from modelir.v1.capabilities_pb2 import Capability, CapabilityManifest
    from modelir.v1.content_pb2 import Message, Part
    from modelir.v1.request_pb2 import Request
    from modelir.v1.response_pb2 import Response
    from modelir.v1.stream_pb2 import StreamEvent
    from modelir.version import IR_VERSION, SDK_VERSION, IncompatibleServerError
    from modelir.writing import ArgumentError, chat_message, image, tool, tool_result
    from modelir.writing.builder import RequestOptions, build_request, message

# Where each public name lives: module -> names.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "modelir.connect": ("Connection", "connect"),
    "modelir.errors": (
        "ConstraintViolatedError",
        "DeadlineExceededError",
        "ForeignArtifactError",
        "InvalidRequestError",
        "ModelError",
        "ProviderUnavailableError",
        "RateLimitedError",
        "TruncatedStreamError",
        "UnknownModelError",
        "UnsupportedCapabilityError",
    ),
    "modelir.http.executor": ("Executor",),
    "modelir.http.retry": ("RetryPolicy",),
    "modelir.interface": ("ModelInterface", "Score"),
    "modelir.limiter": ("Limiter",),
    "modelir.logprobs.build": ("bits_per_byte",),
    "modelir.model": ("Model",),
    "modelir.pipeline.capabilities": ("requirements", "unsupported"),
    "modelir.pipeline.needs": ("Needs", "needs"),
    "modelir.reading.classification": ("Classification", "aclassify", "classify"),
    "modelir.reading.raw": ("raw_json", "raw_typed"),
    "modelir.reading.trajectory": (
        "Trajectory",
        "TrajectoryDriftError",
        "TrajectoryError",
        "trajectory",
        "trajectory_from_records",
    ),
    "modelir.reading.view": ("LogprobArrays", "ResponseView", "view"),
    "modelir.records.recording": ("arecorded", "record_of", "recorded"),
    "modelir.remote": ("RemoteModel",),
    "modelir.streams.fold": ("StreamAccumulator", "accumulate"),
    "modelir.transports.reference": ("ReferenceModel",),
    "modelir.v1.capabilities_pb2": ("Capability", "CapabilityManifest"),
    "modelir.v1.content_pb2": ("Message", "Part"),
    "modelir.v1.request_pb2": ("Request",),
    "modelir.v1.response_pb2": ("Response",),
    "modelir.v1.stream_pb2": ("StreamEvent",),
    "modelir.version": ("IR_VERSION", "SDK_VERSION", "IncompatibleServerError"),
    "modelir.writing": ("ArgumentError", "chat_message", "image", "tool", "tool_result"),
    "modelir.writing.builder": ("RequestOptions", "build_request", "message"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """The package, keeping a public name when a submodule of the same name is imported: importing `modelir.connect`
    sets the attribute `connect` of the package to the module, and `modelir.connect` is the function (as it was when
    this file imported every name eagerly, binding the function after the module)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _MODULE_OF.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
