"""`apply`: `build_request`'s extra keywords set on a `Request`, with reasoning, stops and sampling values."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

import orjson

from modelir.v1 import logprobs_pb2, request_pb2
from modelir.writing.arguments import ArgumentError, enum_value, unknown_keyword
from modelir.writing.content import chat_message
from modelir.writing.names import short_names
from modelir.writing.tools import ToolLike, tool_choice, tools


def reasoning(
    amount: str | int | None = None,
    *,
    summary: str | None = None,
    include_thoughts: bool = False,
    field: str = "reasoning",
) -> request_pb2.ReasoningControls:
    """Reasoning controls: an effort by name (`"low"`, `"high"`, ...) or a token budget as an int."""
    out = request_pb2.ReasoningControls(include_thoughts=include_thoughts)
    if isinstance(amount, bool):
        raise ArgumentError(field, "an effort name or a token budget (int)", amount)
    if isinstance(amount, int):
        if amount < 1:
            raise ArgumentError(field, "a positive token budget", amount)
        out.budget_tokens = amount
    elif isinstance(amount, str):
        out.effort = enum_value(request_pb2.ReasoningEffort, amount, field=field)
    elif amount is not None:
        efforts = ", ".join(map(repr, short_names(request_pb2.ReasoningEffort)))
        raise ArgumentError(field, f"an effort ({efforts}) or a token budget (int)", amount)
    if summary is not None:
        out.summary = enum_value(request_pb2.ReasoningSummary, summary, field=f"{field}_summary")
    return out


def stop_sequences(stop: str | Sequence[str] | None, *, field: str = "stop") -> list[str]:
    """`stop` as a list: one string is one stop sequence (never its characters)."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, Sequence) or not all(isinstance(s, str) and s for s in stop):
        raise ArgumentError(field, "a non-empty string or a list of non-empty strings", stop)
    return list(stop)


_SAMPLING_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "temperature": ((int, float), "a number, 0 or more"),
    "top_p": ((int, float), "a number in (0, 1]"),
    "top_k": (int, "a whole number, 1 or more"),
    "min_p": ((int, float), "a number in [0, 1]"),
    "max_output_tokens": (int, "a whole number, 0 or more"),
    "seed": (int, "a whole number"),
    "presence_penalty": ((int, float), "a number"),
    "frequency_penalty": ((int, float), "a number"),
    "repetition_penalty": ((int, float), "a positive number"),
}


