"""What a request needs, and the fail-closed check of those needs against a capability manifest.

`requirements(request)` derives every capability and limit a request uses; `unsupported(request, manifest)`
compares them with a manifest and lists *every* gap. A transport never sees a request that uses a feature its
manifest does not claim, so no field can be silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from modelir.pipeline import content_kinds
from modelir.pipeline.survey import Survey, place, survey
from modelir.v1 import capabilities_pb2, content_pb2, errors_pb2, logprobs_pb2, request_pb2, service_pb2


@dataclass(slots=True)
class Requirements:
    """The capabilities, limits, dialects and provider option keys a request uses."""

    capabilities: set[capabilities_pb2.Capability.ValueType] = field(default_factory=set)
    # Limit name (as in ModelLimits) -> the largest value the request asks for.
    limits: dict[str, int] = field(default_factory=dict)
    grammar_dialect: request_pb2.GrammarDialect.ValueType | None = None
    # Transport -> the provider option keys the request gives it (one entry per transport; `unsupported` checks
    # only the entry of the manifest's transport, so one portable request can carry options for several).
    provider_option_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # (transport, type) of each provider tool.
    provider_tools: list[tuple[str, str]] = field(default_factory=list)
    # (place, media type) of each blob part.
    media_types: list[tuple[str, str]] = field(default_factory=list)
    # The reasoning budget asked for, checked against the manifest's minimum.
    reasoning_budget: int = 0
    # What the request holds that no capability names and no model can run (unknown content kinds).
    reasons: list[str] = field(default_factory=list)

    def use_limit(self, name: str, value: int) -> None:
        self.limits[name] = max(value, self.limits.get(name, 0))

    def sorted_capabilities(self) -> list[capabilities_pb2.Capability.ValueType]:
        return sorted(self.capabilities)


def requirements(request: request_pb2.Request, *, streaming: bool = False, seen: Survey | None = None) -> Requirements:
    """Derive everything `request` needs from a model. Assumes the request passed `validate_request`; `seen` is
    its `survey`, when the caller has made it already."""
    req = Requirements()
    need = req.capabilities.add
    if streaming:
        need(capabilities_pb2.CAPABILITY_STREAMING)
    if seen is None:
        seen = survey(request)
    present = seen.present  # what the request sets: a need of a field it does not set is skipped, not asked

    input_kind = request.WhichOneof("input")
    if input_kind == "prompt":
        need(capabilities_pb2.CAPABILITY_COMPLETION)
    elif input_kind == "conversation":
        need(capabilities_pb2.CAPABILITY_CHAT)
        _conversation_needs(seen, req)
    elif input_kind == "token_ids":
        need(capabilities_pb2.CAPABILITY_TOKEN_INPUT)

    if seen.sampling:
        _sampling_needs(seen.sampling, req)

    if "tools" in present:
        for tool in request.tools:
            if tool.WhichOneof("kind") == "provider":
                need(capabilities_pb2.CAPABILITY_PROVIDER_TOOLS)
                req.provider_tools.append((tool.provider.transport, tool.provider.type))
            else:
                need(capabilities_pb2.CAPABILITY_TOOLS)
    if "tool_choice" in present:
        choice = request.tool_choice.WhichOneof("choice")
        if choice == "tool_name" or (
            choice == "mode" and request.tool_choice.mode == request_pb2.TOOL_CHOICE_MODE_REQUIRED
        ):
            need(capabilities_pb2.CAPABILITY_TOOL_CHOICE)
        elif choice == "allowed_tools":
            need(capabilities_pb2.CAPABILITY_ALLOWED_TOOLS)
            if request.tool_choice.allowed_tools.mode == request_pb2.TOOL_CHOICE_MODE_REQUIRED:
                need(capabilities_pb2.CAPABILITY_TOOL_CHOICE)
    if "output_modalities" in present:
        for modality in request.output_modalities:
            if modality in _OUTPUT_CAPABILITY:
                need(_OUTPUT_CAPABILITY[modality])
    if "cached_content" in present:
        need(capabilities_pb2.CAPABILITY_CACHED_CONTENT)
    if "service_tier" in present:
        need(capabilities_pb2.CAPABILITY_SERVICE_TIER)
    if "priority" in present:
        need(capabilities_pb2.CAPABILITY_PRIORITY)
    if "adapter" in present:
        need(capabilities_pb2.CAPABILITY_ADAPTERS)

    if "reasoning_controls" in present:
        need(capabilities_pb2.CAPABILITY_REASONING)
        amount = request.reasoning_controls.WhichOneof("amount")
        if amount == "effort":
            need(capabilities_pb2.CAPABILITY_REASONING_EFFORT)
            if request.reasoning_controls.effort == request_pb2.REASONING_EFFORT_XHIGH:
                need(capabilities_pb2.CAPABILITY_REASONING_EFFORT_XHIGH)
        elif amount == "budget_tokens":
            need(capabilities_pb2.CAPABILITY_REASONING_BUDGET)
            req.use_limit("max_reasoning_budget_tokens", request.reasoning_controls.budget_tokens)
            req.reasoning_budget = request.reasoning_controls.budget_tokens
        if request.reasoning_controls.summary:
            need(capabilities_pb2.CAPABILITY_REASONING_SUMMARY)

    if "constraint" in present:
        kind = request.constraint.WhichOneof("kind")
        if kind is not None:
            need(_CONSTRAINT_CAPABILITY[kind])
            if kind == "grammar":
                req.grammar_dialect = request.constraint.grammar.dialect

    if "prefill" in present:
        need(capabilities_pb2.CAPABILITY_PREFILL)
    if "fim" in present:
        need(capabilities_pb2.CAPABILITY_FIM)
    if "logprob_options" in present:
        need(capabilities_pb2.CAPABILITY_SAMPLED_LOGPROBS)
        if request.logprob_options.require_token_ids:
            need(capabilities_pb2.CAPABILITY_SAMPLED_TOKEN_IDS)
        if request.logprob_options.top_logprob_count > 0:
            need(capabilities_pb2.CAPABILITY_TOP_K_LOGPROBS)
            req.use_limit("max_top_logprobs", request.logprob_options.top_logprob_count)
    if "input_scoring" in present:
        need(capabilities_pb2.CAPABILITY_INPUT_SCORING)
        if request.input_scoring.top_logprob_count > 0:
            need(capabilities_pb2.CAPABILITY_TOP_K_LOGPROBS)
            req.use_limit("max_top_logprobs", request.input_scoring.top_logprob_count)
    if "provider_options" in present:
        _provider_option_needs(request.provider_options, req)
    return req


def _sampling_needs(sampling: dict[str, Any], req: Requirements) -> None:
    """What the sampling fields set (`Survey.sampling`) need."""
    need = req.capabilities.add
    for name in sampling:
        if (capability := _SAMPLING_CAPABILITY.get(name)) is not None:
            need(capability)
    if (max_output_tokens := sampling.get("max_output_tokens")) is not None:
        req.use_limit("max_output_tokens", max_output_tokens)
    if stop := sampling.get("stop"):
        need(capabilities_pb2.CAPABILITY_STOP_SEQUENCES)
        req.use_limit("max_stop_sequences", len(stop))
    if "stop_token_ids" in sampling:
        need(capabilities_pb2.CAPABILITY_STOP_TOKEN_IDS)
    if (choice_count := sampling.get("choice_count", 0)) > 1:
        need(capabilities_pb2.CAPABILITY_MULTIPLE_CHOICES)
        req.use_limit("max_choices", choice_count)
    if "logit_bias" in sampling:
        need(capabilities_pb2.CAPABILITY_LOGIT_BIAS)
    if "min_output_tokens" in sampling:
        need(capabilities_pb2.CAPABILITY_MIN_OUTPUT_TOKENS)


def _provider_option_needs(entries: Iterable[content_pb2.ProviderOptions], req: Requirements) -> None:
    for entry in entries:
        options = orjson.loads(entry.options_json or b"{}")
        keys = tuple(sorted(options)) if isinstance(options, dict) else ()
        req.provider_option_keys[entry.transport] = tuple(
            sorted({*req.provider_option_keys.get(entry.transport, ()), *keys})
        )


# The sampling fields whose presence needs a capability of its own.
_SAMPLING_CAPABILITY = {
    "temperature": capabilities_pb2.CAPABILITY_TEMPERATURE,
    "top_p": capabilities_pb2.CAPABILITY_TOP_P,
    "top_k": capabilities_pb2.CAPABILITY_TOP_K_SAMPLING,
    "min_p": capabilities_pb2.CAPABILITY_MIN_P,
    "max_output_tokens": capabilities_pb2.CAPABILITY_MAX_OUTPUT_TOKENS,
    "seed": capabilities_pb2.CAPABILITY_SEED,
    "presence_penalty": capabilities_pb2.CAPABILITY_PRESENCE_FREQUENCY_PENALTIES,
    "frequency_penalty": capabilities_pb2.CAPABILITY_PRESENCE_FREQUENCY_PENALTIES,
    "repetition_penalty": capabilities_pb2.CAPABILITY_REPETITION_PENALTY,
}
_OUTPUT_CAPABILITY = {
    request_pb2.MODALITY_IMAGE: capabilities_pb2.CAPABILITY_IMAGE_OUTPUT,
    request_pb2.MODALITY_AUDIO: capabilities_pb2.CAPABILITY_AUDIO_OUTPUT,
}
# A blob's capability follows its media type's top-level type; anything else (PDF, plain text) is a document.
_MEDIA_CAPABILITY = {
    "image": capabilities_pb2.CAPABILITY_IMAGE_INPUT,
    "audio": capabilities_pb2.CAPABILITY_AUDIO_INPUT,
    "video": capabilities_pb2.CAPABILITY_VIDEO_INPUT,
}


def blob_capability(mime_type: str) -> capabilities_pb2.Capability.ValueType:
    """The input capability a blob of this media type needs."""
    return _MEDIA_CAPABILITY.get(mime_type.partition("/")[0].lower(), capabilities_pb2.CAPABILITY_DOCUMENT_INPUT)


def media_type_accepted(mime_type: str, accepted: Iterable[str]) -> bool:
    """Whether `mime_type` matches one of the manifest's `input_media_types` (exact, or `type/*`)."""
    mime = mime_type.lower()
    return any(a == mime or (a.endswith("/*") and mime.startswith(a[:-1])) for a in accepted)


