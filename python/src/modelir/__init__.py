"""modelir: a schema-first, versioned intermediate representation (IR) for talking to language models.

The one primitive is `Model.arun(Request) -> Response`; everything else is sugar over it. Generated message
classes live in `modelir.v1`; the most used ones are re-exported here.
"""

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
from modelir.version import IR_VERSION, SDK_VERSION
from modelir.writing import ArgumentError, chat_message, image, tool, tool_result
from modelir.writing.builder import build_request, message

__all__ = [
    "IR_VERSION",
    "SDK_VERSION",
    "Capability",
    "CapabilityManifest",
    "Classification",
    "ConstraintViolatedError",
    "DeadlineExceededError",
    "Executor",
    "ForeignArtifactError",
    "InvalidRequestError",
    "Limiter",
    "Message",
    "Model",
    "ModelError",
    "ModelInterface",
    "Part",
    "ProviderUnavailableError",
    "RateLimitedError",
    "ReferenceModel",
    "RemoteModel",
    "Request",
    "Response",
    "RetryPolicy",
    "Score",
    "StreamAccumulator",
    "StreamEvent",
    "TruncatedStreamError",
    "UnknownModelError",
    "UnsupportedCapabilityError",
    "accumulate",
    "aclassify",
    "bits_per_byte",
    "build_request",
    "classify",
    "message",
    "requirements",
    "unsupported",
]
# The SDK layer over the messages (reading, writing, connecting, needs, raw, records).
__all__ += ["ArgumentError", "Connection", "LogprobArrays", "Needs", "ResponseView", "arecorded", "chat_message"]
__all__ += ["connect", "image", "needs", "raw_json", "raw_typed", "record_of", "recorded", "tool", "tool_result"]
__all__ += ["view"]
