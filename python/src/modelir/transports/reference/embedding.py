"""The reference model's embeddings (IR 1.1): a deterministic vector that is a real function of the input's tokens.

Each token id has a fixed vector of `DIMENSIONS` components, multiples of 1/16 in [-1, 1), drawn once from a fixed
seed (as the bigram table is); an input's vector is the sum of its tokens' vectors (sum pooling), with BOS first
for a text (its UTF-8 bytes), as engines add their special tokens. A sum of at most `MAX_INPUT_TOKENS` such vectors
is a multiple of 1/16 below 512 in size: exact in float32, and short enough in decimal (at most 7 significant
digits) that Python, Go, protobuf-es and Rust all print it as the same exact number. The
defaults are the unscaled sum and no truncation (an over-long input fails, `INVALID_REQUEST`); `L2` scales the sum
to unit length, `END` keeps an input's first `MAX_INPUT_TOKENS` tokens, and `dimension_count` keeps the first
components (at most `DIMENSIONS`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from modelir import errors
from modelir.transports.embedding import L2, unit_length
from modelir.transports.reference.vocabulary import BOS, VOCAB, token_ids
from modelir.v1 import embedding_pb2, errors_pb2

DIMENSIONS = 16
MAX_INPUT_TOKENS = 512
_SEED = 20261203
_STEP = 1 / 16


@lru_cache(maxsize=1)
def token_vectors() -> np.ndarray:
    """`vectors[token]`: each token's fixed vector, multiples of 1/16 in [-1, 1) (float64, read-only)."""
    rng = np.random.Generator(np.random.PCG64(_SEED))
    vectors: np.ndarray = rng.integers(-16, 16, size=(VOCAB, DIMENSIONS)).astype(np.float64) * _STEP
    vectors.setflags(write=False)
    return vectors


def problems(request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
    """What the reference model cannot honour: more dimensions than it has, token ids outside its vocabulary."""
    found = []
    if request.HasField("dimension_count") and request.dimension_count > DIMENSIONS:
        found.append(("dimension_count", f"The reference model's vectors have {DIMENSIONS} components."))
    for i, one in enumerate(request.inputs):
        if outside := sorted({t for t in one.token_ids.ids if not 0 <= t < VOCAB}):
            found.append(
                (f"inputs[{i}].token_ids", f"The reference vocabulary has ids 0 to {VOCAB - 1}, not {outside[:5]}.")
            )
    return found


def embed(request: embedding_pb2.EmbedRequest, model: str) -> embedding_pb2.EmbedResponse:
    """The embeddings of a checked request."""
    out = embedding_pb2.EmbedResponse(model=model)
    keep = request.dimension_count if request.HasField("dimension_count") else DIMENSIONS
    too_long = []
    for index, one in enumerate(request.inputs):
        ids = [BOS, *token_ids(one.text)] if one.WhichOneof("content") == "text" else list(one.token_ids.ids)
        truncated = len(ids) > MAX_INPUT_TOKENS
        if truncated and request.truncation != embedding_pb2.EMBED_TRUNCATION_END:
            too_long.append(index)
            continue
        ids = ids[:MAX_INPUT_TOKENS]
        values = token_vectors()[ids].sum(axis=0)[:keep].tolist()
        embedded = out.embeddings.add(index=index, input_token_count=len(ids), truncated=truncated)
        embedded.values.extend(unit_length(values) if request.normalization == L2 else values)
        out.usage.input_token_count += len(ids)
    if too_long:
        raise errors.InvalidRequestError(
            errors_pb2.FieldViolation(
                field=f"inputs[{i}]",
                description=f"The input has more than the reference model's {MAX_INPUT_TOKENS} tokens; "
                "truncation END keeps its start.",
            )
            for i in too_long
        )
    return out
