"""Checks that a request is well formed, whatever model it goes to. Capability checks live in `capabilities`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from modelir.errors import InvalidRequestError
from modelir.pipeline import content_kinds, limits
from modelir.pipeline.survey import Survey, survey
from modelir.v1 import content_pb2, errors_pb2, request_pb2


def field_violations(request: request_pb2.Request, seen: Survey | None = None) -> list[errors_pb2.FieldViolation]:
    """Every problem with the request's fields, as `FieldViolation`s (empty when it is well formed). `seen` is the
    request's `survey`, when the caller has made it already."""
    return [
        errors_pb2.FieldViolation(field=f, description=d)
        for f, d in _problems(request, survey(request) if seen is None else seen)
    ]


def validate_request(request: request_pb2.Request) -> None:
    """Raise `InvalidRequestError` naming every malformed field."""
    violations = field_violations(request)
    if violations:
        raise InvalidRequestError(violations)


def model_mismatch(request: request_pb2.Request, name: str) -> errors_pb2.FieldViolation | None:
    """The violation when `request.model` names a model other than `name` (the one it was sent to), else None.

    An empty `request.model` means "this model". A named other model is refused rather than run: running it would
    record a model that never ran, and a remote model could not honour it the same way.
    """
    if not request.model or not name or request.model == name:
        return None
    return errors_pb2.FieldViolation(
        field="model",
        description=(
            f"The request names the model {request.model!r}, but it was sent to the model {name!r}; "
            "leave `model` empty or send it to the model it names."
        ),
    )


def named_for(request: request_pb2.Request, name: str) -> request_pb2.Request:
    """`request` addressed to the model `name`: a copy with `model` filled when empty; refused when it names
    another model (`InvalidRequestError` on the field `model`). Local and remote models both go through it."""
    mismatch = model_mismatch(request, name)
    if mismatch is not None:
        raise InvalidRequestError([mismatch])
    if request.model:
        return request
    named = request_pb2.Request()
    named.CopyFrom(request)
    named.model = name
    return named


def _json_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


# The enums the spec documents as open (new values come in minor versions; a receiver tolerates one it does not
# know): every other enum a request carries is closed. `tests/test_unknown_enums.py` checks this against the
# comments of the `.proto` files, so a new enum is closed unless the spec says otherwise.
OPEN_ENUMS = frozenset(
    {
        "modelir.v1.Capability",
        "modelir.v1.MessagePhase",
        "modelir.v1.CitationKind",
        "modelir.v1.OpaqueArtifactKind",
        "modelir.v1.ErrorReason",
        "modelir.v1.Modality",
        "modelir.v1.GrammarDialect",
        "modelir.v1.FinishReason",
    }
)


def unknown_values(message: Message, path: str = "") -> Iterator[tuple[str, str]]:
    """Every value of a closed enum in `message` (and the messages it holds, at any depth) that this SDK does
    not know, and (IR 1.1 on) every field it does not know, named by its path. A newer client's value (a
    `ReasoningEffort` or `Role` added later) or field (an adapter, say) would otherwise be lowered as nothing,
    merged into another, or fail as an untyped error after the call was paid for. The descriptor is walked, so
    every enum field, present and future, is covered; what each field needs is worked out once per message type
    (`_enum_plan`), and a path is built only for what is reported."""
    found: list[tuple[str, str]] = []
    _collect_unknown(message, path or None, found)
    return iter(found)


# Where the walk is, as a chain built only when something is reported: None at the top (named by the `path` given
# to `unknown_values`, else `request`), a string for that `path`, or (the parent's, field name, index or key or
# None).
_Where = Any


def _path(where: _Where) -> str:
    """The field path of `where` (`conversation.messages[0].parts[1]`)."""
    if where is None:
        return ""
    if isinstance(where, str):
        return where
    parent, name, index = where
    above = _path(parent)
    named = f"{above}.{name}" if above else name
    return named if index is None else f"{named}[{index}]"


