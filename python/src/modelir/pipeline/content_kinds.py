"""The one registry of `Part` content kinds: each kind's capability, validation, stream fold and stream unfold.

A kind is a field of `Part.content` in `content.proto`. Everything that depends on the kind of a part asks this
registry instead of matching on `WhichOneof("content")` itself, so a new kind is one entry here plus one decision
per transport (`HttpTransport.part_kinds`; `tests/test_content_kinds.py` fails until every transport has decided).
Whatever is not in the registry is refused: the capability check fails closed for it, validation names it, and
a transport's lowering raises `NotCarriedError` rather than dropping or mis-lowering it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from modelir import errors
from modelir.pipeline.survey import Survey, place
from modelir.v1 import capabilities_pb2, content_pb2, errors_pb2, stream_pb2

# A transport's decision for one kind: `CARRIED`, or the sentence that rejects it (the parts' place is appended).
CARRIED = ""
ASSISTANT = content_pb2.ROLE_ASSISTANT


@dataclass(slots=True)
class PartBuffer:
    """One part being folded from stream deltas: fragments are kept in lists and joined once, at the end."""

    part: content_pb2.Part
    pieces: list[str] = field(default_factory=list)
    summaries: list[list[str]] = field(default_factory=list)


Problems = Iterator[tuple[str, str]]  # (field path, description)


@dataclass(frozen=True, slots=True)
class ContentKind:
    """What the core knows about one kind of part."""

    name: str
    # The capability a conversation holding this kind needs (0: none beyond CHAT).
    capability: capabilities_pb2.Capability.ValueType
    # Problems of one part of this kind in a message with `role`, whatever the model (paths relative to the part).
    problems: Callable[[content_pb2.Part, int], Problems]
    # Fold one stream delta of this kind into its buffer, and finish the buffer into the part (None: the kind
    # never streams, since models do not produce it).
    fold: Callable[[PartBuffer, stream_pb2.PartDelta], None] | None
    finish: Callable[[PartBuffer], None] | None
    # The stream deltas that carry a complete part of this kind, in chunks of at most `size` characters.
    unfold: Callable[[content_pb2.Part, int], list[stream_pb2.PartDelta]] | None


class NotCarriedError(errors.UnsupportedCapabilityError):
    """A transport was asked to lower a kind of part it does not carry (the capability check should have said)."""

    def __init__(self, transport: str, kind: str | None, where: str = "") -> None:
        reason = f"{transport} cannot carry {kind or 'empty'} parts" + (f" ({where})" if where else "")
        super().__init__(errors_pb2.UnsupportedCapabilities(reasons=[reason]), reason)


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _no_problems(part: content_pb2.Part, role: int) -> Problems:
    return iter(())


def _assistant_only(path: str, description: str) -> Callable[[content_pb2.Part, int], Problems]:
    def problems(part: content_pb2.Part, role: int) -> Problems:
        if role != ASSISTANT:
            yield path, description

    return problems


def _tool_result_problems(part: content_pb2.Part, role: int) -> Problems:
    if not part.tool_result.tool_call_id and not part.tool_result.name:
        yield "tool_result", "A tool result names its call id or its tool."


def _fold_text(buffer: PartBuffer, delta: stream_pb2.PartDelta) -> None:
    buffer.pieces.append(delta.text)
    if not buffer.part.HasField("text"):
        buffer.part.text = ""


def _finish_text(buffer: PartBuffer) -> None:
    buffer.part.text = "".join(buffer.pieces)


def _unfold_text(part: content_pb2.Part, size: int) -> list[stream_pb2.PartDelta]:
    return [stream_pb2.PartDelta(text=piece) for piece in _chunks(part.text, size)]


def _fold_reasoning(buffer: PartBuffer, delta: stream_pb2.PartDelta) -> None:
    r = delta.reasoning
    if not buffer.part.HasField("reasoning"):
        buffer.part.reasoning.SetInParent()
    if r.text:
        buffer.pieces.append(r.text)
    if r.HasField("summary_text"):
        while len(buffer.summaries) <= r.summary_index:
            buffer.summaries.append([])
        buffer.summaries[r.summary_index].append(r.summary_text)


def _finish_reasoning(buffer: PartBuffer) -> None:
    buffer.part.reasoning.text = "".join(buffer.pieces)
    buffer.part.reasoning.summary.extend("".join(s) for s in buffer.summaries)


def _unfold_reasoning(part: content_pb2.Part, size: int) -> list[stream_pb2.PartDelta]:
    r = part.reasoning
    deltas = [stream_pb2.PartDelta(reasoning=stream_pb2.ReasoningDelta(text=p)) for p in _chunks(r.text, size)]
    for k, summary in enumerate(r.summary):
        deltas.append(stream_pb2.PartDelta(reasoning=stream_pb2.ReasoningDelta(summary_index=k, summary_text=summary)))
    return deltas


def _fold_tool_call(buffer: PartBuffer, delta: stream_pb2.PartDelta) -> None:
    call, part = delta.tool_call, buffer.part
    if call.id:
        part.tool_call.id = call.id
    if call.name:
        part.tool_call.name = call.name
    if not part.HasField("tool_call"):
        part.tool_call.SetInParent()
    buffer.pieces.append(call.arguments_json)


def _finish_tool_call(buffer: PartBuffer) -> None:
    buffer.part.tool_call.arguments_json = "".join(buffer.pieces)


def _unfold_tool_call(part: content_pb2.Part, size: int) -> list[stream_pb2.PartDelta]:
    call = part.tool_call
    deltas = [
        stream_pb2.PartDelta(tool_call=stream_pb2.ToolCallDelta(arguments_json=p))
        for p in _chunks(call.arguments_json, size)
    ]
    deltas[0].tool_call.id = call.id
    deltas[0].tool_call.name = call.name
    return deltas


def _fold_refusal(buffer: PartBuffer, delta: stream_pb2.PartDelta) -> None:
    buffer.pieces.append(delta.refusal)
    if not buffer.part.HasField("refusal"):
        buffer.part.refusal = ""


def _finish_refusal(buffer: PartBuffer) -> None:
    buffer.part.refusal = "".join(buffer.pieces)


def _unfold_refusal(part: content_pb2.Part, size: int) -> list[stream_pb2.PartDelta]:
    return [stream_pb2.PartDelta(refusal=piece) for piece in _chunks(part.refusal, size)]


def _unfold_whole(part: content_pb2.Part, size: int) -> list[stream_pb2.PartDelta]:
    return [stream_pb2.PartDelta(part=part)]


_TEXT_LIKE = ("text", "refusal")  # kinds whose streamed fragments are joined from `PartBuffer.pieces`


def fold_whole_part(buffer: PartBuffer, whole: content_pb2.Part) -> None:
    """Fold a delta that carries a whole part (`PartDelta.part`): its content replaces the part's; its artifacts,
    citations and provider options are appended, its item id and cache breakpoint set."""
    kind = whole.WhichOneof("content")
    if kind in _TEXT_LIKE:
        buffer.pieces[:] = [getattr(whole, kind)]
        setattr(buffer.part, kind, "")
    elif kind is not None:
        getattr(buffer.part, kind).CopyFrom(getattr(whole, kind))
    buffer.part.artifacts.extend(whole.artifacts)
    buffer.part.citations.extend(whole.citations)
    buffer.part.provider_options.extend(whole.provider_options)
    if whole.item_id:
        buffer.part.item_id = whole.item_id
    if whole.HasField("cache_breakpoint"):
        buffer.part.cache_breakpoint.CopyFrom(whole.cache_breakpoint)


def _fold_blob(buffer: PartBuffer, delta: stream_pb2.PartDelta) -> None:
    buffer.part.blob.CopyFrom(delta.blob)


def _unfold_blob(part: content_pb2.Part, size: int) -> list[stream_pb2.PartDelta]:
    return [stream_pb2.PartDelta(blob=part.blob)]


KINDS: Mapping[str, ContentKind] = {
    kind.name: kind
    for kind in (
        ContentKind(
            "text", capabilities_pb2.CAPABILITY_UNSPECIFIED, _no_problems, _fold_text, _finish_text, _unfold_text
        ),
        ContentKind("blob", capabilities_pb2.CAPABILITY_IMAGE_INPUT, _no_problems, _fold_blob, None, _unfold_blob),
        ContentKind(
            "tool_call",
            capabilities_pb2.CAPABILITY_TOOLS,
            _assistant_only("tool_call", "Only assistant messages hold tool calls."),
            _fold_tool_call,
            _finish_tool_call,
            _unfold_tool_call,
        ),
        ContentKind("tool_result", capabilities_pb2.CAPABILITY_TOOLS, _tool_result_problems, None, None, None),
        ContentKind(
            "reasoning",
            capabilities_pb2.CAPABILITY_REASONING,
            _assistant_only("reasoning", "Only assistant messages hold reasoning."),
            _fold_reasoning,
            _finish_reasoning,
            _unfold_reasoning,
        ),
        ContentKind(
            "refusal",
            capabilities_pb2.CAPABILITY_UNSPECIFIED,
            _assistant_only("refusal", "Only assistant messages hold refusals."),
            _fold_refusal,
            _finish_refusal,
            _unfold_refusal,
        ),
        # Provider-run tools and provider parts stream as whole parts (`PartDelta.part`), never as fragments.
        *(
            ContentKind(
                name,
                capabilities_pb2.CAPABILITY_SERVER_TOOL_REPLAY,
                _assistant_only(name, f"Only assistant messages hold {name} parts."),
                None,
                None,
                _unfold_whole,
            )
            for name in ("server_tool_call", "server_tool_result", "compaction")
        ),
        ContentKind(
            "provider_part", capabilities_pb2.CAPABILITY_SERVER_TOOL_REPLAY, _no_problems, None, None, _unfold_whole
        ),
    )
}


def decide(**decisions: str) -> Mapping[str, str]:
    """A transport's decisions, one per kind by name: `CARRIED`, or the sentence that rejects the kind."""
    return MappingProxyType(decisions)


