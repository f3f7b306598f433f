"""Every native field accounted for: a provider's answer checked against its wire's declared fields, on every lift.

A lift is an allow-list: whatever it does not read would vanish. So each wire declares, as data
(`native_fields/<wire>.toml`, documented in `transports/README.md`), every member of its JSON at the levels a lift
understands, with one disposition each:

- `read`: the lift reads it into the IR;
- `kept`: the lift keeps it verbatim (a provider part, `Usage.details`, an artifact, a `native_json`);
- `fact`: a native fact with no IR field, kept here: a provider part `<transport>.<path>` (the path below the
  choice) at the end of its choice's message, its JSON verbatim, with its issuer;
- `ignored: <why>`: deliberately left out (a duplicate of something kept, an echo of the request, padding).

Anything else is unread: a `unread_native_fields` warning names its JSON path, and an object, an array or a
string of meaningful size is kept as a provider part too, so that a reader or a replay still sees it. A declared
member with no declared members below it is accounted whole and never walked (a logprob array whose entries a
lift reads completely costs one skip); only the objects a schema descends into are decoded (msgspec leaves the
rest as raw bytes), so accounting a large answer costs a fraction of its lift.

Paths: `a.b` members, `a[]` every element of an array, `*` any member, `(type=x)` the object when its `type` is
`x` (a tagged union: `content[](type=text).text`; at the start, a stream event's own type). A section's
`_include` lists sections whose paths it adds to; `_choice` names the array whose elements are the choices (the
element's `index`, else its position, is the choice; everything else is choice 0).
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import msgspec
import orjson

from modelir.transports.accounting_decoder import OnePass, Plan, one_pass
from modelir.v1 import content_pb2, errors_pb2, response_pb2

UNREAD = "unread_native_fields"
DISPOSITIONS = ("read", "kept", "fact")
# A string shorter than this is named in the warning only (a flag or an id is no content to keep).
_MEANINGFUL_CHARS = 20

_META = ("_include", "_choice")  # a section's own keys: every other key is a path
_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_VALUE = msgspec.json.Decoder()


@dataclass(slots=True)
class Node:
    """One level of a wire's schema."""

    disposition: str | None = None
    keys: dict[str, Node] = field(default_factory=dict)
    any_key: Node | None = None
    variants: dict[str, dict[str, Node]] = field(default_factory=dict)  # tag member -> its value -> node
    items: Node | None = None
    choice: bool = False  # the elements of the `_choice` array

    @property
    def whole(self) -> bool:
        """Declared with no members below it: accounted as a whole, never walked."""
        return self.disposition is not None and not (self.keys or self.any_key or self.variants or self.items)


@dataclass(frozen=True, slots=True)
class Finding:
    """One member a lift did not read: where it is, the choice it belongs to, and its JSON."""

    path: str  # from the answer's (or the event's) root, e.g. `choices[0].message.x_extra`
    below_choice: str  # from the choice's element (the whole path outside a choice): the provider part's type
    choice: int
    raw: bytes
    fact: bool  # declared `fact` (kept without a warning), else unread


_SEGMENT = re.compile(r"\([^)]*\)|\[\]|[^.\[(]+")


def _segments(path: str) -> list[str]:
    """`a[](type=x.y).b` -> ['a', '[]', '(type=x.y)', 'b'] (a tag's value may hold dots)."""
    return _SEGMENT.findall(path)


def _descend(node: Node, segment: str) -> Node:
    if segment == "[]":
        node.items = node.items or Node()
        return node.items
    if segment == "*":
        node.any_key = node.any_key or Node()
        return node.any_key
    if segment.startswith("("):
        tag, _, value = segment[1:-1].partition("=")
        return node.variants.setdefault(tag, {}).setdefault(value, Node())
    return node.keys.setdefault(segment, Node())


@dataclass(slots=True)
class Schema:
    """A section's compiled paths, and the declarations themselves (for the README check and the report)."""

    name: str
    root: Node
    declared: dict[str, str]
    fast: OnePass  # the one-pass decoder of this section (`accounting_decoder`)


