"""A call's tokens-per-minute charge: estimated before the call, settled from the usage the provider reports."""

from __future__ import annotations

from modelir.limiter.base import BaseLimiter
from modelir.v1 import request_pb2, response_pb2


def estimate_tokens(request: request_pb2.Request) -> int:
    """A rough token estimate for the tokens-per-minute budget: a quarter of the request's bytes plus the output
    it may ask for. `settle_tokens` corrects the charge from the usage the provider reports afterwards."""
    size = request.ByteSize()
    out = request.sampling.max_output_tokens if request.sampling.HasField("max_output_tokens") else 256
    return size // 4 + out * max(1, request.sampling.choice_count)


def settle_tokens(limiter: BaseLimiter, estimate: int, usage: response_pb2.Usage) -> None:
    """Correct the limiter's token budget from the usage the provider reported (nothing when it reported none)."""
    if usage.HasField("input_token_count") or usage.HasField("output_token_count"):
        limiter.settle_tokens(estimate, usage.input_token_count + usage.output_token_count)
