"""What every embedding wire shares (IR 1.1): which `EmbedRequest` fields a wire honours, and the answer built once.

A wire declares what it does with each field as data (`EmbedSupport`): a value it cannot honour is refused before
any I/O, naming the field, never sent and silently ignored. The lifts share the vector decoding (JSON numbers, or
base64 of little-endian float32, which costs one decode instead of a float parse per component), the one L2
normalisation modelir does itself where a wire cannot but the result is exact, and the checks that every input got
one vector of the size asked for.
"""

from __future__ import annotations

import base64
import math
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from modelir import errors
from modelir.v1 import embedding_pb2, errors_pb2

NONE_TRUNCATION = embedding_pb2.EMBED_TRUNCATION_NONE
END_TRUNCATION = embedding_pb2.EMBED_TRUNCATION_END
NO_NORMALIZATION = embedding_pb2.EMBED_NORMALIZATION_NONE
L2 = embedding_pb2.EMBED_NORMALIZATION_L2
# The warning an answer carries when modelir scaled the vectors itself (`EmbedSupport.l2_by_modelir`).
NORMALIZED_BY_MODELIR = "normalized_by_modelir"
# The warning when a vector's length is not the `dimension_count` asked for (a model that cannot shorten).
DIMENSIONS_NOT_HONOURED = "dimension_count_not_honoured"


@dataclass(frozen=True, slots=True)
class EmbedSupport:
    """What one embedding wire does with each `EmbedRequest` field. `refused` maps (field, enum value) to why the
    wire cannot honour that value; `token_ids` and `dimension_count` are None when honoured, else why not."""

    wire: str
    refused: Mapping[tuple[str, int], str] = field(default_factory=lambda: MappingProxyType({}))
    token_ids: str | None = None
    dimension_count: str | None = None
    # Whether one call may mix text and token-id inputs (OpenAI's `input` is all strings or all token arrays).
    mixed_inputs: bool = True
    # L2 asked for, and the wire gives vectors of unknown scale: modelir scales them (exact up to float32 rounding).
    l2_by_modelir: bool = False

    def problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        """Every field of `request` this wire cannot honour, as (field, why)."""
        found = []
        for name in ("truncation", "normalization"):
            value = getattr(request, name)
            if (why := self.refused.get((name, value))) is not None:
                spelled = embedding_pb2.EmbedTruncation if name == "truncation" else embedding_pb2.EmbedNormalization
                found.append((name, f"{self.wire} cannot honour {spelled.Name(value)}: {why}"))
        if request.HasField("dimension_count") and self.dimension_count is not None:
            found.append(("dimension_count", f"{self.wire} cannot shorten vectors: {self.dimension_count}"))
        kinds = {i.WhichOneof("content") for i in request.inputs}
        if self.token_ids is not None:
            found += [
                (f"inputs[{i}].token_ids", f"{self.wire} embeds text only: {self.token_ids}")
                for i, one in enumerate(request.inputs)
                if one.WhichOneof("content") == "token_ids"
            ]
        elif not self.mixed_inputs and kinds == {"text", "token_ids"}:
            found.append(("inputs", f"{self.wire} takes texts or token arrays in one call, not both; send two calls"))
        return found


def wire_inputs(request: embedding_pb2.EmbedRequest) -> list[str | list[int]]:
    """The inputs as the OpenAI-style wires take them: a string per text, a list of ids per token input."""
    return [one.text if one.WhichOneof("content") == "text" else list(one.token_ids.ids) for one in request.inputs]


def base64_floats(text: str) -> array[float]:
    """A base64 vector of little-endian float32 (OpenAI's `encoding_format: base64`) as packed floats."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) % 4:
        raise ValueError(f"a base64 vector of {len(raw)} bytes is not a whole number of float32 values")
    values = array("f", raw)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def vector(value: object) -> Sequence[float]:
    """A vector as the wire sent it: a list of numbers, or a base64 string of float32."""
    if isinstance(value, str):
        return base64_floats(value)
    if isinstance(value, list) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        return value
    raise TypeError(f"a vector must be a list of numbers or a base64 string, not {type(value).__name__}")


def unit_length(values: Sequence[float]) -> list[float]:
    """`values` scaled to unit Euclidean length, computed in double precision (the float32 result is the exact
    scaling rounded once). A zero vector stays zero: it has no direction to keep."""
    norm = math.sqrt(math.fsum(v * v for v in values))
    return list(values) if norm == 0 else [v / norm for v in values]


def response(
    request: embedding_pb2.EmbedRequest,
    support: EmbedSupport,
    model: str,
    vectors: Iterable[tuple[int, Sequence[float]]],
    *,
    input_token_count: int | None = None,
) -> embedding_pb2.EmbedResponse:
    """The `EmbedResponse` from the wire's (index, vector) pairs: one per input, in input order, checked; scaled
    by modelir where `support` says; a warning for a vector whose size is not the one asked for."""
    out = embedding_pb2.EmbedResponse(model=model)
    by_index: dict[int, Sequence[float]] = {}
    for index, values in vectors:
        if index in by_index or not 0 <= index < len(request.inputs):
            raise errors.MalformedResponseError(
                f"{support.wire} answered a vector for input {index}, which is out of range or answered twice"
            )
        by_index[index] = values
    if len(by_index) != len(request.inputs):
        raise errors.MalformedResponseError(
            f"{support.wire} answered {len(by_index)} vectors for {len(request.inputs)} inputs"
        )
    scale = support.l2_by_modelir and request.normalization == L2
    for index in range(len(request.inputs)):
        values = by_index[index]
        out.embeddings.add(index=index).values.extend(unit_length(values) if scale else values)
    if scale:
        out.warnings.append(
            errors_pb2.Warning(
                code=NORMALIZED_BY_MODELIR,
                message=f"{NORMALIZED_BY_MODELIR}: {support.wire} does not say its vectors have unit length, so "
                "modelir scaled each to unit L2 length itself (in double precision, rounded once to float32)",
            )
        )
    if request.HasField("dimension_count"):
        sizes = sorted({len(e.values) for e in out.embeddings if len(e.values) != request.dimension_count})
        if sizes:
            out.warnings.append(
                errors_pb2.Warning(
                    code=DIMENSIONS_NOT_HONOURED,
                    message=f"{DIMENSIONS_NOT_HONOURED}: {request.dimension_count} dimensions were asked for, "
                    f"{support.wire} answered vectors of {', '.join(map(str, sizes))} (the model cannot shorten "
                    "its vectors to that size)",
                )
            )
    if input_token_count is not None:
        out.usage.input_token_count = input_token_count
    return out