_CONSTRAINT_CAPABILITY = {
    "choice": capabilities_pb2.CAPABILITY_CONSTRAINT_CHOICE,
    "regex": capabilities_pb2.CAPABILITY_CONSTRAINT_REGEX,
    "json_schema": capabilities_pb2.CAPABILITY_CONSTRAINT_JSON_SCHEMA,
    "grammar": capabilities_pb2.CAPABILITY_CONSTRAINT_GRAMMAR,
    "json_object": capabilities_pb2.CAPABILITY_CONSTRAINT_JSON_OBJECT,
}


def _conversation_needs(seen: Survey, req: Requirements) -> None:
    add = req.capabilities.add
    if seen.system:
        add(capabilities_pb2.CAPABILITY_SYSTEM_MESSAGES)
    if seen.token_turns:
        add(capabilities_pb2.CAPABILITY_MULTI_TURN_TOKEN_INPUT)
    if seen.cache_breakpoints:
        add(capabilities_pb2.CAPABILITY_PROMPT_CACHE_BREAKPOINTS)
    if seen.artifacts:
        add(capabilities_pb2.CAPABILITY_REASONING)
    for _, _, _, entries in seen.provider_options:
        _provider_option_needs(entries, req)
    kinds = content_kinds.KINDS
    for i, message in enumerate(seen.messages):
        for j, k, part, name, _ in message.parts:
            if name is None:
                continue
            kind = kinds.get(name)
            if kind is None:
                # Fail closed: a kind this SDK does not know cannot be checked, so it cannot be sent.
                req.reasons.append(f"The content kind {name!r} is not known ({place(i, j, k)}).")
            elif name == "blob":
                add(blob_capability(part.blob.mime_type))
                req.media_types.append((place(i, j, k), part.blob.mime_type))
            elif kind.capability:
                add(kind.capability)