def _collect_unknown(
    message: Message, where: _Where, found: list[tuple[str, str]], listed: Sequence[tuple[Any, Any]] | None = None
) -> None:
    """`unknown_values`, appended to `found` (a plain recursion: nested generators cost more per message).
    `listed`: the message's `ListFields()`, when the caller has read it already."""
    unknown = UnknownFieldSet(message)
    if len(unknown):  # a newer client's field, which proto3 would otherwise drop without a word
        numbers = ", ".join(map(str, sorted({unknown[i].field_number for i in range(len(unknown))})))
        found.append(
            (
                _path(where) or "request",
                f"fields {numbers} of {message.DESCRIPTOR.name} are not fields this SDK knows (a newer client's, "
                "whose meaning it cannot honour).",
            )
        )
    plan = _PLANS.get(type(message))
    if plan is None:
        plan = _enum_plan(type(message))
    if not plan:  # no closed enum and no message below (sampling parameters): nothing more to look at
        return
    for field, value in message.ListFields() if listed is None else listed:
        step = plan.get(field)  # by the descriptor itself: `field.name` would make a string per field
        if step is None:
            continue  # a scalar, or an open enum
        action, known, enum, name = step
        if action == _MESSAGE:
            _collect_unknown(value, (where, name, None), found)
        elif action == _MESSAGES:
            for i, item in enumerate(value):
                _collect_unknown(item, (where, name, i), found)
        elif action == _MESSAGE_MAP:
            for key, item in value.items():
                _collect_unknown(item, (where, name, key), found)
        elif action == _ENUM:
            if value not in known:
                found.append(
                    (_path((where, name, None)), f"{value} is not a {enum} this SDK knows (a newer client's value?).")
                )
        else:  # repeated enum
            for i, number in enumerate(value):
                if number not in known:
                    found.append(
                        (
                            _path((where, name, i)),
                            f"{number} is not a {enum} this SDK knows (a newer client's value?).",
                        )
                    )


# What `unknown_values` does with a set field: check a closed enum (one value or each of a list), or enter a message
# (one, each of a list, each value of a map whose values are messages).
_ENUM, _ENUMS, _MESSAGE, _MESSAGES, _MESSAGE_MAP = range(5)
# Keyed by the field descriptors themselves, which the plan keeps alive (so `ListFields` hands back these objects).
_PLANS: dict[type, dict[Any, tuple[int, frozenset[int], str, str]]] = {}  # by descriptor, of either backend


def _enum_plan(message_type: type[Message]) -> dict[Any, tuple[int, frozenset[int], str, str]]:
    """Field -> (what to do, the known numbers and the name of its closed enum, the field's name) for the fields
    of `message_type` that `unknown_values` must look at; scalars, open enums and maps of scalars are left out."""
    plan = _PLANS.get(message_type)
    if plan is not None:
        return plan
    plan = {}
    for field in message_type.DESCRIPTOR.fields:
        if field.type == FieldDescriptor.TYPE_ENUM:
            enum = field.enum_type
            assert enum is not None  # an enum field always has its type
            if enum.full_name not in OPEN_ENUMS:
                action = _ENUMS if field.is_repeated else _ENUM
                plan[field] = (action, frozenset(enum.values_by_number), enum.name, field.name)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            held = field.message_type
            assert held is not None  # a message field always has its type
            if held.GetOptions().map_entry:
                if held.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
                    plan[field] = (_MESSAGE_MAP, frozenset(), "", field.name)
            else:
                plan[field] = (_MESSAGES if field.is_repeated else _MESSAGE, frozenset(), "", field.name)
    _PLANS[message_type] = plan
    return plan


