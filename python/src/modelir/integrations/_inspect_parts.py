"""How modelir parts ride inside Inspect's messages, so that a later turn replays them byte for byte.

A reasoning part travels in `ContentReasoning.signature` (after `SIGNATURE_PREFIX`), a text part's artifacts in
`ContentText.internal[PART_KEY]`, a tool call's in the assistant message's `metadata[TOOL_CALL_PARTS_KEY]`.
"""

from __future__ import annotations

import base64

from modelir import errors
from modelir.v1 import content_pb2, errors_pb2

SIGNATURE_PREFIX = "modelir:"
PART_KEY = "modelir_part"
TOOL_CALL_PARTS_KEY = "modelir_tool_call_parts"


def encode_part(part: content_pb2.Part) -> str:
    return base64.b64encode(part.SerializeToString(deterministic=True)).decode()


def decode_part(encoded: str, where: str) -> content_pb2.Part:
    try:
        return content_pb2.Part.FromString(base64.b64decode(encoded, validate=True))
    except ValueError as exc:  # binascii.Error and protobuf's DecodeError are both ValueErrors
        raise errors.InvalidRequestError(
            [errors_pb2.FieldViolation(field=where, description=f"not a modelir part as modelir wrote it: {exc}")]
        ) from None