def _check(name: str, path: str, disposition: Any) -> None:
    if not isinstance(disposition, str) or not (
        disposition in DISPOSITIONS or (disposition.startswith("ignored: ") and len(disposition) > 12)
    ):
        raise ValueError(f"{name}: {path!r} must be read, kept, fact or 'ignored: <why>', not {disposition!r}")


def _declarations(sections: dict[str, dict[str, Any]], name: str, seen: tuple[str, ...] = ()) -> dict[str, str]:
    if name in seen:
        raise ValueError(f"native field sections include each other: {' -> '.join((*seen, name))}")
    section = sections[name]
    declared: dict[str, str] = {}
    for included in section.get("_include", ()):
        wire = name.split(".")[0]
        target, _, prefix = included.partition("@")  # `section@path`: its paths below `path`
        full = target if "." in target else f"{wire}.{target}"
        for path, disposition in _declarations(sections, full, (*seen, name)).items():
            declared[f"{prefix}.{path}" if prefix else path] = disposition
    for path, disposition in section.items():
        if path in _META:
            continue
        _check(name, path, disposition)
        declared[path] = disposition
    return declared


def _choice_path(sections: dict[str, dict[str, Any]], name: str) -> str:
    section = sections[name]
    if "_choice" in section:
        return str(section["_choice"])
    wire = name.split(".")[0]
    for included in section.get("_include", ()):
        target, _, prefix = included.partition("@")
        if not prefix and (path := _choice_path(sections, target if "." in target else f"{wire}.{target}")):
            return path
    return ""


def compile_section(sections: dict[str, dict[str, Any]], name: str) -> Schema:
    declared = _declarations(sections, name)
    root = Node()
    for path, disposition in declared.items():
        node = root
        for segment in _segments(path):
            node = _descend(node, segment)
        node.disposition = disposition
    if choice := _choice_path(sections, name):
        node = root
        for segment in _segments(choice):
            node = _descend(node, segment)
        node.choice = True
    return Schema(name, root, declared, one_pass(root))


@functools.cache
def all_sections() -> dict[str, dict[str, Any]]:
    """Every wire's sections, `<file stem>.<section>`, from the package's `native_fields/*.toml`."""
    sections: dict[str, dict[str, Any]] = {}
    for entry in resources.files("modelir.transports").joinpath("native_fields").iterdir():
        if entry.name.endswith(".toml"):
            for section, paths in tomllib.loads(entry.read_text()).items():
                sections[f"{entry.name.removesuffix('.toml')}.{section}"] = paths
    return sections


@functools.cache
def schema(name: str) -> Schema | None:
    """The compiled section `name` (`openai_chat.unary`), or None when no wire declares it."""
    sections = all_sections()
    return compile_section(sections, name) if name in sections else None


def declares_plainly(section: Schema, paths: Iterable[str]) -> bool:
    """Whether `section` declares every one of `paths` as read, kept or ignored (never a fact) on untagged
    objects: then an answer whose members are all among `paths` (any value below a declared node with members of
    its own being null) has nothing to account. A lane that checks its events' members against `paths` may skip
    `findings` on that proof (`StreamLifter.plain_lane`)."""
    for path in paths:
        node = section.root
        for segment in _segments(path):
            if node.variants or node.any_key is not None:
                return False
            child = node.items if segment == "[]" else node.keys.get(segment)
            if child is None:
                return False
            node = child
        if node.disposition == "fact" or node.variants:
            return False
    return True


# ---- walking an answer ---------------------------------------------------------------------------------------------


def _first(raw: msgspec.Raw | bytes) -> bytes:
    return bytes(memoryview(raw)[:1])