def _problems(req: request_pb2.Request, seen: Survey) -> Iterator[tuple[str, str]]:
    unknown: list[tuple[str, str]] = []
    _collect_unknown(req, None, unknown, seen.fields or None)  # `unknown_values`, from the fields the survey read
    if unknown:  # the other checks would judge values this SDK cannot read: these alone say what is wrong
        yield from unknown
        return
    present = seen.present  # what the request sets: a check of a field it does not set is skipped, not asked
    input_kind = req.WhichOneof("input")
    if input_kind is None:
        yield "input", "Set one of prompt, conversation or token_ids."
    elif input_kind == "conversation":
        yield from _conversation_problems(seen)
    elif input_kind == "token_ids" and not req.token_ids.ids:
        yield "token_ids.ids", "Give at least one token id."
    if input_kind == "token_ids" and any(i < 0 for i in req.token_ids.ids):
        yield "token_ids.ids", "Token ids are never negative."

    if seen.sampling:
        yield from _sampling_problems(seen.sampling)

    if "tools" in present or "tool_choice" in present:
        yield from _tool_problems(req)

    if "reasoning_controls" in present:
        amount = req.reasoning_controls.WhichOneof("amount")
        if amount == "budget_tokens" and req.reasoning_controls.budget_tokens <= 0:
            yield "reasoning.budget_tokens", "A reasoning budget must be positive."
        if amount == "effort" and req.reasoning_controls.effort == request_pb2.REASONING_EFFORT_UNSPECIFIED:
            yield "reasoning.effort", "Give an effort level, or leave `amount` unset."

    if "constraint" in present:
        yield from _constraint_problems(req)

    if "fim" in present and input_kind != "prompt":
        yield "fim", "Fill-in-the-middle takes a raw prompt as its prefix."
    if "prefill" in present and input_kind != "conversation":
        yield "prefill", "A prefill continues an assistant turn, so it needs a conversation."
    if "logprob_options" in present and req.logprob_options.top_logprob_count < 0:
        yield "logprobs.top_k", "top_k is never negative."
    if "input_scoring" in present:
        scoring = req.input_scoring
        if scoring.top_logprob_count < 0:
            yield "input_scoring.top_k", "top_k is never negative."
        for i, span in enumerate(scoring.continuations):
            where, kind = f"input_scoring.continuations[{i}]", span.WhichOneof("content")
            if kind is None:
                yield where, "A continuation is text or token ids."
            if kind == "text" and input_kind == "token_ids":
                yield f"{where}.text", "Token input takes a continuation of token ids."
            if kind == "token_ids" and input_kind != "token_ids":
                yield f"{where}.token_ids", "Text input takes a continuation of text."
            if (kind == "text" and not span.text) or (kind == "token_ids" and not span.token_ids.ids):
                yield where, "An empty continuation has nothing to score."
    if "provider_options" in present:
        given: set[str] = set()
        for i, options in enumerate(req.provider_options):
            where = f"provider_options[{i}]"
            if not options.transport:
                yield f"{where}.transport", "Name the transport the options are for."
            elif options.transport in given:
                yield f"{where}.transport", f"Two entries for {options.transport!r}: give one per transport."
            given.add(options.transport)
            if not _json_object(options.options_json):
                yield f"{where}.options_json", "Provider options must be a JSON object."
    if "timeout" in present and (req.timeout.seconds < 0 or req.timeout.nanos < 0):
        yield "timeout", "A timeout is never negative."
    yield from limits.limit_problems(req, present)


def _tool_problems(req: request_pb2.Request) -> Iterator[tuple[str, str]]:
    functions = [t.function.name for t in req.tools if t.WhichOneof("kind") == "function"]
    names = functions + [t.provider.name or t.provider.type for t in req.tools if t.WhichOneof("kind") == "provider"]
    for i, tool in enumerate(req.tools):
        tool_kind = tool.WhichOneof("kind")
        if tool_kind is None:
            yield f"tools[{i}]", "A tool is a function tool or a provider tool."
        elif tool_kind == "provider":
            if not tool.provider.transport:
                yield f"tools[{i}].provider.transport", "Name the transport whose provider runs the tool."
            if not tool.provider.type:
                yield f"tools[{i}].provider.type", "Name the provider's tool type."
            if tool.provider.config_json and not _json_object(tool.provider.config_json):
                yield f"tools[{i}].provider.config_json", "The tool's configuration must be a JSON object."
        elif not tool.function.name:
            yield f"tools[{i}].function.name", "Every tool needs a name."
        elif functions.count(tool.function.name) > 1:
            yield f"tools[{i}].function.name", f"The tool name {tool.function.name!r} is declared more than once."
        elif tool.function.parameters_json_schema and not _json_object(tool.function.parameters_json_schema):
            yield f"tools[{i}].function.parameters_json_schema", "The parameters schema must be a JSON object."
    choice = req.tool_choice.WhichOneof("choice")
    if choice == "tool_name" and req.tool_choice.tool_name not in names:
        yield "tool_choice.tool_name", f"No tool named {req.tool_choice.tool_name!r} is declared."
    if choice == "allowed_tools":
        allowed = req.tool_choice.allowed_tools
        if not allowed.tool_names:
            yield "tool_choice.allowed_tools.tool_names", "Name at least one allowed tool."
        for j, name in enumerate(allowed.tool_names):
            if name not in names:
                yield f"tool_choice.allowed_tools.tool_names[{j}]", f"No tool named {name!r} is declared."
        if allowed.mode == request_pb2.TOOL_CHOICE_MODE_NONE:
            yield "tool_choice.allowed_tools.mode", "Allowed tools with mode NONE allow nothing: use mode NONE."
    if choice is not None and not req.tools:
        yield "tool_choice", "A tool choice needs declared tools."


