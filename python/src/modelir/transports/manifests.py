"""What transports write their manifests with: capability groups and names, and the manifest message.

A transport declares its manifest as class-level data (`Transport.capabilities`, `limits`, ...); `build` turns
that data into the `CapabilityManifest` message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelir.v1 import capabilities_pb2, logprobs_pb2, request_pb2

if TYPE_CHECKING:
    from modelir.transports.base import Transport


def capability_set(
    *claims: str | frozenset[capabilities_pb2.Capability.ValueType],
) -> frozenset[capabilities_pb2.Capability.ValueType]:
    """Capability groups, and capabilities by their catalog names without `CAPABILITY_` (space-separated; a
    misspelt name fails at import), as one set."""
    out: set[capabilities_pb2.Capability.ValueType] = set()
    for claim in claims:
        if isinstance(claim, str):
            out.update(capabilities_pb2.Capability.Value(f"CAPABILITY_{name}") for name in claim.split())
        else:
            out |= claim
    return frozenset(out)


# Capability groups that several wires claim together (a manifest is a union of groups and its own names).
COMMON = capability_set("TEMPERATURE TOP_P MAX_OUTPUT_TOKENS STREAMING PROVIDER_OPTIONS")
CHAT_WITH_TOOLS = capability_set("CHAT SYSTEM_MESSAGES IMAGE_INPUT TOOLS TOOL_CHOICE")
LOGPROBS = capability_set("SAMPLED_LOGPROBS TOP_K_LOGPROBS")
OPENAI_SAMPLING = capability_set("STOP_SEQUENCES SEED PRESENCE_FREQUENCY_PENALTIES")
ENGINE_SAMPLING = capability_set("TOP_K_SAMPLING MIN_P REPETITION_PENALTY")


def build(transport: Transport) -> capabilities_pb2.CapabilityManifest:
    """The manifest message of a transport's class-level data."""
    return capabilities_pb2.CapabilityManifest(
        transport=transport.name,
        transport_version=transport.version,
        capabilities=sorted(transport.capabilities),
        limits=transport.limits,
        grammar_dialects=[request_pb2.GrammarDialect.Value(f"GRAMMAR_DIALECT_{d}") for d in transport.grammar_dialects],
        provider_option_keys=transport.provider_option_keys,
        logprob_bases=[logprobs_pb2.LogprobBasis.Value(f"LOGPROB_BASIS_{b}") for b in transport.logprob_bases],
        input_media_types=transport.input_media_types,
        provider_tool_types=transport.provider_tool_types,
        output_modalities=[request_pb2.Modality.Value(f"MODALITY_{m}") for m in transport.output_modalities],
    )