def set_sampling(sampling: request_pb2.SamplingParams, name: str, value: Any) -> None:
    """Set one sampling field, raising `ArgumentError` naming it when the value is of the wrong kind."""
    kinds, expected = _SAMPLING_KINDS[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ArgumentError(name, expected, value)
    try:
        setattr(sampling, name, value)
    except (ValueError, TypeError):  # out of the field's integer range
        raise ArgumentError(name, expected + " that fits the field", value) from None


class ExtraOptions(TypedDict, total=False):
    """The keywords `build_request` (and so `chat`, `generate`, ...) takes beyond its own sampling ones: `apply`
    sets them. Each names an IR field; a wrong value raises `ArgumentError` naming the keyword."""

    system: str | None
    """A system prompt, put first in the conversation (needs `messages`)."""
    tools: Iterable[ToolLike] | ToolLike | None
    """Tools the model may call: typed functions, pydantic classes, JSON-schema dicts or `Tool`s."""
    tool_choice: str | ToolLike | request_pb2.ToolChoice | None
    """`"auto"`, `"none"`, `"required"`, or a declared tool (its name, function or `Tool`)."""
    reasoning: str | int | None
    """An effort by name (`"low"`, `"medium"`, `"high"`, ...) or a reasoning budget in tokens."""
    reasoning_summary: str | None
    """Ask for a reasoning summary (`"auto"`, `"concise"`, `"detailed"`)."""
    include_thoughts: bool
    """Return the reasoning text where the provider can."""
    min_p: float | None
    """Min-p sampling, in [0, 1]."""
    presence_penalty: float | None
    """The presence penalty."""
    frequency_penalty: float | None
    """The frequency penalty."""
    repetition_penalty: float | None
    """The repetition penalty (a positive factor; 1 is none)."""
    stop_token_ids: Sequence[int] | None
    """Token ids that end generation."""
    regex: str | None
    """Constrain the output to this regular expression."""
    grammar: tuple[str, str] | None
    """Constrain the output to a grammar: `(dialect, text)`, e.g. `("gbnf", "root ::= ...")`."""
    require_token_ids: bool
    """Refuse a model that cannot return the sampled token ids (RL)."""
    logprob_basis: str | None
    """Which distribution logprobs are read from (`"raw"`, `"processed"`, ...)."""
    foreign_artifact_policy: str | None
    """What to do with reasoning artifacts another model issued (`"reject"`, `"drop"`, ...)."""
    include_raw: bool
    """Keep the provider's raw exchange in `Response.raw`."""
    logit_bias: Mapping[int, float] | None
    """An additive bias per token id."""
    min_output_tokens: int | None
    """Generate at least this many tokens."""
    json_object: bool
    """Constrain the output to some JSON object (no schema)."""
    provider_tools: Iterable[request_pb2.ProviderTool | Mapping[str, Any]] | None
    """Tools the provider runs (web search, code execution): `ProviderTool`s or their dicts."""
    allowed_tools: Sequence[str] | None
    """Of the declared tools, only these may be called (with `tool_choice` `"auto"` or `"required"`)."""
    cache_breakpoint: bool | float | datetime.timedelta | None
    """Cache everything up to the last message part: `True`, or a lifetime (seconds or a timedelta)."""


#: The keywords `apply` (and so `build_request`) accepts beyond build_request's own.
EXTRA_KEYWORDS: tuple[str, ...] = tuple(ExtraOptions.__annotations__)


def apply(request: request_pb2.Request, **options: Any) -> request_pb2.Request:
    """Set the `EXTRA_KEYWORDS` on `request` (in place; returned for chaining)."""
    unknown = sorted(set(options) - set(EXTRA_KEYWORDS))
    if unknown:
        raise unknown_keyword(unknown[0], EXTRA_KEYWORDS, "modelir.writing.apply")
    get = options.get
    if get("system") is not None:
        if not isinstance(options["system"], str):
            raise ArgumentError("system", "the system prompt as a string", options["system"])
        if request.WhichOneof("input") != "conversation":
            raise ArgumentError("system", "messages= to go with it (a raw prompt has no system message)")
        request.conversation.messages.insert(0, chat_message("system", options["system"]))
    if get("tools"):
        request.tools.extend(tools(options["tools"]))
    if get("tool_choice") is not None:
        request.tool_choice.CopyFrom(tool_choice(options["tool_choice"], request.tools))
    if get("reasoning") is not None or get("reasoning_summary") is not None or get("include_thoughts"):
        request.reasoning_controls.CopyFrom(
            reasoning(
                get("reasoning"), summary=get("reasoning_summary"), include_thoughts=bool(get("include_thoughts"))
            )
        )
    for name in ("min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if get(name) is not None:
            set_sampling(request.sampling, name, options[name])
    if get("stop_token_ids"):
        ids = options["stop_token_ids"]
        if isinstance(ids, int) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ArgumentError("stop_token_ids", "a list of token ids (ints)", ids)
        request.sampling.stop_token_ids.extend(ids)
    if get("regex") is not None:
        request.constraint.regex = options["regex"]
    if get("grammar") is not None:
        grammar = options["grammar"]
        if not (isinstance(grammar, tuple) and len(grammar) == 2 and isinstance(grammar[1], str)):
            raise ArgumentError("grammar", "a (dialect, text) pair, e.g. ('gbnf', 'root ::= ...')", grammar)
        dialect = enum_value(request_pb2.GrammarDialect, grammar[0], field="grammar[0]")
        request.constraint.grammar.CopyFrom(request_pb2.Grammar(dialect=dialect, text=grammar[1]))
    if get("require_token_ids"):
        request.logprob_options.require_token_ids = True
    if get("logprob_basis") is not None:
        request.logprob_options.basis = enum_value(
            logprobs_pb2.LogprobBasis, options["logprob_basis"], field="logprob_basis"
        )
    if get("foreign_artifact_policy") is not None:
        request.foreign_artifact_policy = enum_value(
            request_pb2.ForeignArtifactPolicy, options["foreign_artifact_policy"], field="foreign_artifact_policy"
        )
    if get("include_raw"):
        request.include_raw = True
    _apply_v1(request, options)
    return request


def _apply_v1(request: request_pb2.Request, options: dict[str, Any]) -> None:
    """The keywords of the v1 fields: logit bias, a minimum output length, a JSON-object constraint, provider
    tools, allowed tools and a prompt-cache breakpoint."""
    get = options.get
    if get("logit_bias"):
        bias = options["logit_bias"]
        if not isinstance(bias, Mapping) or not all(
            isinstance(k, int) and not isinstance(k, bool) and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in bias.items()
        ):
            raise ArgumentError("logit_bias", "a mapping of token id (int) to an additive bias (number)", bias)
        for token, value in bias.items():
            request.sampling.logit_bias[token] = float(value)
    if get("min_output_tokens") is not None:
        value = options["min_output_tokens"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ArgumentError("min_output_tokens", "a non-negative number of tokens (int)", value)
        request.sampling.min_output_tokens = value
    if get("json_object"):
        if request.constraint.WhichOneof("kind") is not None:
            raise ArgumentError("json_object", "no other constraint beside it", request.constraint.WhichOneof("kind"))
        request.constraint.json_object.SetInParent()
    for spec in get("provider_tools") or ():
        request.tools.add(provider=provider_tool(spec))
    if get("allowed_tools"):
        names = options["allowed_tools"]
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise ArgumentError("allowed_tools", "a list of tool names", names)
        choice = get("tool_choice")
        if choice not in (None, "auto", "required"):
            raise ArgumentError("tool_choice", "'auto' or 'required' (or nothing) with allowed_tools", choice)
        mode = request_pb2.TOOL_CHOICE_MODE_REQUIRED if choice == "required" else request_pb2.TOOL_CHOICE_MODE_AUTO
        request.tool_choice.allowed_tools.CopyFrom(request_pb2.AllowedTools(tool_names=list(names), mode=mode))
    if get("cache_breakpoint") is not None and options["cache_breakpoint"] is not False:
        _set_cache_breakpoint(request, options["cache_breakpoint"])


def provider_tool(spec: Any) -> request_pb2.ProviderTool:
    """A `ProviderTool` from itself or a dict `{"transport", "type", "name"?, "config"?}` (config: a JSON object)."""
    if isinstance(spec, request_pb2.ProviderTool):
        return spec
    if not isinstance(spec, Mapping) or not spec.get("transport") or not spec.get("type"):
        raise ArgumentError(
            "provider_tools", 'a ProviderTool or {"transport": ..., "type": ..., "name"?: ..., "config"?: {...}}', spec
        )
    unknown = sorted(set(spec) - {"transport", "type", "name", "config"})
    if unknown:
        raise ArgumentError("provider_tools", f"only transport, type, name and config (not {unknown[0]!r})", spec)
    config = spec.get("config")
    if config is not None and not isinstance(config, Mapping):
        raise ArgumentError("provider_tools[].config", "a JSON object (a dict)", config)
    return request_pb2.ProviderTool(
        transport=spec["transport"],
        type=spec["type"],
        name=spec.get("name", ""),
        config_json=orjson.dumps(config).decode() if config else "",
    )


def _set_cache_breakpoint(request: request_pb2.Request, ttl: Any) -> None:
    """A cache breakpoint on the last part of the last message (everything before it is cached); `True` for the
    provider's default lifetime, or the lifetime in seconds or as a `timedelta`."""
    if request.WhichOneof("input") != "conversation" or not request.conversation.messages:
        raise ArgumentError("cache_breakpoint", "messages= to go with it (a breakpoint sits on a message part)")
    parts = request.conversation.messages[-1].parts
    if not parts:
        raise ArgumentError("cache_breakpoint", "a last message with at least one part")
    breakpoint_ = parts[-1].cache_breakpoint
    breakpoint_.SetInParent()
    if ttl is True:
        return
    if isinstance(ttl, datetime.timedelta):
        breakpoint_.ttl.FromTimedelta(ttl)
    elif isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and ttl > 0:
        breakpoint_.ttl.FromTimedelta(datetime.timedelta(seconds=ttl))
    else:
        raise ArgumentError("cache_breakpoint", "True, or a lifetime in seconds (> 0) or as a timedelta", ttl)