def _sampling_problems(sampling: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The sampling fields' rules, read from the fields set (`Survey.sampling`): an optional field is there when
    set (0 included), any other when not its zero."""
    get = sampling.get
    if (temperature := get("temperature")) is not None and temperature < 0:
        yield "sampling.temperature", "The temperature is never negative."
    if (top_p := get("top_p")) is not None and not 0 < top_p <= 1:
        yield "sampling.top_p", "top_p lies in (0, 1]."
    if (top_k := get("top_k")) is not None and top_k < 1:
        yield "sampling.top_k", "top_k is at least 1."
    if (min_p := get("min_p")) is not None and not 0 <= min_p <= 1:
        yield "sampling.min_p", "min_p lies in [0, 1]."
    if (max_output_tokens := get("max_output_tokens")) is not None and max_output_tokens < 0:
        yield "sampling.max_output_tokens", "max_output_tokens is never negative."
    if get("choice_count", 0) < 0:
        yield "sampling.choice_count", "choice_count is never negative."
    for i, stop in enumerate(get("stop", ())):
        if not stop:
            yield f"sampling.stop[{i}]", "A stop string is never empty."
    if any(t < 0 for t in get("stop_token_ids", ())):
        yield "sampling.stop_token_ids", "Token ids are never negative."


def _constraint_problems(req: request_pb2.Request) -> Iterator[tuple[str, str]]:
    kind = req.constraint.WhichOneof("kind")
    if kind == "choice":
        labels = list(req.constraint.choice.labels)
        if len(set(labels)) < 2:
            yield "constraint.choice.labels", "A choice needs at least two distinct labels (one label is no choice)."
        elif len(set(labels)) != len(labels):
            yield "constraint.choice.labels", "Labels must be distinct."
        if any(not label for label in labels):
            yield "constraint.choice.labels", "A label is never empty."
    elif kind == "regex" and not req.constraint.regex:
        yield "constraint.regex", "The regular expression is empty."
    elif kind == "json_schema" and not _json_object(req.constraint.json_schema.schema_json):
        yield "constraint.json_schema.schema_json", "The schema must be a JSON object."
    elif kind == "grammar":
        if req.constraint.grammar.dialect == request_pb2.GRAMMAR_DIALECT_UNSPECIFIED:
            yield "constraint.grammar.dialect", "Name the grammar's dialect."
        if not req.constraint.grammar.text:
            yield "constraint.grammar.text", "The grammar is empty."


def _conversation_problems(seen: Survey) -> Iterator[tuple[str, str]]:
    if not seen.messages:
        yield "conversation.messages", "A conversation has at least one message."
    for i, message in enumerate(seen.messages):
        role = message.role
        if role == content_pb2.ROLE_UNSPECIFIED:
            yield f"conversation.messages[{i}].role", "Every message has a role."
        for j, k, part, kind, artifacts in message.parts:
            if k >= 0:
                continue  # a tool result's content: checked by the capability check, not here
            for path, description in content_kinds.kind_problems(part, kind, role):
                yield f"conversation.messages[{i}].parts[{j}]" + (f".{path}" if path else ""), description
            for n, artifact in enumerate(artifacts):
                if artifact.kind == content_pb2.OPAQUE_ARTIFACT_KIND_UNSPECIFIED:
                    yield f"conversation.messages[{i}].parts[{j}].artifacts[{n}].kind", "Every artifact has a kind."
                if not artifact.issuer.transport:
                    yield (
                        f"conversation.messages[{i}].parts[{j}].artifacts[{n}].issuer",
                        "Every artifact names its issuer.",
                    )
