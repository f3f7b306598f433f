"""One walk of a request's conversation: every message and part visited once, and what each check needs noted.

Field validation, the capability check, the transport's content-kind decisions, the foreign-artifact policy and the
media-URI policy all ask about the same messages and parts. Each used to walk them again (six walks of a one-line
chat before it was lowered); now `survey` walks them once and each check reads the `Survey`. The walk reads every
part's kind, artifacts, citations, provider options and cache breakpoint once, and builds no field path: the
checks build a path only for what they report.

The walk also reads which of the request's own fields are set (`present`, one `ListFields`) and which sampling
fields (`sampling`, one more): validation and the capability check skip what a request does not use (a small chat
sets three or four of some thirty fields) without asking each field, and the lowering copies the sampling from it.

A part is noted as `(j, k, part, kind, artifacts)`: `j` its index in its message, `k` its index in the content of
the tool result it sits in (-1 for a message's own part), `kind` its `Part.content` case (None when unset) and
`artifacts` its opaque artifacts (an empty tuple when it has none).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from modelir.v1 import content_pb2, request_pb2

SeenPart = tuple[int, int, content_pb2.Part, str | None, Sequence[content_pb2.OpaqueArtifact]]

_SYSTEM_ROLES = (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER)
# The kinds a provider issues itself (replayed only to their issuer: `artifacts`), and the kinds that can hold a
# `Blob` (`media_policy`; `test_survey.py` fails when the spec adds another place a `Blob` can sit).
PROVIDER_ISSUED = ("server_tool_call", "server_tool_result", "provider_part")
MEDIA_KINDS = ("blob", "server_tool_result")


@dataclass(slots=True)
class SeenMessage:
    """One message: its role, and its parts in order, each followed by the parts of its tool result (if any)."""

    role: int
    parts: list[SeenPart]


@dataclass(slots=True)
class Survey:
    """What one walk of a request's conversation found (empty for a prompt or token input)."""

    messages: list[SeenMessage] = field(default_factory=list)
    # The names of the request's set fields (a oneof's set member by its own name, a repeated field when not empty,
    # a scalar when not its zero), and the sampling fields set, name -> value (the same rule).
    present: frozenset[str] = frozenset()
    sampling: dict[str, Any] = field(default_factory=dict)
    # The request's own `ListFields()`, as read for `present`: the unknown-value check starts from it.
    fields: Sequence[tuple[Any, Any]] = field(default=(), compare=False, repr=False)
    # Any system or developer message; any message with its own token ids; any part with artifacts (nested too).
    system: bool = False
    token_turns: bool = False
    artifacts: bool = False
    cache_breakpoints: bool = False
    # (message index, part index or -1 for the message's own, inner index or -1, the entries) of every non-empty
    # `provider_options` on a message or part, in walk order.
    provider_options: list[tuple[int, int, int, Sequence[content_pb2.ProviderOptions]]] = field(default_factory=list)
    # (message index, part) of a message's own parts that carry artifacts or citations, or were issued by a
    # provider: the only parts the foreign-artifact policy has to look at.
    issued: list[tuple[int, int, content_pb2.Part, str | None]] = field(default_factory=list)
    # (message index, part index, inner index or -1, part, kind) of the parts that can hold a media URI: blobs,
    # provider-run tools' results, and tool results nested in a tool result (which the walk does not enter).
    media: list[tuple[int, int, int, content_pb2.Part, str]] = field(default_factory=list)


def place(i: int, j: int = -1, k: int = -1) -> str:
    """The field path of the message (j = -1) or part noted at (i, j, k), as every check names it."""
    if j < 0:
        return f"conversation.messages[{i}]"
    where = f"conversation.messages[{i}].parts[{j}]"
    return where if k < 0 else f"{where}.tool_result.content[{k}]"


# Field descriptor -> its name, for the request's and the sampling's fields: a descriptor's `name` makes a new
# string on every read. (The dicts keep the descriptors alive, so `ListFields` hands back these very objects; a
# field missing here, which cannot happen with the generated code, is named by its descriptor.)
_REQUEST_NAMES = {f: f.name for f in request_pb2.Request.DESCRIPTOR.fields}
_SAMPLING_NAMES = {f: f.name for f in request_pb2.SamplingParams.DESCRIPTOR.fields}


def survey(request: request_pb2.Request) -> Survey:
    """Walk the request's conversation once (see the module's docstring)."""
    names = _REQUEST_NAMES
    fields = request.ListFields()
    present = frozenset([names.get(descriptor) or descriptor.name for descriptor, _ in fields])
    if "sampling" in present:
        names = _SAMPLING_NAMES
        sampling = {names.get(d) or d.name: value for d, value in request.sampling.ListFields()}
    else:
        sampling = {}
    seen = Survey(present=present, sampling=sampling, fields=fields)
    if "conversation" not in present:
        return seen
    options = seen.provider_options
    for i, message in enumerate(request.conversation.messages):
        role = message.role
        if role in _SYSTEM_ROLES:
            seen.system = True
        if message.token_ids:
            seen.token_turns = True
        if message.provider_options:
            options.append((i, -1, -1, message.provider_options))
        parts: list[SeenPart] = []
        for j, part in enumerate(message.parts):
            kind = part.WhichOneof("content")
            artifacts = part.artifacts or ()
            parts.append((j, -1, part, kind, artifacts))
            if artifacts or kind in PROVIDER_ISSUED or part.citations:
                seen.issued.append((i, j, part, kind))
            _note(seen, i, j, -1, part, kind, artifacts)
            if kind == "tool_result":
                for k, inner in enumerate(part.tool_result.content):
                    inner_kind = inner.WhichOneof("content")
                    inner_artifacts = inner.artifacts or ()
                    parts.append((j, k, inner, inner_kind, inner_artifacts))
                    _note(seen, i, j, k, inner, inner_kind, inner_artifacts)
                    if inner_kind == "tool_result":  # a result in a result: its media are found by `media_policy`
                        seen.media.append((i, j, k, inner, inner_kind))
        seen.messages.append(SeenMessage(role, parts))
    return seen


def _note(
    seen: Survey,
    i: int,
    j: int,
    k: int,
    part: content_pb2.Part,
    kind: str | None,
    artifacts: Sequence[content_pb2.OpaqueArtifact],
) -> None:
    """Note what every part, a message's own or a tool result's, may bring to the checks."""
    if artifacts:
        seen.artifacts = True
    if part.provider_options:
        seen.provider_options.append((i, j, k, part.provider_options))
    if part.HasField("cache_breakpoint"):
        seen.cache_breakpoints = True
    if kind in MEDIA_KINDS:
        seen.media.append((i, j, k, part, kind))