# The kinds a chat transport lowers from the start: text, media, function tools and reasoning.
_FIRST_KINDS = ("text", "blob", "tool_call", "tool_result", "reasoning")
# The kinds that came with the v1 cut, refused by a transport until it lowers them.
_V1_KINDS = ("refusal", "server_tool_call", "server_tool_result", "provider_part", "compaction")


def chat_kinds(transport: str, **carried: str) -> Mapping[str, str]:
    """The decisions of a chat transport: the first five kinds carried, the rest refused naming the transport,
    unless `carried` decides them (`CARRIED` or another sentence). Every kind is named, so that a kind added to
    the spec is decided consciously for every transport (the test of the registry fails until it is)."""
    decisions = dict.fromkeys(_FIRST_KINDS, CARRIED)
    decisions.update({k: f"{transport} cannot replay {k} parts" for k in _V1_KINDS})
    decisions.update(carried)
    return MappingProxyType(decisions)


def none_carried(transport: str) -> Mapping[str, str]:
    """The decisions of a transport that takes no conversations at all (its manifest lacks CHAT, which says so)."""
    return MappingProxyType(dict.fromkeys(KINDS, f"{transport} takes no conversations"))


def spec_kinds() -> list[str]:
    """The kinds `content.proto` defines, read from the generated descriptor."""
    return [f.name for f in content_pb2.Part.DESCRIPTOR.oneofs_by_name["content"].fields]