def unsupported(
    request: request_pb2.Request,
    manifest: capabilities_pb2.CapabilityManifest,
    *,
    model: str = "",
    streaming: bool = False,
    extra_reasons: Iterable[str] = (),
    seen: Survey | None = None,
    have: frozenset[int] | None = None,
) -> errors_pb2.UnsupportedCapabilities | None:
    """Everything `request` needs that `manifest` lacks, or None when the model can run it (`seen`: its `survey`,
    when the caller has made it already; `have`: the manifest's capabilities as a set, when the caller keeps one)."""
    if seen is None:
        seen = survey(request)
    req = requirements(request, streaming=streaming, seen=seen)
    if have is None:
        have = frozenset(manifest.capabilities)
    missing = [c for c in req.sorted_capabilities() if c not in have]
    violations = []
    for name, value in sorted(req.limits.items()):
        allowed = getattr(manifest.limits, name)
        if allowed and value > allowed:
            violations.append(errors_pb2.LimitViolation(limit=name, allowed=allowed, requested=value))
    reasons = list(req.reasons)
    if (
        req.grammar_dialect is not None
        and capabilities_pb2.CAPABILITY_CONSTRAINT_GRAMMAR in have
        and req.grammar_dialect not in manifest.grammar_dialects
    ):
        dialect = request_pb2.GrammarDialect.Name(req.grammar_dialect)
        reasons.append(f"The grammar dialect {dialect} is not accepted.")
    basis = (
        request.logprob_options.basis if "logprob_options" in seen.present else logprobs_pb2.LOGPROB_BASIS_UNSPECIFIED
    )
    if basis and basis not in manifest.logprob_bases:
        name = logprobs_pb2.LogprobBasis.Name(basis)
        reasons.append(f"This model cannot report logprobs with basis {name}.")
    if capabilities_pb2.CAPABILITY_PROVIDER_TOOLS in have:
        for transport, tool_type in req.provider_tools:
            if transport != manifest.transport:
                reasons.append(f"The provider tool {tool_type!r} is for {transport!r}, not {manifest.transport!r}.")
            elif tool_type not in manifest.provider_tool_types:
                reasons.append(f"The provider tool type {tool_type!r} is not accepted.")
    if req.media_types and manifest.input_media_types:
        for place, mime in req.media_types:
            if not media_type_accepted(mime, manifest.input_media_types):
                reasons.append(f"The media type {mime!r} is not accepted ({place}).")
    least = manifest.limits.min_reasoning_budget_tokens if req.reasoning_budget else 0
    if least and req.reasoning_budget < least:
        violations.append(
            errors_pb2.LimitViolation(
                limit="min_reasoning_budget_tokens", allowed=least, requested=req.reasoning_budget
            )
        )
    keys = req.provider_option_keys.get(manifest.transport)
    if keys is not None:  # entries for other transports are ignored: they are for fallbacks
        if capabilities_pb2.CAPABILITY_PROVIDER_OPTIONS not in have:
            missing = sorted({*missing, capabilities_pb2.CAPABILITY_PROVIDER_OPTIONS})
        elif unknown := [k for k in keys if k not in manifest.provider_option_keys]:
            reasons.append(f"Unknown provider option keys for {manifest.transport}: {', '.join(unknown)}.")
    reasons.extend(extra_reasons)
    if not (missing or violations or reasons):
        return None
    return errors_pb2.UnsupportedCapabilities(
        model=model or request.model, missing=missing, limit_violations=violations, reasons=reasons
    )