def _walk(raw: msgspec.Raw | bytes, node: Node, path: list[str], rel: int, choice: int, found: list[Finding]) -> None:
    if node.whole:
        if node.disposition == "fact":
            found.append(_finding(path, rel, choice, raw, fact=True))
        return
    first = _first(raw)
    if first == b"{":
        members = _MEMBERS.decode(raw)
        if node.choice and isinstance(index := _scalar(members.get("index")), int):
            choice = index
        nodes, tagged = [node], ""
        for tag, values in node.variants.items():
            if tag in members:
                value = _scalar(members[tag])
                tagged = f"({tag}={value})"  # in the paths it names: which type of a tagged union this was
                if (variant := values.get(str(value))) is not None:
                    if variant.whole:
                        if variant.disposition == "fact":
                            found.append(_finding([*path, tagged], rel, choice, raw, fact=True))
                        return
                    nodes.append(variant)
        if node.variants and len(nodes) == 1 and not node.keys and node.any_key is None:
            if node.disposition is None:  # a tagged object of a type no one declared (else the node keeps it)
                found.append(_finding([*path, tagged], rel, choice, raw, fact=False))
            return
        if tagged:
            path.append(tagged)
        for key, value in members.items():
            child = next((n.keys[key] for n in nodes if key in n.keys), None)
            if child is None:
                child = next((n.any_key for n in nodes if n.any_key is not None), None)
            path.append(f".{key}" if path else key)
            if child is None:
                found.append(_finding(path, rel, choice, value, fact=False))
            else:
                _walk(value, child, path, rel, choice, found)
            path.pop()
        if tagged:
            path.pop()
    elif first == b"[" and node.items is not None:
        items = node.items
        for i, value in enumerate(_ITEMS.decode(raw)):
            path.append(f"[{i}]")
            _walk(value, items, path, len(path) if items.choice else rel, i if items.choice else choice, found)
            path.pop()


def _scalar(raw: msgspec.Raw | None) -> Any:
    if raw is None or _first(raw) in (b"{", b"["):
        return None
    return _VALUE.decode(raw)


def _finding(path: list[str], rel: int, choice: int, raw: msgspec.Raw | bytes, *, fact: bool) -> Finding:
    below = "".join(path[rel:]).lstrip(".") or "".join(path)
    return Finding("".join(path), below, choice, bytes(raw), fact)


def findings(section: Schema, body: bytes) -> list[Finding]:
    """Every member of `body` the section neither reads, keeps nor ignores, and every declared fact."""
    found: list[Finding] = []
    try:
        try:
            decoded = section.fast.decoder.decode(body)
        except msgspec.ValidationError:  # an undeclared member, or another shape: the walker names what it is
            return walked(section, body)
        if section.fast.plan.visit:
            _visit(decoded, section.fast.plan, [], 0, 0, found)
    except (msgspec.DecodeError, RecursionError):
        return []  # not JSON, or nested past the decoder: the lift has said so already
    return found


def walked(section: Schema, body: bytes) -> list[Finding]:
    """The same as `findings`, by walking the answer level by level (the reference the one pass must equal)."""
    found: list[Finding] = []
    try:
        if section.root.items is None and body.lstrip()[:1] == b"[":  # a batch of answers (sglang): each is one
            for i, answer in enumerate(_ITEMS.decode(body)):
                _walk(answer, section.root, [f"[{i}]"], 1, i, found)
        else:
            _walk(body, section.root, [], 0, 0, found)
    except (msgspec.DecodeError, RecursionError):
        return []
    return found


def _visit(value: Any, plan: Plan, path: list[str], rel: int, choice: int, found: list[Finding]) -> None:
    """The facts and the raw parts of a value the one-pass decoder decoded (only where `plan.visit` says)."""
    if value is None:
        return
    if plan.raw:
        _walk(value, plan.node, path, rel, choice, found)
    elif isinstance(value, msgspec.Raw):  # a whole member: a fact, or the plan would not visit it
        found.append(_finding(path, rel, choice, value, fact=True))
    elif plan.items is not None:
        pairs = value.items() if plan.keyed else enumerate(value)
        below = plan.items
        for key, item in pairs:
            path.append(f".{key}" if plan.keyed else f"[{key}]")
            if below.index_attribute and isinstance(index := _scalar(getattr(item, below.index_attribute)), int):
                _visit(item, below, path, len(path), index, found)
            elif below.node.choice:
                _visit(item, below, path, len(path), key, found)
            else:
                _visit(item, below, path, rel, choice, found)
            path.pop()
    elif plan.variants:
        if (variant := plan.variants[type(value)]).visit:
            _visit(value, variant, path, rel, choice, found)
    else:
        if plan.tagged:
            path.append(plan.tagged)
        for attribute, key, child in plan.members:
            if (member := getattr(value, attribute)) is None:
                continue  # absent: the usual case for a fact, so it costs one attribute read
            path.append(f".{key}" if path else key)
            _visit(member, child, path, rel, choice, found)
            path.pop()
        if plan.tagged:
            path.pop()