def part_problems(part: content_pb2.Part, role: int) -> Problems:
    """Every problem of one part, whatever the model; an unknown or missing kind is one."""
    return kind_problems(part, part.WhichOneof("content"), role)


def kind_problems(part: content_pb2.Part, name: str | None, role: int) -> Problems:
    """`part_problems` of a part whose kind (`WhichOneof("content")`) the caller has read already."""
    if name is None:
        yield "", "Every part has content."
        return
    kind = KINDS.get(name)
    if kind is None:
        yield "", f"The content kind {name!r} is not known to this SDK."
        return
    yield from kind.problems(part, role)


def parts_of(message: content_pb2.Message) -> Iterator[tuple[str, content_pb2.Part]]:
    """Every part of a message with its place, tool results' own content included."""
    for j, part in enumerate(message.parts):
        yield f"parts[{j}]", part
        if part.WhichOneof("content") == "tool_result":
            for k, inner in enumerate(part.tool_result.content):
                yield f"parts[{j}].tool_result.content[{k}]", inner


def rejections(transport: str, decisions: Mapping[str, str], seen: Survey) -> list[str]:
    """The reasons a transport with these per-kind `decisions` refuses the parts of the surveyed conversation
    (fail closed)."""
    reasons = []
    for i, message in enumerate(seen.messages):
        for j, k, _, kind, _ in message.parts:
            if kind is None:
                continue  # validation names it
            decision = decisions.get(kind)
            if decision is None:
                reasons.append(f"{transport} has not decided how to carry {kind} parts ({place(i, j, k)}).")
            elif decision != CARRIED:
                reasons.append(f"{decision} ({place(i, j, k)}).")
    return reasons