def narrow(manifest: capabilities_pb2.CapabilityManifest, remove: Iterable[int]) -> capabilities_pb2.CapabilityManifest:
    """A copy of `manifest` without the given capabilities (configuration can narrow, never widen)."""
    removed = set(remove)
    narrowed = capabilities_pb2.CapabilityManifest()
    narrowed.CopyFrom(manifest)
    del narrowed.capabilities[:]
    narrowed.capabilities.extend(c for c in manifest.capabilities if c not in removed)
    return narrowed


def tokenize_missing(
    request: service_pb2.TokenizeRequest | None, manifest: capabilities_pb2.CapabilityManifest
) -> list[capabilities_pb2.Capability.ValueType]:
    """The capabilities a tokenize request (None: detokenize) needs that `manifest` lacks."""
    need = [capabilities_pb2.CAPABILITY_TOKENIZE]
    if request is not None and request.WhichOneof("input") == "conversation":
        need.append(capabilities_pb2.CAPABILITY_TOKENIZE_CONVERSATION)
    return [c for c in need if c not in manifest.capabilities]


def embed_missing(manifest: capabilities_pb2.CapabilityManifest) -> list[capabilities_pb2.Capability.ValueType]:
    """The capabilities an `Embed` request needs that `manifest` lacks (IR 1.1)."""
    return [c for c in (capabilities_pb2.CAPABILITY_EMBEDDINGS,) if c not in manifest.capabilities]