# ---- what becomes of them ------------------------------------------------------------------------------------------


def worth_keeping(finding: Finding) -> bool:
    """A fact unless it is empty (null, `{}`, `[]`, `""`); an unread member when it is a non-empty object or array,
    or a string of meaningful size."""
    first = finding.raw[:1]
    if finding.fact:
        return finding.raw.strip() not in (b"null", b"{}", b"[]", b'""')
    if first == b"{":
        return finding.raw.strip() != b"{}"
    if first == b"[":
        return finding.raw.strip() != b"[]"
    if first == b'"':
        text = _VALUE.decode(finding.raw)
        return isinstance(text, str) and len(text) >= _MEANINGFUL_CHARS
    return False


def _part_order(finding: Finding) -> tuple[int, str]:
    """Kept parts go in the order of their path below the choice, whatever order the provider's keys came in,
    so that a unary answer and a stream (where members arrive in other chunks) keep them alike."""
    return finding.choice, finding.below_choice


def provider_part(transport: str, issuer: content_pb2.Issuer, finding: Finding) -> content_pb2.Part:
    """The part that keeps `finding`: `<transport>.<path below its choice>`, its JSON as the provider sent it
    (re-encoded compactly, so that a unary answer and a stream's event give the same text)."""
    native = orjson.dumps(orjson.loads(finding.raw)).decode()
    return content_pb2.Part(
        provider_part=content_pb2.ProviderPart(
            type=f"{transport}.{finding.below_choice}", native_json=native, issuer=issuer
        )
    )


def warning(paths: Iterable[str], *, stream: bool = False) -> errors_pb2.Warning:
    named = ", ".join(dict.fromkeys(paths))
    where = "the stream's events" if stream else "the answer"
    return errors_pb2.Warning(
        code=UNREAD,
        message=f"{UNREAD}: {named} (members of {where} that no lift reads; kept as provider parts where they hold "
        "content)",
    )


def account_response(
    section: Schema | None, body: bytes, response: response_pb2.Response, transport: str, issuer: content_pb2.Issuer
) -> list[Finding]:
    """Account a unary answer: its facts and unread members kept at the end of their choice's message, one warning
    naming the unread paths. Returns the findings (the accounting test reads them)."""
    if section is None:
        return []
    found = findings(section, body)
    if found:
        by_index = {c.index: c for c in response.choices}
        for finding in sorted(found, key=_part_order):
            choice = by_index.get(finding.choice)
            if choice is not None and worth_keeping(finding):
                choice.message.parts.append(provider_part(transport, issuer, finding))
        if unread := [f.path for f in found if not f.fact]:
            response.warnings.append(warning(unread))
    return found


def error_suffix(section: Schema | None, body: bytes) -> str:
    """What an error body holds beyond what its lift read: appended to the error's message, so that it is kept."""
    if section is None:
        return ""
    found = findings(section, body)
    return "".join(f"; {f.path}: {f.raw.decode('utf-8', 'replace')[:2000]}" for f in found)


def account_embed(section: Schema | None, body: bytes) -> list[errors_pb2.Warning]:
    """Account an embedding answer: it has no message to keep a member in, so every member its lift did not read
    (a declared fact too) is named in one `unread_native_fields` warning with its JSON, in the provider's words."""
    if section is None:
        return []
    found = findings(section, body)
    if not found:
        return []
    kept = "; ".join(f"{f.path} = {f.raw.decode('utf-8', 'replace')[:2000]}" for f in found)
    return [
        errors_pb2.Warning(
            code=UNREAD,
            message=f"{UNREAD}: {', '.join(dict.fromkeys(f.path for f in found))} (members of the answer that no lift "
            f"reads, kept here: {kept})",
        )
    ]
